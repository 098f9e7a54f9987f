from __future__ import annotations

from pathlib import Path

import pytest

from msopt.errors import ConfigError, SimulationError
from msopt.sim import list_hardware, list_models, load_hardware, load_model


def test_packaged_entries():
    assert {"atlas-800i-a2", "h100-sxm", "h200-sxm"} <= set(list_hardware())
    assert {"llama-3.1-8b", "llama-3.1-70b", "qwen3-8b", "qwen3-32b"} <= set(list_models())


@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-3.1-70b", "qwen3-8b", "qwen3-32b"])
def test_architecture_matches_published_parameter_count(name):
    m = load_model(name)
    assert m.total_params / 1e9 == pytest.approx(m.params_b, rel=0.01)


def test_kv_bytes_per_token_match_reference():
    ref = {"llama-3.1-8b": 131072, "qwen3-8b": 147456, "qwen3-32b": 262144, "llama-3.1-70b": 327680}
    for name, value in ref.items():
        assert load_model(name).kv_bytes_per_token("bf16") == value
        assert load_model(name).kv_bytes_per_token("fp8") == value / 2


def test_qwen3_query_projection_is_heads_times_head_dim():
    m = load_model("qwen3-32b")
    assert m.heads * m.head_dim == 8192 != m.hidden


def test_hardware_facts():
    hw = load_hardware("atlas-800i-a2")
    assert hw.devices_per_node == 8 and hw.memory_kind == "NPU"
    with pytest.raises(SimulationError, match="fp8"):
        hw.peak_flops("fp8")
    assert load_hardware("h200-sxm").hbm_gib > load_hardware("h100-sxm").hbm_gib


def test_unknown_name_lists_valid_names():
    with pytest.raises(ConfigError, match="h100-sxm") as exc:
        load_hardware("h100-sx")
    assert "did you mean 'h100-sxm'" in str(exc.value)
    with pytest.raises(ConfigError, match="qwen3-8b"):
        load_model("qwen4")


def test_user_file_and_extra_dir(tmp_path: Path):
    text = (Path(__file__).resolve().parents[2] / "msopt/sim/catalog/hardware/h100-sxm.toml").read_text()
    own = tmp_path / "my-gpu.toml"
    own.write_text(text.replace('name = "h100-sxm"', 'name = "my-gpu"').replace("hbm_gib = 79.1", "hbm_gib = 40"))
    assert load_hardware(own).hbm_gib == 40
    assert load_hardware(str(own)).name == "my-gpu"
    assert load_hardware("my-gpu", extra_dirs=[tmp_path]).hbm_gib == 40
    assert "my-gpu" in list_hardware([tmp_path])
    with pytest.raises(ConfigError, match="does not exist"):
        load_hardware(tmp_path / "missing.toml")


def test_invalid_user_file(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\nlayers = 2\n')
    with pytest.raises(ConfigError, match="missing key"):
        load_model(bad)
    bad.write_text("name = [")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_model(bad)


@pytest.mark.parametrize("device, entry", [
    ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"), ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("Atlas 800I A3", "atlas-800i-a3"), ("Ascend910_9392", "atlas-800i-a3"), ("910B3", "atlas-800i-a2"),
    ("Atlas 800T A2, 4 NPUs (1 node)", "atlas-800i-a2"), ("NVIDIA H100 80GB HBM3", "h100-sxm"),
])
def test_hardware_accepts_a_device_name(device: str, entry: str):
    assert load_hardware(device).name == entry


def test_a_pcie_card_or_an_unknown_part_is_not_a_catalog_entry():
    for device in ("NVIDIA A100-PCIE-40GB", "AMD Instinct MI325X"):
        with pytest.raises(ConfigError, match="nvidia-smi"):
            load_hardware(device)


def test_model_accepts_a_hugging_face_id_of_the_same_architecture():
    assert load_model("deepseek-ai/DeepSeek-R1").name == "deepseek-v3"
    assert load_model("meta-llama/Llama-3.3-70B-Instruct").name == "llama-3.1-70b"
    assert load_model("moonshotai/Kimi-K2-Instruct").name == "kimi-k2"
    assert load_model("qwen/qwen3-coder-480b-a35b-instruct").name == "qwen3-coder-480b-a35b"


def test_new_entries_match_their_model_cards_and_datasheets():
    kimi, coder = load_model("kimi-k2"), load_model("qwen3-coder-480b-a35b")
    assert kimi.is_mla and kimi.total_params == pytest.approx(1026e9, rel=0.01)  # "1T total"
    assert coder.total_params == pytest.approx(480e9, rel=0.01)
    assert coder.layers * coder.active_layer_params + coder.embed_params == pytest.approx(35e9, rel=0.03)
    a3, a2 = load_hardware("atlas-800i-a3"), load_hardware("atlas-800i-a2")
    assert a3.devices_per_node == 16 and a3.hbm_gib == a2.hbm_gib == 64.0
    a40, a80 = load_hardware("a100-sxm-40gb"), load_hardware("a100-sxm-80gb")
    assert a40.tflops["bf16"] == a80.tflops["bf16"] == 312.0 and (a40.hbm_tb_s, a80.hbm_tb_s) == (1.555, 2.039)
    assert a40.efficiency_from == "h100-sxm" and load_hardware("h100-sxm").efficiency_from == ""


def test_w4a8_weights_take_half_a_byte_and_compute_at_int8():
    a3 = load_hardware("atlas-800i-a3")
    assert a3.peak_flops("int4") == a3.peak_flops("int8")
    with pytest.raises(SimulationError, match="fp8"):
        a3.peak_flops("fp8")
