"""Issue 51 item 13: Qwen3-Next-80B-A3B in the catalog, its hybrid attention modelled: 12 of its 48 layers are
full attention with a KV cache, the other 36 Gated DeltaNet layers hold a state of fixed size per request
(sglang 0.5.23 srt/configs/qwen3_next.py ``layers_block_type``, ``mamba2_cache_params``; srt/configs/mamba_utils.py
``mamba2_state_dtype``: conv bfloat16, ssm float32), kept in a pool of its own before the KV cache
(srt/mem_cache/kv_cache_configurator.py:3323-3385, ``_handle_max_mamba_cache``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from msopt.launch.render import LaunchSpec
from msopt.sim.catalog_load import load_model, match_catalog
from msopt.sim.hf_config import architecture, model_from_config
from msopt.sim.knobs import EngineKnobs
from msopt.sim.perf import StepCost, plan_memory
from msopt.sim.simulator import simulate_launch

#: Qwen/Qwen3-Next-80B-A3B-Instruct's config.json (the keys the simulator reads)
CONFIG = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "decoder_sparse_step": 1,
          "full_attention_interval": 4, "head_dim": 256, "hidden_size": 2048, "intermediate_size": 5120,
          "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
          "linear_num_value_heads": 32, "linear_value_head_dim": 128, "max_position_embeddings": 262144,
          "mlp_only_layers": [], "moe_intermediate_size": 512, "num_attention_heads": 16, "num_experts": 512,
          "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2,
          "shared_expert_intermediate_size": 512, "tie_word_embeddings": False, "vocab_size": 151936,
          "torch_dtype": "bfloat16"}


def test_the_catalog_entry_is_the_models_config_json(tmp_path: Path) -> None:
    model = load_model("qwen3-next-80b-a3b")
    assert model.is_hybrid and model.kv_layers == 12 and model.linear_layers == 36
    assert model.total_params / 1e9 == pytest.approx(80.0, rel=0.01)  # the model card's 80B
    # KV: 2 x 12 layers x 2 KV heads x 256 x 2 bytes per token; a dense reading would have 48 layers
    assert model.kv_bytes_per_token() == 2 * 12 * 2 * 256 * 2
    # state per request and linear layer: conv (2x16x128 + 32x128) x 3 x 2 B + ssm 32 x 128 x 128 x 4 B
    assert model.state_bytes_per_seq(1) == 36 * (8192 * 3 * 2 + 32 * 128 * 128 * 4)
    assert model.state_bytes_per_seq(4) == pytest.approx(model.state_bytes_per_seq(1) / 4)
    path = tmp_path / "Qwen3-Next-80B-A3B-Instruct" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(CONFIG))
    spec, dtype, _ = model_from_config(path)
    assert dtype == "bf16" and spec.is_hybrid and spec.attn_output_gate
    assert architecture(spec) == architecture(model)
    assert match_catalog(spec) == "qwen3-next-80b-a3b"


def test_hybrid_attention_shrinks_kv_and_the_decode_cost_per_context_token() -> None:
    """Against the same weights read as full attention in every layer: 4 x the KV tokens, 1/4 of the attention
    read per context token, and each running request pays its state's read and write once per step."""
    hybrid = load_model("qwen3-next-80b-a3b")
    dense = replace(hybrid, full_attention_interval=0)
    from msopt.sim.catalog_load import load_hardware

    hw = load_hardware("atlas-800i-a3")
    knobs = EngineKnobs(engine="sglang", tp=4, max_num_seqs=80, max_num_batched_tokens=8192, memory_fraction=0.8,
                        block_size=128, prefix_caching=False)
    mh, md = (plan_memory(hw, m, knobs, "int8", "bf16") for m in (hybrid, dense))
    assert mh.state_slots == 80 and mh.state_gib == pytest.approx(80 * hybrid.state_bytes_per_seq(4) / 2**30)
    assert mh.kv_tokens > 3.5 * md.kv_tokens
    ch, cd = (StepCost(hw, m, knobs, "int8", "bf16") for m in (hybrid, dense))
    assert ch.kv_read_time == pytest.approx(cd.kv_read_time / 4)
    assert ch.state_time > 0 and cd.state_time == 0


def test_the_sglang_ascend_recipe_of_qwen3_next_simulates() -> None:
    """../shared/measured/sglang_ascend_best_practice.csv "Qwen3-Next HT50ms": tp 4 on A3, 80 running requests,
    chunked prefill off, radix cache off: one state slot per running request (the radix cache off with
    --max-running-requests: kv_cache_configurator.py:3323-3345)."""
    argv = ("python", "-m", "sglang.launch_server", "--tp-size", "4", "--max-running-requests", "80",
            "--max-prefill-tokens", "28672", "--chunked-prefill-size", "-1", "--disable-radix-cache",
            "--mem-fraction-static", "0.8")
    table = {"hardware": "atlas-800i-a3", "model": "qwen3-next-80b-a3b", "weight_dtype": "int8",
             "workload": {"input_len": 3584, "output_len": 1536, "num_prompts": 160, "concurrency": 80}}
    res = simulate_launch(LaunchSpec("sglang", argv), table)
    assert res.error is None and res.generate_speed > 0
    assert any("12 of 48 layers keep a KV cache" in line and "for 80 requests" in line for line in res.log_lines)
