"""Does msopt miss the optimum because its search never launched it, or because its pick chose another?

The search bench's problems and oracle (scripts/benchmarks/bench_search), msopt with the fixed prior exactly
as the bench runs it (``run_msopt`` with ``FIXED_PRIOR``): for each problem and launch budget, over seeds
FIRST..FIRST+SEEDS-1, the share of runs whose pick is within 1 % of the optimum ("picked", the bench's
``<=1%``, floored here) and the share that launched such a configuration at all ("found"). ``found -
picked`` is what the pick lost to the noise.

``--seed-offset K`` runs msopt with seed ``s + K`` against the oracle of seed ``s``: the same measurement
noise, another draw of msopt's own randomness (its prior search, explore lanes, swarm and TPE). The spread
between offsets is the run-to-run variance a change of the search must beat before its figures mean
anything (docs/searchers.md, "Tried in the sixth session").

Run from the repository root after ``pip install -e '.[bench]'``::

    python scripts/research/found_picked.py --problems 4,5,6,7,8,9 --budgets 20,50 --seeds 24

Written up in docs/searchers.md, "The simulator corrected by the measurements (issue 49, third session)".
"""

from __future__ import annotations

import argparse
import sys
from multiprocessing import Pool
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "benchmarks"))

from bench_search.methods import FIXED_PRIOR, run_msopt  # noqa: E402
from bench_search.oracle import Oracle  # noqa: E402
from bench_search.runs import table  # noqa: E402

NOISE = 0.03


def _one(task: tuple[int, int, int, str, int]) -> tuple[int, int, bool, bool]:
    """(problem, budget, found, picked) of one run: (problem, budget, seed, cache, msopt's seed offset)."""
    problem, budget, seed, cache, offset = task
    t = table(problem, cache)
    best = min(r["fitness"] for r in t.rows if r["fitness"] is not None)

    def within(row: int) -> bool:
        return row >= 0 and t.rows[row]["fitness"] is not None and t.rows[row]["fitness"] <= 1.01 * best

    launches, pick = run_msopt(t, Oracle(t, seed, NOISE), budget, seed + offset, variant=FIXED_PRIOR)
    return problem, budget, any(within(row) for row, _ in launches), within(pick)


def main(argv: list[str] | None = None) -> int:
    """Print picked / found per problem and budget."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default="4,5,6,7,8,9", help="indices into the bench's PROBLEMS")
    ap.add_argument("--budgets", default="20,50")
    ap.add_argument("--seeds", type=int, default=24)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--cache", default=str(ROOT / ".bench_cache"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed-offset", type=int, default=0,
                    help="msopt runs with seed + this against the same oracle noise (0: the bench's pairing)")
    args = ap.parse_args(argv)
    problems = [int(p) for p in args.problems.split(",")]
    budgets = [int(b) for b in args.budgets.split(",")]
    tasks = [(p, b, s, args.cache, args.seed_offset) for p in problems for b in budgets
             for s in range(args.first_seed, args.first_seed + args.seeds)]
    with Pool(args.jobs) as pool:
        runs = pool.map(_one, tasks, chunksize=4)
    print("problem | " + " | ".join(f"picked / found @{b}" for b in budgets))
    for p in problems:
        cells = []
        for b in budgets:
            mine = [r for r in runs if r[0] == p and r[1] == b]
            picked, found = (100 * sum(r[k] for r in mine) // len(mine) for k in (3, 2))
            cells.append(f"{picked} / {found} %")
        print(f"{table(p, args.cache).problem.name} | " + " | ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
