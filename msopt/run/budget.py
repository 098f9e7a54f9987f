"""The plan of a launch budget (``max_launches``): how its launches are split between the
baseline, the search (the prior's picks first) and the re-measurements, and which contenders
deserve a re-measurement.

Pure functions of the budget, the run's shape (particles, ``pso_top_k``, the capacity stage's
probes), the noise measured so far and how far apart the contenders are; the stages
(:mod:`msopt.run.stages`) ask them and the run's first lines show the plan (:meth:`BudgetPlan.lines`).

Two plans:

- **large** (from :data:`LARGE_PLAN_FROM` launches, where the budget pays a whole first
  generation, the baseline and the prior's picks, and then the ``pso_top_k`` re-measurements):
  the ``pso_top_k`` best are each re-measured once, the baseline beside them, then the best by
  mean and its closest challenger again while they are within the noise (:func:`race`) with a
  quarter of the budget less one (and the baseline as often as the recommendation).
- **small** (fewer launches than that, e.g. 6, 10, 20 or 50 at 10 particles): cutting the large
  plan short left the search one to four launches at 6 and 10, and at 20 the first generation and
  one launch more; at 50 its 15 re-measurements cost the search more than the noise took from the
  pick. Here the search gets every launch but a reserve of :func:`small_reserve` (two
  re-measurements and the baseline's matching one; none below 9 launches), and after it a
  configuration is re-measured only while it is within the noise of the best by mean
  (:func:`contenders`): two contenders told apart by one measurement each cost no
  re-measurement, and the launches kept for them are not spent. docs/searchers.md has the
  figures that chose the plan at 20 and 50 launches and the reserve at 6 (issue 49).
  Where the budget pays several generations, the search may end one early (:func:`ends_search`):
  when the best has a contender within the noise, the last generation found nothing better and the
  prior has not been judged wrong, its last launches go to the same re-measurements.

Where TPE runs without a guide (no prior: ``[search] searcher = "auto"`` then) the plan is the
**unguided** one at every budget: TPE's model of the measurements is then its only source of
knowledge and a launch is worth more to it than to a re-measurement, so the search gets every
launch but :func:`unguided_reserve`, spent as the small plan's are (only while the best has a
contender within the noise). On the search bench's independent reality without a prior, the
large plan's re-measurements (8 of 20 launches, 15 of 50) and the small plan's reserve (2 of 6,
3 of 10) cost more than the noise took from the pick (docs/benchmarks.md, issue 38 item 2).

The noise is the relative standard deviation of the fitness of one configuration measured more
than once (:func:`relative_noise`); until a configuration has been measured twice it is
:data:`ASSUMED_NOISE`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: The relative noise of one fitness measurement assumed until the run has measured one (the
#: repeats of one server: a few percent, docs/benchmarks.md's simulated tasks 1-2 %).
ASSUMED_NOISE = 0.03

#: The smallest budget at which the unguided plan (no prior) keeps launches for re-measurement.
UNGUIDED_RESERVE_FROM = 30

#: The smallest budget of the large plan (with a prior): below it the small plan, whose reserve of
#: three leaves the search 17 of 20 launches and 47 of 50 at 10 particles, where the large plan
#: left it 12 and 35 (issue 49; docs/searchers.md has the figures).
LARGE_PLAN_FROM = 60

#: Two means closer than ``Z`` standard errors of their difference are within noise.
Z = 2.0

#: The half-width, in standard errors, of the confidence bounds of the re-measurements' race
#: (:func:`race`): the best stands out once its upper bound is below every other's lower bound.
RACE_Z = 1.5

#: The difference the race does not try to resolve: it stops once the challenger cannot be better
#: than the best by more than this share of its fitness (an epsilon-good pick, as in LUCB's).
RACE_EPSILON = 0.005

#: The small plan's search may end early (:func:`ends_search`) once it has told this many generations.
END_AFTER = 3

#: ... and when the launches left to it pay no more than this many generations.
END_SPAN = 1.5

#: ... and only while the run trusts the prior at least this much (:meth:`~msopt.prior.PriorGuide.trust`).
END_TRUST = 0.1

#: The recommendation's pessimism, in standard errors (:func:`pick`): the lowest upper bound
#: ``mean + PICK_Z · noise · mean / sqrt(n)`` wins.
PICK_Z = 1.0


@dataclass(frozen=True)
class BudgetPlan:
    """How a launch budget will be spent.

    Attributes:
        budget: ``max_launches`` (0: no budget; then nothing is planned).
        small: the small-budget plan (re-measure only contenders within noise) instead of the large one.
        picks: re-measurements of the ``pso_top_k`` picks, once each (large plan), or the
            re-measurements of contenders kept (small plan).
        extra: the large plan's further re-measurements of the two best (and the baseline's matching ones).
        baseline: launches kept for the baseline's re-measurement beside the picks.
        capacity: launches kept for the capacity stage's probes.
        generation: the launches of the search's first generation (the baseline and the prior's picks).
        unguided: the unguided plan (TPE without a prior): a small plan at every budget, its
            reserve :func:`unguided_reserve`.
    """

    budget: int
    small: bool
    picks: int
    extra: int
    baseline: int
    capacity: int
    generation: int
    unguided: bool = False

    @property
    def search(self) -> int:
        """Launches the baseline and the search may use together (at least 1)."""
        return max(1, self.budget - self.picks - self.extra - self.baseline - self.capacity)

    def lines(self) -> list[str]:
        """The plan in words, for the run's first lines ([] without a budget)."""
        if self.budget <= 0:
            return []
        search = self.search
        out = [f"launch budget {self.budget}: the baseline, then up to {search - 1} search launch(es), "
               "the prior's picks first"]
        if self.small and self.unguided:
            kept = self.picks + self.baseline
            out.append(f"  no prior: {kept} launch(es) kept to re-measure the best and its closest contender only "
                       "while they are within the noise" if kept else "  no prior: no launch kept for re-measurement, "
                       "the recommendation is the best measured")
        elif self.small and not self.picks + self.baseline:
            out.append("  small budget: no launch kept for re-measurement, the recommendation is the best measured")
        elif self.small:
            kept = self.picks + self.baseline
            out.append(f"  small budget: {kept} launch(es) kept to re-measure the best and its closest contender "
                       f"only while they are within the noise (assumed {ASSUMED_NOISE:.0%} until measured), with the "
                       "baseline as often as the recommendation; not spent when the best stands out")
        else:
            out.append(f"  then the top {self.picks} re-measured once with the full workload and the baseline "
                       f"beside them ({self.picks + self.baseline}), the two best again and the baseline as often "
                       f"as the recommendation ({self.extra})")
        if self.capacity:
            # the capacity stage probes with every launch still left (msopt.run.capacity_stage.Capacity): what the
            # stages before leave unspent too, and less than its share when the search's one launch overdraws
            floor = max(0, self.budget - self.search - self.picks - self.extra - self.baseline)
            out.append(f"  then the capacity stage, with every launch still left: {floor} when the stages before "
                       "spend all theirs, more when they do not")
        return out


def plan_budget(budget: int, *, top_k: int, n_particles: int, capacity_probes: int = 0,
                baseline_on_board: bool = False, unguided: bool = False) -> BudgetPlan:
    """The plan of ``budget`` launches.

    Args:
        budget: ``max_launches`` (0: none).
        top_k: ``[data_storage] pso_top_k``.
        n_particles: the swarm's particles (its first generation: the baseline and the prior's picks).
        capacity_probes: the capacity stage's probes for the ``pso_top_k`` configurations
            (``max_probes`` × ``pso_top_k``; 0: the stage is off).
        baseline_on_board: the baseline is among the ``pso_top_k`` best (then it is re-measured as
            one of them, and nothing is kept for it beside them); also when it failed.
        unguided: the unguided plan (TPE without a prior), unless the capacity stage, which needs
            re-measured picks, is on.

    Returns:
        The plan; without a budget or without ``pso_top_k`` nothing is kept for re-measurements.
    """
    capacity = min(capacity_probes, budget // 2) if budget > 0 else 0
    generation = max(1, n_particles)
    if budget <= 0 or top_k <= 0:
        return BudgetPlan(max(budget, 0), False, 0, 0, 0, capacity, generation)
    beside = 0 if baseline_on_board else 1
    extra = max(0, budget // 4 - 1) if top_k >= 2 else 0
    large = BudgetPlan(budget, False, top_k, extra, beside, capacity, generation)
    if unguided and top_k >= 2 and not capacity:
        reserve = unguided_reserve(budget)
        keep_base = 1 if reserve and not baseline_on_board else 0
        return BudgetPlan(budget, True, reserve - keep_base, 0, keep_base, capacity, generation, unguided=True)
    if (budget >= LARGE_PLAN_FROM and large.search >= generation) or top_k < 2 or capacity:
        return large  # the capacity stage needs re-measured picks
    reserve = small_reserve(budget - capacity)
    keep_base = 1 if reserve and not baseline_on_board else 0
    return BudgetPlan(budget, True, reserve - keep_base, 0, keep_base, capacity, generation)


def small_reserve(budget: int) -> int:
    """The small plan's launches kept after the search: two re-measurements (the best and its
    closest contender) and the baseline's matching one, 3, once the budget leaves the search at
    least twice as many (from 9 launches); none below, where a launch is worth more to the search
    (the pick is then the best measured)."""
    return 3 if budget >= 9 else 0


def unguided_reserve(budget: int) -> int:
    """The unguided plan's launches kept after the search (the best and its closest contender
    re-measured while within the noise, the baseline's matching one): none below
    :data:`UNGUIDED_RESERVE_FROM` launches, where every launch is worth more to the search, then
    the small plan's 3."""
    return 0 if budget < UNGUIDED_RESERVE_FROM else small_reserve(budget)


def ends_search(search: int, left: int, lanes: int, generations: int, racing: bool, improved: bool,
                trust: float = 1.0) -> bool:
    """Whether the small plan's search of ``search`` launches ends before its next generation, the
    ``left`` launches left to it going to the re-measurements of the best and its contender
    (:func:`race`). Only a search that pays more than :data:`END_AFTER` generations of ``lanes`` can:
    once it has told that many, when ``left`` pays at most :data:`END_SPAN` generations, the best has
    a contender within the noise (``racing``), the last generation did not improve the best mean
    (``improved`` False), and the run has not judged the prior wrong (``trust``, the prior's now, at
    least :data:`END_TRUST`). The search then has found what the prior led it to, and the pick loses
    more to the noise than one more generation finds. Where the prior is wrong the last generation
    still finds optima, and the search goes on. At 10 lanes a budget of 20 never ends early
    (docs/searchers.md has the figures, issue 49)."""
    return (search > END_AFTER * lanes and generations >= END_AFTER and left <= END_SPAN * lanes and racing
            and not improved and trust >= END_TRUST)


def relative_noise(groups: Sequence[Sequence[float]]) -> float | None:
    """The pooled relative standard deviation of repeated measurements: ``groups`` holds the
    finite fitness values of each configuration measured more than once (others are ignored).
    None when no configuration was measured twice."""
    num, dof = 0.0, 0
    for g in groups:
        vals = [float(v) for v in g if math.isfinite(v)]
        if len(vals) < 2:
            continue
        mean = sum(vals) / len(vals)
        if mean == 0:
            continue
        num += sum((v / mean - 1.0) ** 2 for v in vals)
        dof += len(vals) - 1
    return math.sqrt(num / dof) if dof else None


def within_noise(a: tuple[float, float], b: tuple[float, float], noise: float, z: float = Z) -> bool:
    """Whether two means, each ``(mean, measurements)``, differ by less than ``z`` standard errors
    of their difference at the relative ``noise`` of one measurement."""
    (ma, na), (mb, nb) = a, b
    if not (math.isfinite(ma) and math.isfinite(mb)) or na <= 0 or nb <= 0:
        return False
    scale = min(abs(ma), abs(mb))
    return abs(ma - mb) <= z * noise * scale * math.sqrt(1.0 / na + 1.0 / nb)


def contenders(means: Sequence[tuple[float, int]], noise: float | None, z: float = Z) -> list[int]:
    """The indices of ``means`` (each ``(mean fitness, measurements)``, lower is better) that are
    still in contention: the best, and every other within the noise of it (:func:`within_noise`),
    best first; only the best when none is. ``noise`` None: :data:`ASSUMED_NOISE`."""
    finite = [i for i, (m, n) in enumerate(means) if math.isfinite(m) and n > 0]
    if not finite:
        return []
    ranked = sorted(finite, key=lambda i: (means[i][0], i))
    sigma = ASSUMED_NOISE if noise is None else noise
    best = means[ranked[0]]
    return [ranked[0]] + [i for i in ranked[1:] if within_noise(best, means[i], sigma, z)]


def _half_width(mean: float, n: float, noise: float, z: float) -> float:
    return z * noise * abs(mean) / math.sqrt(max(n, 1e-9))


def race(means: Sequence[tuple[float, float]], noise: float | None, z: float = RACE_Z) -> tuple[int, int] | None:
    """The next pair to re-measure, in the manner of LUCB (Kalyanakrishnan et al., ICML 2012):
    ``means`` holds each configuration's (mean fitness, effective measurements), lower is better.
    The best by mean, and the challenger of the lowest lower confidence bound among the others
    (the one most likely to be better after all); None when the best's upper bound lies below that
    lower bound (the best stands out) or there is no challenger. Bounds: ``mean ± z · noise · mean
    / sqrt(n)``; ``noise`` None: :data:`ASSUMED_NOISE`. Repeats go where the contenders are close."""
    finite = [i for i, (m, n) in enumerate(means) if math.isfinite(m) and n > 0]
    if len(finite) < 2:
        return None
    sigma = ASSUMED_NOISE if noise is None else noise
    best = min(finite, key=lambda i: (means[i][0], i))
    others = [i for i in finite if i != best]
    lower = {i: means[i][0] - _half_width(means[i][0], means[i][1], sigma, z) for i in others}
    challenger = min(others, key=lambda i: (lower[i], i))
    upper = means[best][0] + _half_width(means[best][0], means[best][1], sigma, z)
    return None if upper - RACE_EPSILON * abs(means[best][0]) <= lower[challenger] else (best, challenger)


def pick(means: Sequence[tuple[float, float]], noise: float | None, z: float = PICK_Z) -> int:
    """The recommendation among ``means`` (each configuration's (mean fitness, effective
    measurements), lower is better): the lowest upper confidence bound ``mean + z · noise · mean /
    sqrt(n)``, so a configuration measured once must beat a re-measured one by more than the noise
    it could owe its luck to; ``noise`` None: :data:`ASSUMED_NOISE`. The first on a tie."""
    sigma = ASSUMED_NOISE if noise is None else noise
    finite = [i for i, (m, n) in enumerate(means) if math.isfinite(m) and n > 0]
    if not finite:
        return 0
    return min(finite, key=lambda i: (means[i][0] + _half_width(means[i][0], means[i][1], sigma, z), i))
