"""Engine adapters: the contract every registered engine keeps, and each engine's specifics."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from msopt.benchmarks import get_benchmark
from msopt.engines import ENGINES, EngineAdapter, LaunchSpec, get_engine
from msopt.engines.mindie.config_doc import CLEARED_ENV
from msopt.errors import ConfigError, EvaluationError, RegistryError
from msopt.launch.render import Candidate, format_value, substitute
from msopt.space.fields import FieldDecl, parse_field

PRINT_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"
NASTY = ["; touch pwned", "$(id)", "a\nb", "two words", "`id`", "x' \"y", "$HOME", "--evil"]


def decl(name: str, position: str, dtype: str = "int", **kw: Any) -> FieldDecl:
    raw = {"name": name, "config_position": position, "dtype": dtype, "min": 0, "max": 10, **kw}
    return parse_field(raw, source="test.toml", section="x", index=0)


def section_for(engine: str, **cmd: Any) -> dict[str, Any]:
    return {"command": {"executable": [sys.executable, "-c", PRINT_ARGV], **cmd}}


def position_for(engine: str, flag: str, json_path: str) -> str:
    return json_path if engine == "mindie" else flag


def run_argv(spec: LaunchSpec) -> list[str]:
    """Execute the rendered argv for real; the child prints what it received."""
    out = subprocess.run(list(spec.argv), capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout)


@pytest.mark.parametrize("engine", ENGINES.names())
def test_contract(engine: str, tmp_path: Path) -> None:
    adapter = get_engine(engine)
    assert isinstance(adapter, EngineAdapter) and adapter.name == engine
    fields = [decl("batch", position_for(engine, "--max-num-seqs",
                                         "BackendConfig.ScheduleConfig.maxBatchSize")),
              decl("MY_ENV", "env", "float")]
    spec = adapter.render(Candidate({"batch": 37, "MY_ENV": 0.25}, fields, section_for(engine)), port=12345,
                          workdir=tmp_path)
    assert isinstance(spec, LaunchSpec) and spec.engine == engine
    assert isinstance(spec.argv, tuple) and all(isinstance(a, str) for a in spec.argv)
    assert spec.port == 12345 and spec.health_path.startswith("/")
    assert spec.env["MY_ENV"] == "0.25"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in spec.env.items())
    assert "ASCEND_RT_VISIBLE_DEVICES" not in spec.env and "CUDA_VISIBLE_DEVICES" not in spec.env
    if engine == "mindie":
        (doc,) = spec.files.values()
        assert doc["BackendConfig"]["ScheduleConfig"]["maxBatchSize"] == 37
        assert doc["ServerConfig"]["port"] == 12345
    else:
        assert "37" in spec.argv and "12345" in spec.argv
        i = spec.argv.index("--max-num-seqs")
        assert spec.argv[i + 1] == "37"
    assert run_argv(spec) == list(spec.argv[3:])


@pytest.mark.parametrize("engine", ENGINES.names())
def test_missing_value_is_an_evaluation_error(engine: str) -> None:
    fields = [decl("batch", position_for(engine, "--x", "BackendConfig.ScheduleConfig.maxBatchSize"))]
    with pytest.raises(EvaluationError, match="batch"):
        get_engine(engine).render(Candidate({}, fields, section_for(engine)), port=1)


@pytest.mark.parametrize("engine", ENGINES.names())
@pytest.mark.parametrize("nasty", NASTY)
def test_values_stay_one_argv_item(engine: str, nasty: str, tmp_path: Path) -> None:
    fields = [decl("S", "env", "enum", dtype_param=[nasty, "ok"]),
              decl("T", position_for(engine, "--tag", "BackendConfig.ScheduleConfig.templateName"),
                   "enum", dtype_param=[nasty, "ok"])]
    section = section_for(engine, others="--a $S --b=${S} '--c $S' --d", served_model_name="m-$S")
    spec = get_engine(engine).render(Candidate({"S": nasty, "T": nasty}, fields, section), port=9,
                                     workdir=tmp_path)
    got = run_argv(spec)
    tail = got[got.index("--a"):]
    assert tail == ["--a", nasty, f"--b={nasty}", f"--c {nasty}", "--d"]
    assert spec.env["S"] == nasty
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()
    if engine == "mindie":
        (doc,) = spec.files.values()
        assert doc["BackendConfig"]["ScheduleConfig"]["templateName"] == nasty
        assert doc["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["modelName"] == f"m-{nasty}"
    else:
        assert f"m-{nasty}" in got
        if nasty.startswith("-"):
            assert f"--tag={nasty}" in got
        else:
            i = got.index("--tag")
            assert got[i + 1] == nasty


def test_substitution_is_single_pass_and_leaves_unknown_names() -> None:
    values = {"A": "$B", "B": "x", "A_1": 5}
    assert substitute("$A ${B} $A_1 ${A}_1 $UNKNOWN ${NOPE} $", values) == "$B x 5 $B_1 $UNKNOWN ${NOPE} $"


def test_format_value() -> None:
    import numpy as np

    assert format_value(True) == "true" and format_value(False) == "false"
    assert format_value(np.int64(7)) == "7" and format_value(np.float64(0.5)) == "0.5"
    assert format_value(2.0) == "2.0" and format_value("s") == "s"
    with pytest.raises(EvaluationError):
        format_value(float("nan"))


def test_vllm_argv_layout() -> None:
    fields = [decl("tp", "--tensor-parallel-size"), decl("gmu", "--gpu-memory-utilization", "float"),
              decl("CONCURRENCY", "env"), decl("hidden", "none")]
    section = {"command": {"model": "/m/Qwen3", "served_model_name": "q", "host": "0.0.0.0",
                           "others": "--seed 1 --max-model-len ${hidden}"}}
    spec = get_engine("vllm").render(Candidate({"tp": 2, "gmu": 0.9, "CONCURRENCY": 8, "hidden": 4096},
                                     fields, section), port=8123)
    assert spec.argv == ("vllm", "serve", "/m/Qwen3", "--host", "0.0.0.0", "--port", "8123",
                         "--served-model-name", "q", "--tensor-parallel-size", "2",
                         "--gpu-memory-utilization", "0.9", "--seed", "1", "--max-model-len", "4096")
    assert dict(spec.env) == {"CONCURRENCY": "8"}
    assert spec.served_model_name == "q" and spec.model == "/m/Qwen3" and spec.host == "0.0.0.0"
    assert spec.base_url == "http://127.0.0.1:8123" and spec.ready_timeout == 600.0


@pytest.mark.parametrize(("engine", "value", "expected"), [
    ("vllm", True, ["--enable-chunked-prefill", "--enforce-eager"]),
    ("vllm", False, ["--no-enable-chunked-prefill"]),
    ("sglang", True, ["--enable-chunked-prefill", "--enforce-eager"]),
    ("sglang", False, []),
])
def test_bool_flags(engine: str, value: bool, expected: list[str]) -> None:
    fields = [decl("a", "--enable-chunked-prefill", "bool"), decl("b", "--enforce-eager", "bool")]
    spec = get_engine(engine).render(Candidate({"a": value, "b": value}, fields, {}), port=1)
    assert list(spec.argv[spec.argv.index("--served-model-name") + 2:]) == expected


def test_sglang_argv_layout() -> None:
    fields = [decl("mrr", "--max-running-requests")]
    spec = get_engine("sglang").render(Candidate({"mrr": 64}, fields, {"command": {"model": "M"}}), port=3)
    assert spec.argv == ("python", "-m", "sglang.launch_server", "--model-path", "M", "--host",
                         "127.0.0.1", "--port", "3", "--served-model-name", "qwen3-8b",
                         "--max-running-requests", "64")


def test_sglang_renders_dp_attention_in_its_current_spelling() -> None:
    # sglang 0.5.23 server_args.py:416-424: --enable-dp-attention is a deprecated alias of --attn-dp-size
    from msopt.engines.pd import instance_devices
    from msopt.engines.sglang.adapter import current_dp_spelling

    fields = [decl("tp", "--tp-size"), decl("dp", "--dp-size"), decl("attn", "--enable-dp-attention", "bool")]
    sg = get_engine("sglang")
    spec = sg.render(Candidate({"tp": 8, "dp": 4, "attn": True}, fields, {"command": {"model": "M"}}), port=3)
    tail = list(spec.argv[spec.argv.index("--served-model-name") + 2:])
    assert tail == ["--tp-size", "8", "--attn-dp-size", "4"] and instance_devices(spec.argv) == 8
    off = sg.render(Candidate({"tp": 8, "dp": 4, "attn": False}, fields, {"command": {"model": "M"}}), port=3)
    assert list(off.argv[-4:]) == ["--tp-size", "8", "--dp-size", "4"] and instance_devices(off.argv) == 32
    # in 'others', with the alias spelling, or next to an explicit --attn-dp-size (then the flag adds nothing)
    others = sg.render(Candidate({"tp": 4}, [decl("tp", "--tp-size")],
                       {"command": {"others": "--data-parallel-size=2 --enable-dp-attention --ep-size 4"}}), port=3)
    assert list(others.argv[-6:]) == ["--tp-size", "4", "--attn-dp-size", "2", "--ep-size", "4"]
    assert current_dp_spelling(["--tp-size", "8", "--attn-dp-size", "2", "--dp-size", "2", "--enable-dp-attention"]) \
        == ["--tp-size", "8", "--attn-dp-size", "2", "--dp-size", "2"]
    assert current_dp_spelling(["--tp-size", "8", "--enable-dp-attention"]) == ["--tp-size", "8"]


def test_wait_start_time_and_health_path_from_section() -> None:
    spec = get_engine("vllm").render(Candidate({}, [], {"wait_start_time": 42, "health_path": "/ping"}), port=1)
    assert spec.ready_timeout == 42.0 and spec.health_path == "/ping"
    with pytest.raises(ConfigError, match="wait_start_time"):
        get_engine("vllm").render(Candidate({}, [], {"wait_start_time": -1}), port=1)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_command_line_engine_rejects_dotted_positions(engine: str) -> None:
    fields = [decl("x", "BackendConfig.ScheduleConfig.maxBatchSize")]
    with pytest.raises(ConfigError, match="'x'.*not usable"):
        get_engine(engine).render(Candidate({"x": 1}, fields, {}), port=1)


def test_bad_others_and_executable() -> None:
    with pytest.raises(ConfigError, match="quotes"):
        get_engine("vllm").render(Candidate({}, [], {"command": {"others": "--a 'unbalanced"}}), port=1)
    with pytest.raises(ConfigError, match="executable"):
        get_engine("vllm").render(Candidate({}, [], {"command": {"executable": []}}), port=1)
    spec = get_engine("vllm").render(Candidate({}, [], {"command": {"executable": "my vllm",
                                                          "others": ["--x", "a b"]}}), port=1)
    assert spec.argv[0] == "my vllm" and spec.argv[-2:] == ("--x", "a b")


def test_a_leading_tilde_in_executable_and_model_is_the_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/u")
    section = {"command": {"executable": ["~/venv/bin/vllm", "serve"], "model": "~/m", "others": "--x ~/y"}}
    spec = get_engine("vllm").render(Candidate({}, [], section), port=1)
    assert spec.argv[:3] == ("/home/u/venv/bin/vllm", "serve", "/home/u/m") and spec.model == "/home/u/m"
    assert spec.argv[-2:] == ("--x", "~/y")  # others stay literal: no shell runs
    bench, _ = get_benchmark("vllm_benchmark").render(
        Candidate({}, [], {"command": {"executable": ["~/venv/bin/vllm", "bench", "serve"]}}), server=spec, num_prompts=1,
        load={}, result_dir=Path("/tmp/r"))
    assert bench[0] == "/home/u/venv/bin/vllm" and bench[bench.index("--model") + 1] == "/home/u/m"


def test_unknown_engine_lists_valid_ones() -> None:
    with pytest.raises(RegistryError, match="mindie, sglang, vllm"):
        get_engine("vlm")


# -- MindIE ---------------------------------------------------------------------------------
def mindie_config(tmp_path: Path) -> Path:
    path = tmp_path / "conf" / "config.json"
    path.parent.mkdir()
    doc = json.loads((Path(__file__).parents[2] / "msopt/engines/mindie/config.json").read_text())
    doc["BackendConfig"]["ModelDeployConfig"]["ModelConfig"].append({"tp": 1, "modelName": "b"})
    path.write_text(json.dumps(doc))
    return path


def test_mindie_dotted_paths_with_list_indices(tmp_path: Path) -> None:
    path = mindie_config(tmp_path)
    before = path.read_text()
    fields = [decl("tp0", "BackendConfig.ModelDeployConfig.ModelConfig.0.tp"),
              decl("tp1", "BackendConfig.ModelDeployConfig.ModelConfig.1.tp"),
              decl("dev", "BackendConfig.npuDeviceIds.0.1"),
              decl("sel", "BackendConfig.ScheduleConfig.supportSelectBatch", "bool"),
              decl("mbs", "BackendConfig.ScheduleConfig.maxBatchSize", "float"),
              decl("MINDIE_LOG_LEVEL", "env", "enum", dtype_param=["info", "debug"])]
    values = {"tp0": 4, "tp1": 2, "dev": 9, "sel": True, "mbs": 128.0,
              "MINDIE_LOG_LEVEL": "debug"}
    section = {"config_path": str(path), "command": {"others": "--x $tp0"}}
    spec = get_engine("mindie").render(Candidate(values, fields, section), port=4321, devices=["4", "5"])
    assert list(spec.files) == [str(path)]
    doc = spec.files[str(path)]
    mc = doc["BackendConfig"]["ModelDeployConfig"]["ModelConfig"]
    assert mc[0]["tp"] == 4 and mc[1]["tp"] == 2
    assert doc["BackendConfig"]["npuDeviceIds"] == [[0, 9]]
    sched = doc["BackendConfig"]["ScheduleConfig"]
    assert sched["supportSelectBatch"] is True
    assert sched["maxBatchSize"] == 128 and isinstance(sched["maxBatchSize"], int)
    assert doc["ServerConfig"]["port"] == 4321
    assert spec.argv == ("mindieservice_daemon", "--x", "4")
    assert {k: v for k, v in spec.env.items() if k not in CLEARED_ENV} == {  # CLEARED_ENV: test_installed_original
        "MINDIE_LOG_LEVEL": "debug", "HCCL_IF_BASE_PORT": "60128",  # NPUs 4-5's HCCL blocks
                        "HCCL_HOST_SOCKET_PORT_RANGE": "60128-60159", "HCCL_NPU_SOCKET_PORT_RANGE": "16794-16825"}
    assert spec.health_path == "/v1/models" and spec.served_model_name == "qwen3-8b"
    assert path.read_text() == before  # rendering never writes


@pytest.mark.parametrize(("position", "match"), [
    ("BackendConfig.ModelDeployConfig.ModelConfig.5.tp", "out of range"),
    ("BackendConfig.backendName.x", "not an object or a list"),
    ("BackendConfig.ModelDeployConfig.ModelConfig.tp", "is a list"),
    ("BackendConfig.Nope.x", "has no key 'Nope'"),
    ("BackendConfig.ScheduleConfig.brandNew", "has no key 'brandNew'.*MindIE ignores unknown keys"),
    ("BackendConfig.ScheduleConfig.maxBatchsize", "did you mean 'maxBatchSize'"),
    ("BackendConfig..x", "empty component"),
])
def test_mindie_bad_paths_name_the_field(position: str, match: str) -> None:
    fields = [decl("bad_field", position)]
    with pytest.raises(ConfigError, match=f"'bad_field'.*{match}"):
        get_engine("mindie").render(Candidate({"bad_field": 1}, fields, {}), port=1)
    with pytest.raises(ConfigError, match="bad_field"):
        get_engine("mindie").check(fields, {})


def test_mindie_template_when_no_config_path(tmp_path: Path) -> None:
    spec = get_engine("mindie").render(Candidate({}, [], {}), port=7)
    (key,) = spec.files
    assert key == "config.json"
    doc = spec.files[key]
    assert "ScheduleConfig" in doc["BackendConfig"] and doc["ServerConfig"]["port"] == 7
    spec2 = get_engine("mindie").render(Candidate({}, [], {}), port=7, workdir=tmp_path)
    assert list(spec2.files) == [str(tmp_path / "config.json")]
    # every render starts from a fresh copy of the template
    spec.files[key]["ServerConfig"]["port"] = 1
    assert get_engine("mindie").render(Candidate({}, [], {}), port=8).files["config.json"]["ServerConfig"]["port"] == 8


def test_mindie_private_copy_via_config_env(tmp_path: Path) -> None:
    path = mindie_config(tmp_path)
    work = tmp_path / "w"
    spec = get_engine("mindie").render(Candidate({}, [], {"config_path": str(path),
                                                "config_env": "MIES_CONFIG_JSON_PATH"}),
                                       port=7, workdir=work)
    assert list(spec.files) == [str(work / "config.json")]
    assert spec.env["MIES_CONFIG_JSON_PATH"] == str(work / "config.json")


def test_mindie_config_path_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config_path"):
        get_engine("mindie").render(Candidate({}, [], {"config_path": str(tmp_path / "missing.json")}), port=1)
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(ConfigError, match="invalid JSON"):
        get_engine("mindie").render(Candidate({}, [], {"config_path": str(bad)}), port=1)


def test_engines_from_settings(write_toml) -> None:
    from msopt.config import load_settings

    path = Path(__file__).parents[2] / "configs" / "quickstart.toml"
    settings = load_settings(path)
    from msopt.space import SearchSpace

    space = SearchSpace.from_settings(settings)
    decoded = space.decode(space.default_position())
    spec = get_engine("vllm").render(Candidate(decoded.values, settings.fields, settings.section("vllm")),
                                     port=8001)
    assert "--max-num-seqs" in spec.argv and "--enable-chunked-prefill" in spec.argv


# -- property: no value can change the shape of a command line --------------------------------
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st


@hsettings(max_examples=200, deadline=None)
@given(value=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                     max_size=40))
def test_any_value_stays_one_item(value: str) -> None:
    fields = [decl("V", "env", "enum", dtype_param=[value or "x"]), decl("F", "--flag", "enum",
                                                                        dtype_param=[value or "x"])]
    spec = get_engine("vllm").render(Candidate({"V": value, "F": value}, fields,
                                     {"command": {"others": "--a $V --b pre${V}post"}}), port=1)
    argv = list(spec.argv)
    assert argv[-4:] == ["--a", value, "--b", f"pre{value}post"]
    flag_items = argv[argv.index("--served-model-name") + 2:-4]
    assert flag_items in (["--flag", value], [f"--flag={value}"])
    assert spec.env["V"] == value


@pytest.mark.parametrize("engine", ENGINES.names())
def test_none_values_are_left_out(engine: str) -> None:
    fields = [decl("E", "env"), decl("x", position_for(engine, "--x", "BackendConfig.ScheduleConfig.maxBatchSize"))]
    spec = get_engine(engine).render(Candidate({"E": None, "x": None}, fields, {}), port=1)
    assert "E" not in spec.env and "--x" not in spec.argv
    if engine == "mindie":
        (doc,) = spec.files.values()
        assert doc["BackendConfig"]["ScheduleConfig"]["maxBatchSize"] == 200  # the template's


def test_mindie_starts_from_the_backup_a_dead_run_left(tmp_path):
    import json as _json

    from msopt.engines import get_engine
    from msopt.launch.files import BACKUP_SUFFIX, staged_files
    from msopt.space import parse_field

    cfg = tmp_path / "config.json"
    original = {"ServerConfig": {"port": 1025}, "BackendConfig": {"ScheduleConfig": {"maxBatchSize": 200,
                                                                                     "maxPrefillTokens": 8192}}}
    cfg.write_text(_json.dumps(original))
    # a run that died: the edited file in place, the original in the backup
    (tmp_path / ("config.json" + BACKUP_SUFFIX)).write_text(_json.dumps(original))
    cfg.write_text(_json.dumps({**original, "BackendConfig": {"ScheduleConfig": {"maxBatchSize": 7,
                                                                                "maxPrefillTokens": 1}}}))
    field = parse_field(dict(name="mbs", config_position="BackendConfig.ScheduleConfig.maxBatchSize", min=1,
                             max=500, dtype="int"), source="t", section="mindie", index=0)
    spec = get_engine("mindie").render(Candidate({"mbs": 64}, [field], {"config_path": str(cfg)}), port=2000)
    doc = spec.files[str(cfg)]
    assert doc["BackendConfig"]["ScheduleConfig"] == {"maxBatchSize": 64, "maxPrefillTokens": 8192}
    with staged_files(spec.files):
        pass
    assert _json.loads(cfg.read_text()) == original  # restored at the next launch's end
    assert not (tmp_path / ("config.json" + BACKUP_SUFFIX)).exists()


def test_pd_launch_instances_named_and_replaced() -> None:
    """A PdLaunch lists its instances prefill first, names them, and takes new ones back in that order."""
    from msopt.engines.pd import PdLaunch

    def spec(port: int) -> LaunchSpec:
        return LaunchSpec(engine="sglang", argv=("srv", str(port)), port=port)

    launch = PdLaunch(prefill=(spec(1), spec(2)), decode=(spec(3),), router=spec(9))
    assert [s.port for s in launch.instances] == [1, 2, 3]
    assert [(n, s.port) for n, s in launch.named()] == [("prefill0", 1), ("prefill1", 2), ("decode0", 3)]
    moved = launch.with_instances([spec(11), spec(12), spec(13)])
    assert [s.port for s in moved.prefill] == [11, 12] and [s.port for s in moved.decode] == [13]
    assert moved.router == launch.router
    with pytest.raises(ValueError, match="2 instance launch"):
        launch.with_instances([spec(11), spec(12)])
