"""Parallel efficiency of the Ray actor pool: 10 particles x 5 iterations at 1 s per evaluation.

For 1, 2, 5 and 10 actors it prints the pool's start-up time (actors created and ready) and the
wall time from the first dispatch to the end, beside the ideal
``baseline + iterations x ceil(particles / actors) x 1 s``. Every evaluation is a simulated one
that takes 1 s of wall time (``[simulator] emulate_wall_time``, ``eval_seconds = 1``); duplicates
are re-run so that every evaluation counts.

    python scripts/benchmarks/bench_parallel.py [--actors 1,2,5,10] [--particles 10] [--iters 5] [--seconds 1]
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CONFIG = """
n_particles = {n}
iters = {iters}
duplicate_policy = "rerun"
seed = 1
simulate = true
sample_size = 64
[data_storage]
pso_top_k = 0
[cluster]
accelerator = "NPU"
devices_per_trial = 1
[simulator]
hardware = "atlas-800i-a2"
model = "qwen3-8b"
emulate_wall_time = true
eval_seconds = {secs}
[simulator.workload]
input_len = 512
output_len = 64
num_prompts = 64
concurrency = 16
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 8
max = 256
dtype = "int"
value = 64
[[vllm.target_field]]
name = "max_num_batched_tokens"
config_position = "--max-num-batched-tokens"
min = 1024
max = 16384
dtype = "int"
value = 8192
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--actors", default="1,2,5,10")
    ap.add_argument("--particles", type=int, default=10)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0)
    args = ap.parse_args()
    counts = [int(x) for x in args.actors.split(",")]

    import ray

    from actors.pool import RayPool, init_ray
    from msopt.config import load_settings
    from msopt.run.driver import Driver

    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "bench.toml"
        cfg.write_text(CONFIG.format(n=args.particles, iters=args.iters, secs=args.seconds))
        settings = load_settings(str(cfg), environ={})
        t0 = time.monotonic()
        init_ray(settings.config, None, simulate=True, slots=max(counts))
        print(f"ray.init: {time.monotonic() - t0:.1f} s ({os.cpu_count()} cores)")
        print(f"{'actors':>6} {'start-up s':>10} {'wall s':>8} {'ideal s':>8} {'wall/ideal':>10}")
        rows = []
        for a in counts:
            pool = RayPool(settings.config, simulate=True, max_concurrent=a)
            try:
                t1 = time.monotonic()
                out = Driver(settings.config, pool).run()
                wall = time.monotonic() - t1
            finally:
                pool.close()
            ideal = args.seconds * (1 + args.iters * math.ceil(args.particles / a))
            assert out.evaluations == 1 + args.particles * args.iters
            rows.append((a, pool.startup_seconds, wall, ideal))
            print(f"{a:>6} {pool.startup_seconds:>10.2f} {wall:>8.2f} {ideal:>8.1f} {wall / ideal:>10.3f}", flush=True)
        ray.shutdown()
    a, _, wall, ideal = rows[-1]
    print(f"wall/ideal at {a} actors: {wall / ideal:.3f}")


if __name__ == "__main__":
    main()
