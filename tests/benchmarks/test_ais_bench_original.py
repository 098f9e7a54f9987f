"""Issue 36 items 8-10: AISBench's result file by name, non-streaming templates refused where TTFT/TPOT
are needed, and the original tool's [ais_bench] keys read as what they meant."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from msopt.benchmarks import get_benchmark
from msopt.benchmarks.ais_bench import mapped_section
from msopt.config import load_settings, split
from msopt.engines import LaunchSpec
from msopt.errors import ConfigError
from msopt.launch.render import Candidate
from msopt.run.validate import load, validate
from tests.benchmarks.conftest import write
from tests.benchmarks.test_ais_bench import ais_names, load_generated  # noqa: F401 (a fixture)
from tests.benchmarks.test_benchmarks import AIS_CSV, AIS_JSON

ORIGINAL = Path(__file__).parents[2].parent / "shared" / "original" / "config.toml"


def _older(path: Path) -> None:
    t = time.time() - 100
    os.utime(path, (t, t))


def test_the_result_is_read_by_the_dataset_abbr_not_the_newest_json(tmp_path: Path) -> None:
    (tmp_path / "ais_bench_configs" / "datasets").mkdir(parents=True)
    (tmp_path / "ais_bench_configs" / "datasets" / "msopt_synthetic.py").write_text("")
    perf = tmp_path / "20260101_000000" / "performances" / "vllm-api-stream-chat"
    write(perf / "synthetic.csv", AIS_CSV)
    _older(write(perf / "synthetic.json", json.dumps(AIS_JSON)))
    # request_rate > 0: AISBench writes its RPS distribution beside the results (tasks/utils.py:593-612)
    write(perf / "synthetic_rps_distribution_plot.json", json.dumps({"Output Token Throughput": "1 token/s"}))
    m = get_benchmark("ais_bench").parse(tmp_path, tmp_path / "log")
    assert m["generate_speed"] == 333.0 and m["time_to_first_token"] == pytest.approx(2.006)


def test_a_users_dataset_is_read_by_its_csvs_name(tmp_path: Path) -> None:
    perf = tmp_path / "20260101_000000" / "performances" / "vllm-api-stream-chat"
    write(perf / "gsm8k.csv", AIS_CSV)
    _older(write(perf / "gsm8k.json", json.dumps(AIS_JSON)))
    write(perf / "gsm8k_rps_distribution_plot.json", "{}")
    assert get_benchmark("ais_bench").parse(tmp_path, tmp_path / "log")["throughput"] == pytest.approx(0.0813)


def _toml(tmp_path: Path, ais: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text('engine = "mindie"\nbenchmark = "ais_bench"\ngenerate_speed_target = 100\n'
                    '[[mindie.target_field]]\nname = "mbs"\n'
                    'config_position = "BackendConfig.ScheduleConfig.maxBatchSize"\nmin = 8\nmax = 64\n'
                    f'dtype = "int"\n{ais}')
    return path


@pytest.mark.parametrize("template", ["vllm_api_general_chat", "vllm_api_general"])
def test_non_streaming_templates_are_refused_when_ttft_or_tpot_is_needed(tmp_path: Path, template: str) -> None:
    path = _toml(tmp_path, f'[ais_bench.command]\nmodel_template = "{template}"\n')
    with pytest.raises(ConfigError) as err:
        validate(*split(load_settings(path)))
    text = str(err.value)
    assert "time_per_output_token, time_to_first_token" in text and f"model_template {template} does not stream" in text
    assert "vllm_api_stream_chat" in text and "\n" not in text
    validate(*split(load_settings(_toml(tmp_path, '[ais_bench.command]\nmodel_template = "vllm_api_general_stream"\n'))))


SERVER = LaunchSpec(engine="mindie", argv=("x",), port=8123, host="127.0.0.1", served_model_name="qwen",
                    model="/models/Qwen3-8B")


def _generated_model(section: dict, tmp_path: Path) -> dict:
    argv, _ = get_benchmark("ais_bench").render(Candidate({}, [], section), server=SERVER, num_prompts=8, load={},
                                                result_dir=tmp_path)
    cdir = Path(argv[argv.index("--config-dir") + 1])
    text = (cdir / "models" / "msopt_model.py").read_text()
    return {k: v for k, v in (line.strip().rstrip(",").split("=", 1) for line in text.splitlines()
                              if "=" in line and line.startswith("        ") and "(" not in line.split("=")[0])}


def test_the_originals_keys_are_read_as_what_they_meant(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('engine = "mindie"\nbenchmark = "ais_bench"\n[[mindie.target_field]]\nname = "mbs"\n'
                    'config_position = "BackendConfig.ScheduleConfig.maxBatchSize"\nmin = 8\nmax = 64\n'
                    'dtype = "int"\n[ais_bench]\nmax_out_len = 300\npath = "/models/tok"\nmodel = ""\n'
                    'host_ip = ""\nhost_port = 0\n[ais_bench.command]\nmodels = "vllm_api_general_stream"\n'
                    'datasets = "datasets"\nmode = "perf"\nnum_prompts = 3000\n')
    settings = load_settings(path)
    assert any("[ais_bench] max_out_len (the original tool's) read as [ais_bench.command] output_len = 300" in n
               for n in settings.notes)
    section = dict(settings.section("ais_bench"))
    mapped = mapped_section(section)["command"]
    # issue 51 item 4: a stock name is the user's file of that name (AISBench's installed one), not msopt's template
    assert mapped["model_file"] == "vllm_api_general_stream" and "models" not in mapped
    assert "datasets" not in mapped and (mapped["output_len"], mapped["tokenizer"]) == (300, "/models/tok")
    get_benchmark("ais_bench").check([], section)
    model = _generated_model(section, tmp_path)
    assert model["max_out_len"] == "300" and model["path"] == "'/models/tok'" and model["host_port"] == "8123"
    assert model["abbr"] == "'vllm-api-general-stream'"
    assert get_benchmark("ais_bench").num_prompts(section) == 3000


def test_both_spellings_in_one_file_must_agree(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('engine = "mindie"\n[ais_bench]\nmax_out_len = 300\n[ais_bench.command]\noutput_len = 256\n')
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    assert str(err.value).startswith(str(path)) and "max_out_len = 300 (the original tool's spelling of" in str(err.value)


@pytest.mark.parametrize(("section", "needle"), [
    ({"model": "qwen"}, "write served_model_name = 'qwen' in [<engine>.command]"),
    ({"host_ip": "10.0.0.1"}, "[ais_bench] 'host_ip' is a key of the original tool that msopt sets itself"),
    ({"host_port": 8080}, "[ais_bench] 'host_port'"),
    ({"output_path": "/tmp/x"}, "'output_path'"),
    ({"command": {"work_dir": "/tmp/x"}}, "[ais_bench.command] 'work_dir'"),
])
def test_the_originals_keys_msopt_sets_itself_are_one_line(section: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        get_benchmark("ais_bench").check([], section)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.skipif(not ORIGINAL.exists(), reason="../shared/original/config.toml (the original's file) is absent")
@pytest.mark.usefixtures("ais_names")
def test_the_originals_config_runs_with_mindie_and_ais_bench_at_its_max_out_len(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    # the original's shipped file, with the output length a user sets in its [ais_bench] table
    path.write_text(ORIGINAL.read_text(encoding="utf-8") + "\n[ais_bench]\nmax_out_len = 300\n", encoding="utf-8")
    checked = load(str(path), "mindie", environ={}, overrides={"benchmark": "ais_bench"})
    assert checked.benchmark is not None
    section = dict(checked.config.benchmark.table)
    argv, _ = get_benchmark("ais_bench").render(Candidate({}, [], section), server=SERVER, num_prompts=8, load={},
                                                result_dir=tmp_path / "r")
    assert argv[argv.index("--models") + 1] == "msopt_model"  # the placeholder "models" means: generate it
    model, dataset = load_generated(argv)
    assert model["max_out_len"] == 300 and model["generation_kwargs"]["ignore_eos"] is True
    assert dataset["config"]["RequestCount"] == 8
