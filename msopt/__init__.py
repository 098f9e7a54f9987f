"""msopt: Ray-parallel particle-swarm tuning of LLM serving parameters."""

from __future__ import annotations

from msopt.errors import ConfigError, DecodeError, EvaluationError, MsoptError, SimulationError

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DecodeError",
    "EvaluationError",
    "MsoptError",
    "SimulationError",
    "__version__",
]
