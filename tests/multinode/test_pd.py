"""Prefill/decode disaggregation: rendering, the simulator's two pools, and a real trial through
sim-serve instances and its stand-in router."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from msopt.config import load_settings
from msopt.engines import get_engine
from msopt.errors import ConfigError, EvaluationError
from msopt.launch.render import Candidate, LaunchSpec
from msopt.sim.simulator import simulate_disaggregated
from tests.support.procs import recorded, started, survivors

REPO = Path(__file__).resolve().parents[2]
PD_CONFIG = REPO / "configs" / "pd_h200_sglang.toml"
VALUES = {"n_prefill": 2, "n_decode": 1, "prefill_tp": 1, "decode_tp": 4, "prefill_chunk": 4096,
          "decode_max_running": 32}


def _settings():
    return load_settings(str(PD_CONFIG), environ={})


def test_render_pd_gives_each_instance_its_own_devices_and_the_router_every_url():
    s = _settings()
    launch = get_engine("sglang").render_pd(Candidate(VALUES, s.fields, s.section("sglang")), ports=list(range(9000, 9010)),
                                            devices=[str(d) for d in range(8)])
    assert launch.counts == (2, 1)
    p0, p1 = launch.prefill
    (d0,) = launch.decode
    assert p0.env["CUDA_VISIBLE_DEVICES"] == "0" and p1.env["CUDA_VISIBLE_DEVICES"] == "1"
    assert d0.env["CUDA_VISIBLE_DEVICES"] == "2,3,4,5"
    assert "--disaggregation-mode" in p0.argv and p0.argv[p0.argv.index("--disaggregation-mode") + 1] == "prefill"
    assert "--max-running-requests" in d0.argv and "--max-running-requests" not in p0.argv
    assert "--chunked-prefill-size" in p0.argv and "--chunked-prefill-size" not in d0.argv
    boot = p0.argv[p0.argv.index("--disaggregation-bootstrap-port") + 1]
    r = list(launch.router.argv)
    assert r[r.index("--prefill") + 1:r.index("--prefill") + 3] == [p0.base_url, boot]
    assert r[r.index("--decode") + 1] == d0.base_url and "--pd-disaggregation" in r
    with pytest.raises(EvaluationError, match="needs 10 devices"):
        get_engine("sglang").render_pd(Candidate(dict(VALUES, n_prefill=6), s.fields, s.section("sglang")),
                                       ports=list(range(9000, 9020)), devices=[str(d) for d in range(8)])


def test_pd_table_is_checked(write_toml):
    text = PD_CONFIG.read_text().replace('decode_instances = "n_decode"', 'decode_instances = "nope"')
    with pytest.raises(ConfigError, match="names no field"):
        from msopt.run.validate import load, validate

        validate(load(str(write_toml(text)), environ={}))


def test_simulated_pools_transfer_the_kv_and_respond_to_their_knobs():
    sim = {"hardware": "h200-sxm", "model": "qwen3-32b", "weight_dtype": "fp8", "kv_dtype": "fp8",
           "workload": {"input_len": 2000, "output_len": 200, "num_prompts": 96, "concurrency": 32}}
    pre = LaunchSpec("sglang", ("x", "--tp-size", "1"))
    dec = LaunchSpec("sglang", ("x", "--tp-size", "4", "--max-running-requests", "32"))
    one = simulate_disaggregated(pre, dec, (1, 1), sim)
    four = simulate_disaggregated(pre, dec, (4, 1), sim)
    assert not one.error and not four.error
    assert any("KV transfer" in line for line in one.log_lines)
    assert four.time_to_first_token < one.time_to_first_token  # more prefill instances, less queueing
    small = simulate_disaggregated(pre, LaunchSpec("sglang", ("x", "--tp-size", "4", "--max-running-requests", "4")),
                                   (4, 1), sim)
    assert small.generate_speed < four.generate_speed
    bad = simulate_disaggregated(LaunchSpec("sglang", ("x", "--tp-size", "3")), dec, (1, 1), sim)
    assert bad.error and bad.error.startswith("prefill instance:")


@pytest.mark.slow
def test_optimize_simulates_the_pd_example(tmp_path):
    text = PD_CONFIG.read_text().replace("iters = 4", "iters = 1").replace("n_particles = 6", "n_particles = 3")
    cfg = tmp_path / "pd.toml"
    cfg.write_text(text)
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "--no-ray", "--plain",
                          "-o", str(tmp_path / "runs")], env=dict(os.environ, PYTHONPATH=str(REPO)),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (run,) = list((tmp_path / "runs").iterdir())
    script = "".join(p.read_text() for p in sorted(run.glob("best_command*.sh")))
    assert script.count("--disaggregation-mode prefill") >= 1 and "--disaggregation-mode decode" in script
    assert "sglang_router.launch_router --pd-disaggregation" in script
    record = json.loads((run / "best_command.json").read_text())
    assert record["deployment"] == "pd" and record["router"]["port"] == 30000
    # 16 GPUs on two 8-GPU nodes: every instance within one node, node 1's in its own script
    assert set(record["nodes"]) <= {0, 1} and (run / "best_command_node1.sh").is_file()
    lines = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
    assert all(len(r["devices"]) in (0, 16) for r in lines)


def test_pd_instances_never_span_nodes():
    from msopt.launch.render import TrialNode

    s = _settings()
    nodes = tuple(TrialNode(r, f"10.0.0.{r + 1}", tuple(str(d) for d in range(8))) for r in range(2))
    launch = get_engine("sglang").render_pd(Candidate(dict(VALUES, n_prefill=6, prefill_tp=1, n_decode=2, decode_tp=4),
                                            s.fields, s.section("sglang")), ports=list(range(9000, 9030)),
                                            devices=[], nodes=nodes)
    assert launch.nodes == (0, 0, 0, 0, 0, 0, 1, 1)
    assert launch.decode[1].env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7" and launch.decode[1].host == "10.0.0.2"
    assert f"http://10.0.0.2:{launch.decode[0].port}" in launch.router.argv
    six = tuple(TrialNode(r, f"10.0.0.{r + 1}", tuple(str(d) for d in range(6))) for r in range(2))
    with pytest.raises(EvaluationError, match="fits on none of the trial's nodes"):  # 12 devices, none whole
        get_engine("sglang").render_pd(Candidate(dict(VALUES, n_prefill=2, prefill_tp=2, n_decode=2, decode_tp=4),
                                       s.fields, s.section("sglang")), ports=list(range(9000, 9030)), nodes=six)


REAL = """
engine = "sglang"
benchmark = "builtin"
n_particles = 2
iters = 1
sample_size = 8
particles_time_out = 300
[data_storage]
pso_top_k = 0
[cluster]
accelerator = "none"
[sglang]
wait_start_time = 60
[sglang.command]
executable = {exe}
model = "{model}"
served_model_name = "{token}"
others = "--time-scale 0.01"
[sglang.pd]
prefill_instances = "n_prefill"
decode_instances = 1
[sglang.pd.router]
executable = {exe}
[[sglang.target_field]]
name = "n_prefill"
config_position = "none"
min = 1
max = 2
dtype = "int"
value = 1
[[sglang.target_field]]
name = "decode_max_running"
config_position = "decode:--max-running-requests"
min = 4
max = 16
dtype = "int"
value = 8
[builtin]
endpoint = "/v1/completions"
input_len = 16
output_len = 4
concurrency = 2
num_prompts = 8
"""


@pytest.mark.slow
def test_pd_trial_through_sim_serve_and_its_router(tmp_path):
    token = f"pd-{uuid.uuid4().hex[:8]}"
    (tmp_path / "Qwen3-8B").mkdir()
    pids = tmp_path / "pids"
    exe = json.dumps(recorded([sys.executable, "-m", "msopt.cli", "sim-serve"], pids))
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(REAL.format(exe=exe, token=token, model=tmp_path / "Qwen3-8B"))
    argv_dir = tmp_path / "argv"
    argv_dir.mkdir()
    env = dict(os.environ, MSOPT_SIM_SERVE_ARGV_FILE=str(argv_dir), PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "--no-ray", "--plain",
                          "-o", str(tmp_path / "runs")], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (run,) = list((tmp_path / "runs").iterdir())
    lines = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
    for r in (r for r in lines if not r["reused"]):
        assert r["error"] is None and r["metrics"]["success_rate"] == 1.0, r["error"]
    routers = [json.loads(p.read_text()) for p in argv_dir.glob("argv-*-router.json")]
    servers = [json.loads(p.read_text()) for p in argv_dir.glob("argv-*.json") if "router" not in p.name]
    assert routers and all("--pd-disaggregation" in a for a in routers)
    modes = [a[a.index("--disaggregation-mode") + 1] for a in servers]
    assert modes.count("decode") == len(routers) and modes.count("prefill") >= len(routers)
    assert any(p.name.endswith("server-decode0-a1.log") for p in (run / "logs").iterdir())
    assert started(pids) and survivors(pids) == []  # every instance and the router stopped
