from __future__ import annotations

import pytest

from msopt.errors import SimulationError
from msopt.launch.render import LaunchSpec
from msopt.sim import EngineKnobs, benchmark_overrides, knobs_from_launch
from msopt.sim.personality import resolved


def vllm(*args: str) -> EngineKnobs:
    return knobs_from_launch(LaunchSpec("vllm", ("vllm", "serve", "/models/qwen3-8b", *args)))


def test_vllm_both_flag_forms_and_ignored_listed_once():
    k = vllm("--tensor-parallel-size", "4", "-pp=2", "--data-parallel-size=2", "--max-num-seqs", "128",
             "--max-num-batched-tokens=4096", "--gpu-memory-utilization", "0.85", "--block-size", "32",
             "--max-model-len", "8192", "--enforce-eager", "--swap-space", "4", "--swap-space=8", "--seed", "1")
    assert (k.tp, k.pp, k.dp, k.max_num_seqs, k.max_num_batched_tokens) == (4, 2, 2, 128, 4096)
    assert (k.memory_fraction, k.block_size, k.max_model_len) == (0.85, 32, 8192)
    assert k.ignored == ("--enforce-eager", "--swap-space", "--seed")
    assert k.chunked_prefill and k.mixed_batch


def test_vllm_defaults_resolve_by_device_memory():
    k = vllm("-tp", "2")
    assert k.tp == 2 and k.max_num_seqs is None
    assert resolved(k, 79.1).max_num_batched_tokens == 8192 and resolved(k, 79.1).max_num_seqs == 1024
    assert resolved(k, 64.0).max_num_batched_tokens == 2048 and resolved(k, 64.0).max_num_seqs == 256
    assert k.memory_fraction == 0.9 and k.block_size is None      # the platform's, once resolved
    assert resolved(k, 79.1).block_size == 16 and resolved(k, 79.1, "CPU").block_size == 128


@pytest.mark.parametrize("args, expected", [
    (("--enable-chunked-prefill",), True),
    (("--no-enable-chunked-prefill",), False),
    (("--enable-chunked-prefill", "false"), False),
    (("--enable-chunked-prefill=False",), False),
    (("--enable-chunked-prefill", "--max-num-seqs", "8"), True),
])
def test_vllm_chunked_prefill(args, expected):
    k = vllm(*args)
    assert k.chunked_prefill is expected and k.mixed_batch is expected


def test_vllm_bad_value():
    with pytest.raises(SimulationError, match="--max-num-seqs"):
        vllm("--max-num-seqs", "many")


def test_sglang():
    k = knobs_from_launch(LaunchSpec("sglang", (
        "python", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "2", "--dp-size", "2",
        "--max-running-requests", "64", "--chunked-prefill-size", "4096", "--mem-fraction-static=0.8",
        "--enable-torch-compile")))
    assert (k.engine, k.tp, k.dp, k.max_num_seqs, k.max_num_batched_tokens) == ("sglang", 2, 2, 64, 4096)
    assert k.memory_fraction == 0.8 and not k.mixed_batch
    assert k.ignored == ("--model-path", "--enable-torch-compile")


def mindie_config(**schedule) -> dict:
    return {"BackendConfig": {
        "ScheduleConfig": {"maxBatchSize": 200, "maxPrefillBatchSize": 50, "maxPrefillTokens": 8192,
                           "supportSelectBatch": True, "prefillTimeMsPerReq": 150, "decodeTimeMsPerReq": 50,
                           "maxQueueDelayMicroseconds": 5000, "maxPreemptCount": 0, "cacheBlockSize": 128,
                           "maxIterTimes": 512, "templateType": "Standard", **schedule},
        "ModelDeployConfig": {"maxSeqLen": 4096, "ModelConfig": [{"tp": 4, "dp": 2, "modelName": "qwen"}]},
    }}


def test_mindie_from_config_json():
    k = knobs_from_launch(LaunchSpec("mindie", ("mindieservice_daemon",),
                                     files={"/conf/config.json": mindie_config()}))
    assert (k.engine, k.tp, k.dp, k.pp) == ("mindie", 4, 2, 1)
    assert (k.max_num_seqs, k.max_prefill_seqs, k.max_num_batched_tokens) == (200, 50, 8192)
    assert k.select_batch and k.prefill_time_ms_per_req == 150 and k.decode_time_ms_per_req == 50
    assert k.max_queue_delay_s == pytest.approx(0.005) and k.max_preempt_count == 0
    assert k.max_model_len == 4096 and not k.mixed_batch and not k.chunked_prefill
    assert k.ignored == ("BackendConfig.ScheduleConfig.templateType",)


def test_mindie_without_config():
    with pytest.raises(SimulationError, match="BackendConfig"):
        knobs_from_launch(LaunchSpec("mindie", ("x",)))


def test_unknown_engine():
    with pytest.raises(SimulationError, match="vllm"):
        knobs_from_launch(LaunchSpec("trtllm", ()))


def test_benchmark_overrides():
    argv = ("vllm", "bench", "serve", "--max-concurrency", "32", "--request-rate=inf", "--num-prompts", "200",
            "--random-input-len", "2048", "--random-output-len=128", "--dataset-name", "random")
    assert benchmark_overrides(argv) == {"concurrency": 32, "request_rate": float("inf"), "num_prompts": 200,
                                         "input_len": 2048, "output_len": 128}


def test_vllm_long_prefill_token_threshold_caps_chunks():
    from msopt.sim import simulate

    k = vllm("-tp", "4", "--long-prefill-token-threshold", "512")
    assert k.long_prefill_token_threshold == 512 and "--long-prefill-token-threshold" not in k.ignored
    wl = {"input_len": 4096, "output_len": 128, "num_prompts": 64, "concurrency": 16}
    capped = simulate(k, "h100-sxm", "qwen3-32b", wl)
    free = simulate(vllm("-tp", "4"), "h100-sxm", "qwen3-32b", wl)
    # smaller prefill chunks interrupt the decodes less and take more steps to finish a prompt
    assert capped.time_per_output_token < free.time_per_output_token
    assert capped.time_to_first_token > free.time_to_first_token


def test_sglang_default_memory_fraction_follows_the_device_and_tp():
    from msopt.engines.sglang.knobs import sglang_mem_fraction

    k = knobs_from_launch(LaunchSpec("sglang", ("python", "-m", "sglang.launch_server", "--tp-size", "1")))
    assert k.memory_fraction is None
    h100 = resolved(k, 79.1).memory_fraction
    assert h100 == sglang_mem_fraction(79.1, 1, 1, 8192, None)
    # reserved 512 + 1.5 x 8192 + 1/8 x 1024 + 2 x 256 MB = 13440 MB of 80998 MB
    assert h100 == pytest.approx(round((79.1 * 1024 - 13440) / (79.1 * 1024), 3))
    assert resolved(k, 79.1).memory_fraction > resolved(EngineKnobs(engine="sglang", tp=8), 79.1).memory_fraction


def test_sglang_max_prefill_tokens_bounds_a_prefill_batch():
    """sglang srt/managers/schedule_policy.py: a prefill batch stops taking requests at
    --max-prefill-tokens, so a burst of prompts is prefilled in more, smaller batches: the first
    prompts get their first token sooner, the last later, and decodes are interrupted more."""
    from msopt.sim import simulate

    knobs = knobs_from_launch(LaunchSpec(engine="sglang", argv=["--tp-size", "4", "--max-prefill-tokens", "2048"]))
    assert knobs.max_prefill_tokens == 2048 and "--max-prefill-tokens" not in knobs.ignored
    wl = {"input_len": 1024, "output_len": 16, "num_prompts": 32, "concurrency": 32}
    capped = simulate(knobs, "h100-sxm", "qwen3-32b", wl)
    free = simulate(EngineKnobs(engine="sglang", tp=4), "h100-sxm", "qwen3-32b", wl)
    assert capped.error is None and free.error is None
    assert capped.ttft_p50 < free.ttft_p50
    assert capped.ttft_p99 > free.ttft_p99
    assert capped.time_per_output_token > free.time_per_output_token


def test_vllm_cpu_kv_cache_comes_from_its_environment_variable():
    """vllm 0.32.0 vllm/platforms/cpu.py: VLLM_CPU_KVCACHE_SPACE GiB of KV cache."""
    argv = ("vllm", "serve", "/m", "--max-num-seqs", "8")
    k = knobs_from_launch(LaunchSpec("vllm", argv, env={"VLLM_CPU_KVCACHE_SPACE": "1"}))
    assert k.kv_cache_gib == 1.0 and k.max_num_seqs == 8
    assert knobs_from_launch(LaunchSpec("vllm", argv, env={"VLLM_CPU_KVCACHE_SPACE": ""})).kv_cache_gib is None
    with pytest.raises(SimulationError, match="VLLM_CPU_KVCACHE_SPACE"):
        knobs_from_launch(LaunchSpec("vllm", argv, env={"VLLM_CPU_KVCACHE_SPACE": "lots"}))


def test_sglang_default_memory_fraction_on_npus_follows_sglangs_npu_defaults():
    """Issue 51 item 13: on NPUs sglang 0.5.23 srt/hardware_backend/npu/utils.py (set_default_server_args) sets
    chunked_prefill_size 8192 and a decode graph max batch of 64 (tp < 4) or 256 up to 64 GiB before
    srt/arg_groups/memory_hook.py (handle_gpu_memory_settings, reserve_for_graph_mb) computes the fraction:
    512 + 1.5 x chunk + tp x pp / 8 x 1024 + 2 x max_bs + 3 x max_bs x attn_dp MB, at least 10 GB."""
    from msopt.engines.sglang.knobs import sglang_mem_fraction

    # the A3 recipe: tp 32 (the world) with 4 attention-DP ranks, chunk 114688, on a 64 GiB die
    assert sglang_mem_fraction(64.0, 32, 1, 114688, 288, npu=True, attn_dp=4) == pytest.approx(
        round((65536 - (512 + 1.5 * 114688 + 32 / 8 * 1024 + 2 * 256 + 256 * 4 * 3)) / 65536, 3))
    assert sglang_mem_fraction(64.0, 32, 1, 114688, 288, npu=True, attn_dp=4) == -1.75
    k = knobs_from_launch(LaunchSpec("sglang", ("python", "-m", "sglang.launch_server", "--tp-size", "2")))
    npu = resolved(k, 64.0, "NPU")
    assert npu.max_num_batched_tokens == 8192  # the NPU default chunk up to 64 GiB (CUDA: 4096 below 70 GiB)
    # 512 + 1.5 x 8192 + 2/8 x 1024 + 2 x 64 = 13184 MB, over the 10 GB floor
    assert npu.memory_fraction == pytest.approx(round((65536 - 13184) / 65536, 3))
    assert resolved(k, 64.0).max_num_batched_tokens == 4096


def test_the_sglang_ascend_recipe_of_qwen3_coder_480b_fails_as_sglang_does_not_with_a_valueerror():
    """Issue 51 item 13, ../shared/measured/sglang_ascend_best_practice.csv "Qwen3-480B HT50ms-2": tp 32 over two
    A3 nodes, DP attention 4, --chunked-prefill-size 114688 and no --mem-fraction-static; SGLang's own default
    (-1.75 on a 64 GiB die) reaches its KV sizing, which stops with its own words
    (sglang 0.5.23 srt/mem_cache/kv_cache_configurator.py:3043-3058), not "memory fraction must be in (0, 1]"."""
    from msopt.sim.simulator import simulate_launch

    argv = ("python", "-m", "sglang.launch_server", "--tp-size", "32", "--dp-size", "4", "--enable-dp-attention",
            "--chunked-prefill-size", "114688", "--max-running-requests", "288", "--max-prefill-tokens", "458880",
            "--nnodes", "2", "--disable-radix-cache")
    table = {"hardware": "atlas-800i-a3", "model": "qwen3-coder-480b-a35b", "weight_dtype": "int8",
             "workload": {"input_len": 3500, "output_len": 1500, "num_prompts": 64, "concurrency": 32}}
    res = simulate_launch(LaunchSpec("sglang", argv), table)
    assert res.error is not None and "must be in (0, 1]" not in res.error
    assert res.error.startswith("ValueError: Loaded weights leave no GPU memory for the KV cache under "
                                "--mem-fraction-static=-1.75. Raise --mem-fraction-static above 0.")
    served = simulate_launch(LaunchSpec("sglang", (*argv, "--mem-fraction-static", "0.8")), table)
    assert served.error is None
