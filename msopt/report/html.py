"""The report page: ``report.html``, self-contained (its figures embedded as base64 PNG), and
:func:`write_report`, which writes it with the PNG files and the best configuration's launch files."""

from __future__ import annotations

import base64
import html
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msopt.errors import MsoptError
from msopt.evaluate.results import EvaluationResult
from msopt.metrics import METRICS
from msopt.report.data import (
    BEST_COMMAND_JSON,
    BEST_COMMAND_SH,
    BEST_CONFIG_JSON,
    FITNESS_PNG,
    PARALLEL_PNG,
    PARETO_PNG,
    REPORT_HTML,
    RunData,
    load_run,
)
from msopt.report.export import export_run_best
from msopt.report.figures import (
    PRIOR_PNG,
    best_id,
    fmt,
    plot_fitness,
    plot_parallel,
    plot_pareto,
    plot_prior,
    prior_summary,
)
from msopt.run.store import atomic_write

#: Rows of the top-configurations table.
TOP_ROWS = 10


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
    bid = best_id(data)
    top = out[:k]
    if bid is not None and all(r.eval_id != bid for r in top):
        top += [r for r in data.ok if r.eval_id == bid]
    return top


def _table(data: RunData, rows: list[EvaluationResult]) -> str:
    fields = [f.name for f in data.settings.fields]
    head = ["rank", "eval", "phase", "fitness", *METRICS, *fields]
    bid = best_id(data)
    out = ["<table>", "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for i, r in enumerate(rows, 1):
        cells = [f"{i}{' &#9733;' if r.eval_id == bid else ''}", _e(r.eval_id), _e(r.phase),
                 _e(fmt(r.fitness))]
        cells += [_e(fmt(r.metrics.get(m))) for m in METRICS]
        cells += [_e(fmt(r.values.get(f))) for f in fields]
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


def _prior_block(data: RunData) -> str:
    """A paragraph on the simulator prior (issue 17): how far its predictions were off."""
    summary = prior_summary(data)
    if summary is None:
        return ""

    def pct(x: Any) -> str:
        return "n/a" if x is None else f"{100 * x:.0f} %"

    return (f"<p>The simulator prior predicted every launched configuration (the journal's "
            f"<code>predicted</code> beside the measured metrics; its top predictions in <code>prior.json</code>): "
            f"median error {pct(summary['speed_error'])} on generate_speed and {pct(summary['fitness_error'])} "
            f"on fitness over {summary['launches']} successful launch(es).</p>")


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
        vals = ", ".join(f"{k}={fmt(v)}" for k, v in best["values"].items())
        fit = best.get("fitness")
        parts.append("<h2>Recommended configuration</h2>")
        mean = ""
        if best.get("mean_fitness") is not None and best.get("measurements"):
            mean = (f"; mean fitness {_e(fmt(best['mean_fitness']))} over its {_e(best['measurements'])} "
                    "measurements, the best mean of the re-measured configurations")
        parts.append(f"<p>eval {_e(best.get('eval_id'))} ({_e(best.get('phase'))}), fitness "
                     f"{_e(fmt(fit))}{mean}: <code>{_e(vals)}</code></p>")
        if command is not None:
            parts.append(f"<p>Launch it with <code>{BEST_COMMAND_SH}</code> (argv and env in "
                         f"<code>{BEST_COMMAND_JSON}</code>"
                         + (f"; the engine's configuration file in <code>{BEST_CONFIG_JSON}</code>"
                            if command.get("files") else "") + "):</p>")
            parts.append(f"<pre>{_e(command['script'])}</pre>")
    captions = {FITNESS_PNG: "Best fitness against evaluations",
                PARALLEL_PNG: "Parallel coordinates of the dimensions",
                PARETO_PNG: "generate_speed against TPOT, Pareto front",
                PRIOR_PNG: "What the simulator prior predicted"}
    parts.append(_prior_block(data))
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
    data = data if data is not None else load_run(run_dir)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MsoptError("the report needs matplotlib, which is not installed; install it with "
                         "'pip install matplotlib' (a dependency of msopt) and run 'msopt report "
                         f"{data.run_dir}'") from None
    images = {FITNESS_PNG: plot_fitness(data), PARALLEL_PNG: plot_parallel(data), PARETO_PNG: plot_pareto(data)}
    prior_png = plot_prior(data)
    if prior_png is not None:
        images[PRIOR_PNG] = prior_png
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
