"""vllm-ascend's MTP settings as a searched field: vllm-ascend takes speculative decoding through vLLM's own
``--speculative-config`` (``"method": "deepseek_mtp"``/``"mtp"``, ``num_speculative_tokens``), so the
``speculative_config.num_speculative_tokens`` field works on ``[vllm] platform = "ascend"``, with the limits
vllm-ascend adds at start-up.

Sources (vllm-project/vllm-ascend; tag v0.23.0 at 5cb98caa, v0.25.1rc1 at 9bf964cb, releases/v0.26.0rc at
cf0baa38, main at 182b75ea): vllm_ascend/attention/*_v1.py (``assert self.decode_threshold <= 16``: at most 15
draft tokens), vllm_ascend/ascend_config.py (``XliteGraphConfig``: xlite graph mode takes 1 draft token only),
vllm_ascend/platform.py:430-447 at v0.23.0 (``_validate_pd_pp_mtp_config``: MTP with pipeline parallelism only on
a prefill node), vllm_ascend/patch/platform/patch_speculative_config.py (the MTP draft from the target's
``num_nextn_predict_layers``, as vLLM does).
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
from msopt.evaluate import Evaluator
from msopt.evaluate.results import EvalRequest
from msopt.launch.render import Candidate
from msopt.space.fields import parse_field

ASCEND = {"platform": "ascend", "command": {"model": "/m"}}
TOKENS = parse_field({"name": "mtp_tokens", "config_position": "speculative_config.num_speculative_tokens",
                      "dtype": "int", "min": 1, "max": 15}, source="t.toml", section="vllm", index=0)


def refusal(section: dict[str, Any], *flags: str) -> tuple[str, str] | None:
    spec = LaunchSpec("vllm", ("vllm", "serve", "/m", "--port", "1", *flags))
    hit = broken_rule(RenderedCandidate(spec, {}, section, ModelFacts(model_type="deepseek_v3", mtp_layers=1), {}),
                      get_engine("vllm").startup_rules)
    return None if hit is None else (hit[0].id, hit[1])


def sc(n: int, method: str = "deepseek_mtp") -> tuple[str, str]:
    return "--speculative-config", json.dumps({"method": method, "num_speculative_tokens": n})


def test_the_mtp_field_renders_beside_the_additional_config_on_ascend() -> None:
    section = {**ASCEND, "speculative_config": {"method": "deepseek_mtp"},
               "additional_config": {"enable_shared_expert_dp": True}}
    vllm = get_engine("vllm")
    vllm.check([TOKENS], section)  # deepseek_mtp is in vLLM 0.23.0's SpeculativeMethod (vllm-ascend 0.23.0.post1's)
    argv = list(vllm.render(Candidate({"mtp_tokens": 2}, [TOKENS], section), port=1, devices=["0"]).argv)
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {"method": "deepseek_mtp",
                                                                       "num_speculative_tokens": 2}
    assert json.loads(argv[argv.index("--additional-config") + 1]) == {"enable_shared_expert_dp": True}
    k = knobs_vllm(argv[2:])
    assert (k.spec_method, k.spec_tokens) == ("mtp", 2)


PAD = " " * 16


@pytest.mark.parametrize(("section", "flags", "expected"), [
    (ASCEND, sc(15), None),
    (ASCEND, sc(16), ("vllm.ascend_spec_tokens_max_15", "AssertionError: decode_threshold exceeded "
                      f"{PAD}npu_fused_infer_attention_score TND layout's limit of 16, {PAD}got 17")),
    (ASCEND, sc(16, "ngram"), "vllm.ascend_spec_tokens_max_15"),  # every attention builder holds the assert
    ({**ASCEND, "version": "0.27.1"}, sc(20), "vllm.ascend_spec_tokens_max_15"),
    ({"command": {"model": "/m"}}, sc(16), None),                  # not ascend: vLLM has no such limit
    (ASCEND, (*sc(2), "--additional-config", '{"xlite_graph_config": {"enabled": true}}'),
     ("vllm.ascend_xlite_spec_one_token",
      "RuntimeError: Xlite graph mode only support speculative decoding with num_speculative_tokens=1.")),
    (ASCEND, (*sc(1), "--additional-config", '{"xlite_graph_config": {"enabled": true}}'), None),
    (ASCEND, (*sc(2), "--additional-config", '{"xlite_graph_config": {"enabled": false}}'), None),
    (ASCEND, (*sc(1), "--pipeline-parallel-size", "2"),
     ("vllm.ascend_pp_mtp_prefill_only", "ValueError: PP+MTP is only supported on PD-disaggregated P nodes "
      "(kv_role='kv_producer'). D nodes must use pipeline_parallel_size=1 and may combine data parallelism with MTP.")),
    (ASCEND, (*sc(1), "-pp", "2", "--kv-transfer-config", '{"kv_connector": "x", "kv_role": "kv_producer"}'), None),
    (ASCEND, (*sc(1), "-pp", "2", "--kv-transfer-config", '{"kv_role": "kv_consumer"}'),
     "vllm.ascend_pp_mtp_prefill_only"),
    ({**ASCEND, "version": "0.25.1"}, (*sc(1), "-pp", "2"), None),  # gone from v0.25.1rc1 on (patch_pp_mtp.py)
    (ASCEND, (*sc(1, "eagle3"), "-pp", "2"), "vllm.speculative_method_needs_model"),  # vLLM's, before; not MTP
])
def test_vllm_ascends_own_limits(section: dict[str, Any], flags: tuple[str, ...],
                                 expected: str | tuple[str, str] | None) -> None:
    hit = refusal(section, *flags)
    assert (hit if isinstance(expected, tuple) or hit is None else hit[0]) == expected


SIM = """
engine = "vllm"
simulate = true
[simulator]
hardware = "atlas-800i-a3"
model = "deepseek-v3"
weight_dtype = "int8"
[simulator.workload]
num_prompts = 16
input_len = 256
output_len = 64
concurrency = 8
[vllm]
platform = "ascend"
[vllm.command]
model = "/data/DeepSeek-V3-w8a8"
others = "--tensor-parallel-size 16 --enable-expert-parallel --max-model-len 4096"
[vllm.speculative_config]
method = "deepseek_mtp"
[[vllm.target_field]]
name = "mtp_tokens"
config_position = "speculative_config.num_speculative_tokens"
min = 1
max = 16
dtype = "int"
value = 1
"""


def test_a_simulated_ascend_mtp_search(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(SIM)
    ev = Evaluator(load_settings(path).config, run_dir=tmp_path / "run")
    one, three, sixteen = (ev.evaluate(EvalRequest(i, "search", 0, i, (n,))) for i, n in enumerate((1, 3, 16)))
    assert not one.failed and not three.failed
    assert one.metrics["time_per_output_token"] != three.metrics["time_per_output_token"]
    assert sixteen.refused and "TND layout's limit of 16" in (sixteen.error or "")
