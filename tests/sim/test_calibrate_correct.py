"""msopt.sim.correct.correct_hardware on trace replays (issue 52 item 9): the CPU entry corrected to replays
measured on a faster host, with TPOT unpublished, as scripts/research/cpu_replay_runs.py's rows are."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from msopt.errors import ConfigError
from msopt.launch.render import LaunchSpec
from msopt.sim import load_hardware
from msopt.sim.calibrate import Measurement, simulate_measurements
from msopt.sim.correct import correct_hardware, scale_hardware
from msopt.sim.personality import knobs_from_launch


def replays(tmp_path: Path, rates: tuple[float, ...]) -> list[Measurement]:
    """One Mooncake-format replay per time scale, prefix caching on, the CPU build's 128-token blocks."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(f'{{"timestamp": {i * 150}, "input_length": {300 + 40 * (i % 5)}, '
                             f'"output_length": {20 + 7 * (i % 4)}, "hash_ids": [{i % 3}, {i}]}}\n'
                             for i in range(48)), encoding="utf-8")
    spec = LaunchSpec(engine="vllm", argv=("vllm", "serve", "m", "--max-model-len", "1024", "--block-size", "128"),
                      port=0, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    knobs = knobs_from_launch(spec, "vllm")
    return [Measurement(knobs=knobs, model="llama-tiny-2l-128", input_len=0, output_len=0, concurrency=0,
                        ttft_s=math.nan, tpot_s=math.nan, tokens_per_s=math.nan, num_prompts=48,
                        workload={"num_prompts": 48, "trace": {"path": str(trace), "time_scale": rate}},
                        source=f"x{rate}") for rate in rates]


def test_replays_on_a_faster_host_are_corrected_and_judged_on_the_ones_left_out(tmp_path: Path) -> None:
    entry = load_hardware("cpu-x86")
    host = scale_hardware(entry, frontend=0.25, engine=0.6)
    rows = replays(tmp_path, (1.0, 2.0, 4.0, 8.0))
    sim = simulate_measurements(rows, host)
    measured = [dataclasses.replace(m, ttft_s=s[0], tokens_per_s=s[2]) for m, s in zip(rows, sim)]  # no TPOT
    found = correct_hardware(measured, entry)
    assert found.judged == "leave-one-out" and found.better
    assert math.isnan(found.before["tpot"]) and "TPOT error n/a → n/a" in found.errors()
    assert found.before["ttft"] > 1.0 and found.after["ttft"] < 0.1 and found.after["tokens_per_s"] < 0.05
    assert 0.15 < found.scales["frontend"] < 0.35 and found.scales["engine"] < 1.0  # the host: 0.25 and 0.6
    # the corrected entry predicts a replay it never saw (16 x the trace's rate)
    held = replays(tmp_path, (16.0,))
    truth = simulate_measurements(held, host)[0]
    before, after = simulate_measurements(held, entry)[0], simulate_measurements(held, found.hardware)[0]
    assert abs(after[2] / truth[2] - 1) < 0.5 * abs(before[2] / truth[2] - 1)
    with pytest.raises(ConfigError, match="no measurements"):
        correct_hardware([], entry)


def test_a_scale_moves_its_factors_and_the_engines_own() -> None:
    """cpu-x86's vLLM overrides (its per-token frontend cost, 2312.5 us) scale with the entry's own; an
    efficiency is divided, at most 1; a scale of no group is a bug of the caller's."""
    entry = load_hardware("cpu-x86")
    half = scale_hardware(entry, frontend=0.5, engine=0.25)
    vllm, base = half.for_engine("vllm"), entry.for_engine("vllm")
    assert vllm.frontend_us_per_output_token == pytest.approx(base.frontend_us_per_output_token * 0.5)
    assert vllm.frontend_ms_per_req == pytest.approx(base.frontend_ms_per_req * 0.5)
    assert vllm.step_overhead_ms == pytest.approx(base.step_overhead_ms * 0.25)
    assert half.compute_eff == 1.0 and half.memory_eff == 1.0  # 0.275 / 0.25 and 0.49 / 0.25, at most 1
    assert half.hbm_tb_s == entry.hbm_tb_s and half.tflops == entry.tflops  # the datasheet stays
    assert scale_hardware(entry) == entry
    with pytest.raises(ValueError, match="no correction scale"):
        scale_hardware(entry, speed=2.0)
