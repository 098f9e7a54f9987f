"""What one evaluation asks and what it returns, as plain data shared by every layer."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from msopt.metrics import METRICS
from msopt.space.context import DecodeContext

__all__ = ["METRICS", "PHASES", "RETRY", "EvalRequest", "EvaluationResult", "RetryPolicy", "describe_fault",
           "failed_result", "fault_result", "fitness_level", "values_key"]

#: Stages of a run; every evaluation is journaled with one of these.
PHASES = ("baseline", "search", "refine", "capacity")


@dataclass(frozen=True)
class RetryPolicy:
    """How often one evaluation may be launched, whatever made a launch fail: a retryable error of
    the server or the benchmark (the evaluator tries again), an actor that died (the Ray pool
    submits it again), a fault of the machinery (the dispatcher submits it again, then stops the
    run). Every layer counts the same attempts (``EvalRequest.attempts_used``,
    ``EvaluationResult.attempts``), so one configuration is launched at most ``attempts`` times.

    Attributes:
        attempts: launches of one evaluation, all layers together.
    """

    attempts: int = 3

    def again(self, used: int) -> bool:
        """Whether an evaluation that has had ``used`` launches may have another."""
        return used < self.attempts


#: The one retry policy.
RETRY = RetryPolicy()


@dataclass(frozen=True)
class EvalRequest:
    """One evaluation to run.

    Attributes:
        eval_id: unique within the run, increasing in dispatch order.
        phase: one of :data:`PHASES`.
        particle: the swarm particle, or None (baseline, refine, capacity).
        iteration: the swarm iteration (async: the particle's own evaluation count).
        position: the position as asked, in dimension order.
        context: the DecodeContext the actor decodes with.
        num_prompts: prompts to send (``sample_size`` caps it during the search); None: configured.
        load: benchmark load overrides for this evaluation, e.g. {"request_rate": 4.0}.
        predicted: what the simulator prior predicted for this configuration (its metrics and
            ``fitness``), or None; journaled beside the measured metrics.
        server_key: the driver's server key of the configuration (:meth:`EngineAdapter.server_key`):
            a pool sends it to the worker already running that server; None: any worker.
        attempts_used: launches this evaluation already had (a request submitted again after an
            actor died or a fault carries them; :data:`RETRY` bounds them all together).
    """

    eval_id: int
    phase: str
    particle: int | None
    iteration: int
    position: tuple[float, ...]
    context: DecodeContext | None = None
    num_prompts: int | None = None
    load: Mapping[str, float] = field(default_factory=dict)
    predicted: Mapping[str, Any] | None = None
    server_key: str | None = None
    attempts_used: int = 0


def values_key(values: Mapping[str, Any]) -> str:
    """One configuration's identity: its decoded values as canonical JSON."""
    return json.dumps(values, sort_keys=True, default=str)


def fitness_level(fitness: float) -> str:
    """A predicted fitness to 9 significant digits: the level that configurations the simulator prior
    predicts the same share (a plateau), as its picks and the run's pick read it."""
    return f"{float(fitness):.9g}"


def _finite_or_none(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


@dataclass
class EvaluationResult:
    """The outcome of one evaluation, as journaled.

    ``fitness`` is ``math.inf`` for a failed evaluation (journaled as null); ``position`` is the
    repaired position that the driver writes back into the swarm. ``refused`` marks a candidate
    that breaks one of the engine's start-up rules (:mod:`msopt.engines.rules`): it was never
    launched and ``error`` holds the engine's message. Journals written before the field existed
    read back with ``refused = False``. ``fault`` is set when the machinery failed (disk,
    environment, msopt, Ray) instead of the configuration: such a result is no measurement, and
    the driver never journals it. ``predicted`` holds the simulator prior's prediction for the
    configuration (metrics and ``fitness``; None without a prior). ``server`` says how the
    measurement got its server: ``{"start": "started" | "reused", "start_s": seconds the start
    took (0 when reused), "key": the server key, "kept": whether the server was kept running}``
    (None: nothing was launched). ``crash`` is set when the engine died while it served
    (:class:`msopt.engines.crash.EngineCrash` as a dict: what died, the log line, the prompt length
    of the request in flight); ``error`` then holds its one line.
    """

    eval_id: int
    phase: str
    particle: int | None
    iteration: int
    position_in: list[float]
    position: list[float]
    values: dict[str, Any]
    metrics: dict[str, float | None]
    fitness: float
    error: str | None = None
    attempts: int = 1
    reused: bool = False
    devices: list[str] = field(default_factory=list)
    actor: str | None = None
    started: float = 0.0
    finished: float = 0.0
    num_prompts: int | None = None
    real_evaluation: bool = True
    warnings: list[str] = field(default_factory=list)
    load: dict[str, float] = field(default_factory=dict)
    refused: bool = False
    fault: str | None = None
    predicted: dict[str, Any] | None = None
    server: dict[str, Any] | None = None
    crash: dict[str, Any] | None = None

    @property
    def failed(self) -> bool:
        """True when the evaluation produced no finite fitness."""
        return not math.isfinite(self.fitness)

    def to_json(self, run_id: str) -> dict[str, Any]:
        """A JSON-safe dict (non-finite numbers become null) with the run id first."""
        d = {"run_id": run_id, **asdict(self)}
        for key in ("fault", "crash"):  # absent unless set: journal lines stay as they were
            if d[key] is None:
                del d[key]
        d["fitness"] = _finite_or_none(self.fitness)
        d["metrics"] = {k: _finite_or_none(v) for k, v in self.metrics.items()}
        d["position_in"] = [_finite_or_none(float(x)) for x in self.position_in]
        d["position"] = [_finite_or_none(float(x)) for x in self.position]
        if self.predicted is not None:
            d["predicted"] = {k: _finite_or_none(v) for k, v in self.predicted.items()}
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EvaluationResult:
        """Rebuild a result from a journal line."""
        kw = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        kw["fitness"] = math.inf if d.get("fitness") is None else float(d["fitness"])
        kw["position_in"] = [math.nan if x is None else float(x) for x in d.get("position_in", [])]
        kw["position"] = [math.nan if x is None else float(x) for x in d.get("position", [])]
        if kw.get("predicted") is not None:
            kw["predicted"] = {k: (math.inf if k == "fitness" and v is None else v)
                               for k, v in dict(kw["predicted"]).items()}
        return cls(**kw)


def failed_result(req: EvalRequest, error: str | None, *, position: Sequence[float] | None = None,
                  values: Mapping[str, Any] | None = None, devices: Sequence[str] | None = None,
                  actor: str | None = None, real_evaluation: bool = True, attempts: int | None = None,
                  **extra: Any) -> EvaluationResult:
    """The one failed result of ``req`` (fitness ``inf``, no metrics), started and finished now:
    the position as asked unless ``position`` (repaired) is given; ``extra`` sets further fields
    (``refused``, ``fault``, ``predicted``); ``attempts`` defaults to the request's next launch.
    Every layer builds its failures with it."""
    now = time.time()
    return EvaluationResult(
        eval_id=req.eval_id, phase=req.phase, particle=req.particle, iteration=req.iteration,
        position_in=[float(x) for x in req.position],
        position=[float(x) for x in (req.position if position is None else position)], values=dict(values or {}),
        metrics={m: None for m in METRICS}, fitness=math.inf, error=error,
        attempts=req.attempts_used + 1 if attempts is None else attempts,
        devices=list(devices or []), actor=actor, started=now, finished=now, num_prompts=req.num_prompts,
        real_evaluation=real_evaluation, load=dict(req.load), **extra)


def fault_result(req: EvalRequest, fault: str, *, devices: list[str] | None = None, actor: str | None = None,
                 real_evaluation: bool = True) -> EvaluationResult:
    """A result that records a fault of the machinery for ``req`` (no measurement)."""
    return failed_result(req, fault, devices=devices, actor=actor, real_evaluation=real_evaluation, fault=fault)


def describe_fault(exc: BaseException) -> str:
    """One line for an exception met as a fault: its type and the first line of its message."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else 'no message'}"
