"""The driver over an in-process pool: write-back, determinism, duplicates, async, refine."""

from __future__ import annotations

import math

import numpy as np
import pytest

from msopt.config import load_settings
from msopt.run.driver import Driver
from msopt.run.pool import InProcessPool
from msopt.run.stages import Baseline, SyncSearch
from msopt.space import SearchSpace
from tests.support.driver_helpers import FormulaEvaluator
from tests.support.fields_toml import TP_PP_DP

SETTINGS = """
n_particles = 6
iters = 4
seed = 3
duplicate_policy = "{dup}"
mode = "{mode}"
[data_storage]
pso_top_k = 2
"""

SEQS = """[[vllm.target_field]]
name = "seqs"
config_position = "--max-num-seqs"
min = 8
max = 64
dtype = "int"
value = 16
"""


def config_text(dup: str, mode: str) -> str:
    """The driver tests' configuration: tp x pp x dp = 8 and one serving knob."""
    return SETTINGS.format(dup=dup, mode=mode) + TP_PP_DP + SEQS


def score(v):
    return abs(v["tp"] - 2) + abs(v["pp"] - 2) + abs(v["seqs"] - 40) / 10


def make(write_toml, *, size=1, dup="reuse", mode="sync", jitter=0.0, seen=None):
    settings = load_settings(str(write_toml(config_text(dup, mode))), environ={})
    space = SearchSpace.from_settings(settings)
    pool = InProcessPool(settings.config, size=size, evaluator_factory=lambda k: FormulaEvaluator(
        space, score, jitter=jitter, seed=k, name=f"w{k}", seen=seen))
    return settings, Driver(settings.config, pool)


@pytest.fixture
def make_driver(write_toml):
    """:func:`make` whose pools are closed when the test ends, passed or failed."""
    pools = []

    def build(**kw):
        settings, driver = make(write_toml, **kw)
        pools.append(driver.pool)
        return settings, driver

    yield build
    for pool in pools:
        pool.close()


def test_sync_run_stages_and_counts(make_driver):
    _, driver = make_driver(dup="rerun")
    out = driver.run()
    phases = [r.phase for r in out.results]
    # the baseline once more beside the two re-measured, as often as the recommendation
    assert phases.count("baseline") == 2 and phases.count("search") == 24 and phases.count("refine") == 2
    assert out.best is not None and out.best.phase == "refine"
    assert sorted(r.eval_id for r in out.results) == list(range(28))
    again = [r for r in out.results if r.phase == "baseline"][1]
    assert (again.eval_id, again.iteration, again.num_prompts) == (27, 1, driver.full_prompts)


def test_write_back_reaches_swarm_before_bests(write_toml):
    """One iteration through the driver's own search stage: the personal and global bests hold the
    repaired positions the actors evaluated, not the positions the swarm asked for."""
    text = config_text("rerun", "sync").replace("iters = 4", "iters = 1")
    text = text.replace("dtype_param = [1, 2, 4, 8]\nvalue = 1", "dtype_param = [1, 2, 4, 8]\nvalue = 8")
    text = text.replace("dtype_param = [1, 2, 4]\nvalue = 1", "dtype_param = [1, 2, 4]\nvalue = 4")
    settings = load_settings(str(write_toml(text)), environ={})  # particle 0 starts at tp 8, pp 4: repaired
    space = SearchSpace.from_settings(settings)
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: FormulaEvaluator(space, score, seed=k))
    try:
        driver = Driver(settings.config, pool, keep_results=True)
        Baseline().run(driver)  # the driver's own baseline stage
        SyncSearch().run(driver)  # the driver's own search stage
        search = [r for r in driver.results if r.phase == "search"]
        assert sorted(r.particle for r in search) == list(range(driver.n))
        repaired = [r for r in search if not np.allclose(r.position, r.position_in)]
        assert repaired, "the seed should produce at least one repaired position"
        assert all(r.values["tp"] * r.values["pp"] * r.values["dp"] == 8 for r in search)
        for r in search:
            if math.isfinite(r.fitness):  # a first finite result always becomes the personal best
                assert np.allclose(driver.searcher.swarm.personal_best_positions[r.particle], r.position), r
        best = min(search, key=lambda r: r.fitness)
        assert np.allclose(driver.searcher.swarm.best_position, best.position)
    finally:
        pool.close()


@pytest.mark.parametrize("dup", ["reuse", "rerun"])
def test_sync_identical_for_1_and_4_workers(make_driver, dup):
    _, d1 = make_driver(size=1, dup=dup)
    _, d4 = make_driver(size=4, dup=dup, jitter=0.01)
    r1 = {r.eval_id: (r.values, r.fitness, r.position) for r in d1.run().results}
    r4 = {r.eval_id: (r.values, r.fitness, r.position) for r in d4.run().results}
    assert r1 == r4


def test_balanced_context_reaches_the_evaluator(make_driver):
    seen = []
    _, driver = make_driver(dup="rerun", seen=seen)
    driver.run()
    ctxs = {(req.particle, req.iteration): req.context for req, _ in seen if req.phase == "search"}
    assert ctxs[(5, 2)] == (5, 6, 2) and ctxs[(0, 1)] == (0, 6, 1)


def test_duplicates_reuse_without_launch(make_driver):
    _, driver = make_driver(dup="reuse")
    out = driver.run()
    assert out.reused > 0 and out.launched == out.evaluations - out.reused
    for r in out.results:
        if r.reused:
            assert r.attempts == 0 and r.devices == []


def test_async_every_particle_gets_its_evaluations(make_driver):
    _, driver = make_driver(size=3, mode="async", dup="rerun", jitter=0.005)
    out = driver.run()
    per = {}
    for r in out.results:
        if r.phase == "search":
            per.setdefault(r.particle, []).append(r.iteration)
    assert {p: sorted(v) for p, v in per.items()} == {p: [0, 1, 2, 3] for p in range(6)}
    assert list(driver.searcher.swarm.evaluation_counts) == [4] * 6


def test_unrepairable_is_inf_with_own_values(write_toml):
    text = config_text("rerun", "sync")
    text += """
[[vllm.target_field]]
name = "big"
config_position = "--big"
min = 1
max = 1000
dtype = "int"
value = 7
[[vllm.target_field]]
name = "q"
config_position = "--q"
min = 0
max = 0
dtype = "ternary_factories"
dtype_param = { target_names = ["big", "pp"], product = 12 }
"""
    settings = load_settings(str(write_toml(text)), environ={})
    space = SearchSpace.from_settings(settings)
    pool = InProcessPool(settings.config, evaluator_factory=lambda k: FormulaEvaluator(space, score))
    try:
        out = Driver(settings.config, pool).run()
    finally:
        pool.close()
    base = out.results[0]
    assert base.phase == "baseline" and math.isinf(base.fitness) and base.values["big"] == 7
    assert "cannot be made an integer" in base.error


def _measured(eval_id, phase, seqs, fitness, num_prompts=None):
    from msopt.evaluate.results import METRICS, EvaluationResult

    return EvaluationResult(eval_id=eval_id, phase=phase, particle=None if phase != "search" else 0,
                            iteration=eval_id, position_in=[], position=[], values={"seqs": seqs},
                            metrics={m: None for m in METRICS}, fitness=fitness, num_prompts=num_prompts)


class _Idle:
    size = 1

    def submit(self, req):
        raise AssertionError("nothing is launched here")

    def wait(self, timeout=None):
        return []

    def running(self):
        return []

    def close(self):
        pass


def _fed(write_toml, measurements, prefix="", extra=""):
    settings = load_settings(str(write_toml(prefix + config_text("reuse", "sync") + extra)), environ={})
    driver = Driver(settings.config, _Idle())
    for r in measurements:
        driver.finish(r, journal=False)
    return driver


def test_pick_is_the_best_mean_not_a_lucky_remeasurement(write_toml):
    # A is truly worse (about 1.0) than B (about 0.9); A's re-measurement came out lucky
    driver = _fed(write_toml, [
        _measured(0, "baseline", 16, 3.0),
        _measured(1, "search", 24, 1.0),    # A
        _measured(2, "search", 32, 0.9),    # B
        _measured(3, "search", 40, 1.5),    # not among the top 2
        _measured(4, "refine", 32, 0.92),   # B again
        _measured(5, "refine", 24, 0.85),   # A again, lucky
    ])
    best = driver.best()
    assert best.eval_id == 4 and best.values == {"seqs": 32}
    assert driver.mean_fitness(best) == (pytest.approx(0.91), 2)
    assert driver.mean_fitness(driver.leaderboard.refined[1]) == (pytest.approx(0.925), 2)
    assert [r.eval_id for r in driver.leaderboard.capacity_configs()] == [4, 5]


def test_failed_remeasurement_is_never_the_pick(write_toml):
    driver = _fed(write_toml, [
        _measured(0, "baseline", 16, 3.0),
        _measured(1, "search", 24, 0.5),
        _measured(2, "search", 32, 0.9),
        _measured(3, "refine", 32, 0.95),
        _measured(4, "refine", 24, math.inf),
    ])
    assert driver.best().eval_id == 3


def test_mean_weighs_measurements_by_prompts(write_toml):
    # the search was capped at 100 prompts, the re-measurement served the full 400
    driver = _fed(write_toml, [
        _measured(0, "baseline", 16, 3.0, 100),
        _measured(1, "search", 24, 1.0, 100),
        _measured(2, "refine", 24, 2.0, None),
    ], prefix="simulate = true\nsample_size = 100\n", extra="[simulator.workload]\nnum_prompts = 400\n")
    assert driver.full_prompts == 400
    assert driver.mean_fitness(driver.best()) == (pytest.approx((100 * 1.0 + 400 * 2.0) / 500), 2)


def test_evicted_configuration_is_not_tallied(write_toml):
    driver = _fed(write_toml, [
        _measured(0, "baseline", 16, 3.0),
        _measured(1, "search", 24, 1.0),
        _measured(2, "search", 32, 0.9),
        _measured(3, "search", 40, 0.8),   # pushes the baseline off the top 2 ... and then 24
    ])
    assert sorted(driver.leaderboard.tally) == sorted(driver.leaderboard.board)
    assert len(driver.leaderboard.tally) == 2


def test_best_json_has_the_mean(make_driver, tmp_path):
    import json

    from msopt.run.store import RunStore

    settings, driver = make_driver(dup="reuse")
    driver = Driver(settings.config, driver.pool, store=RunStore.create(str(tmp_path), settings.config))
    out = driver.run()
    best = json.loads((driver.store.run_dir / "best.json").read_text())
    assert out.best.phase == "refine" and best["eval_id"] == out.best.eval_id
    assert best["measurements"] == 2
    assert best["mean_fitness"] == pytest.approx(driver.mean_fitness(out.best)[0])


def test_reused_result_is_not_a_second_measurement(write_toml):
    from dataclasses import replace

    first = _measured(1, "search", 24, 1.0)
    driver = _fed(write_toml, [_measured(0, "baseline", 16, 3.0), first,
                               replace(first, eval_id=2, reused=True), replace(first, eval_id=3, reused=True),
                               _measured(4, "refine", 24, 2.0)])
    assert driver.mean_fitness(driver.best()) == (pytest.approx(1.5), 2)


def test_mean_weighs_the_builtin_workload(write_toml):
    # a real run with the builtin benchmark: its workload is [builtin] num_prompts (it has no
    # [builtin.command] table); the search was capped at 100 prompts, the re-measurement sent 400
    driver = _fed(write_toml, [
        _measured(0, "baseline", 16, 3.0, 100),
        _measured(1, "search", 24, 1.0, 100),
        _measured(2, "refine", 24, 2.0, None),
    ], prefix='benchmark = "builtin"\nsample_size = 100\n', extra="[builtin]\nnum_prompts = 400\n")
    assert driver.full_prompts == 400 and driver.search_prompts == 100
    assert driver.mean_fitness(driver.best()) == (pytest.approx((100 * 1.0 + 400 * 2.0) / 500), 2)


def test_simulated_workload_is_the_simulators(write_toml):
    # simulated, the simulator serves [simulator.workload], whatever the benchmark's section says
    from msopt.evaluate import configured_num_prompts

    settings = load_settings(str(write_toml("simulate = true\n" + config_text("reuse", "sync")
                                            + "[vllm_benchmark.command]\nnum_prompts = 50\n"
                                            + "[simulator.workload]\nnum_prompts = 300\n")), environ={})
    assert configured_num_prompts(settings.config) == 300


def test_remeasurements_carry_their_num_prompts(make_driver, tmp_path):
    # refine rows of results.csv name the workload they were measured with (it was empty)
    import csv

    from msopt.run.store import RunStore

    settings, driver = make_driver(dup="reuse")
    driver = Driver(settings.config, driver.pool, store=RunStore.create(str(tmp_path), settings.config))
    out = driver.run()
    assert driver.full_prompts == 1000  # [vllm_benchmark.command] num_prompts' default
    refine = [r for r in out.results if r.phase == "refine"] if out.results else []
    with (driver.store.run_dir / "results.csv").open() as f:
        rows = [row for row in csv.DictReader(f) if row["phase"] == "refine"]
    assert rows and all(row["num_prompts"] == "1000" for row in rows)
    assert all(r.num_prompts == 1000 for r in refine)


def test_reused_result_never_counts_even_as_a_first(write_toml):
    # a reuse that reaches the board before any measurement of its own (its original was counted
    # elsewhere or evicted) is still not a measurement
    from dataclasses import replace

    first = _measured(1, "search", 24, 1.0)
    driver = _fed(write_toml, [_measured(0, "baseline", 16, 3.0), replace(first, eval_id=2, reused=True),
                               _measured(4, "refine", 24, 2.0)])
    assert driver.mean_fitness(driver.best()) == (pytest.approx(2.0), 1)


@pytest.mark.parametrize("cut", [25, 26, 27])
def test_baseline_remeasurement_resumes_exactly(make_driver, cut):
    # the baseline re-measured in the refine stage is replayed by its key ("baseline", None, 1)
    settings, driver = make_driver(dup="rerun")
    full = driver.run()
    journal = sorted(full.results, key=lambda r: r.eval_id)
    assert [(r.phase, r.iteration) for r in journal[25:]] == [("refine", 0), ("refine", 1), ("baseline", 1)]
    space = SearchSpace.from_settings(settings)
    seen: list = []
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: FormulaEvaluator(space, score, seen=seen))
    try:
        again = Driver(settings.config, pool, previous=journal[:cut], keep_results=True).run()
    finally:
        pool.close()
    assert len(seen) == 28 - cut
    key = lambda r: (r.eval_id, r.phase, r.particle, r.iteration, r.values, r.fitness, r.num_prompts)
    assert sorted(map(key, again.results)) == sorted(map(key, full.results))
