"""scripts/benchmarks/bench_search/'s scoring: the numbers docs/benchmarks.md is made of."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    """scripts/benchmarks/bench_search/score.py (the package is imported from scripts/benchmarks/, as the launcher does)."""
    scripts = str(ROOT / "scripts" / "benchmarks")
    sys.path.insert(0, scripts)
    try:
        yield importlib.import_module("bench_search.score")
    finally:
        sys.path.remove(scripts)


# true fitness per row: the optimum, a row 0.5 % worse, a row 5 % worse, a row that fails
TABLE = SimpleNamespace(fitness=np.array([1.0, 1.005, 1.05, math.inf]), f_opt=1.0, f_med=1.05)


def test_pick_decides_regret_and_within_found_does_not_depend_on_it(bench):
    launches = [(2, 1.04), (0, 1.02), (3, math.inf), (0, 0.99)]
    picked_opt = bench.score(TABLE, launches, 4, pick=0)
    assert picked_opt["regret"] == 0.0 and picked_opt["within1"] == 1.0 and picked_opt["found1"] == 1.0
    picked_worse = bench.score(TABLE, launches, 4, pick=2)
    assert picked_worse["regret"] == pytest.approx(1.0)
    assert picked_worse["within1"] == 0.0 and picked_worse["found1"] == 1.0   # found, then lost in the pick
    assert picked_worse["infeasible"] == 1 and picked_worse["duplicate"] == 1 and picked_worse["distinct"] == 3


def test_only_scored_successful_launches_count_as_found(bench):
    launches = [(2, 1.04), (-1, math.inf), (1, 1.006)]
    assert bench.score(TABLE, launches, 2)["found1"] == 0.0      # the near-optimal launch is past the budget
    assert bench.score(TABLE, launches, 3)["found1"] == 1.0      # 1.005 is within 1 %
    assert bench.score(TABLE, [(0, math.inf)], 1)["found1"] == 0.0  # a failed launch found nothing
    assert bench.score(TABLE, [], 1)["regret"] == math.inf


def test_summarize_pools_the_shares(bench):
    runs = [bench.score(TABLE, [(0, 1.0)], 1), bench.score(TABLE, [(2, 1.05)], 1)]
    s = bench.summarize(runs)
    assert s["within1"] == 0.5 and s["found1"] == 0.5 and s["n"] == 2
    assert s["median"] == pytest.approx(0.5)
