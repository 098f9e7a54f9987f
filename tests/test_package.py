"""The package's face (msopt/__init__.py): its one version and the one-line Python entry point."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

import msopt

ROOT = Path(__file__).resolve().parents[1]


def test_version_written_once():
    """pyproject.toml takes the version from msopt/_version.py (setuptools' dynamic attr), which msopt.__version__
    re-exports; no other file writes a version number of its own."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "msopt._version.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", msopt.__version__)
    writers = [str(p.relative_to(ROOT)) for p in [*ROOT.glob("msopt/**/*.py"), *ROOT.glob("actors/**/*.py")]
               if re.search(r"^\s*__version__\s*=", p.read_text(encoding="utf-8"), re.M)]
    assert writers == ["msopt/_version.py"]


def test_optimize_runs_a_whole_run_in_one_line(tmp_path):
    """msopt.optimize(config, simulate=True) is msopt optimize -c config --simulate --no-ray: a run directory with
    the journal, the verdict, the report and the launch files; keywords override top-level keys."""
    result = msopt.optimize(ROOT / "configs" / "quickstart.toml", simulate=True, iters=1, n_particles=2, seed=3,
                            output=str(tmp_path))
    assert result.run_dir.parent == tmp_path and result.stopped is None
    journal = [json.loads(line) for line in (result.run_dir / "journal.jsonl").read_text().splitlines()]
    assert journal[0]["phase"] == "baseline" and sum(r["phase"] == "search" for r in journal) == 2
    assert result.outcome is not None and result.outcome.best is not None and result.verdict is not None
    for name in ("report.html", "best_command.sh", "best.json"):
        assert (result.run_dir / name).is_file(), name
    saved = tomllib.loads((result.run_dir / "config.toml").read_text(encoding="utf-8"))
    assert (saved["simulate"], saved["iters"], saved["n_particles"], saved["seed"]) == (True, 1, 2, 3)


def test_optimize_names_a_mistyped_keyword(tmp_path):
    with pytest.raises(msopt.ConfigError, match="unknown top-level key 'itters'; did you mean 'iters'"):
        msopt.optimize(ROOT / "configs" / "quickstart.toml", simulate=True, itters=1, output=str(tmp_path))
    assert list(tmp_path.iterdir()) == []
