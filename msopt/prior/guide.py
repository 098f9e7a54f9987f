"""The simulator prior as a component around any searcher: its starting picks, its screen and its
refit (:class:`PriorGuide`), and its search run in a thread while a slow pool starts
(:class:`PriorSearch`).

The driver sees a :class:`msopt.run.guide.Guide`: starting positions, a :class:`~msopt.search.Screen`
for the searcher's :class:`~msopt.search.Constraint`, a prediction to journal beside each result,
and the measurements to learn from; it never names the prior. In Optuna's terms the sampler owns
its surrogate; in Nevergrad's, the screen is a cheap constraint.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from msopt.evaluate.results import EvaluationResult, values_key
from msopt.prior.simulator import SimulatorPrior
from msopt.search import Screen
from msopt.search.portfolio import explore_lanes
from msopt.space import SearchSpace

__all__ = ["TRUST_FROM", "TRUST_Z", "Agreement", "PriorGuide", "PriorSearch", "agreement"]

#: The fewest measured configurations from which the run judges the prior (below: full trust, the
#: prior's picks start the search before anything was measured).
TRUST_FROM = 8
#: The trust is the lower confidence bound, ``TRUST_Z`` standard errors below, of the prior's rank
#: agreement with the measurements (Fisher's z of Spearman's rho, standard error
#: ``sqrt(1.06 / (n - 3))``, Fieller et al. 1957): on few points a high rho earns little.
TRUST_Z = 1.0
#: The largest grid the prior predicts whole before its picks, where the budget pays fewer than two
#: generations (:meth:`PriorGuide.starts`): twice the surrogate's sample of the grid
#: (:data:`~msopt.search.surrogate.GRID_MAX`), which its explore lanes score at their first ask.
#: Each distinct configuration is simulated once; 2 ms each on the bench's 4,608-point grids.
WHOLE_GRID_MAX = 8192


@dataclass(frozen=True)
class Agreement:
    """How well the prior's predictions, made before each launch, agree with the measurements.

    Attributes:
        n: measured configurations compared (a failure ranks last, measured or predicted).
        rho: Spearman's rank correlation of predicted and measured fitness.
        low: its lower confidence bound (:data:`TRUST_Z` standard errors of Fisher's z below).
        trust: ``low`` clipped to 0..1: how far the run trusts the prior's ranking.
        bias: the median log ratio predicted / measured fitness of the successful ones (0: none).
        spread: the standard error of that log ratio's mean (how sure the bias is).
    """

    n: int
    rho: float
    low: float
    trust: float
    bias: float
    spread: float

    def text(self) -> str:
        """The agreement in words, for the run's live table."""
        off = f"; its fitness off by a median {math.expm1(self.bias):+.0%} (± {self.spread:.0%})" \
            if math.isfinite(self.bias) else ""
        return (f"prior trust {self.trust:.2f}: its ranking against {self.n} measured configurations, "
                f"Spearman rho {self.rho:+.2f} (lower bound {self.low:+.2f}){off}; screened moves now unranked "
                f"with chance {{unranked:.2f}}")


def _ranks(x: Sequence[float]) -> list[float]:
    """Average ranks (ties share theirs), ``inf`` last."""
    order = sorted(range(len(x)), key=lambda i: x[i])
    out = [0.0] * len(x)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2.0
        i = j + 1
    return out


def agreement(pairs: Sequence[tuple[float, float]]) -> Agreement | None:
    """The :class:`Agreement` of ``pairs`` (predicted fitness, measured fitness), lower is better,
    ``inf`` a failure; None with fewer than :data:`TRUST_FROM` pairs."""
    n = len(pairs)
    if n < TRUST_FROM:
        return None
    rp, rm = _ranks([p for p, _ in pairs]), _ranks([m for _, m in pairs])
    mp, mm = sum(rp) / n, sum(rm) / n
    cov = sum((a - mp) * (b - mm) for a, b in zip(rp, rm))
    var = math.sqrt(sum((a - mp) ** 2 for a in rp) * sum((b - mm) ** 2 for b in rm))
    rho = cov / var if var > 0 else 0.0
    z = math.atanh(max(-0.999999, min(0.999999, rho)))
    low = math.tanh(z - TRUST_Z * math.sqrt(1.06 / (n - 3)))
    logs = sorted(math.log(p / m) for p, m in pairs if math.isfinite(p) and math.isfinite(m) and p > 0 and m > 0)
    bias = logs[len(logs) // 2] if logs else math.nan
    spread = (math.sqrt(sum((v - sum(logs) / len(logs)) ** 2 for v in logs) / (len(logs) - 1) / len(logs))
              if len(logs) > 1 else math.nan)
    return Agreement(n, rho, low, min(1.0, max(0.0, low)), bias, spread)


class PriorGuide:
    """A :class:`SimulatorPrior` as the run's guide (:class:`msopt.run.guide.Guide`).

    Args:
        prior: the prior (:func:`msopt.prior.make_prior`); searched at :meth:`starts` when it has
            not been (a session searches it while the pool starts).
    """

    def __init__(self, prior: SimulatorPrior) -> None:
        self.prior = prior
        #: the picks the searcher started from: their values and predictions (prior.json)
        self.picks: list[dict[str, Any]] = []
        #: measured configuration key -> (the fitness predicted before its first launch, measured fitness)
        self._pairs: dict[str, tuple[float, float]] = {}
        #: the agreement said after each generation (prior.json's ``trust``)
        self.agreements: list[Agreement] = []
        #: the agreement with every measurement so far (judged as each arrives, so the searcher's
        #: next moves follow it: the swarm moves as soon as its generation is told)
        self.judged: Agreement | None = None
        self._screen: Screen | None = None

    def trust(self) -> float:
        """How far the run trusts the prior's ranking now, 0..1: the lower confidence bound of its
        rank agreement with the measurements so far (:func:`agreement`), 1 before it was judged."""
        return self.judged.trust if self.judged is not None else 1.0

    def starts(self, space: SearchSpace, default: np.ndarray, n: int, seed: int | None,
               launches: int | None = None) -> list[np.ndarray]:
        """Positions for lanes 1..k beside the baseline's (``default``, lane 0): the prior's diverse
        top predictions, ``k`` at most ``n - 1`` (``[search] prior_picks`` caps it). Where the
        ``launches`` pay fewer than two generations of ``n`` lanes, the prior first predicts every
        configuration of the grid (at most :data:`WHOLE_GRID_MAX`): the run's explore lanes score
        the grid at their first ask anyway (:meth:`~msopt.search.surrogate.ResidualSurrogate.explore`),
        and the one generation the budget pays must start at the prior's true best, not at the best
        of its sample."""
        prior = self.prior
        prior.search_for_run(seed)
        if explore_lanes(n, launches):
            prior.predict_grid(WHOLE_GRID_MAX)
        want = prior.options.picks
        k = n - 1 if want is None else min(int(want), n - 1)
        base = space.decode(default, None).values
        rows: list[np.ndarray] = []
        for p in prior.picks(k, exclude=[base]):
            rows.append(p.position)
            self.picks.append({"values": dict(p.values), **p.record()})
        return rows

    def intro(self) -> tuple[str, str] | None:
        """The run's line about its start: (phase, text), or None when no lane starts at a pick."""
        if not self.picks:
            return None
        return "prior", (f"simulator prior: {self.prior.search_evaluations} simulated evaluations, "
                         f"{len(self.picks)} particles start at its top predictions")

    def screen(self) -> Screen | None:
        """The prior's screen (``[search] screen``, ``explore``), or None."""
        opts, prior = self.prior.options, self.prior
        if opts.screen <= 1:
            return None

        def score(candidates: np.ndarray) -> np.ndarray:
            out = np.full(len(candidates), np.inf)
            for k, x in enumerate(candidates):
                p = prior.predict_position(x)
                if p is not None:
                    out[k] = p.fitness
            return out

        self._screen = Screen(opts.screen, opts.explore, score, trust=self.trust)
        return self._screen

    def predict(self, values: Mapping[str, Any], position: np.ndarray) -> dict[str, Any] | None:
        """The prediction journaled beside the result of ``values`` (its metrics and fitness, and
        ``prior_trust``: how far the run trusted the prior when it asked, :meth:`trust`)."""
        return {**self.prior.predict(values, position).record(), "prior_trust": self.trust()}

    def observe(self, r: EvaluationResult) -> None:
        """Learn of one recorded result: a measurement of the run's own (a search, or the first
        baseline; not reused, not failed, not a re-measurement) is a row the refit may fit; with
        the prediction journaled beside it, made before the launch, a pair the trust is judged on
        (a launch that failed too: it ranks last)."""
        own = r.phase == "search" or (r.phase == "baseline" and r.iteration == 0)
        if not r.reused and not r.failed and own:
            self.prior.observe(r.values, r.metrics, real=r.real_evaluation)
        if own and not r.reused and not r.refused and r.predicted is not None:
            pred = r.predicted.get("fitness")
            key = values_key(r.values)
            if key not in self._pairs:
                self._pairs[key] = (math.inf if pred is None else float(pred),
                                    math.inf if r.failed else float(r.fitness))
                self.judged = agreement(list(self._pairs.values()))

    def learn(self, say: Callable[[str], None]) -> None:
        """After an iteration: judge the prior's agreement with the measurements so far
        (:func:`agreement`, the trust the screen follows, said when it changes), correct its
        simulator to the launches measured on the real engine (``[search] correct``) and refit it
        to them (``[search] refit``), saying how each went."""
        judged = self.judged
        if judged is not None and (not self.agreements or judged.n > self.agreements[-1].n):
            self.agreements.append(judged)
            unranked = self._screen.chance_unranked() if self._screen is not None else 1.0
            say(judged.text().format(unranked=unranked))
        prior = self.prior
        if prior.options.correct:
            if prior.correct() is not None:
                say(prior.corrections[-1]["said"])
        if not prior.options.refit:
            return
        if prior.refit(progress=say):
            say(f"prior refitted to {len(prior.observed)} measured configuration(s) (refit {prior.refits})")
        elif prior.refit_note:
            say(prior.refit_note)

    def records(self) -> dict[str, Any]:
        """prior.json: the prior's simulated evaluations, the picks the searcher started from, its
        best prediction (what the prior alone would recommend, with zero launches), and what that
        prediction assumed rather than knew at the run's end (``assumed``: the report shows it)."""
        prior = self.prior
        best = next((p for p in prior.ranked() if np.isfinite(p.fitness)), None)
        return {"prior.json": {
            "evaluations": prior.search_evaluations, "predictions": prior.evaluations,
            "refits": prior.refits, "refits_kept": prior.kept, "picks": self.picks,
            "corrections": list(prior.corrections),
            "trust": [asdict(a) for a in self.agreements],
            "best": None if best is None else {"values": dict(best.values), **best.record()},
            "assumed": [] if best is None else prior.assumed(best.values)}}


class _Stopped(Exception):
    """Ends a :class:`PriorSearch` that is no longer wanted."""


class PriorSearch:
    """The prior's search, run in a thread while the main thread starts a slow pool (seconds of
    ray.init and of actors starting, mostly spent waiting).

    Ray must be started by the main thread, not this one: its processes get SIGKILL when the
    thread that started them ends (Ray's fate sharing sets ``prctl(PR_SET_PDEATHSIG)``, which
    follows the thread).
    """

    def __init__(self, prior: SimulatorPrior, seed: int | None) -> None:
        self.error: BaseException | None = None
        self._stop = threading.Event()
        report = prior.report

        def tell(text: str) -> None:  # the search reports every tenth of its budget: where it can stop
            if self._stop.is_set():
                raise _Stopped
            if report is not None:
                report(text)

        prior.report = tell
        self._thread = threading.Thread(target=self._run, args=(prior, seed, report), name="msopt-prior-search",
                                        daemon=True)
        self._thread.start()

    def _run(self, prior: SimulatorPrior, seed: int | None, report: Callable[[str], None] | None) -> None:
        try:
            prior.search_for_run(seed)
        except _Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001  raised again in the main thread, by result()
            self.error = exc
        finally:
            prior.report = report

    def result(self) -> None:
        """Wait for the search to end; raises what it raised."""
        self._thread.join()
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        """End the search at its next report (the run stops) and wait for it."""
        self._stop.set()
        self._thread.join()
