"""What a run tells its callbacks: one frozen dataclass per kind of event, and the outcome.

The run loop (:class:`msopt.run.driver.Driver`) sends every event to each of its callbacks in
order (:class:`RunCallback`); the store's callback comes first, so an evaluation is journaled
before anything else learns of it (:mod:`msopt.run.callbacks`). The progress display
(:mod:`msopt.cli.progress`) is one more callback. The loop itself never depends on what a
callback does with an event. Anchors: Ray Tune's ``Callback`` (``on_trial_result`` and
friends) and Optuna's ``callbacks`` of ``Study.optimize``.

| event | when |
|---|---|
| :class:`RunStarted` | the loop begins: the evaluations expected, the dimensions shown |
| :class:`PhaseStarted` | a stage (or a step of one) begins: baseline, search, refine, capacity, prior |
| :class:`Note` | a line for the user (a fault that costs a retry) |
| :class:`Queued` | an evaluation is submitted to the pool, or waits on a duplicate in flight |
| :class:`Running` | the pool started an evaluation on its devices |
| :class:`Finished` | an evaluation's result is known (measured, reused, refused or replayed) |
| :class:`Picked` | the recommendation after a re-measurement |
| :class:`TotalChanged` | the number of evaluations expected changed |
| :class:`Checkpoint` | the searcher's state after a tell (state.json) |
| :class:`RunEnded` | every stage is done: the :class:`RunOutcome` |
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from msopt.evaluate.results import EvaluationResult

if TYPE_CHECKING:
    from msopt.run.verdict import Verdict


@dataclass(frozen=True)
class RunStarted:
    """The loop begins.

    Attributes:
        total: evaluations expected (0: not known, under a launch budget reuse and refusals are free).
        n_particles: the searcher's lanes.
        dimensions: the fields whose values vary, in declaration order.
        steps: each field's display step.
        launches: the launch budget (0: none).
    """

    total: int
    n_particles: int
    dimensions: tuple[str, ...]
    steps: Mapping[str, float | None]
    launches: int


@dataclass(frozen=True)
class PhaseStarted:
    """A stage, or a step of one, begins ("baseline", "search", "refine", "capacity", "prior")."""

    phase: str
    text: str


@dataclass(frozen=True)
class Note:
    """A line for the user."""

    text: str


@dataclass(frozen=True)
class Queued:
    """An evaluation was submitted to the pool, or waits on a duplicate in flight.

    Attributes:
        load: the request's load (``{}`` outside the capacity stage).
    """

    eval_id: int
    phase: str
    particle: int | None
    iteration: int
    values: Mapping[str, Any]
    load: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Running:
    """The pool started an evaluation on ``devices``."""

    eval_id: int
    phase: str
    particle: int | None
    iteration: int
    devices: Sequence[str]


@dataclass(frozen=True)
class Finished:
    """An evaluation's result is known.

    Attributes:
        result: the result (a duplicate's reuse and a start-up refusal included).
        replayed: it comes from the journal of the run being resumed (it is not journaled again).
        launched: it cost a launch (:func:`msopt.run.dispatcher.was_launched`).
    """

    result: EvaluationResult
    replayed: bool = False
    launched: bool = True

    @property
    def kind(self) -> str:
        """"reused", "failed" or "done"."""
        r = self.result
        return "reused" if r.reused else ("failed" if r.failed else "done")


@dataclass(frozen=True)
class Picked:
    """The recommendation after a re-measurement: the re-measured configuration with the best mean."""

    result: EvaluationResult


@dataclass(frozen=True)
class TotalChanged:
    """The number of evaluations expected is now ``total``."""

    total: int


@dataclass(frozen=True)
class Checkpoint:
    """The run's state after a tell (``stage``, the searcher's state, the counters): state.json."""

    state: Mapping[str, Any]


@dataclass
class RunOutcome:
    """What a finished run reports.

    Attributes:
        best: the recommendation (None: no evaluation succeeded).
        evaluations: results recorded (replayed ones included).
        failures: failed results (reused failures included).
        reused: duplicates' reuses.
        launched: evaluations submitted to the pool by this process.
        refused: candidates the start-up rules refused before dispatch.
        launches: what a launch budget counts: ``launched`` plus the launches --resume replayed.
        results: every result, when the loop keeps them (no store), else empty.
        capacity: each configuration's capacity (when the capacity stage ran).
        mean_fitness: the recommendation's mean fitness over its measurements (a re-measured pick), or None.
        measurements: how many measurements ``mean_fitness`` covers.
        counts: the counters best.json and the closing line give (:meth:`Driver.counts`).
        records: the run's JSON records by file name, in the order they are written
            (prior.json, capacity.json, best.json), for the store's callback.
        verdict: the verdict (:class:`msopt.run.verdict.Verdict`), built from every result recorded.
        unreplayed: journaled results of a resumed run that this run never asked for again.
    """

    best: EvaluationResult | None
    evaluations: int
    failures: int
    reused: int
    launched: int
    refused: int = 0
    launches: int = 0
    results: list[EvaluationResult] = field(default_factory=list)
    capacity: list[dict[str, Any]] = field(default_factory=list)
    mean_fitness: float | None = None
    measurements: int = 1
    counts: dict[str, int] = field(default_factory=dict)
    records: dict[str, Any] = field(default_factory=dict)
    verdict: Verdict | None = None
    unreplayed: int = 0


@dataclass(frozen=True)
class RunEnded:
    """Every stage is done."""

    outcome: RunOutcome


#: Every kind of event.
RunEvent = (RunStarted | PhaseStarted | Note | Queued | Running | Finished | Picked | TotalChanged | Checkpoint
            | RunEnded)


class RunCallback(Protocol):
    """Receives the run's events (a progress display, the store, a test's probe)."""

    def on_event(self, event: RunEvent) -> None:
        """Handle one event; cheap, never blocks on rendering."""


class CallbackList:
    """Several callbacks as one, called in the order given."""

    def __init__(self, callbacks: Sequence[RunCallback] = ()) -> None:
        self.callbacks: list[RunCallback] = list(callbacks)

    def on_event(self, event: RunEvent) -> None:
        """Send ``event`` to every callback, in order."""
        for cb in self.callbacks:
            cb.on_event(event)
