"""Issue 51 item 6: the HCCL port-range variables follow CANN's rules for the trial's hardware, model and
CANN version: CANN 9.0 hcclenvref_07_0020 (HCCL_HOST_SOCKET_PORT_RANGE) and hcclenvref_07_0021
(HCCL_NPU_SOCKET_PORT_RANGE), "使用约束": not supported on Atlas A2 where the network has MC² fused operators;
CANN 8.1.RC1-8.5 envref_07_0143/0144 say the same of Atlas A2 training products; neither variable exists
before CANN 8.1.RC1 (CANN 8.0.0 envref_07_0074 has HCCL_IF_BASE_PORT alone)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from msopt.config import load_settings
from msopt.engines import get_engine
from msopt.evaluate.runner import RunnerContext
from msopt.evaluate.simulated import SimRunner
from msopt.launch.hccl import (
    HOST_RANGE,
    IF_BASE,
    NPU_RANGE,
    NodeFacts,
    atlas_of,
    cann_version,
    hccl_env,
    model_has_experts,
    node_facts,
    plan_env,
    plan_unset,
    range_plan,
)
from msopt.launch.render import Candidate

ROOT = Path(__file__).resolve().parents[2]
HARDWARE = ROOT / "tests" / "data" / "hardware"


def test_atlas_a2_with_an_moe_model_gets_no_range_variables() -> None:
    """CANN 9.0 hcclenvref_07_0020/0021: Atlas A2 + MC² (an MoE model's expert all-to-all) -> not supported."""
    env = hccl_env({}, {}, ["0"], [], "vllm", inherited={})
    a2_moe = plan_env(env, {}, [], NodeFacts("A2", "9.0.0", True))
    assert HOST_RANGE not in a2_moe and NPU_RANGE not in a2_moe and a2_moe[IF_BASE] == "60000"
    assert "hcclenvref_07_0020/0021" in range_plan(NodeFacts("A2", "9.0.0", True))[1]
    assert "envref_07_0143/0144" in range_plan(NodeFacts("A2", "8.5.0", True))[1]
    assert plan_env(env, {}, [], NodeFacts("A2", "9.0.0", False)) == env  # a dense model keeps both
    assert plan_env(env, {}, [], NodeFacts("A3", "9.0.0", True)) == env  # A3: the restriction is A2's
    # before CANN 8.1.RC1 neither range variable exists
    old = plan_env(env, {}, [], NodeFacts("A3", "8.0.0", False))
    assert set(old) == {IF_BASE}
    # the user's own [<engine>.env] range is theirs to keep
    mine = {"env": {HOST_RANGE: "50000-50031"}}
    kept = plan_env({**env, HOST_RANGE: "50000-50031"}, mine, [], NodeFacts("A2", None, True))
    assert kept[HOST_RANGE] == "50000-50031" and NPU_RANGE not in kept


def test_the_facts_come_from_npu_smi_the_toolkit_and_the_models_config(tmp_path: Path) -> None:
    """npu-smi: 910B -> A2 (vllm-ascend #1903), Ascend910 with Chip Phy-ID -> A3 (vllm-ascend #2035); the
    toolkit's ascend_toolkit_install.info ``version=`` (as vllm-ascend #834 prints it); experts in config.json."""
    assert atlas_of((HARDWARE / "npu_smi_910b3_vllm_ascend_1903.txt").read_text()) == "A2"
    assert atlas_of((HARDWARE / "npu_smi_a3_vllm_ascend_2035.txt").read_text()) == "A3"
    assert atlas_of((HARDWARE / "npu_smi_300i_duo_nvtop_421.txt").read_text()) is None
    home = tmp_path / "ascend-toolkit" / "latest"
    (home / "aarch64-linux").mkdir(parents=True)
    (home / "aarch64-linux" / "ascend_toolkit_install.info").write_text(
        "package_name=Ascend-cann-toolkit\nversion=8.1.RC1.alpha001\n")
    assert cann_version({"ASCEND_TOOLKIT_HOME": str(home)}) == "8.1.RC1.alpha001"
    assert cann_version({"ASCEND_HOME_PATH": str(tmp_path / "cann-9.0.0")}) == "9.0.0"
    moe = tmp_path / "dsv3"
    moe.mkdir()
    (moe / "config.json").write_text(json.dumps({"model_type": "deepseek_v3", "n_routed_experts": 256}))
    dense = tmp_path / "qwen3"
    dense.mkdir()
    (dense / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    assert model_has_experts(str(moe)) is True and model_has_experts(str(dense)) is False
    assert model_has_experts(str(tmp_path / "none")) is None
    facts = node_facts(str(moe), npu_smi=(HARDWARE / "npu_smi_910b3_vllm_ascend_1903.txt").read_text(),
                       environ={"ASCEND_HOME_PATH": str(tmp_path / "cann-9.0.0")})
    assert facts == NodeFacts("A2", "9.0.0", True) and not range_plan(facts)[0]


def test_the_deepseek_v3_atlas_a2_config_renders_no_range_variables() -> None:
    """configs/deepseek_v3_atlas_multinode.toml (DeepSeek-V3, an MoE model, on Atlas 800I A2): every node's
    launch keeps HCCL_IF_BASE_PORT and drops the two range variables (CANN 9.0 hcclenvref_07_0020/0021)."""
    settings = load_settings(ROOT / "configs" / "deepseek_v3_atlas_multinode.toml")
    config = settings.config
    runner = SimRunner(config, get_engine(config.engine.name), RunnerContext())
    from msopt.launch.render import TrialNode

    nodes = (TrialNode(0, "10.0.0.1", tuple(str(i) for i in range(8))),
             TrialNode(1, "10.0.0.2", tuple(str(i) for i in range(8))))
    from msopt.space import SearchSpace

    space = SearchSpace(config.engine.fields)
    values = dict(space.decode(space.default_position()).values)
    specs = runner.engine.render_nodes(Candidate(values, config.engine.fields, runner.engine_section), port=0, nodes=nodes,
                                       rendezvous_port=0)
    assert all(HOST_RANGE in s.env for s in specs)  # what msopt rendered before the plan
    planned = runner.plan_ports(specs)
    assert all(HOST_RANGE not in s.env and NPU_RANGE not in s.env and IF_BASE in s.env for s in planned)


def test_an_inherited_range_is_unset_where_cann_forbids_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """CANN 9.0 hcclenvref_07_0020 (HCCL_HOST_SOCKET_PORT_RANGE) and hcclenvref_07_0021
    (HCCL_NPU_SOCKET_PORT_RANGE), "使用约束": on Atlas A2 with MC² fused operators "不支持配置此环境变量" (it
    must not be configured). A range the user's shell exports would reach the server by inheritance: the
    DeepSeek-V3 Atlas A2 trial removes both from the environment its server inherits, a dense model on A3
    keeps the variables msopt sets, and validate says what becomes of the inherited ones."""
    from msopt.cli.main import main
    from msopt.launch.process import start_process
    from msopt.launch.render import TrialNode
    from msopt.space import SearchSpace

    monkeypatch.setenv(HOST_RANGE, "40000-40031")
    monkeypatch.setenv(NPU_RANGE, "41000-41031")
    config = load_settings(ROOT / "configs" / "deepseek_v3_atlas_multinode.toml").config
    runner = SimRunner(config, get_engine(config.engine.name), RunnerContext())
    space = SearchSpace(config.engine.fields)
    values = dict(space.decode(space.default_position()).values)
    nodes = (TrialNode(0, "10.0.0.1", tuple(str(i) for i in range(8))),
             TrialNode(1, "10.0.0.2", tuple(str(i) for i in range(8))))
    specs = runner.plan_ports(runner.engine.render_nodes(Candidate(values, config.engine.fields, runner.engine_section),
                                                         port=0, nodes=nodes, rendezvous_port=0))
    assert all(s.unset_env == (HOST_RANGE, NPU_RANGE) for s in specs)
    log = tmp_path / "server.log"
    proc = start_process([sys.executable, "-c", "import os; print(sorted(k for k in os.environ if 'SOCKET' in k))"],
                         specs[0].env, log, unset=specs[0].unset_env)
    assert proc.wait(30) == 0
    assert log.read_text().splitlines()[-1] == "[]"  # the server sees neither inherited range
    # where CANN allows them (Atlas A3), each trial's own blocks replace the inherited ones and nothing is unset
    assert plan_unset({}, [], NodeFacts("A3", "9.0.0", True)) == ()
    assert plan_unset({"env": {NPU_RANGE: "50000-50031"}}, [], NodeFacts("A2", "9.0.0", True)) == (HOST_RANGE,)
    assert main(["validate", "-c", str(ROOT / "configs" / "deepseek_v3_atlas_multinode.toml")]) == 0
    out = capsys.readouterr().out
    assert f"this environment has {HOST_RANGE}=40000-40031, {NPU_RANGE}=41000-41031" in out
    assert "unsets both where CANN does not allow them" in out and "hcclenvref_07_0020/0021" in out


SGLANG_ASCEND_PD = """
simulate = true
engine = "sglang"
benchmark = "vllm_benchmark"
n_particles = 1
iters = 1
[cluster]
accelerator = "NPU"
devices_per_trial = 8
[simulator]
hardware = "atlas-800i-a2"
model = "qwen3-30b-a3b"
weight_dtype = "bf16"
[simulator.workload]
input_len = 512
output_len = 32
num_prompts = 8
concurrency = 4
[sglang]
platform = "ascend"
[sglang.command]
executable = ["python", "-m", "sglang.launch_server"]
model = "Qwen/Qwen3-30B-A3B"
[sglang.pd]
prefill_instances = 1
decode_instances = 1
visible_devices_env = "ASCEND_RT_VISIBLE_DEVICES"
[[sglang.target_field]]
name = "decode_tp"
config_position = "decode:--tp-size"
min = 0
max = 1
dtype = "enum"
dtype_param = [2, 4]
value = 4
[[sglang.target_field]]
name = "prefill_tp"
config_position = "prefill:--tp-size"
min = 0
max = 1
dtype = "enum"
dtype_param = [2, 4]
value = 4
"""


def test_a_simulated_pd_trial_follows_the_port_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulated PD path plans its instances' HCCL ports as the real one does (msopt/evaluate/real.py
    ``_measure_pd``): an MoE model (Qwen3-30B-A3B) on Atlas A2 keeps HCCL_IF_BASE_PORT per instance and
    neither range variable, and unsets the inherited ones (CANN 9.0 hcclenvref_07_0020/0021, "使用约束")."""
    from msopt.evaluate.results import EvalRequest
    from msopt.space import SearchSpace

    monkeypatch.setenv(HOST_RANGE, "40000-40031")
    path = tmp_path / "pd.toml"
    path.write_text(SGLANG_ASCEND_PD)
    config = load_settings(path).config
    runner = SimRunner(config, get_engine("sglang"), RunnerContext(run_dir=tmp_path))
    space = SearchSpace(config.engine.fields)
    values = dict(space.decode(space.default_position()).values)
    runner.measure(values, EvalRequest(0, "baseline", None, 0, (), num_prompts=8), 0)
    log = (tmp_path / "logs" / "eval-00000-server-a0.log").read_text().splitlines()
    launches = [ln for ln in log if ln.startswith("$ [prefill") or ln.startswith("$ [decode")]
    assert len(launches) == 2
    assert all("HCCL_IF_BASE_PORT=" in ln and HOST_RANGE not in ln and NPU_RANGE not in ln for ln in launches)
