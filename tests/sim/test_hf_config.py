"""A model spec from a Hugging Face config.json; catalog entries matched by architecture.

The config.json figures are those the catalog entries quote from each model's Hugging Face
repository (the comments of msopt/sim/catalog/models/*.toml); Llama-3.1-70B's are its repository's
config.json (meta-llama/Llama-3.1-70B, the same for -Instruct).
"""

from __future__ import annotations

import json

import pytest

from msopt.errors import ConfigError
from msopt.sim.catalog_load import load_model, read_config_model
from msopt.sim.hf_config import model_from_config, weight_dtype_of

LLAMA_70B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
             "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
             "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
             "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
QWEN3_30B_A3B = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
                 "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
                 "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_attention_heads": 32,
                 "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936, "decoder_sparse_step": 1,
                 "mlp_only_layers": [], "max_position_embeddings": 40960, "tie_word_embeddings": False,
                 "torch_dtype": "bfloat16"}
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
               "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
               "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
               "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
               "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
               "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840, "n_group": 8,
               "topk_group": 4, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
               "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}}


def _dir(tmp_path, name, doc):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(doc))
    return d


@pytest.mark.parametrize("doc, entry, dtype", [(LLAMA_70B, "llama-3.1-70b", "bf16"),
                                                (QWEN3_30B_A3B, "qwen3-30b-a3b", "bf16"),
                                                (DEEPSEEK_V3, "deepseek-v3", "fp8")])
def test_a_catalog_model_directory_is_its_catalog_entry(tmp_path, doc, entry, dtype):
    found = read_config_model(_dir(tmp_path, "m", doc))
    assert found.catalog == entry and found.spec == load_model(entry) and found.weight_dtype == dtype
    # the spec read from config.json alone already has the entry's architecture
    spec, _, _ = model_from_config(tmp_path / "m" / "config.json")
    cat = load_model(entry)
    for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "experts",
                "experts_per_token", "moe_ffn", "shared_experts", "dense_layers", "topk_group", "kv_lora_rank",
                "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "attention", "max_position"):
        assert getattr(spec, key) == getattr(cat, key), key
    assert spec.total_params == cat.total_params


def test_any_other_model_is_simulated_from_its_config(tmp_path):
    mixtral = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_local_experts": 8,
               "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
               "torch_dtype": "bfloat16"}
    found = read_config_model(_dir(tmp_path, "mixtral", mixtral))
    s = found.spec
    assert found.catalog == "" and s.experts == 8 and s.moe_ffn == 14336 and s.head_dim == 128
    assert s.total_params / 1e9 == pytest.approx(46.7, abs=0.5)  # Mixtral-8x7B: 46.7B parameters
    assert "32 layers" in found.summary() and "8 experts top-2" in found.summary()
    assert load_model(str(tmp_path / "mixtral")) == s  # a model directory is a [simulator] model
    vlm = {"model_type": "x_vl", "text_config": dict(LLAMA_70B), "vision_config": {"hidden_size": 1}}
    assert read_config_model(_dir(tmp_path, "vlm", vlm)).catalog == "llama-3.1-70b"


def test_weight_dtypes_from_quantization_config():
    assert weight_dtype_of({"torch_dtype": "float16"}) == ("fp16", ())
    ct = {"quant_method": "compressed-tensors",
          "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}}
    assert weight_dtype_of({"quantization_config": ct})[0] == "fp8"
    ct["config_groups"]["g"]["weights"]["type"] = "int"
    assert weight_dtype_of({"quantization_config": ct})[0] == "int8"
    dtype, notes = weight_dtype_of({"quantization_config": {"quant_method": "awq", "bits": 4}})
    assert dtype == "int8" and "not modelled" in notes[0]


def test_a_config_without_an_architecture_key_is_named(tmp_path):
    d = _dir(tmp_path, "bad", {"hidden_size": 64})
    with pytest.raises(ConfigError, match=r"config.json: missing num_hidden_layers"):
        read_config_model(d)
    with pytest.raises(ConfigError, match="no config.json"):
        read_config_model(tmp_path)
