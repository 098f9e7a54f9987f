"""The search: which positions to evaluate next. The particle swarm is the default searcher."""

from __future__ import annotations

from msopt.search.searcher import SEARCHERS, Searcher, SearcherSetup, SwarmSearcher, Trial, make_searcher
from msopt.search.swarm import SCHEDULES, Swarm, SwarmOptions, swarm_options

__all__ = ["SCHEDULES", "SEARCHERS", "Searcher", "SearcherSetup", "Swarm", "SwarmOptions", "SwarmSearcher",
           "Trial", "make_searcher", "swarm_options"]
