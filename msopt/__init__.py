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

from msopt.config import Settings, load_settings  # noqa: E402
from msopt.space import DecodeContext, Decoded, SearchSpace  # noqa: E402

__all__ += ["Decoded", "DecodeContext", "SearchSpace", "Settings", "load_settings"]
