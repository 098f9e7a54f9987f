"""The ranking of a run: the best result, the ``pso_top_k`` best distinct configurations (the
board) with the running mean of their measurements (the tally), the re-measured results, the
capacity probes, and from them the recommendation (:meth:`Leaderboard.best`).

Memory stays flat over long runs: the board holds at most ``pso_top_k`` configurations, the
refined results at most ``pso_top_k`` (and the extra re-measurements of a budget), the probes
at most ``max_probes`` per configuration, the full-workload counts one per board configuration
and one for the baseline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from msopt.evaluate.results import EvaluationResult, fitness_level
from msopt.evaluate.results import values_key as values_key  # re-exported: its home is results
from msopt.run.budget import ASSUMED_NOISE, Z, pick, race, relative_noise, within_noise


def is_measurement(r: EvaluationResult) -> bool:
    """Whether ``r`` is a measurement of its configuration at the run's workload: it succeeded,
    it is not a duplicate's reuse (that is the earlier measurement again, at no cost) and not a
    capacity probe (a probe at another load measures something else). Every count of
    measurements (the leaderboard's mean, best.json, the report's table) counts only these; a
    result replayed by ``--resume`` is counted once, as the journal holds it once."""
    return not r.failed and not r.reused and r.phase != "capacity"


def measurement_weight(r: EvaluationResult, full_prompts: int | None) -> float:
    """A measurement's weight in its configuration's mean: the prompts it served (a search capped
    by ``sample_size`` measured fewer than a re-measurement with the full workload); a result
    without a count of its own served ``full_prompts`` (the full workload,
    :func:`msopt.evaluate.configured_num_prompts`); 1 when neither is known."""
    prompts = r.num_prompts if r.num_prompts is not None else full_prompts
    return float(prompts) if prompts else 1.0


def weighted_mean(results: Sequence[EvaluationResult], full_prompts: int | None) -> tuple[float, int]:
    """The weighted mean fitness of ``results`` (measurements of one configuration, see
    :func:`measurement_weight`) and how many there are."""
    weights = [measurement_weight(r, full_prompts) for r in results]
    return sum(w * r.fitness for w, r in zip(weights, results)) / sum(weights), len(results)


#: How many distinct configurations the race of the re-measurements (:meth:`Leaderboard.race`) may
#: draw a challenger from: the best by mean of every configuration the run measured.
POOL_SIZE = 24

#: A plateau (:meth:`Leaderboard.contenders`) measured this many full workloads' worth competes for the
#: pick beside the re-measured configurations: it was measured more than once, as they were.
REPEATED = 1.5

#: The weight, in repeats, of the assumed noise in :meth:`Leaderboard.noise`.
NOISE_PRIOR_DOF = 2


def prediction_level(r: EvaluationResult) -> str | None:
    """The level of the simulator prior's prediction for ``r``'s configuration
    (:func:`~msopt.evaluate.results.fitness_level`: configurations the prior predicts the same, such
    as every ``max_num_seqs`` above the load it serves), or None where no finite prediction was journaled."""
    f = r.predicted.get("fitness") if r.predicted is not None else None
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f):
        return None
    return fitness_level(f)


def _mean(vals: Sequence[tuple[float, float]]) -> float:
    """The weighted mean of ``(weight, fitness)`` measurements."""
    return sum(w * f for w, f in vals) / sum(w for w, _ in vals)


def rank(r: EvaluationResult) -> tuple[float, int]:
    """Sort key of a result: lower fitness first, the earlier evaluation on a tie."""
    return (r.fitness, r.eval_id)


class Leaderboard:
    """Ranks every finished evaluation it is told of (:meth:`add`).

    Args:
        top_k: ``[data_storage] pso_top_k``: how many distinct configurations to keep for refinement.
        full_prompts: the configured workload's prompt count, the weight of a measurement whose
            own count is unknown.
    """

    def __init__(self, top_k: int, full_prompts: int | None) -> None:
        self.top_k = top_k
        self.full_prompts = full_prompts
        self.search_best: EvaluationResult | None = None  # best successful baseline/search result
        self.refined: list[EvaluationResult] = []          # successful refine results (<= pso_top_k)
        self.probes: dict[int, EvaluationResult] = {}      # capacity probes (<= max_probes per config)
        self.board: dict[str, EvaluationResult] = {}       # the pso_top_k best distinct configurations
        self.tally: dict[str, list[float]] = {}  # board key -> [sum of weight·fitness, sum of weights, count]
        self.baseline: EvaluationResult | None = None      # the baseline's own measurement, when it succeeded
        self.baseline_remeasured = 0                       # the baseline's re-measurements asked for so far
        self.full_counts: dict[str, int] = {}  # board keys and the baseline's -> measurements with the full workload
        #: the POOL_SIZE best configurations by mean: key -> (their measurements as (weight, fitness), latest result)
        self.pool: dict[str, tuple[list[tuple[float, float]], EvaluationResult]] = {}

    def add(self, r: EvaluationResult) -> None:
        """Rank one finished evaluation (failed ones are only counted by the driver).

        A re-measurement of the baseline (phase "baseline", iteration >= 1, see
        :func:`msopt.run.stages.refine`) is only counted for the comparison with the
        recommendation (:meth:`full_count`): it does not compete with the search's results.
        """
        if r.phase == "baseline" and r.iteration > 0:
            self.baseline_remeasured = max(self.baseline_remeasured, r.iteration)
        if r.phase == "capacity":
            self.probes[r.eval_id] = r
            return
        if r.failed:
            return
        key = values_key(r.values)
        if r.phase == "refine" or (is_measurement(r) and (r.phase == "search" or r.iteration == 0)):
            self._pool_add(key, r)
        if r.phase == "refine":
            self.refined.append(r)
            self._count(key, r)
        elif r.phase == "search" or (r.phase == "baseline" and r.iteration == 0):
            if r.phase == "baseline":
                self.baseline = r
            if self.search_best is None or rank(r) < rank(self.search_best):
                self.search_best = r
            self._rank_for_refine(key, r)
        baseline_key = values_key(self.baseline.values) if self.baseline is not None else None
        if is_measurement(r) and self.is_full(r) and (key in self.board or key == baseline_key):
            self.full_counts[key] = self.full_counts.get(key, 0) + 1

    def is_full(self, r: EvaluationResult) -> bool:
        """Whether ``r`` served the full workload (a result without a count of its own did)."""
        return r.num_prompts is None or r.num_prompts == self.full_prompts

    def full_count(self, values: Mapping[str, Any]) -> int:
        """How many successful measurements with the full workload the configuration ``values``
        has (kept for the board's configurations and the baseline's)."""
        return self.full_counts.get(values_key(values), 0)

    def _rank_for_refine(self, key: str, r: EvaluationResult) -> None:
        """Keep the ``pso_top_k`` best distinct configurations, each with its best result.

        A configuration pushed out can never come back with its old result (the ones ahead of
        it only get better), so this equals ranking every result at the end.
        """
        if self.top_k <= 0:
            return
        held = self.board.get(key)
        if held is not None:
            if rank(r) < rank(held):
                self.board[key] = r
            if not r.reused:  # a reused result is the earlier measurement again, not a new one
                self._count(key, r)
            return
        self.board[key] = r
        if not r.reused:
            self._count(key, r)
        if len(self.board) > self.top_k:
            worst = max(self.board, key=lambda k: rank(self.board[k]))
            del self.board[worst]
            self.tally.pop(worst, None)
            if self.baseline is None or worst != values_key(self.baseline.values):
                self.full_counts.pop(worst, None)

    def _count(self, key: str, r: EvaluationResult) -> None:
        """Add a successful measurement to its configuration's running mean, weighted as
        :func:`measurement_weight` says."""
        weight = measurement_weight(r, self.full_prompts)
        t = self.tally.setdefault(key, [0.0, 0.0, 0])
        t[0] += weight * r.fitness
        t[1] += weight
        t[2] += 1

    def _pool_add(self, key: str, r: EvaluationResult) -> None:
        """Add one measurement (a search's, the first baseline's or a re-measurement) to the pool,
        keeping the :data:`POOL_SIZE` best configurations by mean."""
        held = self.pool.get(key)
        vals = held[0] if held is not None else []
        vals.append((measurement_weight(r, self.full_prompts), r.fitness))
        self.pool[key] = (vals, r if held is None or r.phase == "refine" or held[1].phase != "refine" else held[1])
        if len(self.pool) > POOL_SIZE:
            worst = max(self.pool, key=lambda k: (self._pool_mean(k), -rank(self.pool[k][1])[1]))
            del self.pool[worst]

    def _pool_mean(self, key: str) -> float:
        return _mean(self.pool[key][0])

    def contenders(self) -> list[tuple[EvaluationResult, float, float]]:
        """The pool's configurations as (latest result, weighted mean fitness, effective number of
        measurements), best mean first. A measurement counts as ``weight / full workload``: one
        capped by ``sample_size`` is noisier than a re-measurement with the full workload.

        Configurations the prior predicted the same (:func:`prediction_level`) are one contender,
        their measurements pooled, while each one's mean is within the noise (:data:`Z` standard
        errors) of the pooled mean: the plateau's measurements are repeats of one thing, so a lucky
        one of them does not stand for it. The contender is the member re-measured, else the most
        measured, then the best by its own mean."""
        full = float(self.full_prompts) if self.full_prompts else None

        def effective(vals: Sequence[tuple[float, float]]) -> float:
            return sum(w for w, _ in vals) / full if full else float(len(vals))

        def joined(keys: list[str]) -> list[tuple[float, float]]:
            return [v for k in keys for v in self.pool[k][0]]

        own = {k: (_mean(vals), effective(vals)) for k, (vals, _) in self.pool.items()}
        sigma = self.noise() or ASSUMED_NOISE

        def agree(keys: list[str]) -> bool:
            whole = joined(keys)
            return all(within_noise(own[k], (_mean(whole), effective(whole)), sigma, Z) for k in keys)

        levels: dict[str, list[str]] = {}
        for key, (_, r) in self.pool.items():
            level = prediction_level(r)
            if level is not None:
                levels.setdefault(level, []).append(key)
        groups = [keys for keys in levels.values() if len(keys) > 1 and agree(keys)]
        grouped = {k for g in groups for k in g}
        groups += [[k] for k in self.pool if k not in grouped]
        out = []
        for keys in groups:
            vals = joined(keys)
            rep = min(keys, key=lambda k: (self.pool[k][1].phase != "refine", -len(self.pool[k][0]), own[k][0],
                                           self.pool[k][1].eval_id))
            out.append((self.pool[rep][1], _mean(vals), effective(vals)))
        return sorted(out, key=lambda t: (t[1], t[0].eval_id))

    def noise(self) -> float | None:
        """The relative noise of one measurement, pooled over the configurations measured more
        than once (:func:`msopt.run.budget.relative_noise`) and shrunk toward
        :data:`~msopt.run.budget.ASSUMED_NOISE` as if it were :data:`NOISE_PRIOR_DOF` more repeats
        (two repeats that happen to agree do not make the run sure of a 0.1 % difference); None
        before any configuration was measured twice."""
        groups = [[f for _, f in vals] for vals, _ in self.pool.values()]
        measured = relative_noise(groups)
        if measured is None:
            return None
        dof = sum(max(0, sum(1 for f in g if math.isfinite(f)) - 1) for g in groups)
        return math.sqrt((dof * measured ** 2 + NOISE_PRIOR_DOF * ASSUMED_NOISE ** 2) / (dof + NOISE_PRIOR_DOF))

    def race(self) -> list[EvaluationResult]:
        """The next pair to re-measure (:func:`msopt.run.budget.race`): the best by mean and its most
        dangerous challenger, or [] when the best stands out of the noise."""
        ranked = self.contenders()
        pair = race([(m, n) for _, m, n in ranked], self.noise())
        return [] if pair is None else [ranked[i][0] for i in pair]

    def mean_fitness(self, r: EvaluationResult) -> tuple[float, int]:
        """The weighted mean fitness over every successful measurement of ``r``'s configuration
        that was counted (search and re-measurements), and how many there were; ``(r.fitness, 1)``
        for a configuration not counted."""
        held = self.pool.get(values_key(r.values))
        if held is not None:
            return self._pool_mean(values_key(r.values)), len(held[0])
        t = self.tally.get(values_key(r.values))
        if t is None or t[1] <= 0:
            return r.fitness, 1
        return t[0] / t[1], int(t[2])

    def by_mean(self, results: Sequence[EvaluationResult]) -> list[EvaluationResult]:
        """One result per configuration (its last), best mean fitness first."""
        last = {values_key(r.values): r for r in results}
        return sorted(last.values(), key=lambda r: (self.mean_fitness(r)[0], r.eval_id))

    def picked(self) -> list[EvaluationResult]:
        """The configurations to re-measure: the board, best first."""
        return sorted(self.board.values(), key=rank)

    def capacity_configs(self) -> list[EvaluationResult]:
        """The configurations whose capacity is searched: the refined ones by mean fitness, else the best."""
        refined = self.by_mean(self.refined)
        if refined or self.top_k > 0:
            return refined
        return [self.search_best] if self.search_best is not None else []

    def best(self, capacity: Sequence[Mapping[str, Any]] = ()) -> EvaluationResult | None:
        """The recommendation.

        When the capacity stage ran (``capacity``: its per-configuration results) and a
        configuration sustains some load: the edge probe of the configuration with the highest
        goodput. Otherwise the configuration of the lowest upper confidence bound on its mean
        fitness (:func:`msopt.run.budget.pick`: one lucky measurement does not decide, and the
        better measured of two near-equal means wins), over its measurements or its plateau's
        (:meth:`contenders`): when refinement ran, among the re-measured configurations and the
        plateaus measured twice or more, as its latest measurement; else among all.
        """
        sustained = [c for c in capacity if c["edge_eval_id"] is not None and c["goodput"] > 0]
        if sustained:
            top = max(sustained, key=lambda c: (c["goodput"], -c["rank"]))
            edge = self.probes.get(top["edge_eval_id"])
            if edge is not None:
                return edge
        ranked = self.contenders()
        if self.refined:
            ranked = [c for c in ranked if c[0].phase == "refine" or c[2] >= REPEATED]
            if not ranked:
                return self.by_mean(self.refined)[0]
        if ranked:
            return ranked[pick([(m, n) for _, m, n in ranked], self.noise())][0]
        return self.search_best
