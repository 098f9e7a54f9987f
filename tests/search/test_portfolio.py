"""The portfolio (``searcher = "auto"`` with a prior, issue 49): the prior-led swarm and TPE over
the same lanes, split by the trust, both told every result, deterministic for a seed."""

from __future__ import annotations

import numpy as np
import pytest

from msopt.search import Constraint, PortfolioSearcher, Screen, SearcherSetup, resolve_searcher, search_dimensions
from msopt.search.options import SwarmOptions
from msopt.search.portfolio import explore_lanes
from msopt.space import DecodeContext, SearchSpace
from tests.search.test_tpe import _settings

pytest.importorskip("optuna")

N = 10


class _Trust:
    """A trust the test sets (the guide's judgement, as the screen reads it)."""

    def __init__(self) -> None:
        self.value = 1.0

    def __call__(self) -> float:
        return self.value


def _searcher(write_toml, trust, seed=0, mode="sync", starts=None, launches=None):
    space = SearchSpace.from_settings(_settings(write_toml))
    screen = Screen(2, 0.25, lambda xs: np.zeros(len(xs)), trust=trust)
    setup = SearcherSetup(search_dimensions(space), seed, N, mode, starts, lambda i, c: DecodeContext(i, N, c),
                          constraint=Constraint(screen=screen), options=SwarmOptions(N, 1, seed=seed),
                          launches=launches)
    return PortfolioSearcher(setup)


def _fitness(x):
    return float(np.sum((np.asarray(x) - 0.3) ** 2))


def _generation(s):
    trials = s.ask()
    assert len(trials) == N and s.ask() == []  # sync: one generation at a time
    for t in trials:
        s.tell(t.id, _fitness(t.position), t.position)
    return trials


def test_auto_with_a_prior_is_the_portfolio():
    assert resolve_searcher("auto", True, 50) == "portfolio"
    assert resolve_searcher("auto", True, 0) == "portfolio"
    assert resolve_searcher("swarm", True, 50) == "swarm" and resolve_searcher("tpe", True, 50) == "tpe"


@pytest.mark.parametrize(("trust", "tpe_lanes"), [(1.0, {0}), (0.5, {0}), (0.0, {N // 2}), (0.25, {2, 3}),
                                                  (0.35, {1, 2})])
def test_the_split_follows_the_trust(write_toml, trust, tpe_lanes):
    """TPE takes lanes × MODEL_SHARE × (1 - trust / TRUST_FULL) of each generation, rounded by the RNG."""
    t = _Trust()
    s = _searcher(write_toml, t)
    _generation(s)  # the starts: the swarm's
    assert s.split == [(1.0, ())]
    t.value = trust
    for _ in range(4):
        _generation(s)
    assert {len(lanes) for _, lanes in s.split[1:]} <= tpe_lanes
    assert all(tr == trust for tr, _ in s.split[1:])
    # TPE proposed just the lanes the split gave it; its study holds every result, its own and the swarm's
    for i in range(N):
        assert s.tpe.lane_count(i) == sum(i in lanes for _, lanes in s.split)
    trials = s.tpe.study.trials
    assert len(trials) == 5 * N and all(tr.state.is_finished() for tr in trials)


def test_the_first_generation_is_the_swarm_s_and_lost_trust_is_not_won_back(write_toml):
    t = _Trust()
    t.value = 0.0
    s = _searcher(write_toml, t)
    _generation(s)
    assert s.split == [(0.0, ())]  # the baseline and the prior's picks start the swarm, whatever the trust
    t.value = 0.9  # the prior ranks the poor configurations the search measured next rightly
    _generation(s)
    assert s.split[-1][0] == 0.0 and len(s.split[-1][1]) == N // 2


def test_explore_lanes_only_where_the_budget_pays_fewer_than_two_generations():
    """Every third lane of the part of the first generation a budget pays (6 launches at 10 lanes:
    lane 3; 7: lanes 3 and 6; 17: lanes 3, 6 and 9); none from two generations or without a budget."""
    assert explore_lanes(10, 6) == (3,) and explore_lanes(10, 7) == (3, 6) and explore_lanes(10, 9) == (3, 6)
    assert explore_lanes(10, 10) == (3, 6, 9) and explore_lanes(10, 19) == (3, 6, 9)
    assert explore_lanes(10, 3) == () and explore_lanes(10, 20) == () and explore_lanes(10, None) == ()


@pytest.mark.parametrize(("launches", "explore"), [(7, (3, 6)), (None, ()), (17, (3, 6, 9)), (20, ())])
def test_a_cut_first_generation_is_part_picks_part_exploration(write_toml, launches, explore):
    """Where the budget pays 7 of the 10 lanes: the baseline, picks 1-2, a TPE draw, picks 3-4, a
    TPE draw (17 of a generation and a half: lane 9 too); the picks keep their order past the explore
    lanes. From two generations, or without a budget, the starts in their lanes."""
    t = _Trust()
    space = SearchSpace.from_settings(_settings(write_toml))
    low, high = space.bounds
    starts = np.array([low + (high - low) * (0.05 + 0.09 * k) for k in range(N)])
    s = _searcher(write_toml, t, starts=starts, launches=launches)
    assert s.explore == explore
    trials = s.ask()
    assert s.split == [(1.0, ())]  # the explore lanes are not the trust's split
    picks = [tr for tr in trials if tr.lane not in explore]
    for k, tr in enumerate(picks):  # lane 0 the baseline, then the picks in order
        assert np.array_equal(tr.position, starts[k]), (tr.lane, k)
    for tr in trials:
        if tr.lane in explore:
            assert not any(np.array_equal(tr.position, row) for row in starts)
    assert sum(s.tpe.lane_count(i) for i in range(N)) == 0  # not told yet
    for tr in trials:
        s.tell(tr.id, _fitness(tr.position), tr.position)
    assert [s.tpe.lane_count(i) for i in explore] == [1] * len(explore)
    assert sum(s.tpe.lane_count(i) for i in range(N)) == len(explore)


def test_a_cut_first_generation_with_fewer_picks_than_its_explore_lanes_starts(write_toml):
    """The baseline and one pick, 7 of 10 lanes paid: the pick keeps lane 1, lanes 3 and 6 are TPE's
    draws and the lanes without a start begin at random (a start list with a gap was a KeyError)."""
    space = SearchSpace.from_settings(_settings(write_toml))
    low, high = space.bounds
    starts = np.array([low + (high - low) * 0.05, low + (high - low) * 0.14])
    s = _searcher(write_toml, _Trust(), starts=starts, launches=7)
    assert s.explore == (3, 6)
    trials = {tr.lane: tr for tr in s.ask()}
    assert np.array_equal(trials[0].position, starts[0]) and np.array_equal(trials[1].position, starts[1])
    assert len(trials) == N


def test_tpe_takes_the_particles_of_the_worst_personal_bests(write_toml):
    t = _Trust()
    s = _searcher(write_toml, t)
    _generation(s)
    t.value = 0.2  # 3 of 10 lanes: 10 × 0.5 × (1 - 0.2 / 0.5)
    pbest = s.swarm.personal_best_fitness
    trials = s.ask()
    swarm = s.swarm.positions
    assert list(s.split[-1][1]) == sorted(np.argsort(-pbest, kind="stable")[:3].tolist())
    for tr in trials:  # the others are the swarm's particles where they are
        assert (tr.lane in s.split[-1][1]) != np.array_equal(tr.position, swarm[tr.lane])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_result_reaches_both_searchers(write_toml, mode):
    """The swarm is told each lane's evaluated position (a lane TPE proposed moves its particle
    there); TPE gets every result, its own trials' and the swarm's."""
    t = _Trust()
    s = _searcher(write_toml, t, mode=mode)
    told = 0
    for g in range(5):
        t.value = [1.0, 0.4, 0.2, 0.0, 1.0][g]
        for tr in s.ask():
            s.tell(tr.id, _fitness(tr.position), tr.position)
            told += 1
            if mode == "async":
                break  # one at a time: the others stay in flight
    assert s.swarm.evaluations == told == sum(s.lane_count(i) for i in range(N))
    assert len([tr for tr in s.tpe.study.trials if tr.state.is_finished()]) == told
    assert s.best_fitness == pytest.approx(min(tr.value for tr in s.tpe.study.trials if tr.value is not None))


def test_the_same_seed_and_results_give_the_same_run(write_toml):
    """Resume rebuilds a searcher by replay: the split's rounding and both searchers' draws are
    functions of the seed and the results told."""
    runs = []
    for seed in (4, 4, 5):
        t = _Trust()
        s = _searcher(write_toml, t, seed=seed)
        asked = []
        for g in range(6):
            t.value = [1.0, 0.45, 0.3, 0.3, 0.1, 0.55][g]
            asked.append([tuple(tr.position) for tr in _generation(s)])
        runs.append((asked, s.split, s.to_state()))
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[2][0]


def _driver_run(write_toml, previous=(), budget=40):
    """A portfolio run through the driver with a prior that ranks in reverse (tests/prior/test_trust.py):
    the trust falls to 0 after the first generation and the lanes go to TPE."""
    from msopt.config import load_settings
    from msopt.prior.guide import PriorGuide
    from msopt.run.driver import Driver
    from msopt.run.pool import InProcessPool
    from tests.prior.test_trust import KNOBS, RUN, _Exact, _Reversed
    from tests.support.fields_toml import TP_PP_DP

    text = RUN.format(seed=2, budget=budget, searcher="portfolio") + TP_PP_DP + KNOBS
    settings = load_settings(str(write_toml(text)), environ={})
    space = SearchSpace.from_settings(settings)
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: _Exact(space))
    try:
        driver = Driver(settings.config, pool, keep_results=True, previous=previous, guide=PriorGuide(_Reversed(space)))
        return driver, driver.run()
    finally:
        pool.close()


@pytest.mark.parametrize("cut", [3, 12, 21])
def test_a_resumed_portfolio_run_gives_the_uninterrupted_result(write_toml, cut):
    """Resume replays the journal into a portfolio built from the same setup, the trust judged
    again from the replayed results: the same asks, the same split, the same final state."""
    full_driver, full = _driver_run(write_toml)
    assert full_driver.searcher.name == "portfolio"
    split = full_driver.searcher.split
    assert split[0][1] == () and any(len(lanes) == full_driver.searcher.lanes // 2 for _, lanes in split[1:])
    driver, resumed = _driver_run(write_toml, previous=full.results[:cut])
    key = lambda r: (r.eval_id, r.phase, r.particle, r.iteration, str(sorted(r.values.items())), r.fitness)  # noqa: E731
    assert sorted(map(key, resumed.results)) == sorted(map(key, full.results))
    assert driver.searcher.to_state() == full_driver.searcher.to_state()


def test_the_driver_tells_the_portfolio_what_the_budget_pays(write_toml):
    """SearcherSetup.launches is the budget plan's search share: at 10 launches and 8 particles the
    search gets 7 (3 kept to re-measure), so lanes 3 and 6 of the first generation explore; at 40
    the first generation is paid whole and is the prior's."""
    driver, out = _driver_run(write_toml, budget=10)
    assert driver.searcher.explore == (3, 6)
    search = [r for r in out.results if r.phase == "search"]
    # lane 0 is the baseline again (reused, free): the baseline and lanes 1-6 are the 7 launches
    assert sorted(r.particle for r in search if r.iteration == 0) == list(range(7))
    state = driver.searcher.to_state()
    assert state["explore"] == [3, 6] and state["tpe"]
    assert _driver_run(write_toml, budget=40)[0].searcher.explore == ()


@pytest.mark.parametrize("cut", [2, 5])
def test_a_resumed_run_with_explore_lanes_gives_the_uninterrupted_result(write_toml, cut):
    full_driver, full = _driver_run(write_toml, budget=10)
    driver, resumed = _driver_run(write_toml, previous=full.results[:cut], budget=10)
    key = lambda r: (r.eval_id, r.phase, r.particle, r.iteration, str(sorted(r.values.items())), r.fitness)  # noqa: E731
    assert sorted(map(key, resumed.results)) == sorted(map(key, full.results))
    assert driver.searcher.to_state() == full_driver.searcher.to_state()
