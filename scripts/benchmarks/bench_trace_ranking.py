"""Does tuning on the trace pick another configuration than tuning on synthetic prompts? (issue 35)

For each trace, in the simulator: a vLLM search (msopt optimize, simulated) on the trace's window,
and the same search on synthetic prompts with the window's mean input and output lengths, its
number of requests and its mean rate (Poisson arrivals, prompts that share nothing). Both best
configurations are then simulated on the trace, and the table gives each one's output tokens/s on
the trace, its TTFT and TPOT p99 there, its throughput within the SLOs (the tokens/s where every SLO
holds, else 0) and its capacity on the trace: the largest time_scale at which every SLO holds (to 5 %,
as the capacity stage finds it) and the tokens/s there. Results are deterministic for a seed; the
machine's load does not change them.

    python scripts/benchmarks/bench_trace_ranking.py --trace ../shared/traces/AzureLLMInferenceTrace_code.sample.csv \
        --trace ../shared/traces/mooncake_conversation_trace.sample.jsonl --window 0 600 --time-scale 4 \
        --slo "ttft:p99<2s,tpot:p99<100ms" --particles 6 --iters 3 --seed 1 --out ranking.md
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from msopt.cli.main import main as msopt_main  # noqa: E402
from msopt.errors import ConfigError  # noqa: E402
from msopt.evaluate import Evaluator  # noqa: E402
from msopt.evaluate.results import EvalRequest  # noqa: E402
from msopt.run.validate import load  # noqa: E402
from msopt.slo import slo_checks  # noqa: E402
from msopt.workload.replay import open_window  # noqa: E402


class Outcome(NamedTuple):
    """One best configuration, simulated on the trace."""

    tuned_on: str
    values: Mapping[str, Any]
    own_speed: float | None      # output tok/s on the workload it was tuned on (its best.json)
    own_met: bool                # the SLOs held there
    speed: float | None          # output tok/s on the trace
    ttft_p99: float | None
    tpot_p99: float | None
    met: bool
    capacity: float              # the largest time_scale at which the SLOs hold on the trace (0: none tried)
    capacity_speed: float        # output tok/s there

    @property
    def goodput(self) -> float:
        """Output tokens/s on the trace where every SLO holds, else 0."""
        return float(self.speed or 0.0) if self.met else 0.0


def _toml(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


def base_config(args: argparse.Namespace) -> str:
    """The run's common part: simulated vLLM with the packaged search space, the swarm's size and seed,
    the hardware and model, and the SLOs."""
    return (f"simulate = true\nengine = \"vllm\"\nn_particles = {args.particles}\niters = {args.iters}\n"
            f"seed = {args.seed}\n[data_storage]\npso_top_k = {args.top_k}\n"
            f"[simulator]\nhardware = {_toml(args.hardware)}\nmodel = {_toml(args.model)}\n"
            f"[slo]\nspec = {_toml(args.slo)}\n")


def trace_table(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The ``[workload]`` keys of a replay of ``path``'s window."""
    table: dict[str, Any] = {"trace": str(path), "window": [float(args.window[0]), float(args.window[1])],
                             "time_scale": float(args.time_scale)}
    if args.max_model_len:
        table["max_model_len"] = int(args.max_model_len)
    return table


def synthetic_table(trace: Mapping[str, Any]) -> dict[str, Any]:
    """Synthetic prompts like the trace window's: its mean lengths, requests and mean rate."""
    opts = {"path": trace["trace"], **{k: v for k, v in trace.items() if k != "trace"}}
    window = open_window(opts, "--trace")
    reqs = window.requests
    rate = window.rate
    if rate is None:
        raise ConfigError(f"{trace['trace']}: the window {trace['window']} spans no time; give a wider --window")
    return {"input_len": max(1, round(sum(r.input_tokens for r in reqs) / len(reqs))),
            "output_len": max(1, round(sum(r.output_tokens for r in reqs) / len(reqs))),
            "num_prompts": len(reqs), "request_rate": round(rate, 6)}


def write_config(path: Path, args: argparse.Namespace, workload: Mapping[str, Any]) -> Path:
    """A configuration file of the common part and ``workload`` as ``[workload]``."""
    body = "".join(f"{k} = {_toml(v)}\n" for k, v in workload.items())
    path.write_text(base_config(args) + "[workload]\n" + body, encoding="utf-8")
    return path


def search(config: Path, out: Path) -> dict[str, Any]:
    """``msopt optimize`` (simulated, in this process, quiet); its best.json."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        code = msopt_main(["optimize", "--plain", "--no-ray", "-c", str(config), "-o", str(out)])
    if code != 0:
        raise SystemExit(f"msopt optimize -c {config} exited {code}:\n{sink.getvalue()[-3000:]}")
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return dict(json.loads((run / "best.json").read_text(encoding="utf-8")))


def evaluate(config: Path, values: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """Simulate ``values`` on ``config``'s workload (every request of it): the metrics, and whether every
    SLO held."""
    checked = load(config, overrides={"simulate": True}, search=False)
    space = checked.space
    position = space.encode({k: v for k, v in values.items() if k in space.names})
    result = Evaluator(checked.config, simulate=True).evaluate(
        EvalRequest(0, "baseline", None, 0, tuple(position.tolist())))
    met = result.error is None and all(c.met for c in slo_checks(checked.config.run.slos, result.metrics))
    return result.metrics, met


def capacity(args: argparse.Namespace, trace: Mapping[str, Any], values: Mapping[str, Any],
             work: Path) -> tuple[float, float]:
    """The largest ``time_scale`` (to 5 %) at which ``values`` holds every SLO on the trace window, by
    doubling or halving from ``--time-scale`` (at most 6 times: 64 times it at most) then bisecting; and the
    output tok/s there.
    (0, 0) when it holds them at no scale down to 1/64 of it."""
    cfg = work / "capacity.toml"

    def met_at(scale: float) -> tuple[bool, float]:
        m, ok = evaluate(write_config(cfg, args, {**trace, "time_scale": scale}), values)
        return ok, float(m.get("generate_speed") or 0.0)

    lo, hi = 0.0, math.inf
    lo_speed = 0.0
    scale = float(args.time_scale)
    for _ in range(7):
        ok, speed = met_at(scale)
        if ok:
            lo, lo_speed = scale, speed
            if hi < math.inf:
                break
            scale *= 2
        else:
            hi = scale
            if lo > 0:
                break
            scale /= 2
    if lo == 0.0 or hi == math.inf:
        return lo, lo_speed
    while hi / lo > 1.05:
        mid = math.sqrt(lo * hi)
        ok, speed = met_at(mid)
        if ok:
            lo, lo_speed = mid, speed
        else:
            hi = mid
    return lo, lo_speed


def on_trace(args: argparse.Namespace, trace: Mapping[str, Any], config: Path, best: Mapping[str, Any],
             tuned_on: str, work: Path) -> Outcome:
    """A search's best configuration judged on the trace: at ``--time-scale``, and its capacity there."""
    values = best["values"]
    m, met = evaluate(config, values)
    own = best.get("metrics") or {}
    slos = load(config, overrides={"simulate": True}, search=False).config.run.slos
    own_met = all(c.met for c in slo_checks(slos, own))
    cap, cap_speed = capacity(args, trace, values, work) if args.capacity else (0.0, 0.0)
    return Outcome(tuned_on, dict(values), own.get("generate_speed"), own_met, m.get("generate_speed"),
                   m.get("ttft_p99"), m.get("tpot_p99"), met, cap, cap_speed)


def rank(path: Path, args: argparse.Namespace, work: Path) -> tuple[dict[str, Any], list[Outcome]]:
    """Both searches on one trace and both bests on the trace."""
    trace = trace_table(path, args)
    synthetic = synthetic_table(trace)
    stem = path.name.split(".")[0]
    on_trace_cfg = write_config(work / f"{stem}.trace.toml", args, trace)
    synthetic_cfg = write_config(work / f"{stem}.synthetic.toml", args, synthetic)
    outcomes = []
    for label, cfg in (("trace", on_trace_cfg), ("synthetic", synthetic_cfg)):
        best = search(cfg, work / f"{stem}.{label}.runs")
        outcomes.append(on_trace(args, trace, on_trace_cfg, best, label, work))
    return synthetic, outcomes


def _num(v: float | None, fmt: str) -> str:
    return "–" if v is None or not math.isfinite(v) else format(v, fmt)


def table(rows: Sequence[tuple[Path, Mapping[str, Any], Sequence[Outcome]]], time_scale: float) -> str:
    """The markdown table: per trace, the best on the trace and the best on synthetic prompts."""
    lines = ["| trace | tuned on | best configuration | where tuned: tok/s, SLOs | "
             f"on the trace at time_scale {time_scale:g}: tok/s | TTFT p99 (s) | TPOT p99 (ms) | SLOs met "
             "| tok/s within the SLOs | capacity within the SLOs: time_scale, tok/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for path, synthetic, outcomes in rows:
        for o in outcomes:
            where = ("the trace" if o.tuned_on == "trace" else
                     f"synthetic ({synthetic['input_len']}/{synthetic['output_len']} tokens, "
                     f"{synthetic['request_rate']:.2f} req/s)")
            config = ", ".join(f"{k} {v}" for k, v in o.values.items())
            tpot = None if o.tpot_p99 is None else o.tpot_p99 * 1000
            cap = f"{o.capacity:.3g}, {o.capacity_speed:.0f}" if o.capacity > 0 else "–"
            lines.append(f"| {path.name} | {where} | {config} | {_num(o.own_speed, '.0f')}, "
                         f"{'met' if o.own_met else 'missed'} | {_num(o.speed, '.0f')} "
                         f"| {_num(o.ttft_p99, '.2f')} | {_num(tpot, '.1f')} | {'yes' if o.met else 'no'} "
                         f"| {o.goodput:.0f} | {cap} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, action="append", required=True, help="a trace file (repeat for more)")
    ap.add_argument("--window", type=float, nargs=2, default=(0.0, 600.0), metavar=("START_S", "END_S"))
    ap.add_argument("--time-scale", type=float, default=4.0, help="replay speed (4: four times the trace's rate)")
    ap.add_argument("--max-model-len", type=int, default=0, help="the length policy's limit (0: none)")
    ap.add_argument("--slo", default="ttft:p99<2s,tpot:p99<100ms")
    ap.add_argument("--particles", type=int, default=6)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--top-k", type=int, default=2, help="[data_storage] pso_top_k")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hardware", default="h100-sxm")
    ap.add_argument("--model", default="qwen3-8b")
    ap.add_argument("--no-capacity", dest="capacity", action="store_false",
                    help="skip each best's capacity on the trace (the largest time_scale within the SLOs)")
    ap.add_argument("--out", type=Path, help="also write the table to this markdown file")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run both searches on every trace and print the table."""
    args = parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="msopt-ranking-") as tmp:
        for path in args.trace:
            if not path.is_file():
                print(f"{path}: no such trace file", file=sys.stderr)
                return 2
            try:
                synthetic, outcomes = rank(path.resolve(), args, Path(tmp))
            except ConfigError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            rows.append((path, synthetic, outcomes))
    text = table(rows, args.time_scale)
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
