"""The builtin load generator against a real sim-serve process."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import subprocess
from pathlib import Path

import pytest

from msopt.benchmarks import get_benchmark
from msopt.benchmarks.builtin import (
    REQUESTS_FILE,
    RESULT_FILE,
    LoadParams,
    arrival_gaps,
    run_load,
    synthetic_prompts,
)
from msopt.engines import LaunchSpec
from msopt.errors import ConfigError, EvaluationError
from msopt.evaluate.results import METRICS
from msopt.launch.ports import free_port
from msopt.launch.render import Candidate
from msopt.metrics import PERCENTILES


def test_synthetic_prompts_are_seeded_and_sized() -> None:
    a = synthetic_prompts(3, 50, seed=1)
    assert a == synthetic_prompts(3, 50, seed=1) != synthetic_prompts(3, 50, seed=2)
    assert all(len(p.split()) == 50 for p in a) and len(set(a)) == 3


@pytest.mark.parametrize("endpoint", ["/v1/completions", "/v1/chat/completions"])
def test_closed_loop(sim_server: LaunchSpec, tmp_path: Path, endpoint: str) -> None:
    section = {"endpoint": endpoint, "input_len": 64, "output_len": 8, "concurrency": 8}
    m = get_benchmark("builtin").run(sim_server, Candidate({}, [], section), num_prompts=16, load={},
                                     result_dir=tmp_path, log_path=tmp_path / "b.log", timeout=60)
    # and what it sent, but the prompts' token counts (the server's tokenizer's) and lateness (not a replay)
    sent = {"sent_requests", "sent_span_s", "sent_output_mean", "duration"}
    assert set(m) == set(METRICS) | set(PERCENTILES) | sent
    assert (m["sent_requests"], m["sent_output_mean"]) == (16, 8) and 0 <= m["sent_span_s"] < m["duration"]
    assert m["success_rate"] == 1.0 and all(m[k] > 0 for k in METRICS)
    assert m["ttft_p50"] <= m["ttft_p90"] <= m["ttft_p95"] <= m["ttft_p99"]  # what [slo] percentiles hold
    assert m["tpot_p50"] <= m["tpot_p99"]
    summary = json.loads((tmp_path / RESULT_FILE).read_text())
    assert summary["completed"] == 16 and summary["total_output_tokens"] == 16 * 8
    records = [json.loads(line) for line in (tmp_path / REQUESTS_FILE).read_text().splitlines()]
    assert len(records) == 16 and all(r["success"] and r["output_tokens"] == 8 for r in records)
    assert all(r["ttft"] > 0 and r["latency"] >= r["ttft"] and r["tpot"] > 0 for r in records)


def test_arrival_gaps_are_seeded_poisson() -> None:
    gaps = arrival_gaps(20001, 50.0, seed=3)
    assert gaps == arrival_gaps(20001, 50.0, seed=3) != arrival_gaps(20001, 50.0, seed=4)
    assert len(gaps) == 20000 and min(gaps) >= 0
    assert sum(gaps) / len(gaps) == pytest.approx(0.02, rel=0.03)
    assert arrival_gaps(4, math.inf, seed=0) == [0.0, 0.0, 0.0] and arrival_gaps(0, 1.0, 0) == []


def test_poisson_rate_paces_the_sends(sim_server: LaunchSpec) -> None:
    p = LoadParams(url=sim_server.base_url, model="qwen3-8b", num_prompts=12, input_len=8,
                   output_len=2, concurrency=None, request_rate=40.0, seed=3)
    summary, records = asyncio.run(run_load(p, log=lambda m: None))
    starts = [r.start for r in records]
    assert summary["success_rate"] == 1.0 and starts == sorted(starts)
    expected = sum(arrival_gaps(12, 40.0, seed=3))
    assert expected * 0.9 < starts[-1] < expected + 1.0
    assert all(b - a >= g - 0.002 for (a, b), g in zip(itertools.pairwise(starts), arrival_gaps(12, 40.0, 3)))


def test_non_streaming_and_fields_drive_load(sim_server: LaunchSpec, tmp_path: Path) -> None:
    from msopt.space.fields import parse_field

    conc = parse_field({"name": "CONCURRENCY", "config_position": "env", "dtype": "int", "min": 1,
                        "max": 64}, source="t", section="vllm", index=0)
    section = {"stream": False, "input_len": 16, "output_len": 4}
    m = get_benchmark("builtin").run(sim_server, Candidate({"CONCURRENCY": 2}, [conc], section), num_prompts=4,
                                     load={}, result_dir=tmp_path, log_path=tmp_path / "b.log",
                                     timeout=60)
    assert m["success_rate"] == 1.0
    assert json.loads((tmp_path / RESULT_FILE).read_text())["params"]["concurrency"] == 2


def test_unreachable_server_counts_failures(tmp_path: Path) -> None:
    spec = LaunchSpec(engine="vllm", argv=("x",), port=free_port(), served_model_name="m")
    m = get_benchmark("builtin").run(spec, Candidate({}, [], {"input_len": 4, "output_len": 2}), num_prompts=3,
                                     load={}, result_dir=tmp_path, log_path=tmp_path / "b.log",
                                     timeout=30)
    assert m["success_rate"] == 0.0 and m["time_to_first_token"] is None
    assert "Connect" in (tmp_path / "b.log").read_text()


def test_wrong_model_is_a_failed_request(sim_server: LaunchSpec, tmp_path: Path) -> None:
    spec = LaunchSpec(engine="vllm", argv=("x",), port=sim_server.port, served_model_name="other")
    m = get_benchmark("builtin").run(spec, Candidate({}, [], {"input_len": 4, "output_len": 2}), num_prompts=2,
                                     load={}, result_dir=tmp_path, log_path=tmp_path / "b.log",
                                     timeout=30)
    assert m["success_rate"] == 0.0 and "HTTP 404" in (tmp_path / "b.log").read_text()


def test_timeout_is_an_evaluation_error(sim_server: LaunchSpec, tmp_path: Path) -> None:
    with pytest.raises(EvaluationError, match="within 0.2 s"):
        get_benchmark("builtin").run(sim_server, Candidate({}, [], {"input_len": 8, "output_len": 500,
                                                          "concurrency": 1}),
                                     num_prompts=50, load={}, result_dir=tmp_path,
                                     log_path=tmp_path / "b.log", timeout=0.2)


def test_runs_inside_a_running_event_loop(sim_server: LaunchSpec, tmp_path: Path) -> None:
    async def actor_method() -> dict:
        return get_benchmark("builtin").run(sim_server, Candidate({}, [], {"input_len": 4, "output_len": 2}),
                                            num_prompts=2, load={}, result_dir=tmp_path,
                                            log_path=tmp_path / "b.log", timeout=30)

    assert asyncio.run(actor_method())["success_rate"] == 1.0


def test_child_process_form(sim_server: LaunchSpec, tmp_path: Path) -> None:
    argv, _ = get_benchmark("builtin").render(Candidate({}, [], {"input_len": 4, "output_len": 2,
                                                         "request_rate": "inf"}),
                                                server=sim_server, num_prompts=3, load={},
                                                result_dir=tmp_path)
    subprocess.run(list(argv), check=True, capture_output=True, timeout=60)
    m = get_benchmark("builtin").parse(tmp_path, tmp_path / "log")
    assert m["success_rate"] == 1.0


@pytest.mark.parametrize(("section", "match"), [
    ({"endpoint": "/v1/embeddings"}, "endpoint"),
    ({"input_len": 0}, "input_len"),
    ({"concurrency": None, "request_rate": "inf"}, "concurrency"),
    ({"request_timeout": -1}, "request_timeout"),
    ({"stream": "yes"}, "stream"),
])
def test_bad_sections(section: dict, match: str, sim_server: LaunchSpec, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=match):
        get_benchmark("builtin").run(sim_server, Candidate({}, [], section), num_prompts=1, load={},
                                     result_dir=tmp_path, log_path=tmp_path / "b.log", timeout=5)


def test_extra_body_from_frozen_settings(sim_server: LaunchSpec, tmp_path: Path, write_toml) -> None:
    from msopt.config import load_settings

    settings = load_settings(write_toml("""
[builtin]
input_len = 4
output_len = 2
[builtin.extra_body]
temperature = 0.5
stop = ["x"]
"""))
    m = get_benchmark("builtin").run(sim_server, Candidate({}, [], settings.section("builtin")), num_prompts=2,
                                     load={}, result_dir=tmp_path, log_path=tmp_path / "b.log",
                                     timeout=30)
    assert m["success_rate"] == 1.0
