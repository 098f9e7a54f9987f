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
    prior = SimulatorPrior(settings.config, space)
    values = {"spec_tokens": 4}
    pos = space.encode(values)
    evaluated = Evaluator(settings.config, run_dir=tmp_path / "run").evaluate(
        EvalRequest(1, "search", 0, 0, tuple(pos), num_prompts=prior.num_prompts))
    predicted = prior.predict(values, pos)
    assert not evaluated.failed and predicted.error is None
    tpot = evaluated.metrics["time_per_output_token"]
    assert predicted.metrics["time_per_output_token"] == pytest.approx(tpot, rel=1e-6)
    (tmp_path / "plain").mkdir()
    assumed = SimulatorPrior(settings_of(tmp_path / "plain").config, space).predict(values, pos)
    assert assumed.metrics["time_per_output_token"] > 1.3 * tpot  # ngram's assumed 1.66 tokens a step, not 3.5


MEASURED = {"time_to_first_token": 0.05, "time_per_output_token": 0.01, "generate_speed": 300.0}


def test_a_measured_acceptance_length_replaces_the_assumed_and_the_given_one(tmp_path: Path) -> None:
    from msopt.engines.vllm.knobs import knobs_vllm
    from msopt.sim.speculative import chain_accept_len, chain_accept_rate

    settings = settings_of(tmp_path, "spec_accept_len = 3.5")
    space = SearchSpace.from_settings(settings)
    prior = SimulatorPrior(settings.config, space)
    before = prior.predict({"spec_tokens": 3}).metrics["time_per_output_token"]
    prior.observe({"spec_tokens": 3}, {**MEASURED, "spec_accept_len": 1.3})  # the server's counters said 1.3
    after = prior.predict({"spec_tokens": 3}).metrics["time_per_output_token"]
    assert after > 1.5 * before  # 1.3 tokens a step, not the given 3.5: the cached prediction is gone
    (tmp_path / "given").mkdir()
    given = SimulatorPrior(settings_of(tmp_path / "given", "spec_accept_len = 1.3").config, space)
    assert after == pytest.approx(given.predict({"spec_tokens": 3}).metrics["time_per_output_token"], rel=1e-9)
    # another number of draft tokens: the measured per-token rate, carried along the chain
    five = knobs_vllm(["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 5}'])
    rate = chain_accept_rate(1.3, 3)
    assert 0.2 < rate < 0.3 and prior.accept_len(five) == pytest.approx(chain_accept_len(rate, 5))
    assert chain_accept_len(rate, 3) == pytest.approx(1.3)
    prior.observe({"spec_tokens": 5}, {**MEASURED, "spec_accept_len": 1.45})
    assert prior.accept_len(five) == pytest.approx(1.45)  # measured at 5 itself
    # no metric, a failed read or another method: nothing changes
    prior.observe({"spec_tokens": 5}, MEASURED)
    assert prior.accept_len(five) == pytest.approx(1.45)
    eagle = knobs_vllm(["--speculative-config", '{"method": "eagle3", "model": "d", "num_speculative_tokens": 5}'])
    assert prior.accept_len(eagle) is None


def test_the_report_lists_what_the_predictions_assumed(tmp_path: Path) -> None:
    import contextlib
    import io
    import json

    from msopt.cli.main import main

    cfg = tmp_path / "c.toml"
    # a100-sxm-80gb borrows h100-sxm's efficiencies; ngram's acceptance length is the default
    cfg.write_text(CFG.format(accept="", extra="").replace('"h100-sxm"', '"a100-sxm-80gb"'))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(["optimize", "-c", str(cfg), "--no-ray", "--plain", "-o", str(tmp_path / "out"),
                     "--particles", "2", "--iters", "1", "--seed", "0"])
    assert code == 0
    (run,) = (tmp_path / "out").iterdir()
    assumed = json.loads((run / "prior.json").read_text())["assumed"]
    assert any("efficiencies of h100-sxm" in a for a in assumed)
    assert any(a.startswith("acceptance length") and "ngram" in a for a in assumed)
    page = (run / "report.html").read_text(encoding="utf-8")
    assert "Assumed inputs" in page and all(a.replace("'", "&#x27;") in page for a in assumed)
