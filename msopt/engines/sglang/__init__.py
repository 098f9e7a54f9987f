"""SGLang, registered as the engine ``sglang``: its adapter is :class:`~msopt.engines.sglang.adapter.SglangAdapter`."""

from __future__ import annotations

from msopt.engines.base import ENGINES
from msopt.engines.sglang.adapter import SglangAdapter

ENGINES.register("sglang", SglangAdapter)

__all__ = ["SglangAdapter"]
