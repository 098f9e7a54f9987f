"""The simulator prior: its search, its diverse picks, where the swarm starts, what is journaled."""

from __future__ import annotations

import math

import numpy as np
import pytest

from msopt.config import load_settings
from msopt.errors import ConfigError
from msopt.evaluate.results import EvaluationResult
from msopt.evaluate.screen import CandidateScreen
from msopt.prior import PriorGuide, SimulatorPrior, make_prior, prior_applies
from msopt.run.driver import Driver
from msopt.run.pool import InProcessPool
from msopt.space import SearchSpace
from tests.support.driver_helpers import FormulaEvaluator


def guide_of(prior: SimulatorPrior | None) -> PriorGuide | None:
    """The prior as the driver's guide, as a run session makes it."""
    return PriorGuide(prior) if prior is not None else None


CFG = """
simulate = {simulate}
engine = "vllm"
n_particles = 5
iters = 2
seed = 4
sample_size = 24
{extra}
[data_storage]
pso_top_k = 1
[cluster]
devices_per_trial = 8
[simulator]
hardware = "h100-sxm"
model = "llama-3.1-8b"
[simulator.workload]
input_len = 512
output_len = 64
num_prompts = 24
concurrency = 16
[[vllm.target_field]]
name = "tp"
config_position = "--tensor-parallel-size"
min = 0
max = 1
dtype = "enum"
dtype_param = [1, 2, 4, 8]
value = 1
[[vllm.target_field]]
name = "pp"
config_position = "--pipeline-parallel-size"
min = 0
max = 1
dtype = "enum"
dtype_param = [1, 2]
value = 1
[[vllm.target_field]]
name = "dp"
config_position = "--data-parallel-size"
min = 0
max = 0
dtype = "ternary_factories"
dtype_param = {{ target_names = ["tp", "pp"], product = 8 }}
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 0
max = 1
dtype = "enum"
dtype_param = [8, 32, 128]
value = 32
[[vllm.target_field]]
name = "max_num_batched_tokens"
config_position = "--max-num-batched-tokens"
min = 0
max = 1
dtype = "enum"
dtype_param = [16, 2048, 8192]
value = 8192
"""


def settings_of(write_toml, simulate="true", extra=""):
    return load_settings(str(write_toml(CFG.format(simulate=simulate, extra=extra))), environ={})


def test_prior_search_ranks_and_picks_distinct_layouts(write_toml):
    settings = settings_of(write_toml)
    space = SearchSpace.from_settings(settings)
    prior = SimulatorPrior(settings.config, space)
    ranked = prior.search(60, np.random.default_rng(0))
    fits = [p.fitness for p in ranked]
    assert fits == sorted(fits) and math.isfinite(fits[0])
    assert 0 < prior.evaluations <= 60
    assert prior.layout_names() == ("tp", "pp", "dp")
    # tokens 16 < seqs 32: vLLM refuses it at start-up; the prior predicts a failure, not a number
    refused = prior.predict({**ranked[0].values, "max_num_seqs": 32, "max_num_batched_tokens": 16})
    assert refused.fitness == math.inf and "max_num_batched_tokens" in (refused.error or "")
    picks = prior.picks(4, exclude=[space.decode(space.default_position()).values])
    assert len(picks) == 4
    layouts = [(p.values["tp"], p.values["pp"]) for p in picks]
    assert len(set(layouts)) >= 2  # half of the picks: the best of distinct layouts
    assert [p.fitness for p in picks] == sorted(p.fitness for p in picks)


def test_memo_is_shared_and_results_are_the_same(write_toml):
    settings = settings_of(write_toml)
    space = SearchSpace.from_settings(settings)
    memo: dict = {}
    a = SimulatorPrior(settings.config, space, memo=memo)
    first = a.search(30, np.random.default_rng(1))
    b = SimulatorPrior(settings.config, space, memo=memo)
    second = b.search(30, np.random.default_rng(1))
    assert [p.values for p in first] == [p.values for p in second]
    assert [p.fitness for p in first] == [p.fitness for p in second]


def test_memo_gives_each_prior_its_own_position(write_toml):
    """A shared simulation is this prior's prediction: its position, not the one of the prior that
    simulated it first (the swarm starts at a pick's position; the bench's results depended on
    which runs its process had made before)."""
    settings = settings_of(write_toml)
    space = SearchSpace.from_settings(settings)
    memo: dict = {}
    a = SimulatorPrior(settings.config, space, memo=memo)
    b = SimulatorPrior(settings.config, space, memo=memo)
    x = space.default_position()
    values = space.decode(x, None).values
    y = x + 0.2 * (space.bounds[1] - x)  # another point of the same configuration, if it decodes the same
    while space.decode(y, None).values != values:
        y = (x + y) / 2
    assert not np.array_equal(x, y)
    first = a.predict(values, x)
    second = b.predict(values, y)
    assert second.fitness == first.fitness and len(memo) == 1
    assert np.array_equal(second.position, y) and np.array_equal(a.predict(values, x).position, x)


def test_prior_applies(write_toml):
    sim = settings_of(write_toml)
    assert prior_applies(sim.config, sim.config.prior)
    off = settings_of(write_toml, extra='[search]\nprior = "none"')
    assert not prior_applies(off.config, off.config.prior) and make_prior(off.config) is None
    # a real run whose [simulator] was set in its file: on; with the packaged defaults only: off
    real = settings_of(write_toml, simulate="false")
    assert prior_applies(real.config, real.config.prior)
    text = CFG.format(simulate="false", extra="")
    text = text[:text.index("[simulator]")] + text[text.index("[[vllm.target_field]]"):]
    bare = load_settings(str(write_toml(text, "bare.toml")), environ={})
    assert not prior_applies(bare.config, bare.config.prior)


def test_bad_search_keys_are_config_errors(write_toml):
    with pytest.raises(ConfigError, match="prior"):
        settings_of(write_toml, extra='[search]\nprior = "maybe"')
    with pytest.raises(ConfigError, match="unknown key|valid keys|not a known"):
        settings_of(write_toml, extra='[search]\npriors = "none"')


def test_driver_starts_at_picks_and_journals_predictions(write_toml):
    settings = settings_of(write_toml)
    space = SearchSpace.from_settings(settings)
    prior = make_prior(settings.config, space)
    assert prior is not None
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: FormulaEvaluator(
        space, lambda v: v["max_num_seqs"] / 100 + v["tp"]))
    guide = PriorGuide(prior)
    driver = Driver(settings.config, pool, guide=guide)
    assert guide.picks and len(guide.picks) == 4
    try:
        out = driver.run()
    finally:
        pool.close()
    first = {r.particle: r for r in out.results if r.phase == "search" and r.iteration == 0}
    for k, pick in enumerate(guide.picks, start=1):
        assert {n: first[k].values[n] for n in space.names} == {n: pick["values"][n] for n in space.names}
        assert first[k].predicted is not None
        assert first[k].predicted["fitness"] == pytest.approx(pick["fitness"])
    launched = [r for r in out.results if not r.reused and not r.refused]
    assert all(r.predicted is not None and "generate_speed" in r.predicted for r in launched)
    back = EvaluationResult.from_json(launched[0].to_json("run"))
    assert back.predicted == launched[0].predicted


def test_screen_checks_rules_with_the_simulated_model(write_toml):
    settings = settings_of(write_toml)
    screen = CandidateScreen(settings.config)
    ok = {"tp": 1, "pp": 1, "dp": 8, "max_num_seqs": 32, "max_num_batched_tokens": 2048}
    assert screen.refusal(ok) is None
    assert "max_num_batched_tokens" in (screen.refusal({**ok, "max_num_batched_tokens": 16}) or "")


def test_report_shows_the_prior(write_toml, tmp_path):
    from msopt.report.figures import PRIOR_PNG
    from msopt.report.html import write_report
    from msopt.run.store import RunStore

    settings = settings_of(write_toml)
    space = SearchSpace.from_settings(settings)
    store = RunStore.create(tmp_path / "runs", settings.config)
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: FormulaEvaluator(space, lambda v: v["tp"]))
    try:
        Driver(settings.config, pool, store=store, guide=guide_of(make_prior(settings.config, space))).run()
    finally:
        pool.close()
        store.close()
    page = write_report(store.run_dir, export=False).read_text()
    assert "simulator prior predicted every launched configuration" in page
    assert (store.run_dir / PRIOR_PNG).stat().st_size > 0


def test_refit_learns_from_measurements(write_toml):
    """Measurements 30 % slower than the catalog predicts: after a refit the predictions of the
    measured configurations are closer to what was measured."""
    settings = settings_of(write_toml)
    space = SearchSpace.from_settings(settings)
    prior = SimulatorPrior(settings.config, space)
    ranked = [p for p in prior.search(30, np.random.default_rng(2)) if math.isfinite(p.fitness)][:4]
    assert len(ranked) == 4
    slow = {}
    for p in ranked:
        m = p.metrics
        slow[json_key(p.values)] = {"generate_speed": m["generate_speed"] * 0.7,
                                    "time_to_first_token": m["time_to_first_token"] / 0.7,
                                    "time_per_output_token": m["time_per_output_token"] / 0.7}
        prior.observe(p.values, slow[json_key(p.values)])
    assert prior.refit(rounds=1) and prior.refits == 1

    def error() -> float:
        return sum(abs(prior.predict(p.values).metrics["generate_speed"] / slow[json_key(p.values)]["generate_speed"]
                       - 1) for p in ranked)

    after = error()
    assert after < 4 * 0.3 / 0.7  # before the refit every prediction was 1/0.7 - 1 = 43 % too fast
    assert prior.hardware != prior.catalog_hardware


def json_key(values):
    import json

    return json.dumps(values, sort_keys=True)


def test_refit_needs_two_measurements(write_toml):
    settings = settings_of(write_toml)
    prior = SimulatorPrior(settings.config, SearchSpace.from_settings(settings))
    prior.observe({"tp": 1, "pp": 1, "dp": 8, "max_num_seqs": 32, "max_num_batched_tokens": 2048},
                  {"generate_speed": 100.0, "time_to_first_token": 0.1, "time_per_output_token": 0.01})
    prior.observe({"tp": 2, "pp": 1, "dp": 4, "max_num_seqs": 32, "max_num_batched_tokens": 2048},
                  {"generate_speed": None, "time_to_first_token": 0.1, "time_per_output_token": 0.01})
    assert prior.refit() is False and prior.hardware == prior.catalog_hardware


@pytest.mark.slow
def test_a_simulated_run_learns_and_repeats_exactly(write_toml):
    """A simulated run with noise refits its prior after iterations; the same seed, the same run."""
    # noise well above the refit's tolerance, so that the prior's predictions of the measurements are off
    settings = load_settings(str(write_toml(CFG.format(simulate="true", extra="max_launches = 14").replace(
        '[simulator]\n', '[simulator]\nnoise = 0.25\n'), "noisy.toml")), environ={})
    space = SearchSpace.from_settings(settings)

    def run():
        pool = InProcessPool(settings.config, size=1)
        driver = Driver(settings.config, pool, guide=guide_of(make_prior(settings.config, space)))
        out = driver.run()
        pool.close()
        return driver, [(r.eval_id, r.fitness, r.reused, r.refused) for r in out.results]

    first, journal = run()
    assert isinstance(first.guide, PriorGuide) and first.guide.prior.refits >= 1
    assert first.guide.records()["prior.json"]["refits"] == first.guide.prior.refits
    _, again = run()
    assert again == journal
    assert sum(1 for _, _, reused, refused in journal if not reused and not refused) <= 14


def test_refit_is_skipped_without_new_rows_and_warm_afterwards(write_toml):
    """The refit fits the best-measured configurations; with none new among them it does not run
    again; a later one starts from the last fit (capped), not from the catalog."""
    settings = settings_of(write_toml)
    space = SearchSpace.from_settings(settings)
    prior = SimulatorPrior(settings.config, space)
    ranked = [p for p in prior.search(30, np.random.default_rng(2)) if math.isfinite(p.fitness)][:3]
    for p in ranked[:2]:
        m = p.metrics
        prior.observe(p.values, {"generate_speed": m["generate_speed"] * 0.7,
                                 "time_to_first_token": m["time_to_first_token"] / 0.7,
                                 "time_per_output_token": m["time_per_output_token"] / 0.7})
    assert prior.refit() and prior.refits == 1
    first = prior.hardware
    assert not prior.refit() and prior.refits == 1 and prior.hardware is first
    m = ranked[2].metrics  # further off than the first two: the first fit mispredicts it
    prior.observe(ranked[2].values, {"generate_speed": m["generate_speed"] * 0.4,
                                     "time_to_first_token": m["time_to_first_token"] / 0.4,
                                     "time_per_output_token": m["time_per_output_token"] / 0.4})
    assert prior.refit(max_evaluations=3) and prior.refits == 2


def test_refit_is_skipped_while_the_predictions_are_close(write_toml):
    """Measurements within the tolerance of the predictions: no refit, the hardware stays, and the
    note says how close; the same rows are not checked again; rows 40 % off are refitted."""
    settings = settings_of(write_toml)
    space = SearchSpace.from_settings(settings)
    prior = SimulatorPrior(settings.config, space)
    ranked = [p for p in prior.search(30, np.random.default_rng(2)) if math.isfinite(p.fitness)][:4]
    for p in ranked[:2]:
        m = p.metrics
        prior.observe(p.values, {"generate_speed": m["generate_speed"] * 0.98,
                                 "time_to_first_token": m["time_to_first_token"] * 1.02,
                                 "time_per_output_token": m["time_per_output_token"]})
    evaluations = prior.evaluations
    assert not prior.refit() and prior.refits == 0 and prior.kept == 1
    assert prior.hardware is prior.catalog_hardware and prior.evaluations == evaluations
    assert prior.refit_note is not None and "within 1.3%" in prior.refit_note
    assert not prior.refit() and prior.kept == 1  # nothing new
    for p in ranked[2:]:
        m = p.metrics
        prior.observe(p.values, {"generate_speed": m["generate_speed"] * 0.6,
                                 "time_to_first_token": m["time_to_first_token"] / 0.6,
                                 "time_per_output_token": m["time_per_output_token"] / 0.6})
    said: list[str] = []
    assert prior.refit(progress=said.append) and prior.refits == 1 and prior.refit_note is None
    assert said and said[0].startswith("refitting the prior to the 4 best measured configurations")


def test_a_budget_remeasures_the_top_and_races_only_within_the_noise(write_toml):
    """With max_launches and pso_top_k 3: the top 3 are re-measured once, the baseline beside them,
    then the best by mean and its closest challenger race (stages.refine) with the launches left;
    the budget holds; without a budget only the top 3 are re-measured."""
    base = settings_of(write_toml)
    space = SearchSpace.from_settings(base)

    def refine_count(**kw):
        settings = base.replace(data_storage={"pso_top_k": 3}, **kw)
        pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: FormulaEvaluator(
            space, lambda v: v["max_num_seqs"] / 100 + v["tp"]))
        out = Driver(settings.config, pool, guide=guide_of(make_prior(settings.config, space))).run()
        pool.close()
        return (sum(r.phase == "refine" for r in out.results), out.launched,
                sum(r.phase == "baseline" for r in out.results))

    from msopt.run.budget import LARGE_PLAN_FROM

    refined, launched, baseline = refine_count(max_launches=LARGE_PLAN_FROM)  # the large plan
    assert refined > 3 and baseline >= 2 and launched <= LARGE_PLAN_FROM
    assert refine_count()[0] == 3


PD_EXAMPLE = str(__import__("pathlib").Path(__file__).resolve().parents[2] / "configs" / "pd_h200_sglang.toml")


def test_a_disaggregated_trial_is_predicted_as_its_evaluation_simulates_it(write_toml):
    """The prior renders a PD trial's instances and simulates both pools, as SimRunner does (issue 39); a layout
    that needs more devices than the trial holds is refused before a launch."""
    from msopt.evaluate.evaluator import Evaluator
    from msopt.evaluate.results import EvalRequest

    settings = load_settings(PD_EXAMPLE)
    space = SearchSpace.from_settings(settings)
    prior = make_prior(settings.config, space)
    values = {"n_prefill": 10, "n_decode": 3, "prefill_tp": 1, "decode_tp": 2, "prefill_chunk": 2048,
              "decode_max_running": 69}
    pred = prior.predict(values)
    assert pred.error is None
    text = open(PD_EXAMPLE, encoding="utf-8").read()
    assert "\nnoise = 0.02" in text
    noiseless = load_settings(str(write_toml(text.replace("\nnoise = 0.02", "\nnoise = 0.0"))))
    res = Evaluator(noiseless.config, simulate=True).evaluate(
        EvalRequest(0, "search", 0, 0, tuple(space.encode(values).tolist()), num_prompts=prior.num_prompts))
    assert res.error is None
    for key in ("generate_speed", "time_to_first_token", "time_per_output_token"):
        assert pred.metrics[key] == pytest.approx(res.metrics[key], rel=0.1), key
    too_big = dict(values, n_prefill=12, n_decode=4, decode_tp=4)
    refusal = prior.screen.refusal(too_big)
    assert refusal is not None and refusal.startswith("the disaggregated layout does not fit the trial: ")
    assert "needs 28 devices" in refusal and math.isinf(prior.predict(too_big).fitness)


class _Ranked(SimulatorPrior):
    """A prior whose predictions are given (its picks' rule alone, without the simulator)."""

    def __init__(self, names, preds):  # no simulator behind it
        from types import SimpleNamespace

        from msopt.prior.simulator import Prediction

        self.space = SimpleNamespace(names=names)
        self._preds = [Prediction(dict(zip(names, v)), np.zeros(len(names)), f, {}) for v, f in preds]

    def layout_names(self):
        return ("tp",)

    def ranked(self):
        return sorted(self._preds, key=lambda p: p.fitness)


NAMES = ("tp", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization")


def test_picks_measure_each_level_the_prior_cannot_rank_apart_before_a_second_of_any():
    """qwen3-32b on the bench: 16 configurations of one plateau predicted 1.0 (every max_num_seqs and
    memory share with 4,096 batched tokens), the next plateau 0.04 % behind (2,048 tokens; in truth
    2 % better). The picks test the second plateau before a second configuration of the first."""
    preds = [((4, s, 4096, g), 1.0) for s in (64, 128, 256, 512) for g in (0.7, 0.8, 0.9, 0.95)]
    preds += [((4, s, 2048, g), 1.0004) for s in (64, 128, 256, 512) for g in (0.7, 0.8, 0.9, 0.95)]
    preds += [((2, 32, 2048, 0.7), 1.0045), ((1, 32, 2048, 0.7), 1.04)]
    picks = _Ranked(NAMES, preds).picks(4)
    assert [(p.values["tp"], p.values["max_num_batched_tokens"], p.fitness) for p in picks[:3]] == [
        (4, 4096, 1.0), (4, 2048, 1.0004), (2, 2048, 1.0045)]  # one of each level within PICK_TIE, best first
    assert len(picks) == 4


def test_picks_repeat_a_level_that_stands_out():
    """llama-3.1-8b with long prompts: the prior's best plateau stands 0.75 % ahead of its next level,
    beyond PICK_TIE: its other configurations come before any other level (one of them is as good as
    another, so the pick can pool them)."""
    preds = [((2, s, 2048, g), 1.0) for s in (64, 128, 256, 512) for g in (0.7, 0.8, 0.9, 0.95)]
    preds += [((2, s, 4096, g), 1.0075) for s in (64, 128) for g in (0.7, 0.9)]
    preds += [((4, 256, 4096, 0.9), 1.028)]
    picks = _Ranked(NAMES, preds).picks(4)
    assert [p.fitness for p in picks] == [1.0, 1.0, 1.0, 1.028]


@pytest.mark.parametrize("launches, whole", [(6, True), (None, False), (10, False)])
def test_a_budget_of_one_generation_starts_at_the_whole_grid_s_best(write_toml, launches, whole):
    """Where the launches pay fewer than two generations of the 5 lanes (the explore lanes' budgets),
    the prior predicts every configuration of the grid (4 × 2 × 3 × 3 points; 63 decode, tp 8 · pp 2
    needs 16 devices of 8) before its picks, so the one generation starts at its true best; with more
    launches or none, only its sampled search (16 simulations here)."""
    settings = settings_of(write_toml, extra="[search]\nprior_evaluations = 16")
    space = SearchSpace.from_settings(settings)
    prior = make_prior(settings.config, space)
    assert prior is not None
    said: list[str] = []
    prior.report = said.append
    PriorGuide(prior).starts(space, space.default_position(), 5, 0, launches)
    assert (len(prior.ranked()) == 63) is whole
    assert any("whole grid (72 configurations)" in s for s in said) is whole
