"""Directional facts the simulator must reproduce (what a tuner relies on)."""

from __future__ import annotations

import pytest

from msopt.sim import EngineKnobs, simulate

HW = "h100-sxm"
MODEL = "qwen3-8b"
LOAD = {"input_len": 2048, "output_len": 512, "num_prompts": 256, "concurrency": 128}


def run(knobs: EngineKnobs, workload=LOAD, hw=HW, model=MODEL, **kw):
    return simulate(knobs, hw, model, workload, **kw)


def test_more_tp_lowers_batch1_tpot_and_costs_per_device_throughput():
    single = {"input_len": 512, "output_len": 128, "num_prompts": 8, "concurrency": 1}
    results = [run(EngineKnobs(tp=tp), single) for tp in (1, 2, 4, 8)]
    tpots = [r.time_per_output_token for r in results]
    per_device = [r.generate_speed / tp for r, tp in zip(results, (1, 2, 4, 8))]
    assert tpots == sorted(tpots, reverse=True) and tpots[0] > tpots[-1] * 1.3
    assert per_device == sorted(per_device, reverse=True)


def test_max_num_seqs_raises_throughput_until_kv_runs_out():
    load = {"input_len": 1024, "output_len": 256, "num_prompts": 512, "concurrency": 256}
    res = {m: run(EngineKnobs(max_num_seqs=m, memory_fraction=0.5), load) for m in (8, 16, 32, 64, 128, 256)}
    speeds = [res[m].generate_speed for m in (8, 16, 32, 64)]
    assert speeds == sorted(speeds) and speeds[-1] > 3 * speeds[0]
    assert res[64].preemptions == 0
    # 256 x 1280 tokens do not fit the KV cache: preemption, and no gain over 128
    assert res[256].preemptions > 0
    assert res[256].generate_speed <= res[128].generate_speed * 1.02


def test_token_budget_trades_ttft_for_tpot_with_long_prompts():
    load = {"input_len": 4096, "output_len": 256, "num_prompts": 128, "concurrency": 32}
    small = run(EngineKnobs(max_num_batched_tokens=512), load)
    mid = run(EngineKnobs(max_num_batched_tokens=2048), load)
    large = run(EngineKnobs(max_num_batched_tokens=8192), load)
    # big prefill chunks crowd out decodes: TPOT rises with the budget
    assert small.time_per_output_token < mid.time_per_output_token < large.time_per_output_token
    assert small.tpot_p99 < large.tpot_p99
    # tiny chunks take many steps to finish a prompt: TTFT is worst at the smallest budget
    assert small.time_to_first_token > mid.time_to_first_token


def test_lower_memory_utilization_shrinks_kv_then_preempts_then_fails():
    knobs = lambda u: EngineKnobs(memory_fraction=u, max_model_len=8192)  # noqa: E731
    res = {u: run(knobs(u)) for u in (0.9, 0.6, 0.4, 0.2)}
    assert res[0.9].kv_cache_tokens > res[0.6].kv_cache_tokens > res[0.4].kv_cache_tokens
    assert res[0.9].preemptions == 0 and res[0.4].preemptions > 0
    assert res[0.9].generate_speed > res[0.6].generate_speed > res[0.4].generate_speed
    assert res[0.2].error and "No available memory for the cache blocks" in res[0.2].error
    # with the model's full context (40960) even a moderate fraction cannot hold one sequence
    tight = run(EngineKnobs(memory_fraction=0.3))
    assert tight.error and "max seq len (40960)" in tight.error and "max_model_len" in tight.error


def test_weights_that_do_not_fit_fail_with_an_oom_log_line():
    res = run(EngineKnobs(tp=1), model="llama-3.1-70b")
    assert res.error and res.error.startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert any("CUDA out of memory" in line for line in res.log_lines)
    assert res.success_rate == 0 and res.generate_speed == 0
    npu = run(EngineKnobs(tp=1), model="llama-3.1-70b", hw="atlas-800i-a2")
    assert npu.error and "NPU out of memory" in npu.error
    assert run(EngineKnobs(tp=4), model="llama-3.1-70b").error is None


def test_data_parallel_replicas_raise_throughput():
    speeds = [run(EngineKnobs(dp=dp)).generate_speed for dp in (1, 2, 4)]
    assert speeds[0] < speeds[1] < speeds[2]
    assert speeds[1] > 1.3 * speeds[0]


def test_mindie_max_batch_size_raises_throughput_and_lowers_ttft_under_load():
    def mindie(batch: int) -> EngineKnobs:
        return EngineKnobs(engine="mindie", max_num_seqs=batch, block_size=128, chunked_prefill=False,
                           mixed_batch=False, max_preempt_count=0, max_model_len=4096)

    res = [run(mindie(b), hw="atlas-800i-a2") for b in (8, 32, 128)]
    assert res[0].generate_speed < res[1].generate_speed < res[2].generate_speed
    assert res[0].time_to_first_token > res[1].time_to_first_token > res[2].time_to_first_token


def test_mindie_select_batch_holds_prefills_for_decodes():
    base = dict(engine="mindie", max_num_seqs=64, block_size=128, chunked_prefill=False, mixed_batch=False,
                max_preempt_count=0, max_model_len=4096, max_prefill_seqs=16,
                prefill_time_ms_per_req=500, decode_time_ms_per_req=50)
    load = {"input_len": 1024, "output_len": 256, "num_prompts": 300, "request_rate": 4, "concurrency": 64}
    plain = run(EngineKnobs(**base), load, hw="atlas-800i-a2")
    select = run(EngineKnobs(**base, select_batch=True), load, hw="atlas-800i-a2")
    # arrivals wait for a batch of decode steps: later first tokens, fewer decode interruptions
    assert select.time_to_first_token > 2 * plain.time_to_first_token
    assert select.time_per_output_token < plain.time_per_output_token


def test_same_seed_same_result_and_noise_is_seeded():
    a = run(EngineKnobs(), seed=3)
    b = run(EngineKnobs(), seed=3)
    assert a == b
    n1 = run(EngineKnobs(), seed=3, noise=0.05)
    n2 = run(EngineKnobs(), seed=3, noise=0.05)
    n3 = run(EngineKnobs(), seed=4, noise=0.05)
    assert n1 == n2
    assert n1.generate_speed != a.generate_speed
    assert n1.generate_speed != n3.generate_speed
    assert n1.generate_speed == pytest.approx(a.generate_speed, rel=0.3)


def test_pipeline_stages_hold_a_model_that_tp_alone_cannot():
    load = {"input_len": 1024, "output_len": 128, "num_prompts": 64, "concurrency": 32}
    assert run(EngineKnobs(tp=1), load, model="llama-3.1-70b").error
    res = run(EngineKnobs(tp=1, pp=2), load, model="llama-3.1-70b", hw="h200-sxm")
    assert res.error is None and res.success_rate == 1.0
    # pipeline stages add throughput (microbatches), not single-request speed
    one = run(EngineKnobs(tp=2, pp=1), load, model="llama-3.1-70b", hw="h200-sxm")
    two = run(EngineKnobs(tp=2, pp=2), load, model="llama-3.1-70b", hw="h200-sxm")
    assert two.generate_speed > one.generate_speed
