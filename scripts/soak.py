"""Soak: 10,000 simulated evaluations on 8 actors; the driver's memory must stay flat.

Runs one optimization the way ``msopt optimize`` does (Driver, RunStore, plain progress, a Ray
actor pool or with ``--no-ray`` an in-process one) over a tiny simulated workload (4 prompts,
short lengths, ``noise = 0``), and prints the driver process's memory after 1,000 and after
10,000 finished evaluations: the Python heap traced by tracemalloc (with ``--tracemalloc``), the
resident set (VmRSS) and its peak (VmHWM). Then it checks the journal: every eval_id exactly once.

    python scripts/soak.py [--evals 10000] [--actors 8] [--no-ray] [--mode sync|async]
                           [--duplicates rerun|reuse] [--at 1000,10000] [--tracemalloc] [--out DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

CONFIG = """
n_particles = {n}
iters = {iters}
seed = 1
mode = "{mode}"
duplicate_policy = "{dup}"
simulate = true
sample_size = 4
[data_storage]
pso_top_k = {top_k}
[cluster]
accelerator = "none"
[simulator]
hardware = "h100-sxm"
model = "llama-3.1-8b"
noise = 0.0
[simulator.workload]
input_len = 32
output_len = 4
num_prompts = 4
concurrency = 4
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 4
max = 256
dtype = "int"
value = 64
[[vllm.target_field]]
name = "gpu_memory_utilization"
config_position = "--gpu-memory-utilization"
min = 0.7
max = 0.95
dtype = "float"
value = 0.9
[[vllm.target_field]]
name = "enable_chunked_prefill"
config_position = "--enable-chunked-prefill"
min = 0
max = 1
dtype = "bool"
value = true
"""


def _status_kib(key: str) -> int:
    """A ``VmRSS``/``VmHWM`` line of /proc/self/status, in KiB (ru_maxrss elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


class MemoryProbe:
    """A progress display that forwards to ``inner`` and samples memory at finished counts."""

    def __init__(self, inner: Any, at: list[int]) -> None:
        self.inner = inner
        self.at = sorted(at)
        self.finished = 0
        self.samples: list[dict[str, Any]] = []
        self.t0 = time.monotonic()

    def start(self, **kw: Any) -> None:
        self.inner.start(**kw)

    def set_total(self, total: int) -> None:
        self.inner.set_total(total)

    def close(self, summary: Any) -> None:
        self.inner.close(summary)

    def update(self, ev: Any) -> None:
        self.inner.update(ev)
        if ev.kind in ("done", "failed", "reused"):
            self.finished += 1
            if self.at and self.finished == self.at[0]:
                self.at.pop(0)
                self.sample()

    def sample(self) -> None:
        gc.collect()
        traced = tracemalloc.get_traced_memory() if tracemalloc.is_tracing() else None
        s = {"evaluations": self.finished, "seconds": round(time.monotonic() - self.t0, 1),
             "vmrss_mib": _status_kib("VmRSS") / 1024, "vmhwm_mib": _status_kib("VmHWM") / 1024,
             "traced_mib": traced[0] / 2**20 if traced else None,
             "traced_peak_mib": traced[1] / 2**20 if traced else None}
        self.samples.append(s)
        traced_text = (f"traced {s['traced_mib']:.2f} MiB (peak {s['traced_peak_mib']:.2f}), "
                       if traced else "")
        print(f"after {self.finished:>6} evaluations ({s['seconds']:.0f} s): driver {traced_text}"
              f"VmRSS {s['vmrss_mib']:.1f} MiB, VmHWM {s['vmhwm_mib']:.1f} MiB", flush=True)


def check_journal(run_dir: Path, expected: int) -> bool:
    """Every eval_id 0..expected-1 exactly once, every line valid JSON."""
    ids = [json.loads(line)["eval_id"] for line in (run_dir / "journal.jsonl").read_text("utf-8").splitlines()]
    counts = Counter(ids)
    dup = sorted(i for i, c in counts.items() if c > 1)
    missing = sorted(set(range(expected)) - set(counts))
    print(f"journal: {len(ids)} lines, {len(counts)} distinct eval_ids, expected {expected}, "
          f"missing {len(missing)} {missing[:5]}, duplicated {len(dup)} {dup[:5]}")
    return not dup and not missing and len(ids) == expected


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--evals", type=int, default=10_000, help="search evaluations (particles x iterations)")
    ap.add_argument("--actors", type=int, default=8)
    ap.add_argument("--particles", type=int, default=100)
    ap.add_argument("--no-ray", action="store_true", help="in-process worker threads instead of Ray actors")
    ap.add_argument("--mode", choices=("sync", "async"), default="sync")
    ap.add_argument("--duplicates", choices=("rerun", "reuse"), default="rerun")
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--at", default="1000,10000", help="finished counts at which to sample memory")
    ap.add_argument("--tracemalloc", action="store_true", help="also trace the Python heap (slower)")
    ap.add_argument("--out", help="parent of the run directory (default: a temporary directory)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    if args.tracemalloc:
        tracemalloc.start()

    from msopt.config import load_settings
    from msopt.run.driver import Driver
    from msopt.run.pool import InProcessPool
    from msopt.run.progress import PlainLog
    from msopt.run.store import RunStore

    iters = math.ceil(args.evals / args.particles)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="msopt-soak-"))
    cfg = out / "soak.toml"
    out.mkdir(parents=True, exist_ok=True)
    cfg.write_text(CONFIG.format(n=args.particles, iters=iters, mode=args.mode, dup=args.duplicates,
                                 top_k=args.top_k), encoding="utf-8")
    settings = load_settings(str(cfg), environ={})
    store = RunStore.create(out, settings, meta={"argv": sys.argv})
    total = 1 + args.particles * iters + args.top_k
    print(f"run directory: {store.run_dir}; {total} evaluations on {args.actors} "
          f"{'threads' if args.no_ray else 'Ray actors'}, mode {args.mode}, duplicates {args.duplicates}",
          flush=True)
    devnull = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    probe = MemoryProbe(PlainLog(devnull), [int(x) for x in args.at.split(",") if x])
    started_ray = False
    if args.no_ray:
        pool: Any = InProcessPool(settings, size=args.actors, run_dir=str(store.run_dir))
    else:
        import ray

        from actors.pool import RayPool, init_ray

        started_ray = init_ray(settings, None, simulate=True, slots=args.actors)
        pool = RayPool(settings, simulate=True, run_dir=str(store.run_dir), max_concurrent=args.actors)
    t0 = time.monotonic()
    try:
        driver = Driver(settings, pool, store=store, progress=probe)
        probe.start(total=total, n_particles=args.particles, dimensions=list(driver.space.names),
                    run_dir=str(store.run_dir))
        outcome = driver.run()
        probe.close(None)
    finally:
        pool.close()
        store.close()
        if started_ray:
            ray.shutdown()
    wall = time.monotonic() - t0
    probe.sample()
    print(f"finished {outcome.evaluations} evaluations in {wall:.0f} s ({outcome.evaluations / wall:.1f}/s), "
          f"{outcome.failures} failed, {outcome.reused} reused; best fitness {outcome.best.fitness:.4f}"
          if outcome.best else f"finished {outcome.evaluations} evaluations, none succeeded")
    first, last = probe.samples[0], probe.samples[-1]
    key = "traced_mib" if args.tracemalloc else "vmrss_mib"
    print(f"driver memory {key}: {first[key]:.2f} MiB at {first['evaluations']} -> {last[key]:.2f} MiB at "
          f"{last['evaluations']} evaluations ({last[key] - first[key]:+.2f} MiB)")
    ok = check_journal(store.run_dir, total)
    print("journal complete" if ok else "JOURNAL INCOMPLETE")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
