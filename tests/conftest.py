"""Shared test helpers."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def write_toml(tmp_path: Path):
    """Write a TOML text to a file under tmp_path and return its path."""

    def write(text: str, name: str = "cfg.toml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
