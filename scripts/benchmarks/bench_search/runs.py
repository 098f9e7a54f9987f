"""Running the benchmark: one task per (problem, method, seed) or (problem, ablation row, mode,
seed), in this process or in worker processes (``--jobs``), with the problem tables and each
run's launches cached under ``--cache``.

The result cache: a run's launches and pick are stored under ``<cache>/results/<fingerprint>/``
and read back while nothing they depend on has changed (:func:`fingerprint`); scores are always
computed afresh.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
import time
import warnings
from collections.abc import Sequence
from functools import cache
from importlib import metadata
from pathlib import Path

from . import independent as independent_mod
from . import methods as methods_mod
from . import oracle as oracle_mod
from . import problems as problems_mod
from .methods import ABLATION, METHODS, N_PARTICLES, REFINE_TOP_K, Launches, run_msopt
from .oracle import Oracle
from .problems import PROBLEMS, SGLANG_TEMPLATE, TEMPLATE, Gap, Problem, Table
from .score import score

ROOT = Path(__file__).resolve().parents[3]

#: msopt's files a method's result depends on: every method's (space, objective, results) and,
#: for msopt's own methods, the search, the driver and its parts, the defaults and the evaluator.
_COMMON_FILES = ("msopt/space/*.py", "msopt/evaluate/objective.py", "msopt/evaluate/results.py",
                 "msopt/metrics.py")
_MSOPT_FILES = ("msopt/search/*.py", "msopt/run/driver.py", "msopt/run/dispatcher.py", "msopt/run/leaderboard.py",
                "msopt/run/stages.py", "msopt/run/budget.py", "msopt/run/pool.py", "msopt/config/*.py",
                "msopt/config/*.toml",
                "msopt/evaluate/evaluator.py", "msopt/prior/*.py", "msopt/run/guide.py", "msopt/evaluate/simulated.py",
                "msopt/sim/*.py", "msopt/sim/catalog/*/*.toml", "msopt/engines/*.py")

#: The msopt-side helpers of methods.py that msopt's own methods depend on.
_MSOPT_HELPERS = ("run_msopt", "run_prior_alone", "_InOrderPool", "Variant", "_msopt_settings", "_pick", "_prior",
                  "_prior_memo", "_ng_run", "_optuna_quiet", "generic_hardware")


@cache
def table(index: int, cache_dir: str, gap: bool = True) -> Table:
    """Problem ``index``'s table (built once per process; cached on disk under ``cache_dir``):
    its hidden reality (:class:`Gap`) by default, else the simulator as the prior knows it."""
    problem = PROBLEMS[index]
    return Table(problem, Path(cache_dir), lambda msg: print(msg, file=sys.stderr, flush=True),
                 Gap.of(problem) if gap and problem.reality == "self" else None)


@cache
def fingerprint(method_name: str) -> str:
    """A hash of everything a method's result depends on: its code, the shared code of the
    benchmark (problems, oracle, the problem template), msopt's space/objective (and search,
    driver and defaults for msopt's own methods), the peers' versions."""
    method = next(m for m in METHODS if m.name == method_name)
    h = hashlib.sha256()
    for mod in (problems_mod, oracle_mod, independent_mod):
        h.update(inspect.getsource(mod).encode())
    h.update(TEMPLATE.read_bytes() + SGLANG_TEMPLATE.read_bytes())
    h.update(inspect.getsource(methods_mod._decode_values).encode())
    h.update(inspect.getsource(methods_mod._Penalty).encode())
    h.update(method.name.encode())
    source = inspect.getsource(method.run)
    h.update(source.encode())
    for name in _MSOPT_HELPERS:
        if name in source or method.name.startswith("msopt"):
            h.update(inspect.getsource(getattr(methods_mod, name)).encode())
    h.update(repr((N_PARTICLES, REFINE_TOP_K)).encode())
    files = _COMMON_FILES + (_MSOPT_FILES if method.name.startswith("msopt") else ())
    for pattern in files:
        for f in sorted(ROOT.glob(pattern)):
            h.update(f.read_bytes())
    for dist in ("optuna", "cmaes", "nevergrad", "pyswarms", "numpy"):
        try:
            h.update(f"{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            pass
    return h.hexdigest()[:16]


def run_task(task: tuple) -> tuple[str, str, float, dict[int, dict[str, float]], bool]:
    """One (problem, method, seed) at every budget; runs in a worker process with --jobs.

    Returns (problem, method, seconds, budget -> score, whether it was read from the result
    cache); ``task``'s fingerprint is computed once, in the main process ("" for no cache)."""
    index, mname, seed, budgets, noise, cache_dir, fp, gap = task
    # nevergrad clips the penalty told for a failure (10 x the worst fitness) at 5e20, once per tell
    warnings.filterwarnings("ignore", message="Clipping very high value")
    tab = table(index, cache_dir, gap)
    method = next(m for m in METHODS if m.name == mname)
    path = None
    runs: dict[int, tuple[Launches, int | None]] | None = None
    secs = 0.0
    cached = False
    if fp:
        tag = hashlib.sha256(repr((tab.problem.key, tab.gap, mname, seed, budgets, noise)).encode()).hexdigest()[:16]
        path = Path(cache_dir) / "results" / fp / f"{tag}.json"
        if path.exists():
            got = json.loads(path.read_text(encoding="utf-8"))
            secs = got["seconds"]
            runs = {int(b): ([tuple(x) for x in r["launches"]], r["pick"]) for b, r in got["runs"].items()}
            cached = True
    if runs is None:
        t0 = time.time()
        runs = {}
        if method.budget_free:
            oracle = Oracle(tab, seed, noise)
            method.run(tab, oracle, max(budgets), seed)
            for b in budgets:
                runs[b] = (oracle.launches[:b], None)
        else:
            for b in budgets:
                oracle = Oracle(tab, seed, noise)
                out = method.run(tab, oracle, b, seed)
                runs[b] = out if out is not None else (oracle.launches, None)
        secs = time.time() - t0
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            data = {"seconds": secs, "runs": {b: {"launches": [list(x) for x in la], "pick": pk}
                                              for b, (la, pk) in runs.items()}}
            tmp.write_text(json.dumps(data), encoding="utf-8")
            os.replace(tmp, path)
    by_budget = {b: score(tab, la, b, pk) for b, (la, pk) in runs.items()}
    return tab.problem.name, mname, secs, by_budget, cached


def ablation_task(task: tuple) -> tuple[int, str, dict[int, dict[str, float]]]:
    """One (problem, ablation row, mode, seed) at every budget."""
    index, row, mode, seed, budgets, cache_dir, gap = task
    noise, _, variant = ABLATION[row]
    tab = table(index, cache_dir, gap)
    out = {}
    for b in budgets:
        oracle = Oracle(tab, seed, noise)
        launches, pick = run_msopt(tab, oracle, b, seed, mode=mode, variant=variant)
        out[b] = score(tab, launches, b, pick)
    return row, mode, out


def run_ablation(seeds: range, budgets: Sequence[int], problems: Sequence[Problem], cache_dir: str,
                 jobs: int, gap: bool = True) -> dict[tuple[int, str, int], list[dict[str, float]]]:
    """Run every ablation row on ``seeds``: (row, mode, budget) -> the scores of its runs."""
    tasks = [(PROBLEMS.index(p), row, mode, seed, tuple(budgets), cache_dir, gap)
             for row, (_, modes, _) in enumerate(ABLATION) for mode in modes for p in problems for seed in seeds]
    got: dict[tuple[int, str, int], list[dict[str, float]]] = {}
    if jobs <= 1:
        for row, mode, by_budget in map(ablation_task, tasks):
            for b, sc in by_budget.items():
                got.setdefault((row, mode, b), []).append(sc)
        return got
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs) as ex:
        for row, mode, by_budget in ex.map(ablation_task, tasks, chunksize=8):
            for b, sc in by_budget.items():
                got.setdefault((row, mode, b), []).append(sc)
    return got
