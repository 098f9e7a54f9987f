"""The optimization loop, as one object: baseline, swarm iterations (sync or async), top-k
refinement, capacity.

:class:`Driver` is a thin facade over its parts:

- :mod:`msopt.run.stages`: what each stage asks for and in which order;
- :class:`~msopt.run.dispatcher.Dispatcher`: requests in flight, duplicates (leaders and
  followers, the reuse cache) and the replay of journaled results on resume;
- :class:`~msopt.run.leaderboard.Leaderboard`: the ranking, the mean pick, the recommendation;
- :mod:`msopt.run.records`: best.json, capacity.json and the CLI's text.

The driver talks to an :class:`~msopt.run.pool.EvaluatorPool` (submit a request, wait for finished
results); ``actors.pool.RayPool`` implements it with Ray actors,
:class:`~msopt.run.pool.InProcessPool` with threads for tests and ``--no-ray``. Every finished
evaluation is journaled before the swarm learns of it; the repaired position is written back into
the swarm before bests are updated; the swarm is checkpointed to state.json after every tell.

Resume replays the run: the journal's results stand in for the evaluations they record, so the
seeded swarm goes through exactly the same states, and only evaluations missing from the journal
are dispatched.

Memory stays flat over long runs: with a run directory the journal is the record of every result,
and the driver keeps only counters, the best result, the ``pso_top_k`` best distinct
configurations (with the running mean of their measurements) and the refined results. Only the
duplicate cache (``duplicate_policy = "reuse"``) holds one entry per distinct configuration,
which reuse needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from msopt.config import Settings
from msopt.errors import ConfigError, DecodeError
from msopt.evaluate.evaluator import configured_num_prompts, search_num_prompts
from msopt.evaluate.prior import CandidateScreen, SimulatorPrior
from msopt.evaluate.results import EvalRequest, EvaluationResult
from msopt.run import stages
from msopt.run.capacity import CapacityOptions, capacity_options
from msopt.run.dispatcher import Dispatcher, was_launched
from msopt.run.leaderboard import Leaderboard, values_key
from msopt.run.pool import EvaluatorPool
from msopt.run.records import best_record, capacity_line, capacity_record, load_text
from msopt.run.stages import ProgressSink
from msopt.run.validate import Validated
from msopt.search import swarm_options
from msopt.search.searcher import Searcher, SearcherSetup, SwarmSearcher, make_searcher
from msopt.search.swarm import Swarm
from msopt.space import DecodeContext, SearchSpace

# re-exported: their home is msopt.run.records
__all__ = ["Driver", "RunOutcome", "best_record", "capacity_line", "capacity_record"]


@dataclass
class RunOutcome:
    """What a finished run reports."""

    best: EvaluationResult | None
    evaluations: int
    failures: int
    reused: int
    launched: int
    refused: int = 0
    launches: int = 0  # what a launch budget counts: ``launched`` plus the launches --resume replayed
    results: list[EvaluationResult] = field(default_factory=list)  # empty unless the driver keeps them
    capacity: list[dict[str, Any]] = field(default_factory=list)


class RunRecord(Protocol):
    """The run directory as the driver uses it (:class:`msopt.run.store.RunStore`)."""

    def append(self, result: EvaluationResult) -> None: ...

    def save_state(self, state: Mapping[str, Any]) -> None: ...

    def write_json(self, name: str, obj: Any) -> Any: ...

    def write_best(self, best: Mapping[str, Any]) -> Any: ...


class Driver:
    """Runs one optimization over a pool.

    Args:
        settings: the effective settings (n_particles, iters, seed, mode, ...).
        pool: where evaluations run.
        store: the run directory (``append``, ``save_state``, ``write_best``), or None.
        progress: receives :class:`msopt.run.progress.ProgressEvent` objects, or None.
        previous: results already journaled (``--resume``): they are replayed, not re-run.
        keep_results: keep every result in :attr:`results` (and the outcome); default: only when
            there is no store, whose journal otherwise is the record (long runs stay flat).
        validated: what :func:`msopt.run.validate.validate` returned for ``settings``: its search
            space, swarm options and capacity options are used instead of being built again.
        prior: the simulator prior (:class:`msopt.evaluate.prior.SimulatorPrior`, see
            :func:`msopt.evaluate.prior.make_prior`): searched here when it has not been, the
            swarm starts from the baseline plus its diverse top predictions, every request carries
            its prediction to the journal and, with ``[search] screen``, each particle's move is
            picked among several by the prior. None: no prior.
        screen: check the engine's start-up rules before dispatching (default true): a refused
            candidate is never launched, costs nothing and is answered again without a check.
    """

    def __init__(self, settings: Settings, pool: EvaluatorPool, *, store: RunRecord | None = None,
                 progress: ProgressSink | None = None, previous: Sequence[EvaluationResult] = (),
                 keep_results: bool | None = None, validated: Validated | None = None,
                 prior: SimulatorPrior | None = None, screen: bool = True) -> None:
        if validated is not None and validated.settings is not settings:
            raise ValueError("Driver: 'validated' must be the validation of these settings")
        self.settings = settings
        self.pool = pool
        self.store = store
        self.progress = progress
        self.space = validated.space if validated is not None else SearchSpace.from_settings(settings)
        self.mode = str(settings.get("mode", "sync"))
        self.n = settings.n_particles
        self.iters = settings.iters
        self.max_launches = int(settings.get("max_launches", 0) or 0)
        self.seed = int(settings.get("seed", 0))
        self.reuse = settings.get("duplicate_policy", "reuse") == "reuse"
        self.top_k = int(settings.section("data_storage").get("pso_top_k", 0) or 0)
        self.search_prompts = search_num_prompts(settings)
        self.full_prompts = configured_num_prompts(settings)
        self.capacity_options: CapacityOptions = (validated.capacity if validated is not None
                                                  else capacity_options(settings))
        self.capacity: list[dict[str, Any]] = []
        options = validated.swarm if validated is not None else swarm_options(settings)
        self.prior = prior
        self.prior_picks: list[dict[str, Any]] = []
        init = self._initial_positions(options.n_particles, options.seed)
        low, high = self.space.bounds
        name = str(settings.section("search").get("searcher", "swarm"))
        self.searcher: Searcher = make_searcher(name, SearcherSetup(
            low=low, high=high, options=options, mode=self.mode if self.mode in ("sync", "async") else "sync",
            init_positions=init, steps=self.space.steps, context=lambda i, c: DecodeContext(i, self.n, c)))
        if prior is not None and isinstance(self.searcher, SwarmSearcher):
            self._attach_screen(self.searcher, options.seed)
        self.keep_results = store is None if keep_results is None else bool(keep_results)
        self.results: list[EvaluationResult] = []
        self.evaluations = 0
        self.failures = 0
        self.reused = 0
        self.leaderboard = Leaderboard(self.top_k, self.full_prompts)
        checker = CandidateScreen(settings) if screen else None
        self.checker = checker
        self.refused_keys: set[str] = set()  # values keys of configurations refused (rules or at launch)
        if isinstance(self.searcher, SwarmSearcher):
            self.searcher.swarm.set_refused(self.known_refusal)
        self.dispatcher = Dispatcher(pool, self.space, reuse=self.reuse, previous=previous,
                                     finish=self.finish, emit=self.emit,
                                     refusal=checker.refusal if checker is not None else None,
                                     predict=self._predict if prior is not None else None,
                                     server_key=self._server_key)

    def _server_key(self, values: Mapping[str, Any]) -> str | None:
        """The server key a pool routes ``values`` by (:func:`msopt.evaluate.runner.server_key`)."""
        from msopt.engines import get_engine
        from msopt.evaluate.runner import server_key

        return server_key(self.settings, get_engine(self.settings.engine), values)

    # -- the prior --------------------------------------------------------------------------
    def _initial_positions(self, n: int, seed: int | None) -> np.ndarray:
        """Particle 0 at the default configuration; with a prior, particles 1..k at its picks."""
        default = self.space.default_position()
        rows = [default]
        if self.prior is not None:
            if not self.prior.searched:
                self.prior.search(self.prior.options.evaluations, np.random.default_rng(
                    np.random.SeedSequence([int(seed or 0), 0x9121])))
            want = self.prior.options.picks
            k = n - 1 if want is None else min(int(want), n - 1)
            base = self.space.decode(default, None).values
            for p in self.prior.picks(k, exclude=[base]):
                rows.append(p.position)
                self.prior_picks.append({"values": dict(p.values), **p.record()})
        return np.array(rows, dtype=float)

    def learn(self) -> None:
        """After an iteration: refit the prior to this run's measurements (``[search] refit``)."""
        if self.prior is None or not self.prior.options.refit:
            return
        if self.prior.refit(progress=lambda text: self.emit("phase", phase="search", text=text)):
            self.emit("phase", phase="search", text=f"prior refitted to {len(self.prior.observed)} measured "
                      f"configuration(s) (refit {self.prior.refits})")
        elif self.prior.refit_note:
            self.emit("phase", phase="search", text=self.prior.refit_note)

    def prior_record(self) -> dict[str, Any]:
        """What the prior did: its simulated evaluations, the picks the swarm started from, and its
        best prediction (what the prior alone would recommend, with zero launches)."""
        assert self.prior is not None
        best = next((p for p in self.prior.ranked() if np.isfinite(p.fitness)), None)
        return {"evaluations": self.prior.search_evaluations, "predictions": self.prior.evaluations,
                "refits": self.prior.refits, "refits_kept": self.prior.kept, "picks": self.prior_picks,
                "best": None if best is None else {"values": dict(best.values), **best.record()}}

    def _predict(self, values: Mapping[str, Any], position: np.ndarray) -> dict[str, Any] | None:
        assert self.prior is not None
        return self.prior.predict(values, position).record()

    def known_refusal(self, position: np.ndarray) -> bool:
        """Whether ``position`` (decoded without a context) is a configuration known to be refused:
        one that breaks the engine's start-up rules (with the pre-check on), or one refused
        before in this run (by the rules or at launch). The swarm never proposes it."""
        try:
            values = self.space.decode(np.asarray(position, dtype=float), None).values
        except DecodeError:
            return False
        if values_key(values) in self.refused_keys:
            return True
        return self.checker is not None and self.checker.refusal(values) is not None

    def _attach_screen(self, searcher: SwarmSearcher, seed: int | None) -> None:
        opts = self.prior.options if self.prior is not None else None
        if opts is None or opts.screen <= 1:
            return
        prior = self.prior
        assert prior is not None

        def score(candidates: np.ndarray) -> np.ndarray:
            out = np.full(len(candidates), np.inf)
            for k, x in enumerate(candidates):
                p = prior.predict_position(x)
                if p is not None:
                    out[k] = p.fitness
            return out

        searcher.swarm.set_screen(opts.screen, opts.explore, score)

    @property
    def swarm(self) -> Swarm:
        """The particle swarm of the default searcher."""
        if not isinstance(self.searcher, SwarmSearcher):
            raise AttributeError(f"the {self.searcher.name!r} searcher has no swarm")
        return self.searcher.swarm

    # -- recording ------------------------------------------------------------------------
    def emit(self, kind: str, **kw: Any) -> None:
        """Send a progress event (nothing without a progress display)."""
        if self.progress is None:
            return
        from msopt.run.progress import ProgressEvent

        self.progress.update(ProgressEvent(kind=kind, **kw))

    def finish(self, r: EvaluationResult, journal: bool = True) -> None:
        """Record one finished evaluation: journal it (unless replayed), count it, rank it, show it."""
        if journal and self.store is not None:
            self.store.append(r)
        if self.keep_results:
            self.results.append(r)
        self.evaluations += 1
        self.failures += r.failed
        self.reused += r.reused
        self.leaderboard.add(r)
        if r.refused and r.values:
            self.refused_keys.add(values_key(r.values))
        own = r.phase == "search" or (r.phase == "baseline" and r.iteration == 0)  # not a re-measurement
        if self.prior is not None and not r.reused and not r.failed and own:
            self.prior.observe(r.values, r.metrics)
        kind = "reused" if r.reused else ("failed" if r.failed else "done")
        self.emit(kind, eval_id=r.eval_id, phase=r.phase, particle=r.particle, iteration=r.iteration,
                  values=r.values, metrics=r.metrics, fitness=r.fitness, devices=r.devices, error=r.error,
                  text=load_text(r.load), replayed=not journal,  # not journaled again: replayed by --resume
                  launched=was_launched(r), server=None if r.reused else r.server)
        if r.phase == "refine" and not r.failed:
            pick = self.leaderboard.best()
            if pick is not None:
                self.emit("pick", eval_id=pick.eval_id, phase=pick.phase, particle=pick.particle,
                          iteration=pick.iteration, values=pick.values, fitness=pick.fitness)

    def checkpoint(self, stage: str, **extra: Any) -> None:
        """Replace state.json with the swarm's state (no-op without a run directory)."""
        if self.store is None:
            return
        self.store.save_state({"stage": stage, "mode": self.mode, "seed": self.seed,
                               "searcher": self.searcher.name, **self._searcher_state(),
                               "evaluations": self.evaluations, "launched": self.launched,
                               "launches": self.dispatcher.spent, **extra})

    def _searcher_state(self) -> dict[str, Any]:
        # the swarm's state stays under "swarm", as state.json always had it
        if isinstance(self.searcher, SwarmSearcher):
            return {"swarm": self.searcher.swarm.to_state()}
        return {"searcher_state": self.searcher.to_state()}

    # -- transport (the dispatcher's) -------------------------------------------------------
    def dispatch(self, req: EvalRequest) -> EvaluationResult | None:
        """Replay, reuse or submit one request; return its result when known at once."""
        return self.dispatcher.dispatch(req)

    def collect(self, timeout: float = 0.5) -> list[EvaluationResult]:
        """Wait for finished evaluations (and their followers); journal them."""
        return self.dispatcher.collect(timeout)

    @property
    def outstanding(self) -> int:
        """Evaluations submitted or waiting on a duplicate, not yet finished."""
        return self.dispatcher.outstanding

    @property
    def launched(self) -> int:
        """Evaluations submitted to the pool (not replayed, not reused)."""
        return self.dispatcher.launched

    def search_request(self, particle: int, count: int, position: np.ndarray) -> EvalRequest:
        """The request to evaluate ``position`` as particle ``particle``'s ``count``-th search."""
        return stages.search_request(self, particle, count, position)

    def expected_evaluations(self) -> int:
        """Evaluations a run without a launch budget makes: see :func:`stages.expected_evaluations`."""
        return stages.expected_evaluations(self)

    # -- stages ---------------------------------------------------------------------------
    def run_baseline(self) -> EvaluationResult:
        """Evaluate the default configuration (every field at its ``value``)."""
        return stages.baseline(self)

    def run_sync(self) -> None:
        """Iterations: every particle evaluated concurrently, told in particle order."""
        stages.sync_swarm(self)

    def run_async(self) -> None:
        """Each particle is told and moved as soon as its own result arrives, then dispatched again."""
        stages.async_swarm(self)

    def run_refine(self) -> list[EvaluationResult]:
        """Measure the best ``pso_top_k`` distinct configurations again with the full workload."""
        return stages.refine(self)

    def run_capacity(self) -> list[dict[str, Any]]:
        """Find the highest load each top configuration sustains within the SLOs."""
        self.capacity = stages.capacity(self)
        return self.capacity

    # -- ranking (the leaderboard's) ----------------------------------------------------------
    def mean_fitness(self, r: EvaluationResult) -> tuple[float, int]:
        """The weighted mean fitness over every counted measurement of ``r``'s configuration and
        how many there were; see :meth:`Leaderboard.mean_fitness`."""
        return self.leaderboard.mean_fitness(r)

    def best(self) -> EvaluationResult | None:
        """The recommendation; see :meth:`Leaderboard.best`."""
        return self.leaderboard.best(self.capacity)

    def run(self) -> RunOutcome:
        """Run every stage and return the outcome."""
        if self.mode not in ("sync", "async"):
            raise ConfigError(f"mode must be 'sync' or 'async', got {self.mode!r}")
        if self.prior_picks:
            done = self.prior.search_evaluations if self.prior else 0
            self.emit("phase", phase="prior", text=f"simulator prior: {done} simulated evaluations, "
                      f"{len(self.prior_picks)} particles start at its top predictions")
        self.run_baseline()
        if self.mode == "async":
            self.run_async()
        else:
            self.run_sync()
        self.run_refine()
        self.run_capacity()
        best = self.best()
        self.checkpoint("done")
        if self.store is not None and self.prior is not None:
            self.store.write_json("prior.json", self.prior_record())
        if self.store is not None and self.capacity:
            self.store.write_json("capacity.json", capacity_record(self.capacity, self.capacity_options,
                                                                   self.settings))
        if self.store is not None and best is not None:
            record = best_record(best, self.settings, self.mean_fitness(best) if best.phase == "refine" else None)
            record["counts"] = self.counts()
            if self.capacity:
                record["capacity"] = capacity_record(self.capacity, self.capacity_options, self.settings)
            self.store.write_best(record)
        return RunOutcome(best=best, evaluations=self.evaluations, failures=self.failures, reused=self.reused,
                          launched=self.launched, refused=self.dispatcher.refused, results=list(self.results),
                          capacity=list(self.capacity), launches=self.dispatcher.spent)

    def counts(self) -> dict[str, int]:
        """The run's counters as best.json and the closing line give them: evaluations (journal
        lines, replayed ones included), failures (reused ones included), reused, launches (what
        ``max_launches`` counts, replayed ones included; 0 in max_launches: no budget)."""
        return {"evaluations": self.evaluations, "failures": self.failures, "reused": self.reused,
                "launches": self.dispatcher.spent, "max_launches": self.max_launches}
