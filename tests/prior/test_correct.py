"""The run corrects its simulator from its own measured launches, and says that it did (issue 52 item 9,
issue 49 part 2 item 2): msopt.sim.correct.correct_hardware, SimulatorPrior.correct, and runs on an engine
whose measurements are a simulation on a deliberately different hardware entry."""

from __future__ import annotations

import dataclasses
import json

import pytest

from msopt.config import load_settings
from msopt.evaluate.evaluator import Evaluator
from msopt.prior import PriorGuide, SimulatorPrior, make_prior
from msopt.prior.correction import correction_text
from msopt.run.driver import Driver
from msopt.run.pool import InProcessPool
from msopt.run.store import RunStore
from msopt.sim import load_hardware
from msopt.sim.catalog_load import hardware_toml
from msopt.sim.correct import correct_hardware, scale_hardware
from msopt.space import SearchSpace
from tests.prior.test_simulator import CFG

#: the machine the "real" launches run on: h100-sxm's datasheet, but slower kernels than its
#: catalog entry's efficiencies (compute and memory unequally), a slower scheduler and an API server
#: that costs 4 ms a request (the catalog entry has none: no scale of its own makes one)
OTHER = dict(name="slower-h100", compute_eff=0.45, memory_eff=0.6, step_overhead_ms=7.0, per_seq_overhead_us=60.0,
             frontend_ms_per_req=4.0)


def other_machine(tmp_path):
    """The TOML of :data:`OTHER`."""
    hw = dataclasses.replace(load_hardware("h100-sxm"), description="a deliberately different h100", **OTHER)
    path = tmp_path / "slower-h100.toml"
    path.write_text(hardware_toml(hw))
    return path


class OtherMachineEvaluator:
    """A stand-in for a real engine: each "measurement" is msopt's own simulation of the launch on
    :data:`OTHER` (not the prior's entry), reported as a real evaluation."""

    def __init__(self, config):
        self.inner = Evaluator(config, simulate=True)
        self.devices = self.inner.devices

    def evaluate(self, req):
        return dataclasses.replace(self.inner.evaluate(req), real_evaluation=True)


def settings_of(write_toml, tmp_path, simulate, search="", hardware="h100-sxm", name="run.toml", noise=0.0):
    text = CFG.format(simulate=simulate, extra=f"max_launches = 12\n[search]\nprior_evaluations = 40\n{search}")
    text = text.replace('hardware = "h100-sxm"', f'hardware = "{hardware}"\nnoise = {noise}')
    return load_settings(str(write_toml(text, name)), environ={})


class Lines:
    """The run's lines (what msopt optimize prints)."""

    def __init__(self):
        self.lines: list[str] = []

    def on_event(self, event):
        text = getattr(event, "text", None)
        if isinstance(text, str):
            self.lines.append(text)


def run(settings, pool, store=None):
    space = SearchSpace.from_settings(settings)
    prior = make_prior(settings.config, space)
    assert prior is not None
    lines = Lines()
    guide = PriorGuide(prior)
    try:
        Driver(settings.config, pool, guide=guide, callbacks=[lines], store=store).run()
    finally:
        pool.close()
    return guide, lines.lines


def real_run(write_toml, tmp_path, search="", store=False):
    """A real run (simulate = false, its prior h100-sxm) whose launches are measured on :data:`OTHER`."""
    settings = settings_of(write_toml, tmp_path, "false", search)
    machine = settings_of(write_toml, tmp_path, "true", hardware=str(other_machine(tmp_path)), name="machine.toml")
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: OtherMachineEvaluator(machine.config))
    runs = RunStore.create(tmp_path / "runs", settings.config) if store else None
    try:
        guide, lines = run(settings, pool, runs)
    finally:
        if runs is not None:
            runs.close()
    return settings, machine, guide, lines, runs


def held_out(prior):
    """Configurations the run never measured, to score its prior on."""
    import itertools

    seen = {json.dumps(v, sort_keys=True) for v in prior.observed}
    out = []
    for tp, pp, seqs, tokens in itertools.product((1, 2, 4, 8), (1, 2), (8, 32, 128), (2048, 8192)):
        if tp * pp <= 8:
            v = {"tp": tp, "pp": pp, "dp": 8 // (tp * pp), "max_num_seqs": seqs, "max_num_batched_tokens": tokens}
            if json.dumps(v, sort_keys=True) not in seen:
                out.append(v)
    return out[::3]


def measured_rows(machine, space, configurations):
    """(values, ttft, tpot, tok/s) of each configuration measured on the other machine."""
    from msopt.evaluate.results import EvalRequest

    evaluator = Evaluator(machine.config, simulate=True)
    rows = []
    for v in configurations:
        r = evaluator.evaluate(EvalRequest(0, "search", 0, 0, tuple(space.encode(v).tolist()), num_prompts=24))
        assert r.error is None, r.error
        m = r.metrics
        rows.append((r.values, m["time_to_first_token"], m["time_per_output_token"], m["generate_speed"]))
    return rows


# -- the fit ------------------------------------------------------------------------------------


def test_a_correction_learns_two_time_scales_and_is_judged_on_rows_it_did_not_fit(write_toml, tmp_path):
    """Measurements on an entry 1.6 x slower per engine step and 3 x per frontend cost than the
    catalog's: the two scales come back within a lattice step, and each row predicted by the fit of
    the others errs far less than the catalog entry did."""
    settings = settings_of(write_toml, tmp_path, "false")
    space = SearchSpace.from_settings(settings)
    prior = SimulatorPrior(settings.config, space)
    truth = scale_hardware(prior.catalog_hardware, frontend=3.0, engine=1.6)
    configurations = [{"tp": tp, "pp": 1, "dp": 8 // tp, "max_num_seqs": s, "max_num_batched_tokens": 8192}
                      for tp, s in ((1, 32), (2, 8), (4, 128), (8, 32))]
    rows = [(v, 1.0, 1.0, 1.0) for v in configurations]
    measurements = prior._measurements(rows)
    from msopt.sim.calibrate import simulate_measurements

    sim = simulate_measurements(measurements, truth, models={measurements[0].model: prior.model_spec})
    measured = [dataclasses.replace(m, ttft_s=t, tpot_s=p, tokens_per_s=g) for m, (t, p, g) in zip(measurements, sim)]
    found = correct_hardware(measured, prior.catalog_hardware, models={measured[0].model: prior.model_spec})
    assert found.judged == "leave-one-out" and found.rows == 4 and found.held_out_sim is not None
    assert found.scales["engine"] == pytest.approx(1.6, rel=0.2)
    assert found.scales["frontend"] == pytest.approx(3.0, rel=0.4)
    assert found.better and max(found.after[k] for k in ("ttft", "tpot", "tokens_per_s")) < 0.05
    assert min(found.before[k] for k in ("ttft", "tpot", "tokens_per_s")) > 0.2
    assert "(leave-one-out)" in found.errors() and "TTFT error" in found.errors()
    # two rows: judged in-sample; one row: nothing to fit against another
    two = correct_hardware(measured[:2], prior.catalog_hardware, models={measured[0].model: prior.model_spec})
    assert two.judged == "in-sample" and two.held_out_sim is None


def test_a_correction_that_does_not_predict_better_is_not_used(write_toml, tmp_path):
    """Measurements the catalog entry predicts exactly but for noise that no time scale explains
    (one row faster, one slower): the fit's leave-one-out error is no better, and the prior keeps
    its catalog entry."""
    settings = settings_of(write_toml, tmp_path, "false")
    space = SearchSpace.from_settings(settings)
    prior = SimulatorPrior(settings.config, space)
    configurations = [{"tp": tp, "pp": 1, "dp": 8 // tp, "max_num_seqs": 32, "max_num_batched_tokens": 8192}
                      for tp in (1, 2, 4)]
    for v, f in zip(configurations, (1.15, 1 / 1.15, 1.0)):
        m = prior.predict(v).metrics
        prior.observe(v, {"generate_speed": m["generate_speed"] * f, "time_to_first_token": m["time_to_first_token"] / f,
                          "time_per_output_token": m["time_per_output_token"] / f}, real=True)
    found = prior.correct()
    assert found is not None and not found.better
    assert prior.base_hardware is prior.catalog_hardware and prior.hardware is prior.catalog_hardware
    assert prior.corrections == [{**found.record(), "hardware": "h100-sxm", "said": correction_text(found, "h100-sxm")}]
    assert prior.corrections[0]["said"].startswith("simulator not corrected: fitted to 3 measured launches")
    assert prior.correct() is None  # nothing new measured


def test_measurements_of_the_simulator_itself_are_never_fitted(write_toml, tmp_path):
    settings = settings_of(write_toml, tmp_path, "false")
    prior = SimulatorPrior(settings.config, SearchSpace.from_settings(settings))
    for tp in (1, 2, 4):
        v = {"tp": tp, "pp": 1, "dp": 8 // tp, "max_num_seqs": 32, "max_num_batched_tokens": 8192}
        m = prior.predict(v).metrics
        prior.observe(v, {k: m[k] * 2 for k in ("generate_speed", "time_to_first_token", "time_per_output_token")})
    assert prior.correct() is None and prior.corrections == []


# -- runs ---------------------------------------------------------------------------------------


def test_a_real_run_corrects_its_simulator_from_its_launches_and_says_so(write_toml, tmp_path):
    """The run's launches measure a slower machine than the prior's entry: after its first
    generation the run corrects the entry, says so in one line with the errors before and after
    (leave-one-out), journals the correction in prior.json, and the corrected prior predicts
    configurations the run never measured better than the catalog entry."""
    settings, machine, guide, lines, store = real_run(write_toml, tmp_path, "refit = false\n", store=True)
    prior = guide.prior
    said = [x for x in lines if x.startswith("simulator corrected from ")]
    assert said, lines
    assert "measured launches: TTFT error " in said[0] and "(leave-one-out)" in said[0]
    assert "h100-sxm with serial frontend time x" in said[0]
    assert prior.base_hardware is not prior.catalog_hardware and prior.hardware is prior.base_hardware
    record = json.loads((store.run_dir / "prior.json").read_text())
    assert record["corrections"] and record["corrections"][0]["judged"] == "leave-one-out"
    assert any(c["better"] for c in record["corrections"])
    assert record["corrections"][-1]["said"] == [x for x in lines if x.startswith("simulator ")][-1]
    from msopt.report.html import write_report

    page = write_report(store.run_dir, export=False).read_text()
    assert "Simulator corrected from " in page and "(leave-one-out)" in page
    space = SearchSpace.from_settings(settings)
    configurations = held_out(prior)
    assert len(configurations) >= 8
    held = measured_rows(machine, space, configurations)
    catalog = SimulatorPrior(settings.config, space)
    assert prior.prediction_error(held) < 0.5 * catalog.prediction_error(held)


def test_the_correction_is_off_with_the_key_and_never_on_a_simulated_run(write_toml, tmp_path):
    _, _, guide, lines, _ = real_run(write_toml, tmp_path, "correct = false\n")
    assert not any(x.startswith("simulator") and "corrected" in x for x in lines)
    assert guide.prior.corrections == [] and guide.prior.base_hardware is guide.prior.catalog_hardware
    assert guide.records()["prior.json"]["corrections"] == []
    # a simulated run whose simulator is noisy: its "measurements" are the simulator's own
    noisy = settings_of(write_toml, tmp_path, "true", name="sim.toml", noise=0.3)
    guide, lines = run(noisy, InProcessPool(noisy.config, size=1))
    assert len(guide.prior.observed) >= 2  # it measured enough to correct from ...
    assert guide.prior.corrections == [] and not any("corrected" in x for x in lines)  # ... and never corrected
