"""How a trial's devices split over nodes: the one rule the Ray pool and the simulated path share."""

from __future__ import annotations

from msopt.config import Config
from msopt.errors import ConfigError, MsoptError
from msopt.launch.render import TrialNode
from msopt.sim.catalog_load import load_hardware


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


def simulated_devices_per_node(config: Config) -> int | None:
    """``[cluster] devices_per_node``, else the simulated hardware's ``devices_per_node``."""
    configured = config.cluster.devices_per_node
    if configured:
        return configured
    sim = config.simulator.table
    try:
        dirs = sim.get("catalog_dirs", ())
        return load_hardware(str(sim.get("hardware", "")), (dirs,) if isinstance(dirs, str) else tuple(dirs)
                             ).devices_per_node
    except MsoptError:
        return None


def virtual_nodes(config: Config) -> tuple[TrialNode, ...]:
    """The nodes a simulated trial spans without a cluster (``msopt simulate``, ``--no-ray``): empty
    for a one-node trial; else ``n`` local nodes with devices ``0..per-1`` each.

    Only an explicit ``[cluster] devices_per_trial`` spans nodes here.
    """
    k = config.cluster.trial.devices if config.cluster.trial.explicit else 0
    if not k:
        return ()
    n, per = split_trial(k, simulated_devices_per_node(config))
    if n == 1:
        return ()
    return tuple(TrialNode(i, "127.0.0.1", tuple(str(d) for d in range(per)), f"simnode{i}") for i in range(n))


def planned_nodes(config: Config, addresses: list[str] | None = None) -> tuple[TrialNode, ...]:
    """The nodes one trial of this configuration spans (for an exported launch): empty for one node.

    The split comes from ``[cluster] devices_per_trial`` and ``devices_per_node`` (a simulated run:
    the hardware's); node ``r``'s address is ``addresses[r]`` when given, else ``NODE<r>_IP``.
    """
    k = config.cluster.trial.devices if config.cluster.trial.explicit else 0
    per_node = config.cluster.devices_per_node
    if not per_node and config.run.simulate:
        per_node = simulated_devices_per_node(config)
    if not k or not per_node:
        return ()
    n, per = split_trial(k, per_node)
    if n == 1:
        return ()
    names = addresses if addresses and len(addresses) == n else [f"NODE{r}_IP" for r in range(n)]
    return tuple(TrialNode(r, names[r], tuple(str(d) for d in range(per))) for r in range(n))
