"""Soak: 10,000 simulated evaluations on 8 actors; the driver's memory must stay flat.
With ``--chaos``: evaluations under fire; the journal must equal an uninterrupted run's.

Runs one optimization the way ``msopt optimize`` does (Driver, RunStore, plain progress, a Ray
actor pool or with ``--no-ray`` an in-process one) over a tiny simulated workload (4 prompts,
short lengths, ``noise = 0``), and prints the driver process's memory after 1,000 and after
10,000 finished evaluations: the Python heap traced by tracemalloc (with ``--tracemalloc``), the
resident set (VmRSS) and its peak (VmHWM). Then it checks the journal: every eval_id exactly once.

    python scripts/benchmarks/soak.py [--evals 10000] [--actors 8] [--no-ray] [--mode sync|async]
                           [--duplicates rerun|reuse] [--at 1000,10000] [--tracemalloc] [--out DIR]

Chaos (issue 18): ``--chaos`` runs ``msopt optimize`` (Ray, 8 actors, emulated wall time of
``--eval-seconds`` per evaluation, 2,000 search evaluations by default) as a subprocess, SIGKILLs
one of its actors every ``--actor-kill-every`` seconds (a random 0.5x-1.5x of it), SIGKILLs the
driver ``--driver-kills`` times at evenly spread points of the journal and resumes it with
``--resume``; what a killed driver leaves behind is given ``--orphan-wait`` seconds to end (the
driver's guard stops it), then reaped (this script is their child subreaper) and counted. The
final journal must equal an uninterrupted ``--no-ray`` run's (eval_id, phase, particle,
iteration, values, fitness, error of every evaluation):

    python scripts/benchmarks/soak.py --chaos [--evals 2000] [--actors 8] [--eval-seconds 0.2]
                           [--actor-kill-every 3] [--driver-kills 5] [--seed 1] [--out DIR]
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

REPO = Path(__file__).resolve().parents[2]

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


CHAOS_WALL = """
[simulator]
hardware = "h100-sxm"
model = "llama-3.1-8b"
noise = 0.0
emulate_wall_time = true
eval_seconds = {secs}
"""


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out += kids
        todo += kids
    return out


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _journal_keys(run_dir: Path) -> list[tuple]:
    out = []
    for line in (run_dir / "journal.jsonl").read_text("utf-8").splitlines():
        d = json.loads(line)
        out.append((d["eval_id"], d["phase"], d["particle"], d["iteration"], json.dumps(d["values"], sort_keys=True),
                    d["fitness"], d["error"]))
    return sorted(out, key=lambda k: k[0])


def chaos(args: argparse.Namespace) -> int:
    """The chaos soak; see the module docstring. Exit 0 when the journals are equal."""
    import random
    import signal
    import subprocess

    rng = random.Random(args.seed)
    PR_SET_CHILD_SUBREAPER = 36  # orphans of the killed driver become ours, so they can be found and reaped
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        print("warning: cannot become a child subreaper; orphans of the driver are not counted")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="msopt-chaos-"))
    out.mkdir(parents=True, exist_ok=True)
    iters = math.ceil(args.evals / args.particles)
    body = CONFIG.format(n=args.particles, iters=iters, mode=args.mode, dup=args.duplicates, top_k=args.top_k)
    head, _, rest = body.partition("[simulator]\n")
    rest = rest.split("\n", 3)[3]  # drop the plain [simulator] table's three keys
    cfg = out / "chaos.toml"
    cfg.write_text(head + CHAOS_WALL.format(secs=args.eval_seconds) + rest, encoding="utf-8")
    total = 1 + args.particles * iters + args.top_k
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cli = [sys.executable, "-m", "msopt.cli", "optimize", "--plain"]

    t0 = time.monotonic()
    ref = subprocess.run([*cli, "-c", str(cfg), "--no-ray", "--max-concurrent", str(args.actors),
                          "-o", str(out / "reference")], env=env, capture_output=True, text=True)
    ref_wall = time.monotonic() - t0
    if ref.returncode != 0:
        print(f"the reference run failed ({ref.returncode}): {ref.stderr.strip()[-2000:]}")
        return 1
    ref_dir = Path(ref.stdout.strip().splitlines()[-1])
    print(f"reference: {total} evaluations on {args.actors} threads in {ref_wall:.0f} s ({ref_dir})", flush=True)

    marks = [round(total * (k + 1) / (args.driver_kills + 1)) for k in range(args.driver_kills)]
    actor_kills = driver_kills = orphans = 0
    orphan_seconds: list[float] = []
    resumes: list[int] = []
    run_dir: Path | None = None
    argv = [*cli, "-c", str(cfg), "--max-concurrent", str(args.actors), "-o", str(out / "chaos")]
    t0 = time.monotonic()
    while True:
        log = open(out / f"driver-{len(resumes)}.log", "w", encoding="utf-8")  # noqa: SIM115
        driver = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        next_actor_kill = time.monotonic() + args.actor_kill_every * rng.uniform(0.5, 1.5)
        while driver.poll() is None:
            time.sleep(0.1)
            if run_dir is None:
                found = [p.parent for p in (out / "chaos").glob("*/journal.jsonl")]
                run_dir = found[0] if found else None
            try:
                lines = len((run_dir / "journal.jsonl").read_bytes().splitlines()) if run_dir else 0
            except FileNotFoundError:  # a driver that stopped before its first result removed its run directory
                run_dir, lines = None, 0
            if marks and lines >= marks[0]:
                marks.pop(0)
                driver.send_signal(signal.SIGKILL)
                driver.wait()
                driver_kills += 1
                killed_at = time.monotonic()
                left = [p for p in _children(os.getpid()) if _cmdline(p)]
                names = sorted({_cmdline(p).split(" ")[0].rsplit("/", 1)[-1] for p in left})
                while left and time.monotonic() - killed_at < args.orphan_wait:
                    time.sleep(0.1)
                    while True:  # reap the zombies of what ended, or it stays "alive" here
                        try:
                            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                                break
                        except ChildProcessError:
                            break
                    left = [p for p in _children(os.getpid()) if _cmdline(p)]
                gone = time.monotonic() - killed_at
                orphans += len(left)
                orphan_seconds.append(gone)
                print(f"driver killed at {lines} journaled evaluations; its processes ({', '.join(names) or '-'}) "
                      + (f"all gone {gone:.1f} s later" if not left else
                         f"{len(left)} still alive after {args.orphan_wait:g} s "
                         f"({', '.join(_cmdline(p)[:60] for p in left)}): reaped"), flush=True)
                for p in left:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                break
            if time.monotonic() >= next_actor_kill:
                next_actor_kill = time.monotonic() + args.actor_kill_every * rng.uniform(0.5, 1.5)
                actors = [p for p in _children(driver.pid) if _cmdline(p).startswith("ray::EvaluatorActor")]
                if actors:
                    os.kill(rng.choice(actors), signal.SIGKILL)
                    actor_kills += 1
        while True:  # reap whatever ended
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        log.close()
        if driver.returncode not in (0, -signal.SIGKILL):
            print(f"the driver exited {driver.returncode}; see {log.name}")
            return 1
        if driver.returncode == 0:
            break
        assert run_dir is not None, "the driver was killed before it created its run directory"
        resumes.append(lines)
        argv = [*cli, "--resume", str(run_dir), "--max-concurrent", str(args.actors)]
    wall = time.monotonic() - t0
    assert run_dir is not None
    got, want = _journal_keys(run_dir), _journal_keys(ref_dir)
    retried = sum(1 for line in (run_dir / "journal.jsonl").read_text("utf-8").splitlines()
                  if json.loads(line)["attempts"] > 1)
    print(f"chaos: {len(got)} evaluations on {args.actors} Ray actors in {wall:.0f} s; {actor_kills} actors killed, "
          f"{driver_kills} driver kills and resumes; what a killed driver left behind was gone after "
          f"{max(orphan_seconds, default=0):.1f} s at most ({orphans} still alive after {args.orphan_wait:g} s); "
          f"{retried} evaluations journaled after more than one attempt")
    same = got == want
    ok = check_journal(run_dir, total)
    print("journal equals the uninterrupted run's" if same else
          f"JOURNAL DIFFERS from the uninterrupted run's at eval_ids "
          f"{sorted({a[0] for a in set(got) ^ set(want)})[:20]}")
    return 0 if same and ok else 1


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
    ap.add_argument("--chaos", action="store_true", help="kill actors and the driver; compare the journal")
    ap.add_argument("--eval-seconds", type=float, default=0.2, help="--chaos: emulated wall time per evaluation")
    ap.add_argument("--actor-kill-every", type=float, default=3.0, help="--chaos: mean seconds between actor kills")
    ap.add_argument("--driver-kills", type=int, default=5, help="--chaos: SIGKILLs of the driver (each resumed)")
    ap.add_argument("--seed", type=int, default=1, help="--chaos: seed of what is killed when")
    ap.add_argument("--orphan-wait", type=float, default=15.0,
                    help="--chaos: seconds to wait for a killed driver's processes to end before reaping them")
    args = ap.parse_args(argv)
    if args.chaos:
        if "--evals" not in (argv if argv is not None else sys.argv):
            args.evals = 2000
        if "--particles" not in (argv if argv is not None else sys.argv):
            args.particles = 40
        return chaos(args)
    sys.path.insert(0, str(REPO))
    if args.tracemalloc:
        tracemalloc.start()

    from msopt.cli.progress import PlainLog, ProgressCallback
    from msopt.config import load_settings
    from msopt.run.driver import Driver
    from msopt.run.pool import InProcessPool
    from msopt.run.store import RunStore

    iters = math.ceil(args.evals / args.particles)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="msopt-soak-"))
    cfg = out / "soak.toml"
    out.mkdir(parents=True, exist_ok=True)
    cfg.write_text(CONFIG.format(n=args.particles, iters=iters, mode=args.mode, dup=args.duplicates,
                                 top_k=args.top_k), encoding="utf-8")
    settings = load_settings(str(cfg), environ={})
    store = RunStore.create(out, settings.config, meta={"argv": sys.argv})
    total = 1 + args.particles * iters + args.top_k
    print(f"run directory: {store.run_dir}; {total} evaluations on {args.actors} "
          f"{'threads' if args.no_ray else 'Ray actors'}, mode {args.mode}, duplicates {args.duplicates}",
          flush=True)
    devnull = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    probe = MemoryProbe(PlainLog(devnull), [int(x) for x in args.at.split(",") if x])
    started_ray = False
    if args.no_ray:
        pool: Any = InProcessPool(settings.config, size=args.actors, run_dir=str(store.run_dir))
    else:
        import ray

        from actors.pool import RayPool, init_ray

        started_ray = init_ray(settings.config, None, simulate=True, slots=args.actors)
        pool = RayPool(settings.config, simulate=True, run_dir=str(store.run_dir), max_concurrent=args.actors)
    t0 = time.monotonic()
    try:
        driver = Driver(settings.config, pool, store=store, callbacks=[ProgressCallback(probe, str(store.run_dir))])
        outcome = driver.run()  # the callback starts and closes the display
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
