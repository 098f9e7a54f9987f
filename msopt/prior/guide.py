"""The simulator prior as a component around any searcher: its starting picks, its screen and its
refit (:class:`PriorGuide`), and its search run in a thread while a slow pool starts
(:class:`PriorSearch`).

The driver sees a :class:`msopt.run.guide.Guide`: starting positions, a :class:`~msopt.search.Screen`
for the searcher's :class:`~msopt.search.Constraint`, a prediction to journal beside each result,
and the measurements to learn from; it never names the prior. In Optuna's terms the sampler owns
its surrogate; in Nevergrad's, the screen is a cheap constraint.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from msopt.evaluate.results import EvaluationResult
from msopt.prior.simulator import SimulatorPrior
from msopt.search import Screen
from msopt.space import SearchSpace

__all__ = ["PriorGuide", "PriorSearch"]


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

    def starts(self, space: SearchSpace, default: np.ndarray, n: int, seed: int | None) -> list[np.ndarray]:
        """Positions for lanes 1..k beside the baseline's (``default``, lane 0): the prior's diverse
        top predictions, ``k`` at most ``n - 1`` (``[search] prior_picks`` caps it)."""
        prior = self.prior
        prior.search_for_run(seed)
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

        return Screen(opts.screen, opts.explore, score)

    def predict(self, values: Mapping[str, Any], position: np.ndarray) -> dict[str, Any] | None:
        """The prediction journaled beside the result of ``values`` (its metrics and fitness)."""
        return self.prior.predict(values, position).record()

    def observe(self, r: EvaluationResult) -> None:
        """Learn of one recorded result: a measurement of the run's own (a search, or the first
        baseline; not reused, not failed, not a re-measurement) is a row the refit may fit."""
        own = r.phase == "search" or (r.phase == "baseline" and r.iteration == 0)
        if not r.reused and not r.failed and own:
            self.prior.observe(r.values, r.metrics)

    def learn(self, say: Callable[[str], None]) -> None:
        """After an iteration: refit the prior to this run's measurements (``[search] refit``),
        saying how it went."""
        prior = self.prior
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
