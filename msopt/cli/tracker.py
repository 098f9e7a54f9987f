"""What both progress displays record and how they write it: :class:`ProgressEvent`, the
tracker of counts, the best shown and the ETA, and the short text forms of values and fitness.

:mod:`msopt.cli.progress` turns the run's typed events (:mod:`msopt.run.events`) into
:class:`ProgressEvent` objects and draws them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from msopt.checks import is_finite, is_number
from msopt.metrics import fitness_text
from msopt.run.durations import estimate_eta, format_duration
from msopt.run.records import ServerStarts
from msopt.space.fields import show_value

#: The kinds of :class:`ProgressEvent`.
EVENT_KINDS = ("queued", "running", "done", "failed", "reused", "phase", "message", "pick")

#: Kinds that finish an evaluation.
FINISHED_KINDS = ("done", "failed", "reused")

_STYLES = {"queued": "dim", "running": "yellow", "done": "green", "failed": "bold red", "reused": "cyan",
           "replayed": "cyan"}


@dataclass
class ProgressEvent:
    """Something that happened to one evaluation, or to the run.

    Attributes:
        kind: one of :data:`EVENT_KINDS`; "pick" names the current recommendation (during
            refinement: the re-measured configuration with the best mean), shown instead of the
            best single measurement from then on, so the table and the closing line agree.
        eval_id: the evaluation (None for "phase" and "message").
        phase: the run stage ("baseline", "search", "refine", "capacity").
        particle: the swarm particle, None outside the search.
        iteration: the swarm iteration.
        values: the decoded field values.
        metrics: the benchmark metrics (done/reused).
        fitness: lower is better; inf or None when failed.
        devices: the accelerators the evaluation runs on.
        error: why it failed.
        text: free text (the phase's description, a message, why a result was reused).
        duration: seconds the evaluation took, if known (else measured from its "running" event).
        replayed: the result comes from the journal of the run being resumed, not a new run.
        launched: the evaluation cost a launch (not a reuse, not refused before dispatch).
        server: how its server came (``EvaluationResult.server``: started or reused), None: no launch.
    """

    kind: str
    eval_id: int | None = None
    phase: str | None = None
    particle: int | None = None
    iteration: int | None = None
    values: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    fitness: float | None = None
    devices: list[str] = field(default_factory=list)
    error: str | None = None
    text: str | None = None
    duration: float | None = None
    replayed: bool = False
    launched: bool = False
    server: dict[str, Any] | None = None

    @classmethod
    def from_result(cls, result: Any, kind: str | None = None, **overrides: Any) -> ProgressEvent:
        """The event for a finished :class:`~msopt.evaluate.results.EvaluationResult`.

        ``kind`` defaults to "reused", "failed" or "done" according to the result.
        """
        if kind is None:
            kind = "reused" if result.reused else ("failed" if result.failed else "done")
        duration = result.finished - result.started if result.finished > result.started else None
        kw: dict[str, Any] = dict(
            eval_id=result.eval_id, phase=result.phase, particle=result.particle,
            iteration=result.iteration, values=dict(result.values), metrics=dict(result.metrics),
            fitness=result.fitness, devices=[str(d) for d in result.devices], error=result.error,
            duration=duration, server=None if result.reused else result.server,
        )
        kw.update(overrides)
        return cls(kind, **kw)


def _num(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if not is_number(value):
        return _short(value, 16)
    v = float(value)
    if math.isnan(v):
        return "-"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return format(v, fmt)


def _value(value: Any, width: int = 12) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _num(value, ".4g")
    return _short(value, width)


def _short(value: Any, width: int) -> str:
    s = " ".join(str(value).split())
    return s if len(s) <= width else s[: max(width - 1, 1)] + "…"


def short_names(names: Sequence[str]) -> dict[str, str]:
    """A short, unique column name per field: names of up to 5 characters as they are, longer
    ones by the initials of their parts ("max_num_batched_tokens" -> "mnbt") or their first 4
    characters; the table's legend spells them out."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for name in names:
        short = name
        if len(name) > 5:
            parts = [q for q in re.split(r"[_\-.]+", name) if q]
            short = "".join(q[0] for q in parts) if len(parts) > 1 else name[:4]
        base, k = short, 2
        while short in used:
            short, k = f"{base}{k}", k + 1
        used.add(short)
        out[name] = short
    return out


def compact_value(value: Any, step: float | None = None) -> str:
    """A value in a few characters: on/off, a float at its step (else 3 digits), 12345k."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return show_value(value, step) if step and math.isfinite(value) else _num(value, ".3g")
    if isinstance(value, int) and abs(value) >= 1_000_000:
        return f"{value / 1000:.0f}k"
    return _short(value, 8)


def _fitness(value: Any) -> str:
    """Fitness in at most 8 characters (a broken SLO can cost millions)."""
    if is_finite(value) and abs(value) >= 10:
        return _num(value, ".4g")
    return _num(value, ".4f")


def _first_line(text: str | None, width: int = 200) -> str:
    if not text:
        return ""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return _short(lines[0], width) if lines else ""


@dataclass
class _Row:
    label: str
    status: str = "queued"
    eval_id: int | None = None
    phase: str | None = None
    iteration: int | None = None
    devices: list[str] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    fitness: float | None = None
    error: str | None = None
    seq: int = 0  # when the row last changed, in events


class _Tracker:
    """The bookkeeping both displays share: counts, best so far, durations, one row per particle."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.t0 = clock()
        self.total, self.budget, self.launches = 0, 0, 0  # expected evaluations (0: not known), max_launches
        self.n_particles = 0
        self.dimensions: list[str] = []
        self.run_dir = ""
        self.phase: str | None = None
        self.finished = 0
        self.failures = 0
        self.reused = 0
        self.servers = ServerStarts()  # server starts and kept-server reuses (issue 26)
        self.replayed = 0
        self.steps: dict[str, float | None] = {}
        self.best: ProgressEvent | None = None
        self.picked = False  # self.best is the driver's recommendation (a "pick" event)
        self.started_at: dict[int, float] = {}
        self.running: set[int] = set()
        self.last_concurrency = 0
        self.duration_sum = 0.0
        self.duration_n = 0
        self.rows: dict[str, _Row] = {}
        self.seq = 0
        self.messages: list[str] = []

    def start(self, total: int, n_particles: int, dimensions: Sequence[str], run_dir: str,
              steps: Mapping[str, float | None] | None = None, launches: int = 0) -> None:
        self.steps = dict(steps or {})
        self.t0 = self.clock()
        self.total, self.budget = max(int(total), 0), max(int(launches), 0)
        self.n_particles = max(int(n_particles), 0)
        self.dimensions = [str(d) for d in dimensions]
        self.run_dir = str(run_dir)
        for p in range(self.n_particles):
            self.rows.setdefault(f"p{p}", _Row(f"p{p}", status="-"))

    def elapsed(self) -> float:
        return self.clock() - self.t0

    @staticmethod
    def row_key(ev: ProgressEvent) -> str:
        if ev.phase == "capacity":  # particle is the configuration's rank, not a swarm particle
            return f"cap #{ev.particle}" if ev.particle is not None else "capacity"
        if ev.particle is not None:
            return f"p{ev.particle}"
        return ev.phase or "other"

    def record(self, ev: ProgressEvent) -> None:
        now = self.clock()
        if ev.kind == "done" and isinstance(ev.fitness, float) and not math.isfinite(ev.fitness):
            ev = replace(ev, kind="failed")  # an infinite fitness is a failure, whatever the sender said
        if self._note(ev):
            return
        if ev.phase and (self.phase is None or ev.kind in ("queued", "running")):
            self.phase = ev.phase
        row = self._row_of(ev)
        if ev.kind == "running" and ev.eval_id is not None:
            self.started_at[ev.eval_id] = now
            self.running.add(ev.eval_id)
            self.last_concurrency = len(self.running)
        elif ev.kind in FINISHED_KINDS:
            self._finished(ev, row, now)

    def _note(self, ev: ProgressEvent) -> bool:
        """Record an event about the run rather than an evaluation (a phase, a message, the driver's pick);
        False for an evaluation's."""
        if ev.kind == "phase":
            self.phase = ev.phase or ev.text or self.phase
        elif ev.kind == "message":
            self.messages = (self.messages + [ev.text or ""])[-3:]
        elif ev.kind == "pick":
            self.best, self.picked = ev, True
        else:
            return False
        return True

    def _row_of(self, ev: ProgressEvent) -> _Row:
        """The row of ``ev`` (made on its first event), updated with what ``ev`` says of it."""
        key = self.row_key(ev)
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = _Row(key)
        if ev.eval_id is not None and row.eval_id != ev.eval_id:
            # a new evaluation in this row: nothing of the previous one may show as its own
            row.values, row.metrics, row.fitness, row.error, row.devices = {}, {}, None, None, []
        self.seq += 1
        row.seq = self.seq
        row.status = ev.kind if ev.kind in _STYLES else row.status
        if ev.replayed and ev.kind in FINISHED_KINDS:
            row.status = "replayed"
            self.replayed += 1
        row.eval_id = ev.eval_id if ev.eval_id is not None else row.eval_id
        row.phase = ev.phase or row.phase
        row.iteration = ev.iteration if ev.iteration is not None else row.iteration
        if ev.devices:
            row.devices = [str(d) for d in ev.devices]
        if ev.values:
            row.values = dict(ev.values)
        return row

    def _finished(self, ev: ProgressEvent, row: _Row, now: float) -> None:
        """An evaluation finished: its row's result, the counts, its duration, the best so far."""
        row.metrics = dict(ev.metrics)
        row.fitness = ev.fitness
        row.error = ev.error
        self.finished += 1
        began = self.started_at.pop(ev.eval_id, None) if ev.eval_id is not None else None
        self.running.discard(ev.eval_id)  # type: ignore[arg-type]
        self.failures += ev.kind == "failed" or (ev.kind == "reused" and isinstance(ev.fitness, float)
                                                 and not math.isfinite(ev.fitness))  # a failure reused
        self.launches += ev.launched
        if ev.kind != "reused":
            self.servers.add(ev.server)
        if ev.kind == "reused" or ev.replayed:
            self.reused += ev.kind == "reused"  # no run: its duration would bias the ETA
        else:
            self._add_duration(ev.duration if ev.duration is not None or began is None else now - began)
        fit = ev.fitness
        if ev.phase == "capacity":
            pass  # fitness at a varied load is not comparable with the search's
        elif self.picked:
            pass  # the recommendation is the driver's pick now, not the luckiest measurement
        elif is_finite(fit) and (self.best is None or fit < self.best.fitness):  # type: ignore[operator]
            self.best = ev
        if self.total and self.finished > self.total:
            self.total = self.finished

    def _add_duration(self, duration: float | None) -> None:
        if duration is not None and math.isfinite(duration) and duration >= 0:
            self.duration_sum += duration
            self.duration_n += 1

    def mean_duration(self) -> float | None:
        return self.duration_sum / self.duration_n if self.duration_n else None

    def eta(self) -> float | None:
        concurrency = len(self.running) or self.last_concurrency or 1
        left = self.budget - self.launches if self.budget and not self.total else self.total - self.finished
        return estimate_eta(self.mean_duration(), left, concurrency)

    def best_text(self, width: int = 16, result: Any = None, label: str = "best") -> str:
        """``<label> fitness=... (eval N ...) values``: the best result shown so far, or ``result``."""
        b = result if result is not None else self.best
        if b is None:
            return f"{label}: -"
        vals = " ".join(f"{k}={show_value(v, self.steps.get(k)) if isinstance(v, (bool, float)) else _value(v, width)}"
                        for k, v in b.values.items())
        where = f"eval {b.eval_id}" + (f" p{b.particle}" if b.particle is not None else f" {b.phase or ''}")
        return f"{label} fitness={fitness_text(b.fitness, '.4f')} ({where.strip()}) {vals}".rstrip()

    def final_text(self, summary: Mapping[str, Any] | None) -> str:
        """The closing line: counts, the recommendation (``summary["best"]``, which need not be
        the best single measurement) or else the best shown, elapsed time, scalar summary items."""
        rec = (summary or {}).get("best")
        best = self.best_text(40, rec, "recommended") if hasattr(rec, "eval_id") else self.best_text(40)
        how = "finished" if summary is not None and not summary.get("interrupted") else (
            "interrupted" if summary else "stopped")
        text = f"{how}: {self.counts_text()}; {best}; elapsed {format_duration(self.elapsed())}"
        extra = _summary_items(summary)
        return text + (f"; {extra}" if extra else "")

    def counts_text(self) -> str:
        parts = [f"{self.finished}/{self.total} evaluations" if self.total else f"{self.finished} evaluations",
                 *([f"{self.launches}/{self.budget} launches"] if self.budget else []), f"{self.failures} failed"]
        if self.reused:
            parts.append(f"{self.reused} reused")
        if self.replayed:
            parts.append(f"{self.replayed} replayed")
        if self.running:
            parts.append(f"{len(self.running)} running")
        servers = self.servers.text()
        if servers:
            parts.append(servers)
        return ", ".join(parts)


def _summary_items(summary: Mapping[str, Any] | None) -> str:
    if not summary:
        return ""
    items = [f"{k}={_value(v, 60)}" for k, v in summary.items()
             if k != "interrupted" and (v is None or isinstance(v, (str, int, float, bool)))]
    return " ".join(items)


def _capacity_lines(summary: Mapping[str, Any] | None) -> list[str]:
    """The capacity stage's summary lines (``summary["capacity"]``: a list of strings)."""
    lines = (summary or {}).get("capacity") or []
    return [str(x) for x in lines] if isinstance(lines, (list, tuple)) else []
