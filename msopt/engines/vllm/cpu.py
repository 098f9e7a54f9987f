"""The CPU build of vLLM as a target (``[cluster] accelerator = "cpu"``): cores and NUMA nodes.

With ``accelerator = "cpu"``, ``[cluster] devices_per_trial`` is the number of CPU cores one trial
holds (Ray reserves them as ``num_cpus``). Two start-up rules then hold on the real path, checked
on the node before a launch, so a refused candidate costs nothing:

- ``cpu.cores``: every CPU worker (data-parallel x tensor-parallel x pipeline-parallel) needs a
  core of the trial's own; vLLM itself does not refuse more (issue 25: data-parallel 8 started eight
  workers on two cores), so this is msopt's rule.
- ``vllm_cpu.numa_nodes``: with ``VLLM_CPU_OMP_THREADS_BIND=auto`` (its default) vLLM binds each
  local CPU worker (tensor-parallel x pipeline-parallel of one data-parallel rank) to a NUMA node
  of its own and asserts that there are enough: vllm-cpu 0.32.0
  ``vllm/utils/ompmultiprocessing.py`` (``_get_autobind_cpu_ids``), the allowed nodes being
  ``Mems_allowed_list`` of ``/proc/self/status`` narrowed by ``CPU_VISIBLE_MEMORY_NODES``
  (``vllm/utils/cpu_resource_utils.py``, ``get_visible_memory_node``); ``VLLM_CPU_SIM_MULTI_NUMA``
  and ``nobind`` or an explicit CPU list turn the check off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from msopt.engines.rules import parse_flags
from msopt.errors import RefusedError
from msopt.launch.render import LaunchSpec

#: Where the rules were read.
VLLM_CPU_VERSION = "vllm-cpu 0.32.0"


def parse_ids(text: str) -> list[int]:
    """``"0-2,4"`` -> ``[0, 1, 2, 4]`` (the kernel's list format)."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part.strip():
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


@dataclass(frozen=True)
class CpuFacts:
    """This node as the CPU build sees it.

    Attributes:
        cores: logical CPUs this process may run on (``sched_getaffinity``).
        numa_nodes: memory nodes it may allocate on (``Mems_allowed_list``).
    """

    cores: int
    numa_nodes: tuple[int, ...]

    @classmethod
    def here(cls) -> CpuFacts:
        """The facts of this process's node."""
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        nodes: list[int] = []
        try:
            with open("/proc/self/status", encoding="utf-8") as f:
                for line in f:
                    if line.startswith("Mems_allowed_list:"):
                        nodes = parse_ids(line.split(":", 1)[1])
        except OSError:
            nodes = [0]
        return cls(cores, tuple(nodes or [0]))


def _size(flags: Mapping[str, str | None], *names: str) -> int:
    for name in names:
        v = flags.get(name)
        if v is not None and v.strip().isdigit():
            return int(v)
    return 1


def workers(spec: LaunchSpec) -> tuple[int, int]:
    """(every CPU worker of the launch, the local workers of one data-parallel rank)."""
    flags = parse_flags(spec.argv)
    tp = _size(flags, "--tensor-parallel-size", "-tp")
    pp = _size(flags, "--pipeline-parallel-size", "-pp")
    dp = _size(flags, "--data-parallel-size", "-dp")
    return dp * tp * pp, tp * pp


def check_cpu_trial(spec: LaunchSpec, cores: int, facts: CpuFacts, environ: Mapping[str, str]) -> None:
    """Refuse a launch of the CPU build that this trial's ``cores`` or the node's NUMA nodes cannot hold.

    Raises:
        RefusedError: a rule is broken (the message names the rule and the fix).
    """
    total, local = workers(spec)
    if total > cores:
        raise RefusedError(f"{total} CPU workers (data-parallel x tensor-parallel x pipeline-parallel) need "
                           f"{total} cores, a trial holds [cluster] devices_per_trial = {cores}; raise it (this "
                           f"node has {facts.cores}) or narrow the parallel fields [rule cpu.cores]", "cpu.cores")
    bind = environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto")
    if spec.engine != "vllm" or bind != "auto" or "VLLM_CPU_SIM_MULTI_NUMA" in environ:
        return
    allowed = list(facts.numa_nodes)
    visible = environ.get("CPU_VISIBLE_MEMORY_NODES", "")
    if visible:
        allowed = [n for n in parse_ids(visible) if n in allowed]
    if len(allowed) < local:
        raise RefusedError(
            f"vllm refuses this configuration at start-up: Not enough allowed NUMA nodes to bind threads of "
            f"{local} local CPUWorkers. Allowed NUMA nodes are {allowed}. Please try to bind threads manually "
            f"or decrease DP/TP/PP. [rule vllm_cpu.numa_nodes, vllm/utils/ompmultiprocessing.py "
            f"(_get_autobind_cpu_ids), {VLLM_CPU_VERSION}]", "vllm_cpu.numa_nodes")
