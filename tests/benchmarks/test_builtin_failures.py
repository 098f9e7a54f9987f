"""The builtin benchmark journals why each failed request failed (issue 52 item 1): the server's refusal of a
request longer than its context with the limit it named, an HTTP error by its status, a broken connection.
Before, a failed request was only a lower success rate."""

from __future__ import annotations

from pathlib import Path

import pytest

from msopt.benchmarks import get_benchmark
from msopt.benchmarks.failures import HttpError, failure_cause
from msopt.engines import LaunchSpec
from msopt.launch.ports import free_port
from msopt.launch.render import Candidate


def run(spec: LaunchSpec, tmp_path: Path, section: dict, n: int) -> dict:
    return get_benchmark("builtin").run(spec, Candidate({}, [], section), num_prompts=n, load={}, result_dir=tmp_path,
                                        log_path=tmp_path / "b.log", timeout=60)


def test_a_prompt_longer_than_the_servers_context_is_counted_with_the_limit(sim_server: LaunchSpec, tmp_path):
    # sim-serve's context is 32,768 tokens (its --max-model-len default) and it answers as vLLM does
    m = run(sim_server, tmp_path, {"input_len": 33000, "output_len": 2}, 2)
    assert m["success_rate"] == 0.0
    assert (m["failed_too_long"], m["context_limit"]) == (2, 32768)


def test_an_http_error_is_counted_by_its_status(sim_server: LaunchSpec, tmp_path):
    spec = LaunchSpec(engine="vllm", argv=("x",), port=sim_server.port, served_model_name="other")
    m = run(spec, tmp_path, {"input_len": 4, "output_len": 2}, 2)
    assert m["failed_http_404"] == 2 and "failed_too_long" not in m and "context_limit" not in m


def test_a_server_that_is_not_there_is_a_broken_connection(tmp_path):
    spec = LaunchSpec(engine="vllm", argv=("x",), port=free_port(), served_model_name="m")
    m = run(spec, tmp_path, {"input_len": 4, "output_len": 2}, 3)
    assert m["failed_connection"] == 3


@pytest.mark.parametrize("text, limit", [
    # vLLM 0.32.0: vllm/renderers/params.py, vllm/v1/engine/input_processor.py, vllm/entrypoints/serve/utils/api_utils.py
    ('{"error": {"message": "This model\'s maximum context length is 4096 tokens. However, your prompt contains '
     '5000 input tokens, which exceeds this limit even without any output tokens."}}', 4096),
    ("The decoder prompt (length 5000) is longer than the maximum model length of 2048. Make sure that", 2048),
    ("Input length (9000) exceeds model's maximum context length (8192).", 8192),
])
def test_vllms_messages_for_a_prompt_too_long_give_the_limit(text, limit):
    assert failure_cause(HttpError(400, text)) == ("too_long", limit)


def test_other_failures_by_kind():
    assert failure_cause(HttpError(400, "max_tokens must be a positive integer")) == ("http_400", None)
    assert failure_cause(HttpError(500, "This model's maximum context length is 4096")) == ("http_500", None)
    assert failure_cause(TimeoutError()) == ("timeout", None)
    assert failure_cause(ConnectionResetError()) == ("connection", None)
    assert failure_cause(ValueError("bad JSON")) == ("other", None)


def test_a_response_with_fewer_output_tokens_than_asked_is_counted_as_cut(sim_server: LaunchSpec, tmp_path):
    """sim-serve answers as vLLM 0.32.0 does (tests/real_engine/test_context_rule.py checks the real build): a prompt
    that fits with an output that does not is served, its max_tokens cut to the context left."""
    m = run(sim_server, tmp_path, {"input_len": 32700, "output_len": 100}, 2)
    assert m["success_rate"] == 1.0 and m["outputs_cut"] == 2 and "failed_too_long" not in m
    m = run(sim_server, tmp_path / "fits", {"input_len": 100, "output_len": 10}, 2)
    assert m["success_rate"] == 1.0 and "outputs_cut" not in m
