"""What the user sees while a run goes on: a live table on a terminal, plain lines elsewhere.

The run loop sends typed events (:mod:`msopt.run.events`) to its callbacks; :class:`ProgressCallback`
is the one that turns them into :class:`ProgressEvent` objects for a :class:`Progress`. ``update``
only records (under a lock) and never renders: :class:`LiveTable` draws in rich's refresh thread at
most a few times a second, :class:`PlainLog` writes and flushes one line per event. The tracker
both share is :mod:`msopt.cli.tracker`.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from msopt.checks import is_finite
from msopt.cli.tracker import (
    _STYLES,
    EVENT_KINDS,
    FINISHED_KINDS,
    ProgressEvent,
    _capacity_lines,
    _first_line,
    _fitness,
    _num,
    _short,
    _Tracker,
    _value,
    compact_value,
    short_names,
)
from msopt.metrics import fitness_text
from msopt.run.durations import estimate_eta, format_duration  # re-exported: part of this module's API
from msopt.run.events import (
    Finished,
    Note,
    PhaseStarted,
    Picked,
    Queued,
    RunEnded,
    RunEvent,
    Running,
    RunStarted,
    TotalChanged,
)
from msopt.run.records import capacity_line, load_text, sizing_line
from msopt.space.fields import show_value

__all__ = ["EVENT_KINDS", "FINISHED_KINDS", "LiveTable", "PlainLog", "Progress", "ProgressCallback", "ProgressEvent",
           "compact_value", "estimate_eta", "format_duration", "make_progress", "progress_event", "short_names"]


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



class _Tracked(Progress):
    """A display of what a :class:`_Tracker` records, under a lock."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._lock = threading.Lock()
        self._t = _Tracker(clock)

    def set_total(self, total: int) -> None:
        with self._lock:
            self._t.total = max(int(total), self._t.finished)


class PlainLog(_Tracked):
    """One plain, flushed line per event: for pipes, CI and ``ray job submit`` logs."""

    def __init__(self, stream: IO[str] | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        self._stream = stream
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
        parts = [_event_head(ev), *_event_metrics(ev)]
        if ev.replayed:
            parts.append("(replayed from the journal)")
        if ev.kind != "running" or ev.values:
            parts.extend(f"{k}={show_value(v, self._t.steps.get(k)) if isinstance(v, (bool, float)) else _value(v, 40)}"
                         for k, v in ev.values.items())
        parts.extend(_event_notes(ev))
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


def _event_head(ev: ProgressEvent) -> str:
    """``eval 7 search p2 it1 done``: the evaluation, its stage, particle (a capacity configuration's rank
    and probe) and the event's kind."""
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
    return " ".join(head)


def _event_metrics(ev: ProgressEvent) -> list[str]:
    """A finished evaluation's fitness (a failure's only when finite) and its throughput, TTFT and TPOT."""
    if ev.kind not in ("done", "reused", "failed"):
        return []
    parts = []
    if ev.kind != "failed" or is_finite(ev.fitness):
        parts.append(f"fitness={fitness_text(ev.fitness, '.4f')}")
    m = ev.metrics
    if any(m.get(k) is not None for k in ("generate_speed", "time_to_first_token", "time_per_output_token")):
        parts.append(f"gen={_num(m.get('generate_speed'), '.1f')} tok/s "
                     f"ttft={_num(m.get('time_to_first_token'), '.3f')}s "
                     f"tpot={_num(m.get('time_per_output_token'), '.3f')}s")
    return parts


def _event_notes(ev: ProgressEvent) -> list[str]:
    """What follows an evaluation's values: its devices, a failure's first error line, a capacity probe's
    text, where a reused result came from."""
    parts = []
    if ev.devices:
        parts.append("devices=" + ",".join(str(d) for d in ev.devices))
    if ev.kind == "failed" and ev.error:
        parts.append(f"error={_first_line(ev.error)}")
    if ev.phase == "capacity" and ev.text:
        parts.append(ev.text)
    if ev.kind == "reused" and ev.text:
        parts.append(f"({_short(ev.text, 80)})")
    return parts


class LiveTable(_Tracked):
    """A rich live table, one row per particle plus one per non-swarm stage.

    Rendering happens in rich's refresh thread (``refresh_per_second``, default 4 Hz);
    :meth:`update` only records under a lock.
    """

    def __init__(self, console: Console | None = None, *, refresh_per_second: float = 4.0,
                 clock: Callable[[], float] = time.monotonic, slo_metrics: Sequence[str] = ()) -> None:
        """``slo_metrics``: the TTFT and TPOT statistics the SLOs hold (``ttft_p99``; default the means),
        shown in the TTFT and TPOT columns."""
        self.console = console if console is not None else Console()
        self._metric = {"gen": "generate_speed", "ttft": "time_to_first_token", "tpot": "time_per_output_token"}
        for name in slo_metrics:
            key = "ttft" if name.startswith(("ttft", "time_to_first")) else "tpot"
            self._metric[key] = name
        self._refresh = min(max(float(refresh_per_second), 0.5), 4.0)
        super().__init__(clock)
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

    def _title(self, c: str) -> str:
        """A metric column's title: ``TTFT``, or ``TTFT p99`` when the SLO holds a percentile."""
        title = self._FIXED[c][0]
        stat = self._metric.get(c, "").rpartition("_")[2]
        return f"{title} {stat}" if c in ("ttft", "tpot") and stat.startswith("p") and stat[1:].isdigit() else title

    def _layout(self, width: int) -> tuple[list[str], int, dict[str, int]]:
        """The columns that fit in ``width`` (dimensions named ``=<field>``, all of them in one
        ``config`` column when they do not fit apart), the gap between columns, and each column's width.

        Particle, status, fitness and the metrics the SLOs and the fitness judge (throughput, TTFT,
        TPOT) come first and are never dropped for a field; then every field with a short name (the
        quick start's seven fit beside them in 80 columns), else all of them in one compact
        configuration column; then the iteration and the devices, while they fit.
        """
        t = self._t
        short = short_names(t.dimensions)
        widths = {c: w for c, (_, w, _) in self._FIXED.items()}
        for c in ("ttft", "tpot"):
            widths[c] = max(widths[c], len(self._title(c)))
        widths["particle"] = max([len(r.label) for r in t.rows.values()] + [4])
        widths["devices"] = min(max([len(",".join(r.devices)) for r in t.rows.values()] + [7]), 24)
        if any(r.status == "replayed" for r in t.rows.values()):
            widths["status"] = 8
        for d in t.dimensions:
            seen = [len(compact_value(r.values[d], t.steps.get(d))) for r in t.rows.values() if d in r.values]
            widths[f"={d}"] = min(max([len(short[d]), 2, *seen]), 10)
        judged = ["particle", "status", "fitness", "gen", "ttft", "tpot"]
        fields = [f"={d}" for d in t.dimensions]
        order = ["particle", "it", "status", *fields, "config", "gen", "ttft", "tpot", "fitness", "devices"]

        def cost(cols: Sequence[str], gap: int) -> int:
            return sum(widths[c] for c in cols) + gap * max(len(cols) - 1, 0)

        for gap in (2, 1):
            if cost([*judged, *fields], gap) <= width:
                chosen = [*judged, *fields]
                break
        else:  # the fields give way first: all of them in one column, cut at its width
            gap = 1
            while len(judged) > 3 and cost(judged, gap) + gap + 8 > width:
                judged.pop()  # narrower than any terminal: the metrics last
            widths["config"] = max(width - cost(judged, gap) - gap, 8)
            chosen = [*judged, "config"] if t.dimensions else judged
        for c in ("it", "devices"):
            if cost([*chosen, c], gap) <= width:
                chosen.append(c)
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
                title = short[c[1:]] if c.startswith("=") else "config" if c == "config" else self._title(c)
                left = c == "config" or (c.startswith("=") is False and self._FIXED[c][2])
                table.add_column(title, justify="left" if left else "right", no_wrap=True, overflow="ellipsis",
                                 min_width=widths[c], max_width=widths[c])
            best_id = t.best.eval_id if t.best is not None else None
            keys = self._row_order()
            shown = self._rows_that_fit(keys, max(self.console.height - 8, 3), best_id)
            for key in shown:
                row = t.rows[key]
                marked = row.eval_id is not None and row.eval_id == best_id and row.status in FINISHED_KINDS
                fit = "inf" if row.status == "failed" else _fitness(row.fitness)
                tpot = row.metrics.get(self._metric["tpot"])
                dim = "dim" if row.status in ("queued", "running") else ""
                cells: dict[str, Any] = {
                    "particle": row.label,
                    "it": "" if row.iteration is None else str(row.iteration),
                    "status": Text(row.status, style=_STYLES.get(row.status, "")),
                    "devices": _short(",".join(row.devices), widths["devices"]),
                    "gen": _num(row.metrics.get(self._metric["gen"]), ".0f"),
                    "ttft": _num(row.metrics.get(self._metric["ttft"]), ".3f"),
                    "config": Text(" ".join(f"{short[d]}={compact_value(row.values[d], t.steps.get(d))}"
                                            for d in t.dimensions if d in row.values), style=dim),
                    "tpot": _num(tpot * 1000 if is_finite(tpot) else tpot, ".1f"),
                    "fitness": Text(("★ " if marked else "") + fit, style="bold green" if marked else ""),
                }
                table.add_row(*(
                    Text(compact_value(row.values[c[1:]], t.steps.get(c[1:])) if c[1:] in row.values else "",
                         style=dim) if c.startswith("=") else cells[c]
                    for c in cols))
            parts: list[RenderableType] = [
                Text(f"msopt run {t.run_dir}", style="dim", no_wrap=True, overflow="ellipsis"),
                self._header(width), self._best_line(), table]
            legend = [f"{short[d]}={d}" for d in t.dimensions if short[d] != d]
            if "ttft" in cols or "tpot" in cols:
                legend.append("TTFT in s, TPOT in ms")
            if legend:
                parts.append(Text("  ".join(legend), style="dim"))
            notes = []
            if len(shown) < len(keys):
                notes.append(f"{len(keys) - len(shown)} more rows hidden (terminal too short)")
            if hidden:
                notes.append(f"{len(hidden)} field{'s' if len(hidden) > 1 else ''} in one column (terminal too "
                             "narrow for a column each)")
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
                  environ: Mapping[str, str] | None = None, slo_metrics: Sequence[str] = ()) -> Progress:
    """The display for ``stream`` (default stdout).

    Plain lines when ``plain`` is true, when the stream is not a terminal, or when ``$CI`` is
    set; otherwise a live table, whose TTFT and TPOT columns show ``slo_metrics`` (the statistics
    the SLOs hold, :class:`LiveTable`).
    """
    out = stream if stream is not None else sys.stdout
    env = os.environ if environ is None else environ
    try:
        tty = bool(out.isatty())
    except (AttributeError, ValueError, OSError):
        tty = False
    if plain or not tty or env.get("CI"):
        return PlainLog(out)
    return LiveTable(Console(file=out), slo_metrics=slo_metrics)


class ProgressCallback:
    """The run loop's callback for a progress display: each typed event
    (:mod:`msopt.run.events`) as the :class:`ProgressEvent` the display shows, and the run's start,
    total and end as :meth:`Progress.start`, :meth:`~Progress.set_total` and :meth:`~Progress.close`.

    Args:
        progress: the display.
        run_dir: the run directory, shown by the display.
    """

    def __init__(self, progress: Progress, run_dir: str = "") -> None:
        self.progress = progress
        self.run_dir = run_dir
        self.closed = False

    def on_event(self, event: RunEvent) -> None:
        """Show one event of the run."""
        p = self.progress
        if isinstance(event, RunStarted):
            p.start(total=event.total, n_particles=event.n_particles, dimensions=list(event.dimensions),
                    run_dir=self.run_dir, steps=dict(event.steps), launches=event.launches)
        elif isinstance(event, TotalChanged):
            p.set_total(event.total)
        elif isinstance(event, RunEnded):
            o = event.outcome
            self.close({"best": o.best, "evaluations": o.evaluations, "failures": o.failures, "reused": o.reused,
                        "launches": o.launches, "run_dir": self.run_dir,
                        "capacity": [capacity_line(c) for c in o.capacity]
                        + [line for line in [sizing_line(o.capacity)] if line]})
        else:
            shown = progress_event(event)
            if shown is not None:
                p.update(shown)

    def close(self, summary: Mapping[str, Any] | None) -> None:
        """Close the display once (the run ended, was interrupted: ``{"interrupted": True}``, or
        stopped by an error: None)."""
        if not self.closed:
            self.closed = True
            self.progress.close(summary)


def progress_event(event: RunEvent) -> ProgressEvent | None:
    """The :class:`ProgressEvent` a display shows for ``event`` (None: nothing to show)."""
    if isinstance(event, PhaseStarted):
        return ProgressEvent("phase", phase=event.phase, text=event.text)
    if isinstance(event, Note):
        return ProgressEvent("message", text=event.text)
    if isinstance(event, Queued):
        return ProgressEvent("queued", eval_id=event.eval_id, phase=event.phase, particle=event.particle,
                             iteration=event.iteration, values=dict(event.values), text=load_text(event.load))
    if isinstance(event, Running):
        return ProgressEvent("running", eval_id=event.eval_id, phase=event.phase, particle=event.particle,
                             iteration=event.iteration, devices=list(event.devices))
    if isinstance(event, Finished):
        r = event.result
        return ProgressEvent(event.kind, eval_id=r.eval_id, phase=r.phase, particle=r.particle,
                             iteration=r.iteration, values=r.values, metrics=r.metrics, fitness=r.fitness,
                             devices=r.devices, error=r.error, text=load_text(r.load), replayed=event.replayed,
                             launched=event.launched, server=None if r.reused else r.server)
    if isinstance(event, Picked):
        r = event.result
        return ProgressEvent("pick", eval_id=r.eval_id, phase=r.phase, particle=r.particle, iteration=r.iteration,
                             values=r.values, fitness=r.fitness)
    return None
