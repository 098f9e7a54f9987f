"""vLLM, registered as the engine ``vllm``: its adapter is :class:`~msopt.engines.vllm.adapter.VllmAdapter`."""

from __future__ import annotations

from msopt.engines.base import ENGINES
from msopt.engines.vllm.adapter import VllmAdapter

ENGINES.register("vllm", VllmAdapter)

__all__ = ["VllmAdapter"]
