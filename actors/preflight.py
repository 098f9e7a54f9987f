"""``msopt preflight --address``: the checks of :mod:`msopt.run.preflight` as one Ray task per node."""

from __future__ import annotations

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from msopt.config import Config
from msopt.run.preflight import Check, hardware_probe, node_checks

#: Seconds to wait for every node's checks (a version query may import an engine).
NODE_TIMEOUT = 600.0


@ray.remote(num_cpus=0, max_retries=0)
def _node_checks(config: Config, devices: int | None, full: bool, node: str) -> list[Check]:
    return node_checks(config, devices=devices, full=full, node=node)


def cluster_checks(config: Config, *, full: bool = True) -> list[Check]:
    """Run :func:`~msopt.run.preflight.node_checks` on every alive node of the connected cluster.

    A node's accelerator count is what Ray offers there (its ``NPU``/``GPU`` resource), which is
    what the trials' placement groups will get.
    """
    key = config.cluster.accelerator_key
    refs = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        devices = int(node.get("Resources", {}).get(key, 0)) if key else None
        name = str(node.get("NodeManagerAddress", node["NodeID"][:8]))
        strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        refs.append(_node_checks.options(scheduling_strategy=strategy).remote(config, devices, full, name))
    if not refs:
        return [Check("cluster", False, "no alive node in the Ray cluster")]
    out: list[Check] = []
    for result in ray.get(refs, timeout=NODE_TIMEOUT):
        out.extend(result)
    return out


@ray.remote(num_cpus=0, max_retries=0)
def _hardware_probe() -> dict[str, str]:
    return hardware_probe()


def cluster_hardware() -> list[tuple[str, dict[str, str]]]:
    """:func:`~msopt.run.preflight.hardware_probe` on every alive node of the connected cluster, as
    ``(node address, probe)`` (one Ray task per node, pinned there as :func:`cluster_checks` does)."""
    refs, names = [], []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        refs.append(_hardware_probe.options(scheduling_strategy=strategy).remote())
        names.append(str(node.get("NodeManagerAddress", node["NodeID"][:8])))
    return list(zip(names, ray.get(refs, timeout=NODE_TIMEOUT))) if refs else []
