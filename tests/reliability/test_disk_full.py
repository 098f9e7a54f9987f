"""Disk full: the journal's writes fail mid-run; the run stops cleanly and --resume completes it.

The run is ``msopt optimize --no-ray`` in this process (``msopt.cli.main``) over the simulator.
Every write of the ``msopt.run.store`` package (``os.write`` for the journal and atomic documents, file writes
for results.csv) goes through :class:`FullDisk`, which lets ``budget`` writes through, cuts the
next one short (a partial write, as a filling disk does) and refuses every later one with ENOSPC.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from msopt.cli.main import main
from msopt.run.store import RunStore, _files, _journal, _lock, _store, _table

CFG = """
simulate = true
n_particles = 3
iters = 2
seed = 7
sample_size = 12
mode = "{mode}"
[data_storage]
pso_top_k = 1
[simulator]
hardware = "h100-sxm"
model = "llama-3.1-8b"
noise = 0.0
[simulator.workload]
input_len = 64
output_len = 8
num_prompts = 12
concurrency = 4
[vllm.command]
executable = ["vllm", "serve"]
model = "x"
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 4
max = 64
dtype = "int"
value = 16
[[vllm.target_field]]
name = "gpu_memory_utilization"
config_position = "--gpu-memory-utilization"
min = 0.7
max = 0.95
dtype = "float"
value = 0.9
"""
STORE_MODULES = (_files, _journal, _lock, _store, _table)  # every module of the package that writes
TOTAL = 1 + 3 * 2 + 1  # baseline, 3 particles x 2 iterations, top-1 refinement


class FullDisk:
    """Stands in for ``os`` and ``open`` inside msopt.run.store: the disk fills after ``budget`` writes."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.writes = 0

    def _full(self) -> OSError:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def write(self, fd: int, data: Any) -> int:
        self.writes += 1
        if self.writes <= self.budget:
            return os.write(fd, data)
        if self.writes == self.budget + 1 and len(data) > 1:
            return os.write(fd, bytes(data)[: len(data) // 2])  # a short write: the disk just filled
        raise self._full()

    def open_file(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        """The ``open`` builtin as msopt.run.store sees it."""
        fh = open(file, mode, *args, **kwargs)  # noqa: SIM115
        if not any(c in mode for c in "wax+"):
            return fh
        disk = self

        class _File:
            def __getattr__(self, name: str) -> Any:
                return getattr(fh, name)

            def __enter__(self) -> _File:
                return self

            def __exit__(self, *exc: object) -> None:
                fh.close()

            def write(self, text: Any) -> int:
                disk.writes += 1
                if disk.writes > disk.budget:
                    raise disk._full()
                return fh.write(text)

        return _File()

    def __getattr__(self, name: str) -> Any:  # everything else is the real os module
        return getattr(os, name)


def _fill(m: pytest.MonkeyPatch, disk: FullDisk) -> None:
    for mod in STORE_MODULES:
        if hasattr(mod, "os"):
            m.setattr(mod, "os", disk)
        m.setattr(mod, "open", disk.open_file, raising=False)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _journal(run_dir: Path) -> list[dict]:
    raw = (run_dir / "journal.jsonl").read_bytes()
    assert raw == b"" or raw.endswith(b"\n"), "a partial last line"
    return [json.loads(line) for line in raw.decode("utf-8").splitlines()]


def _key(rec: dict) -> tuple:
    return (rec["eval_id"], rec["phase"], rec["particle"], rec["iteration"], json.dumps(rec["values"], sort_keys=True),
            rec["fitness"])


@pytest.fixture
def config(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    path = tmp_path / "cfg.toml"
    path.write_text(CFG.format(mode=getattr(request, "param", "sync")), encoding="utf-8")
    return path


def _reference(config: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    code, stdout, _ = _run(["optimize", "-c", str(config), "--no-ray", "--plain", "-o", str(out)], capsys)
    assert code == 0
    return _journal(Path(stdout.strip().splitlines()[-1]))


@pytest.mark.slow  # a run per case, resumed
@pytest.mark.parametrize("config", ["sync", "async"], indirect=True)
@pytest.mark.parametrize("budget", [5, 6, 10, 15])  # the first write after creation: the lock's pid
def test_disk_full_stops_cleanly_and_resume_completes(config: Path, budget: int, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs"
    disk = FullDisk(budget)
    with monkeypatch.context() as m:
        _fill(m, disk)
        code, _, stderr = _run(["optimize", "-c", str(config), "--no-ray", "--plain", "-o", str(out)], capsys)
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    (run_dir,) = list(out.iterdir())
    assert "the disk is full" in lines[0] and f"msopt optimize --resume {run_dir}" in lines[0], lines[0]
    journal = _journal(run_dir)  # parses, no partial line
    assert 0 < len(journal) < TOTAL
    assert len({r["eval_id"] for r in journal}) == len(journal)
    store = RunStore.open(run_dir)
    assert len(store.load_journal()) == len(journal) and not store.warnings

    code, _, stderr = _run(["optimize", "--resume", str(run_dir), "--no-ray", "--plain"], capsys)
    assert code == 0, stderr
    final = _journal(run_dir)
    ids = [r["eval_id"] for r in final]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == TOTAL  # every evaluation exactly once
    assert final[: len(journal)] == journal  # nothing journaled before the stop was touched
    rows = (run_dir / "results.csv").read_text(encoding="utf-8").splitlines()
    assert len(rows) == 1 + TOTAL
    if 'mode = "sync"' in config.read_text():  # async order follows timing; sync is reproducible
        reference = _reference(config, tmp_path / "ref", capsys)
        assert sorted(map(_key, final)) == sorted(map(_key, reference))  # as if never interrupted


def test_disk_full_at_creation_leaves_no_run_directory(config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs"
    disk = FullDisk(1)
    _fill(monkeypatch, disk)
    code, _, stderr = _run(["optimize", "-c", str(config), "--no-ray", "--plain", "-o", str(out)], capsys)
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and "the disk is full" in stderr, stderr
    assert "start the run again" in stderr and "--resume" not in stderr, stderr  # there is nothing to resume
    assert out.is_dir() and not any(out.iterdir())
