"""The second built-in searcher, Optuna's TPE (``[search] searcher = "tpe"``), through the same
Driver: typed dimensions, the prior's picks first, the constraint, concurrency kept by the driver,
and resume by replay."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from msopt.config import load_settings, split
from msopt.errors import ConfigError
from msopt.run.driver import Driver
from msopt.run.pool import InProcessPool
from msopt.search import Constraint, Screen, SearcherSetup, check_searcher, make_searcher, search_dimensions
from msopt.space import DecodeContext, SearchSpace
from tests.search.test_searcher import KNOBS, score
from tests.support.driver_helpers import FormulaEvaluator
from tests.support.fields_toml import TP_PP_DP

pytest.importorskip("optuna")

SETTINGS = """
n_particles = 4
seed = 3
mode = "{mode}"
iters = {iters}
[search]
searcher = "tpe"
[data_storage]
pso_top_k = 2
"""


def _settings(write_toml, mode="sync", iters=4, extra=""):
    text = SETTINGS.format(mode=mode, iters=iters) + extra + TP_PP_DP + KNOBS
    return load_settings(str(write_toml(text)), environ={})


class _FourWorkers(InProcessPool):
    """One thread (results in submission order, so a run is reproducible) that reports 4 workers:
    TPE without a prior runs a lane per worker, and these tests drive its 4 lanes."""

    @property
    def size(self) -> int:
        return 4


def _run(settings, previous=(), seen=None):
    space = SearchSpace.from_settings(settings)
    pool = _FourWorkers(settings.config, size=1, evaluator_factory=lambda k: FormulaEvaluator(space, score, seen=seen))
    try:
        driver = Driver(settings.config, pool, previous=previous, keep_results=True)
        return driver, driver.run()
    finally:
        pool.close()


def _key(r):
    return (r.eval_id, r.phase, r.particle, r.iteration, json.dumps(r.values, sort_keys=True), r.fitness, r.reused)


def _space(write_toml):
    return SearchSpace.from_settings(_settings(write_toml))


def _setup(space, mode="sync", init=None, constraint=None, n=4, seed=0):
    return SearcherSetup(search_dimensions(space), seed, n, mode, init, lambda i, c: DecodeContext(i, n, c),
                         constraint=constraint or Constraint())


def test_typed_dimensions_put_each_candidate_at_its_coordinate(write_toml):
    space = _space(write_toml)
    dims = search_dimensions(space)
    assert [d.name for d in dims] == list(space.names)
    tp = dims[space.names.index("tp")]
    assert tp.dtype == "enum" and tp.candidates == (1, 2, 4, 8) and tp.ordered
    assert tp.step == pytest.approx(space.steps[space.names.index("tp")])
    for k, c in enumerate(tp.candidates):
        x = space.default_position()
        x[space.names.index("tp")] = tp.coordinates[k]
        assert space.decode(x, None).values["tp"] == c and tp.nearest(tp.coordinates[k]) == k
    seqs = dims[space.names.index("seqs")]
    assert (seqs.low, seqs.high) == tuple(space.bounds[i][space.names.index("seqs")] for i in (0, 1))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_lanes_are_the_concurrency(write_toml, mode):
    searcher = make_searcher("tpe", _setup(_space(write_toml), mode))
    first = searcher.ask()
    assert [(t.lane, t.count) for t in first] == [(0, 0), (1, 0), (2, 0), (3, 0)]
    assert searcher.ask() == []  # every lane in flight
    searcher.tell(first[2].id, 1.0)
    assert searcher.lane_count(2) == 1
    again = searcher.ask()
    assert [(t.lane, t.count) for t in again] == ([] if mode == "sync" else [(2, 1)])
    with pytest.raises(KeyError):
        searcher.tell(first[2].id, 1.0)


def test_starting_positions_are_enqueued_first_and_the_same_seed_repeats(write_toml):
    space = _space(write_toml)
    init = np.array([space.default_position(), space.encode({**space.decode(space.default_position()).values,
                                                             "tp": 4, "pp": 2, "seqs": 300})])
    runs = []
    for _ in range(2):
        searcher = make_searcher("tpe", _setup(space, init=init))
        got = []
        for _ in range(3):
            trials = searcher.ask()
            got.append([t.position.tolist() for t in trials])
            for t in trials:
                searcher.tell(t.id, score(space.decode(t.position, t.context).values))
        runs.append(got)
    assert runs[0] == runs[1]
    first = [space.decode(np.array(x), None).values for x in runs[0][0][:2]]
    assert first[0] == space.decode(space.default_position(), None).values
    assert (first[1]["tp"], first[1]["pp"], first[1]["seqs"]) == (4, 2, 300)


def test_the_constraint_keeps_known_refusals_out_and_the_screen_ranks(write_toml):
    space = _space(write_toml)
    i = space.names.index("tp")
    tp8 = search_dimensions(space)[i].coordinates[3]
    refuse_tp8 = Constraint(decode=lambda x: space.decode(x, None).values, rules=lambda v: "no" if v["tp"] == 8 else None)
    searcher = make_searcher("tpe", _setup(space, mode="async", constraint=refuse_tp8))
    seen = []
    for _ in range(40):
        for t in searcher.ask():
            seen.append(t.position[i])
            searcher.tell(t.id, float(np.random.default_rng(len(seen)).random()))
    assert len(seen) >= 40 and tp8 not in seen
    prefer_low = Constraint(screen=Screen(8, 0.0, lambda xs: xs[:, space.names.index("seqs")]))
    plain, screened = (make_searcher("tpe", _setup(space, constraint=c)) for c in (Constraint(), prefer_low))
    s = space.names.index("seqs")
    mean = [np.mean([t.position[s] for t in x.ask()]) for x in (plain, screened)]
    assert mean[1] < mean[0]


def test_tpe_draws_again_what_the_space_would_repair(write_toml):
    """A proposal the space repairs (a tp·pp that does not divide the world size) would be
    measured as another configuration and told as the proposal's: TPE draws it again instead."""
    space = _space(write_toml)
    dims = search_dimensions(space)
    decode = lambda x: space.decode(x, None).values  # noqa: E731
    counts: list[int] = []
    for constraint in (Constraint(), Constraint(decode=decode)):
        searcher = make_searcher("tpe", _setup(space, mode="async", constraint=constraint, seed=1))
        repaired = 0
        for k in range(60):
            for t in searcher.ask():
                values = decode(t.position)
                repaired += any(d.candidates is not None and values[d.name] != d.candidates[d.nearest(x)]
                                for d, x in zip(dims, t.position))
                searcher.tell(t.id, float(np.random.default_rng(k).random()))
        counts.append(repaired)
    assert counts[1] <= 1 < 10 <= counts[0], counts  # one whose every redraw is repaired stands


def test_tpe_runs_through_the_driver(write_toml):
    seen: list = []
    driver, out = _run(_settings(write_toml), seen=seen)
    assert driver.searcher.name == "tpe"
    search = [r for r in out.results if r.phase == "search"]
    assert sorted((r.particle, r.iteration) for r in search) == [(p, i) for p in range(4) for i in range(4)]
    assert sorted(r.eval_id for r in search) == list(range(1, 17))  # 1 + count × lanes + lane
    assert out.best is not None and out.best.fitness < out.results[0].fitness  # better than the baseline
    assert not any(driver.space.decode(req.position, req.context).values["tokens"]
                   < driver.space.decode(req.position, req.context).values["seqs"] for req, _ in seen)
    assert not hasattr(driver.searcher, "swarm")
    state = driver.searcher.to_state()
    assert state["searcher"] == "tpe" and len(state["trials"]) == 16


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("cut", [1, 6, 13])
def test_a_resumed_tpe_run_gives_the_uninterrupted_result(write_toml, mode, cut):
    """Resume replays the journal into a TPE built from the same setup: the resumed run asks and
    gets exactly what the uninterrupted one did, and its searcher ends in the same state."""
    settings = _settings(write_toml, mode=mode)
    full_driver, full = _run(settings)
    again: list = []
    driver, resumed = _run(settings, previous=full.results[:cut], seen=again)
    assert sorted(map(_key, resumed.results)) == sorted(map(_key, full.results))
    assert len(again) == sum(not r.reused and not r.refused for r in full.results[cut:])
    assert driver.searcher.to_state() == full_driver.searcher.to_state()


def test_resuming_a_tpe_run_with_fewer_workers_than_its_lanes_is_refused(write_toml):
    """TPE without a prior runs a lane per worker: a journal of 4 lanes resumed on one worker
    would replay its results into the wrong trials, so the driver refuses it in one line."""
    settings = _settings(write_toml)
    _, full = _run(settings)
    space = SearchSpace.from_settings(settings)
    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: FormulaEvaluator(space, score))
    try:
        with pytest.raises(ConfigError, match="resume with as many workers") as err:
            Driver(settings.config, pool, previous=full.results[:8])
        assert "\n" not in str(err.value)
    finally:
        pool.close()


def test_validate_names_the_missing_extra(write_toml, monkeypatch):
    from msopt.run.validate import validate

    settings = _settings(write_toml)
    validate(*split(settings))  # optuna is here
    monkeypatch.setitem(sys.modules, "optuna", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"searcher = \"tpe\" needs Optuna: pip install -e '\.\[tpe\]'") as err:
        validate(*split(settings))
    assert "\n" not in str(err.value) and "search.searcher" in str(err.value) or ".toml" in str(err.value)
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[tpe\]'"):
        check_searcher("tpe")


@pytest.mark.slow  # two runs of msopt optimize and a kill
def test_kill_9_then_resume_a_tpe_run_matches_the_uninterrupted_one(tmp_path):
    """``msopt optimize`` with ``searcher = "tpe"``, killed with SIGKILL mid-search, then ``--resume``:
    the journal equals the uninterrupted run's (sync), and nothing finished ran again."""
    import os
    import signal
    import time

    from tests.e2e.test_resume import config, journal, optimize, run_dir_of

    cfg = config(tmp_path, "sync")
    cfg.write_text(cfg.read_text() + '\n[search]\nsearcher = "tpe"\n')
    full = optimize("-c", str(cfg), "-o", str(tmp_path / "a"))
    _, err = full.communicate(timeout=300)
    assert full.returncode == 0, err
    expected = journal(run_dir_of(tmp_path / "a"))
    state = json.loads((run_dir_of(tmp_path / "a") / "state.json").read_text())
    assert state["searcher"] == "tpe" and len(state["searcher_state"]["trials"]) == 4 * 3
    victim = optimize("-c", str(cfg), "-o", str(tmp_path / "b"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        runs = list((tmp_path / "b").glob("*/journal.jsonl"))
        if runs and len(runs[0].read_text().splitlines()) >= 6:
            break
        time.sleep(0.05)
    os.kill(victim.pid, signal.SIGKILL)
    victim.communicate()
    run = run_dir_of(tmp_path / "b")
    partial = journal(run)
    assert 6 <= len(partial) < len(expected)
    resumed = optimize("--resume", str(run))
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    got = journal(run)
    assert got == expected
    assert all(got[k] == v for k, v in partial.items())
    assert json.loads((run / "state.json").read_text())["searcher_state"] == state["searcher_state"]
