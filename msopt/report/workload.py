"""The report's workload panel and its predicted-against-measured table (issue 35 item 5).

- ``report_workload.png`` (a run on ``[workload] trace``, drawn by
  :func:`msopt.report.figures.plot_workload`): the trace window's arrivals over time
  (requests per second, as replayed: ``time_scale`` applied), its input and output length
  histograms, and the prefix-reuse ceiling (the share of hash-id blocks that repeat an earlier one:
  what an unbounded cache could reuse) against the hit rate achieved: measured
  (``prefix_cache_hit_rate`` of the launched evaluations, the server's own counters) and predicted
  (the simulator's, in the journal's ``predicted`` or, simulated, the metrics);
- :func:`predicted_rows`: every launched evaluation of a real run with the simulator prior's
  prediction beside the measurement and the relative error, for generate_speed, TTFT, TPOT and the
  prefix cache's hit rate (its error in points: a rate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from msopt.errors import ConfigError
from msopt.metrics import PREFIX_CACHE_HIT_RATE
from msopt.report.data import RunData
from msopt.workload import TraceSummary
from msopt.workload.replay import TraceWindow
from msopt.workload.resolved import ResolvedWorkload
from msopt.workload.table import workload_settings

#: The workload panel's figure.
WORKLOAD_PNG = "report_workload.png"

#: The metrics of the predicted-against-measured table: (key, heading, unit scale, unit).
COMPARED: tuple[tuple[str, str, float, str], ...] = (
    ("generate_speed", "generate_speed", 1.0, "tok/s"), ("time_to_first_token", "TTFT", 1000.0, "ms"),
    ("time_per_output_token", "TPOT", 1000.0, "ms"), (PREFIX_CACHE_HIT_RATE, "prefix cache hit rate", 100.0, "%"))


@dataclass(frozen=True)
class WorkloadPanel:
    """A run's trace, read for the report.

    Attributes:
        path: the trace file.
        window: its requests as replayed.
        summary: its statistics (as ``msopt validate`` prints them).
        measured: the launched evaluations' measured prefix-cache hit rates.
        predicted: the simulator's hit rates for them (a simulated run: its evaluations').
    """

    path: str
    window: TraceWindow
    summary: TraceSummary
    measured: tuple[float, ...]
    predicted: tuple[float, ...]


def workload_panel(data: RunData, workload: ResolvedWorkload | None = None) -> WorkloadPanel | str | None:
    """The panel of a run on a trace; a line saying why not when its trace cannot be read any more;
    None for a run without one. ``workload``: the run's, resolved once (None: resolved here from the run's
    configuration, the trace read once)."""
    section = data.config.workload
    try:
        resolved = workload if workload is not None else ResolvedWorkload.resolve(
            workload_settings(section.table, section.where()))
    except ConfigError as exc:
        return f"the workload panel is left out: {exc}"
    window, summary = resolved.window, resolved.summary
    if window is None or summary is None:
        return None
    measured: list[float] = []
    predicted: list[float] = []
    simulated = data.config.run.simulate
    for r in data.results:
        if r.reused or r.failed:
            continue
        m = r.metrics.get(PREFIX_CACHE_HIT_RATE)
        if isinstance(m, (int, float)) and math.isfinite(m):
            (predicted if simulated else measured).append(float(m))
        p = (r.predicted or {}).get(PREFIX_CACHE_HIT_RATE)
        if not simulated and isinstance(p, (int, float)) and math.isfinite(p):
            predicted.append(float(p))
    return WorkloadPanel(str(resolved.path), window, summary, tuple(measured), tuple(predicted))


def panel_text(panel: WorkloadPanel) -> list[str]:
    """The panel's lines: the trace and its summary, and the hit rates against the ceiling."""
    lines = [f"trace {panel.path} ({panel.summary.format})", *panel.summary.lines()]

    def spread(xs: Sequence[float]) -> str:
        xs = sorted(xs)
        return f"median {xs[len(xs) // 2]:.1%} (from {xs[0]:.1%} to {xs[-1]:.1%}) over {len(xs)} evaluation(s)"

    if panel.measured:
        lines.append(f"prefix cache hit rate measured by the server: {spread(panel.measured)}")
    if panel.predicted:
        lines.append(f"prefix cache hit rate the simulator predicts: {spread(panel.predicted)}")
    return lines


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def predicted_rows(data: RunData) -> list[dict[str, Any]]:
    """One row per launched, successful evaluation of a real run that has a prediction: eval id,
    phase, and per :data:`COMPARED` metric (predicted, measured, error); the error is relative
    ((predicted - measured) / measured), a hit rate's in points (predicted - measured). Empty for a
    simulated run (its measurement is the simulator's)."""
    if data.config.run.simulate:
        return []
    rows = []
    for r in data.results:
        if r.reused or r.failed or not r.predicted:
            continue
        row: dict[str, Any] = {"eval_id": r.eval_id, "phase": r.phase}
        for key, *_ in COMPARED:
            p, m = _finite(r.predicted.get(key)), _finite(r.metrics.get(key))
            err = None
            if p is not None and m is not None:
                err = p - m if key == PREFIX_CACHE_HIT_RATE else (p - m) / abs(m) if m != 0 else None
            row[key] = (p, m, err)
        rows.append(row)
    return rows


__all__ = ["COMPARED", "WORKLOAD_PNG", "WorkloadPanel", "panel_text", "predicted_rows", "workload_panel"]
