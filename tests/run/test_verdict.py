"""The verdict: each SLO with value, limit and met/broken; throughput against the baseline's."""

from __future__ import annotations

import math
from pathlib import Path

from msopt.evaluate.results import EvaluationResult
from msopt.run.validate import load
from msopt.run.verdict import make_verdict

QUICK = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.toml")  # TTFT 2.5 s, TPOT 20 ms


def result(eval_id: int, phase: str, ttft: float, tpot: float, speed: float, *, ok: float = 1.0,
           fitness: float = 1.0, **values) -> EvaluationResult:
    metrics = {"generate_speed": speed, "time_to_first_token": ttft, "time_per_output_token": tpot,
               "success_rate": ok, "throughput": 1.0}
    return EvaluationResult(eval_id, phase, None, 0, [], [], dict(values), metrics, fitness)


def failed(eval_id: int) -> EvaluationResult:
    return EvaluationResult(eval_id, "search", 0, 0, [], [], {"tp": 1}, {}, math.inf, error="OOM: 3 GiB short")


SETTINGS = load(QUICK)


def test_the_issues_example_reads_as_a_verdict():
    base = result(0, "baseline", 1.2, 0.0239, 9318.0, fitness=106.0, tp=1)
    best = result(49, "refine", 2.1, 0.0185, 6910.0, fitness=0.3508, tp=2, gpu_memory_utilization=0.7963799099058896)
    v = make_verdict(SETTINGS.config, [base, failed(1), best], best, mean_fitness=0.3482, measurements=2)
    assert v.met and v.met_count == 1 and not v.baseline_met
    lines = v.lines()
    assert lines[0] == "verdict: the recommended configuration meets every SLO"
    assert "  TTFT 2.1 s ≤ 2.5 s ✓" in lines and "  TPOT 18.5 ms ≤ 20 ms ✓" in lines
    assert "  success rate 100 % ≥ 100 % ✓" in lines
    assert lines[-2] == "  throughput: 6,910 tok/s within the SLOs; baseline 9,318 tok/s breaks TPOT 23.9 ms > 20 ms"
    assert lines[-1] == ("  vs baseline, full workload: 6,910 tok/s (1 measurement) against 9,318 tok/s "
                         "(1 measurement): -25.8 %, one measurement each: noise not measured")
    assert v.shown_values() == "tp=2, gpu_memory_utilization=0.80"  # the quick start's step 0.01
    assert "lower is better" in v.fitness_line() and "mean of 2 measurements 0.3482" in v.fitness_line()


def test_a_gain_over_a_baseline_within_the_slos_is_a_percentage():
    base = result(0, "baseline", 1.0, 0.015, 5000.0, tp=1)
    best = result(7, "search", 1.0, 0.016, 6000.0, tp=2)
    v = make_verdict(SETTINGS.config, [base, best], best)
    # the gain is the comparison line's, over the measurements with the full workload
    assert v.throughput_line().endswith("baseline 5,000 tok/s within the SLOs")
    assert v.comparison_line().endswith(": +20.0 %, one measurement each: noise not measured")
    # a capacity probe runs at its own load: its speed is not compared with the baseline's (issue 52: "+78.7 %"),
    # its configuration's measurements with the full workload are
    capacity = again(result(8, "capacity", 1.0, 0.016, 9000.0, tp=2), 8, 9000.0, "capacity", 0)
    capacity.load = {"request_rate": 7.17}
    v = make_verdict(SETTINGS.config, [base, best, capacity], capacity)
    assert v.throughput_line() == ("throughput: 9,000 tok/s within the SLOs at request_rate 7.17 (a capacity probe); "
                                   "baseline 5,000 tok/s at the configured load within the SLOs")
    assert v.comparison_line() == ("vs baseline, full workload: 6,000 tok/s (1 measurement) against 5,000 tok/s "
                                   "(1 measurement): +20.0 %, one measurement each: noise not measured")


def test_a_capacity_probe_of_the_baseline_configuration_is_no_gain():
    # issue 52: target_rate = "3x", no search launch: the recommendation is the baseline's own capacity probe
    base = result(0, "baseline", 1.0, 0.015, 5000.0, tp=1)
    probe = again(base, 1, 8935.0, "capacity", 0)
    probe.load = {"request_rate": 7.17}
    v = make_verdict(SETTINGS.config, [base, probe], probe)
    assert "%" not in v.throughput_line() and "at request_rate 7.17 (a capacity probe)" in v.throughput_line()
    # the baseline's own measurement on the search's sample, the probe on the whole window: each said as it is
    capped = again(base, 0, 5000.0, "baseline", 0, num_prompts=64)
    v = make_verdict(SETTINGS.config, [capped, probe], probe)
    assert v.throughput_line().endswith("(a capacity probe); baseline 5,000 tok/s on the search's sample of 64 "
                                        "prompts within the SLOs")
    assert v.lines()[-1] == "  vs baseline: the recommendation is the baseline configuration (nothing gained)"


def again(r: EvaluationResult, eval_id: int, speed: float, phase: str = "refine", iteration: int = 1,
          num_prompts: int | None = None) -> EvaluationResult:
    from dataclasses import replace

    return replace(r, eval_id=eval_id, phase=phase, iteration=iteration, num_prompts=num_prompts,
                   metrics=r.metrics | {"generate_speed": speed})


def test_a_gain_inside_the_spread_is_within_noise():
    # issue 25: one baseline measurement against the re-measured recommendation read +14.6 %;
    # both measured twice with the full workload, the ranges overlap
    base = result(0, "baseline", 1.0, 0.015, 5000.0, tp=1)
    best = result(7, "search", 1.0, 0.016, 5400.0, tp=2)
    results = [base, best, again(best, 8, 5100.0), again(base, 9, 5300.0, phase="baseline")]
    v = make_verdict(SETTINGS.config, results, results[2])
    assert (v.best_speeds.values, v.baseline_speeds.values) == ((5400.0, 5100.0), (5000.0, 5300.0))
    assert v.gain_text() == "+1.9 %, within noise"
    assert v.lines()[-1] == ("  vs baseline, full workload: 5,250 ± 150 tok/s (2 measurements) against "
                             "5,150 ± 150 tok/s (2 measurements): +1.9 %, within noise")
    assert v.throughput_line().endswith("baseline 5,000 tok/s within the SLOs")  # its own measurement


def test_a_gain_beyond_the_spread_is_not_noise_and_capped_searches_are_not_compared():
    base = result(0, "baseline", 1.0, 0.015, 5000.0, tp=1)
    capped = again(result(7, "search", 1.0, 0.016, 9000.0, tp=2), 7, 9000.0, "search", 0, num_prompts=64)
    results = [base, capped, again(capped, 8, 6000.0), again(capped, 9, 6100.0, iteration=2),
               again(base, 10, 5050.0, phase="baseline"), again(base, 11, 4950.0, phase="baseline", iteration=2)]
    v = make_verdict(SETTINGS.config, results, results[3])
    assert v.best_speeds.values == (6000.0, 6100.0)  # not the search's 64 prompts (the full workload is 640)
    assert v.gain_text() == "+21.0 %"
    # the baseline's own measurement on the search's sample is said to be one
    capped_base = again(base, 0, 5000.0, "baseline", 0, num_prompts=64)
    v = make_verdict(SETTINGS.config, [capped_base, *results[1:]], results[3])
    assert v.throughput_line().endswith("; baseline 5,000 tok/s on the search's sample of 64 prompts within the SLOs")


def test_the_baseline_configuration_recommended_is_no_gain():
    base = result(0, "baseline", 1.0, 0.015, 5000.0, tp=1)
    v = make_verdict(SETTINGS.config, [base, again(base, 5, 5600.0)], again(base, 5, 5600.0))
    assert v.same_configuration and v.gain_text() == "the baseline configuration itself"
    assert v.lines()[-1] == "  vs baseline: the recommendation is the baseline configuration (nothing gained)"


def test_no_configuration_met_the_slos_is_loud():
    base = result(0, "baseline", 3.0, 0.03, 9000.0)
    best = result(3, "search", 2.0, 0.021, 7000.0)
    v = make_verdict(SETTINGS.config, [base, best], best)
    assert not v.met and v.met_count == 0
    assert v.lines()[0].startswith("!!! NO CONFIGURATION MET THE SLOs in 2 evaluations")
    assert "  TPOT 21 ms > 20 ms ✗" in v.lines()
    assert "NOT within the SLOs" in v.throughput_line()
    assert "breaks TTFT 3 s > 2.5 s, TPOT 30 ms > 20 ms" in v.throughput_line()


def test_a_recommendation_that_breaks_an_slo_another_met_says_so():
    other = result(1, "search", 1.0, 0.019, 100.0, fitness=5.0, tp=1)
    best = result(2, "search", 1.0, 0.0205, 9000.0, fitness=0.5, tp=2)
    v = make_verdict(SETTINGS.config, [other, best], best)
    assert v.headline() == ("the recommended configuration breaks an SLO (1 other configuration(s) met every SLO in 1 "
                            "evaluation(s): 1 scored worse by mean fitness (5 against the recommendation's 0.5; "
                            "lower is better))")
    assert "no baseline measured" in v.throughput_line()


def test_configurations_that_met_only_on_the_sample_are_not_said_to_score_worse():
    # issue 52: "3 evaluation(s) met every SLO but scored worse on fitness" when their fitness was 12.97-13.13
    # against the pick's 4,192, and one of the three was the pick itself, met on the search's sample only
    pick = again(result(3, "search", 1.0, 0.015, 900.0, fitness=13.0, tp=2), 3, 900.0, "search", 0, num_prompts=64)
    pick_full = result(9, "refine", 7.0, 0.015, 1000.0, fitness=8383.0, tp=2)
    others = [again(result(i, "search", 1.0, 0.015, 900.0, fitness=f, tp=t), i, 900.0, "search", 0, num_prompts=64)
              for i, f, t in ((4, 12.97, 4), (5, 13.13, 8))]
    v = make_verdict(SETTINGS.config, [pick, *others, pick_full], pick_full, mean_fitness=4192.0, measurements=2)
    assert v.met_count == 3 and not v.met
    assert v.headline() == ("the recommended configuration breaks an SLO (it met every SLO only on the search's "
                            "smaller sample; 2 other configuration(s) met every SLO in 2 evaluation(s): 2 only on the "
                            "search's smaller sample (never measured with the full 640))")
    # the same configurations, re-measured with the full workload where they met, but worse by their mean
    worse = [again(o, 10 + j, 900.0, "refine", 1) for j, o in enumerate(others)]
    for w in worse:
        w.fitness = 5000.0
    v = make_verdict(SETTINGS.config, [pick, *others, pick_full, *worse], pick_full, mean_fitness=4192.0)
    # their means, (64 x 12.97 + 640 x 5000) / 704 and (64 x 13.13 + 640 x 5000) / 704, both 4,547
    assert v.headline() == ("the recommended configuration breaks an SLO (it met every SLO only on the search's "
                            "smaller sample; 2 other configuration(s) met every SLO in 4 evaluation(s): 2 scored worse "
                            "by mean fitness (4,547 against the recommendation's 4,192; lower is better))")


def test_every_evaluation_failed():
    v = make_verdict(SETTINGS.config, [failed(0), failed(1)], None)
    assert v.lines() == ["!!! NO CONFIGURATION SUCCEEDED: all 2 evaluations failed; see the errors in the report"]


def test_a_prediction_the_slo_penalty_dominates_names_the_broken_slos():
    """A predicted fitness of twelve digits tells a user nothing: the broken SLOs do (issue 39)."""
    from msopt.run.verdict import predicted_line

    broken = {"time_to_first_token": 8.8, "time_per_output_token": 0.0374, "success_rate": 1.0,
              "generate_speed": 2185.7, "fitness": 397519187374.5551}
    assert predicted_line(SETTINGS.config, broken) == ("the simulator prior predicted TTFT 8.8 s > 2.5 s ✗, TPOT 37.4 ms > "
                                                "20 ms ✗ for it (generate_speed 2185.7 tok/s; prior.json: its picks)")
    met = dict(broken, time_to_first_token=1.0, time_per_output_token=0.01, fitness=0.35)
    assert predicted_line(SETTINGS.config, met) == ("the simulator prior predicted fitness 0.3500 for it (generate_speed "
                                             "2185.7 tok/s; prior.json: its picks)")
