"""AISBench: the model and dataset configs msopt writes for each evaluation, checked against what
AISBench 29c363e loads and validates (tests/data/ais_bench/conformance.json says where each fact
comes from). AISBench itself needs torch and dozens of packages, so the generated files are loaded with
AISBench's own loader (mmengine's Config.fromfile, when mmengine-lite is installed) and also run as
Python with stand-ins for exactly the names AISBench's own configs import, and then checked with
AISBench's rules (config_manager.py, cli/utils.py, datasets/synthetic.py) as data.
"""

from __future__ import annotations

import importlib.machinery
import json
import runpy
import sys
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from msopt.benchmarks import get_benchmark
from msopt.benchmarks.ais_bench_configs import DATASET_NAME, MODEL_NAME
from msopt.config import load_settings, split
from msopt.engines import LaunchSpec
from msopt.errors import ConfigError
from msopt.launch.render import Candidate
from msopt.run.validate import validate
from msopt.space.fields import FieldDecl, parse_field

ROOT = Path(__file__).parents[2]
CONF = json.loads((ROOT / "tests" / "data" / "ais_bench" / "conformance.json").read_text())


def decl(name: str) -> FieldDecl:
    return parse_field({"name": name, "config_position": "env", "dtype": "int", "min": 1, "max": 512},
                       source="t.toml", section="mindie", index=0)


@pytest.fixture
def ais_names(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, type]]:
    """Stand-in modules holding the names AISBench 29c363e's configs import (nothing else)."""
    made: dict[str, type] = {}
    parts = {name.rsplit(".", i)[0] for name in CONF["imports"] for i in range(name.count(".") + 1)}
    for mod in sorted(parts):
        stub = types.ModuleType(mod)
        stub.__spec__ = importlib.machinery.ModuleSpec(mod, None, is_package=True)
        monkeypatch.setitem(sys.modules, mod, stub)
    for mod, names in CONF["imports"].items():
        for n in names:
            made[n] = type(n, (), {})
            setattr(sys.modules[mod], n, made[n])
    yield made


def render(section: Mapping[str, Any], tmp_path: Path, server: LaunchSpec, *, n: int | None = 64,
           load: Mapping[str, float] | None = None) -> tuple[tuple[str, ...], dict[str, str]]:
    return get_benchmark("ais_bench").render(Candidate({"CONCURRENCY": 32}, [decl("CONCURRENCY")], section), server=server,
                                             num_prompts=n, load=load or {}, result_dir=tmp_path)


def load_generated(argv: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What AISBench's ConfigManager loads for ``--models``/``--datasets`` from ``--config-dir``."""
    cdir = Path(argv[argv.index("--config-dir") + 1])
    model_name = argv[argv.index("--models") + 1]
    dataset_name = argv[argv.index("--datasets") + 1]
    (model_file,) = list((cdir / "models").rglob(f"{model_name}.py"))  # match_cfg_file: exactly one
    (dataset_file,) = list((cdir / "datasets").rglob(f"{dataset_name}.py"))
    models = runpy.run_path(str(model_file))["models"]
    dcfg = runpy.run_path(str(dataset_file))
    datasets = [d for k, v in dcfg.items() if k.endswith(CONF["datasets_key_suffix"]) for d in v]
    assert len(models) == 1 and len(datasets) == 1
    return models[0], datasets[0]


def check_synthetic(cfg: Mapping[str, Any]) -> None:
    """AISBench 29c363e datasets/synthetic.py's checks of a synthetic config, from the conformance data."""
    syn = CONF["synthetic"]
    low, high = syn["int_range"]
    assert set(syn["required"]) <= set(cfg)
    assert isinstance(cfg["RequestCount"], int) and low <= cfg["RequestCount"] <= high
    kind = cfg["Type"].lower()
    sub = cfg[syn["types"][kind]]
    if kind == "tokenid":
        assert set(syn["tokenid_required"]) <= set(sub)
        assert isinstance(sub["RequestSize"], int) and low <= sub["RequestSize"] <= high
        assert 0 <= sub.get("PrefixLen", 0) <= sub["RequestSize"]
    else:
        assert set(sub) >= set(syn["string_parts"])
        for part in syn["string_parts"]:
            assert set(sub[part]) == set(syn["string_part_keys"])
            params = sub[part]["Params"]
            assert set(params) == set(syn["method_params"][sub[part]["Method"]])
            assert all(isinstance(params[k], int) and low <= params[k] <= high for k in ("MinValue", "MaxValue"))
            assert params["MinValue"] <= params["MaxValue"]


def test_default_run_generates_a_model_and_dataset_config_aisbench_accepts(ais_names, server_spec, tmp_path) -> None:
    argv, env = render({"command": {"input_len": 2048, "output_len": 128}}, tmp_path, server_spec,
                       load={"request_rate": 2.5})
    assert argv[:5] == ("ais_bench", "--models", MODEL_NAME, "--datasets", DATASET_NAME)
    assert "--num-prompts" not in argv  # the generated dataset holds exactly the evaluation's prompts
    model, dataset = load_generated(argv)
    stock = CONF["model_templates"]["vllm_api_stream_chat"]
    assert set(model) == set(stock["keys"]) | {"type", "pred_postprocessor"}
    assert model["type"] is ais_names[stock["type"]]
    assert model["pred_postprocessor"] == {"type": ais_names[stock["pred_postprocessor"]]}
    assert all(k in model for k in CONF["models_required_keys"])
    assert (model["host_ip"], model["host_port"]) == ("127.0.0.1", 8123)  # the trial's server, not 8080
    assert (model["batch_size"], model["request_rate"]) == (32, 2.5)  # the CONCURRENCY field, the stage's rate
    assert (model["path"], model["model"], model["max_out_len"]) == ("/models/Qwen3-8B", "qwen3-8b", 128)
    assert model["stream"] is True and model["generation_kwargs"] == {"temperature": 0.01, "ignore_eos": True}
    # cli/utils.py:53-63: a SyntheticDataset needs a model path
    assert dataset["type"] is ais_names["SyntheticDataset"] and model["path"]
    cfg = dataset["config"]
    check_synthetic(cfg)
    assert (cfg["Type"], cfg["RequestCount"], cfg["TokenIdConfig"]["RequestSize"]) == ("tokenid", 64, 2048)
    assert dataset["reader_cfg"]["input_columns"] == CONF["synthetic"]["reader_input_columns"]["tokenid"]
    assert env["MSOPT_SERVER_PORT"] == "8123" and env["MSOPT_CONCURRENCY"] == "32"


@pytest.mark.parametrize("template", sorted(CONF["model_templates"]))
def test_every_template_keeps_its_stock_keys(ais_names, server_spec, tmp_path, template: str) -> None:
    argv, _ = render({"command": {"model_template": template, "dataset_type": "string", "input_len": 100,
                                  "output_len": 50}}, tmp_path, server_spec, n=7, load={"request_rate": float("inf")})
    model, dataset = load_generated(argv)
    stock = CONF["model_templates"][template]
    extra = {"type"} | ({"pred_postprocessor"} if "pred_postprocessor" in stock else set())
    assert set(model) == set(stock["keys"]) | extra
    assert model["type"] is ais_names[stock["type"]] and model["abbr"] == stock["keys"]["abbr"]
    assert model.get("stream") == stock["keys"].get("stream") and model["request_rate"] == 0.0  # inf: no pacing
    cfg = dataset["config"]
    check_synthetic(cfg)
    assert cfg["StringConfig"]["Input"]["Params"] == {"MinValue": 100, "MaxValue": 100}
    assert cfg["StringConfig"]["Output"]["Params"] == {"MinValue": 50, "MaxValue": 50}
    assert dataset["reader_cfg"]["input_columns"] == CONF["synthetic"]["reader_input_columns"]["string"]


def test_model_table_overrides_and_strange_values_stay_literals(ais_names, tmp_path) -> None:
    nasty = LaunchSpec(engine="vllm", argv=("x",), port=9001, host="::1", served_model_name="a'b\"; import os",
                       model="/m/$(id)")
    section = {"command": {}, "model": {"retry": 5, "generation_kwargs": {"temperature": 0.5}}}
    model, _ = load_generated(render(section, tmp_path, nasty)[0])
    assert (model["retry"], model["host_ip"], model["host_port"]) == (5, "::1", 9001)
    assert model["model"] == "a'b\"; import os" and model["path"] == "/m/$(id)"
    assert model["generation_kwargs"] == {"temperature": 0.5, "ignore_eos": True}


def test_users_own_configs_are_named_and_num_prompts_slices_them(server_spec, tmp_path) -> None:
    section = {"command": {"models": "my_vllm_model", "datasets": ["gsm8k_gen"], "num_prompts": 3000,
                           "others": "--num-warmups 0"}}
    argv, _ = get_benchmark("ais_bench").render(Candidate({}, [], section), server=server_spec, num_prompts=None, load={},
                                                result_dir=tmp_path)
    assert argv == ("ais_bench", "--models", "my_vllm_model", "--datasets", "gsm8k_gen", "--mode", "perf",
                    "--work-dir", str(tmp_path), "--num-prompts", "3000", "--num-warmups", "0")
    argv, _ = get_benchmark("ais_bench").render(Candidate({}, [], {"command": {"datasets": "gsm8k_gen"}}), server=server_spec,
                                                num_prompts=5, load={}, result_dir=tmp_path)
    assert "--config-dir" in argv and argv[argv.index("--models") + 1] == MODEL_NAME


@pytest.mark.parametrize(("command", "model", "match"), [
    ({"models": "tgi_api_general"}, {}, "hard-codes host_port 8080"),
    ({"datasets": "synthetic_gen"}, {}, "RequestCount 10"),
    ({"model_template": "hf_chat_model"}, {}, "model_template.*valid: mindie_stream_api_general"),
    ({"dataset_type": "sharegpt"}, {}, "dataset_type"),
    ({"input_len": 0}, {}, "input_len.*from 1 to 1048576"),
    ({"prefix_len": 2000, "input_len": 1000}, {}, "prefix_len"),
    ({"ignore_eos": "yes"}, {}, "ignore_eos"),
    ({"input_lenght": 5}, {}, "did you mean 'input_len'"),
    ({"others": "--config-dir /x"}, {}, "--config-dir"),
    ({}, {"host_port": 8080}, "host_port' is set by msopt"),
    ({}, {"generation_kwargs": {"top-k": 1}}, "not a Python identifier"),
])
def test_bad_ais_bench_settings_are_refused_in_one_line(command, model, match) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        get_benchmark("ais_bench").check([], {"command": command, "model": model})
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["mindie_real", "deepseek_v3_atlas_multinode"])
def test_shipped_ais_bench_configs_validate(name: str) -> None:
    validate(*split(load_settings(ROOT / "configs" / f"{name}.toml")))


@pytest.mark.parametrize(("template", "kind"), [("vllm_api_stream_chat", "tokenid"), ("vllm_api_general", "string"),
                                                ("mindie_stream_api_general", "tokenid")])
def test_aisbench_loader_reads_the_generated_configs(ais_names, server_spec, tmp_path, template: str,
                                                     kind: str) -> None:
    """AISBench's own loader: ais_bench/benchmark/cli/config_manager.py (29c363e) reads every model and
    dataset config with mmengine's ``Config.fromfile`` (AISBench requires mmengine-lite), which turns
    the configs' ``from ais_bench... import X`` into lazy objects, imported on access (here from the
    stand-in modules), as for AISBench's stock files."""
    config = pytest.importorskip("mmengine.config")
    argv, _ = render({"command": {"model_template": template, "dataset_type": kind, "input_len": 300,
                                  "output_len": 20}}, tmp_path, server_spec, n=9)
    cdir = Path(argv[argv.index("--config-dir") + 1])
    cfg = config.Config.fromfile(str(cdir / "models" / f"{MODEL_NAME}.py"))
    assert "models" in cfg  # _load_models_config: "does not contain 'models' param" otherwise
    (model,) = cfg["models"]
    stock = CONF["model_templates"][template]
    assert model["type"] is ais_names[stock["type"]]  # imported from ais_bench.benchmark.models
    assert set(model) - {"type", "pred_postprocessor"} == set(stock["keys"])
    assert (model["host_port"], model["batch_size"], model["max_out_len"]) == (8123, 32, 20)
    dcfg = config.Config.fromfile(str(cdir / "datasets" / f"{DATASET_NAME}.py"))
    datasets = [d for k in dcfg.keys() if k.endswith(CONF["datasets_key_suffix"]) for d in dcfg[k]]
    assert len(datasets) == 1 and datasets[0]["type"] is ais_names["SyntheticDataset"]
    check_synthetic(datasets[0]["config"])
    assert datasets[0]["config"]["RequestCount"] == 9 and datasets[0]["config"]["Type"] == kind


def test_no_result_names_what_ais_bench_wrote(tmp_path):
    """Like vllm bench serve's (issue 39): the files AISBench did write are named, not only its log's end."""
    from msopt.benchmarks import get_benchmark
    from msopt.errors import EvaluationError

    (tmp_path / "outputs" / "default" / "20261201").mkdir(parents=True)
    (tmp_path / "outputs" / "default" / "20261201" / "summary.txt").write_text("x")
    with pytest.raises(EvaluationError) as err:
        get_benchmark("ais_bench").parse(tmp_path, tmp_path / "log")
    assert str(err.value).startswith("ais_bench wrote no performances/<model>/")
    assert "it wrote outputs/default/20261201/summary.txt there" in str(err.value)
