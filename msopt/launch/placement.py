"""How a trial's devices split over nodes: the one rule the Ray pool, the simulated path and an exported
launch share.

It reads counts, not the configuration or the simulator's catalog: the caller passes the devices a
trial holds and the devices of one node, from where the run knows them (``[cluster] devices_per_node``,
the Ray cluster's nodes, or a simulated run's hardware).
"""

from __future__ import annotations

from collections.abc import Sequence

from msopt.errors import ConfigError
from msopt.launch.render import TrialNode


def split_trial(k: int, per_node: int | None) -> tuple[int, int]:
    """(nodes, devices per node) of a trial of ``k`` devices on nodes of ``per_node`` devices.

    A trial that fits one node takes one; a bigger one is split evenly over the fewest nodes.

    Raises:
        ConfigError: the devices cannot be split evenly over whole nodes.
    """
    if not per_node or k <= per_node:
        return 1, k
    n = -(-k // per_node)
    if k % n:
        raise ConfigError(f"[cluster] devices_per_trial {k} does not split evenly over {n} nodes of {per_node} "
                          "devices; use a multiple of the per-node share (or set [cluster] devices_per_node)")
    return n, k // n


def virtual_nodes(k: int, per_node: int | None) -> tuple[TrialNode, ...]:
    """The nodes a simulated trial of ``k`` devices spans without a cluster (``msopt simulate``,
    ``--no-ray``) on nodes of ``per_node`` devices: empty for a one-node trial; else ``n`` local nodes
    with devices ``0..per-1`` each.

    ``k`` is 0 unless ``[cluster] devices_per_trial`` is set: only an explicit one spans nodes.
    """
    if not k:
        return ()
    n, per = split_trial(k, per_node)
    if n == 1:
        return ()
    return tuple(TrialNode(i, "127.0.0.1", tuple(str(d) for d in range(per)), f"simnode{i}") for i in range(n))


def planned_nodes(k: int, per_node: int | None, addresses: Sequence[str] | None = None) -> tuple[TrialNode, ...]:
    """The nodes one trial of ``k`` devices spans on nodes of ``per_node`` devices (for an exported
    launch): empty for one node, or where either count is unknown (0 or None).

    Node ``r``'s address is ``addresses[r]`` when there is one per node, else ``NODE<r>_IP``.
    """
    if not k or not per_node:
        return ()
    n, per = split_trial(k, per_node)
    if n == 1:
        return ()
    names = list(addresses) if addresses and len(addresses) == n else [f"NODE{r}_IP" for r in range(n)]
    return tuple(TrialNode(r, names[r], tuple(str(d) for d in range(per))) for r in range(n))
