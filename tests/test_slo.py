"""One SLO check (msopt/slo.py) behind the verdict, the capacity probes and the goodput objective."""

from __future__ import annotations

import math

import pytest

from msopt.evaluate.objective import ObjectiveSettings, make_objective
from msopt.slo import Slos, slo_checks

SLOS = Slos(ttft=1.0, tpot=0.05, success_rate=0.99)


@pytest.mark.parametrize("ttft,tpot,ok", [(0.5, 0.04, 1.0), (1.0, 0.05, 0.99), (1.5, 0.04, 1.0),
                                          (0.5, 0.06, 1.0), (0.5, 0.04, 0.9), (2.0, 0.1, 0.5)])
def test_goodput_feasible_exactly_when_every_check_is_met(ttft, tpot, ok):
    metrics = {"time_to_first_token": ttft, "time_per_output_token": tpot, "success_rate": ok,
               "generate_speed": 100.0}
    checks = slo_checks(SLOS, metrics)
    goodput = make_objective("goodput", ObjectiveSettings(ttft_slo=1.0, tpot_slo=0.05, success_rate_slo=0.99))
    fitness = goodput(metrics)
    assert (fitness == -100.0) is all(c.met for c in checks)
    if not all(c.met for c in checks):
        expected = (max(0.0, ttft / 1.0 - 1) + max(0.0, tpot / 0.05 - 1) + max(0.0, 0.99 / ok - 1))
        assert math.isclose(fitness, 1.0 + expected)


def test_percentile_names_and_reasons():
    checks = slo_checks(SLOS, {"ttft_p99": 1.25, "tpot_p99": 0.01, "success_rate": 1.0},
                        ttft="ttft_p99", tpot="tpot_p99")
    assert [c.metric for c in checks] == ["ttft_p99", "tpot_p99", "success_rate"]
    broken = [c for c in checks if not c.met]
    assert [c.reason() for c in broken] == ["ttft_p99 1.25 > 1"]


def test_unmeasured_is_not_met():
    checks = slo_checks(SLOS, {"time_to_first_token": None, "success_rate": True})
    assert not any(c.met for c in checks)
