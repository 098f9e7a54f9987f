"""msopt/sim/pd.py: a closed loop's send times are the ones its last simulated round ran with, so no request's
first token comes before it was sent. The sends the last round's finishes would allow used to be taken after
that round: configs/mindie_pd_atlas_a2.toml with 2 prefill (tp 2) + 1 decode instance (tp 2), decode-bound,
reported a mean TTFT of -0.41 s, and its search journaled it as a failure ("no finite fitness")."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from msopt.config import load_settings
from msopt.engines import get_engine
from msopt.evaluate.runner import RunnerContext
from msopt.evaluate.simulated import SimRunner, render_pd_trial

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "mindie_pd_atlas_a2.toml"


def test_a_decode_bound_closed_loop_never_answers_before_it_is_asked() -> None:
    config = load_settings(EXAMPLE).config
    engine = get_engine("mindie")
    values = {"n_prefill": 2, "n_decode": 1, "prefill_tp": 2, "prefill_world": 2, "decode_tp": 2, "decode_world": 2,
              "prefill_max_tokens": 16384, "decode_max_batch_size": 89}
    launch = render_pd_trial(engine, values, config, config.engine.section.table, [], ())
    res = SimRunner(config, engine, RunnerContext()).sim.run_pd(launch)
    assert not res.error and res.success_rate == 1.0
    req = res.requests
    ttft = req["first_token"][req["ok"]] - req["send"][req["ok"]]
    assert (ttft >= 0).all(), f"{int((ttft < 0).sum())} requests answered before they were sent"
    assert res.time_to_first_token == np.mean(ttft) > 0
