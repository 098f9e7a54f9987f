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
from msopt.errors import ConfigError
from msopt.evaluate.evaluator import configured_num_prompts, search_num_prompts
from msopt.evaluate.results import EvalRequest, EvaluationResult
from msopt.run import stages
from msopt.run.capacity import CapacityOptions, capacity_options
from msopt.run.dispatcher import Dispatcher
from msopt.run.leaderboard import Leaderboard
from msopt.run.pool import EvaluatorPool
from msopt.run.records import best_record, capacity_line, capacity_record, load_text
from msopt.run.stages import ProgressSink
from msopt.run.validate import Validated
from msopt.search import swarm_options
from msopt.search.swarm import Swarm
from msopt.space import SearchSpace

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
    """

    def __init__(self, settings: Settings, pool: EvaluatorPool, *, store: RunRecord | None = None,
                 progress: ProgressSink | None = None, previous: Sequence[EvaluationResult] = (),
                 keep_results: bool | None = None, validated: Validated | None = None) -> None:
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
        self.seed = int(settings.get("seed", 0))
        self.reuse = settings.get("duplicate_policy", "reuse") == "reuse"
        self.top_k = int(settings.section("data_storage").get("pso_top_k", 0) or 0)
        self.search_prompts = search_num_prompts(settings)
        self.full_prompts = configured_num_prompts(settings)
        self.capacity_options: CapacityOptions = (validated.capacity if validated is not None
                                                  else capacity_options(settings))
        self.capacity: list[dict[str, Any]] = []
        options = validated.swarm if validated is not None else swarm_options(settings)
        low, high = self.space.bounds
        self.swarm = Swarm(low, high, options, init_position=self.space.default_position(),
                           steps=self.space.steps)
        self.keep_results = store is None if keep_results is None else bool(keep_results)
        self.results: list[EvaluationResult] = []
        self.evaluations = 0
        self.failures = 0
        self.reused = 0
        self.leaderboard = Leaderboard(self.top_k, self.full_prompts)
        self.dispatcher = Dispatcher(pool, self.space, reuse=self.reuse, previous=previous,
                                     finish=self.finish, emit=self.emit)

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
        kind = "reused" if r.reused else ("failed" if r.failed else "done")
        self.emit(kind, eval_id=r.eval_id, phase=r.phase, particle=r.particle, iteration=r.iteration,
                  values=r.values, metrics=r.metrics, fitness=r.fitness, devices=r.devices, error=r.error,
                  text=load_text(r.load), replayed=not journal)  # not journaled again: replayed by --resume
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
                               "swarm": self.swarm.to_state(), "evaluations": self.evaluations, **extra})

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
        self.run_baseline()
        if self.mode == "async":
            self.run_async()
        else:
            self.run_sync()
        self.run_refine()
        self.run_capacity()
        best = self.best()
        self.checkpoint("done")
        if self.store is not None and self.capacity:
            self.store.write_json("capacity.json", capacity_record(self.capacity, self.capacity_options,
                                                                   self.settings))
        if self.store is not None and best is not None:
            record = best_record(best, self.settings, self.mean_fitness(best) if best.phase == "refine" else None)
            if self.capacity:
                record["capacity"] = capacity_record(self.capacity, self.capacity_options, self.settings)
            self.store.write_best(record)
        return RunOutcome(best=best, evaluations=self.evaluations, failures=self.failures, reused=self.reused,
                          launched=self.launched, results=list(self.results), capacity=list(self.capacity))
