"""MindIE, registered as the engine ``mindie``: its adapter is :class:`~msopt.engines.mindie.adapter.MindieAdapter`."""

from __future__ import annotations

from msopt.engines.base import ENGINES
from msopt.engines.mindie.adapter import MindieAdapter

ENGINES.register("mindie", MindieAdapter)

__all__ = ["MindieAdapter"]
