"""Issue 25, bug 1: no server process outlives the driver, for Ctrl-C, SIGTERM and SIGKILL, with and
without Ray; each run then resumes to an uninterrupted run's journal.

The engine is ``msopt sim-serve`` behind tests/support/orphan_kids.py: every server has a worker in its
group that renames itself and, orphaned, ignores SIGTERM, as vLLM's CPU workers do. Processes are
judged by the pids and process groups the test recorded (tests/support/procs.py), never by command line.

Each case runs once in the suite (issue 34 item 7): here the three that do not run against the real vLLM CPU
build. The real engine has Ctrl-C without Ray, SIGKILL with Ray and an actor killed mid-benchmark
(tests/real_engine/test_lifecycle.py), and SIGTERM with Ray (tests/real_engine/test_readme_real_path.py).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from tests.e2e.test_optimize_real_path import config
from tests.support.lifecycle import interrupt_then_resume, journal, optimize, run_dir, shape
from tests.support.procs import kids, recorded

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


@pytest.mark.slow  # two runs and their resumes, each launching two servers
def test_no_server_outlives_the_driver_without_ray(tmp_path: Path) -> None:
    cfg, pids = _config(tmp_path)
    expected = _uninterrupted(cfg, tmp_path, NO_RAY)
    assert len(expected) == 4 and all(ok for *_, ok, _ in expected)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        got = interrupt_then_resume(cfg, tmp_path, pids, sig, NO_RAY, expected, members=2)
        print(f"--no-ray {sig.name}: {got}")
    assert kids(pids) >= 2 * 4


@pytest.mark.slow  # Ray starts for a run, the interrupted one and its resume
def test_no_server_outlives_the_driver_stopped_by_ctrl_c_with_ray(tmp_path: Path) -> None:
    cfg, pids = _config(tmp_path)
    expected = _uninterrupted(cfg, tmp_path, RAY)
    got = interrupt_then_resume(cfg, tmp_path, pids, signal.SIGINT, RAY, expected, members=2)
    print(f"ray SIGINT: {got}")
