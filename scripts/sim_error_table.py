"""The simulator's error table on the shipped measured runs, per engine and metric.

For each reference CSV (vLLM and SGLang, Qwen3-32B bf16 on H100 SXM) it prints the MAPE of
TTFT, TPOT and output tokens/s with fixed-length workloads and no per-row terms, each row
launched with the server flags of ``--launch-rule`` (default: aiconfigurator's, which ran them)
and simulated with ``--prompts-per-slot`` x concurrency requests (default 20, as they were sent):

* ``catalog``: the shipped ``h100-sxm`` entry as is;
* ``fitted``: in-sample, after :func:`msopt.sim.calibrate.fit_hardware` on that engine's rows;
* ``cross-validated``: each row predicted by a fit on the other folds (rows grouped by
  configuration, so no concurrency of a held-out configuration is seen).

Usage: python scripts/sim_error_table.py [--rounds 2] [--folds 3] [--engines vllm sglang] [--engine-only]
       [--launch-rule aiconfigurator|engine-defaults] [--prompts-per-slot 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from msopt.sim import load_hardware  # noqa: E402
from msopt.sim.calibrate import (  # noqa: E402
    DEFAULT_LAUNCH_RULE,
    LAUNCH_RULES,
    PROMPTS_PER_SLOT,
    fit_hardware,
    load_measurements_csv,
)

REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "data"  # copies of the reference CSVs
FILES = {"vllm": "vllm_measured_qwen3_32b_h100.csv", "sglang": "sglang_measured_qwen3_32b_h100.csv"}


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
    args = parser.parse_args()
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
