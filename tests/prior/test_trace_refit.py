"""The simulator prior of a run on a trace replays the run's window, read once: its predictions and the rows its
refit and correction simulate (msopt/prior/simulator.py ``_measurements``, msopt/sim/calibrate.py ``sim_workload``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from msopt.prior import make_prior
from msopt.run.validate import load
from tests.run.test_session import small_quickstart


def test_the_refit_rows_replay_the_runs_trace_window(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{i * 0.5},{100 + i},{20 + i}\n"
                                                                        for i in range(40)))
    cfg = small_quickstart(tmp_path)
    cfg.write_text(cfg.read_text() + f'\n[workload]\ntrace = "{trace}"\n')
    checked = load(str(cfg), None)
    window = checked.resolved.window if checked.resolved is not None else None
    assert window is not None
    prior = make_prior(checked.config, checked.space, setup=checked.simulator, workload=checked.resolved)
    assert prior is not None and prior.workload.window is window
    values = checked.space.decode(checked.space.encode({})).values
    (row,) = prior._measurements([(dict(values), 1.0, 0.01, 100.0)])
    assert row.window is window  # not the synthetic lengths of [simulator.workload]
    ins, outs = row.sim_workload().sample_lengths(np.random.default_rng(0))
    n = row.sim_workload().num_prompts
    assert ins.tolist() == [100 + i for i in window.replay(n)[0].tolist()]
    assert row.sim_workload() is row.sim_workload()  # built once per row, not per simulation of a fit
