"""Hours to a tuned configuration on a simulated cluster (issue 38 item 4): each method's launches
on a problem of the independent reality (:mod:`.independent`), laid out in wall-clock time on a
cluster of :data:`NODES` nodes × :data:`DEVICES_PER_NODE` devices.

A launch costs a server start (unless a kept server of the same configuration serves it) and a
benchmark of :data:`PROMPTS` requests at the configuration's request throughput (the table's
noise-free ``throughput``); a launch that fails (out of memory) costs its start and no benchmark:
vLLM runs out of memory after it has read the weights and profiled. The start-up time of a
configuration is modelled per model size (:func:`start_seconds`).

Methods:

- **msopt**: as shipped (prior, screened moves, re-measurements, launch budget) but with the
  prior fixed (``[search] refit = false``, the search bench's "msopt (fixed prior)": several
  times cheaper to benchmark), its launches in its own order: the launches the driver dispatches
  together (a search iteration, a round of re-measurements) at once on the free trial slots, the
  next batch after the last result (sync mode; :func:`.oracle.batches`), a re-measurement served by
  the worker that keeps its configuration's server when that is no later than a fresh start elsewhere.
- **msopt serial**: the same launches one at a time; a server is kept only for a launch of the
  same configuration right after.
- **the original tool**: serial PSO, 10 particles × 5 iterations with its constants
  (c1 = c2 = 2, w = 1.8: pyswarms GlobalBestPSO, :func:`.methods.run_pyswarms`), every launch a
  fresh server, then its refine: the 3 best measured again (``pso_top_k`` 3; its shipped
  config.toml has 0) and the best mean picked.
- **auto_tune grid**: vLLM's ``benchmarks/auto_tune/auto_tune.sh`` style: every
  ``max_num_seqs`` × ``max_num_batched_tokens`` of the space (SGLang: ``max_running_requests`` ×
  ``chunked_prefill_size``) at the other fields' defaults, serially, one server each; the best
  measured is picked. Its request-rate backoff (more benchmarks per server until the P99 latency
  fits) is not charged: a lower bound of its time.
- **Optuna TPE**: msopt's TPE searcher one proposal at a time (:func:`.methods.run_tpe`), its
  launches laid out on the same trial slots as msopt's, each on the first free slot, fresh
  servers. Its proposals are those of serial TPE, which knows every earlier result: with the
  trials in flight it would know less, so its quality here is an upper bound.

"Hours to a tuned configuration": for each launch budget of the ladder, the median wall-clock
hours of the runs and the share whose pick is within 1 % of the optimum; the headline is the
smallest budget with at least :data:`GOAL` of the runs within 1 %.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .methods import FIXED_PRIOR, run_msopt, run_pyswarms, run_tpe
from .oracle import Oracle, batches
from .problems import Table
from .score import score

NODES = 4
DEVICES_PER_NODE = 8
#: Requests per benchmark: the original tool's ``sample_size`` (its shipped config.toml).
PROMPTS = 1000
#: Weights read per rank, GiB/s: vLLM's log in vllm-project/vllm issue 38820 ("Loading weights took
#: 24.84 seconds" for "Model loading took 12.66 GiB"), local safetensors shards.
LOAD_GIB_S = 12.66 / 24.84
#: torch.compile of a cold start, seconds: route179.dev, "Optimizing vLLM cold start with model
#: streaming and compile caching" (2026-06-30), its phase table ("torch.compile ~39 s").
COMPILE_S = 39.0
#: CUDA graph capture, memory profiling and the API server's start, seconds: an assumption (no
#: source measured them apart from the compile above).
CAPTURE_S = 20.0
#: The share of runs within 1 % of the optimum that counts as "tuned".
GOAL = 0.95
BUDGETS = (6, 10, 20, 50)


def start_seconds(params_b: float, tp: int, pp: int) -> float:
    """A cold server start: each rank reads its 1/(tp·pp) of the bf16 weights, then compiles and captures."""
    gib = params_b * 1e9 * 2 / (tp * pp) / 2**30
    return gib / LOAD_GIB_S + COMPILE_S + CAPTURE_S


@dataclass(frozen=True)
class Costs:
    """A problem's launch costs: start-up and benchmark seconds per table row."""

    start: np.ndarray
    bench: np.ndarray
    slots: int

    @classmethod
    def of(cls, table: Table) -> Costs:
        from msopt.sim.catalog_load import load_model

        params = load_model(table.problem.model).params_b
        start, bench = [], []
        for r in table.rows:
            v = r["values"]
            start.append(start_seconds(params, int(v["tp"]), int(v.get("pp", 1))))
            thr = (r["metrics"] or {}).get("throughput")
            bench.append(PROMPTS / thr if r["fitness"] is not None and thr else 0.0)
        slots = NODES * DEVICES_PER_NODE // table.problem.world
        return cls(np.array(start), np.array(bench), max(1, slots))

    def launch(self, row: int, warm: bool) -> float:
        if row < 0:
            return 0.0
        return (0.0 if warm else float(self.start[row])) + float(self.bench[row])


def wall_clock(costs: Costs, rows: Sequence[int], slots: int, groups: Sequence[object] | None = None,
               keep: bool = False) -> tuple[float, int]:
    """Seconds until the last of ``rows`` finishes on ``slots`` trial slots, and the server starts.

    Args:
        groups: a barrier label per launch (msopt's (phase, iteration)): a launch starts after every
            launch of an earlier label finished; None: each launch on the first free slot.
        keep: a slot keeps its last server; a launch of that configuration there needs no start.
    """
    free = [0.0] * slots
    last = [-2] * slots
    barrier = 0.0
    done = 0.0
    starts = 0
    prev = object()
    for k, row in enumerate(rows):
        label = groups[k] if groups is not None else None
        if groups is not None and label != prev:
            barrier = done
            prev = label
        best = None
        for s in range(slots):
            warm = keep and row >= 0 and last[s] == row
            end = max(free[s], barrier) + costs.launch(row, warm)
            if best is None or end < best[0]:
                best = (end, s, warm)
        assert best is not None
        end, s, warm = best
        free[s] = end
        last[s] = row if row >= 0 and costs.bench[row] > 0 else -2  # a failed start keeps nothing
        starts += 0 if warm or row < 0 else 1
        done = max(done, end)
    return done, starts


def run_original(table: Table, oracle: Oracle, seed: int) -> int:
    """The original tool: serial PSO 10 × 5, then the 3 best measured again; returns the pick."""
    run_pyswarms(table, oracle, 50, seed)
    seen: dict[int, list[float]] = {}
    for row, f in oracle.launches:
        if row >= 0 and math.isfinite(f):
            seen.setdefault(row, []).append(f)
    top = sorted(seen, key=lambda r: min(seen[r]))[:3]
    for row in top:
        f, _, _ = oracle.launch(table.rows[row]["values"])
        seen[row].append(f)
    return min(top, key=lambda r: float(np.mean(seen[r]))) if top else -1


def grid_rows(table: Table) -> list[int]:
    """auto_tune.sh's grid: the two scheduler knobs over their candidates, the rest at their defaults."""
    space = table.space
    default = space.decode(space.default_position(), None).values
    knobs = (("max_running_requests", "chunked_prefill_size") if "max_running_requests" in space.names
             else ("max_num_seqs", "max_num_batched_tokens"))
    cands = {d.name: d.candidates for d in space.dimensions}
    rows = []
    for a in cands[knobs[0]]:
        for b in cands[knobs[1]]:
            key = tuple({**default, knobs[0]: a, knobs[1]: b}[n] for n in space.names)
            rows.append(table.index.get(key, -1))
    return rows


def measure(table: Table, seed: int, noise: float) -> dict[str, list[tuple[int, float, int, float]]]:
    """One seed of every method: method -> [(budget, hours, starts, within 1 %)]."""
    costs = Costs.of(table)
    out: dict[str, list[tuple[int, float, int, float]]] = {}
    for b in BUDGETS:
        oracle = Oracle(table, seed, noise)
        launches, pick = run_msopt(table, oracle, b, seed, variant=FIXED_PRIOR)
        rows = [r for r, _ in launches]
        hit = score(table, launches, b, pick)["within1"]
        for name, slots, groups, keep in (("msopt", costs.slots, batches(oracle), True),
                                          ("msopt serial", 1, None, True)):
            secs, starts = wall_clock(costs, rows, slots, groups, keep)
            out.setdefault(name, []).append((b, secs / 3600, starts, hit))
    oracle = Oracle(table, seed, noise)
    run_tpe(table, oracle, max(BUDGETS), seed)
    for b in BUDGETS:
        rows = [r for r, _ in oracle.launches[:b]]
        secs, starts = wall_clock(costs, rows, costs.slots)
        out.setdefault("Optuna TPE", []).append((b, secs / 3600, starts, score(table, oracle.launches, b)["within1"]))
    oracle = Oracle(table, seed, noise)
    pick = run_original(table, oracle, seed)
    secs, starts = wall_clock(costs, [r for r, _ in oracle.launches], 1)
    out["original tool"] = [(len(oracle.launches), secs / 3600, starts,
                             score(table, oracle.launches, len(oracle.launches), pick)["within1"])]
    oracle = Oracle(table, seed, noise)
    for row in grid_rows(table):
        oracle.launch(None if row < 0 else table.rows[row]["values"])
    secs, starts = wall_clock(costs, [r for r, _ in oracle.launches], 1)
    out["auto_tune grid"] = [(len(oracle.launches), secs / 3600, starts,
                              score(table, oracle.launches, len(oracle.launches))["within1"])]
    return out
