"""How often can msopt's race and pick choose within 1 % of the optimum, at the bench's noise, once the search
has launched it?

The search bench's problems and oracle (scripts/benchmarks/bench_search). For each problem an ideal search
launches the optimum and the K - 1 configurations nearest to it outside 1 % (the rivals that cost a pick),
once each; the rest of the budget goes to msopt's own race of the re-measurements
(:func:`msopt.run.budget.race`), and the recommendation is msopt's pick (:func:`msopt.run.budget.pick`). The
share of seeds whose pick is the optimum is what the noise leaves of a budget's picks when the search did
everything right but its best within 1 % has close rivals. It is not a bound on msopt's share, whose search
often launches several configurations within 1 %: it says how far "100 % at 50 launches" depends on that.

Run from the repository root after ``pip install -e '.[bench]'``::

    python scripts/research/pick_floor.py --problems 4,5,6,7,8,9 --budget 50 --rivals 9 --seeds 100

Written up in docs/searchers.md, "The search's early end at 50 launches (issue 49, seventh session)".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "benchmarks"))

from bench_search.oracle import Oracle  # noqa: E402
from bench_search.runs import table  # noqa: E402

from msopt.run.budget import pick, race, relative_noise  # noqa: E402

NOISE = 0.03


def contestants(fitness: Sequence[float | None], rivals: int) -> list[int]:
    """The optimum's index, then the ``rivals`` nearest to it outside 1 % (lower fitness is better)."""
    ok = sorted((i for i, f in enumerate(fitness) if f is not None), key=lambda i: (fitness[i], i))
    best = fitness[ok[0]]
    assert best is not None
    return ok[:1] + [i for i in ok if fitness[i] > 1.01 * best][:rivals]  # type: ignore[operator]


def picks_the_optimum(top: Sequence[int], measure: Callable[[int], float], budget: int) -> bool:
    """Measure each of ``top`` once (``top[0]`` the optimum), race them with the rest of ``budget``
    and pick: whether the pick is the optimum."""
    meas = {i: [measure(i)] for i in top}
    spent = len(top)
    while spent < budget:
        pair = race([(float(np.mean(meas[i])), len(meas[i])) for i in top], relative_noise(list(meas.values())))
        if pair is None:
            break
        for j in pair[: budget - spent]:
            meas[top[j]].append(measure(top[j]))
            spent += 1
    means = [(float(np.mean(meas[i])), len(meas[i])) for i in top]
    return pick(means, relative_noise(list(meas.values()))) == 0


def _launcher(t: Any, oracle: Oracle) -> Callable[[int], float]:
    return lambda i: oracle.launch(t.rows[i]["values"])[0]


def main(argv: list[str] | None = None) -> int:
    """Print each problem's rivals and the share of seeds whose pick is the optimum."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default="4,5,6,7,8,9", help="indices into the bench's PROBLEMS")
    ap.add_argument("--budget", type=int, default=50, help="launches: the contestants' first ones and the race")
    ap.add_argument("--rivals", type=int, default=9, help="configurations outside 1 %% launched beside the optimum")
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--cache", default=str(ROOT / ".bench_cache"))
    args = ap.parse_args(argv)
    print(f"problem | rivals (fitness / optimum's) | the optimum picked @{args.budget}")
    for problem in (int(p) for p in args.problems.split(",")):
        t = table(problem, args.cache)
        top = contestants([r["fitness"] for r in t.rows], args.rivals)
        best = t.rows[top[0]]["fitness"]
        wins = 0
        for seed in range(args.seeds):
            wins += picks_the_optimum(top, _launcher(t, Oracle(t, seed, NOISE)), args.budget)
        gaps = sorted({round(t.rows[i]["fitness"] / best, 3) for i in top[1:]})
        print(f"{t.problem.name} | {', '.join(map(str, gaps))} | {100 * wins // args.seeds}%", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
