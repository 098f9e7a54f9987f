"""Start-up rules: one table per engine, each rule with its source, checked before any launch."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from msopt.config import load_settings
from msopt.engines import ENGINES, LaunchSpec, get_engine
from msopt.engines.rules import ModelFacts, RenderedCandidate, broken_rule, check_rules, model_facts
from msopt.errors import RefusedError
from msopt.evaluate import Evaluator
from msopt.evaluate.results import EvalRequest, EvaluationResult
from msopt.launch.render import Candidate
from tests.support.shared_data import MINDIE_SHIPPED, shared


def vllm(*flags: str) -> LaunchSpec:
    return LaunchSpec("vllm", ("vllm", "serve", "M", "--port", "1", *flags))


def sglang(*flags: str) -> LaunchSpec:
    return LaunchSpec("sglang", ("python", "-m", "sglang.launch_server", "--model-path", "M", *flags))


def mindie(world: int, tp: int, dp: int = 1, pp: int = 1, ids: Any = None) -> LaunchSpec:
    doc = {"BackendConfig": {"modelInstanceNumber": 1,
                             "npuDeviceIds": ids if ids is not None else [list(range(world))],
                             "ModelDeployConfig": {"ModelConfig": [
                                 {"worldSize": world, "tp": tp, "dp": dp, "pp": pp}]}}}
    return LaunchSpec("mindie", ("mindieservice_daemon",), files={"config.json": doc})


def refusal(spec: LaunchSpec, model: ModelFacts | None = None, env: dict | None = None) -> str | None:
    hit = broken_rule(RenderedCandidate(spec, {}, {}, model or ModelFacts(), env or {}), get_engine(spec.engine).startup_rules)
    return None if hit is None else hit[0].id


def test_every_rule_names_a_registered_engine_its_source_and_version() -> None:
    RULES = [r for name in ENGINES.names() for r in ENGINES.get(name).startup_rules]
    for name in ENGINES.names():  # each adapter declares its own engine's rules only
        assert all(r.engine == name for r in ENGINES.get(name).startup_rules)
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    for rule in RULES:
        assert rule.engine in ENGINES.names() and rule.id.startswith(rule.engine + ".")
        assert rule.source.strip() and rule.version.strip()
    assert {r.engine for r in RULES} == {"vllm", "sglang", "mindie"}


@pytest.mark.parametrize(("flags", "model", "expected"), [
    (("--no-enable-chunked-prefill", "--max-num-batched-tokens", "2048", "--max-model-len", "4096"), None,
     "vllm.batched_tokens_vs_max_model_len"),
    (("--enable-chunked-prefill", "--max-num-batched-tokens", "2048", "--max-model-len", "4096"), None, None),
    (("--max-num-batched-tokens", "2048", "--max-model-len", "4096"), None, None),  # chunked on by default
    (("--no-enable-chunked-prefill", "--max-num-batched-tokens=2048"), ModelFacts(max_position=40960),
     "vllm.batched_tokens_vs_max_model_len"),
    (("--max-num-batched-tokens", "128", "--max-num-seqs", "256"), None, "vllm.batched_tokens_vs_max_num_seqs"),
    (("--max-num-batched-tokens", "256", "--max-num-seqs", "256"), None, None),
    (("--tensor-parallel-size", "3"), ModelFacts(attention_heads=32), "vllm.tp_divides_attention_heads"),
    (("--tensor-parallel-size", "4"), ModelFacts(attention_heads=32), None),
    (("--tensor-parallel-size", "3"), None, None),  # heads unknown: no refusal
    (("--max-num-seqs", "512", "--max-num-batched-tokens", "128", "--max-num-batched-tokens", "1024"), None,
     None),  # the last occurrence wins, as with argparse
])
def test_vllm_rules(flags: tuple[str, ...], model: ModelFacts | None, expected: str | None) -> None:
    assert refusal(vllm(*flags), model) == expected


def test_vllm_message_is_the_engines_own() -> None:
    with pytest.raises(RefusedError, match=r"max_num_batched_tokens \(128\) must be greater than or equal to "
                                           r"max_num_seqs \(256\)\.") as info:
        check_rules(vllm("--max-num-batched-tokens", "128", "--max-num-seqs", "256"), {}, {},
                    rules=get_engine("vllm").startup_rules, model=ModelFacts(), environ={})
    assert info.value.rule == "vllm.batched_tokens_vs_max_num_seqs"
    assert "vllm/config/scheduler.py" in str(info.value) and "0.33.0" in str(info.value)


def test_sglang_rules() -> None:
    assert refusal(sglang("--tp-size", "3"), ModelFacts(attention_heads=64)) == "sglang.tp_divides_attention_heads"
    assert refusal(sglang("--tp-size", "4"), ModelFacts(attention_heads=64)) is None
    assert refusal(sglang("--chunked-prefill-size", "100", "--page-size", "64")) == \
        "sglang.chunked_prefill_vs_page_size"
    assert refusal(sglang("--chunked-prefill-size", "-1", "--page-size", "64")) is None
    assert refusal(sglang("--chunked-prefill-size", "128", "--page-size", "64")) is None


def test_mindie_rules() -> None:
    master = {"MASTER_IP": "10.0.0.1", "MASTER_PORT": "29500"}
    assert refusal(mindie(8, 8)) is None
    assert refusal(mindie(8, 2, dp=4)) is None
    assert refusal(mindie(8, 1, dp=4, pp=2), env=master) == "mindie.dp_and_pp"
    assert refusal(mindie(8, 4, pp=2), env=master) is None
    assert refusal(mindie(8, 4, pp=2)) == "mindie.pp_master_address"
    assert refusal(mindie(8, 4, pp=2), env={"MASTER_IP": "10.0.0.1"}) == "mindie.pp_master_address"
    assert refusal(mindie(8, 2, dp=2)) == "mindie.world_size"
    assert refusal(mindie(8, 2, pp=2), env=master) == "mindie.world_size"
    assert refusal(mindie(8, 8, ids=[[0, 1, 2, 3]])) == "mindie.npu_device_ids"
    assert refusal(mindie(4, 4, ids=[[0, 1, 2, 3], [4, 5, 6, 7]])) == "mindie.npu_device_ids"


def mindie_schedule(schedule: dict, deploy: dict | None = None, cpu_mem: Any = 5) -> LaunchSpec:
    """A one-instance MindIE config.json with these ScheduleConfig and ModelDeployConfig keys."""
    base = {"templateType": "Standard", "maxPrefillTokens": 8192, "maxIterTimes": 512, "maxPreemptCount": 0,
            "maxBatchSize": 200}
    model = {"worldSize": 8, "tp": 8, "dp": 1, "pp": 1, "cpuMemSize": cpu_mem}
    doc = {"BackendConfig": {"modelInstanceNumber": 1, "npuDeviceIds": [list(range(8))],
                             "ScheduleConfig": {**base, **schedule},
                             "ModelDeployConfig": {"maxInputTokenLen": 2048, **(deploy or {}),
                                                   "ModelConfig": [model]}}}
    return LaunchSpec("mindie", ("mindieservice_daemon",), files={"config.json": doc})


@pytest.mark.parametrize(("schedule", "deploy", "cpu_mem", "expected"), [
    ({}, None, 5, None),  # MindIE's shipped values
    ({"maxPrefillTokens": 1024}, None, 5, "mindie.max_prefill_tokens_vs_max_input_token_len"),
    ({"maxPrefillTokens": 2048}, None, 5, None),  # equal is allowed ("less than" refuses)
    ({"maxPrefillTokens": 1024, "templateType": "Mix"}, None, 5, None),  # Mix is exempt
    ({"maxPrefillTokens": 8192}, {"maxInputTokenLen": 16384}, 5, "mindie.max_prefill_tokens_vs_max_input_token_len"),
    ({"maxIterTimes": 0}, None, 5, "mindie.max_iter_times_nonzero"),
    ({"maxIterTimes": 1}, None, 5, None),
    ({"maxPreemptCount": 4}, None, 0, "mindie.preempt_needs_cpu_mem"),
    ({"maxPreemptCount": 4}, None, 5, None),
    ({"maxPreemptCount": 0}, None, 0, None),  # MindIE's own shipped default: cpuMemSize 0, no preemption
    ({"maxPreemptCount": 300}, None, 5, "mindie.max_preempt_count_vs_max_batch_size"),
    ({"maxPreemptCount": 200}, None, 5, None),
])
def test_mindie_schedule_rules(schedule: dict, deploy: dict | None, cpu_mem: Any, expected: str | None) -> None:
    # MindIE-LLM 8b4871a src/config_manager/config_manager_impl.cpp:318-332, schedule_config.cpp:276-281
    assert refusal(mindie_schedule(schedule, deploy, cpu_mem)) == expected


def test_mindie_schedule_rule_messages_are_mindies_own() -> None:
    cases = [({"maxPrefillTokens": 1024}, 5, "The value of maxPrefillTokens should not be less than maxInputTokenLen."),
             ({"maxIterTimes": 0}, 5, "The value of ScheduleParam.maxIterTimes can not be 0."),
             ({"maxPreemptCount": 4}, 0,
              "The value of modelParam.cpuMemSize can not be 0 when maxPreemptCount is not 0.")]
    for schedule, cpu_mem, message in cases:
        with pytest.raises(RefusedError) as info:
            check_rules(mindie_schedule(schedule, cpu_mem=cpu_mem), {}, {}, rules=get_engine("mindie").startup_rules,
                        model=ModelFacts(), environ={})
        assert message in str(info.value)
        assert "config_manager_impl.cpp" in str(info.value) and "8b4871a" in str(info.value)


def test_mindie_refuses_a_count_above_max_batch_size_in_its_own_words() -> None:
    # MindIE-LLM 8b4871a schedule_config.cpp:256-261 and 276-281 (its own spellings of maxBatchSize)
    cases = [({"maxPreemptCount": 300}, "The maxPreemptCount cannot be set greater than maxBatchsize, please set "
              "'maxPreemptCount' to be not greater than 'maxBatchsize' in config.json."),
             ({"maxN": 201}, "The maxN cannot be set greater than maxBatchSize, please set 'maxN' to be not greater "
              "than 'maxBatchSize' in config.json.")]
    for schedule, message in cases:
        with pytest.raises(RefusedError) as info:
            check_rules(mindie_schedule(schedule), {}, {}, rules=get_engine("mindie").startup_rules,
                        model=ModelFacts(), environ={})
        assert message in str(info.value)


def test_model_facts_read_the_models_config_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 40,
                                                      "max_position_embeddings": 40960}))
    assert model_facts(str(tmp_path)) == ModelFacts(40, 40960)
    assert model_facts(str(tmp_path / "nope")) == ModelFacts()
    assert model_facts("Qwen/Qwen3-8B") == ModelFacts()


SIM = """
engine = "vllm"
simulate = true
[simulator]
hardware = "h100-sxm"
model = "qwen3-8b"
[simulator.workload]
num_prompts = 8
input_len = 64
output_len = 16
[vllm.command]
model = "Qwen/Qwen3-8B"
others = "--max-model-len 4096"
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 8
max = 512
dtype = "int"
value = 64
[[vllm.target_field]]
name = "max_num_batched_tokens"
config_position = "--max-num-batched-tokens"
min = 16
max = 8192
dtype = "int"
value = 8192
"""


def run_one(tmp_path: Path, text: str, position: list[float]) -> EvaluationResult:
    path = tmp_path / "c.toml"
    path.write_text(text)
    ev = Evaluator(load_settings(path).config, run_dir=tmp_path / "run")
    return ev.evaluate(EvalRequest(1, "search", 0, 0, tuple(position)))


def test_simulated_refusal_costs_nothing_and_is_journaled(tmp_path: Path) -> None:
    res = run_one(tmp_path, SIM, [256, 64])
    assert res.refused and res.failed and res.attempts == 1
    assert "max_num_batched_tokens (64) must be greater than or equal to max_num_seqs (256)" in res.error
    line = res.to_json("r")
    assert line["refused"] is True and line["fitness"] is None
    back = EvaluationResult.from_json(json.loads(json.dumps(line)))
    assert back.refused and math.isinf(back.fitness)
    old = {k: v for k, v in line.items() if k != "refused"}  # a journal line from before the field
    assert EvaluationResult.from_json(old).refused is False
    ok = run_one(tmp_path, SIM, [64, 4096])
    assert not ok.refused and not ok.failed


def test_real_refusal_is_not_launched(tmp_path: Path) -> None:
    marker = tmp_path / "launched"
    text = SIM.replace("simulate = true", "simulate = false\nbenchmark = \"builtin\"").replace(
        '[vllm.command]', f'[vllm.command]\nexecutable = ["python3", "-c", "open({str(marker)!r}, \'w\')"]')
    res = run_one(tmp_path, text, [256, 64])
    assert res.refused and "must be greater than or equal to max_num_seqs" in res.error
    assert not marker.exists()
    assert get_engine("vllm").name == "vllm"


@pytest.mark.parametrize(("schedule", "expected", "message"), [
    # schedule_config.cpp:284-286: maxPrefillBatchSize in [1, maxBatchSize]
    ({"maxPrefillBatchSize": 201}, "mindie.schedule_value_ranges",
     "scheduleParam.maxPrefillBatchSize [201] is out of bound [200]"),
    ({"maxPrefillBatchSize": 200}, None, None),
    # issue 51 item 3: schedule_config.cpp:80-82 reads 0 as maxBatchSize (service_parameter_configuration.md:146,
    # "可以设置为0（此时引擎将默认取maxBatchSize值）"), so an installed 0 is accepted
    ({"maxPrefillBatchSize": 0}, None, None),
    ({"maxPrefillBatchSize": 0, "maxBatchSize": 900000, "maxPreemptCount": 0}, "mindie.schedule_value_ranges",
     "scheduleParam.maxBatchSize [900000] is out of bound [819200]"),
    # schedule_config.cpp:253-263: maxN in [1, 8192] and at most maxBatchSize
    ({"maxN": 201}, "mindie.max_n_vs_max_batch_size", "The maxN cannot be set greater than maxBatchSize"),
    ({"maxN": 200}, None, None),
    ({"maxN": 9000, "maxBatchSize": 10000}, "mindie.schedule_value_ranges", "scheduleParam.maxN [9000] is out of bound [8192]"),
    # the value ranges of CheckParam
    ({"cacheBlockSize": 256}, "mindie.schedule_value_ranges", "scheduleParam.cacheBlockSize [256] is out of bound [128]"),
    ({"maxQueueDelayMicroseconds": 100}, "mindie.schedule_value_ranges",
     "scheduleParam.maxQueueDelayMicroseconds [100] is less than [500]"),
    ({"maxBatchSize": 900000, "maxPreemptCount": 0}, "mindie.schedule_value_ranges",
     "scheduleParam.maxBatchSize [900000] is out of bound [819200]"),
    ({"maxNumPartialPrefills": 4, "maxLongPartialPrefills": 5}, "mindie.schedule_value_ranges",
     "scheduleParam.maxLongPartialPrefills [5] is out of bound [4]"),
    ({"decodePolicyType": 4}, "mindie.schedule_value_ranges",
     "scheduleParam.decodePolicyType [4] is outside the expected schedule policy range: 0, 1, 2, 3"),
    ({"policyType": 3}, "mindie.schedule_value_ranges", "scheduleParam.policyType [3] is outside the expected range"),
    ({"policyType": 5, "prefillExpectedTime": 1500, "decodeExpectedTime": 50}, None, None),
])
def test_mindie_schedule_ranges(schedule: dict, expected: str | None, message: str | None) -> None:
    spec = mindie_schedule(schedule)
    assert refusal(spec) == expected
    if message is not None:
        with pytest.raises(RefusedError) as info:
            check_rules(spec, {}, {}, rules=get_engine(spec.engine).startup_rules, model=ModelFacts(), environ={})
        assert message in str(info.value) and "8b4871a" in str(info.value)


def test_mindie_torch_backend_needs_master_port(tmp_path) -> None:
    from msopt.engines import get_engine
    from msopt.launch.render import TrialNode

    spec = mindie_schedule({})
    spec.files["config.json"]["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["backendType"] = "torch"
    assert refusal(spec) == "mindie.torch_backend_master_port"
    assert refusal(spec, env={"MASTER_PORT": "29500"}) is None
    # each trial gets its own MASTER_PORT: the rendezvous port of its lease
    conf = tmp_path / "config.json"
    doc = json.loads(shared(MINDIE_SHIPPED).read_text())
    doc["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["backendType"] = "torch"
    conf.write_text(json.dumps(doc))
    ports = []
    for i, devices in enumerate((tuple("0123"), tuple("4567"))):
        (one,) = get_engine("mindie").render_nodes(Candidate({}, [], {"config_path": str(conf)}), port=1025 + i,
                                                   nodes=(TrialNode(0, "127.0.0.1", devices),),
                                                   rendezvous_port=29600 + i, workdir=tmp_path / str(i))
        check_rules(one, {}, {}, rules=get_engine("mindie").startup_rules, model=ModelFacts(), environ={})
        ports.append(one.env["MASTER_PORT"])
    assert ports == ["29600", "29601"]
    atb = get_engine("mindie").render_nodes(Candidate({}, [], {}), port=1, nodes=(TrialNode(0, "127.0.0.1", ("0",)),),
                                            rendezvous_port=29600)
    assert "MASTER_PORT" not in atb[0].env  # the atb backend starts no torch.distributed


@pytest.mark.parametrize(("flags", "expected"), [
    (("--tp-size", "8", "--attn-dp-size", "8"), None),
    (("--tp-size", "8", "--dp-size", "2"), None),
    (("--tp-size", "8", "--dp-size", "2", "--attn-dp-size", "4"), "sglang.dp_size_with_attn_dp_size"),
    (("--tp-size", "8", "--data-parallel-size=2", "--attention-data-parallel-size", "2"),
     "sglang.dp_size_with_attn_dp_size"),
    (("--tp-size", "8", "--dp-size", "4", "--enable-dp-attention"), None),  # the deprecated spelling: attn dp 4
    (("--tp-size", "8", "--dp-size", "2", "--attn-dp-size", "4", "--enable-dp-attention"),
     "sglang.dp_size_with_attn_dp_size"),
])
def test_sglang_dp_size_with_attn_dp_size(flags: tuple[str, ...], expected: str | None) -> None:
    # sglang 0.5.23 sglang/srt/arg_groups/parallel_hook.py:287-292
    assert refusal(sglang(*flags)) == expected
    if expected:
        with pytest.raises(RefusedError, match="data-parallel replicas combined with attention data parallelism"):
            check_rules(sglang(*flags), {}, {}, rules=get_engine("sglang").startup_rules, model=ModelFacts(),
                        environ={})


def mindie_cp(world: int, tp: int, cp: int, dp: int = 1) -> LaunchSpec:
    spec = mindie(world, tp, dp=dp)
    spec.files["config.json"]["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["cp"] = cp
    return spec


def test_mindie_context_parallel_counts_in_the_world_size() -> None:
    """Issue 51 item 10: atb_llm/utils/mapping.py:379-388 (MindIE-LLM 8b4871a, Mapping.validate_pp) checks
    tp x cp x dp == world_size, cp from ModelConfig (mapping.py:315-317); mapping.py:354-358 refuses cp with dp."""
    assert refusal(mindie_cp(8, 4, 2)) is None
    assert refusal(mindie_cp(8, 8, 2)) == "mindie.world_size"
    assert refusal(mindie_cp(8, 2, 2, dp=2)) == "mindie.dp_and_pp"
    hit = broken_rule(RenderedCandidate(mindie_cp(8, 8, 2), {}, {}, ModelFacts(), {}), get_engine("mindie").startup_rules)
    assert hit is not None and "Attention's cp_size is 2." in hit[1]


def test_mindie_atb_pipeline_parallel_leases_its_master_port(tmp_path) -> None:
    """Issue 51 item 10: ATB with pp > 1 starts gloo over tcp://MASTER_IP:MASTER_PORT (atb_llm/utils/mapping.py:
    263-276, Mapping.update_pp), so two trials on one node need a MASTER_PORT each: the rendezvous port of their
    lease, and the node's own address as MASTER_IP."""
    from msopt.launch.render import TrialNode

    conf = tmp_path / "config.json"
    doc = json.loads(shared(MINDIE_SHIPPED).read_text())
    doc["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0].update({"tp": 2, "pp": 2})
    conf.write_text(json.dumps(doc))
    envs = []
    for i, devices in enumerate((tuple("0123"), tuple("4567"))):
        (one,) = get_engine("mindie").render_nodes(Candidate({}, [], {"config_path": str(conf)}), port=1025 + i,
                                                   nodes=(TrialNode(0, "127.0.0.1", devices),),
                                                   rendezvous_port=29600 + i, workdir=tmp_path / str(i))
        check_rules(one, {}, {}, rules=get_engine("mindie").startup_rules, model=ModelFacts(), environ={})
        envs.append((one.env["MASTER_IP"], one.env["MASTER_PORT"]))
    assert envs == [("127.0.0.1", "29600"), ("127.0.0.1", "29601")]


@pytest.mark.parametrize(("value", "expected"), [
    ("0.85", None), ("0", "sglang.mem_fraction_static_positive"), ("-1.75", "sglang.mem_fraction_static_positive")])
def test_sglang_mem_fraction_static_of_zero_or_less_is_refused_in_sglangs_words(value: str,
                                                                              expected: str | None) -> None:
    """Issue 51 item 13: sglang 0.5.23 srt/mem_cache/kv_cache_configurator.py:3043-3058 stops a fraction at or
    below 0 with "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=X"."""
    assert refusal(sglang("--tp-size", "8", "--mem-fraction-static", value)) == expected
    if expected:
        with pytest.raises(RefusedError, match="Loaded weights leave no GPU memory for the KV cache under "
                                               f"--mem-fraction-static={value}"):
            check_rules(sglang("--tp-size", "8", "--mem-fraction-static", value), {}, {},
                        rules=get_engine("sglang").startup_rules, model=ModelFacts(), environ={})
