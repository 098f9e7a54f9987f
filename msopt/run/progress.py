"""What the user sees while a run goes on: a live table on a terminal, plain lines elsewhere.

The driver reports :class:`ProgressEvent` objects to a :class:`Progress`. ``update`` only
records (under a lock) and never renders: :class:`LiveTable` draws in rich's refresh thread at
most a few times a second, :class:`PlainLog` writes and flushes one line per event.
"""

from __future__ import annotations

import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import IO, Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from msopt.checks import is_finite, is_number
from msopt.run.durations import estimate_eta, format_duration  # re-exported: part of this module's API
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
        if ev.kind == "phase":
            self.phase = ev.phase or ev.text or self.phase
            return
        if ev.kind == "message":
            self.messages = (self.messages + [ev.text or ""])[-3:]
            return
        if ev.kind == "pick":
            self.best, self.picked = ev, True
            return
        if ev.phase and (self.phase is None or ev.kind in ("queued", "running")):
            self.phase = ev.phase
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

        if ev.kind == "running" and ev.eval_id is not None:
            self.started_at[ev.eval_id] = now
            self.running.add(ev.eval_id)
            self.last_concurrency = len(self.running)
        elif ev.kind in FINISHED_KINDS:
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
                duration = ev.duration
                if duration is None and began is not None:
                    duration = now - began
                if duration is not None and math.isfinite(duration) and duration >= 0:
                    self.duration_sum += duration
                    self.duration_n += 1
            fit = ev.fitness
            if ev.phase == "capacity":
                pass  # fitness at a varied load is not comparable with the search's
            elif self.picked:
                pass  # the recommendation is the driver's pick now, not the luckiest measurement
            elif is_finite(fit) and (self.best is None or fit < self.best.fitness):  # type: ignore[operator]
                self.best = ev
            if self.total and self.finished > self.total:
                self.total = self.finished

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
        return f"{label} fitness={_num(b.fitness, '.4f')} ({where.strip()}) {vals}".rstrip()

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


class Progress:
    """Receives the driver's events; the base class shows nothing (quiet runs, tests)."""

    def start(self, *, total: int, n_particles: int, dimensions: Sequence[str], run_dir: str,
              steps: Mapping[str, float | None] | None = None, launches: int = 0) -> None:
        """The run begins: ``total`` evaluations expected (0: not known; it may change:
        :meth:`set_total`); ``dimensions``: the fields whose values vary; ``steps``: a float
        field's display step; ``launches``: the launch budget (0: none)."""

    def update(self, event: ProgressEvent) -> None:
        """Record one event; cheap, never blocks on rendering."""

    def set_total(self, total: int) -> None:
        """The number of evaluations expected changed (e.g. refine and capacity stages added)."""

    def close(self, summary: Mapping[str, Any] | None = None) -> None:
        """The run ended; show the final state and ``summary``."""

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


class PlainLog(Progress):
    """One plain, flushed line per event: for pipes, CI and ``ray job submit`` logs."""

    def __init__(self, stream: IO[str] | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._t = _Tracker(clock)
        self._closed = False

    @property
    def stream(self) -> IO[str]:
        return self._stream if self._stream is not None else sys.stdout

    def _emit(self, text: str) -> None:
        line = f"[{format_duration(self._t.elapsed())}] {text}\n"
        try:
            self.stream.write(line)
            self.stream.flush()
        except (OSError, ValueError):  # a closed pipe must not stop the run
            pass

    def start(self, *, total: int, n_particles: int, dimensions: Sequence[str], run_dir: str,
              steps: Mapping[str, float | None] | None = None, launches: int = 0) -> None:
        with self._lock:
            self._t.start(total, n_particles, dimensions, run_dir, steps, launches)
            dims = ", ".join(self._t.dimensions) or "none"
            what = f"at most {launches} launch{'es' if launches != 1 else ''}" if launches else f"{total} evaluations"
            self._emit(f"run {run_dir}: {what}, {n_particles} particles, dimensions: {dims}")

    def set_total(self, total: int) -> None:
        with self._lock:
            self._t.total = max(int(total), self._t.finished)

    def update(self, event: ProgressEvent) -> None:
        with self._lock:
            self._t.record(event)
            self._emit(self.format_event(event))

    def format_event(self, ev: ProgressEvent) -> str:
        """The line for one event, without the time prefix."""
        if ev.kind == "phase":
            return f"phase {ev.phase or '-'}" + (f": {ev.text}" if ev.text else "")
        if ev.kind == "message":
            return ev.text or ""
        if ev.kind == "pick":
            return self._t.best_text(40, ev, "recommended so far")
        head = [f"eval {ev.eval_id}" if ev.eval_id is not None else "eval -"]
        if ev.phase:
            head.append(ev.phase)
        if ev.phase == "capacity":
            if ev.particle is not None:
                head.append(f"#{ev.particle}")
            if ev.iteration is not None:
                head.append(f"probe{ev.iteration}")
        else:
            if ev.particle is not None:
                head.append(f"p{ev.particle}")
            if ev.iteration is not None and ev.particle is not None:
                head.append(f"it{ev.iteration}")
        head.append(ev.kind)
        parts = [" ".join(head)]
        if ev.kind in ("done", "reused", "failed"):
            if ev.kind != "failed" or is_finite(ev.fitness):
                parts.append(f"fitness={_num(ev.fitness, '.4f')}")
            m = ev.metrics
            if any(m.get(k) is not None for k in ("generate_speed", "time_to_first_token", "time_per_output_token")):
                parts.append(f"gen={_num(m.get('generate_speed'), '.1f')} tok/s "
                             f"ttft={_num(m.get('time_to_first_token'), '.3f')}s "
                             f"tpot={_num(m.get('time_per_output_token'), '.3f')}s")
        if ev.replayed:
            parts.append("(replayed from the journal)")
        if ev.kind != "running" or ev.values:
            parts.extend(f"{k}={show_value(v, self._t.steps.get(k)) if isinstance(v, (bool, float)) else _value(v, 40)}"
                         for k, v in ev.values.items())
        if ev.devices:
            parts.append("devices=" + ",".join(str(d) for d in ev.devices))
        if ev.kind == "failed" and ev.error:
            parts.append(f"error={_first_line(ev.error)}")
        if ev.phase == "capacity" and ev.text:
            parts.append(ev.text)
        if ev.kind == "reused" and ev.text:
            parts.append(f"({_short(ev.text, 80)})")
        if ev.kind == "done" and self._t.best is ev:
            parts.append("(new best)")
        return " ".join(p for p in parts if p)

    def close(self, summary: Mapping[str, Any] | None = None) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._emit(self._t.final_text(summary))
            for line in _capacity_lines(summary):
                self._emit(line)


class LiveTable(Progress):
    """A rich live table, one row per particle plus one per non-swarm stage.

    Rendering happens in rich's refresh thread (``refresh_per_second``, default 4 Hz);
    :meth:`update` only records under a lock.
    """

    def __init__(self, console: Console | None = None, *, refresh_per_second: float = 4.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console if console is not None else Console()
        self._refresh = min(max(float(refresh_per_second), 0.5), 4.0)
        self._lock = threading.Lock()
        self._t = _Tracker(clock)
        self._live: Live | None = None

    def start(self, *, total: int, n_particles: int, dimensions: Sequence[str], run_dir: str,
              steps: Mapping[str, float | None] | None = None, launches: int = 0) -> None:
        with self._lock:
            self._t.start(total, n_particles, dimensions, run_dir, steps, launches)
        if self._live is None:
            self._live = Live(console=self.console, get_renderable=self.render, auto_refresh=True,
                              refresh_per_second=self._refresh, transient=False,
                              vertical_overflow="ellipsis")
            self._live.start()

    def set_total(self, total: int) -> None:
        with self._lock:
            self._t.total = max(int(total), self._t.finished)

    def update(self, event: ProgressEvent) -> None:
        with self._lock:
            self._t.record(event)
        if event.kind == "message" and event.text and self._live is not None:
            self.console.print(event.text, markup=False, highlight=False)  # printed above the table

    #: Metric and bookkeeping columns: (title, width, justify left).
    _FIXED: dict[str, tuple[str, int, bool]] = {
        "particle": ("", 6, True), "it": ("it", 2, False), "status": ("status", 7, True),
        "gen": ("tok/s", 5, False), "ttft": ("TTFT", 5, False), "tpot": ("TPOT", 4, False),
        "fitness": ("fitness", 9, False), "devices": ("devices", 10, True),
    }

    def _layout(self, width: int) -> tuple[list[str], int, dict[str, int]]:
        """The columns that fit in ``width`` (dimensions named ``=<field>``), the gap between
        columns, and each column's width.

        Particle, status, fitness and every field come first (with short names, so the quick
        start's seven fields fit in 80 columns); then throughput, TPOT, TTFT, the iteration and
        the devices, while they fit. Fields that still do not fit are counted in a note.
        """
        t = self._t
        short = short_names(t.dimensions)
        widths = {c: w for c, (_, w, _) in self._FIXED.items()}
        widths["particle"] = max([len(r.label) for r in t.rows.values()] + [4])
        widths["devices"] = min(max([len(",".join(r.devices)) for r in t.rows.values()] + [7]), 24)
        if any(r.status == "replayed" for r in t.rows.values()):
            widths["status"] = 8
        for d in t.dimensions:
            seen = [len(compact_value(r.values[d], t.steps.get(d))) for r in t.rows.values() if d in r.values]
            widths[f"={d}"] = min(max([len(short[d]), 2, *seen]), 10)
        order = ["particle", "it", "status", *(f"={d}" for d in t.dimensions), "gen", "ttft", "tpot", "fitness",
                 "devices"]
        priority = ["particle", "status", "fitness", *(f"={d}" for d in t.dimensions), "gen", "tpot", "ttft", "it",
                    "devices"]
        for gap in (2, 1):
            chosen: list[str] = []
            used = -gap
            for c in priority:
                if used + gap + widths[c] <= width:
                    chosen.append(c)
                    used += gap + widths[c]
                elif c.startswith("="):
                    break  # keep the fields in order: never show a later one in place of an earlier
            if gap == 1 or all(f"={d}" in chosen for d in t.dimensions):
                break
        return [c for c in order if c in chosen], gap, widths

    def _header(self, width: int) -> Text:
        t = self._t
        counts = t.counts_text()
        clock = f"elapsed {format_duration(t.elapsed())}  ETA {format_duration(t.eta())}"
        phase = f"phase {t.phase}  " if t.phase else ""
        text = f"{phase}{counts}  {clock}"
        if len(text) > width:  # the short form, rather than a status line wrapped mid-phrase
            counts = counts.replace(" evaluations", "").replace(" running", " run")
            text = f"{t.phase or ''}  {counts}  {format_duration(t.elapsed())} ETA {format_duration(t.eta())}".strip()
        header = Text(text, no_wrap=True, overflow="ellipsis")
        if t.failures:
            header.highlight_words([f"{t.failures} failed"], style="bold red")
        return header

    def _best_line(self) -> Text:
        t = self._t
        b = t.best
        if b is None:
            return Text("best: -", style="dim", no_wrap=True, overflow="ellipsis")
        short = short_names(list(b.values))
        where = f"eval {b.eval_id}" + (f" p{b.particle}" if b.particle is not None else f" {b.phase or ''}")
        vals = " ".join(f"{short[k]}={compact_value(v, t.steps.get(k))}" for k, v in b.values.items())
        label = "recommended so far" if t.picked else "best so far"
        return Text(f"{label} {_fitness(b.fitness)} ({where.strip()}): {vals}", style="bold green",
                    no_wrap=True, overflow="ellipsis")

    def render(self) -> RenderableType:
        """The current header and table (called by rich's refresh thread, or directly)."""
        with self._lock:
            t = self._t
            width = max(self.console.width, 20)
            cols, gap, widths = self._layout(width)
            short = short_names(t.dimensions)
            hidden = [d for d in t.dimensions if f"={d}" not in cols]
            table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, gap, 0, 0), header_style="bold",
                          collapse_padding=True)
            for c in cols:
                title = short[c[1:]] if c.startswith("=") else self._FIXED[c][0]
                left = c.startswith("=") is False and self._FIXED[c][2]
                table.add_column(title, justify="left" if left else "right", no_wrap=True, overflow="ellipsis",
                                 min_width=widths[c], max_width=widths[c])
            best_id = t.best.eval_id if t.best is not None else None
            keys = self._row_order()
            shown = self._rows_that_fit(keys, max(self.console.height - 8, 3), best_id)
            for key in shown:
                row = t.rows[key]
                marked = row.eval_id is not None and row.eval_id == best_id and row.status in FINISHED_KINDS
                fit = "inf" if row.status == "failed" else _fitness(row.fitness)
                tpot = row.metrics.get("time_per_output_token")
                cells: dict[str, Any] = {
                    "particle": row.label,
                    "it": "" if row.iteration is None else str(row.iteration),
                    "status": Text(row.status, style=_STYLES.get(row.status, "")),
                    "devices": _short(",".join(row.devices), widths["devices"]),
                    "gen": _num(row.metrics.get("generate_speed"), ".0f"),
                    "ttft": _num(row.metrics.get("time_to_first_token"), ".3f"),
                    "tpot": _num(tpot * 1000 if is_finite(tpot) else tpot, ".1f"),
                    "fitness": Text(("★ " if marked else "") + fit, style="bold green" if marked else ""),
                }
                dim = "dim" if row.status in ("queued", "running") else ""
                table.add_row(*(
                    Text(compact_value(row.values[c[1:]], t.steps.get(c[1:])) if c[1:] in row.values else "",
                         style=dim) if c.startswith("=") else cells[c]
                    for c in cols))
            parts: list[RenderableType] = [
                Text(f"msopt run {t.run_dir}", style="dim", no_wrap=True, overflow="ellipsis"),
                self._header(width), self._best_line(), table]
            legend = [f"{short[d]}={d}" for d in t.dimensions if short[d] != d and d not in hidden]
            if "ttft" in cols or "tpot" in cols:
                legend.append("TTFT in s, TPOT in ms")
            if legend:
                parts.append(Text("  ".join(legend), style="dim"))
            notes = []
            if len(shown) < len(keys):
                notes.append(f"{len(keys) - len(shown)} more rows hidden (terminal too short)")
            if hidden:
                notes.append(f"{len(hidden)} more dimension{'s' if len(hidden) > 1 else ''} hidden "
                             f"(terminal too narrow): {', '.join(hidden)}")
            if t.messages:
                notes.append(_short(t.messages[-1], max(width - 2, 20)))
            if notes:
                parts.append(Text("  ".join(notes), style="dim"))
            return Group(*parts)

    def _rows_that_fit(self, keys: list[str], limit: int, best_id: int | None) -> list[str]:
        """At most ``limit`` rows: running ones, the best, then the most recently changed."""
        if len(keys) <= limit:
            return keys
        rows = self._t.rows

        def priority(key: str) -> tuple[int, int, int]:
            row = rows[key]
            return (row.status != "running", row.eval_id != best_id or best_id is None, -row.seq)

        keep = set(sorted(keys, key=priority)[:limit])
        return [k for k in keys if k in keep]

    def _row_order(self) -> list[str]:
        def order(key: str) -> tuple[int, int, str]:
            if key.startswith("p") and key[1:].lstrip("-").isdigit():
                return (1, int(key[1:]), key)
            return (0, 0, key)
        return sorted(self._t.rows, key=order)

    def close(self, summary: Mapping[str, Any] | None = None) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.refresh()
            live.stop()
            if not self.console.is_terminal:  # Live's last frame ends without a newline there
                self.console.line()
        with self._lock:
            t = self._t
            how = "finished" if summary is not None and not summary.get("interrupted") else (
                "interrupted" if summary else "stopped")
            # the table above shows the best; the command prints the verdict and the recommendation
            text = f"{how}: {t.counts_text()}; elapsed {format_duration(t.elapsed())}"
        if live is not None or summary:
            self.console.print(text, markup=False, highlight=False)
            for line in _capacity_lines(summary):
                self.console.print(line, markup=False, highlight=False)


def make_progress(plain: bool | None = None, stream: IO[str] | None = None, *,
                  environ: Mapping[str, str] | None = None) -> Progress:
    """The display for ``stream`` (default stdout).

    Plain lines when ``plain`` is true, when the stream is not a terminal, or when ``$CI`` is
    set; otherwise a live table.
    """
    out = stream if stream is not None else sys.stdout
    env = os.environ if environ is None else environ
    try:
        tty = bool(out.isatty())
    except (AttributeError, ValueError, OSError):
        tty = False
    if plain or not tty or env.get("CI"):
        return PlainLog(out)
    return LiveTable(Console(file=out))
