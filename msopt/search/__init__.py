"""The search: which positions to evaluate next. The particle swarm is the default searcher."""

from __future__ import annotations

from msopt.search.swarm import SCHEDULES, Swarm, SwarmOptions, swarm_options

__all__ = ["SCHEDULES", "Swarm", "SwarmOptions", "swarm_options"]
