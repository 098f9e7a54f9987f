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
