"""The launch budget's plan (msopt.run.budget): the split, the noise, the contenders."""

from __future__ import annotations

import math

import pytest

from msopt.run.budget import ASSUMED_NOISE, contenders, plan_budget, relative_noise, small_reserve, within_noise


@pytest.mark.parametrize("budget", [1, 2, 3, 4, 5, 6, 7, 9, 10, 14, 16, 17, 20, 33, 50, 200])
@pytest.mark.parametrize("top_k", [0, 1, 2, 3])
@pytest.mark.parametrize("on_board", [False, True])
def test_the_plan_never_spends_more_than_the_budget(budget, top_k, on_board):
    plan = plan_budget(budget, top_k=top_k, n_particles=10, baseline_on_board=on_board)
    kept = plan.picks + plan.extra + plan.baseline + plan.capacity
    assert plan.search >= 1
    if budget >= top_k + 2:  # below, refine re-measures only what the launches left pay
        assert plan.search + kept <= budget
    assert plan.budget == budget and plan.lines()


def test_large_budgets_keep_the_measured_split():
    """20 and 50 launches at 10 particles: the split docs/benchmarks.md measured (top 3 once, the
    baseline beside them, a quarter of the budget less one for the two best again)."""
    for budget, extra in ((20, 4), (50, 11)):
        plan = plan_budget(budget, top_k=3, n_particles=10)
        assert not plan.small and (plan.picks, plan.extra, plan.baseline) == (3, extra, 1)
        assert plan.search == budget - 3 - extra - 1
    assert plan_budget(50, top_k=3, n_particles=10, baseline_on_board=True).baseline == 0


def test_small_budgets_give_the_search_the_first_generation():
    """6 and 10 launches: cutting the large plan short left the search 2 and 5 launches; the small
    plan keeps only what two contenders and the baseline's matching measurement need."""
    six, ten = (plan_budget(b, top_k=3, n_particles=10) for b in (6, 10))
    assert six.small and ten.small
    assert (six.search, six.picks, six.baseline) == (4, 1, 1)
    assert (ten.search, ten.picks, ten.baseline) == (7, 2, 1)
    assert "small budget" in "\n".join(ten.lines())
    # the baseline on the board: it may be owed measurements all the same (unless it is one of the two)
    assert plan_budget(10, top_k=3, n_particles=10, baseline_on_board=True).search == 7
    assert [small_reserve(b) for b in (3, 5, 6, 8, 9, 12)] == [0, 0, 2, 2, 3, 3]


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
