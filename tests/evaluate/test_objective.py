from __future__ import annotations

import math

import pytest

from msopt.errors import ConfigError, RegistryError
from msopt.evaluate.objective import (
    MAX_FINITE_FITNESS,
    METRIC_NAMES,
    OBJECTIVES,
    DefaultObjective,
    GoodputObjective,
    Objective,
    ObjectiveSettings,
    check_metrics_available,
    make_objective,
)

SETTINGS = {
    "generate_speed_target": 1000.0,
    "ttft_slo": 2.0,
    "tpot_slo": 0.05,
    "success_rate_slo": 0.99,
    "ttft_penalty": 1.0,
    "tpot_penalty": 1.0,
    "success_rate_penalty": 5.0,
}


def metrics(**kw):
    base = {
        "generate_speed": 1000.0,
        "time_to_first_token": 2.0,
        "time_per_output_token": 0.05,
        "success_rate": 0.99,
        "throughput": 3.0,
    }
    base.update(kw)
    return base


def default(**overrides) -> Objective:
    return make_objective("default", {**SETTINGS, **overrides})


def goodput(**overrides) -> Objective:
    return make_objective("goodput", {**SETTINGS, **overrides})


# ---- default --------------------------------------------------------------------------------


def test_default_at_target_and_slos_is_one():
    assert default()(metrics()) == pytest.approx(1.0)


def test_default_against_hand_computed_value():
    # 0.4·1000/800 = 0.5; 0.2·e^(3/2−1) = 0.329744; 0.3·e^(0.04/0.05−1) = 0.245619;
    # 0.1·e^(5·(0.99/0.9−1)) = 0.164872
    m = metrics(generate_speed=800, time_to_first_token=3.0, time_per_output_token=0.04,
                success_rate=0.9)
    assert default()(m) == pytest.approx(1.240235607133433, rel=1e-12)


def test_default_hand_computed_with_zero_penalties():
    # ttft and success-rate terms are their weights; tpot: 0.3·e^(2·(0.1/0.05−1)) = 0.3·e^2
    obj = default(ttft_penalty=0, success_rate_penalty=0, tpot_penalty=2)
    m = metrics(generate_speed=500, time_to_first_token=1e9, time_per_output_token=0.1,
                success_rate=0.01)
    assert obj(m) == pytest.approx(0.8 + 0.2 + 0.3 * math.exp(2.0) + 0.1, rel=1e-12)


def test_zero_penalty_ignores_missing_or_nan_metric():
    obj = default(ttft_penalty=0, tpot_penalty=0)
    m = metrics(time_to_first_token=None, time_per_output_token=math.nan)
    m.pop("time_to_first_token")
    assert obj(m) == pytest.approx(0.4 + 0.2 + 0.3 + 0.1)


@pytest.mark.parametrize(
    "bad",
    [
        {"generate_speed": None},
        {"generate_speed": 0.0},
        {"generate_speed": math.nan},
        {"generate_speed": -5.0},
        {"success_rate": None},
        {"success_rate": 0.0},
        {"success_rate": math.nan},
        {"time_to_first_token": None},
        {"time_per_output_token": math.nan},
        {"time_to_first_token": -1.0},
    ],
)
def test_default_is_inf_for_failures(bad):
    assert default()(metrics(**bad)) == math.inf


def test_default_is_inf_for_missing_keys():
    for key in ("generate_speed", "success_rate", "time_to_first_token"):
        m = metrics()
        del m[key]
        assert default()(m) == math.inf, key
    assert default()({}) == math.inf


def test_default_overflow_is_large_finite_and_ordered():
    obj = default(ttft_penalty=100, success_rate_penalty=100)
    bad = obj(metrics(time_to_first_token=50.0))
    worse = obj(metrics(time_to_first_token=1e6, success_rate=1e-300, generate_speed=1e-300))
    worst = obj(metrics(time_to_first_token=math.inf, time_per_output_token=1e308,
                        generate_speed=5e-324, success_rate=5e-324))
    assert bad < worse <= worst <= MAX_FINITE_FITNESS
    assert math.isfinite(worst)


def test_default_orders_by_each_metric():
    obj = default()
    assert obj(metrics(generate_speed=1200)) < obj(metrics()) < obj(metrics(generate_speed=800))
    assert obj(metrics(time_to_first_token=1)) < obj(metrics(time_to_first_token=3))
    assert obj(metrics(time_per_output_token=0.04)) < obj(metrics(time_per_output_token=0.06))
    assert obj(metrics(success_rate=1.0)) < obj(metrics(success_rate=0.9))


def test_default_needs_generate_speed_target():
    with pytest.raises(ConfigError, match="generate_speed_target"):
        make_objective("default", {"ttft_slo": 1, "tpot_slo": 0.05})


# ---- goodput --------------------------------------------------------------------------------


def test_goodput_feasible_is_minus_speed():
    obj = goodput()
    assert obj(metrics(generate_speed=1234.5)) == -1234.5
    assert obj(metrics(generate_speed=2000)) < obj(metrics(generate_speed=1000))


def test_goodput_infeasible_is_worse_than_feasible_and_ordered_by_violation():
    obj = goodput()
    feasible_slow = obj(metrics(generate_speed=1.0))
    slightly = obj(metrics(generate_speed=5000, time_to_first_token=2.2))
    more = obj(metrics(generate_speed=5000, time_to_first_token=3.0))
    two = obj(metrics(generate_speed=5000, time_to_first_token=3.0, time_per_output_token=0.06))
    assert feasible_slow < 0 < slightly < more < two < math.inf
    assert slightly == pytest.approx(1.0 + 0.1)
    assert two == pytest.approx(1.0 + 0.5 + 0.2)
    low_success = obj(metrics(success_rate=0.9))
    assert low_success == pytest.approx(1.0 + 0.1)


def test_goodput_failures_are_inf():
    obj = goodput()
    assert obj(metrics(generate_speed=0)) == math.inf
    assert obj(metrics(time_to_first_token=None)) == math.inf
    assert obj(metrics(success_rate=math.nan)) == math.inf
    assert math.isfinite(obj(metrics(time_to_first_token=math.inf)))


def test_goodput_does_not_need_generate_speed_target():
    obj = make_objective("goodput", {"ttft_slo": 1.0, "tpot_slo": 0.05})
    assert isinstance(obj, GoodputObjective)


# ---- settings, registry, availability -------------------------------------------------------


@pytest.mark.parametrize(
    "key, value",
    [
        ("ttft_slo", 0),
        ("tpot_slo", -0.1),
        ("success_rate_slo", 1.5),
        ("success_rate_slo", 0),
        ("ttft_penalty", -1),
        ("tpot_penalty", "x"),
        ("success_rate_penalty", math.inf),
        ("generate_speed_target", 0),
        ("ttft_slo", True),
    ],
)
def test_invalid_settings_name_the_key(key, value):
    with pytest.raises(ConfigError) as info:
        make_objective("default", {**SETTINGS, key: value})
    assert str(info.value).startswith(f"{key} must be a number")


def test_missing_slo_is_named():
    with pytest.raises(ConfigError, match="ttft_slo"):
        ObjectiveSettings.from_mapping({"tpot_slo": 0.05})


def test_make_objective_accepts_settings_and_ignores_foreign_keys():
    obj = make_objective("default", {**SETTINGS, "n_particles": 10, "iters": 5})
    assert isinstance(obj, DefaultObjective)
    assert obj.settings == ObjectiveSettings(**SETTINGS)
    assert make_objective("default", ObjectiveSettings(**SETTINGS)).settings == obj.settings


def test_registry_lists_and_rejects_duplicates():
    assert OBJECTIVES.names() == ["default", "goodput"]
    with pytest.raises(RegistryError, match="already registered"):
        OBJECTIVES.register("default", DefaultObjective)


def test_unknown_objective_lists_valid_names():
    with pytest.raises(ConfigError) as info:
        make_objective("goodptu", SETTINGS)
    message = str(info.value)
    assert "goodptu" in message and "default" in message and "goodput" in message


def test_objectives_declare_required_metrics():
    for name in OBJECTIVES.names():
        obj = make_objective(name, SETTINGS)
        assert obj.name == name
        assert isinstance(obj.required_metrics, frozenset)
        assert obj.required_metrics <= set(METRIC_NAMES)


def test_check_metrics_available():
    obj = default()
    check_metrics_available(obj, set(METRIC_NAMES), "vllm_benchmark")
    with pytest.raises(ConfigError) as info:
        check_metrics_available(obj, {"generate_speed", "success_rate", "throughput"}, "ais_bench")
    message = str(info.value)
    assert "time_per_output_token" in message and "time_to_first_token" in message
    assert "'default'" in message and "'ais_bench'" in message


def test_the_evaluator_and_the_prior_hold_the_statistic_slo_names():
    """[slo] ttft = "p99<..." makes the objective hold TTFT p99 wherever it is built from the Config (the
    evaluator's fitness, the prior's predictions), as validation builds it, not the scalars' means."""
    from pathlib import Path

    from msopt.evaluate.evaluator import Evaluator
    from msopt.prior.simulator import SimulatorPrior
    from msopt.run.validate import load

    quick = Path(__file__).resolve().parents[2] / "configs" / "quickstart.toml"
    checked = load(quick, overrides={"slo": {"ttft": "p99<2s", "tpot": "p90<30ms"}})
    want = ("ttft_p99", "tpot_p90")
    assert (checked.objective.settings.ttft_metric, checked.objective.settings.tpot_metric) == want
    for objective in (Evaluator(checked.config, simulate=True).objective,
                      SimulatorPrior(checked.config, checked.space).objective):
        assert (objective.settings.ttft_metric, objective.settings.tpot_metric) == want
        assert objective.settings.ttft_slo == 2.0 and objective.settings.tpot_slo == 0.03
