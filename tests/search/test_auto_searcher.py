"""``[search] searcher = "auto"`` (the default, issue 38 item 2): ``msopt optimize`` takes the
swarm where a prior seeds it and Optuna's TPE where no prior can be built, at every launch budget; TPE
without a prior runs one lane per worker and the unguided budget plan."""

from __future__ import annotations

import pytest

from msopt.config import load_settings, split
from msopt.errors import ConfigError
from msopt.run.driver import Driver, optimize
from msopt.run.events import Checkpoint
from msopt.run.pool import InProcessPool
from msopt.run.validate import validate
from msopt.search import SEARCHERS, check_searcher, make_searcher, resolve_searcher
from msopt.space import SearchSpace
from tests.search.test_searcher import KNOBS, score
from tests.support.driver_helpers import FormulaEvaluator
from tests.support.fields_toml import TP_PP_DP

pytest.importorskip("optuna")

SETTINGS = """
n_particles = 4
seed = 3
iters = 3
{search}
[data_storage]
pso_top_k = 2
"""


class _Searchers:
    """The searcher names of the run's checkpoints."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def on_event(self, event: object) -> None:
        if isinstance(event, Checkpoint):
            self.names.append(event.state["searcher"])


def _settings(write_toml, search=""):
    return load_settings(str(write_toml(SETTINGS.format(search=search) + TP_PP_DP + KNOBS)), environ={})


def test_auto_resolves_to_the_portfolio_with_a_prior_and_tpe_without_at_every_budget():
    for launches in (0, 6, 10, 20, 50):
        assert resolve_searcher("auto", True, launches) == "portfolio"  # the swarm and TPE (issue 49)
        assert resolve_searcher("auto", False, launches) == ("tpe" if launches else "swarm")  # 0: no budget
    assert resolve_searcher("swarm", False, 6) == "swarm" and resolve_searcher("tpe", True) == "tpe"


def test_auto_is_the_default_a_registered_name_and_no_searcher_of_its_own(write_toml):
    settings = _settings(write_toml)
    assert settings.config.run.searcher == "auto"
    assert "auto" in SEARCHERS.names()
    check_searcher("auto")  # optuna is installed: TPE can run
    validate(*split(settings))
    with pytest.raises(ValueError, match="resolve_searcher"):
        make_searcher("auto", None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="valid: auto, portfolio, swarm, tpe"):
        check_searcher("nope")


@pytest.mark.parametrize("search, launches, expected", [
    ("", 8, "tpe"), ("", 0, "swarm"), ("", 20, "tpe"),
    ('[search]\nsearcher = "swarm"', 8, "swarm"), ('[search]\nsearcher = "tpe"', 0, "tpe")])
def test_optimize_without_a_prior_takes_tpe_for_auto(write_toml, search, launches, expected):
    settings = _settings(write_toml, search)
    if launches:
        settings = settings.replace(max_launches=launches)
    space = SearchSpace.from_settings(settings)
    seen = _Searchers()
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: FormulaEvaluator(space, score))
    try:
        outcome = optimize(validate(*split(settings)), pool, callbacks=[seen], guide=None)
    finally:
        pool.close()
    assert outcome.best is not None
    assert seen.names and set(seen.names) == {expected}
    if launches:
        assert outcome.launches <= launches
    else:  # no budget: the baseline, n_particles x iters searches and the re-measurements
        assert outcome.evaluations == 1 + 4 * 3 + 2 + 1


def test_tpe_without_a_prior_runs_one_lane_per_worker_and_spends_the_budget_on_the_search(write_toml):
    """One worker: one trial at a time, each proposed from every result before it; at 10 launches
    the unguided plan keeps none for re-measurement, so every launch is the search's."""
    settings = _settings(write_toml).replace(max_launches=10)
    space = SearchSpace.from_settings(settings)
    for size, lanes in ((1, 1), (3, 3), (8, 4)):  # at most n_particles (4)
        pool = InProcessPool(settings.config, size=size, evaluator_factory=lambda k: FormulaEvaluator(space, score))
        try:
            assert Driver(settings.config, pool, searcher="tpe").searcher.lanes == lanes
            assert Driver(settings.config, pool, searcher="swarm").searcher.lanes == 4
        finally:
            pool.close()
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: FormulaEvaluator(space, score))
    try:
        outcome = optimize(validate(*split(settings)), pool, guide=None)
    finally:
        pool.close()
    assert outcome.launches == 10
    assert {r.phase for r in outcome.results} <= {"baseline", "search"}  # nothing re-measured
    assert {r.particle for r in outcome.results if r.phase == "search"} == {0}


def test_a_driver_built_directly_takes_the_swarm_for_auto(write_toml):
    settings = _settings(write_toml)
    space = SearchSpace.from_settings(settings)
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: FormulaEvaluator(space, score))
    try:
        assert Driver(settings.config, pool).searcher.name == "swarm"
        assert Driver(settings.config, pool, searcher="tpe").searcher.name == "tpe"
    finally:
        pool.close()
