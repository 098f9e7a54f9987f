"""The driver keeps no per-evaluation state when a journal records every result (scripts/benchmarks/soak.py
measures the same over 10,000 evaluations)."""

from __future__ import annotations

from pathlib import Path

import pytest

from msopt.config import Settings
from msopt.run.driver import Driver
from msopt.run.pool import InProcessPool
from msopt.run.store import RunStore
from msopt.space import SearchSpace
from tests.support.driver_helpers import FormulaEvaluator

from .test_properties import base, score  # noqa: F401  (the module-scoped settings fixture)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_driver_with_a_journal_keeps_no_result_per_evaluation(base: Settings, mode: str,  # noqa: F811
                                                              tmp_path: Path) -> None:
    settings = base.replace(mode=mode, duplicate_policy="rerun", n_particles=4, iters=6)
    space = SearchSpace.from_settings(settings)
    store = RunStore.create(tmp_path, settings.config)
    pool = InProcessPool(settings.config, size=3, evaluator_factory=lambda k: FormulaEvaluator(space, score, name=f"w{k}"))
    try:
        # no progress display; no start-up rules: vLLM would refuse every configuration of this space
        # (prefill is a ratio of seqs, so max_num_batched_tokens < max_num_seqs) and none would run
        driver = Driver(settings.config, pool, store=store, screen=False)
        outcome = driver.run()
        leftover = pool.running()
    finally:
        pool.close()
        store.close()
    total = 1 + 4 * 6 + 2 + 1  # the baseline, 6 iterations of 4, the top 2 again and the baseline beside them
    assert outcome.evaluations == total and outcome.results == []
    assert driver.results == [] and driver.dispatcher.cache == {} and not driver.dispatcher.inflight and not driver.dispatcher.decoded
    assert len(driver.leaderboard.board) <= 2 and len(leftover) <= pool.size  # start notices drained at every collect
    assert sorted(r.eval_id for r in store.load_journal()) == list(range(total))
    assert outcome.best is not None and outcome.best.phase == "refine"
