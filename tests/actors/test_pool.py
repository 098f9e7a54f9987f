"""RayPool and EvaluatorActor on a real local Ray instance with declared NPUs."""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path

import pytest

from msopt.config import load_settings
from msopt.evaluate.results import EvalRequest
from msopt.run.driver import Driver
from msopt.space import DecodeContext, SearchSpace

pytestmark = pytest.mark.slow  # a Ray session and its actors

REPO = Path(__file__).resolve().parents[2]

EXTRA = """
n_particles = {n}
iters = {iters}
particles_time_out = {timeout}
sample_size = 16
[data_storage]
pso_top_k = 1
[cluster]
accelerator = "NPU"
devices_per_trial = {k}
[simulator]
noise = 0.0
emulate_wall_time = {emulate}
eval_seconds = {secs}
[simulator.workload]
input_len = 256
output_len = 32
num_prompts = 16
concurrency = 8
"""


def settings_for(tmp_path, *, n=4, iters=2, k=2, timeout=600, emulate="false", secs=0.0):
    text = (REPO / "configs" / "quickstart.toml").read_text()
    # the quickstart's own tables are replaced by the test's
    for table in ("[data_storage]\npso_top_k = 2\n", "[cluster]\naccelerator = \"NPU\"\ndevices_per_trial = 8"):
        text = text.replace(table, "")
    head, _, rest = text.partition("[simulator]")
    rest = rest.split("[vllm.command]", 1)[1]
    head = "\n".join(line for line in head.splitlines()
                     if not line.startswith(("n_particles", "iters", "sample_size", "devices_per_trial")))
    path = tmp_path / "cfg.toml"
    path.write_text(head + EXTRA.format(n=n, iters=iters, k=k, timeout=timeout, emulate=emulate, secs=secs)
                    + "\n[vllm.command]" + rest)
    return load_settings(str(path), environ={})


def test_pool_size_and_disjoint_devices(ray_session, tmp_path):
    from actors.pool import RayPool

    pool = RayPool(settings_for(tmp_path, n=6, k=2).config, simulate=True, run_dir=str(tmp_path))
    try:
        assert pool.size == 4  # 8 NPUs / 2 per trial, fewer than 6 particles
        infos = pool.actor_infos()
        devices = [d for info in infos for d in info["devices"]]
        assert len(devices) == 8 and len(set(devices)) == 8
        for info in infos:  # Ray exported the ids; msopt did not set them
            assert info["visible"]["ASCEND_RT_VISIBLE_DEVICES"] == ",".join(info["devices"])
    finally:
        pool.close()


def test_max_concurrent_caps_the_pool(ray_session, tmp_path):
    from actors.pool import RayPool

    pool = RayPool(settings_for(tmp_path, n=6, k=1).config, simulate=True, max_concurrent=3)
    try:
        assert pool.size == 3
    finally:
        pool.close()


def test_too_many_devices_per_trial_is_a_clear_error(ray_session, tmp_path):
    from actors.pool import ClusterError, RayPool

    # 16 on a cluster of one 8-NPU node: a trial would span two nodes, and there is one
    with pytest.raises(ClusterError, match=r"no room for one trial of 16 NPU \(2 nodes of 8 each\)"):
        RayPool(settings_for(tmp_path, k=16).config, simulate=True)


def test_balanced_context_inside_the_actor(ray_session, tmp_path):
    from actors.pool import RayPool

    settings = settings_for(tmp_path, n=4, k=2)
    space = SearchSpace.from_settings(settings)
    # tp = 8, pp = 2 is not allowed (product 8): particle 0 keeps tp, particle 3 keeps pp
    pos = tuple(space.encode({"tp": 8, "pp": 2}).tolist())
    pool = RayPool(settings.config, simulate=True)
    try:
        pool.submit(EvalRequest(1, "search", 0, 0, pos, DecodeContext(0, 4, 0), num_prompts=8))
        pool.submit(EvalRequest(2, "search", 3, 0, pos, DecodeContext(3, 4, 0), num_prompts=8))
        got = {}
        while len(got) < 2:
            for r in pool.wait(5):
                got[r.eval_id] = r
        assert (got[1].values["tp"], got[1].values["pp"]) == (8, 1)
        assert (got[2].values["tp"], got[2].values["pp"]) == (4, 2)
        assert got[1].position != list(pos) and got[1].devices
    finally:
        pool.close()


def test_one_and_four_actors_give_identical_sync_results(ray_session, tmp_path):
    from actors.pool import RayPool

    settings = settings_for(tmp_path, n=4, iters=2, k=2)
    runs = []
    for cap in (1, 4):
        pool = RayPool(settings.config, simulate=True, max_concurrent=cap)
        try:
            out = Driver(settings.config, pool).run()
        finally:
            pool.close()
        runs.append({r.eval_id: (r.values, r.fitness, r.position) for r in out.results})
    assert runs[0] == runs[1]


def test_killed_actor_costs_a_retry(ray_session, tmp_path):
    from actors.pool import RayPool

    settings = settings_for(tmp_path, n=1, k=2, emulate="true", secs=3.0)
    pool = RayPool(settings.config, simulate=True)
    try:
        pid = pool.actor_infos()[0]["pid"]
        pos = tuple(SearchSpace.from_settings(settings).default_position().tolist())
        pool.submit(EvalRequest(0, "baseline", None, 0, pos, None, num_prompts=8))
        assert pool.wait(0.5) == []
        os.kill(pid, signal.SIGKILL)  # from outside, mid-evaluation
        got = []
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline:
            got = pool.wait(1)
        (r,) = got
        assert r.attempts == 2 and math.isfinite(r.fitness) and r.error is None
        assert pool.replaced == 1 and pool.actor_infos()[0]["pid"] != pid
    finally:
        pool.close()


def test_evaluation_past_time_limit_fails(ray_session, tmp_path):
    from actors.pool import RayPool

    settings = settings_for(tmp_path, n=1, k=2, emulate="true", secs=20.0, timeout=1)
    pool = RayPool(settings.config, simulate=True)
    try:
        pos = tuple(SearchSpace.from_settings(settings).default_position().tolist())
        pool.submit(EvalRequest(0, "baseline", None, 0, pos, None, num_prompts=8))
        got = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = pool.wait(0.5)
        (r,) = got
        assert math.isinf(r.fitness) and "timed out" in r.error
    finally:
        pool.close()


def test_optimize_without_the_devices_leaves_no_run_directory(tmp_path):
    import subprocess
    import sys

    cfg = tmp_path / "real.toml"
    cfg.write_text((REPO / "configs" / "quickstart.toml").read_text().replace("simulate = true", "simulate = false"))
    # --no-preflight: this machine has no vllm either; the cluster's own check is under test here
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "--plain", "--no-preflight",
                          "-o", str(tmp_path / "runs")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "no node of the Ray cluster has 8 NPU" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
