"""Unbounded inputs are refused at load time (issue 18, item 3): -c reads regular files of at
most MAX_CONFIG_BYTES only (never /dev/zero or a FIFO, which read forever or block), and the
documented bounds on nesting and counts hold. The hostile configuration files themselves are in
tests/data/bad_configs/ (test_bad_configs.py runs them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from msopt.config.layers import MAX_CONFIG_BYTES, MAX_DEPTH, read_toml
from msopt.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def _optimize(config: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", config, "--plain", "--no-ray",
                           "-o", str(tmp_path / "runs")], capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)


def _refused(proc: subprocess.CompletedProcess[str], config: str, why: str, tmp_path: Path) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and config in lines[0] and why in lines[0], proc.stderr
    assert not (tmp_path / "runs").exists()


def test_dev_zero_is_refused(tmp_path: Path) -> None:
    _refused(_optimize("/dev/zero", tmp_path), "/dev/zero", "not a regular file", tmp_path)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "cfg.toml"
    os.mkfifo(fifo)  # nobody ever writes: a blocking read would wait forever
    _refused(_optimize(str(fifo), tmp_path), str(fifo), "not a regular file", tmp_path)


def test_a_file_over_the_size_bound_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    big.write_text("# padding\n" * (MAX_CONFIG_BYTES // 10 + 1), encoding="utf-8")
    _refused(_optimize(str(big), tmp_path), str(big), f"larger than {MAX_CONFIG_BYTES // 1024} KiB", tmp_path)


def test_a_file_at_the_size_bound_is_read(tmp_path: Path) -> None:
    ok = tmp_path / "ok.toml"
    body = "n_particles = 2\n"
    ok.write_text(body + "#" * (MAX_CONFIG_BYTES - len(body) - 1) + "\n", encoding="utf-8")
    assert read_toml(ok) == {"n_particles": 2}


@pytest.mark.parametrize("depth, ok", [(MAX_DEPTH, True), (MAX_DEPTH + 1, False), (100_000, False)])
def test_nesting_bound(depth: int, ok: bool, tmp_path: Path) -> None:
    path = tmp_path / "deep.toml"
    if depth < 1000:
        path.write_text("[" + ".".join(["t"] * depth) + "]\nx = 1\n", encoding="utf-8")
    else:  # inline arrays: the parser's own recursion
        path.write_text("x = " + "[" * depth + "]" * depth + "\n", encoding="utf-8")
    if ok:
        assert read_toml(path)
    else:
        with pytest.raises(ConfigError, match="nested"):
            read_toml(path)
