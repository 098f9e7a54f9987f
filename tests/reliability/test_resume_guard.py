"""--resume owns its run directory and checks it (issue 18, item 4).

A second driver of one run directory stops before it launches anything; an edited config.toml
is refused with what changed; flags that would change the run are refused with --resume.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from msopt.cli.main import main
from msopt.run.store import RunStore
from tests.reliability.test_run_directory import SMALL


@pytest.fixture
def run_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(SMALL, encoding="utf-8")
    assert main(["optimize", "-c", str(cfg), "--no-ray", "--plain", "-o", str(tmp_path / "runs")]) == 0
    return Path(capsys.readouterr().out.strip().splitlines()[-1])


def _resume(run_dir: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    code = main(["optimize", "--resume", str(run_dir), "--no-ray", "--plain", *flags])
    return code, capsys.readouterr().err


def _journal_lines(run_dir: Path) -> int:
    return len((run_dir / "journal.jsonl").read_bytes().splitlines())


def test_a_second_driver_of_one_run_directory_is_refused(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _journal_lines(run_dir)
    owner = RunStore.open(run_dir)
    owner.lock()
    try:
        code, err = _resume(run_dir, capsys)
    finally:
        owner.close()
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and f"in use by another msopt optimize (pid {os.getpid()})" in err, err
    assert _journal_lines(run_dir) == before
    code, err = _resume(run_dir, capsys)  # the owner is gone: the lock went with it
    assert code == 0, err


def test_the_lock_of_a_killed_driver_does_not_block_resume(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from msopt.run.store import RunStore; "
         "s = RunStore.open(sys.argv[1]); s.lock(); print('locked', flush=True); time.sleep(600)", str(run_dir)],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        code, err = _resume(run_dir, capsys)
        assert code == 2 and f"pid {holder.pid}" in err, err
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    code, err = _resume(run_dir, capsys)
    assert code == 0, err


@pytest.mark.parametrize("edit, said", [
    (lambda t: t.replace("seed = 3", "seed = 4"), "seed: 3 -> 4"),
    (lambda t: t.replace("n_particles = 2", "n_particles = 3"), "n_particles: 2 -> 3"),
    (lambda t: t + '\n[[vllm.target_field]]\nname = "x"\nconfig_position = "--x"\nmin = 1\nmax = 2\n'
                   'dtype = "int"\nvalue = 1\n', "vllm.target_field[1].name added"),
    (lambda t: t + "\n[[[", "no longer valid TOML"),
])
def test_an_edited_config_is_refused_with_what_changed(edit, said: str, run_dir: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = run_dir / "config.toml"
    original = path.read_text(encoding="utf-8")
    before = _journal_lines(run_dir)
    path.write_text(edit(original), encoding="utf-8")
    code, err = _resume(run_dir, capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and said in err and "config_toml" in err, err
    assert _journal_lines(run_dir) == before
    path.write_text(original, encoding="utf-8")
    code, err = _resume(run_dir, capsys)
    assert code == 0, err


@pytest.mark.parametrize("flags", [["--iters", "10"], ["--seed", "5"], ["--particles", "7"],
                                   ["--iters", "10", "--seed", "5", "--particles", "7"], ["-e", "sglang"]])
def test_flags_that_change_the_run_are_refused_with_resume(flags: list[str], run_dir: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _resume(run_dir, capsys, *flags)
    assert code == 2, err
    assert all(f in err for f in flags if f.startswith("-")), err
