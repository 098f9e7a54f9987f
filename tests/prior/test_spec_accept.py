"""The prior's acceptance length of speculative decoding: the one the run's evaluations simulate with
(``[simulator] spec_accept_len``), and the one a real run measured (``spec_accept_len`` metric)."""

from __future__ import annotations

from pathlib import Path

import pytest

from msopt.config import load_settings
from msopt.evaluate import Evaluator
from msopt.evaluate.results import EvalRequest
from msopt.prior import SimulatorPrior
from msopt.space import SearchSpace

CFG = """
engine = "vllm"
simulate = true
{extra}
[simulator]
hardware = "h100-sxm"
model = "qwen3-8b"
{accept}
[simulator.workload]
num_prompts = 8
input_len = 64
output_len = 64
concurrency = 4
[vllm.command]
model = "Qwen/Qwen3-8B"
others = "--max-model-len 4096"
[vllm.speculative_config]
method = "ngram"
[[vllm.target_field]]
name = "spec_tokens"
config_position = "speculative_config.num_speculative_tokens"
min = 1
max = 6
dtype = "int"
value = 3
"""


def settings_of(tmp_path: Path, accept: str = "", extra: str = ""):
    path = tmp_path / "c.toml"
    path.write_text(CFG.format(accept=accept, extra=extra))
    return load_settings(path, environ={})


def test_the_prior_simulates_with_the_given_acceptance_length_as_the_evaluation_does(tmp_path: Path) -> None:
    settings = settings_of(tmp_path, "spec_accept_len = 3.5")
    space = SearchSpace.from_settings(settings)
    prior = SimulatorPrior(settings, space)
    values = {"spec_tokens": 4}
    pos = space.encode(values)
    evaluated = Evaluator(settings, run_dir=tmp_path / "run").evaluate(
        EvalRequest(1, "search", 0, 0, tuple(pos), num_prompts=prior.num_prompts))
    predicted = prior.predict(values, pos)
    assert not evaluated.failed and predicted.error is None
    tpot = evaluated.metrics["time_per_output_token"]
    assert predicted.metrics["time_per_output_token"] == pytest.approx(tpot, rel=1e-6)
    (tmp_path / "plain").mkdir()
    assumed = SimulatorPrior(settings_of(tmp_path / "plain"), space).predict(values, pos)
    assert assumed.metrics["time_per_output_token"] > 1.3 * tpot  # ngram's assumed 1.66 tokens a step, not 3.5
