from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from msopt.errors import ConfigError
from msopt.launch.render import LaunchSpec
from msopt.sim import EngineKnobs, simulate, simulate_launch
from msopt.sim.personality import resolved

SMALL = {"input_len": 256, "output_len": 64, "num_prompts": 64, "concurrency": 16}


def test_metrics_are_consistent():
    r = simulate(EngineKnobs(), "h100-sxm", "llama-3.1-8b", SMALL)
    assert r.error is None and r.success_rate == 1.0
    req = r.requests
    assert len(req["send"]) == 64 and np.all(req["first_token"] >= req["send"])
    assert np.all(req["finish"] >= req["first_token"])
    assert r.generate_speed == pytest.approx(64 * 64 / r.duration)
    assert r.throughput == pytest.approx(64 / r.duration)
    assert r.ttft_p50 <= r.ttft_p90 <= r.ttft_p99 and r.tpot_p50 <= r.tpot_p99
    assert set(r.metrics()) == {"generate_speed", "time_to_first_token", "time_per_output_token",
                                "success_rate", "throughput"}
    assert any("KV cache size" in line for line in r.log_lines)


def test_over_long_requests_are_rejected_not_crashing():
    r = simulate(EngineKnobs(max_model_len=300), "h100-sxm", "qwen3-8b",
                 {"input_len": {"dist": "uniform", "low": 100, "high": 400}, "output_len": 32, "num_prompts": 50})
    assert 0 < r.success_rate < 1
    assert any("rejected" in line for line in r.log_lines)


@pytest.mark.parametrize("knobs, text", [
    (EngineKnobs(tp=3), "must be divisible by tensor parallel size (3)"),
    (EngineKnobs(tp=16), "exceeds the 8 devices"),
    (EngineKnobs(chunked_prefill=False, mixed_batch=False),
     "max_num_batched_tokens (8192) is smaller than max_model_len"),
    (EngineKnobs(max_model_len=100_000), "greater than the derived max_model_len"),
])
def test_server_start_failures(knobs, text):
    r = simulate(knobs, "h100-sxm", "qwen3-8b", SMALL)
    assert r.error and text in r.error
    assert r.log_lines[-1].startswith("ERROR") and np.isnan(r.time_to_first_token)


def test_fp8_weights_are_faster_and_unsupported_on_ascend():
    bf16 = simulate(EngineKnobs(), "h100-sxm", "qwen3-8b", SMALL)
    fp8 = simulate(EngineKnobs(), "h100-sxm", "qwen3-8b", SMALL, weight_dtype="fp8", kv_dtype="fp8")
    assert fp8.generate_speed > bf16.generate_speed and fp8.kv_cache_tokens > bf16.kv_cache_tokens
    with pytest.raises(Exception, match="fp8"):
        simulate(EngineKnobs(), "atlas-800i-a2", "qwen3-8b", SMALL, weight_dtype="fp8")
    with pytest.raises(ConfigError, match="weight_dtype"):
        simulate(EngineKnobs(), "h100-sxm", "qwen3-8b", SMALL, weight_dtype="fp4")


def test_simulate_launch_vllm_with_bench_overrides():
    spec = LaunchSpec("vllm", ("vllm", "serve", "m", "-tp", "2", "--max-num-seqs", "32", "--trust-remote-code"))
    table = {"hardware": "h100-sxm", "model": "qwen3-32b", "seed": 1,
             "workload": {"input_len": 512, "output_len": 64, "num_prompts": 40, "concurrency": 8}}
    r = simulate_launch(spec, table, bench_argv=["--max-concurrency", "4", "--num-prompts", "12"])
    assert r.error is None and r.num_prompts == 12 and r.ignored == ("--trust-remote-code",)
    assert r == simulate_launch(spec, table, bench_argv=["--max-concurrency", "4", "--num-prompts", "12"])


def test_simulate_launch_mindie():
    cfg = {"BackendConfig": {"ScheduleConfig": {"maxBatchSize": 32, "maxPrefillTokens": 8192},
                             "ModelDeployConfig": {"maxSeqLen": 2048, "ModelConfig": [{"tp": 2}]}}}
    spec = LaunchSpec("mindie", ("mindieservice_daemon",), files={"conf/config.json": cfg})
    r = simulate_launch(spec, {"hardware": "atlas-800i-a2", "model": "qwen3-8b", "workload": SMALL})
    assert r.error is None and r.success_rate == 1.0


def test_simulate_launch_table_errors():
    spec = LaunchSpec("vllm", ("vllm", "serve"))
    with pytest.raises(ConfigError, match="simulator.model"):
        simulate_launch(spec, {"hardware": "h100-sxm"})
    with pytest.raises(ConfigError, match="unknown key"):
        simulate_launch(spec, {"hardware": "h100-sxm", "model": "qwen3-8b", "gpu": 1})
    with pytest.raises(ConfigError, match="valid names"):
        simulate_launch(spec, {"hardware": "b200", "model": "qwen3-8b"})


def test_open_loop_poisson_load():
    light = simulate(EngineKnobs(), "h100-sxm", "qwen3-8b",
                     {"input_len": 512, "output_len": 128, "num_prompts": 200, "request_rate": 2.0})
    heavy = simulate(EngineKnobs(), "h100-sxm", "qwen3-8b",
                     {"input_len": 512, "output_len": 128, "num_prompts": 200, "request_rate": 50.0})
    assert light.throughput == pytest.approx(2.0, rel=0.25)
    assert heavy.time_per_output_token > light.time_per_output_token


def test_sim_does_not_import_ray():
    code = "import sys, msopt.sim; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_mindie_fixed_kv_size_and_preemption():
    # npuMemSize lives in ModelConfig (MindIE-LLM model_deploy_config.cpp), not ScheduleConfig.
    cfg = {"BackendConfig": {"ScheduleConfig": {"maxBatchSize": 128, "maxPreemptCount": 4},
                             "ModelDeployConfig": {"maxSeqLen": 4096,
                                                   "ModelConfig": [{"tp": 1, "npuMemSize": 4}]}}}
    spec = LaunchSpec("mindie", ("mindieservice_daemon",), files={"conf/config.json": cfg})
    load = {"input_len": 1024, "output_len": 512, "num_prompts": 128, "concurrency": 96}
    r = simulate_launch(spec, {"hardware": "atlas-800i-a2", "model": "qwen3-8b", "workload": load})
    assert r.error is None and r.success_rate == 1.0
    assert r.kv_cache_tokens < 4 * 2**30 / 147456 and r.preemptions > 0
    cfg["BackendConfig"]["ScheduleConfig"]["npuMemSize"] = 4  # the wrong place: not read
    del cfg["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["npuMemSize"]
    r = simulate_launch(spec, {"hardware": "atlas-800i-a2", "model": "qwen3-8b", "workload": load})
    assert r.kv_cache_tokens > 4 * 2**30 / 147456
    assert "BackendConfig.ScheduleConfig.npuMemSize" in r.ignored


def test_sglang_runs_and_unknown_engine_knobs_are_refused():
    spec = LaunchSpec("sglang", ("python", "-m", "sglang.launch_server", "--tp-size", "2"))
    r = simulate_launch(spec, {"hardware": "h100-sxm", "model": "qwen3-32b", "workload": SMALL})
    assert r.error is None and r.success_rate == 1.0
    with pytest.raises(Exception, match="models"):
        simulate(EngineKnobs(engine="trtllm"), "h100-sxm", "qwen3-8b", SMALL)


def test_a_delayed_request_does_not_hold_up_the_ones_behind_it():
    """Network jitter comes after the API server: a late request is not a queue for the others."""
    from msopt.sim import load_hardware, load_model
    from msopt.sim.engine import run_replica
    from msopt.sim.perf import StepCost, plan_memory

    hw = load_hardware("h100-sxm")
    model = load_model("qwen3-8b")
    knobs = resolved(EngineKnobs(tp=1), hw.hbm_gib)
    cost = StepCost(hw, model, knobs, "bf16", "bf16")
    blocks = plan_memory(hw, model, knobs, "bf16", "bf16").num_blocks
    n = 4
    lengths = np.full(n, 256)
    jitter = np.array([5.0, 0.0, 0.0, 0.0])  # the first request is 5 s late
    tr = run_replica(knobs, cost, blocks, lengths, np.full(n, 8), np.zeros(n), None,
                     32768, jitter=jitter)
    assert np.all(tr.first_token[1:] < 1.0)
    assert tr.first_token[0] > 5.0


def test_sglang_without_chunking_serves_prompts_beyond_any_step_budget():
    """--chunked-prefill-size -1: a 12k-token prompt runs whole (it was rejected against vLLM's 8192 budget)."""
    from msopt.engines.sglang.knobs import knobs_sglang

    knobs = knobs_sglang(["--tp-size", "2", "--chunked-prefill-size", "-1", "--max-prefill-tokens", "8192"])
    assert not knobs.chunked_prefill
    res = simulate(knobs, "h100-sxm", "qwen3-32b", {"input_len": 12000, "output_len": 16, "num_prompts": 4,
                                                     "concurrency": 2})
    assert res.error is None and res.success_rate == 1.0
