"""Capacity on a trace (issue 35 item 4): the capacity search scales the trace's rate (its send times
rescaled to each probe's rate), reports the rate found as req/s and as a multiple of the trace's own
rate, and sizes a deployment for ``[capacity] target_rate``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from msopt.errors import ConfigError
from msopt.run.capacity import sizing, sizing_pick
from msopt.run.driver import Driver
from msopt.run.pool import InProcessPool
from msopt.run.records import capacity_line, capacity_record, sizing_line
from msopt.run.validate import load

CFG = """
simulate = true
n_particles = 2
iters = 1
seed = 1
[slo]
ttft = "mean<0.5s"
tpot = "mean<50ms"
[data_storage]
pso_top_k = 2
[capacity]
{capacity}
[workload]
trace = "t.csv"
time_scale = 2
[simulator]
hardware = "atlas-800i-a2"
model = "qwen3-8b"
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 2
max = 12
dtype = "int"
value = 8
[[vllm.target_field]]
name = "tp"
config_position = "--tensor-parallel-size"
min = 0
max = 1
dtype = "enum"
dtype_param = [1, 2]
value = 1
"""


def config(tmp_path: Path, capacity: str) -> Path:
    # 40 requests, one every 0.5 s: 2 req/s of its own, 4 req/s at time_scale 2
    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n" + "".join(
        f"{0.5 * i},{400 + 37 * i % 200},16\n" for i in range(40)), encoding="utf-8")
    path = tmp_path / "c.toml"
    path.write_text(CFG.format(capacity=capacity), encoding="utf-8")
    return path


def test_target_rate_in_req_s_or_as_a_multiple_of_the_traces_rate(tmp_path: Path) -> None:
    o = load(config(tmp_path, 'target_rate = "3x"')).capacity
    assert o.enabled and o.load == "request_rate" and o.start_load == pytest.approx(4.0)  # the replayed rate
    assert o.trace_rate == pytest.approx(2.0) and o.target_multiple == 3.0 and o.target_rate == pytest.approx(6.0)
    o = load(config(tmp_path, "target_rate = 10")).capacity
    assert o.target_rate == 10.0 and o.target_multiple is None


@pytest.mark.parametrize(("capacity", "match"), [
    ('target_rate = "x"', "requests/s above 0 or a multiple"),
    ("target_rate = -1", "requests/s above 0"),
    ('target_rate = 5\nload = "concurrency"', r"set \[capacity\] load = \"request_rate\""),
    ("target_rate = 5\nenabled = false", "enabled = false turns off"),
])
def test_bad_targets_are_one_line_each(tmp_path: Path, capacity: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as exc:
        load(config(tmp_path, capacity))
    assert str(exc.value).startswith(str(tmp_path / "c.toml")) and "\n" not in str(exc.value)


def test_a_multiple_needs_a_trace(tmp_path: Path) -> None:
    path = config(tmp_path, 'target_rate = "2x"')
    path.write_text(path.read_text().replace('trace = "t.csv"\ntime_scale = 2', "request_rate = 4"))
    with pytest.raises(ConfigError, match="multiple of the trace's rate, and \\[workload\\] has no trace"):
        load(path)


def test_sizing_counts_replicas_and_devices() -> None:
    from msopt.run.capacity import CapacityOptions

    o = CapacityOptions(enabled=True, trace_rate=2.0, target_rate=9.0, target_multiple=4.5)
    assert sizing({"sustainable_load": 4.0}, o, 2) == {"trace_multiple": 2.0, "target_rate": 9.0,
                                                      "target_multiple": 4.5, "replicas": 3, "devices": 6}
    assert sizing({"sustainable_load": 4.5}, o, 2)["replicas"] == 2          # exactly the target: no spare
    assert sizing({"sustainable_load": 0.0}, o, 2)["devices"] is None
    configs = [{"rank": 0, "eval_id": 5, "sustainable_load": 4.0, **sizing({"sustainable_load": 4.0}, o, 2)},
               {"rank": 1, "eval_id": 6, "sustainable_load": 5.0, **sizing({"sustainable_load": 5.0}, o, 2)},
               {"rank": 2, "eval_id": 7, "sustainable_load": 0.0, **sizing({"sustainable_load": 0.0}, o, 2)}]
    pick = sizing_pick(configs)
    assert pick is not None and pick["rank"] == 1                          # 2 replicas beat 3
    assert sizing_line(configs) == ("sizing for 9 req/s (4.5x the trace's rate): #1 (eval 6) with 2 replica(s), "
                                    "4 device(s), at 5 req/s each")
    assert sizing_line([{**configs[2]}]) == ("sizing for 9 req/s (4.5x the trace's rate): no configuration "
                                             "sustains any rate within the SLOs")


def test_the_capacity_stage_scales_the_traces_rate_and_sizes_the_target(tmp_path: Path) -> None:
    checked = load(config(tmp_path, 'target_rate = "40x"\nmax_probes = 6'))
    settings = checked
    pool = InProcessPool(settings.config, size=2)
    try:
        driver = Driver(settings.config, pool, keep_results=True)
        out = driver.run()
    finally:
        pool.close()
    assert len(out.capacity) == 2
    probes = [r for r in out.results if r.phase == "capacity"]
    assert probes and all(set(r.load) == {"request_rate"} for r in probes)
    per_replica = settings.config.cluster.trial.devices
    for c in out.capacity:
        assert c["start_load"] == pytest.approx(4.0)                           # the trace at time_scale 2
        assert c["trace_multiple"] == pytest.approx(c["sustainable_load"] / 2.0)
        if c["sustainable_load"]:
            assert c["replicas"] == math.ceil(80.0 / c["sustainable_load"] - 1e-9)
            assert c["devices"] == c["replicas"] * per_replica
        assert "x the trace's rate" in capacity_line(c)
    record = capacity_record(out.capacity, checked.capacity, settings.config.run.slos,
                             settings.config.cluster.trial.devices)
    assert record["trace_rate"] == pytest.approx(2.0) and record["sizing"]["target_rate"] == pytest.approx(80.0)
    pick = sizing_pick(out.capacity)
    assert record["sizing"]["pick"] == (None if pick is None else pick["rank"])
    json.dumps(record)
