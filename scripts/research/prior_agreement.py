"""Can a run tell, after its first generation, that the simulator prior is wrong about a problem?

The search bench's problems (scripts/benchmarks/bench_search), both realities: for each problem and seed,
the first generation exactly as msopt's driver builds it (lane 0 at the default configuration, lanes 1-9 at
the prior's picks, ``PriorGuide.starts``), each configuration measured once by the bench's oracle (3 %
noise, the bench's seeds), beside the prior's predicted fitness. Per problem it prints the median over
seeds of:

- rho: Spearman's rank correlation between predicted and measured fitness over the generation's feasible
  configurations (1: the prior ranks them as the measurements do);
- lost: the share of runs where a configuration the prior ranked below its top pick measured better than
  the top pick by more than twice the noise;
- best: the regret (f / f_opt - 1, noise-free) of the generation's best measured configuration, and of the
  prior's top pick;
- and msopt's share of runs within 1 % at 50 launches from docs/benchmarks.md, for comparison (not
  recomputed here).

Run from the repository root after ``pip install -e '.[bench]'``::

    python scripts/research/prior_agreement.py --seeds 20

Written up in docs/benchmarks.md, "What stops msopt on the independent reality, per problem".
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "benchmarks"))

from bench_search.methods import N_PARTICLES, _msopt_settings, _prior  # noqa: E402
from bench_search.oracle import Oracle  # noqa: E402
from bench_search.problems import PROBLEMS, selected  # noqa: E402
from bench_search.runs import table  # noqa: E402

from msopt.prior import PriorGuide  # noqa: E402

NOISE = 0.03


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN below three points."""
    if len(a) < 3:
        return math.nan

    def ranks(x: np.ndarray) -> np.ndarray:
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x), dtype=float)
        for v in np.unique(x):
            same = x == v
            r[same] = r[same].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])


def first_generation(index: int, seed: int, cache: str) -> dict[str, float]:
    """One seed's first generation of problem ``index``: its rho, lost and regrets."""
    tab = table(index, cache, True)
    settings = _msopt_settings(tab, 50, seed, "sync")
    prior = _prior(tab, settings.config)
    if prior is None:
        raise SystemExit(f"{tab.problem.name}: no prior")
    guide = PriorGuide(prior)
    default = tab.space.default_position()
    rows = [default, *guide.starts(tab.space, default, N_PARTICLES, seed)]
    oracle = Oracle(tab, seed, NOISE)
    pred, meas, true = [], [], []
    for pos in rows:
        values = tab.space.decode(np.asarray(pos, dtype=float), None).values
        f, _, _ = oracle.launch(values)
        row = oracle.launches[-1][0]  # the table row the oracle measured (-1: not a valid configuration)
        pred.append(prior.predict(values, np.asarray(pos, dtype=float)).fitness)
        meas.append(f)
        true.append(tab.fitness[row] if row >= 0 else math.inf)
    pred_a, meas_a, true_a = np.array(pred), np.array(meas), np.array(true)
    ok = np.isfinite(pred_a) & np.isfinite(meas_a)
    measured = np.where(ok, meas_a, np.inf)
    top = int(np.argmin(np.where(np.isfinite(pred_a), pred_a, np.inf)))
    best = int(np.argmin(measured))
    lost = not np.isfinite(meas_a[top]) or measured[best] < meas_a[top] * (1 - 2 * NOISE)
    return {"rho": spearman(pred_a[ok], meas_a[ok]), "lost": float(lost),
            "best": true_a[best] / tab.f_opt - 1, "top": true_a[top] / tab.f_opt - 1}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds 0..N-1 per problem")
    parser.add_argument("--problems", default="all",
                        help="indices into bench_search's PROBLEMS, comma-separated, or 'all' (but the held-out)")
    parser.add_argument("--held-out", action="store_true", help="admit the held-out problems (issue 49)")
    parser.add_argument("--cache", default=str(ROOT / ".bench_cache"), help="bench_search's table cache")
    args = parser.parse_args(argv)
    try:
        idx = selected(args.problems, args.held_out)
    except ValueError as exc:
        parser.error(str(exc))
    print("| problem | reality | rho (median [IQR]) | top pick lost by > 2 noise | regret of the generation's best "
          "(median) | regret of the prior's top pick (median) |")
    print("|---|---|---|---|---|---|")
    for i in idx:
        runs = [first_generation(i, s, args.cache) for s in range(args.seeds)]
        rho = np.array([r["rho"] for r in runs])
        q = np.nanpercentile(rho, [25, 50, 75])
        p = PROBLEMS[i]
        print(f"| {p.name} | {'independent' if p.reality == 'aic' else 'self-referential'} | {q[1]:.2f} "
              f"[{q[0]:.2f}, {q[2]:.2f}] | {np.mean([r['lost'] for r in runs]):.0%} | "
              f"{np.median([r['best'] for r in runs]):.3f} | {np.median([r['top'] for r in runs]):.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
