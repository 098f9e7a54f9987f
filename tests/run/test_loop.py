"""The run loop's events and callbacks: typed events in order, the journal first, the verdict
from what the loop recorded, the progress display as a callback."""

from __future__ import annotations

import io

from msopt.cli.progress import PlainLog, ProgressCallback, progress_event
from msopt.config import load_settings, split
from msopt.evaluate.results import EvaluationResult
from msopt.run.driver import Driver, optimize
from msopt.run.events import Finished, PhaseStarted, Picked, RunEnded, RunStarted, TotalChanged
from msopt.run.pool import InProcessPool
from msopt.run.store import RunStore
from msopt.run.validate import validate
from msopt.run.verdict import make_verdict
from msopt.space import SearchSpace
from tests.support.driver_helpers import FormulaEvaluator

from .test_driver import config_text, score


class Seen:
    """Records every event, and for each new result whether the journal already held it."""

    def __init__(self, store: RunStore | None = None) -> None:
        self.events: list[object] = []
        self.journaled_first: list[bool] = []
        self.store = store

    def on_event(self, event: object) -> None:
        self.events.append(event)
        if isinstance(event, Finished) and not event.replayed and self.store is not None:
            ids = {r.eval_id for r in RunStore.open(self.store.run_dir).load_journal()}
            self.journaled_first.append(event.result.eval_id in ids)


def _settings(write_toml, mode: str = "sync", dup: str = "rerun"):
    return load_settings(str(write_toml(config_text(dup, mode))), environ={})


def _pool(settings):
    space = SearchSpace.from_settings(settings)
    return InProcessPool(settings.config, size=2, evaluator_factory=lambda k: FormulaEvaluator(space, score, name=f"w{k}"))


def test_callbacks_get_typed_events_after_the_journal(write_toml, tmp_path):
    settings = _settings(write_toml)
    store = RunStore.create(tmp_path, settings.config)
    seen = Seen(store)
    pool = _pool(settings)
    try:
        outcome = optimize(validate(*split(settings)), pool, callbacks=[seen], store=store)
    finally:
        pool.close()
        store.close()
    journal = RunStore.open(store.run_dir).load_journal()
    assert isinstance(seen.events[0], RunStarted) and seen.events[0].total == 1 + 6 * 4 + 3
    assert isinstance(seen.events[-1], RunEnded) and seen.events[-1].outcome is outcome
    finished = [e for e in seen.events if isinstance(e, Finished)]
    assert sorted(e.result.eval_id for e in finished) == sorted(r.eval_id for r in journal) == list(range(28))
    assert seen.journaled_first and all(seen.journaled_first)  # the store's callback comes first
    phases = [e.phase for e in seen.events if isinstance(e, PhaseStarted)]
    assert phases[0] == "baseline" and phases.count("search") == 4 and "refine" in phases
    assert any(isinstance(e, Picked) for e in seen.events) and any(isinstance(e, TotalChanged) for e in seen.events)
    assert set(outcome.records) == {"best.json"}
    assert (store.run_dir / "best.json").is_file() and (store.run_dir / "state.json").is_file()


def _verdict_lines(settings, results: list[EvaluationResult], outcome) -> list[str]:
    return make_verdict(settings.config, results, outcome.best, mean_fitness=outcome.mean_fitness,
                        measurements=outcome.measurements).lines()


def test_the_outcome_verdict_is_the_journal_verdict(write_toml, tmp_path):
    for mode in ("sync", "async"):
        settings = _settings(write_toml, mode=mode, dup="reuse")
        store = RunStore.create(tmp_path / mode, settings.config)
        pool = _pool(settings)
        try:
            outcome = Driver(settings.config, pool, store=store).run()
        finally:
            pool.close()
            store.close()
        journal = RunStore.open(store.run_dir).load_journal()
        assert outcome.verdict is not None and outcome.verdict.evaluations == len(journal) == outcome.evaluations
        assert outcome.verdict.best_speeds is not None and outcome.verdict.baseline_speeds is not None
        assert outcome.verdict.lines() == _verdict_lines(settings, journal, outcome)
        assert outcome.unreplayed == 0

        # resumed from the first half of the journal: the replayed half counts as the journal does
        half = journal[: len(journal) // 2]
        again = RunStore.create(tmp_path / f"{mode}-again", settings.config)
        for r in half:
            again.append(r)
        pool = _pool(settings)
        try:
            resumed = Driver(settings.config, pool, store=again, previous=half).run()
        finally:
            pool.close()
            again.close()
        rejournal = RunStore.open(again.run_dir).load_journal()
        assert resumed.unreplayed == 0 and resumed.evaluations == len(rejournal)
        assert resumed.verdict is not None and resumed.verdict.lines() == _verdict_lines(settings, rejournal, resumed)


def test_progress_callback_shows_what_the_loop_sends(write_toml):
    settings = _settings(write_toml)
    out = io.StringIO()
    pool = _pool(settings)
    try:
        Driver(settings.config, pool, callbacks=[ProgressCallback(PlainLog(out), "RUN")]).run()
    finally:
        pool.close()
    lines = [ln.split("] ", 1)[1] for ln in out.getvalue().splitlines()]
    assert lines[0] == "run RUN: 28 evaluations, 6 particles, dimensions: tp, pp, dp, seqs"
    assert lines[1] == "phase baseline: default configuration"
    assert any(ln.startswith("eval 27 baseline done fitness=") for ln in lines)
    assert any(ln.startswith("recommended so far fitness=") for ln in lines)
    assert lines[-1].startswith("finished: 28/28 evaluations, 0 failed; recommended fitness=")
    assert progress_event(RunEnded(outcome=None)) is None  # type: ignore[arg-type]  (not a display event)
