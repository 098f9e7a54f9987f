"""The README's benchmark scripts, each run as the README shows it with fewer rounds (declared per call)."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from tests.e2e import readme

pytestmark = pytest.mark.slow


def run(line: str, timeout: float = 600) -> str:
    argv = shlex.split(line)
    assert argv[0] == "python"
    out = subprocess.run([sys.executable, *argv[1:]], cwd=readme.REPO, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, f"{line}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def test_bench_decode():
    out = run(readme.command("python scripts/benchmarks/bench_decode.py", append=["--rounds", "1", "--calls", "200"]))
    assert "decodes/s: " in out


def test_bench_sim():
    out = run(readme.command("python scripts/benchmarks/bench_sim.py", append=["--repeats", "1"]))
    assert "seconds per evaluation: " in out


def test_bench_parallel():
    out = run(readme.command("python scripts/benchmarks/bench_parallel.py",
                             append=["--actors", "1,2", "--particles", "2", "--iters", "1", "--seconds", "0.2"]))
    assert out.strip()


def test_soak_chaos():
    """One driver SIGKILL and resume; actor kills are rare here (every ~20 s): one that lands while a loaded
    machine is still starting the actor can stop the run, as the script intends."""
    out = run(readme.command("python scripts/benchmarks/soak.py --chaos",
                             append=["--evals", "24", "--particles", "6", "--actors", "2", "--eval-seconds", "0.2",
                                     "--actor-kill-every", "20", "--driver-kills", "1", "--orphan-wait", "5"]))
    assert "journal equals the uninterrupted run's" in out


def test_bench_search(tmp_path):
    out = run(readme.command("python -m scripts.benchmarks.bench_search --jobs 2",
                             append=["--seeds", "1", "--budgets", "6", "--problems", "0", "--methods", "random search",
                                     "--ablation-seeds", "none", "--no-result-cache", "--cache", str(tmp_path),
                                     "--out", "-"]), timeout=1200)
    assert "random search" in out  # msopt's own runs: tests/scripts/test_bench_independent.py
