"""`msopt optimize -e vllm -b builtin` through the whole real process path, with Ray actors.

The engine's executable is `msopt sim-serve`, so every evaluation launches a real server process
with the rendered flags, waits for readiness over HTTP, runs the builtin load generator against
it and stops it. Checks: the servers saw the decoded values in their argv; nothing is left behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from tests.support.procs import recorded, started, survivors
from tests.support.sim_serve_run import MAX_NUM_SEQS, SIM_SERVE, run_optimize, sim_serve_config

TP = """[[vllm.target_field]]
name = "tp"
config_position = "--tensor-parallel-size"
min = 0
max = 1
dtype = "enum"
dtype_param = [1, 2]
value = 1
"""


def config(exe: list[str], token: str, model: object) -> str:
    """Two particles, one iteration, tp and max_num_seqs, served as ``token``."""
    return sim_serve_config(exe, str(model), served=token, fields=TP + MAX_NUM_SEQS)


@pytest.mark.slow  # a whole run through sim-serve
def test_optimize_builtin_through_sim_serve(tmp_path):
    token = f"e2e-{uuid.uuid4().hex[:8]}"
    pids = tmp_path / "pids"
    (tmp_path / "Qwen3-8B").mkdir()  # preflight checks the model path; sim-serve picks qwen3-8b by its name
    argv_dir = tmp_path / "argv"
    argv_dir.mkdir()
    env = dict(os.environ, MSOPT_SIM_SERVE_ARGV_FILE=str(argv_dir))
    done = run_optimize(tmp_path, config(recorded(SIM_SERVE, pids), token, tmp_path / "Qwen3-8B"),
                        "-e", "vllm", "-b", "builtin", env=env)
    run, lines = done.run_dir, done.journal
    launched = [r for r in lines if not r["reused"]]
    assert len(lines) >= 3 and launched
    for r in launched:
        assert r["error"] is None, r["error"]
        assert r["real_evaluation"] and r["metrics"]["success_rate"] == 1.0
        assert r["metrics"]["generate_speed"] > 0 and r["metrics"]["time_to_first_token"] > 0
    seen = [json.loads(p.read_text()) for p in argv_dir.glob("argv-*.json")]
    seqs_seen = {int(a[a.index("--max-num-seqs") + 1]) for a in seen}
    assert {r["values"]["max_num_seqs"] for r in launched} <= seqs_seen
    assert any(p.name.startswith("eval-") and "server" in p.name for p in (run / "logs").iterdir())
    assert started(pids) and survivors(pids) == []  # every server stopped


def test_optimize_runs_the_cheap_preflight_before_the_baseline(tmp_path):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(config(SIM_SERVE, "unused", "/nonexistent/msopt-test/Qwen3-8B"))
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "--no-ray", "--plain",
                          "-o", str(tmp_path / "runs")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "FAIL model: model path /nonexistent/msopt-test/Qwen3-8B does not exist" in out.stderr
    assert "preflight check(s) failed" in out.stderr.splitlines()[-1]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


CRASHING = """
import sys
print("INFO 12-01 09:00:00 api_server.py: vLLM API server version 0.32.0")
print("Traceback (most recent call last):")
print('  File "vllm/config/model.py", line 1, in __post_init__')
print("ZeroDivisionError: msopt test crash in ModelConfig")
print("INFO 12-01 09:00:01 shutting down")
sys.exit(1)
"""


@pytest.mark.slow
def test_a_server_that_dies_before_ready_says_why_in_the_plain_line_and_the_journal(tmp_path):
    """Issue 25, bug 7: the plain line stopped at "log ... ends with:"."""
    script = tmp_path / "crash.py"
    script.write_text(CRASHING)
    (tmp_path / "Qwen3-8B").mkdir()
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(config([sys.executable, str(script)], "t", tmp_path / "Qwen3-8B"))
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "--no-ray", "--plain",
                          "-o", str(tmp_path / "runs")], capture_output=True, text=True, timeout=300)
    failed = [ln for ln in out.stdout.splitlines() if "eval 0 baseline failed" in ln][0]
    assert "status 1 before" in failed and "ZeroDivisionError: msopt test crash in ModelConfig" in failed, failed
    (run,) = list((tmp_path / "runs").iterdir())
    rec = json.loads((run / "journal.jsonl").read_text().splitlines()[0])
    assert "ZeroDivisionError: msopt test crash in ModelConfig" in rec["error"].splitlines()[0]
    assert rec["error"].splitlines()[-1] == "INFO 12-01 09:00:01 shutting down"


@pytest.mark.slow  # a run through sim-serve
def test_every_server_port_comes_from_cluster_ports(tmp_path):
    """Issue 25, bug 9: [cluster] ports confines the ports msopt picks (here two trials at once)."""
    from msopt.launch.ports import free_port

    base = free_port()
    lo, hi = (base, base + 49) if base + 49 <= 65535 else (base - 49, base)
    (tmp_path / "Qwen3-8B").mkdir()
    argv_dir = tmp_path / "argv"
    argv_dir.mkdir()
    env = dict(os.environ, MSOPT_SIM_SERVE_ARGV_FILE=str(argv_dir))
    text = sim_serve_config(SIM_SERVE, tmp_path / "Qwen3-8B", served="ports", fields=TP + MAX_NUM_SEQS,
                            cluster=f'ports = "{lo}-{hi}"\n')
    run_optimize(tmp_path, text, "--no-ray", "--max-concurrent", "2", env=env)
    seen = [json.loads(p.read_text()) for p in argv_dir.glob("argv-*.json")]
    assert len(seen) >= 2
    assert all(lo <= int(a[a.index("--port") + 1]) <= hi for a in seen)
