"""The report page: ``report.html``, self-contained (its figures embedded as base64 PNG), and
:func:`write_report`, which writes it with the PNG files and the best configuration's launch files."""

from __future__ import annotations

import base64
import html
import math
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msopt.errors import ConfigError, MsoptError
from msopt.evaluate import configured_num_prompts
from msopt.evaluate.results import EvaluationResult
from msopt.evaluate.results import values_key as _key
from msopt.metrics import MEASURED_COLUMNS, METRICS, SPEC_ACCEPT_LEN, fitness_text
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
    plot_workload,
    prior_summary,
)
from msopt.report.workload import COMPARED, WORKLOAD_PNG, WorkloadPanel, panel_text, predicted_rows, workload_panel
from msopt.run.leaderboard import is_measurement, weighted_mean
from msopt.run.records import ServerStarts
from msopt.run.store import atomic_write
from msopt.run.verdict import BROKEN, MET, make_verdict
from msopt.space.fields import show_value
from msopt.workload.resolved import ResolvedWorkload
from msopt.workload.table import WorkloadSettings, workload_settings

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
.verdict.ok { color: #155724; } .verdict.bad { color: #b00020; font-size: 1.15em; }
td.met { color: #155724; } td.broken { color: #b00020; font-weight: 700; }
div.wide { overflow-x: auto; max-width: 100%; }
td pre { margin: 0; padding: 0.3em; font-size: 0.95em; }
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)




def _top(data: RunData, k: int, workload: ResolvedWorkload | None = None) -> list[tuple[EvaluationResult, float, int]]:
    """One row per distinct configuration: (its representative evaluation, its mean fitness over
    its successful measurements, how many). The recommended configuration comes first (its row is
    the recommended evaluation); the others follow by mean fitness; ``k`` rows in all."""
    groups: dict[str, list[EvaluationResult]] = {}
    for r in data.ok:
        if is_measurement(r):  # not a reuse (no new measurement), not a probe at another load
            groups.setdefault(_key(r.values), []).append(r)
    bid = best_id(data)
    full = configured_num_prompts(data.config, workload)
    rows = []
    first = None
    for rs in groups.values():
        mean, n = weighted_mean(rs, full)  # the leaderboard's mean: weighted by the prompts served
        rec = next((r for r in rs if r.eval_id == bid), None)
        row = (rec or min(rs, key=lambda r: (r.fitness, r.eval_id)), mean, n)
        if rec is not None:
            first = row
        else:
            rows.append(row)
    if first is None and bid is not None:
        first = next(((r, r.fitness, 1) for r in data.ok if r.eval_id == bid), None)
    rows.sort(key=lambda t: (t[1], t[0].eval_id))
    return ([first] if first else []) + rows[: k - (1 if first else 0)]


#: Column headers with units, and how to show a metric in them.
_METRIC_COLUMNS: dict[str, tuple[str, Any]] = {
    "generate_speed": ("output tok/s", lambda v: f"{v:,.0f}"),
    "time_to_first_token": ("TTFT (ms)", lambda v: f"{v * 1000:,.0f}"),
    "time_per_output_token": ("TPOT (ms)", lambda v: f"{v * 1000:.1f}"),
    "success_rate": ("success (%)", lambda v: f"{v * 100:.4g}"),
    "throughput": ("requests/s", lambda v: f"{v:.3g}"),
    SPEC_ACCEPT_LEN: ("accept len (tokens/step)", lambda v: f"{v:.2f}"),
}


def _is_value(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _metric_cell(name: str, v: Any) -> str:
    if not _is_value(v):
        return "-"
    show = _METRIC_COLUMNS.get(name, (name, fmt))[1]
    return show(v)


def _table(data: RunData, rows: list[tuple[EvaluationResult, float, int]]) -> str:
    fields = [f.name for f in data.config.engine.fields]
    steps = {f.name: f.step for f in data.config.engine.fields}
    # a measured-only metric gets a column where one of the rows has it (speculative decoding: its acceptance length)
    metrics = [*METRICS, *(m for m in MEASURED_COLUMNS if any(_is_value(r.metrics.get(m)) for r, _, _ in rows))]
    head = ["rank", "eval", "phase", "fitness", "mean fitness (n)",
            *(_METRIC_COLUMNS.get(m, (m,))[0] for m in metrics), *fields]
    bid = best_id(data)
    out = ['<div class="wide"><table>', "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for i, (r, mean, n) in enumerate(rows, 1):
        cells = [f"{i}{' &#9733;' if r.eval_id == bid else ''}", _e(r.eval_id), _e(r.phase),
                 _e(fitness_text(r.fitness)), _e(f"{fitness_text(mean)} ({n})")]
        cells += [_e(_metric_cell(m, r.metrics.get(m))) for m in metrics]
        cells += [_e(show_value(r.values.get(f), steps.get(f)) if f in r.values else "-") for f in fields]
        cls = ' class="best"' if r.eval_id == bid else ""
        out.append(f"<tr{cls}>" + "".join(f'<td{" class=t" if j == 2 else ""}>{c}</td>'
                                            for j, c in enumerate(cells)) + "</tr>")
    out.append("</table></div>")
    return "\n".join(out)


_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def error_kind(error: str | None) -> str:
    """The kind of a failure: its first line with every number replaced by N, so "KV cache 3.2 GiB
    short" and "KV cache 0.7 GiB short" are one kind."""
    text = (error or "").strip()
    first = text.splitlines()[0] if text else "no error text"
    return _NUMBER.sub("N", first)[:300]


def _errors(data: RunData, k: int = 8) -> str:
    groups: dict[str, list[EvaluationResult]] = {}
    for r in data.results:
        if r.failed:
            groups.setdefault(error_kind(r.error), []).append(r)
    if not groups:
        return ""
    items = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    rows = []
    for kind, rs in items[:k]:
        ex = rs[0]
        rows.append(f"<tr><td>{len(rs)}</td><td class=t>{_e(kind)}</td><td class=t>eval {_e(ex.eval_id)}: "
                    f"<pre>{_e((ex.error or 'no error text').strip()[:2000])}</pre></td></tr>")
    more = len(items) - k
    tail = f"<p>{more} more kind(s) of failure: see results.csv.</p>" if more > 0 else ""
    total = sum(len(rs) for rs in groups.values())
    return (f"<h2>Failures</h2>\n<p>{total} failed evaluation(s) of {len(groups)} kind(s) (numbers in the "
            "messages shown as N), most frequent first, each with one full example.</p>\n"
            "<table><tr><th>count</th><th>kind</th><th>example</th></tr>" + "".join(rows) + "</table>" + tail)


def _verdict(data: RunData, workload: ResolvedWorkload | None = None) -> str:
    """The verdict section: the SLOs met or broken by the recommendation and by the baseline."""
    bid = best_id(data)
    best = next((r for r in data.results if r.eval_id == bid and not r.failed), None)
    mean = data.best.get("mean_fitness") if data.best else None
    n = data.best.get("measurements") if data.best else None
    v = make_verdict(data.config, data.results, best,
                     mean_fitness=mean if isinstance(mean, (int, float)) else None,
                     measurements=n if isinstance(n, int) else 1, workload=workload)
    cls = "verdict ok" if v.met else "verdict bad"
    parts = ["<h2>Verdict</h2>", f'<p class="{cls}"><b>{_e(v.headline())}</b></p>']
    failures = f"<p>{_e(v.failures[0].upper() + v.failures[1:])}.</p>" if v.failures else ""
    if best is None:
        return "\n".join([*parts, failures])
    head = "<tr><th>SLO</th><th>limit</th><th>recommended</th><th></th>"
    if v.baseline is not None:
        head += "<th>baseline</th><th></th>"
    rows = [head + "</tr>"]
    base = dict(enumerate(v.baseline_checks))
    for i, c in enumerate(v.checks):
        row = (f"<tr><td class=t>{_e(c.label)}</td><td>{_e(c.bound)}</td><td>{_e(c.measured)}</td>"
               f'<td class="{"met" if c.met else "broken"}">{MET if c.met else BROKEN}</td>')
        if v.baseline is not None:
            b = base.get(i)
            row += (f"<td>{_e(b.measured)}</td><td class=\"{'met' if b.met else 'broken'}\">"
                    f"{MET if b.met else BROKEN}</td>" if b is not None else "<td>-</td><td></td>")
        rows.append(row + "</tr>")
    parts.append("<table>" + "".join(rows) + "</table>")
    parts.append(f"<p>{_e(v.throughput_line()[0].upper() + v.throughput_line()[1:])}; "
                 f"{_e(v.fitness_line())}.</p>")
    if v.comparison_line():
        parts.append(f"<p>{_e(v.comparison_line()[0].upper() + v.comparison_line()[1:])}.</p>")
    parts.append(failures)
    return "\n".join(parts)


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


def _assumed_block(data: RunData) -> str:
    """The inputs the run's simulations assumed rather than knew (prior.json's ``assumed``, as
    ``msopt simulate --json`` lists them): borrowed efficiencies, a default acceptance length."""
    import json

    try:
        doc = json.loads((data.run_dir / "prior.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    lines = doc.get("assumed") if isinstance(doc, dict) else None
    if not isinstance(lines, list) or not lines:
        return ""
    items = "".join(f"<li>{_e(str(line))}</li>" for line in lines)
    return ("<p>Assumed inputs: the simulator's predictions (the prior's best, at the run's end) rest on these "
            "rather than on a measurement or a fit of this run's own:</p>\n"
            f'<ul class="assumed">{items}</ul>')


def _corrected_block(data: RunData) -> str:
    """The simulator's correction to the run's measured launches (prior.json's ``corrections``: the
    last one tried, as the run said it)."""
    import json

    try:
        doc = json.loads((data.run_dir / "prior.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    tried = doc.get("corrections") if isinstance(doc, dict) else None
    if not isinstance(tried, list) or not tried or not isinstance(tried[-1], dict) or "said" not in tried[-1]:
        return ""
    said = str(tried[-1]["said"])
    return f"<p>{_e(said[0].upper() + said[1:])}.</p>"


def _img(name: str, png: bytes) -> str:
    return f'<img alt="{_e(name)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def _workload(panel: WorkloadPanel | str | None, images: Mapping[str, bytes]) -> str:
    """The workload panel: the trace's summary, its figure, the hits against the ceiling."""
    if panel is None:
        return ""
    if isinstance(panel, str):
        return f'<h2>Workload</h2>\n<p class="note">{_e(panel)}</p>'
    parts = ["<h2>Workload</h2>", "<p>" + "<br>".join(_e(line) for line in panel_text(panel)) + "</p>"]
    if WORKLOAD_PNG in images:
        parts.append(_img(WORKLOAD_PNG, images[WORKLOAD_PNG]))
    return "\n".join(parts)


def _predicted_table(data: RunData) -> str:
    """Every launched evaluation of a real run: the prior's prediction beside the measurement."""
    rows = predicted_rows(data)
    if not rows:
        return ""
    shown = [c for c in COMPARED if any(row[c[0]][1] is not None or row[c[0]][0] is not None for row in rows)]
    head = "".join(f"<th>{_e(title)} predicted</th><th>measured ({_e(unit)})</th><th>error</th>"
                   for _, title, _, unit in shown)
    body = []
    for row in rows:
        cells = [f"<td>{_e(row['eval_id'])}</td>", f'<td class="t">{_e(row["phase"])}</td>']
        for key, _, scale, _ in shown:
            p, m, err = row[key]

            def num(x: Any, scale: float = scale) -> str:
                return "" if not isinstance(x, (int, float)) or not math.isfinite(x) else f"{x * scale:.4g}"

            if err is None:
                e = ""
            elif key == COMPARED[-1][0]:
                e = f"{100 * err:+.1f} pt"
            else:
                e = f"{100 * err:+.1f} %"
            cells += [f"<td>{num(p)}</td>", f"<td>{num(m)}</td>", f"<td>{e}</td>"]
        body.append("<tr>" + "".join(cells) + "</tr>")
    return ("<h2>Predicted against measured</h2>\n<p>Each launched evaluation: the simulator prior's prediction "
            "(the journal's <code>predicted</code>) beside the measurement, and the error (relative; for the hit "
            "rate, in percentage points).</p>\n"
            f'<div class="wide"><table><tr><th>eval</th><th>phase</th>{head}</tr>\n' + "\n".join(body)
            + "</table></div>")


def render_html(data: RunData, images: Mapping[str, bytes], command: Mapping[str, Any] | None,
                panel: WorkloadPanel | str | None = None, workload: ResolvedWorkload | None = None) -> str:
    """The report page; ``images`` (file name -> PNG bytes) are embedded as data URIs; ``panel``: the
    run's trace (:func:`msopt.report.workload.workload_panel`); ``workload``: the run's ``[workload]``,
    resolved once (None: resolved where the full workload's count needs it)."""
    n, ok = len(data.results), len(data.ok)
    failed = n - ok
    reused = sum(r.reused for r in data.results)
    run = data.config.run
    slos = run.slos
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>msopt report {_e(data.run_id)}</title><style>{_CSS}</style></head><body>",
        f"<h1>msopt report: run {_e(data.run_id)}</h1>",
        _verdict(data, workload),
        "<h2>Run</h2>",
        f"<p>engine <b>{_e(run.engine)}</b>; {'simulated' if run.simulate else 'measured'}; "
        f"{n} evaluation(s), {ok} succeeded, {failed} failed, {reused} reused; "
        f"{_e(ServerStarts.of(data.results).text() or 'no server started')}; "
        f"{len(data.space.dimensions)} dimension(s); SLOs: TTFT {slos.ttft:g} s, TPOT {slos.tpot:g} s, "
        f"success rate {slos.success_rate:g}. Written {_e(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()))} "
        f"from <code>{_e(data.run_dir)}</code>.</p>",
    ]
    for w in data.warnings:
        parts.append(f'<p class="note">{_e(w)}</p>')
    parts.append(_workload(panel, images))
    if ok == 0:
        parts.append(f'<p class="note"><b>No evaluation succeeded</b> ({n} evaluation(s) in the journal): '
                     "there is no best configuration. See the failures below and the logs/ directory.</p>")
    best = data.best
    if best and isinstance(best.get("values"), dict):
        steps = {f.name: f.step for f in data.config.engine.fields}
        vals = ", ".join(f"{k}={show_value(v, steps.get(k))}" for k, v in best["values"].items())
        fit = best.get("fitness")
        parts.append("<h2>Recommended configuration</h2>")
        mean = ""
        if best.get("mean_fitness") is not None and best.get("measurements"):
            mean = (f"; mean fitness {_e(fitness_text(best['mean_fitness']))} over its {_e(best['measurements'])} "
                    "measurements, the best mean of the re-measured configurations")
        parts.append(f"<p>eval {_e(best.get('eval_id'))} ({_e(best.get('phase'))}), fitness "
                     f"{_e(fitness_text(fit))}{mean}: <code>{_e(vals)}</code></p>")
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
    parts.append(_assumed_block(data))
    parts.append(_corrected_block(data))
    for name, png in images.items():
        if name == WORKLOAD_PNG:  # in the workload panel
            continue
        parts.append(f"<h2>{_e(captions.get(name, name))}</h2>")
        parts.append(_img(name, png))
    parts.append(_predicted_table(data))
    parts.append("<h2>Top configurations</h2>")
    top = _top(data, TOP_ROWS, workload)
    if top:
        parts.append("<p>One row per distinct configuration: &#9733; the recommended one first (when the run "
                     "re-measured its top configurations: the one with the best mean fitness over its "
                     "measurements), then the others by mean fitness over their measurements (lower is "
                     "better); each row shows one evaluation's metrics.</p>")
        parts.append(_table(data, top))
    else:
        parts.append("<p>No evaluation succeeded.</p>")
    parts.append(_errors(data))
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p) + "\n"


def _settings(data: RunData) -> WorkloadSettings:
    section = data.config.workload
    return workload_settings(section.table, section.where())


def _resolved(data: RunData) -> ResolvedWorkload | None:
    """The run's ``[workload]`` resolved once for the whole report; None when its trace cannot be read any more
    (the workload panel says why; the counts then take the simulator's section as written)."""
    try:
        return ResolvedWorkload.resolve(_settings(data))
    except ConfigError:
        return None


def write_report(run_dir: str | Path, *, data: RunData | None = None, export: bool = True,
                 workload: ResolvedWorkload | None = None) -> Path:
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
    workload = workload if workload is not None else _resolved(data)
    panel = workload_panel(data, workload)
    if isinstance(panel, WorkloadPanel):
        images[WORKLOAD_PNG] = plot_workload(panel)
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
    counted = workload if workload is not None else ResolvedWorkload(_settings(data))
    atomic_write(path, render_html(data, images, command, panel, counted).encode("utf-8"))
    return path
