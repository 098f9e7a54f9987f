"""The driver over an in-process pool: write-back, determinism, duplicates, async, refine."""

from __future__ import annotations

import math

import numpy as np
import pytest

from msopt.config import load_settings
from msopt.driver import Driver, InProcessPool
from msopt.space import SearchSpace

from .driver_helpers import FormulaEvaluator
from .fields_toml import TP_PP_DP

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
    pool = InProcessPool(settings, size=size, evaluator_factory=lambda k: FormulaEvaluator(
        space, score, jitter=jitter, seed=k, name=f"w{k}", seen=seen))
    return settings, Driver(settings, pool)


def test_sync_run_stages_and_counts(write_toml):
    _, driver = make(write_toml, dup="rerun")
    out = driver.run()
    phases = [r.phase for r in out.results]
    assert phases.count("baseline") == 1 and phases.count("search") == 24 and phases.count("refine") == 2
    assert out.best is not None and out.best.phase == "refine"
    assert sorted(r.eval_id for r in out.results) == list(range(27))
    driver.pool.close()


def test_write_back_reaches_swarm_before_bests(write_toml):
    _, driver = make(write_toml, dup="rerun")
    driver.run_baseline()
    positions = driver.swarm.ask()
    positions[0] = driver.space.encode({"tp": 8, "pp": 4, "seqs": 40})  # forces a repair
    reqs = [driver._search_request(i, 0, positions[i]) for i in range(driver.n)]
    got = driver._run_all(reqs)
    ordered = [got[q.eval_id] for q in reqs]
    driver.swarm.tell(np.array([r.fitness for r in ordered]), np.array([r.position for r in ordered]))
    repaired = [r for r in ordered if r.position != r.position_in]
    for r in ordered:
        i = r.particle
        if math.isfinite(r.fitness):
            assert np.allclose(driver.swarm.personal_best_positions[i], r.position)
    best = min(ordered, key=lambda r: r.fitness)
    assert np.allclose(driver.swarm.best_position, best.position)
    assert all(r.values["tp"] * r.values["pp"] * r.values["dp"] == 8 for r in ordered)
    assert repaired, "the seed should produce at least one repaired position"
    driver.pool.close()


@pytest.mark.parametrize("dup", ["reuse", "rerun"])
def test_sync_identical_for_1_and_4_workers(write_toml, dup):
    _, d1 = make(write_toml, size=1, dup=dup)
    _, d4 = make(write_toml, size=4, dup=dup, jitter=0.01)
    r1 = {r.eval_id: (r.values, r.fitness, r.position) for r in d1.run().results}
    r4 = {r.eval_id: (r.values, r.fitness, r.position) for r in d4.run().results}
    assert r1 == r4
    d1.pool.close()
    d4.pool.close()


def test_balanced_context_reaches_the_evaluator(write_toml):
    seen = []
    _, driver = make(write_toml, dup="rerun", seen=seen)
    driver.run()
    ctxs = {(req.particle, req.iteration): req.context for req, _ in seen if req.phase == "search"}
    assert ctxs[(5, 2)] == (5, 6, 2) and ctxs[(0, 1)] == (0, 6, 1)
    driver.pool.close()


def test_duplicates_reuse_without_launch(write_toml):
    _, driver = make(write_toml, dup="reuse")
    out = driver.run()
    assert out.reused > 0 and out.launched == out.evaluations - out.reused
    for r in out.results:
        if r.reused:
            assert r.attempts == 0 and r.devices == []
    driver.pool.close()


def test_async_every_particle_gets_its_evaluations(write_toml):
    _, driver = make(write_toml, size=3, mode="async", dup="rerun", jitter=0.005)
    out = driver.run()
    per = {}
    for r in out.results:
        if r.phase == "search":
            per.setdefault(r.particle, []).append(r.iteration)
    assert {p: sorted(v) for p, v in per.items()} == {p: [0, 1, 2, 3] for p in range(6)}
    assert list(driver.swarm.evaluation_counts) == [4] * 6
    driver.pool.close()


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
    pool = InProcessPool(settings, evaluator_factory=lambda k: FormulaEvaluator(space, score))
    out = Driver(settings, pool).run()
    base = out.results[0]
    assert base.phase == "baseline" and math.isinf(base.fitness) and base.values["big"] == 7
    assert "cannot be made an integer" in base.error
    pool.close()
