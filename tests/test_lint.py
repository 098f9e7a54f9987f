"""The code style and type checks of pyproject.toml ([tool.ruff], [tool.mypy]) hold for the whole tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean() -> None:
    if shutil.which("ruff") is None and subprocess.run([sys.executable, "-m", "ruff", "--version"],
                                                        capture_output=True).returncode != 0:
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "msopt", "actors", "scripts", "tests"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_clean() -> None:
    """pyproject.toml's [tool.mypy]: strict on the seams, default elsewhere, over msopt and actors."""
    if subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True).returncode != 0:
        pytest.fail("mypy is not installed: pip install -e '.[test]'")
    out = subprocess.run([sys.executable, "-m", "mypy", "msopt", "actors"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
