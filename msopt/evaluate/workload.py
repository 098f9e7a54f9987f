"""The run's workload: the prompts an evaluation sends and the load it runs at, as the benchmark
(or, simulated, ``[simulator.workload]``) reports them: built once per run by
:func:`msopt.run.validate.validate` (``Validated.workload``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from msopt.benchmarks import BENCHMARKS, get_benchmark
from msopt.benchmarks.base import LOAD_KEYS
from msopt.config import Config
from msopt.sim.workload import workload_from_mapping
from msopt.workload.replay import describe_replay
from msopt.workload.resolved import ResolvedWorkload
from msopt.workload.table import workload_settings

__all__ = ["WorkloadConfig", "benchmark_table", "configured_load", "configured_num_prompts", "replay_lines",
           "resolved_workload", "search_num_prompts", "simulator_workload", "workload_config"]


@dataclass(frozen=True)
class WorkloadConfig:
    """What one evaluation sends.

    Attributes:
        full_prompts: the full workload's num_prompts (re-measurements, capacity probes; every
            mean is weighted by it); None when the benchmark tool decides.
        search_prompts: num_prompts during the search: ``full_prompts`` capped by ``sample_size``.
        load: the configured load by :data:`~msopt.benchmarks.base.LOAD_KEYS` key, as written.
    """

    full_prompts: int | None
    search_prompts: int | None
    load: Mapping[str, Any] = field(default_factory=dict)


def simulator_workload(config: Config, workload: ResolvedWorkload | None = None) -> dict[str, Any]:
    """``[simulator.workload]`` as the simulator runs it: the run's ``[workload]`` (``workload``, resolved once;
    None: resolved here) over the section as written
    (:meth:`~msopt.workload.resolved.ResolvedWorkload.simulator_workload`)."""
    wl = workload if workload is not None else resolved_workload(config)
    return wl.simulator_workload(config.simulator.sub("workload"), config.run.benchmark)


def benchmark_table(config: Config, workload: ResolvedWorkload | None = None) -> Mapping[str, Any]:
    """The run's ``[<benchmark>]`` section as its adapter reads it: the run's ``[workload]`` (``workload``, resolved
    once; None: resolved here) over the section as written
    (:meth:`~msopt.workload.resolved.ResolvedWorkload.benchmark_section`)."""
    wl = workload if workload is not None else resolved_workload(config)
    return wl.benchmark_section(config.run.benchmark, config.benchmark.table)


def configured_num_prompts(config: Config, workload: ResolvedWorkload | None = None) -> int | None:
    """The full workload's num_prompts, the one definition the driver, the leaderboard, the
    records and the report use: simulated, the simulator's (:func:`simulator_workload`; ``workload``: the
    run's, resolved once); else what the
    benchmark adapter says its own section sends (:meth:`BenchmarkAdapter.num_prompts`: builtin's
    ``[builtin]``, vllm_benchmark's and ais_bench's ``[<benchmark>.command]``). None: unknown."""
    if config.run.simulate:
        return workload_from_mapping(simulator_workload(config, workload)).num_prompts
    return get_benchmark(config.run.benchmark).num_prompts(benchmark_table(config, workload))


def search_num_prompts(config: Config, workload: ResolvedWorkload | None = None) -> int | None:
    """num_prompts during the search: the full workload's, capped by ``sample_size``."""
    return _capped(configured_num_prompts(config, workload), config.run.sample_size)


def _capped(full: int | None, cap: int) -> int | None:
    if full is None:
        return int(cap) if cap else None
    return min(full, int(cap)) if cap else full


def configured_load(config: Config, workload: ResolvedWorkload | None = None) -> dict[str, Any]:
    """The configured workload's load: the simulator's workload (:func:`simulator_workload`), else what the
    benchmark reports of its own section (:meth:`BenchmarkAdapter.configured_load`); empty for a benchmark
    name not registered (validation names it)."""
    if config.run.simulate:
        wl = simulator_workload(config, workload)
        return {k: wl[k] for k in LOAD_KEYS if k in wl}
    name = config.run.benchmark
    if name not in BENCHMARKS:
        return {}
    return get_benchmark(name).configured_load(benchmark_table(config, workload))


def replay_lines(config: Config, workload: ResolvedWorkload | None = None) -> list[str]:
    """With ``[workload] trace``: what the run replays, for its first lines. The search (``sample_size``
    requests: windows across the whole trace, :func:`msopt.workload.replay.describe_replay`), then the
    re-measurements and the capacity probes (the whole window the user gave); a real run whose window
    lasts longer than ``particles_time_out`` is told that its re-measurements would time out. [] without a
    trace. ``workload``: the run's, resolved once (None: resolved here)."""
    workload = workload if workload is not None else resolved_workload(config)
    window = workload.window
    if window is None:
        return []
    full, search = configured_num_prompts(config, workload), search_num_prompts(config, workload)
    m = len(window.requests)
    lines = ["replay: " + line for line in describe_replay(window, search or m)]
    arr = window.arrival_array()
    span = float(arr[-1] - arr[0])
    lines.append(f"replay: the re-measurements and the capacity probes, which decide the recommendation, replay "
                 f"the whole window: {full or m:,} requests over {span:,.0f} s")
    timeout = config.run.particles_time_out
    if not config.run.simulate and timeout and span >= timeout:
        lines.append(f"warning: the whole window lasts {span:,.0f} s, at least particles_time_out ({timeout:g} s): "
                     "its re-measurements would time out; set [workload] window to the largest part that fits, or "
                     "raise particles_time_out")
    return lines


def resolved_workload(config: Config) -> ResolvedWorkload:
    """``config``'s ``[workload]`` resolved here (a trace read once), for a part the run did not hand the one
    it resolved (:attr:`msopt.evaluate.Parsed.workload`, ``Validated.resolved``)."""
    return ResolvedWorkload.resolve(workload_settings(config.workload.table, config.workload.where()))


def workload_config(config: Config, workload: ResolvedWorkload | None = None) -> WorkloadConfig:
    """The run's :class:`WorkloadConfig` (after validation: the benchmark is a registered one; ``workload``: the
    run's, resolved once)."""
    workload = workload if workload is not None else resolved_workload(config)  # once for both below
    full = configured_num_prompts(config, workload)
    return WorkloadConfig(full, _capped(full, config.run.sample_size), configured_load(config, workload))
