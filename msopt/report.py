"""Plots and the best-configuration export of a run directory.

:func:`write_report` reads ``journal.jsonl``, ``config.toml`` and ``best.json`` and writes
``report.html`` (self-contained: its figures are embedded as base64 PNG) and the same figures as
PNG files beside it:

- ``report_fitness.png``: fitness of every evaluation and the running best, failures marked;
- ``report_parallel.png``: parallel coordinates of the dimensions, coloured by fitness;
- ``report_pareto.png``: generate_speed against TPOT with the SLOs and the Pareto front.

:func:`export_best` renders the recommended configuration with the engine adapter, exactly as a
real launch would be rendered: ``best_command.sh`` and ``best_command.json`` (argv, env) for every
engine, and ``best_config.json`` for engines configured through a file (MindIE's config.json).

Figures are drawn with matplotlib's object API on an Agg canvas: no display, no pyplot state.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msopt.results import METRICS, EvaluationResult

if TYPE_CHECKING:
    from msopt.config import Settings
    from msopt.space import SearchSpace

REPORT_HTML = "report.html"
FITNESS_PNG = "report_fitness.png"
PARALLEL_PNG = "report_parallel.png"
PARETO_PNG = "report_pareto.png"
BEST_COMMAND_SH = "best_command.sh"
BEST_COMMAND_JSON = "best_command.json"
BEST_CONFIG_JSON = "best_config.json"

#: Rows of the top-configurations table.
TOP_ROWS = 10
#: Default server ports of the engines when the configuration names none.
DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000}
#: Candidate axes with more values than this get numeric ticks instead of one label per value.
MAX_LABELLED = 12

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DPI = 100


# -- reading a run ----------------------------------------------------------------------------
@dataclass
class RunData:
    """What the report needs from a run directory."""

    run_dir: Path
    run_id: str
    settings: Settings
    space: SearchSpace
    results: list[EvaluationResult]
    best: dict[str, Any] | None
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> list[EvaluationResult]:
        """The successful evaluations, in eval order."""
        return [r for r in self.results if not r.failed]


def load_run(run_dir: str | Path) -> RunData:
    """Read a run directory.

    Raises:
        StoreError: not a run directory, or its journal is corrupt.
        ConfigError: its config.toml does not load.
    """
    from msopt.config import load_settings
    from msopt.space import SearchSpace
    from msopt.store import BEST, RunStore, StoreError

    store = RunStore.open(run_dir)
    results = sorted(store.load_journal(), key=lambda r: r.eval_id)
    settings = load_settings(str(store.config_path), environ={})
    space = SearchSpace.from_settings(settings)
    best = store.read_json(BEST)
    if best is not None and not isinstance(best, dict):
        raise StoreError(f"{store.run_dir / BEST}: not a JSON object; remove it and run 'msopt report' again")
    return RunData(store.run_dir, store.run_id, settings, space, results, best, list(store.warnings))


# -- the best configuration, ready to use ----------------------------------------------------
def launch_port(settings: Settings) -> int:
    """The port a user's server should listen on: ``[<engine>.command] port``, else the port of
    MindIE's config.json, else the engine's usual default."""
    section = settings.section(settings.engine)
    cmd = section.get("command", {})
    port = cmd.get("port") if isinstance(cmd, Mapping) else None
    if port is None and settings.engine == "mindie":
        from msopt.engines.mindie import PORT_PATH, get_path, load_config

        port = get_path(load_config(section)[0], PORT_PATH)
    try:
        value = int(port) if port is not None and not isinstance(port, bool) else None
    except (TypeError, ValueError):
        value = None
    return value if value is not None and 0 < value < 65536 else DEFAULT_PORTS.get(settings.engine, 8000)


def _comment(text: str) -> str:
    """One shell comment line: control characters (newlines above all) become spaces."""
    return "# " + "".join(c if c.isprintable() else " " for c in text)


def shell_script(argv: Sequence[str], env: Mapping[str, str], *, notes: Sequence[str] = ()) -> str:
    """A ``#!/bin/sh`` script that exports ``env`` and execs ``argv``, every item shell-quoted.

    Variables whose names a shell cannot export are left out (they are in best_command.json).
    """
    lines = ["#!/bin/sh", *(_comment(n) for n in notes)]
    skipped = [k for k in env if not _ENV_NAME.fullmatch(k)]
    if skipped:
        lines.append(_comment(f"{len(skipped)} environment variable(s) whose names sh cannot export "
                              f"are listed in {BEST_COMMAND_JSON}"))
    for k, v in env.items():
        if _ENV_NAME.fullmatch(k):
            lines.append(f"export {k}={shlex.quote(str(v))}")
    lines.append("exec " + " ".join(shlex.quote(str(a)) for a in argv))
    return "\n".join(lines) + "\n"


def export_best(settings: Settings, values: Mapping[str, Any], run_dir: str | Path, *,
                eval_id: Any = None, fitness: Any = None) -> list[Path]:
    """Render ``values`` with the engine adapter and write the ready-to-use files into ``run_dir``.

    Returns the paths written: best_command.sh, best_command.json and, for an engine configured
    through a file (MindIE), best_config.json.

    Raises:
        MsoptError: the values cannot be rendered (the configuration changed since the run, ...).
        StoreError: a file cannot be written.
    """
    from msopt.engines import get_engine
    from msopt.store import atomic_write, dumps

    out = Path(run_dir)
    engine = settings.engine
    port = launch_port(settings)
    spec = get_engine(engine).render(values, settings.fields, settings.section(engine), port=port)
    argv = [str(a) for a in spec.argv]
    env = {str(k): str(v) for k, v in spec.env.items()}
    written: list[Path] = []
    files = {str(k): v for k, v in spec.files.items()}
    notes = [f"msopt: the best configuration of run {out.name} ({engine}"
             + (f", eval {eval_id}" if eval_id is not None else "")
             + (f", fitness {fitness:.6g}" if isinstance(fitness, (int, float)) else "") + ")"]
    if files:
        target, doc = next(iter(files.items()))
        atomic_write(out / BEST_CONFIG_JSON, (dumps(doc, indent=2) + "\n").encode("utf-8"))
        written.append(out / BEST_CONFIG_JSON)
        where = target
        if engine == "mindie" and not settings.section(engine).get("config_path"):
            where = "its conf/config.json (set [mindie] config_path to have msopt edit yours)"
        notes.append(f"{engine} reads its configuration from {where}: install {BEST_CONFIG_JSON} "
                     "there (back up the original) before running this script")
    record = {"engine": engine, "argv": argv, "env": env, "port": port, "values": dict(values),
              "files": {t: BEST_CONFIG_JSON for t in list(files)[:1]}, "eval_id": eval_id,
              "fitness": fitness}
    atomic_write(out / BEST_COMMAND_SH, shell_script(argv, env, notes=notes).encode("utf-8"), mode=0o755)
    atomic_write(out / BEST_COMMAND_JSON, (dumps(record, indent=2) + "\n").encode("utf-8"))
    written[:0] = [out / BEST_COMMAND_SH, out / BEST_COMMAND_JSON]
    return written


def export_run_best(data: RunData) -> list[Path]:
    """:func:`export_best` for the run's best.json (nothing when the run has no best)."""
    if not data.best or not isinstance(data.best.get("values"), dict):
        return []
    return export_best(data.settings, data.best["values"], data.run_dir,
                       eval_id=data.best.get("eval_id"), fitness=data.best.get("fitness"))


# -- figures ------------------------------------------------------------------------------------
def _figure(width: float, height: float):  # noqa: ANN202
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=_DPI)
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:  # noqa: ANN001
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    return buf.getvalue()


def _empty(ax, text: str) -> None:  # noqa: ANN001
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=12, color="0.3")
    ax.set_xticks([])
    ax.set_yticks([])


def _best_id(data: RunData) -> Any:
    return data.best.get("eval_id") if data.best else None


def plot_fitness(data: RunData) -> bytes:
    """Fitness per evaluation in eval order, the running minimum, failures marked."""
    fig = _figure(9, 4.5)
    ax = fig.add_subplot()
    results = data.results
    if not results:
        _empty(ax, "no evaluation in the journal")
        ax.set_title("best fitness against evaluations")
        return _png(fig)
    xs = [r.eval_id for r in results]
    ok_x = [x for x, r in zip(xs, results) if not r.failed]
    ok_y = [r.fitness for r in results if not r.failed]
    run_x: list[int] = []
    run_y: list[float] = []
    best = math.inf
    for x, r in zip(xs, results):
        if not r.failed and r.fitness < best:
            best = r.fitness
        if math.isfinite(best):
            run_x.append(x)
            run_y.append(best)
    if ok_y:
        ax.scatter(ok_x, ok_y, s=14, color="tab:blue", alpha=0.45, label="evaluation", zorder=2)
        ax.step(run_x, run_y, where="post", color="tab:green", lw=2, label="best so far", zorder=3)
        lo, hi = min(ok_y), max(ok_y)
        if lo > 0 and hi / lo > 100:
            ax.set_yscale("log")
        bid = _best_id(data)
        for x, r in zip(xs, results):
            if r.eval_id == bid and not r.failed:
                ax.scatter([x], [r.fitness], s=120, marker="*", color="tab:red", zorder=4,
                           label=f"recommended (eval {bid})")
    else:
        ax.text(0.5, 0.5, "no evaluation succeeded", ha="center", va="center", transform=ax.transAxes,
                fontsize=12, color="0.3")
    fail_x = [x for x, r in zip(xs, results) if r.failed]
    if fail_x:  # at the top edge, whatever the fitness scale
        ax.scatter(fail_x, [0.97] * len(fail_x), marker="x", color="tab:red", s=30,
                   transform=ax.get_xaxis_transform(), label=f"failed ({len(fail_x)})", zorder=4,
                   clip_on=False)
    ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
    ax.margins(y=0.12)
    ax.set_xlabel("evaluation (eval_id, dispatch order)")
    ax.set_ylabel("fitness (lower is better)")
    ax.set_title("best fitness against evaluations")
    ax.grid(alpha=0.3)
    fig.legend(loc="lower center", ncols=4, fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.2, top=0.91)  # tight_layout costs a draw
    return _png(fig)


def _fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v).lower() if isinstance(v, bool) else "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _axes_model(data: RunData) -> list[dict[str, Any]]:
    """Per dimension: its bounds, and for labelled axes the normalised tick of each value."""
    axes = []
    for d in data.space.dimensions:
        t = data.space.field_type(d.name)
        span = d.high - d.low
        spec: dict[str, Any] = {"name": d.name, "dtype": d.dtype, "low": d.low, "span": span, "ticks": None}
        cands = d.candidates
        if cands is not None and d.dtype not in ("int", "float", "ratio") and len(cands) <= MAX_LABELLED:
            ticks = {}
            try:
                for c in cands:
                    ticks[json.dumps(c)] = (t.encode_raw(c) - d.low) / span if span > 0 else 0.5
            except Exception:  # an exotic dtype without encode_raw for its candidates: numeric ticks
                ticks = None
            spec["ticks"] = ticks
        if spec["ticks"] is None:
            marks = []
            for frac in (0.0, 0.5, 1.0):
                try:
                    label = _fmt(t.decode(min(max(d.low + frac * span, d.low), d.high)))
                except Exception:
                    label = f"{d.low + frac * span:.4g}"
                marks.append((frac, label))
            spec["marks"] = marks
        axes.append(spec)
    return axes


def _coords(r: EvaluationResult, axes: list[dict[str, Any]]) -> list[float] | None:
    out = []
    for i, a in enumerate(axes):
        y = None
        if a["ticks"] is not None:
            y = a["ticks"].get(json.dumps(r.values.get(a["name"])))
        if y is None:
            if i >= len(r.position) or not math.isfinite(r.position[i]):
                return None
            y = (r.position[i] - a["low"]) / a["span"] if a["span"] > 0 else 0.5
        out.append(min(max(float(y), 0.0), 1.0))
    return out


def _wrap(name: str, width: int = 16) -> str:
    """A long field name broken at underscores into lines of about ``width`` characters."""
    lines: list[str] = []
    for part in name.split("_"):
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += "_" + part
        else:
            lines.append(part if not lines else "_" + part)
    return "\n".join(lines)


def plot_parallel(data: RunData) -> bytes:
    """Parallel coordinates of the dimensions, each normalised to its bounds, coloured by fitness."""
    from matplotlib import colormaps
    from matplotlib.collections import LineCollection
    from matplotlib.colors import Normalize

    axes = _axes_model(data)
    n = len(axes)
    fig = _figure(max(7.0, 1.7 * n + 2), 5)
    ax = fig.add_subplot()
    title = "parallel coordinates of the dimensions (colour: fitness, grey: failed)"
    ax.set_title(title, fontsize=10)
    if n == 0 or not data.results:
        _empty(ax, "no dimension searched" if n == 0 else "no evaluation in the journal")
        return _png(fig)
    xs = list(range(n))
    failed, ok = [], []
    for r in data.results:
        c = _coords(r, axes)
        if c is None:
            continue
        line = list(zip(xs, c)) if n > 1 else [(-0.2, c[0]), (0.2, c[0])]
        (failed if r.failed else ok).append((r, line))
    if failed:
        ax.add_collection(LineCollection([ln for _, ln in failed], colors="0.7", linewidths=0.8,
                                         alpha=0.6, zorder=1))
    if ok:
        ok.sort(key=lambda p: -p[0].fitness)  # best drawn last, on top
        fits = [r.fitness for r, _ in ok]
        lo, hi = min(fits), max(fits)
        if hi - lo <= 1e-9 * max(1.0, abs(lo)):  # one fitness for all: a plain colour bar around it
            pad = 0.05 * max(1.0, abs(lo))
            lo, hi = lo - pad, hi + pad
        norm = Normalize(vmin=lo, vmax=hi)
        cmap = colormaps["viridis_r"]
        lc = LineCollection([ln for _, ln in ok], cmap=cmap, norm=norm, linewidths=1.2, alpha=0.8, zorder=2)
        lc.set_array(fits)
        ax.add_collection(lc)
        cb = fig.colorbar(lc, ax=ax, pad=0.01, fraction=0.03)
        cb.set_label("fitness (lower is better)")
        bid = _best_id(data)
        for r, ln in ok:
            if r.eval_id == bid:
                ax.plot(*zip(*ln), color="tab:red", lw=2.5, zorder=3)
                title += f"; red: recommended (eval {bid})"
    else:
        ax.text(0.5, 1.02, "no evaluation succeeded", ha="center", va="bottom", transform=ax.transAxes,
                color="0.3")
    for x, a in zip(xs, axes):
        ax.axvline(x, color="0.2", lw=1, zorder=0)
        marks = list(a["ticks"].items()) if a["ticks"] is not None else [(lbl, y) for y, lbl in a["marks"]]
        for lbl, y in marks:
            text = lbl if a["ticks"] is None else _fmt(json.loads(lbl))
            ax.plot([x - 0.03, x + 0.03], [y, y], color="0.2", lw=1, zorder=0)
            ax.text(x + 0.05, y, text, fontsize=7, va="center", ha="left", color="0.1", zorder=5,
                    bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.75})
    ax.set_title(title, fontsize=10)
    ax.set_xlim(-0.3, n - 0.4 if n > 1 else 0.6)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{_wrap(a['name'])}\n({a['dtype']})" for a in axes], fontsize=8)
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    fig.subplots_adjust(left=0.03, right=0.94, bottom=0.17, top=0.92)
    return _png(fig)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points (tpot, speed) no other point beats: lower TPOT and higher speed.

    Sorted by TPOT ascending; equal points keep the first.
    """
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1], i))
    front: list[int] = []
    best_speed = -math.inf
    for i in order:
        if points[i][1] > best_speed:
            front.append(i)
            best_speed = points[i][1]
    return front


def _speed_tpot(r: EvaluationResult) -> tuple[float, float] | None:
    s, t = r.metrics.get("generate_speed"), r.metrics.get("time_per_output_token")
    if isinstance(s, (int, float)) and isinstance(t, (int, float)) and math.isfinite(s) and math.isfinite(t):
        return float(t), float(s)
    return None


def plot_pareto(data: RunData) -> bytes:
    """generate_speed against TPOT, the TPOT SLO line, TTFT SLO violators hollow, the Pareto front."""
    fig = _figure(8, 5.5)
    ax = fig.add_subplot()
    ttft_slo, tpot_slo = data.settings.ttft_slo, data.settings.tpot_slo
    ax.set_title(f"generate_speed against TPOT (TPOT SLO {tpot_slo:g} s; TTFT SLO {ttft_slo:g} s: "
                 "hollow = TTFT above it)", fontsize=10)
    rows = [(r, p) for r in data.ok if (p := _speed_tpot(r)) is not None]
    if not rows:
        _empty(ax, "no successful evaluation with generate_speed and TPOT")
        return _png(fig)
    within = [(r, p) for r, p in rows if (r.metrics.get("time_to_first_token") or 0) <= ttft_slo]
    over = [(r, p) for r, p in rows if (r.metrics.get("time_to_first_token") or 0) > ttft_slo]
    if within:
        ax.scatter([p[0] for _, p in within], [p[1] for _, p in within], s=22, color="tab:blue",
                   alpha=0.6, label=f"TTFT <= {ttft_slo:g} s")
    if over:
        ax.scatter([p[0] for _, p in over], [p[1] for _, p in over], s=22, facecolors="none",
                   edgecolors="tab:blue", alpha=0.6, label=f"TTFT > {ttft_slo:g} s")
    pts = [p for _, p in rows]
    front = [pts[i] for i in pareto_front(pts)]
    ax.plot([p[0] for p in front], [p[1] for p in front], "-o", color="tab:orange", ms=7, mfc="none",
            mew=1.8, lw=1.2, label=f"Pareto front ({len(front)})", zorder=3)
    bid = _best_id(data)
    for r, p in rows:
        if r.eval_id == bid:
            ax.scatter([p[0]], [p[1]], s=160, marker="*", color="tab:red", zorder=4,
                       label=f"recommended (eval {bid})")
    if math.isfinite(tpot_slo) and tpot_slo > 0:
        ax.axvline(tpot_slo, color="tab:red", ls="--", lw=1.2, label=f"TPOT SLO {tpot_slo:g} s")
    ax.set_xlabel("time per output token, mean (s)")
    ax.set_ylabel("generate_speed (output tokens/s)")
    ax.grid(alpha=0.3)
    fig.legend(loc="lower center", ncols=3, fontsize=8, frameon=False)  # outside: never over points
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.22, top=0.92)
    return _png(fig)


# -- the HTML page ----------------------------------------------------------------------------
_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
th { background: #f0f0f0; } td.t { text-align: left; }
tr.best td { background: #fff3cd; font-weight: 600; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; white-space: pre-wrap; word-break: break-all; }
img { max-width: 100%; height: auto; border: 1px solid #ddd; }
.note { color: #8a4b00; }
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _top(data: RunData, k: int) -> list[EvaluationResult]:
    """The best ``k`` successful evaluations with distinct values; the recommended one included."""
    seen: set[str] = set()
    out: list[EvaluationResult] = []
    for r in sorted(data.ok, key=lambda r: (r.fitness, r.eval_id)):
        key = json.dumps(r.values, sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        out.append(r)
    bid = _best_id(data)
    top = out[:k]
    if bid is not None and all(r.eval_id != bid for r in top):
        top += [r for r in data.ok if r.eval_id == bid]
    return top


def _table(data: RunData, rows: list[EvaluationResult]) -> str:
    fields = [f.name for f in data.settings.fields]
    head = ["rank", "eval", "phase", "fitness", *METRICS, *fields]
    bid = _best_id(data)
    out = ["<table>", "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for i, r in enumerate(rows, 1):
        cells = [f"{i}{' &#9733;' if r.eval_id == bid else ''}", _e(r.eval_id), _e(r.phase),
                 _e(_fmt(r.fitness))]
        cells += [_e(_fmt(r.metrics.get(m))) for m in METRICS]
        cells += [_e(_fmt(r.values.get(f))) for f in fields]
        cls = ' class="best"' if r.eval_id == bid else ""
        out.append(f"<tr{cls}>" + "".join(f'<td{" class=t" if j == 2 else ""}>{c}</td>'
                                            for j, c in enumerate(cells)) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _errors(data: RunData, k: int = 8) -> str:
    counts: dict[str, int] = {}
    for r in data.results:
        if r.failed:
            text = (r.error or "").strip()
            first = text.splitlines()[0][:300] if text else "no error text"
            counts[first] = counts.get(first, 0) + 1
    if not counts:
        return ""
    items = sorted(counts.items(), key=lambda kv: -kv[1])[:k]
    rows = "".join(f"<tr><td>{n}</td><td class=t>{_e(msg)}</td></tr>" for msg, n in items)
    return f"<h2>Failures</h2>\n<table><tr><th>count</th><th>first line of the error</th></tr>{rows}</table>"


def render_html(data: RunData, images: Mapping[str, bytes], command: Mapping[str, Any] | None) -> str:
    """The report page; ``images`` (file name -> PNG bytes) are embedded as data URIs."""
    n, ok = len(data.results), len(data.ok)
    failed = n - ok
    reused = sum(r.reused for r in data.results)
    s = data.settings
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>msopt report {_e(data.run_id)}</title><style>{_CSS}</style></head><body>",
        f"<h1>msopt report: run {_e(data.run_id)}</h1>",
        f"<p>engine <b>{_e(s.engine)}</b>; {'simulated' if s.get('simulate') else 'measured'}; "
        f"{n} evaluation(s), {ok} succeeded, {failed} failed, {reused} reused; "
        f"{len(data.space.dimensions)} dimension(s); SLOs: TTFT {s.ttft_slo:g} s, TPOT {s.tpot_slo:g} s, "
        f"success rate {s.success_rate_slo:g}. Written {_e(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()))} "
        f"from <code>{_e(data.run_dir)}</code>.</p>",
    ]
    for w in data.warnings:
        parts.append(f'<p class="note">{_e(w)}</p>')
    if ok == 0:
        parts.append(f'<p class="note"><b>No evaluation succeeded</b> ({n} evaluation(s) in the journal): '
                     "there is no best configuration. See the failures below and the logs/ directory.</p>")
    best = data.best
    if best and isinstance(best.get("values"), dict):
        vals = ", ".join(f"{k}={_fmt(v)}" for k, v in best["values"].items())
        fit = best.get("fitness")
        parts.append("<h2>Recommended configuration</h2>")
        mean = ""
        if best.get("mean_fitness") is not None and best.get("measurements"):
            mean = (f"; mean fitness {_e(_fmt(best['mean_fitness']))} over its {_e(best['measurements'])} "
                    "measurements, the best mean of the re-measured configurations")
        parts.append(f"<p>eval {_e(best.get('eval_id'))} ({_e(best.get('phase'))}), fitness "
                     f"{_e(_fmt(fit))}{mean}: <code>{_e(vals)}</code></p>")
        if command is not None:
            parts.append(f"<p>Launch it with <code>{BEST_COMMAND_SH}</code> (argv and env in "
                         f"<code>{BEST_COMMAND_JSON}</code>"
                         + (f"; the engine's configuration file in <code>{BEST_CONFIG_JSON}</code>"
                            if command.get("files") else "") + "):</p>")
            parts.append(f"<pre>{_e(command['script'])}</pre>")
    captions = {FITNESS_PNG: "Best fitness against evaluations",
                PARALLEL_PNG: "Parallel coordinates of the dimensions",
                PARETO_PNG: "generate_speed against TPOT, Pareto front"}
    for name, png in images.items():
        b64 = base64.b64encode(png).decode("ascii")
        parts.append(f"<h2>{_e(captions.get(name, name))}</h2>")
        parts.append(f'<img alt="{_e(name)}" src="data:image/png;base64,{b64}">')
    parts.append("<h2>Top configurations</h2>")
    top = _top(data, TOP_ROWS)
    if top:
        parts.append("<p>Successful evaluations by fitness (lower is better), one row per distinct "
                     "configuration; &#9733; marks the recommended one (when the run re-measured its top "
                     "configurations: the one with the best mean fitness over its measurements).</p>")
        parts.append(_table(data, top))
    else:
        parts.append("<p>No evaluation succeeded.</p>")
    parts.append(_errors(data))
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p) + "\n"


def write_report(run_dir: str | Path, *, data: RunData | None = None, export: bool = True) -> Path:
    """Write report.html and its PNG files into the run directory and return the HTML path.

    With ``export`` the best configuration's launch files are (re)written too (see
    :func:`export_best`); a configuration that cannot be rendered any more is noted in the page.

    Raises:
        StoreError / ConfigError: not a readable run directory.
    """
    from msopt.errors import MsoptError
    from msopt.store import atomic_write

    data = data if data is not None else load_run(run_dir)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MsoptError("the report needs matplotlib, which is not installed; install it with "
                         "'pip install matplotlib' (a dependency of msopt) and run 'msopt report "
                         f"{data.run_dir}'") from None
    images = {FITNESS_PNG: plot_fitness(data), PARALLEL_PNG: plot_parallel(data), PARETO_PNG: plot_pareto(data)}
    for name, png in images.items():
        atomic_write(data.run_dir / name, png)
    command = None
    if data.best and isinstance(data.best.get("values"), dict):
        try:
            paths = export_run_best(data) if export else []
            sh = data.run_dir / BEST_COMMAND_SH
            if sh.is_file():
                command = {"script": sh.read_text(encoding="utf-8"),
                           "files": (data.run_dir / BEST_CONFIG_JSON) in paths
                           or (data.run_dir / BEST_CONFIG_JSON).is_file()}
        except MsoptError as exc:
            data.warnings.append(f"the best configuration could not be rendered as a launch command: {exc}")
    path = data.run_dir / REPORT_HTML
    atomic_write(path, render_html(data, images, command).encode("utf-8"))
    return path
