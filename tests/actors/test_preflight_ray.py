"""msopt preflight --address: one Ray task per node of a local cluster, sim-serve as the engine."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from msopt.config import load_settings
from tests.run.test_preflight import config

pytestmark = pytest.mark.slow


def test_cluster_checks_run_on_each_node(ray_session, tmp_path: Path) -> None:
    from actors.preflight import cluster_checks

    (tmp_path / "model").mkdir()
    settings = load_settings(config(tmp_path, model=str(tmp_path / "model"), accelerator="NPU", devices=8))
    checks = cluster_checks(settings.config)
    assert checks and all(c.ok for c in checks), [c.line() for c in checks]
    assert {c.node for c in checks} == {n["NodeManagerAddress"] for n in ray_session.nodes() if n["Alive"]}
    devices = [c for c in checks if c.name == "devices"]
    assert devices and "8 NPU(s)" in devices[0].detail


def test_cli_reports_missing_model_busy_port_and_too_few_devices(ray_session, tmp_path: Path) -> None:
    address = ray_session.get_runtime_context().gcs_address
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        path = config(tmp_path, model="/nonexistent/msopt-test/model", others=f"--grpc-port {port}",
                      accelerator="NPU", devices=16)
        out = subprocess.run([sys.executable, "-m", "msopt.cli", "preflight", "-c", str(path), "--address",
                              address], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    failed = [ln for ln in out.stdout.splitlines() if ln.startswith("FAIL")]
    assert len(failed) == 3, out.stdout + out.stderr
    assert "model: model path /nonexistent/msopt-test/model does not exist" in failed[0]
    assert f"port: {port} (--grpc-port in 'others') is in use" in failed[1]
    assert "devices: 8 NPU(s) on this node, a trial needs [cluster] devices_per_trial = 16" in failed[2]
    assert all(ln.startswith("FAIL [") for ln in failed)  # each names its node
