"""The command line: ``python scripts/benchmarks/bench_search.py [flags]`` (see the package docstring)."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import __doc__ as PACKAGE_DOC
from .independent import available
from .methods import ABLATION, METHODS
from .problems import PROBLEMS, selected
from .render import ablation_table, render, splice
from .runs import ROOT, fingerprint, run_ablation, run_task, table
from .score import fmt, summarize


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(PACKAGE_DOC or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds per method and problem")
    parser.add_argument("--first-seed", type=int, default=0, help="the table's seeds: FIRST_SEED, FIRST_SEED + 1, ...")
    parser.add_argument("--budgets", default="6,10,20,50", help="launch budgets, comma-separated")
    parser.add_argument("--problems", default="all",
                        help="comma-separated indices (0-based) or 'all' (every problem but the held-out)")
    parser.add_argument("--held-out", action="store_true",
                        help="add the held-out problems to 'all' and admit them by index (issue 49: they are "
                             "looked at only at the end)")
    parser.add_argument("--methods", default="default",
                        help="comma-separated method names, 'default' (msopt, the prior alone, GPSampler, TPE, "
                             "CMA-ES, random) or 'all'")
    parser.add_argument("--no-gap", action="store_true",
                        help="score on the simulator as the prior knows it instead of the hidden reality")
    parser.add_argument("--noise", type=float, default=0.03)
    parser.add_argument("--cache", default=str(ROOT / ".bench_cache"))
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--no-result-cache", action="store_true",
                        help="run every method again instead of reading scores cached under --cache/results")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"), help="'-' for none")
    parser.add_argument("--section", default="",
                        help="write the report between the markers <!-- SECTION: begin --> and <!-- SECTION: end --> "
                             "of --out, keeping the rest of the file (default: the whole file)")
    parser.add_argument("--ablation-seeds", default="100:200",
                        help="seeds START:STOP of the msopt ablation (other seeds than the table's); 'none' skips it")
    args = parser.parse_args(argv)
    budgets = sorted(int(b) for b in args.budgets.split(","))
    try:
        problems = tuple(PROBLEMS[i] for i in selected(args.problems, args.held_out))
    except ValueError as exc:
        parser.error(str(exc))
    why = available()
    if why is not None and any(p.reality == "aic" for p in problems):
        if args.problems != "all":
            parser.error(f"--problems names problems of the independent reality, but {why}")
        print(f"  skipping the independent reality's problems: {why}", file=sys.stderr)
        problems = tuple(p for p in problems if p.reality != "aic")
    if args.methods in ("all", "default"):
        methods = tuple(m for m in METHODS if args.methods == "all" or m.default)
    else:
        names = {s.strip() for s in args.methods.split(",")}
        unknown = names - {m.name for m in METHODS}
        if unknown:
            parser.error(f"unknown method(s) {sorted(unknown)}; valid: {', '.join(m.name for m in METHODS)}")
        methods = tuple(m for m in METHODS if m.name in names)
    gap = not args.no_gap
    command = "python scripts/benchmarks/bench_search.py " + shlex.join(argv if argv is not None else sys.argv[1:])

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t_start = time.time()
    tables = {p.name: table(PROBLEMS.index(p), args.cache, gap) for p in problems}
    results: dict[tuple[str, str, int], list[dict[str, float]]] = {}
    prints = {m.name: ("" if args.no_result_cache else fingerprint(m.name)) for m in methods}
    tasks = [(PROBLEMS.index(p), m.name, seed, tuple(budgets), args.noise, args.cache, prints[m.name], gap)
             # seed-major: a run stopped early leaves whole seeds in the result cache
             for seed in range(args.first_seed, args.first_seed + args.seeds) for p in problems for m in methods]
    done: dict[tuple[str, str], int] = {}
    t_pm: dict[tuple[str, str], float] = {}

    hits: list[bool] = []
    cpu: list[float] = []

    def record(out: tuple[str, str, float, dict[int, dict[str, float]], bool]) -> None:
        pname, mname, secs, by_budget, cached = out
        hits.append(cached)
        cpu.append(secs)
        for b, sc in by_budget.items():
            results.setdefault((pname, mname, b), []).append(sc)
        done[(pname, mname)] = done.get((pname, mname), 0) + 1
        t_pm[(pname, mname)] = t_pm.get((pname, mname), 0.0) + secs
        if done[(pname, mname)] == args.seeds:
            meds = " ".join(f"@{b} {fmt(summarize(results[(pname, mname, b)])['median'])}" for b in budgets)
            log(f"  {pname:28s} {mname:28s} {t_pm[(pname, mname)]:6.1f} s  median regret {meds}")

    if args.jobs <= 1:
        for task in tasks:
            record(run_task(task))
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=args.jobs) as ex:
            for out in ex.map(run_task, tasks, chunksize=1):
                record(out)
    args.cache_note = (f"{sum(hits)} of {len(hits)} (problem, method, seed) runs were read from the result cache, "
                       f"stored by identical code (see `runs.fingerprint`); computing every run takes "
                       f"{sum(cpu) / 60:.0f} CPU-minutes (`--no-result-cache`)." if any(hits) else
                       f"Every run computed afresh: {sum(cpu) / 60:.0f} CPU-minutes.")
    args.ablation = None
    if args.ablation_seeds != "none":
        try:
            start, stop = (int(x) for x in args.ablation_seeds.split(":"))
        except ValueError:
            parser.error(f"--ablation-seeds must be START:STOP or 'none', got {args.ablation_seeds!r}")
        log(f"  ablation: {len(ABLATION)} msopt variants on seeds {start}..{stop - 1}")
        args.ablation_range = (start, stop)
        args.ablation = ablation_table(run_ablation(range(start, stop), budgets, problems, args.cache, args.jobs,
                                                    gap), budgets)
    text = render(tables, results, methods, budgets, args, command, time.time() - t_start)
    print(text)
    if args.out != "-" and args.section:  # a section of a larger page: its headings one level down
        splice(Path(args.out), args.section,
               "\n".join("#" + line if line.startswith("#") else line for line in text.splitlines()))
    elif args.out != "-":
        Path(args.out).write_text(text, encoding="utf-8")
    return 0
