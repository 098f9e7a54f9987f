"""Trust earned by measurement (issue 49 item 1): the prior's agreement with the measurements
(msopt.prior.guide.agreement), the screen that follows it, and a run whose prior ranks in reverse."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest

from msopt.prior.guide import TRUST_FROM, PriorGuide, agreement
from msopt.search import Screen

# -- the agreement ------------------------------------------------------------------------------


def test_agreement_is_a_lower_bound_on_few_points():
    right = agreement([(float(i), float(i)) for i in range(10)])
    reverse = agreement([(float(i), float(10 - i)) for i in range(10)])
    noisy = agreement([(1, 2), (2, 1), (3, 4), (4, 3), (5, 6), (6, 5), (7, 8), (8, 7)])
    assert right is not None and right.rho == pytest.approx(1.0) and right.trust > 0.99
    assert reverse is not None and reverse.rho == pytest.approx(-1.0) and reverse.trust == 0.0
    # rho 0.90 on 8 points earns less than on 80
    many = agreement([(a + 8 * k, b + 8 * k) for k in range(10)
                      for a, b in [(1, 2), (2, 1), (3, 4), (4, 3), (5, 6), (6, 5), (7, 8), (8, 7)]])
    assert noisy is not None and many is not None and noisy.rho < 1.0
    assert 0.0 < noisy.trust < noisy.rho and noisy.trust < many.trust
    assert agreement([(1.0, 1.0)] * (TRUST_FROM - 1)) is None


def test_a_failure_ranks_last_and_the_bias_is_the_predictions():
    a = agreement([(float(i), 2.0 * i) for i in range(1, 8)] + [(8.0, math.inf)])
    assert a is not None and a.rho == pytest.approx(1.0)
    assert math.expm1(a.bias) == pytest.approx(-0.5)  # the prior predicts half the measured fitness
    assert "prior trust" in a.text()


def test_the_screen_ranks_less_as_trust_falls():
    trust = [1.0]
    screen = Screen(4, 0.25, lambda xs: np.asarray(xs)[:, 0], trust=lambda: trust[0])
    assert screen.chance_unranked() == pytest.approx(0.25)
    trust[0] = 0.0
    assert screen.chance_unranked() == pytest.approx(1.0)
    trust[0] = 0.5
    assert screen.chance_unranked() == pytest.approx(0.625)
    # unranked, the model's word on failures still holds: the first candidate not predicted to fail
    fails = Screen(4, 0.25, lambda xs: np.where(np.asarray(xs)[:, 0] > 0.5, np.inf, 1.0))
    assert fails.first_feasible(np.array([[0.9], [0.7], [0.2], [0.1]])) == 2
    assert fails.first_feasible(np.array([[0.9], [0.7]])) == 0


# -- a run whose prior ranks in reverse ---------------------------------------------------------

RUN = """
n_particles = 8
seed = {seed}
mode = "sync"
max_launches = {budget}
iters = 2
[data_storage]
pso_top_k = 3
[search]
screen = 4
explore = 0.25
refit = false
searcher = "{searcher}"
"""

KNOBS = """
[[vllm.target_field]]
name = "seqs"
config_position = "--max-num-seqs"
min = 0
max = 1
dtype = "enum"
dtype_param = [16, 32, 64, 128, 256, 512]
value = 16
[[vllm.target_field]]
name = "tokens"
config_position = "--max-num-batched-tokens"
min = 0
max = 1
dtype = "enum"
dtype_param = [512, 1024, 2048, 4096, 8192]
value = 512
"""


def _true(v):
    """The reality: best at tp 4 · pp 1, 256 sequences, 4096 tokens; every step away costs."""
    return (1.0 + 0.3 * abs(math.log2(v["tp"]) - 2) + 0.3 * math.log2(v["pp"])
            + 0.1 * abs(math.log2(v["seqs"]) - 8) + 0.1 * abs(math.log2(v["tokens"]) - 12))


class _Reversed:
    """A prior that ranks every configuration in reverse: it predicts ``10 - true fitness``."""

    def __init__(self, space):
        self.space = space
        self.options = SimpleNamespace(picks=None, screen=4, explore=0.25, refit=False, correct=False)
        self.search_evaluations = self.evaluations = self.refits = self.kept = 0
        self.corrections = []
        values = []
        for tp, pp, s, t in itertools.product([1, 2, 4, 8], [1, 2, 4], [16, 32, 64, 128, 256, 512],
                                              [512, 1024, 2048, 4096, 8192]):
            if 8 % (tp * pp) == 0:
                values.append({"tp": tp, "pp": pp, "seqs": s, "tokens": t})
        self.all = sorted((self._one(v) for v in values), key=lambda p: p.fitness)

    def _one(self, v):
        d = self.space.decode(self.space.encode(v), None)
        fit = 10.0 - _true(d.values)
        return SimpleNamespace(values=d.values, position=d.position, fitness=fit,
                               record=lambda fit=fit: {"fitness": fit})

    def search_for_run(self, seed):
        pass

    def predict_grid(self, limit):
        return 0  # it has predicted every configuration already

    def picks(self, k, exclude=()):
        return self.all[:k]

    def predict(self, values, position):
        return self._one(values)

    def predict_position(self, x):
        return self._one(self.space.decode(np.asarray(x), None).values)

    def observe(self, values, metrics, real=False):
        pass

    def ranked(self):
        return self.all

    def assumed(self, values):
        return []


class _Exact:
    def __init__(self, space):
        self.space, self.devices = space, ["w"]

    def evaluate(self, req):
        from msopt.evaluate.results import EvaluationResult
        from msopt.metrics import METRICS

        d = self.space.decode(req.position, req.context)
        f = _true(d.values)
        return EvaluationResult(
            eval_id=req.eval_id, phase=req.phase, particle=req.particle, iteration=req.iteration,
            position_in=list(req.position), devices=["w"], actor="w", num_prompts=req.num_prompts,
            position=d.position.tolist(), values=d.values, fitness=f,
            metrics={m: None for m in METRICS} | {"generate_speed": 1.0 / f})


def _run(write_toml, seed, budget, guide_of, searcher="tpe"):
    from msopt.config import load_settings
    from msopt.run.driver import Driver
    from msopt.run.pool import InProcessPool
    from msopt.space import SearchSpace
    from tests.support.fields_toml import TP_PP_DP

    settings = load_settings(str(write_toml(RUN.format(seed=seed, budget=budget, searcher=searcher) + TP_PP_DP + KNOBS)), environ={})
    space = SearchSpace.from_settings(settings)
    guide = guide_of(_Reversed(space))
    notes: list[str] = []

    class Sink:
        def on_event(self, ev):
            text = getattr(ev, "text", None)
            if isinstance(text, str):
                notes.append(text)

    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: _Exact(space))
    try:
        out = Driver(settings.config, pool, keep_results=True, guide=guide, callbacks=[Sink()]).run()
    finally:
        pool.close()
    return guide, out, notes


class _Blind(PriorGuide):
    """The guide as it was before trust: it never judges the prior."""

    def trust(self) -> float:
        return 1.0


@pytest.mark.parametrize(("searcher", "budget"), [("portfolio", 100), ("swarm", 100), ("tpe", 60)])
def test_a_prior_that_ranks_in_reverse_loses_the_run_s_trust_and_the_run_finds_the_optimum(write_toml, searcher,
                                                                                          budget):
    """The portfolio ("auto" with a prior), the swarm and TPE, whose first generation starts at the
    prior's picks (here the worst configurations): the trust falls to 0 after it, the screen stops
    ranking, the swarm's particles leave the picks' starts (Swarm._release), the portfolio gives
    every lane to TPE, and every seed finds the optimum; the guide that keeps trusting the prior
    does not."""
    best = 1.0  # _true's optimum
    found, blind = [], []
    for seed in range(4):
        guide, out, notes = _run(write_toml, seed, budget, PriorGuide, searcher)
        assert guide.agreements and guide.agreements[0].rho < 0 and guide.trust() == 0.0
        assert any(n.startswith("prior trust 0.00") for n in notes)  # the live table says so
        assert guide.records()["prior.json"]["trust"][0]["trust"] == 0.0
        # every launch after the first TRUST_FROM was proposed with trust 0 (journaled beside it)
        launched = [r for r in out.results if r.phase in ("baseline", "search") and not r.reused and r.predicted]
        assert all(r.predicted["prior_trust"] == 1.0 for r in launched[:TRUST_FROM])
        assert launched[TRUST_FROM:] and all(r.predicted["prior_trust"] == 0.0 for r in launched[TRUST_FROM:])
        found.append(min(r.fitness for r in out.results if not r.failed))
        _, old, _ = _run(write_toml, seed, budget, _Blind, searcher)
        blind.append(min(r.fitness for r in old.results if not r.failed))
    assert all(f == pytest.approx(best) for f in found), found
    assert sum(f == pytest.approx(best) for f in blind) < len(blind), blind  # the trusting guide did not
