"""The embedded serving simulator: stands in for server + benchmark where no accelerator is at hand.

It reads the knobs an engine adapter rendered (:func:`knobs_from_launch`), prices continuous
batching step by step on a hardware and model catalog, and returns the benchmark's metrics, or
the failure a real server would show. It does not import Ray.
"""

from __future__ import annotations

from msopt.sim.catalog_load import list_hardware, list_models, load_hardware, load_model
from msopt.sim.catalog_types import Hardware, ModelSpec
from msopt.sim.knobs import EngineKnobs, benchmark_overrides
from msopt.sim.personality import knobs_from_launch
from msopt.sim.result import SimResult
from msopt.sim.simulator import simulate, simulate_launch
from msopt.sim.workload import Workload, workload_from_mapping

__all__ = [
    "EngineKnobs",
    "Hardware",
    "ModelSpec",
    "SimResult",
    "Workload",
    "benchmark_overrides",
    "knobs_from_launch",
    "list_hardware",
    "list_models",
    "load_hardware",
    "load_model",
    "simulate",
    "simulate_launch",
    "workload_from_mapping",
]
