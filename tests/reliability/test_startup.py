"""Start-up edge cases that are valid input: they must run, not fail after the run directory exists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msopt.cli.main import main

from .test_disk_full import CFG


def test_iters_zero_runs_baseline_and_refinement(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``iters = 0`` is allowed by the configuration (baseline + top-k only); the swarm's options
    used to refuse it after the run directory was created."""
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CFG.format(mode="sync").replace("iters = 2", "iters = 0"), encoding="utf-8")
    code = main(["optimize", "-c", str(cfg), "--no-ray", "--plain", "-o", str(tmp_path / "runs")])
    out = capsys.readouterr()
    assert code == 0, out.err
    run_dir = Path(out.out.strip().splitlines()[-1])
    phases = [json.loads(line)["phase"] for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert phases == ["baseline", "refine"]
