"""The launch budget's plan (msopt.run.budget): the split, the noise, the contenders."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from msopt.run.budget import (
    ASSUMED_NOISE,
    LARGE_PLAN_FROM,
    UNGUIDED_RESERVE_FROM,
    contenders,
    ends_search,
    plan_budget,
    relative_noise,
    small_reserve,
    unguided_reserve,
    within_noise,
)


@pytest.mark.parametrize("budget", [1, 2, 3, 4, 5, 6, 7, 9, 10, 14, 16, 17, 20, 33, 50, 200])
@pytest.mark.parametrize("top_k", [0, 1, 2, 3])
@pytest.mark.parametrize("on_board", [False, True])
@pytest.mark.parametrize("unguided", [False, True])
def test_the_plan_never_spends_more_than_the_budget(budget, top_k, on_board, unguided):
    plan = plan_budget(budget, top_k=top_k, n_particles=10, baseline_on_board=on_board, unguided=unguided)
    kept = plan.picks + plan.extra + plan.baseline + plan.capacity
    assert plan.search >= 1
    if budget >= top_k + 2:  # below, refine re-measures only what the launches left pay
        assert plan.search + kept <= budget
    assert plan.budget == budget and plan.lines()


def test_large_budgets_keep_the_measured_split():
    """From LARGE_PLAN_FROM launches at 10 particles: the split docs/benchmarks.md measured (top 3
    once, the baseline beside them, a quarter of the budget less one for the two best again)."""
    for budget, extra in ((LARGE_PLAN_FROM, 14), (80, 19)):
        plan = plan_budget(budget, top_k=3, n_particles=10)
        assert not plan.small and (plan.picks, plan.extra, plan.baseline) == (3, extra, 1)
        assert plan.search == budget - 3 - extra - 1
    assert plan_budget(80, top_k=3, n_particles=10, baseline_on_board=True).baseline == 0
    # many particles: the large plan also needs to pay the first generation
    assert plan_budget(LARGE_PLAN_FROM, top_k=3, n_particles=50).small


def test_small_budgets_give_the_search_the_first_generation():
    """6, 10, 20 and 50 launches: cutting the large plan short left the search 2, 5, 12 and 35
    launches (at 20 the first generation and one launch past it); the small plan keeps only what
    two contenders and the baseline's matching measurement need, and nothing at 6, where the pick
    is the best measured (issue 49: the search needs those launches more than the pick does)."""
    six, ten, twenty, fifty = (plan_budget(b, top_k=3, n_particles=10) for b in (6, 10, 20, 50))
    assert six.small and ten.small and twenty.small and fifty.small and fifty.search == 47
    assert (six.search, six.picks, six.baseline) == (6, 0, 0)
    assert (ten.search, ten.picks, ten.baseline) == (7, 2, 1)
    assert (twenty.search, twenty.picks, twenty.baseline) == (17, 2, 1)
    assert "small budget" in "\n".join(ten.lines())
    assert "the recommendation is the best measured" in "\n".join(six.lines())
    # the baseline on the board: it may be owed measurements all the same (unless it is one of the two)
    assert plan_budget(10, top_k=3, n_particles=10, baseline_on_board=True).search == 7
    assert [small_reserve(b) for b in (3, 5, 6, 8, 9, 12)] == [0, 0, 0, 0, 3, 3]


def test_without_a_prior_the_search_gets_the_budget():
    """The unguided plan (TPE without a prior): nothing kept below UNGUIDED_RESERVE_FROM launches, the small
    plan's reserve from there, at every budget the small plan's contenders-only re-measurement."""
    for budget in (6, 10, 20, 50):
        plan = plan_budget(budget, top_k=3, n_particles=10, unguided=True)
        kept = unguided_reserve(budget)
        assert plan.small and plan.unguided and plan.extra == 0
        assert plan.picks + plan.baseline == kept and plan.search == budget - kept
        assert "no prior" in "\n".join(plan.lines())
    assert [unguided_reserve(b) for b in (6, 10, UNGUIDED_RESERVE_FROM - 1, UNGUIDED_RESERVE_FROM, 50)] == [0, 0, 0, 3, 3]
    # the capacity stage needs re-measured picks: the guided plan's split stays
    assert plan_budget(20, top_k=3, n_particles=10, capacity_probes=12, unguided=True) == \
        plan_budget(20, top_k=3, n_particles=10, capacity_probes=12)


def test_the_capacity_stage_keeps_the_large_plan():
    """The capacity stage searches the re-measured configurations: the small plan, which may
    re-measure none, is not used with it."""
    plan = plan_budget(10, top_k=3, n_particles=10, capacity_probes=12)
    assert not plan.small and plan.capacity == 5 and plan.search == 1
    assert any("capacity" in line for line in plan.lines())


def test_no_budget_plans_nothing():
    plan = plan_budget(0, top_k=3, n_particles=10)
    assert plan.lines() == [] and (plan.picks, plan.extra, plan.baseline) == (0, 0, 0)


def test_relative_noise_pools_the_repeats():
    assert relative_noise([[1.0], [2.0]]) is None  # nothing measured twice
    assert relative_noise([]) is None
    assert relative_noise([[1.0, 1.0], [3.0, 3.0, 3.0]]) == 0.0
    got = relative_noise([[0.9, 1.1], [1.0]])
    assert got == pytest.approx(math.sqrt(0.02))
    assert relative_noise([[0.9, math.inf, 1.1]]) == pytest.approx(math.sqrt(0.02))  # a failure is no measurement


def test_within_noise_shrinks_with_measurements():
    a, b = (1.00, 1), (1.05, 1)
    assert within_noise(a, b, 0.03)  # 5 % apart, 2 x 3 % x sqrt(2) = 8.5 %
    assert not within_noise((1.00, 8), (1.05, 8), 0.03)  # 2 x 3 % x 0.5 = 3 %
    assert not within_noise(a, (math.inf, 1), 0.03)
    assert not within_noise(a, b, 0.01)


def test_contenders_are_the_best_and_those_within_noise_of_it():
    means = [(1.10, 1), (1.00, 1), (1.02, 1), (1.50, 1), (math.inf, 1)]
    assert contenders(means, None) == [1, 2]  # 2 % apart is within 2 x 3 % x sqrt(2), 10 % is not
    assert contenders(means, 0.05) == [1, 2, 0]
    assert contenders(means, 0.01) == [1, 2]
    assert contenders(means, 0.001) == [1]
    assert contenders([], None) == [] and contenders([(math.inf, 1)], 0.03) == []
    assert ASSUMED_NOISE > 0


# -- the plan in a run: the guarantees (issue 29) ---------------------------------------------

SMALL = """
n_particles = 10
seed = 11
mode = "{mode}"
max_launches = {budget}
iters = 1
[data_storage]
pso_top_k = 3
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


class _Noisy:
    """A formula with 3 % noise seeded by the eval id (the same run for the same seed); tp 4 fails
    at launch (a failure that costs a launch)."""

    def __init__(self, space, score, seen):
        self.space, self.score, self.seen = space, score, seen
        self.devices = ["w"]
        self.counts: dict = {}

    def evaluate(self, req):
        import random

        from msopt.evaluate.results import EvaluationResult
        from msopt.metrics import METRICS

        self.seen.append(req)
        d = self.space.decode(req.position, req.context)
        base = dict(eval_id=req.eval_id, phase=req.phase, particle=req.particle, iteration=req.iteration,
                    position_in=list(req.position), devices=["w"], actor="w", num_prompts=req.num_prompts)
        if d.values["tp"] == 4:
            return EvaluationResult(position=d.position.tolist(), values=d.values, fitness=math.inf,
                                    error="out of memory", metrics={m: None for m in METRICS}, **base)
        f = float(self.score(d.values)) * (1.0 + 0.03 * random.Random(req.eval_id).gauss(0.0, 1.0))
        return EvaluationResult(position=d.position.tolist(), values=d.values, fitness=f,
                                metrics={m: None for m in METRICS} | {"generate_speed": 1.0 / f}, **base)


class _Alternating(_Noisy):
    """The formula measured 1 % better than it is at a configuration's first measurement, 1 % worse at
    its second, and so on: a search finds a better mean only where the formula is better."""

    def evaluate(self, req):
        r = super().evaluate(req)
        if r.failed:
            return r
        key = tuple(sorted(r.values.items()))
        k = self.counts[key] = self.counts.get(key, -1) + 1
        f = float(self.score(r.values)) * (0.99 if k % 2 == 0 else 1.01)
        return replace(r, fitness=f, metrics=dict(r.metrics) | {"generate_speed": 1.0 / f})


class _Distrusted:
    """A guide the run has judged wrong (trust 0) that adds nothing else to the run."""

    def starts(self, space, default, n, seed, launches=None):
        return []

    def intro(self):
        return None

    def screen(self):
        return None

    def predict(self, values, position):
        return None

    def observe(self, result):
        pass

    def learn(self, say):
        pass

    def records(self):
        return {}

    def trust(self):
        return 0.0


def _small_run(write_toml, budget, score, mode="sync", evaluator=_Noisy, guide=None):
    from msopt.config import load_settings
    from msopt.run.driver import Driver
    from msopt.run.pool import InProcessPool
    from msopt.space import SearchSpace
    from tests.support.fields_toml import TP_PP_DP

    settings = load_settings(str(write_toml(SMALL.format(mode=mode, budget=budget) + TP_PP_DP + KNOBS)), environ={})
    space = SearchSpace.from_settings(settings)
    seen: list = []
    events: list = []

    class Sink:
        def on_event(self, ev):
            events.append(ev)

    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: evaluator(space, score, seen))
    driver = Driver(settings.config, pool, keep_results=True, callbacks=[Sink()], guide=guide)
    try:
        out = driver.run()
    finally:
        pool.close()
    return driver, out, seen, events


def _spread(v):
    return 1.0 + abs(v["tp"] - 2) + abs(v["pp"] - 1) + abs(v["seqs"] - 200) / 50 + abs(v["tokens"] - 300) / 100


@pytest.mark.parametrize("budget", [6, 10])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_small_budget_keeps_the_guarantees(write_toml, budget, mode):
    """Every launch counts (a failed one too, a refused one is free), the baseline has as many
    measurements with the full workload as the recommendation, and the same seed gives the same run."""
    driver, out, seen, events = _small_run(write_toml, budget, _spread, mode)
    assert len(seen) == out.launches == driver.counts()["launches"] <= budget
    assert sum(r.failed and not r.refused and not r.reused for r in out.results) == sum(
        1 for q in seen if driver.space.decode(q.position, q.context).values["tp"] == 4)
    board = driver.leaderboard
    assert out.best is not None and board.baseline is not None
    assert board.full_count(out.best.values) == board.full_count(board.baseline.values)
    # the plan is the run's first lines
    from msopt.run.events import Note, RunStarted

    first = next(e for e in events if not isinstance(e, RunStarted))
    assert isinstance(first, Note) and first.text.startswith(f"launch budget {budget}:"), events[:3]
    _, again, _, _ = _small_run(write_toml, budget, _spread, mode)
    key = lambda r: (r.eval_id, r.phase, r.particle, r.iteration, r.values, r.fitness, r.reused, r.refused)
    assert list(map(key, again.results)) == list(map(key, out.results))


def test_a_best_that_stands_out_is_not_re_measured(write_toml):
    """Contenders far apart (well beyond 3 % noise): the launches kept for re-measuring are not spent."""
    def steep(v):
        return 10.0 ** (abs(v["tp"] - 2) + abs(v["pp"] - 1)) * (1 + abs(v["seqs"] - 200) / 20)

    driver, out, seen, _ = _small_run(write_toml, 10, steep)
    assert not any(q.phase == "refine" for q in seen)
    assert len(seen) == out.launches <= 10 - 3  # the search's launches only
    assert out.best is not None and out.best.phase in ("search", "baseline")


def test_contenders_within_noise_are_re_measured(write_toml):
    """Every configuration within 1 % of the others: the best and its closest contender are
    re-measured, and the baseline beside them as often as the recommendation."""
    driver, out, seen, _ = _small_run(write_toml, 10, lambda v: 1.0 + 0.001 * v["tp"])
    phases = [q.phase for q in seen]
    assert phases.count("refine") >= 1 and phases.count("baseline") >= 2
    assert len(seen) <= 10


def test_the_capacity_line_says_what_the_stage_gets():
    """Issue 52: the plan announced "up to 3 probes" and four ran: the capacity stage probes with every
    launch left (the baseline alone on the board left two of the re-measurements' launches unspent)."""
    plan = plan_budget(6, top_k=2, n_particles=8, capacity_probes=24)
    assert (plan.search, plan.picks, plan.baseline, plan.capacity) == (1, 2, 1, 3)
    # 6 launches: the baseline (the search's 1), 2 picks and the baseline beside them leave 2, not the 3 kept
    assert plan.lines()[-1] == ("  then the capacity stage, with every launch still left: 2 when the stages before "
                                "spend all theirs, more when they do not")
    # no search launch, the baseline the only pick: 6 - 1 - 1 = 4 probes, which the line allows
    assert not any("up to" in line and "probes" in line for line in plan.lines())


def test_the_search_ends_early_only_when_the_pick_needs_the_launches():
    # 47 search launches at 10 lanes, 3 generations told, 12 left: the best has a contender, nothing improved
    assert ends_search(47, 12, 10, 3, racing=True, improved=False)
    assert not ends_search(47, 12, 10, 3, racing=False, improved=False)  # the best stands out
    assert not ends_search(47, 12, 10, 3, racing=True, improved=True)    # the last generation found better
    assert not ends_search(47, 16, 10, 3, racing=True, improved=False)   # more than 1.5 generations left
    assert not ends_search(47, 12, 10, 2, racing=True, improved=False)   # too early
    assert not ends_search(47, 12, 10, 3, racing=True, improved=False, trust=0.0)  # the prior judged wrong
    assert ends_search(47, 12, 10, 3, racing=True, improved=False, trust=0.5)
    # a search of 17 launches (20 at 10 lanes) never ends early, however many generations reuse let it tell
    assert not any(ends_search(17, left, 10, g, True, False) for left in range(18) for g in range(10))


def test_a_search_whose_best_has_a_contender_ends_early_for_the_re_measurements(write_toml):
    """50 launches, the layouts with pp 1 within 0.2 % of each other (whatever their limits), the
    others far behind, measured 1 % off by turns: once a generation finds no better mean the search
    ends before its last, says so, and its launches go to re-measuring the best and its contender."""
    from msopt.run.events import Note

    def tie(v):
        return 1.0 + 0.001 * v["tp"] if v["pp"] == 1 else 2.0

    driver, out, seen, events = _small_run(write_toml, 50, tie, evaluator=_Alternating)
    notes = [e.text for e in events if isinstance(e, Note) and e.text.startswith("the search ends with")]
    assert len(notes) == 1, notes
    left = int(notes[0].split()[4])
    phases = [q.phase for q in seen]
    # more re-measurements than the 3 launches the plan keeps for them
    assert left > 0 and phases.count("refine") + phases.count("baseline") - 1 > 3
    assert len(seen) <= 50
    # the same run, with a prior the run has judged wrong: the search goes on to its budget
    _, _, _, events = _small_run(write_toml, 50, tie, evaluator=_Alternating, guide=_Distrusted())
    assert not any(isinstance(e, Note) and e.text.startswith("the search ends with") for e in events)


def test_a_search_whose_best_stands_out_runs_to_its_budget(write_toml):
    """50 launches, contenders far apart: the search spends all its launches, none ends early."""
    from msopt.run.events import Note

    def steep(v):
        return 10.0 ** (abs(v["tp"] - 2) + abs(v["pp"] - 1)) * (1 + abs(v["seqs"] - 200) / 20)

    driver, out, seen, events = _small_run(write_toml, 50, steep)
    assert not any(isinstance(e, Note) and e.text.startswith("the search ends with") for e in events)
