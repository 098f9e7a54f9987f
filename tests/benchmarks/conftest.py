"""A sim-serve server shared by the benchmark tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from msopt.engines import LaunchSpec
from msopt.launch.ports import free_port
from msopt.launch.process import start_process, wait_ready


@pytest.fixture(scope="module")
def sim_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LaunchSpec]:
    """A running ``sim-serve`` (time scale 0.01) as the LaunchSpec a benchmark receives."""
    port = free_port()
    log = tmp_path_factory.mktemp("sim") / "server.log"
    argv = [sys.executable, "-m", "msopt.cli.serve", "/models/Qwen3-8B", "--host", "127.0.0.1",
            "--port", str(port), "--served-model-name", "qwen3-8b", "--max-num-seqs", "4",
            "--time-scale", "0.01"]
    with start_process(argv, {}, log) as proc:
        wait_ready("127.0.0.1", port, "/health", 30, proc, interval=0.1)
        yield LaunchSpec(engine="vllm", argv=tuple(argv), port=port, host="127.0.0.1",
                         served_model_name="qwen3-8b", model="/models/Qwen3-8B")


@pytest.fixture
def server_spec() -> LaunchSpec:
    """A server description for render-only tests (nothing listens)."""
    return LaunchSpec(engine="vllm", argv=("x",), port=8123, host="0.0.0.0",
                      served_model_name="qwen3-8b", model="/models/Qwen3-8B")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
