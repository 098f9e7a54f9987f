"""Shared test helpers."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Let the runs the tests start hear Ctrl-C, however pytest itself was started.

    A shell that starts pytest in the background (``cmd &``, nohup) leaves SIGINT ignored, and an
    ignored signal stays ignored across exec: every ``msopt optimize`` a test starts would then go on
    through the SIGINT the lifecycle tests send it. A handler, unlike SIG_IGN, is reset to the default
    in the children.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def write_toml(tmp_path: Path):
    """Write a TOML text to a file under tmp_path and return its path."""

    def write(text: str, name: str = "cfg.toml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
