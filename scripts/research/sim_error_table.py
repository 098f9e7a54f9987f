"""The simulator's error table on the shipped measured runs, per engine and metric.

For each reference CSV (vLLM and SGLang, Qwen3-32B bf16 on H100 SXM) it prints the MAPE of
TTFT, TPOT and output tokens/s with fixed-length workloads and no per-row terms, each row
launched with the server flags of ``--launch-rule`` (default: aiconfigurator's, which ran them)
and simulated with ``--prompts-per-slot`` x concurrency requests (default 10, as they were sent):

* ``catalog``: the shipped ``h100-sxm`` entry as is;
* ``fitted``: in-sample, after :func:`msopt.sim.calibrate.fit_hardware` on that engine's rows;
* ``cross-validated``: each row predicted by a fit on the other folds (rows grouped by
  configuration, so no concurrency of a held-out configuration is seen).

With ``--group-by model,hardware`` (or ``model`` / ``hardware``) the rows of
``--csv FILE`` (default: tests/data/<engine>_measured_gap_analysis.csv, all the models and
hardware of the reference pipeline, ``python scripts/generators/silicon_rows.py``) are cross-validated by
leaving one group out: each model and hardware is predicted by a fit on the others, every row
simulated on its own hardware entry with the fitted factors. It prints one line per group
(catalog and held out) and the pooled figures.

With ``--bounds`` (no fit, no simulation of runs) it prints, per group of the gap-analysis rows,
two checks that separate the step-time model from the scheduler: the lowest-concurrency row of
every layout, measured TPOT against the simulator's decode step with no step or sequence overhead
(what the overhead has to make up), and the GPU time each row implies (:func:`implied_busy`): at
the measured request rate, its prompts' prefill work plus one decode step per measured TPOT, priced
by the roofline with no overhead at all. A row above 100 % cannot be reproduced by any per-step
overhead, all-reduce or per-layer term, only by faster kernels or less work per request.

Usage: python scripts/research/sim_error_table.py [--rounds 2] [--folds 3] [--engines vllm sglang] [--engine-only]
       [--launch-rule aiconfigurator|engine-defaults] [--prompts-per-slot 20]
       [--group-by model,hardware] [--csv FILE] [--max-evaluations N] [--bounds]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from msopt.sim import load_hardware, load_model  # noqa: E402
from msopt.sim.calibrate import (  # noqa: E402
    PROMPTS_PER_SLOT,
    Measurement,
    fit_hardware,
    load_measurements_csv,
    mape,
    on_hardware,
    simulate_measurements,
)
from msopt.sim.catalog_types import Hardware  # noqa: E402
from msopt.sim.launch_rules import DEFAULT_LAUNCH_RULE, LAUNCH_RULES  # noqa: E402
from msopt.sim.perf import StepCost  # noqa: E402
from msopt.sim.personality import resolved  # noqa: E402

REFERENCE = Path(__file__).resolve().parents[2] / "tests" / "data"  # copies of the reference CSVs
FILES = {"vllm": "vllm_measured_qwen3_32b_h100.csv", "sglang": "sglang_measured_qwen3_32b_h100.csv"}
GROUPED = {"vllm": "vllm_measured_gap_analysis.csv", "sglang": "sglang_measured_gap_analysis.csv"}
GROUP_KEYS = ("model", "hardware")


def _row(label: str, engine: str, n: int, err: dict) -> str:
    return (f"| {engine} | {label} | {n} | {err['ttft']:.1%} | {err['tpot']:.1%} | {err['tokens_per_s']:.1%} | "
            f"{err['refused']} |")


def _bare_cost(m: Measurement, hw: Hardware, kv_dtype: str = "bf16", peak: bool = False) -> StepCost:
    """The row's step cost on ``hw`` with no step or sequence overhead (``peak``: at 100 % of the
    datasheet's FLOPS and bandwidth, communication free)."""
    hw = replace(hw.for_engine(m.engine), step_overhead_ms=0.0, per_seq_overhead_us=0.0)
    if peak:
        hw = replace(hw, compute_eff=1.0, memory_eff=1.0)
    cost = StepCost(hw, load_model(m.model), resolved(m.knobs, hw.hbm_gib), m.weight_dtype, kv_dtype)
    if peak:
        cost.comm_fixed = cost.comm_tok = 0.0
        if cost.moe is not None:
            cost.moe.comm_fixed = cost.moe.comm_tok = 0.0
    return cost


def repeated_prompt_share(concurrency: int) -> float:
    """Share of a row's measured requests whose prompt an earlier request of the run already sent,
    had aiperf drawn the prompts with replacement (aiperf 0.1.1 and 0.2.0, ``random.choice`` in
    ``aiperf/dataset/dataset_manager.py``; 0.3.0 and later shuffle) from the 12 x c entries
    aiconfigurator's eval pipeline generates (``--num-dataset-entries``), after the 2 x c warm-up."""
    n = 12 * concurrency
    return float(np.mean([1.0 - (1.0 - 1.0 / n) ** j for j in range(2 * concurrency, n)]))


def implied_busy(m: Measurement, hw: Hardware, kv_dtype: str = "bf16", peak: bool = False,
                 prompt_share: float = 1.0) -> tuple[float, float]:
    """(prefill, decode) GPU seconds per second a measured closed-loop row implies on one replica.

    Requests finish at ``r = c / (ttft + tpot (out - 1))`` per second; each brings ``input_len``
    prompt tokens (linear FLOPs, causal attention, all-reduce, expert FLOPs and all-to-all). By
    Little's law ``n = r tpot (out - 1)`` sequences decode at a time (fewer than ``c`` where requests
    queue), and one decode step of them (weights, KV reads) runs per measured TPOT. No step or
    sequence overhead is priced, so the sum is a lower bound of the roofline's busy time.
    ``prompt_share``: the share of the prompt work that is computed (1: every prompt token).
    """
    c = _bare_cost(m, hw, kv_dtype, peak)
    rate = m.concurrency / m.knobs.dp / (m.ttft_s + m.tpot_s * (m.output_len - 1))
    isl = m.input_len
    prefill = (c.lin_flop_time * isl + c.attn_flop_time * isl * isl / 2 + c.comm_tok * isl) * c.pp
    if c.moe is not None:
        prefill += (c.moe.flop_tok + c.moe.comm_tok) * isl * c.moe.layout.group
    decoding = rate * m.tpot_s * (m.output_len - 1)
    a, b = c.decode_coeffs(max(1, round(decoding)))
    decode = (a + b * (isl + m.output_len / 2) * decoding) / m.tpot_s
    return rate * prefill * prompt_share, decode


def bounds(args: argparse.Namespace) -> None:
    """Per group: the lowest-concurrency decode gap and the implied-busy bound (see the docstring)."""
    for engine in args.engines:
        rows = load_measurements_csv(args.csv or args.reference / GROUPED[engine], engine=engine,
                                     launch_rule=args.launch_rule)
        fitted = load_hardware(args.hardware)
        devices = {n: on_hardware(fitted, load_hardware(n)) for n in sorted({m.hardware for m in rows})}
        print(f"\n{engine}: lowest concurrency of each layout, TPOT measured vs the decode step without overhead")
        print("| group | dtype | tp | dp | EP | in/out | c | TPOT measured | step, no overhead | gap |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        lowest: dict[tuple, Measurement] = {}
        for m in rows:
            key = (m.model, m.hardware, m.weight_dtype, m.knobs.tp, m.knobs.dp, m.knobs.expert_parallel)
            if key not in lowest or m.concurrency < lowest[key].concurrency:
                lowest[key] = m
        for _key, m in sorted(lowest.items(), key=lambda kv: repr(kv[0])):
            c = _bare_cost(m, devices[m.hardware])
            seqs = max(1, round(m.concurrency / m.knobs.dp))
            a, b = c.decode_coeffs(seqs)
            step = a + b * (m.input_len + m.output_len / 2) * seqs
            print(f"| {m.model} on {m.hardware} | {m.weight_dtype} | {m.knobs.tp} | {m.knobs.dp} | "
                  f"{'yes' if m.knobs.expert_parallel else 'no'} | {m.input_len}/{m.output_len} | {m.concurrency} | "
                  f"{m.tpot_s * 1e3:.2f} ms | {step * 1e3:.2f} ms | {(m.tpot_s - step) * 1e3:+.2f} ms |")
        print(f"\n{engine}: GPU time the measured rows imply, no step or sequence overhead priced: "
              "median (min-max), rows above 100 %")
        settings = (("catalog factors, bf16 KV", False, False, False),
                    ("catalog factors, fp8 KV for fp8 rows", True, False, False),
                    ("same, repeated prompts not computed", True, False, True),
                    ("100 % of peak, free comm, fp8 KV for fp8 rows", True, True, False))
        print("| group | rows | " + " | ".join(f"{s[0]} | > 100 %" for s in settings) + " |")
        print("|---|---|" + "---|---|" * len(settings))
        for g in sorted({(m.model, m.hardware) for m in rows}):
            sub = [m for m in rows if (m.model, m.hardware) == g]
            cells = []
            for _, fp8_kv, peak, repeats in settings:
                busy = np.array([sum(implied_busy(
                    m, devices[m.hardware], "fp8" if fp8_kv and m.weight_dtype == "fp8" else "bf16", peak,
                    1.0 - repeated_prompt_share(m.concurrency) if repeats else 1.0)) for m in sub])
                cells.append(f"{np.median(busy):.0%} ({busy.min():.0%}-{busy.max():.0%}) | {int((busy > 1).sum())}")
            print(f"| {g[0]} on {g[1]} | {len(sub)} | " + " | ".join(cells) + " |")


def grouped(args: argparse.Namespace) -> None:
    """Leave one group (model and/or hardware) out; print per-group and pooled MAPE."""
    keys = tuple(k.strip() for k in args.group_by.split(","))
    bad = [k for k in keys if k not in GROUP_KEYS]
    if bad:
        raise SystemExit(f"--group-by {args.group_by!r}: use a comma-separated subset of {list(GROUP_KEYS)}")

    def group_of(m: Measurement) -> tuple:
        return tuple(m.model if k == "model" else m.hardware for k in keys)

    print("| engine | group held out | rows | TTFT | TPOT | tokens/s | refused |")
    print("|---|---|---|---|---|---|---|")
    for engine in args.engines:
        path = args.csv or args.reference / GROUPED[engine]
        rows = load_measurements_csv(path, engine=engine, launch_rule=args.launch_rule)
        hw = load_hardware(args.hardware)
        start = time.perf_counter()
        catalog = simulate_measurements(rows, hw, args.prompts_per_slot, per_row_hardware=True)
        cal = fit_hardware(rows, hw, rounds=args.rounds, folds=0, fit_shared=not args.engine_only,
                           prompts_per_slot=args.prompts_per_slot, group_of=group_of, per_row_hardware=True,
                           max_evaluations=args.max_evaluations)
        held = cal.cross_validated_sim
        for g in sorted({group_of(m) for m in rows}, key=repr):
            idx = [j for j, m in enumerate(rows) if group_of(m) == g]
            sub = [rows[j] for j in idx]
            name = " on ".join(g)
            print(_row(f"{name}: catalog", engine, len(sub), mape(sub, catalog[idx])))
            if held is not None:
                print(_row(f"{name}: fitted on the other groups", engine, len(sub), mape(sub, held[idx])))
        print(_row("all: catalog", engine, len(rows), mape(rows, catalog)))
        print(_row("all: fitted on all, in-sample", engine, len(rows), cal.after))
        if cal.cross_validated:
            print(_row("all: leave one group out", engine, len(rows), cal.cross_validated))
        factors = ", ".join(f"{k} {v:.3g}" for k, v in cal.factors.items())
        print(f"<!-- {engine}: {cal.evaluations} evaluations, {time.perf_counter() - start:.0f} s; "
              f"fitted on all: {factors} -->")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=REFERENCE, help="folder of the reference CSVs")
    parser.add_argument("--engines", nargs="+", default=list(FILES), choices=list(FILES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--engine-only", action="store_true",
                        help="fit only the per-engine overheads (the shared factors stay the catalog's)")
    parser.add_argument("--launch-rule", default=DEFAULT_LAUNCH_RULE, choices=LAUNCH_RULES.names(),
                        help="server flags of each row (default: %(default)s)")
    parser.add_argument("--prompts-per-slot", type=int, default=PROMPTS_PER_SLOT,
                        help="requests per row = N x concurrency (default: %(default)s)")
    parser.add_argument("--group-by", metavar="KEYS",
                        help="leave one group out: 'model,hardware', 'model' or 'hardware'")
    parser.add_argument("--csv", type=Path, help="with --group-by: the rows (default: the gap-analysis CSVs)")
    parser.add_argument("--hardware", default="h100-sxm", help="entry the fit starts from (default: %(default)s)")
    parser.add_argument("--max-evaluations", type=int, default=None,
                        help="cap on objective evaluations of each fit (default: until converged)")
    parser.add_argument("--bounds", action="store_true",
                        help="no fit: the decode-step gap at the lowest concurrency and the GPU time each "
                             "gap-analysis row implies, per group")
    args = parser.parse_args()
    if args.bounds:
        bounds(args)
        return
    if args.group_by:
        grouped(args)
        return
    hw = load_hardware("h100-sxm")
    print("| engine | rows | figure | TTFT | TPOT | tokens/s | refused |")
    print("|---|---|---|---|---|---|---|")
    for engine in args.engines:
        rows = load_measurements_csv(args.reference / FILES[engine], engine=engine, launch_rule=args.launch_rule)
        start = time.perf_counter()
        cal = fit_hardware(rows, hw, rounds=args.rounds, folds=args.folds, fit_shared=not args.engine_only,
                           prompts_per_slot=args.prompts_per_slot)
        for label, err in (("catalog", cal.before), ("fitted, in-sample", cal.after),
                           (f"{args.folds}-fold cross-validated", cal.cross_validated)):
            print(f"| {engine} | {len(rows)} | {label} | {err['ttft']:.1%} | {err['tpot']:.1%} | "
                  f"{err['tokens_per_s']:.1%} | {err['refused']} |")
        factors = ", ".join(f"{k} {v:.3g}" for k, v in cal.factors.items())
        print(f"<!-- {engine}: {cal.evaluations} evaluations, {time.perf_counter() - start:.0f} s; "
              f"fitted {factors} -->")


if __name__ == "__main__":
    main()
