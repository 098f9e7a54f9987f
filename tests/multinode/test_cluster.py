"""Trials that span nodes on a local multi-node Ray cluster (Ray's own test cluster), end to end.

Each test runs its cluster and msopt in subprocesses of their own (never beside the session Ray
fixture of tests/actors in one process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from msopt.sim.rendezvous import instance_key, placement
from tests.support.procs import recorded, started, survivors

REPO = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).with_name("cluster_run.py")

CONFIG = """
engine = "sglang"
benchmark = "builtin"
n_particles = 2
iters = 1
sample_size = 8
particles_time_out = 300
[data_storage]
pso_top_k = 0
[cluster]
accelerator = "NPU"
devices_per_trial = 16
devices_per_node = 8
[sglang]
wait_start_time = 120
[sglang.command]
executable = {exe}
model = "{model}"
served_model_name = "{token}"
host = "127.0.0.1"
others = "--time-scale 0.01 --sim-model deepseek-v3 --sim-hardware h200-sxm {extra}"
[[sglang.target_field]]
name = "tp"
config_position = "--tp-size"
min = 0
max = 0
dtype = "int"
constant = 16
[[sglang.target_field]]
name = "max_running_requests"
config_position = "--max-running-requests"
min = 4
max = 64
dtype = "int"
value = 8
[builtin]
endpoint = "/v1/completions"
input_len = 32
output_len = 4
concurrency = 2
num_prompts = 8
"""


def _run(tmp_path: Path, cmd: list[str], nodes: int, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(HELPER), str(nodes), "8", "--", *cmd], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=900)


def _journal(runs: Path) -> list[dict]:
    (run,) = list(runs.iterdir())
    return [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]


def _node_of(device: str) -> str:
    return device.rsplit(":", 1)[0]


@pytest.mark.slow
@pytest.mark.parametrize("fault", [False, True])
def test_sglang_trials_span_two_nodes_through_sim_serve(tmp_path, fault):
    """Real process path: each trial starts sim-serve on two Ray nodes; the nodes meet at the
    leader's --dist-init-addr and the leader checks that both got the same command. With
    ``--fail-node 1`` the follower dies: the trial fails naming node 1, and nothing is left running."""
    token = f"mn-{uuid.uuid4().hex[:8]}"
    (tmp_path / "DeepSeek-V3").mkdir()
    cfg = tmp_path / "cfg.toml"
    pids = tmp_path / "pids"
    exe = json.dumps(recorded([sys.executable, "-m", "msopt.cli", "sim-serve"], pids))
    cfg.write_text(CONFIG.format(exe=exe, token=token,
                                 model=tmp_path / "DeepSeek-V3", extra="--fail-node 1" if fault else ""))
    argv_dir = tmp_path / "argv"
    argv_dir.mkdir()
    env = dict(os.environ, MSOPT_SIM_SERVE_ARGV_FILE=str(argv_dir), PYTHONPATH=str(REPO))
    runs = tmp_path / "runs"
    out = _run(tmp_path, ["optimize", "-c", str(cfg), "--plain", "-o", str(runs)], 3, env)
    assert out.stdout.splitlines()[-1] == ("rc=1" if fault else "rc=0"), out.stdout[-3000:] + out.stderr[-3000:]
    lines = _journal(runs)
    launched = [r for r in lines if not r["reused"]]
    assert launched
    for r in launched:
        nodes = {_node_of(d) for d in r["devices"]}
        assert len(r["devices"]) == 16 and len(set(r["devices"])) == 16 and len(nodes) == 2, r["devices"]
        if fault:
            assert r["error"] and "node 1" in r["error"] and "exited (code 1)" in r["error"], r["error"]
        else:
            assert r["error"] is None, r["error"]
            assert r["metrics"]["success_rate"] == 1.0
    # every node got a consistent command: argv-<port>.json (rank 0) and argv-<port>-node1.json
    leaders = {p.name[5:-5]: json.loads(p.read_text()) for p in argv_dir.glob("argv-*.json") if "node" not in p.name}
    followers = {p.name[5:-11]: json.loads(p.read_text()) for p in argv_dir.glob("argv-*-node1.json")}
    assert set(followers) == set(leaders) and len(leaders) >= len(launched)
    for port, lead in leaders.items():
        assert placement(lead).rank == 0 and placement(followers[port]).rank == 1
        assert instance_key(lead) == instance_key(followers[port])
    assert started(pids) and survivors(pids) == []  # every node's server stopped


@pytest.mark.slow
def test_deepseek_v3_config_tunes_on_a_local_multi_node_cluster(tmp_path):
    """configs/deepseek_v3_atlas_multinode.toml, simulated: msopt starts its own local multi-node
    Ray cluster; every trial holds two nodes' devices, and trials running at once share none."""
    text = (REPO / "configs" / "deepseek_v3_atlas_multinode.toml").read_text()
    text = text.replace("iters = 3", "iters = 1").replace("n_particles = 4", "n_particles = 4")
    cfg = tmp_path / "ds.toml"
    cfg.write_text(text)
    runs = tmp_path / "runs"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "--simulate", "--plain",
                          "-o", str(runs)], env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = [r for r in _journal(runs) if not r["reused"]]
    assert len(lines) >= 5
    for r in lines:
        assert len({_node_of(d) for d in r["devices"]}) == 2 and len(set(r["devices"])) == 16
    for a in lines:  # evaluations that overlapped in time held disjoint devices
        for b in lines:
            if a is not b and a["started"] < b["finished"] and b["started"] < a["finished"]:
                assert not set(a["devices"]) & set(b["devices"])
    (run,) = list(runs.iterdir())
    for name in ("best_command.sh", "best_command_node1.sh", "best_config.json", "best_config_node1.json",
                 "rank_table_file.json"):
        assert (run / name).is_file(), name
    record = json.loads((run / "best_command.json").read_text())
    assert [n["rank"] for n in record["nodes"]] == [0, 1]
    table = json.loads((run / "rank_table_file.json").read_text())
    assert table["server_count"] == "2" and len(table["server_list"][1]["device"]) == 8


@pytest.mark.slow
def test_pd_config_tunes_on_a_local_multi_node_cluster(tmp_path):
    """configs/pd_h200_sglang.toml, simulated on msopt's own local multi-node Ray cluster: each trial
    holds 16 GPUs on two nodes and places every prefill/decode instance whole on one of them."""
    text = (REPO / "configs" / "pd_h200_sglang.toml").read_text().replace("iters = 4", "iters = 1")
    cfg = tmp_path / "pd.toml"
    cfg.write_text(text.replace("n_particles = 6", "n_particles = 2"))
    runs = tmp_path / "runs"
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "--simulate", "--plain",
                          "-o", str(runs)], env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = [r for r in _journal(runs) if not r["reused"]]
    for r in lines:
        assert len({_node_of(d) for d in r["devices"]}) == 2 and len(set(r["devices"])) == 16
    (run,) = list(runs.iterdir())
    logs = "".join(p.read_text() for p in (run / "logs").glob("eval-*-server-a1.log"))
    assert "--disaggregation-mode decode" in logs and "node 1]" in logs


def test_sim_serve_refuses_a_count_that_is_no_integer_in_one_line() -> None:
    assert placement(["srv", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "h:5"]).rank == 1
    with pytest.raises(SystemExit, match=r"^msopt sim-serve: error: --nnodes 'two' is not an integer$"):
        placement(["srv", "--nnodes", "two"])
