"""The report's workload panel and its predicted-against-measured table (issue 35 item 5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msopt.config import load_settings
from msopt.evaluate.results import EvaluationResult
from msopt.report import write_report
from msopt.report.data import load_run
from msopt.report.workload import WORKLOAD_PNG, WorkloadPanel, predicted_rows, workload_panel
from msopt.run.driver import Driver
from msopt.run.pool import InProcessPool
from msopt.run.store import RunStore
from msopt.run.validate import load
from msopt.space import SearchSpace

FIELDS = """
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 2
max = 12
dtype = "int"
value = 8
"""


def mooncake(path: Path) -> Path:
    # 30 requests over 29 s; every prompt starts with blocks 1, 2 of 512 tokens: ceiling 29 * 2 / 90
    path.write_text("".join(json.dumps({"timestamp": 1000 * i, "input_length": 1400 + 10 * i, "output_length": 20,
                                        "hash_ids": [1, 2, 100 + i]}) + "\n" for i in range(30)), encoding="utf-8")
    return path


def test_a_simulated_run_on_a_trace_shows_its_workload_and_predicted_hits(tmp_path: Path) -> None:
    mooncake(tmp_path / "t.jsonl")
    cfg = tmp_path / "c.toml"
    cfg.write_text('simulate = true\nn_particles = 2\niters = 1\n[data_storage]\npso_top_k = 0\n'
                   '[workload]\ntrace = "t.jsonl"\ntime_scale = 4\n[simulator]\nhardware = "h100-sxm"\n'
                   'model = "qwen3-8b"\n' + FIELDS, encoding="utf-8")
    settings = load(cfg)
    store = RunStore.create(tmp_path / "runs", settings.config)
    pool = InProcessPool(settings.config, size=1)
    try:
        Driver(settings.config, pool, store=store).run()
    finally:
        pool.close()
    store.close()
    panel = workload_panel(load_run(store.run_dir))
    assert isinstance(panel, WorkloadPanel) and len(panel.window.requests) == 30
    assert panel.summary.prefix_ceiling == 58 / 90 and panel.measured == ()
    assert panel.predicted and all(0 < p <= 58 / 90 for p in panel.predicted)   # the simulator's hits
    page = write_report(store.run_dir, export=False).read_text(encoding="utf-8")
    assert "<h2>Workload</h2>" in page and "prefix reuse ceiling 64.4% of 512-token blocks" in page
    assert "prefix cache hit rate the simulator predicts: median" in page
    assert (store.run_dir / WORKLOAD_PNG).read_bytes().startswith(b"\x89PNG")
    assert "Predicted against measured" not in page                   # a simulated run measures nothing
    (tmp_path / "t.jsonl").unlink()                                   # the trace moved away since
    page = write_report(store.run_dir, export=False).read_text(encoding="utf-8")
    assert "the workload panel is left out" in page and "no such file" in page


def test_a_real_run_lists_every_prediction_beside_its_measurement(tmp_path: Path) -> None:
    mooncake(tmp_path / "t.jsonl")
    cfg = tmp_path / "c.toml"
    cfg.write_text('benchmark = "builtin"\n[workload]\ntrace = "t.jsonl"\n' + FIELDS, encoding="utf-8")
    settings = load_settings(str(cfg), environ={})
    space = SearchSpace.from_settings(settings)
    store = RunStore.create(tmp_path / "runs", settings.config, run_id="real")
    d = space.decode(space.default_position(), None)
    measured = {"generate_speed": 100.0, "time_to_first_token": 0.2, "time_per_output_token": 0.01,
                "success_rate": 1.0, "throughput": 2.0, "prefix_cache_hit_rate": 0.5}
    predicted = {"generate_speed": 110.0, "time_to_first_token": 0.15, "time_per_output_token": 0.01,
                 "success_rate": 1.0, "throughput": 2.0, "prefix_cache_hit_rate": 0.45, "fitness": 0.1}
    for i in range(2):
        store.append(EvaluationResult(eval_id=i, phase="baseline" if i == 0 else "search", particle=0, iteration=i,
                                      position_in=list(d.position), position=list(d.position), values=d.values,
                                      metrics=measured, fitness=0.1, predicted=predicted if i else None))
    store.close()
    data = load_run(store.run_dir)
    (row,) = predicted_rows(data)                                     # the baseline had no prediction
    assert row["eval_id"] == 1 and row["generate_speed"] == pytest.approx((110.0, 100.0, 0.1))
    assert row["prefix_cache_hit_rate"][2] == pytest.approx(-0.05)    # points, not relative
    page = write_report(store.run_dir, export=False).read_text(encoding="utf-8")
    assert "Predicted against measured" in page and "+10.0 %" in page and "-25.0 %" in page
    assert "-5.0 pt" in page and "<td>150</td><td>200</td>" in page   # TTFT in ms
    assert "prefix cache hit rate measured by the server: median 50.0%" in page
    assert "prefix cache hit rate the simulator predicts: median 45.0%" in page
