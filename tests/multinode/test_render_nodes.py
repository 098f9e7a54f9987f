"""Each engine's multi-node launch, and sim-serve's rendezvous of the nodes of one instance."""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from msopt.engines import get_engine
from msopt.errors import EvaluationError
from msopt.launch.ports import free_port
from msopt.launch.process import start_process, wait_ready
from msopt.launch.render import Candidate, TrialNode
from msopt.sim.rendezvous import instance_key, placement
from msopt.space.fields import FieldDecl

NODES = (TrialNode(0, "10.0.0.1", tuple("01234567")), TrialNode(1, "10.0.0.2", tuple("01234567")))


def field(name: str, pos: str, value: object) -> FieldDecl:
    return FieldDecl(name=name, config_position=pos, min=value, max=value, dtype="int", value=value)


def render(engine: str, section: dict, values: dict[str, object], fields: list[FieldDecl], nodes=NODES):
    return get_engine(engine).render_nodes(Candidate(values, fields, section), port=8100, nodes=nodes, rendezvous_port=29555)


def test_vllm_data_parallel_ranks_split_over_the_nodes():
    fields = [field("TP", "--tensor-parallel-size", 4), field("DP", "--data-parallel-size", 4)]
    specs = render("vllm", {}, {"TP": 4, "DP": 4}, fields)
    lead, follower = (list(s.argv) for s in specs)
    assert lead[-6:] == ["--data-parallel-size-local", "2", "--data-parallel-address", "10.0.0.1",
                         "--data-parallel-rpc-port", "29555"]
    assert "--headless" in follower and follower[follower.index("--data-parallel-start-rank") + 1] == "2"
    assert instance_key(lead) == instance_key(follower)
    assert placement(follower).rank == 1 and placement(lead).nnodes == 2


def test_vllm_one_engine_over_nodes_uses_nnodes():
    fields = [field("TP", "--tensor-parallel-size", 8), field("PP", "--pipeline-parallel-size", 2)]
    lead, follower = (list(s.argv) for s in render("vllm", {}, {"TP": 8, "PP": 2}, fields))
    assert lead[-8:] == ["--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port", "29555"]
    assert follower[-9:] == ["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port",
                             "29555", "--headless"]
    with pytest.raises(EvaluationError, match="does not equal the trial's 2 nodes x 8 devices"):
        render("vllm", {}, {"TP": 4}, [field("TP", "--tensor-parallel-size", 4)])


def test_sglang_nodes_share_the_dist_init_address():
    fields = [field("TP", "--tp-size", 16), field("DP", "--dp-size", 4)]
    section = {"command": {"others": "--enable-dp-attention"}}
    specs = render("sglang", section, {"TP": 16, "DP": 4}, fields)
    for rank, spec in enumerate(specs):
        assert list(spec.argv[-6:]) == ["--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr",
                                        "10.0.0.1:29555"]
    with pytest.raises(EvaluationError, match="msopt renders them"):
        render("sglang", {"command": {"others": "--nnodes 2"}}, {"TP": 16}, [field("TP", "--tp-size", 16)])


def test_mindie_rank_table_and_per_node_config(tmp_path):
    fields = [field("TP", "BackendConfig.ModelDeployConfig.ModelConfig.0.tp", 4),
              field("DP", "BackendConfig.ModelDeployConfig.ModelConfig.0.dp", 4)]
    section = {"device_ips": {"10.0.0.1": [f"192.168.1.{i}" for i in range(8)],
                              "10.0.0.2": [f"192.168.2.{i}" for i in range(8)]}}
    specs = get_engine("mindie").render_nodes(Candidate({"TP": 4, "DP": 4}, fields, section), port=1025, nodes=NODES,
                                              rendezvous_port=29555, workdir=tmp_path)
    table_path = str(tmp_path / "rank_table_file.json")
    for rank, spec in enumerate(specs):
        assert spec.env["RANK_TABLE_FILE"] == table_path and spec.env["MASTER_IP"] == "10.0.0.1"
        assert spec.env["MIES_CONTAINER_IP"] == NODES[rank].address
        cfg = next(d for d in spec.files.values() if "BackendConfig" in d)
        assert cfg["BackendConfig"]["multiNodesInferEnabled"] is True
        assert cfg["BackendConfig"]["npuDeviceIds"] == [list(range(8))]
        assert cfg["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["worldSize"] == 8
    table = specs[0].files[table_path]
    assert table["server_count"] == "2"
    ranks = [d["rank_id"] for s in table["server_list"] for d in s["device"]]
    assert ranks == [str(i) for i in range(16)]
    assert table["server_list"][1]["device"][0]["device_ip"] == "192.168.2.0"
    from msopt.engines.rules import check_rules

    check_rules(specs[0], {"TP": 4, "DP": 4}, section, rules=get_engine("mindie").startup_rules)  # tp 4 x dp 4 = 2 nodes x worldSize 8


def _sim_serve(argv: list[str], log: Path, env_dir: Path):
    return start_process([sys.executable, "-m", "msopt.cli", "sim-serve", *argv],
                         {"MSOPT_SIM_SERVE_ARGV_FILE": str(env_dir)}, log)


@pytest.mark.parametrize("consistent", [True, False])
def test_sim_serve_nodes_meet_and_check_each_others_command(tmp_path, consistent):
    port, rdv = free_port(), free_port()
    base = ["M", "--port", str(port), "--tp-size", "16", "--time-scale", "0", "--nnodes", "2",
            "--dist-init-addr", f"127.0.0.1:{rdv}"]
    other = base if consistent else [*base[:4], "8", *base[5:]]
    lead = _sim_serve([*base, "--node-rank", "0"], tmp_path / "lead.log", tmp_path)
    follower = _sim_serve([*other, "--node-rank", "1"], tmp_path / "node1.log", tmp_path)
    try:
        if consistent:
            wait_ready("127.0.0.1", port, "/health", 60, lead)
            assert json.loads((tmp_path / f"argv-{port}-node1.json").read_text())[-1] == "1"
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
                assert r.status == 200
            lead.stop()
            assert follower.wait(30) == 0  # node 0 gone: the follower ends too
        else:
            assert lead.wait(60) == 1
            assert "differs from node 0's" in (tmp_path / "lead.log").read_text()
            assert follower.wait(30) not in (None, 0)
    finally:
        lead.stop()
        follower.stop()
        time.sleep(0)
