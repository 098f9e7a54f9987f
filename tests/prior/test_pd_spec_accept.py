"""Speculative decoding in a prefill/decode-disaggregated deployment: the decode instances draft and verify
(the simulated evaluation and the prior alike), ``[simulator] spec_accept_len`` reaches both, and the prior
predicts with the acceptance length the run measured, as the co-located prior does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from msopt.config import load_settings
from msopt.evaluate import Evaluator
from msopt.evaluate.results import EvalRequest
from msopt.prior import SimulatorPrior
from msopt.space import SearchSpace

PD_EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "pd_h200_sglang.toml"
VALUES = {"n_prefill": 4, "n_decode": 2, "prefill_tp": 1, "decode_tp": 4, "prefill_chunk": 8192,
          "decode_max_running": 32}
EAGLE = "--speculative-algorithm EAGLE3 --speculative-draft-model-path /d --speculative-num-steps 3"


def settings_of(tmp_path: Path, name: str, others: str = "", accept: str = ""):
    """The shipped PD example, smaller and noiseless, with ``others`` on both pools."""
    text = PD_EXAMPLE.read_text(encoding="utf-8")
    for key, new in (("num_prompts", "64"), ("concurrency", "32"), ("sample_size", "64"), ("noise", "0.0"),
                     ("input_len", "1000"), ("output_len", "200")):
        text, n = re.subn(rf"^{key} = [^\n#]*", f"{key} = {new}", text, count=1, flags=re.M)
        assert n == 1, key
    text = text.replace('served_model_name = "qwen3-32b"', f'served_model_name = "qwen3-32b"\nothers = "{others}"')
    text = text.replace("[simulator]\n", f"[simulator]\n{accept}\n")
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return load_settings(path, environ={})


def evaluate(settings, values=VALUES):
    space = SearchSpace.from_settings(settings)
    res = Evaluator(settings.config, simulate=True).evaluate(
        EvalRequest(0, "search", 0, 0, tuple(space.encode(values).tolist()), num_prompts=64))
    assert res.error is None, res.error
    return res.metrics


def test_the_decode_pool_drafts_with_the_given_acceptance_length(tmp_path: Path) -> None:
    plain = evaluate(settings_of(tmp_path, "plain"))
    good = evaluate(settings_of(tmp_path, "good", EAGLE, "spec_accept_len = 3.5"))
    poor = evaluate(settings_of(tmp_path, "poor", EAGLE, "spec_accept_len = 1.1"))
    # 3.5 tokens a verify step of 4: far fewer steps than plain decoding; 1.1: each step costs more, keeps ~1
    assert good["time_per_output_token"] < 0.6 * plain["time_per_output_token"]
    assert poor["time_per_output_token"] > max(plain["time_per_output_token"], 2.5 * good["time_per_output_token"])


def test_the_pd_prior_predicts_with_the_measured_acceptance_length(tmp_path: Path) -> None:
    settings = settings_of(tmp_path, "spec", EAGLE)
    space = SearchSpace.from_settings(settings)
    prior = SimulatorPrior(settings.config, space)
    assumed = prior.predict(VALUES)
    assert assumed.error is None and any("acceptance length" in a for a in prior.assumed(VALUES))
    measured = {"time_to_first_token": 0.5, "time_per_output_token": 0.01, "generate_speed": 900.0,
                "spec_accept_len": 1.2}
    prior.observe(VALUES, measured)  # the decode servers' counters said 1.2 tokens a step
    after = prior.predict(VALUES)
    assert not any("acceptance length" in a for a in prior.assumed(VALUES))
    assert after.metrics["time_per_output_token"] > 1.3 * assumed.metrics["time_per_output_token"]
    # what it predicts is what the evaluation simulates with that length given
    given = evaluate(settings_of(tmp_path, "given", EAGLE, "spec_accept_len = 1.2"))
    for key in ("generate_speed", "time_per_output_token"):
        assert after.metrics[key] == pytest.approx(given[key], rel=0.1), key
