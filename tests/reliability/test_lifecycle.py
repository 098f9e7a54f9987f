"""Issue 25, bug 1: no server process outlives the driver, for Ctrl-C, SIGTERM and SIGKILL, with and
without Ray, and an actor killed mid-benchmark; each run then resumes to an uninterrupted run's journal.

The engine is ``msopt sim-serve`` behind tests/support/orphan_kids.py: every server has a worker in its
group that renames itself and, orphaned, ignores SIGTERM, as vLLM's CPU workers do. Processes are
judged by the pids and process groups the test recorded (tests/support/procs.py), never by command line.
tests/real_engine/test_lifecycle.py runs the same against the real vLLM CPU build.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from tests.e2e.test_optimize_real_path import config
from tests.support.lifecycle import interrupt_then_resume, journal, optimize, run_dir, shape, wait_until
from tests.support.procs import kids, left_behind, recorded

HERE = Path(__file__).resolve().parents[1]


def _config(tmp: Path) -> tuple[Path, Path]:
    pids = tmp / "pids"
    exe = recorded([sys.executable, str(HERE / "support" / "orphan_kids.py"), str(pids), sys.executable, "-m", "msopt.cli",
                    "sim-serve"], pids)
    (tmp / "Qwen3-8B").mkdir()
    cfg = tmp / "cfg.toml"
    cfg.write_text(config(exe, "lifecycle", tmp / "Qwen3-8B"))
    return cfg, pids


def _uninterrupted(cfg: Path, tmp: Path, flags: tuple[str, ...]) -> list[tuple]:
    proc = optimize(cfg, tmp / "whole", *flags)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-2000:] + err[-2000:]
    return shape(journal(run_dir(tmp / "whole")))


# Sized by the configuration (2 particles, 1 iteration, top 1): with --max-launches, a resumed run
# plans its remaining budget differently from an uninterrupted one (the budget belongs to issue 25's
# bug 5, fixed elsewhere), and this test compares the two.
NO_RAY = ("--no-ray",)
RAY: tuple[str, ...] = ()


@pytest.mark.slow  # three runs and their resumes, each launching two servers
def test_no_server_outlives_the_driver_without_ray(tmp_path: Path) -> None:
    cfg, pids = _config(tmp_path)
    expected = _uninterrupted(cfg, tmp_path, NO_RAY)
    assert len(expected) == 4 and all(ok for *_, ok, _ in expected)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
        got = interrupt_then_resume(cfg, tmp_path, pids, sig, NO_RAY, expected, members=2)
        print(f"--no-ray {sig.name}: {got}")
    assert kids(pids) >= 3 * 4


@pytest.mark.slow  # Ray starts for each of four runs and three resumes
def test_no_server_outlives_the_driver_with_ray(tmp_path: Path) -> None:
    cfg, pids = _config(tmp_path)
    expected = _uninterrupted(cfg, tmp_path, RAY)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
        got = interrupt_then_resume(cfg, tmp_path, pids, sig, RAY, expected, members=2)
        print(f"ray {sig.name}: {got}")


@pytest.mark.slow
def test_an_actor_killed_mid_benchmark_takes_its_server_and_the_run_goes_on(tmp_path: Path) -> None:
    cfg, pids = _config(tmp_path)
    expected = _uninterrupted(cfg, tmp_path, RAY)
    output = tmp_path / "runs"
    proc = optimize(cfg, output, *RAY)
    try:
        def benchmarking() -> bool:
            logs = list(output.glob("*/logs/eval-*-benchmark-a1.log"))
            return bool(logs) and bool(left_behind(pids))
        wait_until(benchmarking, proc, "a benchmark started")
        (leader,) = [p for p in left_behind(pids) if (pids / str(p)).exists()]
        actor = int(Path(f"/proc/{leader}/stat").read_text().rsplit(")", 1)[1].split()[1])
        group = [p for p in left_behind(pids)]
        os.kill(actor, signal.SIGKILL)
        wait_until(lambda: not set(group) & set(left_behind(pids)), proc, "the killed actor's server stopped")
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out[-2000:] + err[-3000:]
    got = journal(run_dir(output))
    assert shape(got) == expected
    assert max(r["attempts"] for r in got) >= 2  # the killed actor's evaluation ran again
    assert left_behind(pids) == []
