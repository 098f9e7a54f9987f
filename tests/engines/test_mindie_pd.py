"""Issue 51, "Then: MindIE prefill/decode disaggregation": a MindIE PD deployment rendered per trial as
MindIE-MS deploys it (MindIE-Motor 5dfb024e, mindie_motor/src/: example/deploy_scripts/user_config.json,
config/ms_controller.json, config/ms_coordinator.json, gen_ranktable_helper/gen_global_ranktable.py,
boot_helper/boot.sh), validated and simulated; only the real launch on Kubernetes is refused, in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msopt.cli.main import main
from msopt.config import load_settings
from msopt.engines import get_engine
from msopt.engines.mindie.original import MINDIE_PD_UNSUPPORTED
from msopt.engines.mindie.pd import REAL_LAUNCH_REFUSED, rate_problem
from msopt.engines.pd import without_pd
from msopt.engines.rules import check_rules
from msopt.errors import ConfigError, EvaluationError
from msopt.evaluate.results import EvalRequest
from msopt.evaluate.runner import RunnerContext
from msopt.evaluate.simulated import SimRunner, render_pd_trial
from msopt.launch.hccl import HOST_RANGE, IF_BASE
from msopt.launch.render import TrialNode

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "configs" / "mindie_pd_atlas_a2.toml"
VALUES = {"n_prefill": 2, "n_decode": 1, "prefill_tp": 2, "prefill_world": 2, "decode_tp": 4, "decode_world": 4,
          "prefill_max_tokens": 8192, "decode_max_batch_size": 64}


def _launch(tmp_path: Path, values: dict[str, int] | None = None, nodes: tuple[TrialNode, ...] = ()):
    config = load_settings(EXAMPLE).config
    engine = get_engine("mindie")
    return config, engine, render_pd_trial(engine, values or VALUES, config, config.engine.section.table,
                                           [str(i) for i in range(8)], nodes, workdir=tmp_path)


def _doc(spec):
    (doc,) = spec.files.values()
    return doc


def test_each_instance_has_its_roles_config_json_and_npus_of_its_own(tmp_path: Path) -> None:
    """user_config.json:4-5 (p_instances_num, d_instances_num), 118-257 (one config.json per role, inferMode "dmi"
    at 121 and 189, each role's worldSize and tp); ms_controller.json:38-40 (the ports every server shares)."""
    config, engine, launch = _launch(tmp_path)
    assert launch.counts == (2, 1)
    docs = [_doc(s) for s in (*launch.prefill, *launch.decode)]
    assert [d["ServerConfig"]["inferMode"] for d in docs] == ["dmi"] * 3
    assert [d["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["worldSize"] for d in docs] == [2, 2, 4]
    assert [d["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["tp"] for d in docs] == [2, 2, 4]
    assert [d["BackendConfig"]["npuDeviceIds"] for d in docs] == [[[0, 1]], [[0, 1]], [[0, 1, 2, 3]]]
    assert [s.env["ASCEND_RT_VISIBLE_DEVICES"] for s in (*launch.prefill, *launch.decode)] == ["0,1", "2,3", "4,5,6,7"]
    assert {(d["ServerConfig"]["port"], d["ServerConfig"]["managementPort"], d["ServerConfig"]["metricsPort"])
            for d in docs} == {(1025, 1026, 1027)}
    # the decode role's batch limit and the prefill role's token budget go to their own files only
    assert docs[2]["BackendConfig"]["ScheduleConfig"]["maxBatchSize"] == 64
    assert [d["BackendConfig"]["ScheduleConfig"]["maxPrefillTokens"] for d in docs[:2]] == [8192, 8192]
    # every instance reads a private copy, and its HCCL blocks follow its own NPUs (msopt/launch/hccl.py)
    paths = [next(iter(s.files)) for s in (*launch.prefill, *launch.decode)]
    assert len(set(paths)) == 3 and all(s.env["MIES_CONFIG_JSON_PATH"] == p
                                        for s, p in zip((*launch.prefill, *launch.decode), paths))
    assert [s.env[IF_BASE] for s in (*launch.prefill, *launch.decode)] == ["60000", "60064", "60128"]
    # and MindIE's own start-up rules accept each (msopt/engines/mindie/rules.py, as cited there)
    for spec in (*launch.prefill, *launch.decode):
        check_rules(spec, VALUES, without_pd(config.engine.section.table), rules=engine.startup_rules, environ={})


def test_the_controller_coordinator_and_global_rank_table(tmp_path: Path) -> None:
    """ms_controller.json:3, 25, 30-31 (deploy_mode, the table's path, default_p_rate/default_d_rate) read from
    MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH and GLOBAL_RANK_TABLE_FILE_PATH (ControllerConstant.cpp:78-79);
    ms_coordinator.json:4-7, 48 from MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH (Configure.cpp:25); boot.sh:197, 225
    (mindie_motor_controller, mindie_motor_coordinator "$POD_IP" "$POD_IP"); gen_global_ranktable.py:131-149,
    184-188, 246-256 (group "2" the servers, "1" the controller, "0" the coordinator, status "completed")."""
    nodes = (TrialNode(0, "10.0.0.1", ("0", "1", "2", "3"), device_ips=(("0", "192.168.1.10"),)),
             TrialNode(1, "10.0.0.2", ("0", "1", "2", "3")))
    _, _, launch = _launch(tmp_path, nodes=nodes)
    ctl = launch.controller
    assert ctl is not None and ctl.argv == ("mindie_motor_controller",)
    conf = ctl.files[ctl.env["MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH"]]
    assert (conf["deploy_mode"], conf["default_p_rate"], conf["default_d_rate"]) == ("pd_separate", 2, 1)
    assert conf["global_rank_table_file_path"] == ctl.env["GLOBAL_RANK_TABLE_FILE_PATH"]
    table = ctl.files[ctl.env["GLOBAL_RANK_TABLE_FILE_PATH"]]
    groups = {g["group_id"]: g for g in table["server_group_list"]}
    assert table["status"] == "completed" and set(groups) == {"0", "1", "2"}
    servers = groups["2"]["server_list"]
    assert groups["2"]["server_count"] == "3"
    # first fit over the nodes: both prefill instances on node 0, the decode instance (4 NPUs) on node 1
    assert [s["server_ip"] for s in servers] == ["10.0.0.1", "10.0.0.1", "10.0.0.2"]
    assert launch.nodes == (0, 0, 1)
    assert servers[0]["device"][0] == {"device_id": "0", "device_logical_id": "0", "rank_id": "0",
                                       "device_ip": "192.168.1.10"}
    assert [d["device_id"] for d in servers[2]["device"]] == ["0", "1", "2", "3"]
    coord = launch.router
    assert coord.argv == ("mindie_motor_coordinator", coord.host, coord.host)
    cfg = coord.files[coord.env["MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH"]]
    assert cfg["http_config"]["predict_port"] == str(coord.port)
    assert cfg["digs_scheduler_config"]["deploy_mode"] == "pd_separate"


def test_mindie_ms_refuses_rates_that_sum_over_768(tmp_path: Path) -> None:
    """ControllerConfig.cpp:30-33, 65-80: default_p_rate + default_d_rate at most 768 (g_maxRateSum)."""
    assert rate_problem(3, 1) is None
    assert "should be less than 768" in str(rate_problem(700, 100))
    with pytest.raises(EvaluationError, match=r"needs 10 NPUs \(2 \+ 2 \+ 2 \+ 4"):  # more than the node's 8
        _launch(tmp_path, {**VALUES, "n_prefill": 3})


def test_validate_and_simulate_work_and_the_real_launch_is_one_line(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The example validates and simulates; the same file without simulate stops in one line naming Kubernetes
    (MindIE-MS runs one pod per instance: ms_controller.json:38-40 gives every instance one mindie_server_port)."""
    assert main(["validate", "-c", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "PD (MindIE-MS): prefill_instances n_prefill, decode_instances n_decode" in out
    assert main(["simulate", "-c", str(EXAMPLE), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["success_rate"] == 1.0 and result["generate_speed"] > 0 and result["values"]["n_prefill"] == 1
    real = tmp_path / "real.toml"
    real.write_text(EXAMPLE.read_text(encoding="utf-8").replace("simulate = true", "simulate = false"))
    assert main(["validate", "-c", str(real)]) == 2
    assert capsys.readouterr().err == f"msopt: error: {real}: {REAL_LAUNCH_REFUSED}\n"
    assert main(["simulate", "-c", str(real)]) == 0  # a simulation of the same file needs no Kubernetes


def test_the_simulator_models_both_pools_through_mindies_personality(tmp_path: Path) -> None:
    """msopt/sim/pd.py through MindIE's personality (knobs from each role's rendered config.json): the pools'
    parallelism is each role's tp, and a wider decode pool decodes faster."""
    config = load_settings(EXAMPLE).config
    runner = SimRunner(config, get_engine("mindie"), RunnerContext(run_dir=tmp_path))
    speeds = {}
    for tp in (2, 4):
        values = {**VALUES, "n_prefill": 1, "decode_tp": tp, "decode_world": tp}
        metrics = runner.measure(values, EvalRequest(tp, "baseline", None, 0, (), num_prompts=64), 0)
        speeds[tp] = metrics["time_per_output_token"]
        log = (tmp_path / "logs" / f"eval-{tp:05d}-server-a0.log").read_text()
        assert "disaggregated mindie serving" in log and "1 prefill + 1 decode instance(s)" in log
        assert f"1 decode instance(s) of tp={tp}" in log and "$ [controller]" in log
        assert HOST_RANGE not in log  # Qwen3-30B-A3B (MoE) on Atlas A2: no HCCL range (hcclenvref_07_0020)
    assert speeds[4] < speeds[2]


def test_the_originals_pd_ratio_fields_name_msopts_way(tmp_path: Path) -> None:
    """The original's default_p_rate/default_d_rate (written to ms_controller.json, msserviceprofiler@9582f434
    optimizer/plugins/simulate.py) are [mindie.pd]'s instance counts in msopt."""
    assert "[mindie.pd]" in MINDIE_PD_UNSUPPORTED and "Kubernetes" in MINDIE_PD_UNSUPPORTED


def test_sglangs_pd_keys_are_refused_for_mindie() -> None:
    """MindIE-MS has no transfer backend or bootstrap port to choose (ms_controller.json: transfer_type, set by
    the deployment): [mindie.pd] refuses SGLang's keys in one line that lists its own."""
    engine = get_engine("mindie")
    with pytest.raises(ConfigError, match=r"\['transfer_backend'\] are SGLang's.*valid keys"):
        engine.check([], {"pd": {"prefill_instances": 1, "transfer_backend": "mooncake"}})
    with pytest.raises(ConfigError, match=r"\[mindie.pd.controller\]: unknown key\(s\) \['port'\]"):
        engine.check([], {"pd": {"controller": {"port": 1}}})


ORIGINAL_RATES = '''
[[mindie.target_field]]
name = "default_p_rate"
config_position = "none"
min = 1
max = 3
dtype = "int"
value = 1
[[mindie.target_field]]
name = "default_d_rate"
config_position = "none"
min = 1
max = 3
dtype = "share"
dtype_param = "default_p_rate"
'''


def test_the_originals_two_rate_fields_become_the_instance_counts(tmp_path: Path) -> None:
    """docs/migrating.md, MindIE PD: the original's default_p_rate / default_d_rate fields (its manual's, as
    tests/config/test_original_config.py has them) with config_position "none", named by [mindie.pd], are
    ms_controller.json's two rates (ms_controller.json:30-31) and the instance counts."""
    text = EXAMPLE.read_text(encoding="utf-8")
    text = text.replace('prefill_instances = "n_prefill"', 'prefill_instances = "default_p_rate"')
    text = text.replace('decode_instances = "n_decode"', 'decode_instances = "default_d_rate"')
    start, end = text.index("[[mindie.target_field]]\nname = \"n_prefill\""), text.index("[[mindie.target_field]]\n"
                                                                                          "name = \"prefill_tp\"")
    path = tmp_path / "original_rates.toml"
    path.write_text(text[:start] + ORIGINAL_RATES.lstrip() + "\n" + text[end:], encoding="utf-8")
    config = load_settings(path).config
    engine = get_engine("mindie")
    values = {k: v for k, v in VALUES.items() if not k.startswith("n_")} | {
        "default_p_rate": 1, "default_d_rate": 3, "decode_tp": 2, "decode_world": 2}  # 2 + 3 x 2 NPUs: the node's 8
    launch = render_pd_trial(engine, values, config, config.engine.section.table, [], (), workdir=tmp_path)
    assert launch.counts == (1, 3)
    ctl = launch.controller
    assert ctl is not None
    conf = ctl.files[ctl.env["MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH"]]
    assert (conf["default_p_rate"], conf["default_d_rate"]) == (1, 3)


def test_the_exported_best_configuration_is_mindie_ms_files_and_no_one_host_launch(tmp_path: Path) -> None:
    """The export writes every process's rendered file (each instance's config.json, ms_controller.json,
    ms_coordinator.json with predict_port the launch port 1025 as ms_coordinator.json:5 ships it, the global
    rank table), and a best_command.sh that says MindIE-MS runs one pod per instance and stops before any
    launch (every instance listens on port 1025, ms_controller.json:38)."""
    from msopt.report.export import export_best

    config = load_settings(EXAMPLE).config
    written = export_best(config, VALUES, tmp_path, eval_id=3, fitness=1.0)
    names = {str(p.relative_to(tmp_path)) for p in written}
    assert {"prefill0/config.json", "prefill1/config.json", "decode0/config.json", "ms_controller.json",
            "ms_coordinator.json", "global_ranktable.json"} <= names
    assert json.loads((tmp_path / "decode0" / "config.json").read_text())["ServerConfig"]["inferMode"] == "dmi"
    coordinator = json.loads((tmp_path / "ms_coordinator.json").read_text())
    assert coordinator["http_config"]["predict_port"] == "1025"
    script = (tmp_path / "best_command.sh").read_text().splitlines()
    stop = script.index("exit 2")
    assert any("Kubernetes pod" in line for line in script[:stop])
    assert not any("mindieservice_daemon" in line for line in script[:stop])
    assert any(line.startswith("env MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH=ms_controller.json") for line in script)
    record = json.loads((tmp_path / "best_command.json").read_text())
    assert record["port"] == 1025 and record["controller"]["argv"] == ["mindie_motor_controller"]
    assert record["files"]["global_ranktable.json"] == "global_ranktable.json"


def test_the_originals_pd_flag_is_accepted_with_a_mindie_pd_table(capsys: pytest.CaptureFixture[str]) -> None:
    """``msopt optimizer --pd disaggregation`` (the original's flag, msserviceprofiler@9582f434
    optimizer/optimizer.py arg_parse) means what a [mindie.pd] table does: accepted with one, refused in one
    line without (tests/config/test_original_config.py)."""
    from msopt.cli.main import build_parser
    from msopt.cli.optimize import _load

    args = build_parser().parse_args(["optimizer", "-c", str(EXAMPLE), "--pd", "disaggregation", "--no-ray"])
    checked, store = _load(args)
    assert store is None and checked.config.engine.name == "mindie" and "pd" in checked.config.engine.section.table
    capsys.readouterr()
