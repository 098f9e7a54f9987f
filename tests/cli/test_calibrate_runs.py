"""``msopt calibrate`` on a run directory reads each evaluation's load as the run sent it (issue 52 item 9):
a trace replay's request count and a capacity probe's rate, with the builtin benchmark (whose command line is
one JSON argument) and with ``vllm bench serve``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from msopt.cli.calibrate import measurements_from_run
from msopt.evaluate.evaluator import Evaluator
from msopt.evaluate.results import EvalRequest
from msopt.run.store import RunStore
from msopt.run.validate import load
from msopt.sim import load_hardware
from msopt.sim.calibrate import simulate_measurements
from msopt.space import SearchSpace

CFG = """
simulate = false
benchmark = "{benchmark}"
n_particles = 2
iters = 1
sample_size = 32
[workload]
trace = "t.csv"
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
"""


@pytest.mark.parametrize("bench", ["builtin", "vllm_benchmark"])
def test_a_run_s_trace_replays_are_simulated_as_they_were_sent(tmp_path: Path, bench: str) -> None:
    """Each evaluation is "measured" by msopt's own simulation of what it sent (32 of the trace's 120
    requests in the search, all 120 in a re-measurement, a capacity probe at twice the trace's rate):
    simulated again from the run directory, every row gives back its measurement."""
    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n" + "".join(
        f"{0.05 * i},{400 + 37 * i % 200},{16 + i % 7}\n" for i in range(120)), encoding="utf-8")
    path = tmp_path / "c.toml"
    path.write_text(CFG.format(benchmark=bench), encoding="utf-8")
    config = load(str(path), environ={}).config
    space = SearchSpace(config.engine.fields)
    store = RunStore.create(tmp_path / "out", config, run_id="measured")
    evaluator = Evaluator(config, simulate=True)
    measured = []
    for i, (phase, seqs, prompts, load_) in enumerate([("search", 2, 32, {}), ("search", 4, 32, {}),
                                                       ("refine", 12, 120, {}),
                                                       ("capacity", 8, 32, {"request_rate": 40.0})]):
        res = evaluator.evaluate(EvalRequest(i, phase, None, 0, tuple(space.encode({"max_num_seqs": seqs}).tolist()),
                                             num_prompts=prompts, load=load_))
        assert res.error is None, res.error
        store.append(dataclasses.replace(res, real_evaluation=True))
        measured.append(res.metrics)
    store.close()
    rows, hardware = measurements_from_run(store.run_dir, None)
    assert [r.num_prompts for r in rows] == [32, 32, 120, 32]
    assert [r.workload.get("request_rate") for r in rows] == [20.0, 20.0, 20.0, 40.0]  # the trace's own, the probe's
    assert all("trace" in r.workload for r in rows)
    sim = simulate_measurements(rows, load_hardware(hardware))
    for m, s in zip(measured, sim):
        assert s.tolist() == pytest.approx([m["time_to_first_token"], m["time_per_output_token"],
                                            m["generate_speed"]], rel=1e-9)
