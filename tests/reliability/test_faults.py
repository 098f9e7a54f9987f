"""Faults on the real process path: a server that never becomes ready, one that crashes in the
middle of the benchmark, a benchmark that hangs, and a driver killed ten times in a row.

After each: the run completes, every evaluation is in the journal exactly once, and no process
is left behind.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.procs import recorded, started, survivors

pytestmark = pytest.mark.slow  # real servers and benchmarks, a driver killed ten times

REPO = Path(__file__).resolve().parents[2]
KILL_AT = REPO / "tests" / "support" / "kill_at.py"
# every process a test starts goes through tests/support/record_pid.py into the test's own pid directory,
# and a test looks at those processes only: other tests and other runs on the machine sleep too
SIM_SERVE_ARGV = [sys.executable, "-m", "msopt.cli", "sim-serve"]
HANG_ARGV = [sys.executable, "-c", "import time, sys; time.sleep(600)", "{token}"]

BASE = """
engine = "vllm"
benchmark = "{benchmark}"
n_particles = 2
iters = 1
sample_size = 8
particles_time_out = {time_out}
[data_storage]
pso_top_k = 0
[cluster]
accelerator = "none"
[vllm]
wait_start_time = {wait}
[vllm.command]
executable = {server}
model = "{model}"
served_model_name = "{token}"
others = "--time-scale 0.01 {server_flags}"
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 4
max = 16
dtype = "int"
value = 8
[builtin]
input_len = 32
output_len = 4
concurrency = 2
num_prompts = 8
request_timeout = 30
[vllm_benchmark.command]
executable = {bench}
num_prompts = 8
"""


def run_optimize(tmp_path: Path, *, benchmark="builtin", server=SIM_SERVE_ARGV, bench=HANG_ARGV, server_flags="",
                 wait=30, time_out=120) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """Run optimize with ``server`` and ``bench`` (argv lists; ``{token}`` becomes the test's own token),
    each through the pid recorder; return the result, the run directory and the pid directory."""
    token = f"fault-{uuid.uuid4().hex[:8]}"
    pids = tmp_path / "pids"

    def exe(argv: list[str]) -> str:
        return json.dumps(recorded([a.replace("{token}", token) for a in argv], pids))

    cfg = tmp_path / "cfg.toml"
    (tmp_path / "Qwen3-8B").mkdir()  # optimize's preflight checks the model path
    cfg.write_text(BASE.format(benchmark=benchmark, server=exe(server),
                               bench=exe(bench), server_flags=server_flags,
                               wait=wait, time_out=time_out, token=token, model=tmp_path / "Qwen3-8B"))
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "--no-ray", "--plain",
                          "--max-concurrent", "2", "-o", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=600)
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1, out.stderr
    return out, runs[0], pids


def journal(run: Path) -> list[dict]:
    lines = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
    ids = [x["eval_id"] for x in lines]
    assert len(ids) == len(set(ids)), "an evaluation was journaled twice"
    return lines


def test_server_never_ready(tmp_path):
    never = [sys.executable, "-c", "import time; time.sleep(600)", "{token}", "--"]
    out, run, pids = run_optimize(tmp_path, server=never, wait=2)
    assert out.returncode == 1, out.stderr  # nothing succeeded: said, not crashed
    lines = journal(run)
    assert sorted(x["eval_id"] for x in lines) == [0, 1, 2]
    launched = [x for x in lines if not x["reused"]]
    assert launched and all(x["fitness"] is None and "ready" in x["error"] for x in launched)
    assert started(pids) and survivors(pids) == []


def test_server_crashes_mid_benchmark(tmp_path):
    out, run, pids = run_optimize(tmp_path, server_flags="--fail-after 3")
    assert out.returncode == 1, out.stderr
    lines = journal(run)
    assert sorted(x["eval_id"] for x in lines) == [0, 1, 2]
    for x in lines:
        if not x["reused"]:
            assert x["fitness"] is None and x["error"]
            # a death mid-benchmark is a fault with its cause, not retried (issue 48): sim-serve logs vLLM's line
            # (vllm/v1/engine/core.py:1512), which the vLLM adapter's crash reader names
            assert x["crash"] is not None and x["error"].startswith("vLLM's engine core failed serving "), x
            assert x["attempts"] == 1
    assert started(pids) and survivors(pids) == []


def test_benchmark_hangs(tmp_path):
    out, run, pids = run_optimize(tmp_path, benchmark="vllm_benchmark", bench=HANG_ARGV, time_out=3)
    assert out.returncode == 1, out.stderr
    lines = journal(run)
    assert sorted(x["eval_id"] for x in lines) == [0, 1, 2]
    launched = [x for x in lines if not x["reused"]]
    assert all("did not finish" in x["error"] for x in launched)
    assert started(pids) and survivors(pids) == []


KILL_CFG = """
simulate = true
n_particles = 4
iters = 4
seed = 5
sample_size = 16
[data_storage]
pso_top_k = 1
[cluster]
accelerator = "NPU"
devices_per_trial = 1
[simulator]
hardware = "atlas-800i-a2"
model = "qwen3-8b"
noise = 0.02
emulate_wall_time = true
eval_seconds = 0.3
[simulator.workload]
input_len = 128
output_len = 16
num_prompts = 16
concurrency = 4
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 4
max = 64
dtype = "int"
value = 8
[[vllm.target_field]]
name = "max_num_batched_tokens"
config_position = "--max-num-batched-tokens"
min = 512
max = 4096
dtype = "int"
value = 2048
"""


def test_driver_killed_ten_times_then_resumed(tmp_path):
    cfg = tmp_path / "kill.toml"
    cfg.write_text(KILL_CFG)
    cmd = [sys.executable, "-m", "msopt.cli", "optimize", "--no-ray", "--plain", "--max-concurrent", "2"]
    ref = subprocess.run(cmd + ["-c", str(cfg), "-o", str(tmp_path / "ref")], capture_output=True, text=True,
                         timeout=300)
    assert ref.returncode == 0, ref.stderr
    expected = {x["eval_id"]: (x["values"], x["fitness"]) for x in journal(next((tmp_path / "ref").iterdir()))}

    # each driver SIGKILLs itself at a point chosen here (tests/support/kill_at.py), never after a delay: the
    # odd ones right after taking the run's lock (before any replay), the even ones right after
    # their first new journal line
    kill_at = [sys.executable, str(KILL_AT)]
    base = ["--no-ray", "--plain", "--max-concurrent", "2"]
    proc = subprocess.run(kill_at + ["line:1", *base, "-c", str(cfg), "-o", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    (run,) = list((tmp_path / "runs").iterdir())
    kills, lines = 1, [1]
    while kills < 10:
        n = len(journal(run))
        when = "lock" if kills % 2 else f"line:{n + 1}"
        proc = subprocess.run(kill_at + [when, *base, "--resume", str(run)], capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        kills += 1
        lines.append(len(journal(run)))
    assert lines == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]  # a lock kill adds nothing, a line kill one line
    last = subprocess.run(cmd + ["--resume", str(run)], capture_output=True, text=True, timeout=300)
    assert last.returncode == 0, last.stderr
    got = {x["eval_id"]: (x["values"], x["fitness"]) for x in journal(run)}
    assert got == expected
    assert (run / "best.json").exists()
