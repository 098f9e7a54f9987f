"""The search's replay is representative of the trace (issue 52 item 2): a sample of ``n`` requests is
windows across the whole trace, its busy and quiet parts and its long and short prompts in proportion,
never the first ``n`` requests; the run says what it replays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from msopt.evaluate.workload import replay_lines
from msopt.run.validate import load
from msopt.sim import workload_from_mapping
from msopt.workload.replay import describe_replay, open_window, replay_arrivals, replay_indices, sample_windows


def day(tmp_path: Path) -> Path:
    """A 300 s trace: a quiet first 200 s (1 request every 2 s, 100-token prompts), then a busy 100 s
    (4 requests/s in bursts of 4 at one time, 3000-token prompts). 100 + 400 = 500 requests."""
    rows = [(2.0 * i, 100, 10) for i in range(100)]
    rows += [(200.0 + j + 0.01 * b, 3000, 20) for j in range(100) for b in range(4)]
    p = tmp_path / "day.csv"
    p.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{t:.2f},{i},{o}\n" for t, i, o in rows),
                 encoding="utf-8")
    return p


def test_a_sample_is_windows_across_the_trace_in_proportion(tmp_path):
    w = open_window({"path": str(day(tmp_path))}, "t")
    arr = w.arrival_array()
    idx, times = replay_indices(arr, 100)
    assert len(idx) == 100 and len(set(idx.tolist())) == 100      # each request at most once
    # the quiet half holds 100 of the 500 requests: a fifth of the sample, not all of it (the first 100 are)
    quiet = int((arr[idx] < 200).sum())
    assert quiet == 20
    assert np.mean([w.requests[i].input_tokens for i in idx]) == pytest.approx(0.2 * 100 + 0.8 * 3000)
    # the sample's mean rate is the trace's: 100 of 500 requests in a fifth of its 299.03 s
    assert (len(times) - 1) / times[-1] == pytest.approx(499 / (arr[-1] - arr[0]), rel=0.05)
    # the busy windows keep the trace's bursts: 4 requests 10 ms apart, then a second's gap
    busy = np.round(np.diff(times[quiet:]), 6)
    assert set(busy.tolist()) == {0.01, 0.97} and (busy == 0.01).sum() == 59     # 3 of 4 of its 79 gaps, as in the trace
    wins = sample_windows(arr, 100)
    assert len(wins) == 3 and all(d == pytest.approx(wins[0][3], rel=0.01) for *_, d in wins)  # 100 // 32 slices
    # the builtin benchmark and vllm bench serve's timed_trace replay the same requests
    assert [r.row for r in w.pick(100)] == [w.requests[i].row for i in idx]
    assert w.arrivals(100).tolist() == times.tolist()


def test_the_whole_window_or_more_is_the_trace_in_order(tmp_path):
    w = open_window({"path": str(day(tmp_path))}, "t")
    arr = w.arrival_array()
    idx, times = replay_indices(arr, 500)
    assert idx.tolist() == list(range(500)) and times.tolist() == (arr - arr[0]).tolist()
    assert replay_indices(arr, 502)[0].tolist()[-2:] == [0, 1]        # repeated when more are asked for


def test_a_rate_rescales_a_sample_to_it(tmp_path):
    arr = open_window({"path": str(day(tmp_path))}, "t").arrival_array()
    probe = replay_arrivals(arr, 100, request_rate=10.0)
    assert 99 / probe[-1] == pytest.approx(10.0)
    assert replay_arrivals(arr, 100, request_rate=float("inf")).tolist() == [0.0] * 100


def test_requests_at_one_time_are_sampled_evenly(tmp_path):
    p = tmp_path / "burst.csv"
    p.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"5,{10 + i},1\n" for i in range(10)),
                 encoding="utf-8")
    arr = open_window({"path": str(p)}, "t").arrival_array()
    idx, times = replay_indices(arr, 4)
    assert idx.tolist() == [0, 3, 6, 9] and times.tolist() == [0.0] * 4


def test_the_simulator_replays_the_same_sample(tmp_path):
    path = str(day(tmp_path))
    wl = workload_from_mapping({"num_prompts": 100, "trace": {"path": path}})
    w = open_window({"path": path}, "t")
    idx, times = replay_indices(w.arrival_array(), 100)
    ins, _ = wl.sample_lengths(np.random.default_rng(0))
    assert ins.tolist() == [w.requests[i].input_tokens for i in idx]
    assert wl.sample_arrivals(np.random.default_rng(0)).tolist() == times.tolist()


def test_the_run_says_what_it_replays(tmp_path):
    day(tmp_path)
    cfg = tmp_path / "c.toml"
    cfg.write_text('simulate = true\nsample_size = 100\n[workload]\ntrace = "day.csv"\n', encoding="utf-8")
    lines = replay_lines(load(cfg).config)
    assert lines[0] == ("replay: the search replays 100 of the trace's 500 requests (20.0%) in 3 window(s) across "
                        "its 299 s, 60 s together (20.0% of the span), never its first requests alone")
    assert lines[1].startswith("replay:   windows (s from the trace's start): ")
    assert lines[2].startswith("replay:   rate 1.6") and "against the trace's 1.67" in lines[2]
    assert lines[-1] == ("replay: the re-measurements and the capacity probes, which decide the recommendation, "
                         "replay the whole window: 500 requests over 299 s")
    w = open_window({"path": str(tmp_path / "day.csv")}, "t")
    assert describe_replay(w, 500) == ["the search replays the whole window: 500 requests over 299 s"]


def test_a_real_run_whose_window_outlasts_an_evaluation_is_told(tmp_path):
    day(tmp_path)
    cfg = tmp_path / "c.toml"
    cfg.write_text('simulate = false\nbenchmark = "builtin"\nsample_size = 100\nparticles_time_out = 250\n'
                   '[workload]\ntrace = "day.csv"\n', encoding="utf-8")
    lines = replay_lines(load(cfg).config)
    assert lines[-1].startswith("warning: the whole window lasts 299 s, at least particles_time_out (250 s)")
