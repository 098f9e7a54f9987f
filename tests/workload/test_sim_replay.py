"""The simulator replays a [workload] trace: each request's lengths and send time are the trace's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from msopt.config import load_settings
from msopt.errors import ConfigError
from msopt.run.validate import load
from msopt.sim import EngineKnobs, simulate, workload_from_mapping


def trace(tmp_path: Path) -> Path:
    rows = [(0.0, 500, 20), (0.5, 900, 10), (0.5, 300, 40), (2.0, 1200, 5), (4.0, 700, 30)]
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{t},{i},{o}\n" for t, i, o in rows),
                 encoding="utf-8")
    return p


def test_lengths_and_arrivals_are_the_traces(tmp_path):
    wl = workload_from_mapping({"num_prompts": 5, "trace": {"path": str(trace(tmp_path))}})
    rng = np.random.default_rng(0)
    ins, outs = wl.sample_lengths(rng)
    assert ins.tolist() == [500, 900, 300, 1200, 700] and outs.tolist() == [20, 10, 40, 5, 30]
    assert wl.sample_arrivals(rng).tolist() == [0.0, 0.5, 0.5, 2.0, 4.0]


def test_a_rate_scales_the_arrivals_and_more_prompts_repeat_the_trace(tmp_path):
    base = {"trace": {"path": str(trace(tmp_path)), "time_scale": 2.0}}
    rng = np.random.default_rng(0)
    halved = workload_from_mapping({**base, "num_prompts": 5})
    assert halved.sample_arrivals(rng).tolist() == [0.0, 0.25, 0.25, 1.0, 2.0]   # time_scale 2
    probe = halved.with_overrides({"request_rate": 4.0})     # the trace's own rate at time_scale 2 is 2 req/s
    assert probe.sample_arrivals(rng).tolist() == [0.0, 0.125, 0.125, 0.5, 1.0]
    longer = workload_from_mapping({**base, "num_prompts": 7})
    # again after the last arrival and one mean gap (2 s / 4 gaps = 0.5 s)
    assert longer.sample_arrivals(rng).tolist() == [0.0, 0.25, 0.25, 1.0, 2.0, 2.5, 2.75]
    assert longer.sample_lengths(rng)[0].tolist() == [500, 900, 300, 1200, 700, 500, 900]


def test_the_simulator_sends_at_the_trace_times(tmp_path):
    res = simulate(EngineKnobs(engine="vllm"), "h100-sxm", "qwen3-8b",
                   {"num_prompts": 5, "trace": {"path": str(trace(tmp_path))}})
    assert res.success_rate == 1.0
    send = res.requests["send"]
    assert np.allclose(send - send[0], [0.0, 0.5, 0.5, 2.0, 4.0], atol=0.01)    # the client's own delays aside
    assert res.requests["input_len"].tolist() == [500, 900, 300, 1200, 700]


def test_validate_hands_the_trace_to_the_simulator(tmp_path):
    trace(tmp_path)
    cfg = tmp_path / "c.toml"
    cfg.write_text('simulate = true\n[workload]\ntrace = "t.csv"\nwindow = [0, 2]\n', encoding="utf-8")
    checked = load(cfg)
    # no key copied: [simulator.workload] holds what the files wrote, and the simulator reads the
    # trace's load from the resolved object (its setup, parsed once)
    assert checked.config.simulator.table["workload"] == load_settings(None).config.simulator.table["workload"]
    assert checked.simulator is not None
    sim = checked.simulator.table["workload"]
    assert "trace" not in sim
    assert checked.resolved is not None and checked.resolved.replay_table() == {
        "path": str(tmp_path / "t.csv"), "window": [0.0, 2.0], "time_scale": 1.0, "length_policy": "clip"}
    assert "input_len" not in sim and sim["num_prompts"] == 4 and sim["request_rate"] == 1.5
    wl = workload_from_mapping(sim).replaying(checked.parsed.workload.window)  # as SimRunner hands it on
    assert wl.sample_lengths(np.random.default_rng(0))[0].tolist() == [500, 900, 300, 1200]


def test_a_bad_trace_table_is_one_line():
    with pytest.raises(ConfigError) as exc:
        workload_from_mapping({"trace": {"file": "x.csv"}})
    assert "simulator.workload.trace: must be a table with path" in str(exc.value)


@pytest.mark.slow
def test_a_simulated_run_tunes_on_the_trace(tmp_path):
    import subprocess
    import sys

    rows = [{"timestamp": 250 * i, "input_length": 1500 + 37 * i, "output_length": 40 + i % 7,
             "hash_ids": [0, 1, 100 + i]} for i in range(60)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "c.toml").write_text('simulate = true\nn_particles = 2\niters = 1\n[simulator]\nhardware = "h100-sxm"\n'
                                     '[workload]\ntrace = "t.jsonl"\ntime_scale = 2\n[data_storage]\npso_top_k = 1\n',
                                     encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "--plain", "--no-ray", "-c",
                          str(tmp_path / "c.toml"), "-o", str(tmp_path / "runs")], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2], timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (run,) = (tmp_path / "runs").iterdir()
    records = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
    assert records and {r["num_prompts"] for r in records} == {60}       # the trace's requests, all of them
    assert all(r["metrics"]["success_rate"] == 1.0 for r in records)
    saved = (run / "config.toml").read_text()
    assert f'trace = "{tmp_path / "t.jsonl"}"' in saved and "path =" not in saved  # [workload] alone names it


def test_the_journal_keeps_what_the_simulated_client_sent(tmp_path):
    from msopt.evaluate import Evaluator
    from msopt.evaluate.results import EvalRequest
    from msopt.metrics import SENT_INPUT_MEAN, SENT_OUTPUT_MEAN, SENT_REQUESTS, SENT_SPAN

    trace(tmp_path)
    cfg = tmp_path / "c.toml"
    cfg.write_text('simulate = true\n[workload]\ntrace = "t.csv"\nwindow = [0, 2]\ntime_scale = 2.0\n',
                   encoding="utf-8")
    checked = load(cfg, overrides={"simulate": True}, search=False)
    result = Evaluator(checked.config, simulate=True).evaluate(
        EvalRequest(0, "baseline", None, 0, tuple(checked.space.default_position().tolist())))
    line = json.loads(json.dumps(result.to_json("r")))["metrics"]
    # the window's four requests, sent over its 2 s at twice the speed (the client's own delays aside)
    assert line[SENT_REQUESTS] == 4 and line[SENT_SPAN] == pytest.approx(1.0, abs=0.05)
    assert line[SENT_INPUT_MEAN] == pytest.approx((500 + 900 + 300 + 1200) / 4)
    assert line[SENT_OUTPUT_MEAN] == pytest.approx((20 + 10 + 40 + 5) / 4)
    assert "send_late_p99_s" not in line            # a simulated send is never late: not reported as measured
