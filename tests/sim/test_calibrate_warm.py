"""fit_hardware's warm start and evaluation cap (the in-run refit's cheap calls); its defaults are
what ``msopt calibrate`` has always run."""

from __future__ import annotations

import dataclasses

from msopt.sim import EngineKnobs, load_hardware
from msopt.sim.calibrate import Measurement, fit_hardware, simulate_measurements


def _rows() -> list[Measurement]:
    truth = dataclasses.replace(load_hardware("h100-sxm"), step_overhead_ms=9.0)
    rows = [Measurement(knobs=EngineKnobs(engine="vllm", tp=tp), model="qwen3-32b", input_len=1024, output_len=64,
                        concurrency=8, ttft_s=1.0, tpot_s=1.0, tokens_per_s=1.0) for tp in (2, 4)]
    sim = simulate_measurements(rows, truth, prompts_per_slot=3)
    return [dataclasses.replace(m, ttft_s=s[0], tpot_s=s[1], tokens_per_s=s[2]) for m, s in zip(rows, sim)]


def test_defaults_are_the_cold_full_fit_and_a_warm_fit_is_capped():
    rows, catalog = _rows(), load_hardware("h100-sxm")
    cold = fit_hardware(rows, catalog, rounds=1, prompts_per_slot=3)
    same = fit_hardware(rows, catalog, rounds=1, prompts_per_slot=3, start=None, start_scale=1.0,
                        max_evaluations=None)
    assert same.factors == cold.factors and same.evaluations == cold.evaluations
    assert cold.factors["vllm.step_overhead_ms"] > catalog.step_overhead_ms
    warm = fit_hardware(rows, catalog, rounds=1, prompts_per_slot=3, start=cold.hardware, start_scale=0.5,
                        max_evaluations=6)
    assert warm.evaluations <= 6
    # it starts where the cold fit ended, so it keeps what that fit learnt; the pull is still to the catalog
    assert warm.factors["vllm.step_overhead_ms"] > catalog.step_overhead_ms
    assert abs(warm.factors["vllm.step_overhead_ms"] - cold.factors["vllm.step_overhead_ms"]) <= 0.5 * 1.0 + 1e-9


def test_a_shared_memo_gives_the_same_fit_and_serves_a_second_one():
    """With ``simulations`` the fit is the one without (the simulator is deterministic); a second
    fit of the same rows from the same start simulates nothing new."""
    rows, catalog = _rows(), load_hardware("h100-sxm")
    plain = fit_hardware(rows, catalog, rounds=1, prompts_per_slot=3)
    memo: dict = {}
    shared = fit_hardware(rows, catalog, rounds=1, prompts_per_slot=3, simulations=memo)
    assert shared.hardware == plain.hardware and shared.after == plain.after and shared.evaluations == plain.evaluations
    assert memo and all(not r.requests for r in memo.values())
    size = len(memo)
    again = fit_hardware(rows, catalog, rounds=1, prompts_per_slot=3, simulations=memo)
    assert again.hardware == plain.hardware and len(memo) == size
