"""The workload as one resolved object (msopt/workload/resolved.py): a trace's window and summary from one pass
over the file, what is derived from the window computed once, and the ``[workload]`` keys declared once."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msopt.errors import ConfigError
from msopt.sim import workload_from_mapping
from msopt.workload import replay as _replay
from msopt.workload.replay import open_window
from msopt.workload.resolved import ResolvedWorkload
from msopt.workload.summary import trace_summary
from msopt.workload.table import KEY_DOCS, SYNTHETIC_KEYS, TRACE_KEYS, WorkloadSettings, sim_trace, workload_settings
from msopt.workload.trace import Trace


def trace(tmp_path: Path) -> Path:
    rows = [(0.0, 500, 20, "a"), (0.5, 900, 10, "b"), (0.5, 300, 40, "a"), (2.0, 1200, 5, "c"), (4.0, 700, 30, "b")]
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,input_tokens,output_tokens,session_id\n"
                 + "".join(f"{t},{i},{o},{s}\n" for t, i, o, s in rows), encoding="utf-8")
    return p


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Whole reads of each trace file (``Trace.requests``: one pass over its rows)."""
    seen: Counter[str] = Counter()
    original = Trace.requests

    def counted(self: Trace, *args: Any, **kwargs: Any) -> Iterator[Any]:
        seen[str(self.path)] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Trace, "requests", counted)
    return seen


def test_a_trace_resolves_in_one_pass_to_the_window_and_summary_of_two(tmp_path: Path, passes: Counter[str]) -> None:
    path = trace(tmp_path)
    wl = workload_settings({"trace": str(path), "time_scale": 2.0, "max_model_len": 1000, "length_policy": "scale"})
    resolved = ResolvedWorkload.resolve(wl)
    # the scale policy's first pass finds the longest request inside Trace.requests: still one call
    assert passes == {str(path): 1}
    assert resolved.is_trace and resolved.path == str(path)
    assert resolved.window == open_window(sim_trace(wl), "t")             # what the simulator read on its own
    assert resolved.summary == trace_summary(wl.open_trace())              # what validate read on its own
    assert resolved.replay_rate == round(4 / 2.0, 6)                       # 4 gaps over 4 s, twice as fast
    assert resolved.trace_rate == pytest.approx(1.0)                       # the trace's own, at time scale 1
    assert resolved.load()["num_prompts"] == 5
    assert pickle.loads(pickle.dumps(resolved)) == resolved


def test_a_synthetic_workload_reads_nothing(tmp_path: Path, passes: Counter[str]) -> None:
    resolved = ResolvedWorkload.resolve(workload_settings({"input_len": 100, "concurrency": 4}))
    assert not resolved.is_trace and resolved.window is None and resolved.summary is None
    assert resolved.load() == {} and resolved.trace_rate is None and resolved.replay_table() is None
    assert passes == {}


def test_a_bad_row_is_one_line_from_resolve(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n0,5,5\n1,5,x\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"row 3, column 'output_tokens'"):
        ResolvedWorkload.resolve(workload_settings({"trace": str(tmp_path / "t.csv")}))


def test_the_simulator_replays_the_window_without_reading_or_deriving_it_again(
        tmp_path: Path, passes: Counter[str], monkeypatch: pytest.MonkeyPatch) -> None:
    resolved = ResolvedWorkload.resolve(workload_settings({"trace": str(trace(tmp_path))}))
    assert resolved.window is not None
    derived = Counter[int]()
    original = _replay.replay_indices

    def counted(arrivals: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        derived[n] += 1
        return original(arrivals, n)

    monkeypatch.setattr(_replay, "replay_indices", counted)
    base = workload_from_mapping({"num_prompts": 4}).replaying(resolved.window)
    rng = np.random.default_rng(0)
    for wl in (base, base.with_overrides({"request_rate": 8.0}), base.with_overrides({"concurrency": 2})):
        assert wl.window is resolved.window  # an override keeps the one window (the prior's per prediction)
        assert wl.sample_lengths(rng)[0].tolist() == [500, 900, 300, 1200]
        wl.sample_arrivals(rng)
        assert wl.sample_sessions() == ["a", "b", "a", "c"]
    # the sample of 4 is sent at [0, 0.5, 0.5, 2] s: its own 1.5 req/s rescaled to 8
    assert base.with_overrides({"request_rate": 8.0}).sample_arrivals(rng).tolist() == pytest.approx(
        [0.0, 0.09375, 0.09375, 0.375])
    assert passes == {str(resolved.path): 1} and derived == {4: 1}


def test_a_trace_table_given_to_the_simulator_is_read_once_per_workload_and_its_overrides(
        tmp_path: Path, passes: Counter[str]) -> None:
    wl = workload_from_mapping({"num_prompts": 5, "trace": {"path": str(trace(tmp_path))}})
    rng = np.random.default_rng(0)
    wl.sample_lengths(rng)
    for _ in range(3):  # as the prior's predictions override the load of one workload
        wl.with_overrides({"request_rate": 2.0}).sample_arrivals(rng)
    assert passes == {str(tmp_path / "t.csv"): 1}


def test_each_workload_key_is_declared_once_with_its_type_default_rule_and_doc() -> None:
    declared = {f.name: f for f in fields(WorkloadSettings) if f.name != "where"}
    assert list(declared) == [*SYNTHETIC_KEYS, "trace", *TRACE_KEYS[1:]]
    assert set(KEY_DOCS) == set(declared)
    for name, f in declared.items():
        assert f.type and f.metadata["rule"] and f.metadata["doc"] and callable(f.metadata["ok"]), name
        assert getattr(WorkloadSettings(), name) == f.default
    with pytest.raises(ConfigError, match=r"'time_scale' must be a number above 0 \(2: twice the trace's rate\)"):
        workload_settings({"trace": "t.csv", "time_scale": 0})
