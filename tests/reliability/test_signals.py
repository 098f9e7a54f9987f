"""SIGTERM stops a run as Ctrl-C does (issue 18, item 6): exit 143, the journal intact, one
line with the resume command, and no dump from Ray's own SIGTERM handler."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.test_resume import config, journal, run_dir_of


def _start(cfg: Path, output: Path, *flags: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "msopt.cli", "optimize", "--plain", "-c", str(cfg),
                             "-o", str(output), *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _wait_for_journal(output: Path, proc: subprocess.Popen, lines: int) -> None:
    deadline = time.monotonic() + 600  # a guard against a hang only; nothing here is timed
    while time.monotonic() < deadline and proc.poll() is None:
        runs = list(output.glob("*/journal.jsonl"))
        if runs and len(runs[0].read_text().splitlines()) >= lines:
            return
        time.sleep(0.05)
    raise AssertionError(f"the run ended or stalled before journaling {lines} evaluations")


def _sigterm_then_resume(tmp_path: Path, *flags: str) -> None:
    cfg = config(tmp_path)
    output = tmp_path / "runs"
    proc = _start(cfg, output, *flags)
    try:
        _wait_for_journal(output, proc, 2)
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    run = run_dir_of(output)
    assert proc.returncode == 143, err
    assert "SIGTERM received" not in err and "Traceback" not in err, err
    assert f"msopt optimize --resume {run}" in err, err
    partial = journal(run)  # parses, each eval once
    assert len(partial) < 1 + 4 * 3 + 1 + 1  # the baseline, 3 iterations of 4, the best again, the baseline beside it
    resumed = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "--plain", "--resume", str(run),
                              *flags], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    got = journal(run)
    assert len(got) == 1 + 4 * 3 + 1 + 1  # the baseline, 3 iterations of 4, the best again, the baseline beside it
    for eval_id, line in partial.items():
        assert got[eval_id] == line


@pytest.mark.slow
def test_sigterm_without_ray(tmp_path: Path) -> None:
    _sigterm_then_resume(tmp_path, "--no-ray", "--max-concurrent", "2")


@pytest.mark.slow
def test_sigterm_with_ray(tmp_path: Path) -> None:
    _sigterm_then_resume(tmp_path, "--max-concurrent", "2")
