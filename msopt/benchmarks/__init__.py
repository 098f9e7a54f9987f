"""Benchmark adapters: ``vllm_benchmark``, ``ais_bench`` and msopt's ``builtin`` load generator.

Plugins add more through the ``msopt.benchmarks`` entry-point group.
"""

from __future__ import annotations

from msopt.benchmarks import ais_bench as _ais_bench  # noqa: F401  (registers "ais_bench")
from msopt.benchmarks import builtin as _builtin  # noqa: F401  (registers "builtin")
from msopt.benchmarks import vllm_benchmark as _vllm_benchmark  # noqa: F401  (registers "vllm_benchmark")
from msopt.benchmarks.base import BENCHMARKS, DEFAULT_BENCHMARK, BenchmarkAdapter, resolve_load


def get_benchmark(name: str) -> BenchmarkAdapter:
    """An instance of the benchmark registered as ``name`` (an unknown name lists the valid ones)."""
    return BENCHMARKS.get(name)()


__all__ = ["BENCHMARKS", "DEFAULT_BENCHMARK", "BenchmarkAdapter", "get_benchmark", "resolve_load"]
