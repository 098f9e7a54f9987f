"""`ray job submit ... -- msopt optimize --address auto` against a real local head."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a Ray head and a Ray job

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head(tmp_path):
    ray_bin = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    # every port the head opens is a free one: another Ray instance of this test session holds the
    # defaults (the dashboard agent's 52365 above all), which would leave the head without a job agent
    port, dash, agent, agent_grpc, client, metrics = (free_port() for _ in range(6))
    log = open(tmp_path / "head.log", "w")
    head = subprocess.Popen([ray_bin, "start", "--head", "--block", "--port", str(port), "--dashboard-port",
                             str(dash), "--dashboard-host", "127.0.0.1", "--dashboard-agent-listen-port",
                             str(agent), "--dashboard-agent-grpc-port", str(agent_grpc),
                             "--ray-client-server-port", str(client), "--metrics-export-port", str(metrics),
                             "--num-cpus", "2",
                             "--resources", '{"NPU": 8}', "--disable-usage-stats"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", dash), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail(f"the Ray head did not start: {(tmp_path / 'head.log').read_text()[-2000:]}")
        yield ray_bin, f"http://127.0.0.1:{dash}"
    finally:
        # SIGTERM to `ray start --block` alone: it drains its node and stops its processes in ~2 s. Sent to the whole
        # group it would stop the GCS first, and the drain would then wait 30 s for it
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(60)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(head.pid, signal.SIGKILL)  # what of the head's group is left
        except ProcessLookupError:
            pass
        head.wait()
        log.close()


def test_submit_job_script(ray_head, tmp_path):
    ray_bin, address = ray_head
    env = dict(os.environ, RAY_JOB_ADDRESS=address, PATH=f"{Path(ray_bin).parent}:{os.environ.get('PATH', '')}")
    deadline = time.monotonic() + 240
    while True:  # a fresh head answers before its job agent is up (slowly on a loaded machine)
        out = subprocess.run(["bash", str(REPO / "scripts" / "submit_job.sh"), "configs/quickstart.toml",
                              "--particles", "2", "--iters", "1", "-o", str(tmp_path / "runs")],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        if "No available agent to submit job" not in out.stdout + out.stderr or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "succeeded" in out.stdout + out.stderr
    (run,) = list((tmp_path / "runs").iterdir())
    assert len((run / "journal.jsonl").read_text().splitlines()) >= 4
    assert (run / "best.json").exists()
    assert "Failed to detect NPU type" not in out.stdout + out.stderr
