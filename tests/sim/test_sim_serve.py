"""msopt sim-serve: command line, pacing and the HTTP surface, as a real process."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from msopt.launch.ports import free_port
from msopt.launch.process import _alive, start_process, wait_ready
from msopt.sim.serve import _pace, parse_options

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def test_parse_vllm_and_sglang_command_lines() -> None:
    o = parse_options(["/m/Q", "--host", "0.0.0.0", "--port", "9", "--served-model-name", "q",
                       "--tensor-parallel-size", "4", "--max-num-seqs", "32", "--enable-prefix-caching",
                       "--block-size", "128", "--no-enable-chunked-prefill", "--time-scale", "0.5"])
    assert (o.model, o.served_model_name, o.host, o.port) == ("/m/Q", "q", "0.0.0.0", 9)
    assert (o.tensor_parallel_size, o.max_num_seqs, o.time_scale) == (4, 32, 0.5)
    assert o.unknown == ("--enable-prefix-caching", "--block-size", "128", "--no-enable-chunked-prefill")
    s = parse_options(["--model-path", "M", "--max-running-requests", "8", "--tp-size", "2"])
    assert (s.model, s.served_model_name, s.max_num_seqs, s.tensor_parallel_size) == ("M", "M", 8, 2)
    with pytest.raises(SystemExit):
        parse_options(["M", "--max-num-seqs", "0"])


def test_pace_follows_the_simulator() -> None:
    o1 = parse_options(["M", "--max-num-seqs", "8"])
    o4 = parse_options(["M", "--max-num-seqs", "8", "--tensor-parallel-size", "4"])
    t_short, _ = _pace(o1, prompt_tokens=100, running=1)
    t_long, _ = _pace(o1, prompt_tokens=4000, running=1)
    assert t_long > t_short > 0
    assert _pace(o4, prompt_tokens=4000, running=1)[0] < t_long
    assert _pace(o1, prompt_tokens=10, running=8)[1] > _pace(o1, prompt_tokens=10, running=1)[1]
    assert _pace(o4, prompt_tokens=10, running=1)[1] < _pace(o1, prompt_tokens=10, running=1)[1]
    fast = parse_options(["M", "--max-num-seqs", "8", "--time-scale", "0.01"])
    assert _pace(fast, prompt_tokens=100, running=1)[0] == pytest.approx(t_short * 0.01)


def test_pace_matches_the_embedded_simulator_at_batch_one() -> None:
    from msopt.launch.render import LaunchSpec
    from msopt.sim import knobs_from_launch, simulate

    argv = ["Qwen/Qwen3-8B", "--tensor-parallel-size", "2", "--max-num-seqs", "8"]
    opts = parse_options(argv + ["--sim-hardware", "h100-sxm"])
    assert opts.sim_model == "qwen3-8b"  # found by the model's name
    knobs = knobs_from_launch(LaunchSpec(engine="vllm", argv=("vllm", "serve", *argv)))
    res = simulate(knobs, "h100-sxm", "qwen3-8b", {"input_len": 512, "output_len": 64, "num_prompts": 4,
                                                    "concurrency": 1})
    ttft, tpot = _pace(opts, prompt_tokens=512, running=1)
    assert tpot == pytest.approx(res.time_per_output_token, rel=0.15)
    assert ttft == pytest.approx(res.time_to_first_token, rel=0.5)


def test_cli_register_passes_every_argument_through() -> None:
    from msopt.cli.serve import register

    parser = argparse.ArgumentParser(prog="msopt")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["sim-serve", "M", "--port", "1", "-tp", "2", "--weird=x", "--help"])
    assert args.serve_args == ["M", "--port", "1", "-tp", "2", "--weird=x", "--help"]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with OPENER.open(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _post(url: str, body: object, raw: bytes | None = None) -> tuple[int, bytes]:
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with OPENER.open(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_http_surface_and_clean_shutdown(tmp_path: Path) -> None:
    port = free_port()
    argv_file = tmp_path / "argv.json"
    argv = [sys.executable, "-m", "msopt.cli.serve", "M", "--port", str(port), "--served-model-name",
            "q", "--time-scale", "0.01", "--startup-delay", "0.5", "--max-model-len", "100", "--foo"]
    with start_process(argv, {"MSOPT_SIM_SERVE_ARGV_FILE": str(argv_file)}, tmp_path / "s.log") as proc:
        deadline = time.monotonic() + 20
        status = None
        while time.monotonic() < deadline:
            try:
                status, _ = _get(f"http://127.0.0.1:{port}/health")
                break
            except OSError:
                time.sleep(0.05)
        assert status == 503  # still "loading"
        wait_ready("127.0.0.1", port, "/health", 20, proc, interval=0.1)
        assert json.loads(argv_file.read_text()) == argv[3:]
        base = f"http://127.0.0.1:{port}"
        code, body = _get(base + "/v1/models")
        assert code == 200 and json.loads(body)["data"][0]["id"] == "q"

        code, body = _post(base + "/v1/completions", {"model": "q", "prompt": "a b", "max_tokens": 3,
                                                     "stream": True})
        lines = [ln for ln in body.decode().split("\n\n") if ln]
        assert code == 200 and lines[-1] == "data: [DONE]" and len(lines) == 4
        assert json.loads(lines[-2][5:])["choices"][0]["finish_reason"] == "length"

        code, body = _post(base + "/v1/chat/completions",
                           {"model": "M", "messages": [{"role": "user", "content": "hi"}],
                            "max_tokens": 2, "stream": True, "stream_options": {"include_usage": True}})
        chunks = [json.loads(ln[5:]) for ln in body.decode().split("\n\n") if ln and ln != "data: [DONE]"]
        assert chunks[0]["choices"][0]["delta"]["content"] == " tok"
        assert chunks[-1]["usage"]["completion_tokens"] == 2

        code, body = _post(base + "/v1/completions", {"model": "q", "prompt": "x", "max_tokens": 2})
        assert code == 200 and json.loads(body)["choices"][0]["text"] == " tok tok"
        assert _post(base + "/v1/completions", None, raw=b"{no")[0] == 400
        assert _post(base + "/v1/completions", {"model": "nope", "prompt": "x"})[0] == 404
        assert _post(base + "/v1/completions", {"prompt": "x", "max_tokens": 0})[0] == 400
        # as vLLM 0.32.0: a prompt that fits is served with max_tokens cut to the context left
        # (vllm/entrypoints/serve/utils/api_utils.py:169-205); a prompt that fills the context is refused
        code, body = _post(base + "/v1/completions", {"prompt": "x", "max_tokens": 200})
        usage = json.loads(body)["usage"]
        assert code == 200 and usage["completion_tokens"] == 100 - usage["prompt_tokens"] < 200
        for words in (100, 150):
            code, body = _post(base + "/v1/completions", {"prompt": " ".join(["x"] * words), "max_tokens": 1})
            assert code == 400 and (b"maximum context length is 100" in body or b"maximum model length of 100" in body)

        proc.popen.send_signal(signal.SIGTERM)
        assert proc.wait(10) is not None
    assert not _alive(proc.pid)


def test_requests_beyond_max_num_seqs_queue(tmp_path: Path) -> None:
    """max_num_seqs 1: the second of two concurrent requests waits for the first to finish."""
    import asyncio

    from msopt.benchmarks.builtin import LoadParams, run_load

    port = free_port()
    argv = [sys.executable, "-m", "msopt.cli.serve", "M", "--port", str(port), "--max-num-seqs", "1",
            "--time-scale", "1"]
    with start_process(argv, {}, tmp_path / "s.log") as proc:
        wait_ready("127.0.0.1", port, "/health", 20, proc, interval=0.1)
        p = LoadParams(url=f"http://127.0.0.1:{port}", model="M", num_prompts=2, input_len=8,
                       output_len=6, concurrency=2)
        summary, records = asyncio.run(run_load(p, log=lambda m: None))
    assert summary["success_rate"] == 1.0
    first, second = sorted(records, key=lambda r: r.ttft)
    # one request: ttft ~0.02 s + 5 steps of ~0.02 s; the queued one waits all of that
    assert second.ttft >= first.latency * 0.9 and second.ttft > 0.1
