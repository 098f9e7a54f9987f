"""The search: which positions to evaluate next. The particle swarm and Optuna's TPE; the default
``[search] searcher = "auto"`` takes both, their lanes split by the trust in the prior (the
portfolio), where a prior seeds the swarm, and TPE where there is none."""

from __future__ import annotations

from msopt.search.constraint import NO_CONSTRAINT, REFUSED_REDRAWS, Constraint, Screen, SearchDimension
from msopt.search.options import SwarmOptions, swarm_options
from msopt.search.portfolio import PortfolioSearcher  # registers "portfolio" (after "tpe": it holds one)
from msopt.search.schedules import SCHEDULES
from msopt.search.searcher import (
    SEARCHERS,
    Searcher,
    SearcherSetup,
    SwarmSearcher,
    Trial,
    check_searcher,
    make_searcher,
    resolve_searcher,
    search_dimensions,
)
from msopt.search.swarm import Swarm
from msopt.search.tpe import TPESearcher  # registers "tpe" in SEARCHERS

__all__ = ["NO_CONSTRAINT", "REFUSED_REDRAWS", "SCHEDULES", "SEARCHERS", "Constraint", "PortfolioSearcher", "Screen",
           "SearchDimension", "Searcher", "SearcherSetup", "Swarm", "SwarmOptions", "SwarmSearcher", "TPESearcher",
           "Trial", "check_searcher", "make_searcher", "resolve_searcher", "search_dimensions", "swarm_options"]
