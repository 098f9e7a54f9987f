"""Issue 51 item 1: the original's config.toml with MindIE's shipped config.json starts its baseline.

The baseline is what is installed, whatever the field's dtype (the original put the installed value into
every ``BackendConfig...`` field and converted ratio fields back: msserviceprofiler@9582f434
optimizer/optimizer.py:426-433, config/config.py:729-800), and the search space's constraints come from
the installed file: ``maxPreemptCount`` other than 0 needs ``cpuMemSize`` other than 0 (MindIE-LLM 8b4871a
src/config_manager/config_manager_impl.cpp:325-328).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import msopt.engines.mindie as mindie_mod
from msopt.cli.main import main
from msopt.config import load_settings
from msopt.engines.installed import installed_changes
from msopt.engines.mindie.rules import RULES
from msopt.engines.rules import RenderedCandidate, broken_rule
from msopt.launch.render import Candidate, LaunchSpec
from tests.support.shared_data import MINDIE_SHIPPED, ORIGINAL_CONFIG, shared

TEMPLATE = Path(mindie_mod.__file__).with_name("config.json")

FIELDS = """
engine = "mindie"
benchmark = "builtin"
[cluster]
accelerator = "none"
[mindie]
config_path = "{conf}"
[[mindie.target_field]]
name = "max_batch_size"
config_position = "BackendConfig.ScheduleConfig.maxBatchSize"
min = 10
max = 1000
dtype = "int"
[[mindie.target_field]]
name = "max_prefill_batch_size"
config_position = "BackendConfig.ScheduleConfig.maxPrefillBatchSize"
min = 0.1
max = 0.7
dtype = "ratio"
dtype_param = "max_batch_size"
[[mindie.target_field]]
name = "prefill_time_ms_per_req"
config_position = "BackendConfig.ScheduleConfig.prefillTimeMsPerReq"
min = 0
max = 1000
dtype = "range"
dtype_param = 10
[[mindie.target_field]]
name = "max_preempt_count"
config_position = "BackendConfig.ScheduleConfig.maxPreemptCount"
min = 0
max = 1
dtype = "ratio"
dtype_param = "max_batch_size"
"""


def apply_installed(settings: Any) -> tuple[Any, list[str]]:
    """``settings`` as a run takes them from the installation (msopt.cli.optimize), and the lines it prints."""
    got = installed_changes(settings.config)
    return settings.with_installed(got.values, got.constants, got.devices), got.lines


def _write(tmp_path: Path, schedule: Mapping[str, Any], cpu_mem: int = 0, extra: str = "") -> Path:
    doc = json.loads(TEMPLATE.read_text())
    doc["BackendConfig"]["ScheduleConfig"].update(schedule)
    doc["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["cpuMemSize"] = cpu_mem
    conf = tmp_path / "config.json"
    conf.write_text(json.dumps(doc))
    path = tmp_path / "c.toml"
    path.write_text(FIELDS.format(conf=conf) + extra)
    return path


def test_ratio_and_range_fields_take_the_installed_values(tmp_path: Path) -> None:
    """A ratio field's baseline is the ratio that decodes to the installed integer (int(ratio x target),
    msopt/space/dtypes.py RatioType), a range field's the installed value when it is one of the range's."""
    path = _write(tmp_path, {"maxBatchSize": 200, "maxPrefillBatchSize": 50, "prefillTimeMsPerReq": 150,
                             "maxPreemptCount": 7}, cpu_mem=5)
    settings, lines = apply_installed(load_settings(path))
    values = {d.name: d.value for d in settings.fields}
    assert values["max_batch_size"] == 200 and values["prefill_time_ms_per_req"] == 150
    assert int(values["max_prefill_batch_size"] * 200) == 50 and int(values["max_preempt_count"] * 200) == 7
    assert any(line.startswith("baseline max_prefill_batch_size = 50 (ratio 0.25 of max_batch_size 200): ")
               for line in lines)
    # what the baseline renders is what is installed
    space_values = settings.config.engine.fields
    from msopt.space import SearchSpace
    decoded = SearchSpace(space_values).decode(SearchSpace(space_values).default_position()).values
    assert (decoded["max_batch_size"], decoded["max_prefill_batch_size"], decoded["prefill_time_ms_per_req"],
            decoded["max_preempt_count"]) == (200, 50, 150, 7)


def test_an_installed_value_the_field_cannot_take_keeps_its_own(tmp_path: Path) -> None:
    path = _write(tmp_path, {"maxBatchSize": 200, "maxPrefillBatchSize": 190, "prefillTimeMsPerReq": 155})
    _, lines = apply_installed(load_settings(path))
    said = {line.split(" = ")[0]: line for line in lines}
    assert "190 / max_batch_size 200 = 0.95, outside the ratio's [0.1, 0.7]" in said["baseline max_prefill_batch_size"]
    assert "not one of the range's values (0 + k x 10)" in said["baseline prefill_time_ms_per_req"]


def test_preempt_count_is_pinned_to_0_where_cpu_mem_size_is_0(tmp_path: Path) -> None:
    """config_manager_impl.cpp:325-328 (MindIE-LLM 8b4871a): "The value of modelParam.cpuMemSize can not be 0
    when maxPreemptCount is not 0": with the installed cpuMemSize 0 the field is constant 0."""
    settings, lines = apply_installed(load_settings(_write(tmp_path, {"maxBatchSize": 200})))
    decl = {d.name: d for d in settings.fields}["max_preempt_count"]
    assert decl.constant == 0.0
    assert lines[0].startswith("constant max_preempt_count = 0: ModelConfig[0].cpuMemSize is 0 in ")
    assert "config_manager_impl.cpp:325-328" in lines[0]
    # with host memory for swapping, or a field that sets cpuMemSize, the field is searched
    settings, lines = apply_installed(load_settings(_write(tmp_path, {"maxBatchSize": 200}, cpu_mem=5)))
    assert {d.name: d for d in settings.fields}["max_preempt_count"].constant is None
    extra = ('[[mindie.target_field]]\nname = "cpu_mem"\nconfig_position = '
             '"BackendConfig.ModelDeployConfig.ModelConfig.0.cpuMemSize"\nmin = 0\nmax = 8\ndtype = "int"\n')
    settings, _ = apply_installed(load_settings(_write(tmp_path, {"maxBatchSize": 200}, extra=extra)))
    assert {d.name: d for d in settings.fields}["max_preempt_count"].constant is None


def test_a_pin_the_field_cannot_take_is_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, {"maxBatchSize": 200})
    path.write_text(path.read_text().replace('min = 0\nmax = 1\ndtype = "ratio"', 'min = 0.1\nmax = 1\ndtype = "ratio"'))
    with pytest.raises(Exception, match="max_preempt_count.*cannot take 0.*widen the field's range"):
        apply_installed(load_settings(path))


# -- MindIE's own checks, as cited, applied to a rendered config.json ----------------------------------
def mindie_refusals(doc: Mapping[str, Any]) -> list[str]:
    """What MindIE-LLM 8b4871a refuses in ``doc``, written from its sources:

    - src/config_manager/schedule_config.cpp:80-82: a maxPrefillBatchSize of 0 is read as maxBatchSize;
    - schedule_config.cpp:265-302 (CheckParam): maxBatchSize in [1, 819200], maxPrefillBatchSize in
      [1, maxBatchSize], maxPreemptCount <= maxBatchSize, prefillTimeMsPerReq and decodeTimeMsPerReq in
      [0, 1000], maxQueueDelayMicroseconds in [500, 1000000];
    - src/config_manager/config_manager_impl.cpp:321-332 (CheckAllParam), for every ModelConfig: maxIterTimes
      not 0; cpuMemSize not 0 when maxPreemptCount is not 0; maxPrefillTokens >= maxInputTokenLen unless
      templateType is "Mix";
    - src/config_manager/backend_config.cpp (InitFromJson): each npuDeviceIds subset has worldSize entries.
    """
    out = []
    backend = doc["BackendConfig"]
    s = backend["ScheduleConfig"]
    prefill = s["maxPrefillBatchSize"] if s["maxPrefillBatchSize"] > 0 else s["maxBatchSize"]
    if not 1 <= s["maxBatchSize"] <= 819200:
        out.append("maxBatchSize")
    if not 1 <= prefill <= s["maxBatchSize"]:
        out.append("maxPrefillBatchSize")
    if s["maxPreemptCount"] > s["maxBatchSize"]:
        out.append("maxPreemptCount > maxBatchSize")
    for key in ("prefillTimeMsPerReq", "decodeTimeMsPerReq"):
        if not 0 <= s[key] <= 1000:
            out.append(key)
    if not 500 <= s["maxQueueDelayMicroseconds"] <= 1000000:
        out.append("maxQueueDelayMicroseconds")
    deploy = backend["ModelDeployConfig"]
    for m in deploy["ModelConfig"]:
        if s["maxIterTimes"] == 0:
            out.append("maxIterTimes")
        if s["maxPreemptCount"] != 0 and m["cpuMemSize"] == 0:
            out.append("cpuMemSize 0 with maxPreemptCount")
        if s["maxPrefillTokens"] < deploy["maxInputTokenLen"] and s["templateType"] != "Mix":
            out.append("maxPrefillTokens < maxInputTokenLen")
        if any(len(ids) != m["worldSize"] for ids in backend["npuDeviceIds"]):
            out.append("npuDeviceIds vs worldSize")
    return out


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _diff(a.get(k), b.get(k), f"{path}.{k}")]
    return [] if a == b else [path[1:]]


def test_a_simulated_run_of_the_originals_file_starts_its_baseline(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Done-when of issue 51: the original's config.toml with MindIE's shipped config.json renders a baseline
    identical to the installed file (but for the ports, the management address and HTTPS, which every trial
    sets: docs/engines.md) and candidates MindIE's own checks accept (:func:`mindie_refusals`, as cited, and
    msopt's start-up rules table)."""
    original, installed = shared(ORIGINAL_CONFIG), shared(MINDIE_SHIPPED)
    layer = tmp_path / "c.toml"
    layer.write_text(f'[mindie]\nconfig_path = "{installed}"\n')
    monkeypatch.setenv("MODEL_EVAL_STATE_CONFIG_PATH", str(original))
    monkeypatch.chdir(tmp_path)
    rc = main(["optimizer", "-c", str(layer), "--simulate", "--no-ray", "--plain", "--particles", "4", "--iters", "2",
               "--backup", "--seed", "3", "-o", str(tmp_path / "runs")])
    assert rc == 0
    (run,) = (tmp_path / "runs").iterdir()
    rows = list(csv.DictReader((run / "results.csv").open()))
    assert rows and not [r["error"] for r in rows if r["error"]]
    docs = sorted((run / "backup").glob("eval-*/server-config.json"))
    assert len(docs) >= 8
    base = json.loads(installed.read_text())
    first = json.loads(docs[0].read_text())
    assert docs[0].parent.name == "eval-00000-a1"
    assert _diff(base, first) == ["ServerConfig.httpsEnabled", "ServerConfig.managementIpAddress",
                                  "ServerConfig.managementPort", "ServerConfig.metricsPort", "ServerConfig.port"]
    for path in docs:
        doc = json.loads(path.read_text())
        assert mindie_refusals(doc) == [], path
        spec = LaunchSpec(engine="mindie", argv=("mindieservice_daemon",), env={}, files={"config.json": doc}, port=1)
        assert broken_rule(RenderedCandidate(spec, {}, {}), RULES) is None, path


def test_validate_says_what_the_run_takes_from_the_installation(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, {"maxBatchSize": 200, "maxPrefillBatchSize": 50})
    assert main(["validate", "-c", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  constant: max_preempt_count" in out
    assert any(line.startswith("installed: constant max_preempt_count = 0: ") for line in out)
    assert any(line.startswith("installed: baseline max_prefill_batch_size = 50 (ratio 0.25") for line in out)


def _doc(world: int, instances: int = 1) -> dict[str, Any]:
    doc = json.loads(TEMPLATE.read_text())
    doc["BackendConfig"]["modelInstanceNumber"] = instances
    doc["BackendConfig"]["npuDeviceIds"] = [list(range(i * world, (i + 1) * world)) for i in range(instances)]
    doc["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["worldSize"] = world
    return doc


def test_the_installed_world_size_is_the_trials_devices(tmp_path: Path) -> None:
    """Issue 51 item 2: without [cluster] devices_per_trial or a ternary field, a trial holds the NPUs of the
    installed deployment, worldSize x modelInstanceNumber (each npuDeviceIds subset has worldSize ids:
    MindIE-LLM 8b4871a src/config_manager/backend_config.cpp, "The size of npuDeviceIds (subset) does not
    equal to worldSize"), and renders them as installed; what the user sets wins, and the line says which."""
    conf = tmp_path / "config.json"
    conf.write_text(json.dumps(_doc(4)))
    path = tmp_path / "c.toml"
    path.write_text(FIELDS.format(conf=conf).replace('accelerator = "none"', 'accelerator = "NPU"'))
    settings, lines = apply_installed(load_settings(path))
    assert settings.config.cluster.trial.devices == 4
    assert lines[-1] == (f"devices per trial = 4: ModelConfig[0].worldSize 4 x modelInstanceNumber 1 (npuDeviceIds "
                         f"[[0, 1, 2, 3]]) of {conf} (the installed deployment's; set [cluster] devices_per_trial "
                         "to change it)")
    spec = mindie_mod.MindieAdapter().render(Candidate({}, [], {"config_path": str(conf)}), port=1025, devices=list("4567"))
    backend = spec.files[next(iter(spec.files))]["BackendConfig"]
    assert backend["npuDeviceIds"] == [[0, 1, 2, 3]] and backend["ModelDeployConfig"]["ModelConfig"][0]["worldSize"] == 4
    # two instances of 2: 4 devices, rendered as two subsets
    conf.write_text(json.dumps(_doc(2, instances=2)))
    settings, _ = apply_installed(load_settings(path))
    assert settings.config.cluster.trial.devices == 4
    spec = mindie_mod.MindieAdapter().render(Candidate({}, [], {"config_path": str(conf)}), port=1025, devices=list("0123"))
    backend = spec.files[next(iter(spec.files))]["BackendConfig"]
    assert backend["npuDeviceIds"] == [[0, 1], [2, 3]] and backend["ModelDeployConfig"]["ModelConfig"][0]["worldSize"] == 2
    # the user's [cluster] devices_per_trial wins, and the line says so
    path.write_text(path.read_text().replace('accelerator = "NPU"', 'accelerator = "NPU"\ndevices_per_trial = 8'))
    settings, lines = apply_installed(load_settings(path))
    assert settings.config.cluster.trial.devices == 8
    assert lines[-1].startswith("devices per trial = 8: [cluster] devices_per_trial (the installed ")


def test_validate_and_the_run_say_the_trials_devices(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    original, installed = shared(ORIGINAL_CONFIG), shared(MINDIE_SHIPPED)
    layer = tmp_path / "c.toml"
    layer.write_text(f'[mindie]\nconfig_path = "{installed}"\n')
    monkeypatch.setenv("MODEL_EVAL_STATE_CONFIG_PATH", str(original))
    assert main(["validate", "-c", str(layer), "-e", "mindie"]) == 0
    line = f"installed: devices per trial = 4: ModelConfig[0].worldSize 4 x modelInstanceNumber 1 (npuDeviceIds " \
           f"[[0, 1, 2, 3]]) of {installed} (the installed deployment's; set [cluster] devices_per_trial to change it)"
    assert line in capsys.readouterr().out.splitlines()
    from msopt.cli.main import build_parser
    from msopt.cli.optimize import _load
    checked, _ = _load(build_parser().parse_args(["optimizer", "-c", str(layer)]))
    assert checked.config.cluster.trial.devices == 4
    assert line.removeprefix("installed: ") in capsys.readouterr().out.splitlines()
    main(["preflight", "-c", str(layer)])  # checks this node for the 4 NPUs a trial holds
    assert any(x.endswith("a trial needs [cluster] devices_per_trial = 4; use a node with more or lower "
                          "devices_per_trial") or x.endswith("4 fit") for x in capsys.readouterr().out.splitlines())


def test_inherited_container_ip_and_rank_table_are_cleared_per_trial(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 51 item 7: MIES_CONTAINER_IP replaces ipAddress when not empty (MindIE-LLM 8b4871a
    server_config.cpp:618-636; env_util.cpp:58-62 reads an unset variable as ""), and ATB reads RANK_TABLE_FILE
    even on one node (atb_llm/utils/env.py:74, default ""); MindIE's manual: "单机推理建议取消该环境变量"
    (prefill_decode_mixed_deployment.md:337). A one-node trial sets them empty, [mindie.env] wins, a trial over
    nodes sets them per node, and validate says so."""
    from msopt.launch.render import TrialNode

    monkeypatch.setenv("MIES_CONTAINER_IP", "10.9.9.9")
    monkeypatch.setenv("RANK_TABLE_FILE", "/etc/old_rank_table.json")
    adapter = mindie_mod.MindieAdapter()
    spec = adapter.render(Candidate({}, [], {}), port=1025, devices=["0"])
    assert (spec.env["MIES_CONTAINER_IP"], spec.env["MIES_CONTAINER_MANAGEMENT_IP"], spec.env["RANK_TABLE_FILE"]) == \
        ("", "", "")
    spec = adapter.render(Candidate({}, [], {"env": {"RANK_TABLE_FILE": "/mine.json"}}), port=1025, devices=["0"])
    assert spec.env["RANK_TABLE_FILE"] == "/mine.json"
    nodes = (TrialNode(0, "10.0.0.1", ("0",)), TrialNode(1, "10.0.0.2", ("0",)))
    specs = adapter.render_nodes(Candidate({}, [], {}), port=1025, nodes=nodes, rendezvous_port=29500, workdir=tmp_path)
    assert [s.env["MIES_CONTAINER_IP"] for s in specs] == ["10.0.0.1", "10.0.0.2"]
    assert all(s.env["RANK_TABLE_FILE"].endswith("rank_table_file.json") for s in specs)
    path = _write(tmp_path, {"maxBatchSize": 200})
    assert main(["validate", "-c", str(path)]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "MIES_CONTAINER_IP, " in x]
    assert line.startswith("mindie: MIES_CONTAINER_IP, MIES_CONTAINER_MANAGEMENT_IP, RANK_TABLE_FILE: set empty ")
    assert line.endswith("this environment has MIES_CONTAINER_IP=10.9.9.9, RANK_TABLE_FILE=/etc/old_rank_table.json")


def test_simulate_evaluates_the_installed_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`msopt simulate` evaluates what a run's baseline is: the original's file with MindIE's shipped config.json
    simulates maxBatchSize 200 and maxPreemptCount 0, which MindIE accepts (config_manager_impl.cpp:325-328)."""
    layer = tmp_path / "c.toml"
    layer.write_text(f'[mindie]\nconfig_path = "{shared(MINDIE_SHIPPED)}"\n')
    monkeypatch.setenv("MODEL_EVAL_STATE_CONFIG_PATH", str(shared(ORIGINAL_CONFIG)))
    assert main(["simulate", "-c", str(layer), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert out["error"] is None and not out["refused"]
    assert main(["simulate", "-c", str(layer)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "max_batch_size = 200" in lines and "max_preempt_count = 0" in lines and "max_prefill_batch_size = 50" in lines
