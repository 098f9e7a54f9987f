"""The simulator's prefix cache (msopt.sim.prefix_cache.PrefixCache): without shared prefixes the traces
stay bit-identical to the scheduler without a cache; shared prefixes skip prefill; LRU eviction
under KV pressure; the engine's personality and flags decide; a trace without hash ids gets no hits."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from msopt.engines.mindie.knobs import knobs_mindie
from msopt.engines.sglang.knobs import knobs_sglang
from msopt.engines.vllm.knobs import knobs_vllm
from msopt.evaluate.simulated import metrics_of
from msopt.sim import EngineKnobs, load_hardware, load_model, simulate
from msopt.sim import engine as fast
from msopt.sim.perf import StepCost
from msopt.sim.personality import get_personality, resolved
from tests.sim.test_engine_equivalence import TRACE_ARRAYS, outcome, random_case


@pytest.mark.parametrize("block", range(2))
def test_no_shared_prefix_leaves_the_trace_bit_identical(block: int) -> None:
    for seed in range(block * 50, block * 50 + 50):
        args, kw = random_case(seed)
        n = len(args[3])
        distinct = [tuple(range(1000 * i, 1000 * i + 8)) for i in range(n)]
        want = outcome(fast, args, kw)
        got = outcome(fast, args, {**kw, "prefixes": distinct, "prefix_block": 64})
        if isinstance(want, str) or isinstance(got, str):
            assert got == want, f"seed {seed}"
            continue
        for name in TRACE_ARRAYS:
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=f"seed {seed}: {name}")
        assert (got.preemptions, got.steps, got.max_running) == (want.preemptions, want.steps, want.max_running)
        assert got.prefix_hit_tokens == 0


def _replica(num_blocks: int, prefixes: list[tuple[int, ...]] | None, in_len: int = 1024, out_len: int = 8):
    knobs = resolved(EngineKnobs(engine="vllm"), 80.0)
    cost = StepCost(load_hardware("h100-sxm"), load_model("qwen3-8b"), knobs, "bf16", "bf16")
    n = 3 if prefixes is None else len(prefixes)
    return fast.run_replica(knobs, cost, num_blocks, np.full(n, in_len), np.full(n, out_len),
                            np.arange(n, dtype=float), None, 4096, prefixes=prefixes, prefix_block=512)


def test_a_shared_prefix_skips_its_prefill() -> None:
    shared = [(7, 10 + i) for i in range(3)]          # 1024-token prompts: one 512-token block in common
    hit = _replica(10_000, shared)
    assert (hit.prefix_hit_tokens, hit.prefix_query_tokens) == (2 * 512, 3 * 1024)
    miss = _replica(10_000, None)
    ttft_hit, ttft_miss = hit.first_token - hit.send, miss.first_token - miss.send
    assert ttft_hit[0] == ttft_miss[0] and (ttft_hit[1:] < ttft_miss[1:]).all()


def test_the_last_prompt_token_is_always_computed() -> None:
    same = [(1, 2), (1, 2)]                           # the whole prompt cached: all but one KV block hit
    tr = _replica(10_000, same)
    assert tr.prefix_hit_tokens == 1024 - 16          # 1023 tokens, aligned down to vLLM's 16-token block


def test_least_recently_used_blocks_are_evicted_under_kv_pressure() -> None:
    prefixes = [(1, 2), (3, 4), (1, 2)]               # the third repeats the first after another prompt
    assert _replica(10_000, prefixes).prefix_hit_tokens == 1024 - 16
    # 70 blocks of 16 tokens: one request's prompt and output fit, the first prompt's blocks do not
    # stay cached beside the second's
    assert _replica(70, prefixes).prefix_hit_tokens == 0


def _trace(tmp_path: Path, with_ids: bool) -> dict:
    rows = [{"timestamp": 1000 * i, "input_length": 2048, "output_length": 16,
             **({"hash_ids": [0, 1, 2, 100 + i]} if with_ids else {})} for i in range(8)]
    p = tmp_path / ("ids.jsonl" if with_ids else "none.jsonl")
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return {"num_prompts": 8, "trace": {"path": str(p)}}


def _hits(res) -> list[str]:
    return [line for line in res.log_lines if "prefix cache hit rate" in line]


def test_vllm_caches_prefixes_by_default_and_the_flag_turns_it_off(tmp_path) -> None:
    wl = _trace(tmp_path, with_ids=True)
    on = simulate(EngineKnobs(engine="vllm"), "h100-sxm", "qwen3-8b", wl)
    assert _hits(on) == ["INFO [msopt.sim] prefix cache hit rate: 65.6% of 16,384 prompt tokens queried "
                         "(10,752 hit)"]                      # 7 of 8 prompts hit 3 of 4 blocks
    assert (on.prefix_cache_hits, on.prefix_cache_queries) == (10_752, 16_384)
    off_knobs = knobs_vllm(["vllm", "serve", "m", "--no-enable-prefix-caching"])
    assert off_knobs.prefix_caching is False
    off = simulate(off_knobs, "h100-sxm", "qwen3-8b", wl)
    assert _hits(off) == [] and off.time_to_first_token > on.time_to_first_token
    assert (off.prefix_cache_hits, off.prefix_cache_queries) == (0, 0)
    assert knobs_vllm(["vllm", "serve", "m", "--enable-prefix-caching"]).prefix_caching
    assert knobs_vllm(["vllm", "serve", "m"]).prefix_caching is None      # the personality's default: on
    # the evaluation's metrics (and the prior's prediction) carry the hit rate where it was modelled
    assert metrics_of(on)["prefix_cache_hit_rate"] == 10_752 / 16_384
    assert "prefix_cache_hit_rate" not in metrics_of(off)


def test_a_trace_without_hash_ids_is_never_credited(tmp_path) -> None:
    res = simulate(EngineKnobs(engine="vllm"), "h100-sxm", "qwen3-8b", _trace(tmp_path, with_ids=False))
    assert res.success_rate == 1.0 and _hits(res) == []


def _engine_replica(engine: str, prompts: list[int], prefixes: list[tuple[int, ...]]):
    knobs = resolved(knobs_sglang([]) if engine == "sglang" else EngineKnobs(engine=engine), 80.0)
    cost = StepCost(load_hardware("h100-sxm"), load_model("qwen3-8b"), knobs, "bf16", "bf16")
    n = len(prompts)
    return fast.run_replica(knobs, cost, 10_000, np.array(prompts), np.full(n, 8), np.arange(n, dtype=float),
                            None, 4096, prefixes=prefixes, prefix_block=512,
                            prefix_partial=get_personality(engine).prefix_cache_partial)


def test_sglang_radix_cache_hits_to_the_token() -> None:
    # 700 tokens (a full 512-token block, then 188 of the next), then 1100 tokens on the same two
    # blocks and a third: the radix tree holds the first prompt's 700 tokens and the second hits them
    # all; vLLM's block model counts the second block whole and aligns to its 16-token KV block
    prompts, prefixes = [700, 1100, 1000], [(0, 1), (0, 1, 2), (0, 1)]
    sglang = _engine_replica("sglang", prompts, prefixes)
    # the third: both blocks now cached in full, its prompt less its last token hit
    assert sglang.prefix_hit_tokens == 700 + 999
    vllm = _engine_replica("vllm", prompts, prefixes)
    assert vllm.prefix_hit_tokens == (1024 - 0) + (999 - 999 % 16)


def test_sglang_caches_by_default_and_disable_radix_cache_turns_it_off(tmp_path) -> None:
    rows = [{"timestamp": 1000 * i, "input_length": 1000 + 10 * i, "output_length": 16, "hash_ids": [0, 1, 100 + i]}
            for i in range(8)]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    wl = {"num_prompts": 8, "trace": {"path": str(path)}}
    on = simulate(knobs_sglang(["python3", "-m", "sglang.launch_server", "--tp-size", "1"]), "h100-sxm", "qwen3-8b", wl)
    # prompts 1000-1070 tokens: block 0 whole and block 1 (488 tokens, then 10 more each, 512 at most)
    # shared; each hits block 0 and the longest earlier fill of block 1, to the token
    want = sum(512 + min(512, 488 + 10 * (i - 1)) for i in range(1, 8))
    assert (on.prefix_cache_hits, on.prefix_cache_queries) == (want, sum(r["input_length"] for r in rows))
    assert want % 16 and _hits(on)
    off_knobs = knobs_sglang(["--disable-radix-cache"])
    assert off_knobs.prefix_caching is False and knobs_sglang([]).prefix_caching is None   # the personality's: on
    off = simulate(off_knobs, "h100-sxm", "qwen3-8b", wl)
    assert (off.prefix_cache_hits, off.prefix_cache_queries) == (0, 0) and _hits(off) == []
    assert off.time_to_first_token > on.time_to_first_token


def _mindie_files(schedule: dict, model: dict) -> dict:
    return {"config.json": {"BackendConfig": {"ScheduleConfig": schedule,
                                              "ModelDeployConfig": {"ModelConfig": [model]}}}}


def test_mindie_caches_only_where_config_json_turns_it_on(tmp_path) -> None:
    plugin = {"plugin_params": '{"plugin_type":"prefix_cache"}'}
    assert knobs_mindie(_mindie_files({}, {})).prefix_caching is None          # the personality's: off
    assert not get_personality("mindie").prefix_caching
    on = knobs_mindie(_mindie_files({"enablePrefixCache": True}, plugin))
    assert on.prefix_caching is True and "BackendConfig.ScheduleConfig.enablePrefixCache" not in on.ignored
    # both are needed (MindIE's guide: with enablePrefixCache on, plugin_params must name prefix_cache)
    assert knobs_mindie(_mindie_files({"enablePrefixCache": True}, {})).prefix_caching is False
    assert knobs_mindie(_mindie_files({"enablePrefixCache": False}, plugin)).prefix_caching is False
    wl = _trace(tmp_path, with_ids=True)
    res = simulate(replace(on, engine="mindie"), "h100-sxm", "qwen3-8b", wl)
    # block-level at MindIE's 128-token page: 7 of 8 prompts hit 3 of 4 blocks, as vLLM's
    assert (res.prefix_cache_hits, res.prefix_cache_queries) == (10_752, 16_384)
    assert simulate(knobs_mindie(_mindie_files({}, {})), "h100-sxm", "qwen3-8b", wl).prefix_cache_queries == 0


def test_on_a_shared_trace_more_kv_memory_keeps_more_prefixes() -> None:
    path = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "mooncake_conversation_trace.sample.jsonl"
    if not path.exists():
        pytest.skip(f"{path} is absent: ../shared/traces/ beside the repository holds the public trace samples, "
                    "which the project does not carry")
    from msopt.workload import Trace

    window = [0, 120]
    reqs = list(Trace(path, window=(0, 120), max_model_len=32768))
    seen: set[int] = set()
    ceiling = 0                                        # an unbounded cache, requests in arrival order
    for r in reqs:
        run = 0
        for h in r.hash_ids:
            if h not in seen:
                break
            run += 1
        ceiling += min(run * 512, r.input_tokens - 1)
        seen.update(r.hash_ids)
    wl = {"num_prompts": len(reqs), "trace": {"path": str(path), "window": window, "max_model_len": 32768}}
    rates = []
    for frac in (0.5, 0.9):
        res = simulate(EngineKnobs(engine="vllm", tp=2, memory_fraction=frac), "h200-sxm", "qwen3-8b", wl)
        hit, queried = res.prefix_cache_hits, res.prefix_cache_queries
        assert res.preemptions == 0 and queried == sum(r.input_tokens for r in reqs)
        assert 0 < hit <= ceiling
        rates.append(hit / queried)
    assert rates[0] < rates[1]                          # LRU under KV pressure: a bigger cache keeps more
