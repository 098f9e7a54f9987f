"""Hours to a tuned configuration on a simulated cluster of 4 nodes × 8 devices (issue 38 item 4).

Runs scripts/benchmarks/bench_search/hours.py (its docstring says what is modelled and from which sources)
on the independent reality's problems (NVIDIA AIConfigurator; ``pip install -e '.[bench]'``):

    python scripts/benchmarks/bench_hours.py [--problems 4,5,6] [--seeds 20] [--jobs 1] [--out docs/benchmarks.md]

``--out`` writes the tables between the markers ``<!-- bench_hours: begin -->`` and
``<!-- bench_hours: end -->`` of that file (scripts/benchmarks/bench_search.py keeps them when it rewrites
the file); '-' prints them only.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
for path in (str(HERE.parents[1]), str(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)

from bench_search.hours import (  # noqa: E402
    CAPTURE_S,
    COMPILE_S,
    DEVICES_PER_NODE,
    GOAL,
    LOAD_GIB_S,
    NODES,
    PROMPTS,
    Costs,
    measure,
)
from bench_search.independent import available  # noqa: E402
from bench_search.problems import PROBLEMS, selected  # noqa: E402
from bench_search.runs import ROOT, table  # noqa: E402

BEGIN, END = "<!-- bench_hours: begin -->", "<!-- bench_hours: end -->"
ORDER = ("msopt", "msopt serial", "original tool", "auto_tune grid", "Optuna TPE")


def _task(task: tuple) -> tuple[int, int, dict]:
    index, seed, noise, cache = task
    return index, seed, measure(table(index, cache, False), seed, noise)


def _median(xs: Sequence[float]) -> float:
    import numpy as np

    return float(np.median(xs))


def render(got: dict[int, list[dict]], command: str, cache: str) -> str:
    """The Markdown section: a headline table and one table per problem."""
    lines = [BEGIN, "## Hours to a tuned configuration (simulated cluster)", "",
             f"Command: `{command}` (after `pip install -e '.[bench]'`).", "",
             f"A cluster of {NODES} nodes × {DEVICES_PER_NODE} devices; each trial takes the problem's world size "
             f"(8 devices: one node), so {NODES} trials run at once. A launch costs a server start (unless a "
             f"kept server of the same configuration serves it) and a benchmark of {PROMPTS} requests at the "
             "configuration's request throughput on the independent reality (AIConfigurator's estimate); "
             "a failed launch costs its start. A start reads each rank's share of the bf16 weights at "
             f"{LOAD_GIB_S:.2f} GiB/s (vLLM's own log in vllm-project/vllm issue 38820: 12.66 GiB in 24.84 s), "
             f"then {COMPILE_S:.0f} s of torch.compile (route179.dev's cold-start phase table, 2026-06-30) and "
             f"{CAPTURE_S:.0f} s of graph capture, profiling and API server start (an assumption). "
             "msopt runs with its prior fixed (`[search] refit = false`, the search bench's \"msopt (fixed prior)\"), "
             "cheaper to benchmark; `scripts/benchmarks/bench_search/hours.py` documents every method's model.", "",
             f"Cells: median wall-clock hours [interquartile range], median server starts, share of runs "
             f"within 1 % of the optimum. **Tuned** is the smallest budget at which at least {GOAL:.0%} of the "
             "runs are within 1 %.", ""]
    import numpy as np

    head = ["| method | " + " | ".join(f"{PROBLEMS[i].name}: hours to tuned (launches)" for i in got) + " |",
            "|---|" + "---|" * len(got)]
    for name in ORDER:
        cells = []
        for seeds in got.values():
            budgets = sorted({b for s in seeds for b, *_ in s[name]})
            tuned = ""
            for b in budgets:
                rows = [r for s in seeds for r in s[name] if r[0] == b]
                if sum(r[3] for r in rows) / len(rows) >= GOAL:
                    tuned = f"{_median([r[1] for r in rows]):.1f} h ({b})"
                    break
            if not tuned:
                rows = [r for s in seeds for r in s[name] if r[0] == budgets[-1]]
                tuned = (f"not tuned: {sum(r[3] for r in rows) / len(rows):.0%} within 1 % after "
                         f"{_median([r[1] for r in rows]):.1f} h ({budgets[-1]})")
            cells.append(tuned)
        head.append(f"| {name} | " + " | ".join(cells) + " |")
    per: list[str] = []
    for i, seeds in got.items():
        costs = Costs.of(table(i, cache, False))
        per += ["", f"### {PROBLEMS[i].name} ({len(seeds)} seeds; a start takes "
                    f"{costs.start.min() / 60:.1f}–{costs.start.max() / 60:.1f} min, a benchmark "
                    f"{costs.bench[costs.bench > 0].min() / 60:.1f}–{costs.bench.max() / 60:.1f} min)", "",
                "| method | launches | hours | server starts | within 1 % |", "|---|---|---|---|---|"]
        for name in ORDER:
            for b in sorted({b for s in seeds for b, *_ in s[name]}):
                rows = [r for s in seeds for r in s[name] if r[0] == b]
                q1, med, q3 = np.percentile([r[1] for r in rows], [25, 50, 75])
                per.append(f"| {name} | {b} | {med:.2f} [{q1:.2f}, {q3:.2f}] | {_median([r[2] for r in rows]):.0f} "
                           f"| {sum(r[3] for r in rows) / len(rows):.0%} |")
    return "\n".join([*lines, *head, *per, "", END])


def splice(path: Path, section: str) -> None:
    """Write ``section`` between the markers of ``path`` (appended when it has none)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    aic = [i for i, p in enumerate(PROBLEMS) if p.reality == "aic"]
    parser.add_argument("--problems", default="all",
                        help="comma-separated indices into bench_search.problems.PROBLEMS (independent ones), or "
                             "'all': every independent one but the held-out")
    parser.add_argument("--held-out", action="store_true",
                        help="admit the held-out problems (issue 49: looked at only at the end)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--noise", type=float, default=0.03)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--cache", default=str(ROOT / ".bench_cache"), help="where the problems' tables are cached")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"), help="'-' prints only")
    args = parser.parse_args(argv)
    why = available()
    if why is not None:
        print(f"bench_hours: {why}", file=sys.stderr)
        return 2
    try:
        problems = list(selected(args.problems, args.held_out))
    except ValueError as exc:
        parser.error(str(exc))
    if args.problems == "all":
        problems = [i for i in problems if i in aic]
    wrong = [i for i in problems if i not in aic]
    if wrong:
        parser.error(f"--problems {wrong}: not problems of the independent reality (those are {aic})")
    cache = args.cache
    for i in problems:
        table(i, cache, False)
    tasks = [(i, s, args.noise, cache) for s in range(args.first_seed, args.first_seed + args.seeds) for i in problems]
    got: dict[int, list[dict]] = {i: [] for i in problems}
    if args.jobs <= 1:
        results = map(_task, tasks)
    else:
        from concurrent.futures import ProcessPoolExecutor

        results = ProcessPoolExecutor(max_workers=args.jobs).map(_task, tasks)
    for i, seed, out in results:
        got[i].append(out)
        print(f"  {PROBLEMS[i].name} seed {seed} done", file=sys.stderr, flush=True)
    command = "python scripts/benchmarks/bench_hours.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    section = render(got, command, cache)
    print(section)
    if args.out != "-":
        splice(Path(args.out), section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
