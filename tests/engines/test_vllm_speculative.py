"""vLLM's num_speculative_tokens as a searched field: ``speculative_config.<key>`` fields write into the
one ``--speculative-config`` JSON item, vLLM's start-up rules for it, and the simulator reads the value.

Sources: vllm 0.32.0 vllm/engine/arg_utils.py (``--speculative-config`` parsed with ``json.loads``;
``--spec-method``/``--spec-model``/``--spec-tokens`` join it) and vllm/config/speculative.py
(``SpeculativeConfig``: ``num_speculative_tokens`` > 0, a draft model for every method but mtp/ngram/...).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msopt.config import load_settings
from msopt.engines import LaunchSpec, get_engine
from msopt.engines.rules import ModelFacts, RenderedCandidate, broken_rule
from msopt.engines.vllm.knobs import knobs_vllm
from msopt.errors import ConfigError
from msopt.evaluate import Evaluator
from msopt.evaluate.results import EvalRequest, EvaluationResult
from msopt.launch.render import Candidate
from msopt.space.fields import FieldDecl, parse_field


def decl(name: str, position: str, dtype: str = "int", **kw: Any) -> FieldDecl:
    raw = {"name": name, "config_position": position, "dtype": dtype, "min": 1, "max": 8, **kw}
    return parse_field(raw, source="t.toml", section="vllm", index=0)


TOKENS = decl("spec_tokens", "speculative_config.num_speculative_tokens")


def test_a_speculative_config_field_is_one_json_value_in_one_argv_item() -> None:
    section = {"command": {"model": "/m"}, "speculative_config": {"method": "eagle3", "model": "/draft"}}
    spec = get_engine("vllm").render(Candidate({"spec_tokens": 3, "seqs": 8}, [TOKENS, decl("seqs", "--max-num-seqs")],
                                     section), port=1)
    argv = list(spec.argv)
    assert argv.count("--speculative-config") == 1 and argv[argv.index("--max-num-seqs") + 1] == "8"
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {
        "method": "eagle3", "model": "/draft", "num_speculative_tokens": 3}
    assert section["speculative_config"] == {"method": "eagle3", "model": "/draft"}  # untouched
    assert knobs_vllm(argv[2:]).spec_tokens == 3 and knobs_vllm(argv[2:]).spec_method == "eagle"
    # without the field or the table nothing is rendered
    assert "--speculative-config" not in get_engine("vllm").render(Candidate({}, [], {"command": {"model": "/m"}}), port=1).argv


def test_the_shortcut_of_another_key_may_stay_in_others() -> None:
    section = {"command": {"model": "/m", "others": "--spec-method mtp"}}
    vllm = get_engine("vllm")
    vllm.check([TOKENS], section)
    argv = list(vllm.render(Candidate({"spec_tokens": 2}, [TOKENS], section), port=1).argv)
    k = knobs_vllm(argv[2:])
    assert (k.spec_method, k.spec_tokens) == ("mtp", 2)


@pytest.mark.parametrize(("fields", "section", "match"), [
    ([TOKENS], {"command": {"others": "--speculative-config '{\"method\": \"mtp\"}'"}}, "render --speculative-config twice"),
    ([TOKENS], {"command": {"others": "-sc {}"}}, "-sc beside"),
    ([TOKENS], {"command": {"others": "--spec-tokens 2"}}, "set num_speculative_tokens twice"),
    ([TOKENS, decl("sc", "--speculative-config", "enum", dtype_param=["{}"])], {}, "render --speculative-config twice"),
    ([], {"speculative_config": {"method": "mtp"}, "command": {"others": "--speculative-config {}"}}, "twice"),
    ([TOKENS], {"speculative_config": "mtp"}, "must be a table"),
    ([decl("x", "speculative_config.num-tokens")], {}, "names no --speculative-config key"),
])
def test_a_second_spelling_of_the_flag_or_key_is_refused_at_load_time(fields: list, section: dict,
                                                                      match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        get_engine("vllm").check(fields, section)
    assert "\n" not in str(info.value)


def vllm(*flags: str) -> LaunchSpec:
    return LaunchSpec("vllm", ("vllm", "serve", "M", "--port", "1", *flags))


def refusal(spec: LaunchSpec, model: ModelFacts | None = None) -> tuple[str, str] | None:
    hit = broken_rule(RenderedCandidate(spec, {}, {}, model or ModelFacts(), {}), get_engine(spec.engine).startup_rules)
    return None if hit is None else (hit[0].id, hit[1])


@pytest.mark.parametrize(("flags", "expected"), [
    (("--speculative-config", '{"method": "ngram", "num_speculative_tokens": 0}'), "vllm.num_speculative_tokens_positive"),
    (("--spec-method", "ngram", "--spec-tokens", "0"), "vllm.num_speculative_tokens_positive"),
    (("--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}'), None),
    (("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}'), None),
    (("--speculative-config", '{"method": "deepseek_mtp", "num_speculative_tokens": 2}'), None),
    (("--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 2}'), "vllm.speculative_method_needs_model"),
    (("--speculative-config", '{"num_speculative_tokens": 2}'), "vllm.speculative_method_needs_model"),
    (("--speculative-config", '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 2}'), None),
    (("--spec-method", "eagle3", "--spec-model", "/d", "--spec-tokens", "3"), None),
    (("--speculative-config", "{not json"), None),  # the simulator and vLLM say so; no rule guesses
])
def test_vllm_speculative_start_up_rules(flags: tuple[str, ...], expected: str | None) -> None:
    hit = refusal(vllm(*flags))
    assert (hit[0] if hit else None) == expected


def test_the_messages_are_vllms_own() -> None:
    # what vllm 0.32.0 (the CPU build) raised for SpeculativeConfig(method="ngram", num_speculative_tokens=0)
    # and SpeculativeConfig(method="eagle3", num_speculative_tokens=2)
    hit = refusal(vllm("--speculative-config", '{"method": "ngram", "num_speculative_tokens": 0}'))
    assert hit and "num_speculative_tokens Input should be greater than 0 [type=greater_than" in hit[1]
    hit = refusal(vllm("--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 2}'))
    assert hit and "num_speculative_tokens was provided but without speculative model." in hit[1]


SIM = """
engine = "vllm"
simulate = true
[simulator]
hardware = "h100-sxm"
model = "qwen3-8b"
[simulator.workload]
num_prompts = 8
input_len = 64
output_len = 64
concurrency = 4
[vllm.command]
model = "Qwen/Qwen3-8B"
others = "--max-model-len 4096"
[vllm.speculative_config]
method = "ngram"
[[vllm.target_field]]
name = "spec_tokens"
config_position = "speculative_config.num_speculative_tokens"
min = 1
max = 8
dtype = "int"
value = 3
"""


def run_one(tmp_path: Path, position: list[float]) -> EvaluationResult:
    path = tmp_path / "c.toml"
    path.write_text(SIM)
    ev = Evaluator(load_settings(path).config, run_dir=tmp_path / "run")
    return ev.evaluate(EvalRequest(1, "search", 0, 0, tuple(position)))


def test_the_searched_value_reaches_the_simulator(tmp_path: Path) -> None:
    one, six = run_one(tmp_path, [1]), run_one(tmp_path, [6])
    assert not one.failed and not six.failed
    assert (one.values["spec_tokens"], six.values["spec_tokens"]) == (1, 6)
    # ngram's assumed per-token rate 0.4: 1 draft keeps 1.4 tokens a step, 6 keep 1.67, each verifying more
    assert one.metrics["time_per_output_token"] != six.metrics["time_per_output_token"]


MTP = ("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}')


@pytest.mark.parametrize(("flags", "model", "expected"), [
    (MTP, ModelFacts(model_type="llama"), "vllm.mtp_needs_mtp_layers"),
    (MTP, ModelFacts(model_type="qwen3_moe"), "vllm.mtp_needs_mtp_layers"),
    (("--speculative-config", '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'), ModelFacts(model_type="qwen3"),
     "vllm.mtp_needs_mtp_layers"),
    (("--spec-method", "mtp", "--spec-tokens", "2"), ModelFacts(model_type="qwen3"), "vllm.mtp_needs_mtp_layers"),
    (MTP, ModelFacts(model_type="deepseek_v3", mtp_layers=1), None),
    (MTP, ModelFacts(model_type="kimi_k2"), None),  # a type msopt has not read vLLM's handling of: no refusal
    (MTP, ModelFacts(), None),                      # unknown model: no refusal
    (("--speculative-config", '{"method": "mtp", "model": "/mtp", "num_speculative_tokens": 3}'),
     ModelFacts(model_type="llama"), None),         # a separate MTP checkpoint
    (MTP, ModelFacts(model_type="qwen3_next", mtp_layers=2), "vllm.mtp_tokens_divisible"),
    (("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 4}'),
     ModelFacts(model_type="qwen3_next", mtp_layers=2), None),
    (("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'),
     ModelFacts(model_type="qwen3_next", mtp_layers=2), None),  # fewer than n_predict: fine
])
def test_mtp_rules(flags: tuple[str, ...], model: ModelFacts, expected: str | None) -> None:
    hit = refusal(vllm(*flags), model)
    assert (hit[0] if hit else None) == expected


def test_mtp_messages_are_vllms_own() -> None:
    # what vllm 0.32.0 (the CPU build) raised for SpeculativeConfig(method="mtp", num_speculative_tokens=1)
    # on its tiny Llama
    hit = refusal(vllm(*MTP), ModelFacts(model_type="llama"))
    assert hit and hit[1] == "NotImplementedError: Unsupported speculative method: 'mtp'"
    hit = refusal(vllm(*MTP), ModelFacts(model_type="qwen3_next", mtp_layers=2))
    assert hit and hit[1] == "num_speculative_tokens:3 must be divisible by n_predict=2"


def test_the_model_facts_carry_the_mtp_layers(tmp_path: Path) -> None:
    from msopt.engines.rules import model_facts
    from msopt.sim import load_model

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "deepseek_v3", "num_attention_heads": 128,
                                                      "num_nextn_predict_layers": 1}))
    assert model_facts(str(tmp_path)) == ModelFacts(128, None, "deepseek_v3", 1)
    assert ModelFacts.of_spec(load_model("deepseek-v3")) == ModelFacts(128, 163840, "deepseek_v3", 1)
    assert ModelFacts.of_spec(load_model("qwen3-8b")).model_type == "qwen3"


def test_a_simulated_mtp_on_a_model_without_mtp_layers_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(SIM.replace('method = "ngram"', 'method = "mtp"'))
    res = Evaluator(load_settings(path).config, run_dir=tmp_path / "run").evaluate(EvalRequest(1, "search", 0, 0, (2,)))
    assert res.refused and "Unsupported speculative method: 'mtp'" in (res.error or "")


# -- the keys of --speculative-config: SpeculativeConfig's fields (pydantic, extra="forbid") -----------------------
def test_the_key_tables_say_where_they_come_from() -> None:
    from msopt.engines.vllm.adapter import FLAGS_DIR, SPECULATIVE_DEFAULT_VERSION, speculative_config_keys
    from msopt.engines.vllm.target import VLLM_VERSIONS

    for version in (*VLLM_VERSIONS, SPECULATIVE_DEFAULT_VERSION):
        head = (FLAGS_DIR / f"vllm-{version}-speculative-config.txt").read_text(encoding="utf-8").splitlines()[:2]
        assert head[0].startswith(f"# vllm {version}:") and "vllm/config/speculative.py:" in head[0]
        assert "scripts/generators/speculative_config_keys.py" in head[1]
        keys, _ = speculative_config_keys(version)
        assert {"method", "model", "num_speculative_tokens", "prompt_lookup_max"} <= set(keys)
        assert "mtp" in keys["method"] and "eagle3" in keys["method"] and not keys["model"]
    # medusa and mlp_speculator left SpeculativeMethod in 0.33.0; 0.32.0 reads '-' in a key as '_', 0.23.0 does not
    assert "medusa" in speculative_config_keys("0.32.0")[0]["method"]
    assert "medusa" not in speculative_config_keys("0.33.0")[0]["method"]
    assert speculative_config_keys("0.32.0")[1] and not speculative_config_keys("0.23.0")[1]


def test_the_generator_reads_fields_literals_and_dashes(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = tmp_path / "vllm" / "config"
    config.mkdir(parents=True)
    (tmp_path / "vllm" / "engine").mkdir()
    (config / "speculative.py").write_text('''
from typing import Literal
MTPModelTypes = Literal["deepseek_mtp", "mtp"]
EagleModelTypes = Literal["eagle", MTPModelTypes]
SpeculativeMethod = Literal["ngram", EagleModelTypes]
Sample = Literal["greedy"]

@config
class SpeculativeConfig:
    num_speculative_tokens: int = Field(default=None, gt=0)
    method: SpeculativeMethod | None = None
    draft_sample_method: Sample = "greedy"
    quantization: QuantizationMethods | str | None = None

    def compute_hash(self) -> str:
        local: int = 1
''')
    (tmp_path / "vllm" / "engine" / "arg_utils.py").write_text(
        'self.speculative_config = {k.replace("-", "_"): v for k, v in self.speculative_config.items()}\n')
    script = Path(__file__).parents[2] / "scripts" / "generators" / "speculative_config_keys.py"
    out = subprocess.run([sys.executable, str(script), str(config / "speculative.py"), "9.9.9"],
                         capture_output=True, text=True, check=True).stdout
    lines = [ln for ln in out.splitlines() if not ln.startswith("#")]
    assert lines == ["!dashes", "num_speculative_tokens @10", "method @11 ngram eagle deepseek_mtp mtp",
                     "draft_sample_method @12 greedy", "quantization @13"]
    assert "vllm/config/speculative.py:9-13" in out.splitlines()[0]


@pytest.mark.parametrize(("fields", "section", "match"), [
    ([], {"speculative_config": {"method": "eagle3", "model": "/d", "num_speculative_token": 3}},
     r"\[vllm.speculative_config\]: --speculative-config key 'num_speculative_token' is not a field of vLLM 0.32.0's "
     r"SpeculativeConfig .*did you mean 'num_speculative_tokens'"),
    ([decl("x", "speculative_config.num_draft_tokens")], {"speculative_config": {"method": "mtp"}},
     r"t.toml: \[vllm.target_field\] 'x': .*key 'num_draft_tokens' is not a field"),
    ([], {"speculative_config": {"method": "eagel3", "model": "/d"}}, "method 'eagel3' .*did you mean 'eagle3'"),
    ([decl("m", "speculative_config.method", "enum", dtype_param=["mtp", "mpt"])], {},
     r"'m'.*method 'mpt' is not one of the values"),
    ([decl("m", "speculative_config.method")], {}, "method a range of numbers is not one of"),
    ([], {"command": {"others": "--speculative-config '{\"method\": \"ngram\", \"lookup_max\": 4}'"}},
     r"\[vllm.command\] 'others' --speculative-config: .*'lookup_max'.*did you mean 'prompt_lookup_max'"),
    ([], {"command": {"others": "--spec-method eagle-3"}}, "method 'eagle-3'"),
    # 0.23.0 (vllm-ascend 0.23.0.post1's) reads no dashed key; medusa left SpeculativeMethod in 0.33.0
    ([], {"platform": "ascend", "speculative_config": {"method": "mtp", "num-speculative-tokens": 1}},
     "key 'num-speculative-tokens' is not a field of vLLM 0.23.0's"),
    ([], {"version": "0.33.0", "speculative_config": {"method": "medusa", "model": "/m"}}, "vLLM 0.33.0's"),
])
def test_an_unknown_key_or_method_is_refused_at_load_time(fields: list, section: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        get_engine("vllm").check(fields, section)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("section", [
    {"speculative_config": {"method": "deepseek_mtp", "num_speculative_tokens": 1, "rejection_sample_method": "block"}},
    {"speculative_config": {"method": "mtp", "num-speculative-tokens": 2}},  # 0.32.0 reads '-' as '_'
    {"speculative_config": {"method": "ngram", "prompt_lookup_max": 4, "draft_load_config": {"anything": 1}}},
    {"command": {"others": "--spec-method mtp --speculative-config not-json"}},  # vLLM's own parser says so
    {"platform": "ascend", "speculative_config": {"method": "deepseek_mtp", "num_speculative_tokens": 1}},
])
def test_known_keys_and_methods_pass(section: dict) -> None:
    get_engine("vllm").check([TOKENS] if "speculative_config" in section else [], section)


def test_msopt_validate_names_the_file_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from msopt.cli.main import main

    path = tmp_path / "c.toml"
    path.write_text(SIM.replace('method = "ngram"', 'method = "ngram"\nprompt_lookup = 4'))
    assert main(["validate", "-c", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(path) in err and "'prompt_lookup'" in err and "'prompt_lookup_max'" in err
    path.write_text(SIM)
    assert main(["validate", "-c", str(path)]) == 0


def test_preflight_checks_the_keys_against_the_installed_vllm() -> None:
    from msopt.engines.vllm.adapter import check_installed_speculative_config

    argv = ["vllm", "serve", "M", "--speculative-config", '{"method": "medusa", "model": "/m"}']
    assert check_installed_speculative_config(argv, "0.32.0") == (
        True, "every --speculative-config key is a field of the installed vLLM 0.32.0's SpeculativeConfig")
    ok, detail = check_installed_speculative_config(argv, "vllm 0.33.0")  # medusa left SpeculativeMethod in 0.33.0
    assert not ok and "the launch's --speculative-config: --speculative-config method 'medusa'" in detail
    assert detail.endswith("(the installed vLLM 0.33.0)")
    ok, detail = check_installed_speculative_config(["vllm", "serve", "M", "--spec-method", "eagle-3"], "0.23.0")
    assert not ok and "method 'eagle-3'" in detail
    ok, detail = check_installed_speculative_config(argv, "0.31.0")
    assert ok and "no SpeculativeConfig key table" in detail and "0.32.0" in detail
    assert check_installed_speculative_config(["vllm", "serve", "M"], "0.32.0") is None
    checks = dict((name, ok) for name, ok, _ in get_engine("vllm").version_checks(argv, "vllm 0.33.0", 2))
    assert checks["speculative_config"] is False
