"""The simulator says why the requests it failed failed (issue 52 item 1): longer than the launch's context (the
rest, refused by the prefill token budget or the KV cache, as failed_refused); the evaluation's metrics carry the
counts and the limit, as the builtin benchmark's do. Before, the simulated run gave a success rate of 0.857 and no
reason."""

from __future__ import annotations

import json
from pathlib import Path

from msopt.evaluate.simulated import metrics_of
from msopt.sim.personality import knobs_from_argv
from msopt.sim.simulator import simulate


def trace(tmp_path: Path) -> Path:
    """40 requests: every fourth 2,000 tokens long, every fourth after it 600, the rest 100 (output 8)."""
    lengths = [2000, 600, 100, 100] * 10
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 200 * i, "input_length": n, "output_length": 8}) + "\n"
                            for i, n in enumerate(lengths)), encoding="utf-8")
    return path


def test_requests_longer_than_the_context_are_counted_with_it(tmp_path):
    table = {"num_prompts": 40, "request_rate": 5.0, "trace": {"path": str(trace(tmp_path))}}
    res = simulate(knobs_from_argv("vllm", ["--max-model-len", "1024"]), "cpu-x86", "llama-tiny-2l-128", table)
    assert res.error is None and res.success_rate == 0.75
    assert (res.failed_too_long, res.failed_refused, res.context_limit) == (10, 0, 1024)
    m = metrics_of(res)
    assert (m["failed_too_long"], m["context_limit"]) == (10, 1024) and "failed_refused" not in m


def test_no_failure_no_count(tmp_path):
    res = simulate(knobs_from_argv("vllm", ["--max-model-len", "2048"]), "cpu-x86", "llama-tiny-2l-128",
                   {"num_prompts": 40, "request_rate": 5.0, "trace": {"path": str(trace(tmp_path))}})
    assert res.success_rate == 1.0 and not any(k.startswith("failed_") or k == "context_limit" for k in metrics_of(res))


def _edge_trace(tmp_path: Path) -> Path:
    """20 requests of output 200: 10 with a 900-token prompt, 10 with a 1,024-token one (a 1,024 context)."""
    path = tmp_path / "edge.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 500 * i, "input_length": 900 if i % 2 else 1024,
                                        "output_length": 200}) + "\n" for i in range(20)), encoding="utf-8")
    return path


def test_vllm_cuts_the_output_of_a_prompt_that_fits_and_refuses_one_that_fills_the_context(tmp_path):
    """vllm 0.32.0 refuses only a prompt that fills the context (renderers/params.py:209-220,
    v1/engine/input_processor.py:592-603) and serves a shorter one with max_tokens cut to the context left
    (entrypoints/serve/utils/api_utils.py:169-205 get_max_tokens). Before, the simulator refused every request
    whose prompt and output were longer than the context, as SGLang does."""
    table = {"num_prompts": 20, "request_rate": 2.0, "trace": {"path": str(_edge_trace(tmp_path))}}
    res = simulate(knobs_from_argv("vllm", ["--max-model-len", "1024"]), "cpu-x86", "llama-tiny-2l-128", table)
    assert res.error is None and res.success_rate == 0.5
    assert (res.failed_too_long, res.outputs_cut) == (10, 10)
    assert any("output cut to the context left" in line for line in res.log_lines)
    assert metrics_of(res)["outputs_cut"] == 10


def test_sglang_refuses_a_prompt_and_output_longer_than_the_context(tmp_path):
    """sglang 0.5.23 srt/managers/tokenizer_manager.py:1353-1377: input + max_new_tokens over the context is
    refused (validate_total_tokens, no auto-truncate)."""
    table = {"num_prompts": 20, "request_rate": 2.0, "trace": {"path": str(_edge_trace(tmp_path))}}
    res = simulate(knobs_from_argv("sglang", ["--context-length", "1024"]), "h100-sxm", "qwen3-8b", table)
    assert res.error == "no request completed" and res.success_rate == 0.0
    assert (res.failed_too_long, res.outputs_cut) == (20, 0)
