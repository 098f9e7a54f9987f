"""Engine adapters: render a candidate's values into the launch of one server.

Built-in engines: ``vllm``, ``mindie``, ``sglang``; plugins add more through the
``msopt.engines`` entry-point group.
"""

from __future__ import annotations

from msopt.engines import mindie as _mindie  # noqa: F401  (registers "mindie")
from msopt.engines import sglang as _sglang  # noqa: F401  (registers "sglang")
from msopt.engines import vllm as _vllm  # noqa: F401  (registers "vllm")
from msopt.engines.base import ENGINES, EngineAdapter
from msopt.launch.render import Candidate, LaunchSpec


def get_engine(name: str) -> EngineAdapter:
    """An instance of the engine registered as ``name`` (an unknown name lists the valid ones)."""
    return ENGINES.get(name)()


__all__ = ["ENGINES", "Candidate", "EngineAdapter", "LaunchSpec", "get_engine"]
