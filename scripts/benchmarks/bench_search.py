"""Search quality of msopt against peer optimizers on simulated tuning tasks with a known optimum.

Runs the package next to this file, scripts/benchmarks/bench_search/ (problems, oracle, methods, runs,
score, render; see its docstring for the flags):

    python scripts/benchmarks/bench_search.py [--seeds 20] [--budgets 50,200] [--jobs 2] ...
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for path in (str(HERE.parents[1]), str(HERE)):  # msopt (the repository root) and the bench_search package
    if path not in sys.path:
        sys.path.insert(0, path)

from bench_search.cli import main  # noqa: E402  (a package wins over this module of the same name)

if __name__ == "__main__":
    sys.exit(main())
