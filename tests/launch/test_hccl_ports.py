"""Issue 36 item 6: HCCL's host and NPU port blocks, disjoint per trial, held in the trial's port
lease, replacing what the user's environment holds; preflight says which are in force."""

from __future__ import annotations

from pathlib import Path

import pytest

import msopt.engines.mindie as mindie_mod
from msopt.config import load_settings
from msopt.engines import get_engine
from msopt.errors import EvaluationError
from msopt.launch.hccl import hccl_env, in_force, lease_blocks
from msopt.launch.ports import PortLease
from msopt.launch.render import Candidate

TEMPLATE = Path(mindie_mod.__file__).with_name("config.json")  # msopt's built-in template


def _blocks(env: dict[str, str]) -> tuple[set[int], set[int]]:
    out = []
    for var in ("HCCL_HOST_SOCKET_PORT_RANGE", "HCCL_NPU_SOCKET_PORT_RANGE"):
        lo, hi = (int(x) for x in env[var].split("-"))
        out.append(set(range(lo, hi + 1)))
    return out[0], out[1]


def test_two_mindie_trials_on_one_node_get_disjoint_blocks(tmp_path: Path) -> None:
    conf = tmp_path / "config.json"
    conf.write_bytes(TEMPLATE.read_bytes())
    specs = [get_engine("mindie").render(Candidate({}, [], {"config_path": str(conf)}), port=1025 + i, devices=devices,
                                         workdir=tmp_path / f"w{i}")
             for i, devices in enumerate((("0", "1", "2", "3"), ("4", "5", "6", "7")))]
    (host0, npu0), (host1, npu1) = (_blocks(s.env) for s in specs)
    assert host0.isdisjoint(host1) and npu0.isdisjoint(npu1) and len(host0) == len(npu0) == 32
    assert [s.env["HCCL_IF_BASE_PORT"] for s in specs] == ["60000", "60128"]
    assert min(npu0) == 16666  # HCCL's NPU-side default, for the trial on NPU 0


def test_one_device_trials_do_not_overlap() -> None:
    envs = [hccl_env({}, {}, [str(d)], [], "mindie", inherited={}) for d in range(8)]
    hosts = [_blocks(e)[0] for e in envs]
    assert all(a.isdisjoint(b) for i, a in enumerate(hosts) for b in hosts[i + 1:])


def test_the_users_environment_is_replaced_unless_auto_and_the_table_wins() -> None:
    inherited = {"HCCL_HOST_SOCKET_PORT_RANGE": "60000-60050", "HCCL_NPU_SOCKET_PORT_RANGE": "auto"}
    env = hccl_env({}, {}, ["4"], [], "mindie", inherited=inherited)
    assert env["HCCL_HOST_SOCKET_PORT_RANGE"] == "60128-60159"  # the shared range would collide
    assert "HCCL_NPU_SOCKET_PORT_RANGE" not in env  # auto: the OS picks, kept
    line = in_force(env, inherited)
    assert "HCCL_HOST_SOCKET_PORT_RANGE=60128-60159 (replaces '60000-60050' from this environment)" in line
    assert "HCCL_NPU_SOCKET_PORT_RANGE=auto (from this environment)" in line
    mine = hccl_env({"HCCL_HOST_SOCKET_PORT_RANGE": "50000-50031"},
                    {"env": {"HCCL_HOST_SOCKET_PORT_RANGE": "50000-50031"}}, ["4"], [], "mindie", inherited={})
    assert mine["HCCL_HOST_SOCKET_PORT_RANGE"] == "50000-50031" and mine["HCCL_IF_BASE_PORT"] == "60128"
    off = hccl_env({}, {"hccl_base_port": False, "hccl_npu_base_port": False}, ["4"], [], "mindie", inherited={})
    assert off == {}


def test_a_block_is_held_by_one_trial_at_a_time() -> None:
    env = hccl_env({}, {"hccl_base_port": 61000, "hccl_npu_base_port": 17000}, ["7"], [], "vllm", inherited={})
    with PortLease() as first:
        lease_blocks(env, first)
        with PortLease() as second, pytest.raises(EvaluationError, match="held by another trial"):
            lease_blocks(env, second)
    with PortLease() as again:
        lease_blocks(env, again)  # given back when the first trial ended


def test_preflight_names_the_variables_in_force(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from msopt.run.preflight import _hccl

    monkeypatch.setenv("HCCL_HOST_SOCKET_PORT_RANGE", "60000-60050")
    path = tmp_path / "c.toml"
    path.write_text('engine = "mindie"\nbenchmark = "builtin"\n[cluster]\naccelerator = "NPU"\n'
                    'devices_per_trial = 4\n[[mindie.target_field]]\nname = "mbs"\n'
                    'config_position = "BackendConfig.ScheduleConfig.maxBatchSize"\nmin = 8\nmax = 64\ndtype = "int"\n')
    settings = load_settings(path)
    check = _hccl(settings.config, dict(settings.config.engine.section.table))
    assert check is not None and check.ok
    assert "HCCL_IF_BASE_PORT=60000" in check.detail and "replaces '60000-60050' from this environment" in check.detail
    assert "HCCL_NPU_SOCKET_PORT_RANGE=16666-16697" in check.detail


def test_two_trials_on_one_node_each_have_their_own_config_hccl_blocks_and_master_port(tmp_path: Path) -> None:
    """The issue's stand-in: MindIE trials on NPUs 0-3 and 4-7 of one node (torch backend, which needs
    MASTER_PORT even on one node), rendered as the real path renders them, with ports from two leases."""
    import json

    from msopt.engines.rules import ModelFacts, check_rules
    from msopt.launch.render import TrialNode

    doc = json.loads(TEMPLATE.read_text())
    doc["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0].update(backendType="torch", tp=4)
    conf = tmp_path / "config.json"
    conf.write_text(json.dumps(doc))
    specs = []
    with PortLease() as a, PortLease() as b:
        for lease, devices in ((a, tuple("0123")), (b, tuple("4567"))):
            (spec,) = get_engine("mindie").render_nodes(
                Candidate({}, [], {"config_path": str(conf)}), port=lease.take(), nodes=(TrialNode(0, "127.0.0.1", devices),),
                rendezvous_port=lease.take(), workdir=tmp_path / devices[0])
            check_rules(spec, {}, {}, rules=get_engine("mindie").startup_rules, model=ModelFacts(), environ={})
            lease_blocks(spec.env, lease)
            specs.append(spec)
        configs = [next(iter(s.files)) for s in specs]
        assert configs[0] != configs[1] and [s.env["MIES_CONFIG_JSON_PATH"] for s in specs] == configs
        assert specs[0].env["MASTER_PORT"] != specs[1].env["MASTER_PORT"]
        (h0, n0), (h1, n1) = (_blocks(s.env) for s in specs)
        assert h0.isdisjoint(h1) and n0.isdisjoint(n1)
        assert [s.files[c]["BackendConfig"]["npuDeviceIds"] for s, c in zip(specs, configs)] == [[[0, 1, 2, 3]]] * 2


def test_two_sglang_trials_on_ascend_get_disjoint_blocks() -> None:
    """Issue 51 item 5: SGLang's NPU backend (sglang 0.5.23 srt/arg_groups/fields/device.py ``device`` "npu",
    srt/hardware_backend/npu) talks over HCCL, so two trials on one node need their own blocks, as MindIE's
    and vllm-ascend's get; on CUDA nothing is added."""
    engine = get_engine("sglang")
    specs = [engine.render(Candidate({}, [], {"platform": "ascend"}), port=1025 + i, devices=devices)
             for i, devices in enumerate((("0", "1"), ("2", "3")))]
    (host0, npu0), (host1, npu1) = (_blocks(s.env) for s in specs)
    assert host0.isdisjoint(host1) and npu0.isdisjoint(npu1)
    assert [s.env["HCCL_IF_BASE_PORT"] for s in specs] == ["60000", "60064"]
    by_flag = engine.render(Candidate({}, [], {"command": {"others": "--device npu"}}), port=1025, devices=["4"])
    assert by_flag.env["HCCL_NPU_SOCKET_PORT_RANGE"] == "16794-16825"
    cuda = engine.render(Candidate({}, [], {}), port=1025, devices=["0"])
    assert not any(v.startswith("HCCL") for v in cuda.env)
    assert any("HCCL ports" in n for n in engine.notes({"platform": "ascend"}))


def test_sglang_on_ascend_multi_node_and_pd_instances_follow_their_own_devices() -> None:
    """Issue 51 item 5: every node of a multi-node SGLang trial, and every PD instance, takes the block of
    its own first device (msopt/launch/hccl.py)."""
    from msopt.launch.render import TrialNode

    engine = get_engine("sglang")
    nodes = [TrialNode(0, "10.0.0.1", ("0", "1")), TrialNode(1, "10.0.0.2", ("2", "3"))]
    specs = engine.render_nodes(Candidate({}, [], {"platform": "ascend", "command": {"others": "--tp-size 4"}}), port=1025,
                                nodes=nodes, rendezvous_port=1026)
    assert [s.env["HCCL_IF_BASE_PORT"] for s in specs] == ["60000", "60064"]
    section = {"platform": "ascend", "pd": {"prefill_instances": 1, "decode_instances": 1,
                                            "visible_devices_env": "ASCEND_RT_VISIBLE_DEVICES"}}
    launch = engine.render_pd(Candidate({}, [], section), ports=list(range(2000, 2010)), devices=["0", "1"])
    bases = [s.env["HCCL_IF_BASE_PORT"] for s in (*launch.prefill, *launch.decode)]
    assert bases == ["60000", "60032"]
