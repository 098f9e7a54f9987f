"""The package's face (msopt/__init__.py): its one version and the one-line Python entry point."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import msopt

ROOT = Path(__file__).resolve().parents[1]


def test_version_written_once():
    """pyproject.toml takes the version from msopt.__version__ (setuptools' dynamic attr); no file but
    msopt/__init__.py writes a version number of its own."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "msopt.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", msopt.__version__)
    writers = [str(p.relative_to(ROOT)) for p in [*ROOT.glob("msopt/**/*.py"), *ROOT.glob("actors/**/*.py")]
               if re.search(r"^\s*__version__\s*=", p.read_text(encoding="utf-8"), re.M)]
    assert writers == ["msopt/__init__.py"]
