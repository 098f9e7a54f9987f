"""Seconds per simulator evaluation: 1,000 requests (input 1024, output 256, concurrency 64),
Qwen3-8B, tp 1, on h100-sxm and atlas-800i-a2; median of several repeats.

Usage: python scripts/benchmarks/bench_sim.py [--repeats N]
The last line is ``seconds per evaluation: X`` (the slower hardware's median).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from msopt.sim import EngineKnobs, load_hardware, load_model, simulate  # noqa: E402

WORKLOAD = {"input_len": 1024, "output_len": 256, "num_prompts": 1000, "concurrency": 64}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    model = load_model("qwen3-8b")
    worst = 0.0
    for hw_name, engine in (("h100-sxm", "vllm"), ("atlas-800i-a2", "vllm"), ("atlas-800i-a2", "mindie")):
        hw = load_hardware(hw_name)
        knobs = EngineKnobs(engine=engine, tp=1, max_num_seqs=200 if engine == "mindie" else None,
                            block_size=128 if engine == "mindie" else 16,
                            chunked_prefill=engine != "mindie", mixed_batch=engine != "mindie",
                            max_preempt_count=0 if engine == "mindie" else None)
        times = []
        for seed in range(args.repeats):
            start = time.perf_counter()
            res = simulate(knobs, hw, model, WORKLOAD, seed=seed)
            times.append(time.perf_counter() - start)
        med = statistics.median(times)
        worst = max(worst, med)
        print(f"{hw_name:14s} {engine:7s} median {med:.3f} s  (min {min(times):.3f}, max {max(times):.3f}); "
              f"{res.generate_speed:.0f} tok/s, TTFT {res.time_to_first_token*1e3:.0f} ms, "
              f"TPOT {res.time_per_output_token*1e3:.1f} ms, error={res.error}")
    # informational: varied lengths leave fewer identical decode steps to jump over
    varied = {**WORKLOAD, "output_len": {"dist": "lognormal", "mean": 256, "sigma": 0.6}}
    times = []
    for seed in range(args.repeats):
        start = time.perf_counter()
        simulate(EngineKnobs(engine="vllm", tp=1), load_hardware("h100-sxm"), model, varied, seed=seed)
        times.append(time.perf_counter() - start)
    print(f"(info) h100-sxm vllm, lognormal output lengths: median {statistics.median(times):.3f} s")
    print(f"seconds per evaluation: {worst:.3f}")


if __name__ == "__main__":
    main()
