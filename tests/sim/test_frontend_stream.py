"""The streaming frontend: ``frontend_us_per_output_token``, one serial resource shared by every stream."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from msopt.errors import ConfigError
from msopt.sim import EngineKnobs, load_hardware, simulate
from msopt.sim.catalog_load import hardware_toml

LOAD = {"input_len": 128, "output_len": 32, "num_prompts": 64, "concurrency": 16}


def _metrics(hw, knobs: EngineKnobs, load: dict = LOAD) -> tuple[float, float, float]:
    r = simulate(knobs, hw, "llama-3.1-8b", load)
    assert r.error is None and r.success_rate == 1.0
    return r.time_to_first_token, r.time_per_output_token, r.generate_speed


def test_zero_is_the_model_without_it():
    hw = load_hardware("h100-sxm")
    assert hw.frontend_us_per_output_token == 0.0
    assert _metrics(dataclasses.replace(hw, frontend_us_per_output_token=0.0), EngineKnobs()) == \
        _metrics(hw, EngineKnobs())


def test_the_frontend_caps_the_delivered_token_rate():
    """2 ms per token: at most 500 tokens/s whatever the engine does, and no faster with more streams."""
    hw = dataclasses.replace(load_hardware("h100-sxm"), frontend_us_per_output_token=2000.0)
    _, _, free = _metrics(load_hardware("h100-sxm"), EngineKnobs())
    _, _, capped = _metrics(hw, EngineKnobs())
    assert free > 1000.0
    assert 400.0 < capped <= 500.0


def test_tpot_grows_with_the_concurrent_streams():
    """Frontend-bound, each stream gets a token every streams x cost: 8 sequences 16 ms, 16 sequences 32 ms."""
    hw = dataclasses.replace(load_hardware("h100-sxm"), frontend_us_per_output_token=2000.0)
    _, tpot8, _ = _metrics(hw, EngineKnobs(max_num_seqs=8))
    _, tpot16, _ = _metrics(hw, EngineKnobs(max_num_seqs=16))
    _, engine16, _ = _metrics(load_hardware("h100-sxm"), EngineKnobs(max_num_seqs=16))
    assert engine16 < 0.012  # the engine alone is faster than the frontend here
    assert tpot8 == pytest.approx(0.016, rel=0.02) and tpot16 == pytest.approx(0.032, rel=0.02)


def test_it_is_an_engine_key_and_round_trips(tmp_path: Path):
    hw = load_hardware("cpu-x86")
    over = {"vllm": {**hw.engine_overrides.get("vllm", {}), "frontend_us_per_output_token": 123.0}}
    path = tmp_path / "mine.toml"
    path.write_text(hardware_toml(dataclasses.replace(hw, engine_overrides=over)))
    back = load_hardware(path)
    assert back.for_engine("vllm").frontend_us_per_output_token == 123.0
    bad = tmp_path / "bad.toml"
    bad.write_text(path.read_text().replace("frontend_us_per_output_token = 123.0", "frontend_us_per_output_tokn = 1.0"))
    with pytest.raises(ConfigError, match="frontend_us_per_output_tokn"):
        load_hardware(bad)
