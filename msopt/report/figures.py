"""The report's figures, drawn with matplotlib's object API on an Agg canvas (no pyplot state):

- ``report_fitness.png``: fitness of every evaluation and the running best, failures marked;
- ``report_parallel.png``: parallel coordinates of the dimensions, coloured by fitness;
- ``report_pareto.png``: generate_speed against TPOT with the SLOs and the Pareto front;
- ``report_prior.png`` (runs with the simulator prior): its prediction error over the run;
- ``report_workload.png`` (runs on a trace): arrivals, lengths, prefix reuse (:mod:`msopt.report.workload`).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from typing import Any

from msopt.evaluate.results import EvaluationResult
from msopt.report.data import RunData
from msopt.report.workload import WorkloadPanel

#: Candidate axes with more values than this get numeric ticks instead of one label per value.
MAX_LABELLED = 12

_DPI = 100


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


def best_id(data: RunData) -> Any:
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
        lo, top = _fitness_range(ok_y, run_y)
        shown = [(x, y) for x, y in zip(ok_x, ok_y) if y <= top]
        off = [x for x, y in zip(ok_x, ok_y) if y > top]
        ax.scatter([x for x, _ in shown], [y for _, y in shown], s=14, color="tab:blue", alpha=0.45,
                   label="evaluation", zorder=2)
        ax.step(run_x, run_y, where="post", color="tab:green", lw=2, label="best so far", zorder=3)
        if off:  # a huge fitness (an SLO broken by far) would flatten everything else: mark it at the edge
            ax.scatter(off, [0.9] * len(off), marker="^", color="tab:purple", s=22, zorder=4,
                       transform=ax.get_xaxis_transform(), clip_on=False,
                       label=f"fitness above {top:.3g} ({len(off)})")
        if lo > 0 and top / lo > 30:
            ax.set_yscale("log")
        ax.set_ylim(lo / 1.3 if lo > 0 else lo - 0.1 * (top - lo) - 1e-9, top * 1.3 if top > 0 else top + 1e-9)
        bid = best_id(data)
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
    ax.set_xlabel("evaluation (eval_id, dispatch order)")
    ax.set_ylabel("fitness (lower is better)")
    ax.set_title("best fitness against evaluations")
    ax.grid(alpha=0.3)
    fig.legend(loc="lower center", ncols=4, fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.2, top=0.91)  # tight_layout costs a draw
    return _png(fig)


def _fitness_range(fits: Sequence[float], running: Sequence[float]) -> tuple[float, float]:
    """The fitness axis: from the best to the larger of the running best's start and the upper
    quartile, so the best-so-far line and most evaluations stay readable; above it: off scale."""
    ordered = sorted(fits)
    q3 = ordered[min(len(ordered) - 1, (3 * len(ordered)) // 4)]
    top = max(running[0] if running else q3, q3)
    if top <= 0 or ordered[-1] <= 10 * top:  # no outlier worth leaving out
        return ordered[0], ordered[-1]
    return ordered[0], top


def fmt(v: Any) -> str:
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
            ticks: dict[str, float] = {}
            try:
                for c in cands:
                    ticks[json.dumps(c)] = (t.encode_raw(c) - d.low) / span if span > 0 else 0.5
                spec["ticks"] = ticks
            except Exception:  # noqa: BLE001  an exotic dtype without encode_raw for its candidates: numeric ticks
                spec["ticks"] = None
        if spec["ticks"] is None:
            marks = []
            for frac in (0.0, 0.5, 1.0):
                try:
                    label = fmt(t.decode(min(max(d.low + frac * span, d.low), d.high)))
                except Exception:  # noqa: BLE001  any dtype may refuse a fraction: print the number
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
    title = "parallel coordinates of the dimensions (colour: fitness rank, grey: failed)"
    ax.set_title(title, fontsize=10)
    if n == 0 or not data.results:
        _empty(ax, "no dimension searched" if n == 0 else "no evaluation in the journal")
        return _png(fig)
    xs = list(range(n))
    failed: list[Any] = []
    ok: list[Any] = []
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
        # colour by rank: fitness spans decades (a broken SLO costs exp(penalty x excess)), and a
        # linear scale would paint every line but the worst one the same colour
        fits = [r.fitness for r, _ in ok]
        ranks = [1.0 - i / max(1, len(ok) - 1) for i in range(len(ok))]  # 0 = best
        norm = Normalize(vmin=0.0, vmax=1.0)
        cmap = colormaps["viridis_r"]
        lc = LineCollection([ln for _, ln in ok], cmap=cmap, norm=norm, linewidths=1.2, alpha=0.8, zorder=2)
        lc.set_array(ranks)
        ax.add_collection(lc)
        cb = fig.colorbar(lc, ax=ax, pad=0.01, fraction=0.03)
        ticks = [0.0, 0.25, 0.5, 0.75, 1.0]
        by_rank = sorted(fits)
        cb.set_ticks(ticks)
        cb.set_ticklabels([f"{by_rank[round(t * (len(by_rank) - 1))]:.3g}" for t in ticks])
        cb.set_label("fitness, by rank (lower is better)")
        bid = best_id(data)
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
            text = lbl if a["ticks"] is None else fmt(json.loads(lbl))
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
    ttft_slo, tpot_slo = data.config.run.slos.ttft, data.config.run.slos.tpot
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
    # the front of what a user may deploy: a point over the TTFT SLO is no trade-off
    pts = [p for _, p in within]
    front = [pts[i] for i in pareto_front(pts)]
    if front:
        ax.plot([p[0] for p in front], [p[1] for p in front], "-o", color="tab:orange", ms=7, mfc="none",
                mew=1.8, lw=1.2, label=f"Pareto front within the TTFT SLO ({len(front)})", zorder=3)
    bid = best_id(data)
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


#: The prior's figure: what the simulator predicted against what was measured.
PRIOR_PNG = "report_prior.png"


def _predicted_pairs(data: RunData, key: str) -> list[tuple[int, float, float]]:
    """(eval id, predicted, measured) of ``key`` (a metric or ``fitness``) for every launched,
    successful evaluation with a finite prediction."""
    out = []
    for r in data.results:
        if r.reused or r.failed or not r.predicted:
            continue
        pred = r.predicted.get(key)
        meas = r.fitness if key == "fitness" else r.metrics.get(key)
        if isinstance(pred, (int, float)) and isinstance(meas, (int, float)) and math.isfinite(pred) \
                and math.isfinite(meas) and meas != 0:
            out.append((r.eval_id, float(pred), float(meas)))
    return out


def plot_prior(data: RunData) -> bytes | None:
    """The simulator prior's relative prediction error over the run (generate_speed, TTFT, TPOT,
    fitness), and predicted against measured generate_speed; None when nothing was predicted."""
    if not any(r.predicted for r in data.results):
        return None
    fig = _figure(11, 4.5)
    ax, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    order = {r.eval_id: k for k, r in enumerate(x for x in data.results if not x.reused)}
    for key, marker in (("generate_speed", "o"), ("time_to_first_token", "s"), ("time_per_output_token", "^"),
                        ("fitness", "x")):
        pairs = _predicted_pairs(data, key)
        if pairs:
            ax.plot([order[p[0]] for p in pairs], [(p[1] - p[2]) / abs(p[2]) for p in pairs], marker, ms=4,
                    alpha=0.7, label=key, linestyle="none")
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xlabel("evaluation, in order (reused ones left out)")
    ax.set_ylabel("(predicted − measured) / measured")
    ax.set_title("prediction error of the simulator prior over the run")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    speed = _predicted_pairs(data, "generate_speed")
    if speed:
        ax2.scatter([p[2] for p in speed], [p[1] for p in speed], s=14, c=[p[0] for p in speed], cmap="viridis")
        lo = min(min(p[1] for p in speed), min(p[2] for p in speed))
        hi = max(max(p[1] for p in speed), max(p[2] for p in speed))
        ax2.plot([lo, hi], [lo, hi], color="0.5", lw=0.8)
        ax2.set_xlabel("measured generate_speed (tok/s)")
        ax2.set_ylabel("predicted generate_speed (tok/s)")
        ax2.set_title("predicted against measured (colour: eval id)")
    else:
        _empty(ax2, "no successful launch with a prediction")
    fig.tight_layout()
    return _png(fig)


def prior_summary(data: RunData) -> dict[str, Any] | None:
    """The median absolute relative error of the prior's predictions (generate_speed, fitness)
    and how many launches had one; None when nothing was predicted."""
    speed, fit = _predicted_pairs(data, "generate_speed"), _predicted_pairs(data, "fitness")
    if not speed and not fit:
        return None

    def med(pairs: list[tuple[int, float, float]]) -> float | None:
        errs = sorted(abs(p[1] - p[2]) / abs(p[2]) for p in pairs)
        return errs[len(errs) // 2] if errs else None

    return {"launches": max(len(speed), len(fit)), "speed_error": med(speed), "fitness_error": med(fit)}


def plot_workload(panel: WorkloadPanel) -> bytes:
    """Arrivals per second, the length histograms, and the reuse ceiling against the hits achieved."""
    reqs = panel.window.requests
    fig = _figure(14, 3.8)
    ax1, ax2, ax3, ax4 = (fig.add_subplot(1, 4, k) for k in range(1, 5))
    arrivals = [r.arrival_s for r in reqs]
    span = max(arrivals[-1], 1e-9)
    bins = max(1, min(200, math.ceil(span)))
    ax1.hist(arrivals, bins=bins, color="#4c72b0")
    ax1.set_xlabel("seconds into the replay")
    ax1.set_ylabel(f"requests per {span / bins:.3g} s")
    ax1.set_title(f"arrivals ({len(reqs)} requests)")
    for ax, key, title, colour in ((ax2, "input_tokens", "input tokens", "#55a868"),
                                   (ax3, "output_tokens", "output tokens", "#c44e52")):
        ax.hist([getattr(r, key) for r in reqs], bins=40, color=colour)
        ax.set_title(title)
        ax.set_ylabel("requests")
    ceiling = panel.summary.prefix_ceiling
    if ceiling is None and not panel.measured and not panel.predicted:
        _empty(ax4, "no hash ids:\nno prefix reuse credited")
    else:
        names, values = [], []
        for name, xs in (("ceiling", [ceiling] if ceiling is not None else []), ("measured", panel.measured),
                         ("predicted", panel.predicted)):
            if xs:
                names.append(name)
                values.append(100.0 * sorted(xs)[len(xs) // 2])
        ax4.bar(names, values, color=["0.6", "#4c72b0", "#dd8452"][:len(names)])
        ax4.set_ylim(0, 100)
        ax4.set_ylabel("% of prompt tokens (median)")
        ax4.set_title("prefix reuse: ceiling and hits")
    fig.tight_layout()
    return _png(fig)
