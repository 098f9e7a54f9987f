"""The searcher seam, the launch budget and start-up refusals that cost nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from msopt.config import load_settings, split
from msopt.errors import ConfigError, RegistryError
from msopt.run.driver import Driver
from msopt.run.pool import InProcessPool
from msopt.search import (
    SEARCHERS,
    Constraint,
    Screen,
    SearchDimension,
    Swarm,
    SwarmOptions,
    SwarmSearcher,
    make_searcher,
)
from msopt.search.searcher import SearcherSetup, make_swarm_searcher
from msopt.space import DecodeContext, SearchSpace
from tests.support.driver_helpers import FormulaEvaluator
from tests.support.fields_toml import TP_PP_DP

SETTINGS = """
n_particles = 5
seed = 7
mode = "{mode}"
{extra}
iters = {iters}
[data_storage]
pso_top_k = 2
"""

KNOBS = """
[[vllm.target_field]]
name = "seqs"
config_position = "--max-num-seqs"
min = 8
max = 512
dtype = "int"
value = 64
[[vllm.target_field]]
name = "tokens"
config_position = "--max-num-batched-tokens"
min = 16
max = 1024
dtype = "int"
value = 512
"""


def score(v):
    return abs(v["tp"] - 2) + abs(v["pp"] - 1) + abs(v["seqs"] - 200) / 50 + abs(v["tokens"] - 300) / 100


def make(write_toml, *, mode="sync", extra="", seen=None, iters=3):
    settings = load_settings(str(write_toml(SETTINGS.format(mode=mode, extra=extra, iters=iters) + TP_PP_DP + KNOBS)),
                             environ={})
    space = SearchSpace.from_settings(settings)
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: FormulaEvaluator(
        space, score, name=f"w{k}", seen=seen))
    return Driver(settings.config, pool)


def _options(n=4, seed=1):
    return SwarmOptions(n_particles=n, iters=5, c1=1.5, c2=2.0, w=0.7, seed=seed)


def test_swarm_searcher_sync_moves_exactly_as_the_swarm():
    low, high = np.zeros(3), np.ones(3)
    direct = Swarm(low, high, _options())
    searcher = SwarmSearcher(Swarm(low, high, _options()), "sync", lambda i, c: DecodeContext(i, 4, c))
    rng = np.random.default_rng(0)
    for _ in range(3):
        trials = searcher.ask()
        assert [t.lane for t in trials] == [0, 1, 2, 3]
        assert searcher.ask() == []  # the generation is not told yet
        positions = direct.ask()
        assert np.allclose(np.array([t.position for t in trials]), positions)
        fit = rng.random(4)
        repaired = np.clip(positions + 0.01, 0, 1)
        direct.tell(fit, repaired)
        for t in reversed(trials):  # the order of tells within a generation does not matter
            searcher.tell(t.id, fit[t.lane], repaired[t.lane])
    assert np.allclose(searcher.swarm.positions, direct.positions)
    assert searcher.best_fitness == direct.best_fitness


def test_swarm_searcher_async_asks_only_idle_lanes_and_refuses_unknown_ids():
    searcher = SwarmSearcher(Swarm(np.zeros(2), np.ones(2), _options(3)), "async", lambda i, c: None)
    first = searcher.ask()
    assert [t.lane for t in first] == [0, 1, 2] and searcher.ask() == []
    searcher.tell(first[1].id, 0.5)
    again = searcher.ask()
    assert [(t.lane, t.count) for t in again] == [(1, 1)]
    with pytest.raises(KeyError):
        searcher.tell(first[1].id, 0.5)


def test_searchers_registry_names_and_duplicates():
    assert "swarm" in SEARCHERS
    with pytest.raises(RegistryError, match="already registered"):
        SEARCHERS.register("swarm", make_swarm_searcher)
    dims = tuple(SearchDimension(f"x{i}", "float", 0.0, 1.0, 0.1) for i in range(2))
    setup = SearcherSetup(dims, 1, 4, "sync", None, lambda i, c: None, options=_options())
    with pytest.raises(ConfigError, match="valid: .*swarm"):
        make_searcher("swarn", setup)


def test_unknown_searcher_is_a_config_error_at_validation(write_toml):
    from msopt.run.validate import validate

    settings = load_settings(str(write_toml(SETTINGS.format(mode="sync", extra="", iters=3).replace("[data_storage]", '[search]\nsearcher = "nope"\n[data_storage]')
                                            + TP_PP_DP + KNOBS)), environ={})
    with pytest.raises(ConfigError, match="unknown searcher 'nope'"):
        validate(*split(settings))


def test_swarm_starts_at_init_positions():
    init = np.array([[0.1, 0.2], [0.9, 0.8]])
    swarm = Swarm(np.zeros(2), np.ones(2), _options(4), init_positions=init)
    plain = Swarm(np.zeros(2), np.ones(2), _options(4))
    assert np.allclose(swarm.positions[:2], init)
    assert np.allclose(swarm.positions[2:], plain.positions[2:])  # the same draws for the others


def test_screened_moves_follow_the_model():
    """With a model that prefers small x0, screened moves land lower than unscreened ones."""
    low, high = np.zeros(3), np.ones(3)
    opts = SwarmOptions(n_particles=20, iters=5, c1=1.5, c2=2.0, w=0.7, seed=5, mutation=0.0, restart_patience=0)
    plain = Swarm(low, high, opts)
    screened = Swarm(low, high, opts, constraint=Constraint(screen=Screen(8, 0.0, lambda xs: xs[:, 0])))
    fit = np.random.default_rng(1).random(20)
    plain.tell(fit)
    screened.tell(fit)
    assert screened.positions[:, 0].mean() < plain.positions[:, 0].mean()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_max_launches_caps_every_launch(write_toml, mode):
    seen: list = []
    driver = make(write_toml, mode=mode, extra="max_launches = 14", seen=seen)
    try:
        out = driver.run()
    finally:
        driver.pool.close()
    assert len(seen) == out.launched <= 14
    phases = [req.phase for req, _ in seen]
    # the small plan (below LARGE_PLAN_FROM): the search goes on past iters while launches are left,
    # to all but 3; those re-measure the best and its closest contender, with the baseline's matching
    # measurement, only while they are within the noise
    assert phases.count("search") + 1 >= 14 - 3
    assert phases.count("refine") <= 2 and phases.count("baseline") <= 2
    board = driver.leaderboard
    assert board.full_count(out.best.values) == board.full_count(board.baseline.values)


def test_refused_candidates_are_never_launched_and_answered_again(write_toml):
    seen: list = []
    driver = make(write_toml, iters=6, seen=seen)
    try:
        out = driver.run()
    finally:
        driver.pool.close()
    refused = [r for r in out.results if r.refused]
    assert refused, "the space has configurations vLLM refuses (tokens < seqs)"
    assert all(r.values["tokens"] < r.values["seqs"] and r.fitness == float("inf") for r in refused)
    assert all("max_num_batched_tokens" in (r.error or "") for r in refused)
    launched = [driver.space.decode(req.position, req.context).values for req, _ in seen]
    assert not any(v["tokens"] < v["seqs"] for v in launched)
    keys = [json.dumps(r.values, sort_keys=True) for r in refused if not r.reused]
    assert len(keys) == len(set(keys)) == out.refused  # each refused configuration checked once
    assert out.launched == len(seen)


def test_no_screen_launches_refused_candidates(write_toml):
    seen: list = []
    settings = load_settings(str(write_toml(SETTINGS.format(mode="sync", extra="", iters=6) + TP_PP_DP + KNOBS)),
                             environ={})
    space = SearchSpace.from_settings(settings)
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: FormulaEvaluator(space, score, seen=seen))
    try:
        out = Driver(settings.config, pool, screen=False).run()
    finally:
        pool.close()
    assert out.refused == 0
    assert any(space.decode(req.position, req.context).values["tokens"]
               < space.decode(req.position, req.context).values["seqs"] for req, _ in seen)


def _budget_run(write_toml, budget, *, mode="sync", previous=(), refused_baseline=True, seen=None):
    knobs = KNOBS.replace("value = 512", "value = 32") if refused_baseline else KNOBS  # tokens < seqs: refused
    settings = load_settings(str(write_toml(SETTINGS.format(mode=mode, extra=f"max_launches = {budget}", iters=1)
                                            + TP_PP_DP + knobs)), environ={})
    space = SearchSpace.from_settings(settings)
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: FormulaEvaluator(space, score, seen=seen))
    driver = Driver(settings.config, pool, previous=previous, keep_results=True)
    try:
        out = driver.run()
    finally:
        pool.close()
    return driver, out


@pytest.mark.parametrize("budget", [1, 2, 3, 6, 9])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_budget_counts_every_launch_of_every_stage(write_toml, mode, budget):
    # issue 25: with --max-launches 1 a refused (free) baseline was followed by a search launch
    # and a re-measurement: two launches
    seen: list = []
    driver, out = _budget_run(write_toml, budget, mode=mode, seen=seen)
    assert out.results[0].phase == "baseline" and out.results[0].refused
    assert len(seen) == out.launched == out.launches <= budget
    counts = driver.counts()
    assert counts == {"evaluations": len(out.results), "failures": sum(r.failed for r in out.results),
                      "reused": sum(r.reused for r in out.results), "launches": len(seen), "max_launches": budget}
    # the ids after the search follow on from the search's without a gap
    ids = sorted(r.eval_id for r in out.results)
    after = [r.eval_id for r in out.results if r.phase not in ("baseline", "search")]
    last_search = max(r.eval_id for r in out.results if r.phase in ("baseline", "search"))
    assert sorted(after) == list(range(last_search + 1, last_search + 1 + len(after)))
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("cut", [2, 4, -1])
def test_a_resumed_budget_run_spends_only_what_is_left(write_toml, cut):
    seen: list = []
    _, full = _budget_run(write_toml, 9, refused_baseline=False, seen=seen)
    assert 6 <= len(seen) <= 9  # the small plan: 3 kept, spent only while the best has a contender
    again: list = []
    driver, resumed = _budget_run(write_toml, 9, refused_baseline=False, previous=full.results[:cut], seen=again)
    assert resumed.launches == len(seen) and len(again) == len(seen) - sum(not r.reused for r in full.results[:cut])
    key = lambda r: (r.eval_id, r.phase, r.particle, r.iteration, r.values, r.fitness, r.reused)
    assert sorted(map(key, resumed.results)) == sorted(map(key, full.results))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_resumed_swarm_is_rebuilt_by_replay_to_the_same_state(write_toml, mode):
    """Resume never reads state.json: replaying the journal into a swarm built from the same setup
    gives the same results and the same final state as the uninterrupted run."""
    settings = load_settings(str(write_toml(SETTINGS.format(mode=mode, extra="", iters=3) + TP_PP_DP + KNOBS)),
                             environ={})
    space = SearchSpace.from_settings(settings)

    def run(previous=()):
        pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: FormulaEvaluator(space, score))
        try:
            driver = Driver(settings.config, pool, previous=previous, keep_results=True)
            return driver, driver.run()
        finally:
            pool.close()

    full_driver, full = run()
    driver, resumed = run(full.results[:7])
    key = lambda r: (r.eval_id, r.phase, r.particle, r.iteration, r.values, r.fitness, r.reused)
    assert sorted(map(key, resumed.results)) == sorted(map(key, full.results))
    assert driver.searcher.to_state() == full_driver.searcher.to_state()
