"""The driver's lifecycle under signals, shared by the sim-serve and the real-engine tests.

A run is started as a user starts it (``msopt optimize`` in a session of its own), its engine
wrapped by tests/support/record_pid.py (and, for sim-serve, tests/support/orphan_kids.py), so the test knows every
server pid and process group it started. :func:`interrupt_then_resume` signals the driver while a
server runs, checks that no process of those groups is left, resumes, and compares the journal
with an uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.procs import left_behind, started

#: A guard against a hang only; nothing is timed against it.
HANG = 600.0
#: Exit status of the driver per signal (README: 130 for Ctrl-C, 143 for SIGTERM).
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -signal.SIGKILL}


def optimize(cfg: Path, output: Path, *flags: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``msopt optimize --plain -c cfg -o output FLAGS`` in a new session (as from a terminal)."""
    return subprocess.Popen([sys.executable, "-m", "msopt.cli", "optimize", "--plain", "-c", str(cfg), "-o",
                             str(output), *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)


def resume(run: Path, *flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``msopt optimize --plain --resume run FLAGS``, to its end."""
    return subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "--plain", "--resume", str(run), *flags],
                          capture_output=True, text=True, timeout=HANG, env=env)


def run_dir(output: Path) -> Path:
    (d,) = [p for p in output.iterdir() if p.is_dir()]
    return d


def journal(run: Path) -> list[dict[str, Any]]:
    """The journal's records, each eval once."""
    out = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
    ids = [r["eval_id"] for r in out]
    assert len(ids) == len(set(ids)), f"an eval journaled twice: {ids}"
    return out


def shape(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What an interrupted-and-resumed run shares with an uninterrupted one: each evaluation's id and
    phase, that it succeeded, and whether it was a reuse. Not the values after the interruption: a
    real server's fitness varies from run to run, and the search (its in-run refit) follows the
    measurements; what ran before the interruption is compared record for record instead. Nor the
    baseline's re-measurements (phase "baseline", iteration >= 1): the baseline is re-measured as
    often as the recommendation, and which configuration is recommended follows the measured
    fitness too."""
    return sorted((r["eval_id"], r["phase"], r["error"] is None, r["reused"]) for r in records
                  if not (r["phase"] == "baseline" and r["iteration"] > 0))


def wait_until(pred: Any, proc: subprocess.Popen | None = None, what: str = "") -> None:
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        if pred():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the driver exited ({proc.returncode}) before {what}: "
                                 f"{proc.stderr.read()[-3000:] if proc.stderr else ''}")
        time.sleep(0.05)
    raise AssertionError(f"stalled before {what}")


def server_running(output: Path, pids: Path, journaled: int, members: int) -> bool:
    """``journaled`` evaluations are in the journal and ``members`` processes of recorded server
    groups are alive (a server's workers and its watcher included)."""
    runs = list(output.glob("*/journal.jsonl"))
    return bool(runs) and len(runs[0].read_text().splitlines()) >= journaled and len(left_behind(pids)) >= members


def interrupt_then_resume(cfg: Path, tmp: Path, pids: Path, sig: int, flags: tuple[str, ...],
                          expected: list[tuple[Any, ...]], *, members: int,
                          env: dict[str, str] | None = None) -> dict[str, Any]:
    """Signal the driver while the second evaluation's server runs, check nothing is left, resume,
    and compare the journal's shape with ``expected``; return what was measured."""
    output = tmp / f"runs-{int(sig)}"
    proc = optimize(cfg, output, *flags, env=env)
    try:
        wait_until(lambda: server_running(output, pids, 1, members), proc, "the second server started")
        before = left_behind(pids)
        t0 = time.monotonic()
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=HANG)
        exited = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == EXIT[sig], err[-3000:]
    run = run_dir(output)
    if sig != signal.SIGKILL:
        assert f"msopt optimize --resume {run}" in err and "Traceback" not in err, err[-3000:]
        if "--no-ray" in flags:
            assert left_behind(pids) == [], "the driver exited before stopping its servers"
    # without Ray the driver itself stops its servers before it exits; Ray's actors (and a killed
    # driver's servers) go when their watchers see the launching process gone, just after
    wait_until(lambda: left_behind(pids) == [], None, f"every server process stopped (left: {left_behind(pids)})")
    gone = time.monotonic() - t0
    partial = {r["eval_id"]: r for r in journal(run)}
    assert len(partial) < len(expected)
    done = resume(run, *flags, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    got = journal(run)
    for r in got:
        if r["eval_id"] in partial:
            assert r == partial[r["eval_id"]]
    assert shape(got) == expected, (shape(got), expected)
    assert started(pids) and left_behind(pids) == []
    return {"seen_before": len(before), "exit_s": round(exited, 2), "all_gone_s": round(gone, 2)}
