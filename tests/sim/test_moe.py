"""MoE models in the simulator: catalog entries, the engines' expert flags, expert cost and layout rules."""

from __future__ import annotations

import pytest

from msopt.errors import SimulationError
from msopt.launch.render import LaunchSpec
from msopt.sim import EngineKnobs, knobs_from_launch
from msopt.sim.catalog_load import load_model
from msopt.sim.moe import MoeLayout, layout_of, layout_problem
from msopt.sim.simulator import simulate

WL = {"input_len": 512, "output_len": 128, "num_prompts": 96, "concurrency": 32}


@pytest.mark.parametrize(("name", "total", "active"), [
    ("deepseek-v3", 671.0, 37.0), ("qwen3-30b-a3b", 30.5, 3.3), ("qwen3-235b-a22b", 235.0, 22.0)])
def test_catalog_parameter_counts_match_the_model_cards(name, total, active):
    m = load_model(name)
    assert m.is_moe
    assert m.total_params / 1e9 == pytest.approx(total, rel=0.02)
    assert (m.active_layer_params * m.layers + m.embed_params) / 1e9 == pytest.approx(active, rel=0.04)


def test_mla_caches_one_latent_per_layer_not_split_by_tp():
    m = load_model("deepseek-v3")
    assert m.is_mla
    assert m.kv_bytes_per_token("bf16") == 61 * (512 + 64) * 2
    assert m.kv_elems_per_token_layer(1) == m.kv_elems_per_token_layer(8) == 576
    dense = load_model("qwen3-32b")
    assert dense.kv_elems_per_token_layer(8) == 2 * 128 and dense.kv_elems_per_token_layer(1) == 2 * 8 * 128


def launch(engine: str, *args: str, files: dict | None = None) -> EngineKnobs:
    return knobs_from_launch(LaunchSpec(engine, ("x", *args), files=files or {}))


def test_engine_expert_flags_give_the_engines_layouts():
    ds = load_model("deepseek-v3")
    k = launch("vllm", "--tensor-parallel-size", "2", "--data-parallel-size", "4", "--enable-expert-parallel")
    assert layout_of(k, ds) == MoeLayout(group=4, tp=2, ep=8, moe_tp=1)
    k = launch("vllm", "--tensor-parallel-size", "8", "--no-enable-expert-parallel")
    assert layout_of(k, ds) == MoeLayout(group=1, tp=8, ep=1, moe_tp=8)
    k = launch("sglang", "--tp-size", "16", "--dp-size", "8", "--enable-dp-attention", "--ep-size", "16",
               "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:5000")
    assert (k.tp, k.dp, k.nnodes) == (2, 8, 2)
    assert layout_of(k, ds) == MoeLayout(group=8, tp=2, ep=16, moe_tp=1)
    assert "--node-rank" not in k.ignored and "--dist-init-addr" not in k.ignored
    cfg = {"BackendConfig": {"multiNodesInferEnabled": True, "npuDeviceIds": [list(range(8))],
                             "ModelDeployConfig": {"ModelConfig": [{"tp": 8, "dp": 4, "moe_ep": 8, "moe_tp": 4}]}}}
    k = launch("mindie", files={"config.json": cfg})
    assert (k.nnodes, k.dp_attention) == (4, True)
    assert layout_of(k, ds) == MoeLayout(group=4, tp=8, ep=8, moe_tp=4)
    with pytest.raises(SimulationError, match="not divisible by --dp-size"):
        launch("sglang", "--tp-size", "8", "--dp-size", "3", "--enable-dp-attention")


def test_layout_rules_as_the_engines_state_them():
    ds = load_model("deepseek-v3")
    assert layout_problem(ds, MoeLayout(4, 8, 8, 4)) is None
    assert "must equal the world size" in layout_problem(ds, MoeLayout(4, 8, 8, 2))
    q3 = load_model("qwen3-30b-a3b")
    assert "is not divisible" in layout_problem(q3, MoeLayout(5, 1, 1, 5))
    assert "exceeds the 128 routed experts" in layout_problem(q3, MoeLayout(32, 8, 256, 1))
    r = simulate(EngineKnobs(engine="mindie", tp=8, dp=2, ep=4, moe_tp=2, dp_attention=True, nnodes=2),
                 "atlas-800i-a2", ds, WL, weight_dtype="int8")
    assert r.error and "moe_ep (4) x moe_tp (2) must equal" in r.error


def test_dp_attention_multiplies_the_mla_kv_cache():
    """Same 16 devices: TP 16 attention caches the whole MLA latent on every device once; two DP
    attention ranks of TP 8 with EP 16 each hold their own cache, about twice the tokens in all."""
    tp16 = simulate(EngineKnobs(engine="sglang", tp=16, nnodes=2), "h200-sxm", "deepseek-v3", WL, weight_dtype="fp8")
    ep16 = simulate(EngineKnobs(engine="vllm", tp=8, dp=2, expert_parallel=True, nnodes=2), "h200-sxm",
                    "deepseek-v3", WL, weight_dtype="fp8")
    assert not tp16.error and not ep16.error
    assert 2 * ep16.kv_cache_tokens > 1.5 * tp16.kv_cache_tokens


def test_one_node_cannot_hold_deepseek_v3_in_bf16_but_spanning_nodes_can():
    one = simulate(EngineKnobs(engine="vllm", tp=8), "h200-sxm", "deepseek-v3", WL, weight_dtype="bf16")
    assert one.error and "out of memory" in one.error
    two = simulate(EngineKnobs(engine="vllm", tp=8, dp=2, expert_parallel=True, nnodes=2), "h200-sxm",
                   "deepseek-v3", WL, weight_dtype="bf16")
    assert not two.error, two.error


def test_tp_beyond_a_node_needs_a_multi_node_instance():
    r = simulate(EngineKnobs(engine="sglang", tp=16), "h200-sxm", "deepseek-v3", WL, weight_dtype="fp8")
    assert r.error and "--nnodes" in r.error


def test_decode_reads_fewer_expert_weights_with_a_small_batch():
    """A batch of one touches 8 of 256 experts per layer: decode is far faster than reading all
    expert weights; a large batch touches nearly all of them."""
    from msopt.sim.catalog_load import load_hardware
    from msopt.sim.moe import MoeCost

    hw = load_hardware("h200-sxm")
    cost = MoeCost(hw, load_model("deepseek-v3"), MoeLayout(1, 8, 8, 1), 1, "fp8")
    assert cost.time(1) < 0.2 * cost.time(512)
    assert cost.time(4096) >= cost.w_all


def test_moe_models_serve_on_one_node_with_each_engine():
    for knobs in (EngineKnobs(engine="vllm", tp=2, dp=2, expert_parallel=True),
                  EngineKnobs(engine="sglang", tp=4, dp=2, dp_attention=True, ep=4),
                  EngineKnobs(engine="vllm", tp=4)):
        r = simulate(knobs, "h100-sxm", "qwen3-30b-a3b", WL)
        assert not r.error, (knobs, r.error)
        assert r.throughput > 0


def test_deepseek_config_searches_layouts_whose_relations_hold():
    """configs/deepseek_v3_atlas_multinode.toml: tp x dp = 16 and moe_ep x moe_tp = 16 for every
    decoded position (factories relations), and the simulator reads them as one MoE layout."""
    from pathlib import Path

    import numpy as np

    from msopt.config import load_settings
    from msopt.space import SearchSpace

    repo = Path(__file__).resolve().parents[2]
    settings = load_settings(str(repo / "configs" / "deepseek_v3_atlas_multinode.toml"), environ={})
    space = SearchSpace.from_settings(settings)
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(40):
        lo, hi = space.bounds
        values = space.decode(lo + rng.random(len(lo)) * (hi - lo)).values
        assert values["tp"] * values["dp"] == 16 and values["moe_ep"] * values["moe_tp"] == 16
        seen.add((values["tp"], values["moe_ep"]))
    assert len(seen) > 4


def test_sglang_attn_dp_size_is_read_as_the_deprecated_dp_attention_spelling():
    # sglang 0.5.23 parallel_hook.py: --dp-size N --enable-dp-attention resolves to --attn-dp-size N
    new = launch("sglang", "--tp-size", "16", "--attn-dp-size", "8", "--ep-size", "16")
    old = launch("sglang", "--tp-size", "16", "--dp-size", "8", "--enable-dp-attention", "--ep-size", "16")
    assert (new.tp, new.dp, new.dp_attention) == (old.tp, old.dp, old.dp_attention) == (2, 8, True)
    with pytest.raises(SimulationError, match="not modelled"):
        launch("sglang", "--tp-size", "8", "--attn-dp-size", "2", "--dp-size", "2")
