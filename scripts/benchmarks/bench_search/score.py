"""Scoring: a run's regret from its launches and its pick, and the summary of many runs."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .problems import Table

WITHIN = 0.01  # a pick or launch within 1 % of the optimal fitness counts as a hit


def score(table: Table, launches: Sequence[tuple[int, float]], budget: int,
          pick: int | None = None) -> dict[str, float]:
    """Score a run from its launches (the first ``budget``) and its pick (default: the
    configuration of the best observed launch)."""
    launches = list(launches[:budget])
    best_row, best_obs = -1, math.inf
    for row, f in launches:
        if f < best_obs:
            best_row, best_obs = row, f
    if pick is not None:
        best_row = pick if pick >= 0 and math.isfinite(table.fitness[pick]) else -1
    if best_row < 0:
        regret = math.inf
        gap = math.inf
    else:
        f_true = float(table.fitness[best_row])
        regret = (f_true - table.f_opt) / (table.f_med - table.f_opt)
        gap = f_true / table.f_opt - 1.0
    rows = [r for r, _ in launches]
    # did the search launch (successfully) a configuration within 1 % at all, whatever the pick?
    found = any(r >= 0 and math.isfinite(f) and table.fitness[r] / table.f_opt - 1.0 <= WITHIN for r, f in launches)
    distinct = len({r for r in rows if r >= 0})
    infeasible = sum(1 for r, f in launches if not math.isfinite(f))
    seen: set[int] = set()
    dup = 0
    for r, _ in launches:
        if r >= 0 and r in seen:
            dup += 1
        seen.add(r)
    return {"regret": regret, "within1": float(gap <= WITHIN), "found1": float(found), "distinct": distinct,
            "infeasible": infeasible, "duplicate": dup, "launches": len(launches)}


def summarize(scores: Sequence[dict[str, float]]) -> dict[str, float]:
    reg = np.array([s["regret"] for s in scores], dtype=float)
    q1, med, q3 = (np.percentile(reg, [25, 50, 75], method="linear") if np.all(np.isfinite(reg))
                   else np.percentile(np.where(np.isfinite(reg), reg, 1e9), [25, 50, 75]))
    return {"median": float(med), "q1": float(q1), "q3": float(q3),
            "within1": float(np.mean([s["within1"] for s in scores])),
            "found1": float(np.mean([s["found1"] for s in scores])),
            "distinct": float(np.median([s["distinct"] for s in scores])),
            "infeasible": float(np.median([s["infeasible"] for s in scores])),
            "duplicate": float(np.median([s["duplicate"] for s in scores])),
            "launches": float(np.median([s["launches"] for s in scores])), "n": len(scores)}


def cells(scores: Mapping[tuple, list[dict[str, float]]], keys: Sequence[tuple],
          show: Callable[[dict[str, float]], str]) -> list[str]:
    """One table cell per key: ``show`` of the summary of its scores, empty without scores."""
    return [show(summarize(scores[k])) if scores.get(k) else "" for k in keys]


def fmt(x: float) -> str:
    """A regret for a table: three decimals, ``inf`` for no feasible pick."""
    if not math.isfinite(x) or x >= 1e8:
        return "inf"
    return f"{x:.3f}"
