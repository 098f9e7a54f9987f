"""Property tests: arbitrary positions never crash the driver, the swarm never leaves its bounds,
and the journal always parses, whatever the evaluations report (NaN, inf, huge numbers, any text).
"""

from __future__ import annotations

import csv
import io
import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from msopt.config import Settings, load_settings
from msopt.errors import ConfigError, DecodeError
from msopt.evaluate.results import METRICS, PHASES, EvalRequest, EvaluationResult
from msopt.run.driver import Driver
from msopt.run.pool import InProcessPool
from msopt.run.store import RunStore, json_safe
from msopt.search.swarm import Swarm, SwarmOptions
from msopt.space import DecodeContext, SearchSpace
from tests.support.driver_helpers import FormulaEvaluator
from tests.support.fields_toml import TP_PP_DP

CFG = """
n_particles = 4
iters = 2
seed = 1
[data_storage]
pso_top_k = 2
""" + TP_PP_DP + """
[[vllm.target_field]]
name = "seqs"
config_position = "--max-num-seqs"
min = 8
max = 64
dtype = "int"
value = 16
[[vllm.target_field]]
name = "prefill"
config_position = "--max-num-batched-tokens"
min = 0.1
max = 0.9
dtype = "ratio"
dtype_param = "seqs"
value = 0.5
[[vllm.target_field]]
name = "delay"
config_position = "--scheduler-delay-factor"
min = 0
max = 100
dtype = "range"
dtype_param = 5
value = 10
[[vllm.target_field]]
name = "util"
config_position = "--gpu-memory-utilization"
min = 0.5
max = 0.95
dtype = "float"
value = 0.9
[[vllm.target_field]]
name = "chunked"
config_position = "--enable-chunked-prefill"
min = 0
max = 1
dtype = "bool"
value = true
"""

#: Any float: NaN, ±inf, huge, tiny, negative zero.
ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True)
#: Any text: control characters, and the lone surrogates that undecodable subprocess output
#: becomes under ``errors="surrogateescape"`` (U+DC80..U+DCFF), included.
ANY_TEXT = st.text(st.one_of(st.characters(exclude_categories=("Cs",)), st.characters(min_codepoint=0xDC80,
                                                                                max_codepoint=0xDCFF)), max_size=60)
PROPS = hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    path = tmp_path_factory.mktemp("props") / "cfg.toml"
    path.write_text(CFG, encoding="utf-8")
    return load_settings(str(path), environ={})


def score(values: dict) -> float:
    return abs(values["tp"] - 2) + abs(values["pp"] - 2) + abs(values["seqs"] - 40) / 10 + values["delay"] / 100


def _in_bounds(x: np.ndarray, low: np.ndarray, high: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(x)) and np.all(x >= low) and np.all(x <= high))


def positions(d: int) -> st.SearchStrategy[list[float]]:
    return st.lists(ANY_FLOAT, min_size=d, max_size=d)


class WildEvaluator:
    """Decodes the request like an actor, but reports whatever the test drew: any fitness and
    any written-back position (NaN, inf, outside the bounds)."""

    def __init__(self, space: SearchSpace, draws: list[tuple[float, list[float]]]) -> None:
        self.space = space
        self.draws = draws
        self.devices: list[str] = []

    def evaluate(self, req: EvalRequest) -> EvaluationResult:
        fitness, position = self.draws[req.eval_id % len(self.draws)]
        try:
            values = self.space.decode(req.position, req.context).values
        except DecodeError as exc:
            values = exc.values
        return EvaluationResult(eval_id=req.eval_id, phase=req.phase, particle=req.particle,
                                iteration=req.iteration, position_in=list(req.position), position=list(position),
                                values=values, metrics={m: None for m in METRICS}, fitness=fitness,
                                num_prompts=req.num_prompts)


# -- the driver ------------------------------------------------------------------------------
@PROPS
@given(data=st.data(), mode=st.sampled_from(["sync", "async"]), dup=st.sampled_from(["reuse", "rerun"]))
def test_driver_survives_any_reported_position_and_fitness(base: Settings, data: st.DataObject, mode: str,
                                                           dup: str) -> None:
    settings = base.replace(mode=mode, duplicate_policy=dup)
    space = SearchSpace.from_settings(settings)
    d = len(space.dimensions)
    draws = data.draw(st.lists(st.tuples(ANY_FLOAT, positions(d)), min_size=1, max_size=12))
    pool = InProcessPool(settings.config, size=2, evaluator_factory=lambda k: WildEvaluator(space, draws))
    try:
        driver = Driver(settings.config, pool)
        outcome = driver.run()
    finally:
        pool.close()
    low, high = space.bounds
    assert _in_bounds(driver.searcher.swarm.positions, low, high)
    assert np.all(np.isfinite(driver.searcher.swarm.velocities))
    search = [r for r in outcome.results if r.phase == "search"]
    assert len(search) == settings.config.run.n_particles * settings.config.run.iters
    assert sorted({(r.particle, r.iteration) for r in search}) == sorted(
        (i, k) for i in range(settings.config.run.n_particles) for k in range(settings.config.run.iters))
    if outcome.best is not None:
        assert math.isfinite(outcome.best.fitness)


@PROPS
@given(data=st.data())
def test_driver_dispatches_any_request_position(base: Settings, data: st.DataObject) -> None:
    space = SearchSpace.from_settings(base)
    d = len(space.dimensions)
    reqs_pos = data.draw(st.lists(positions(d), min_size=1, max_size=8))
    pool = InProcessPool(base.config, size=2, evaluator_factory=lambda k: FormulaEvaluator(space, score, name=f"w{k}"))
    try:
        driver = Driver(base.config, pool)
        got = {}
        for k, pos in enumerate(reqs_pos):
            req = EvalRequest(eval_id=1 + k, phase="search", particle=k % base.config.run.n_particles, iteration=k,
                              position=tuple(pos), context=DecodeContext(k % base.config.run.n_particles, base.config.run.n_particles, k),
                              num_prompts=None)
            r = driver.dispatch(req)
            if r is not None:
                got[r.eval_id] = r
        while driver.outstanding:
            for r in driver.collect(timeout=1.0):
                got[r.eval_id] = r
    finally:
        pool.close()
    assert sorted(got) == list(range(1, len(reqs_pos) + 1))
    low, high = space.bounds
    for r in got.values():
        assert r.failed or _in_bounds(np.asarray(r.position, dtype=float), low, high)


# -- the swarm -------------------------------------------------------------------------------
@st.composite
def swarms(draw: st.DrawFn) -> tuple[Swarm, int]:
    d = draw(st.integers(1, 5))
    low = np.array(draw(st.lists(st.floats(-1e6, 1e6), min_size=d, max_size=d)))
    width = np.array(draw(st.lists(st.one_of(st.just(0.0), st.floats(1e-9, 1e6)), min_size=d, max_size=d)))
    n = draw(st.integers(1, 6))
    iters = draw(st.integers(1, 20))
    schedules = {k: draw(st.sampled_from(["constant", "random", "exp_decay"])) for k in ("w", "c1", "c2")}
    try:
        opts = SwarmOptions(n_particles=n, iters=iters, c1=draw(st.floats(0, 5)), c2=draw(st.floats(0, 5)),
                            w=draw(st.floats(0, 3)), velocity_clamp=draw(st.floats(1e-6, 1e6)),
                            strategy=schedules, seed=draw(st.integers(0, 2**32)))
    except ConfigError:  # a schedule this start value cannot take below 0 is refused, as by the config
        opts = SwarmOptions(n_particles=n, iters=iters, seed=0)
    init = draw(st.one_of(st.none(), positions(d)))
    return Swarm(low, low + width, opts, init_positions=None if init is None else [init]), iters


@PROPS
@given(made=swarms(), data=st.data())
def test_swarm_never_leaves_its_bounds(made: tuple[Swarm, int], data: st.DataObject) -> None:
    swarm, iters = made
    n, d = swarm.n_particles, swarm.dimensions
    low, high = swarm.low, swarm.high
    assert _in_bounds(swarm.ask(), low, high)
    for _ in range(data.draw(st.integers(1, iters + 3))):
        if data.draw(st.booleans()):
            fitness = data.draw(st.lists(ANY_FLOAT, min_size=n, max_size=n))
            written = data.draw(st.one_of(st.none(), st.lists(positions(d), min_size=n, max_size=n)))
            swarm.tell(fitness, written)
        else:
            i = data.draw(st.integers(0, n - 1))
            swarm.tell_one(i, data.draw(ANY_FLOAT), data.draw(st.one_of(st.none(), positions(d))))
        assert _in_bounds(swarm.ask(), low, high)
        assert _in_bounds(swarm.personal_best_positions, low, high)
        assert np.all(np.isfinite(swarm.velocities))
    state = json.loads(json.dumps(swarm.to_state(), allow_nan=False))  # the checkpoint is strict JSON
    assert np.array_equal(np.array(state["positions"]), swarm.ask())


# -- the journal -----------------------------------------------------------------------------
JSON_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-(2**200), 2**200), ANY_FLOAT, ANY_TEXT)


@st.composite
def results(draw: st.DrawFn, eval_id: int) -> EvaluationResult:
    return EvaluationResult(
        eval_id=eval_id, phase=draw(st.sampled_from(PHASES)), particle=draw(st.one_of(st.none(), st.integers(0, 10**6))),
        iteration=draw(st.integers(0, 10**9)), position_in=draw(st.lists(ANY_FLOAT, max_size=4)),
        position=draw(st.lists(ANY_FLOAT, max_size=4)),
        values=draw(st.dictionaries(ANY_TEXT, JSON_SCALAR, max_size=4)),
        metrics=draw(st.fixed_dictionaries({m: st.one_of(st.none(), ANY_FLOAT) for m in METRICS})),
        fitness=draw(ANY_FLOAT), error=draw(st.one_of(st.none(), ANY_TEXT)), attempts=draw(st.integers(0, 99)),
        reused=draw(st.booleans()), devices=draw(st.lists(ANY_TEXT, max_size=2)),
        actor=draw(st.one_of(st.none(), ANY_TEXT)), started=draw(st.floats(0, 1e12)),
        finished=draw(st.floats(0, 1e12)), num_prompts=draw(st.one_of(st.none(), st.integers(0, 10**9))),
        warnings=draw(st.lists(ANY_TEXT, max_size=2)))


def _strict(text: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def _floats_back(xs: list[float]) -> list[float]:
    return [x if math.isfinite(x) else math.nan for x in xs]


@PROPS
@given(data=st.data())
@pytest.mark.slow  # many hypothesis examples
def test_journal_always_parses(base: Settings, data: st.DataObject) -> None:
    ids = data.draw(st.lists(st.integers(0, 2**40), min_size=1, max_size=6, unique=True))
    written = [data.draw(results(i)) for i in ids]
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore.create(Path(tmp), base.config, run_id="props")
        for r in written:
            store.append(r)
        store.close()
        raw = store.journal_path.read_bytes()
        assert raw.endswith(b"\n") and raw.count(b"\n") == len(written)
        for line in raw.decode("utf-8").splitlines():
            assert isinstance(_strict(line), dict)
        back = RunStore.open(store.run_dir).load_journal()
        table = list(csv.reader(io.StringIO(store.results_path.read_text(encoding="utf-8"))))
    assert len(table) == 1 + len(written)
    assert [r.eval_id for r in back] == ids
    for w, b in zip(written, back):
        assert b.error == w.error and b.phase == w.phase and b.particle == w.particle
        assert b.fitness == (w.fitness if math.isfinite(w.fitness) else math.inf)
        assert np.array_equal(b.position, _floats_back(w.position), equal_nan=True)
        assert np.array_equal(b.position_in, _floats_back(w.position_in), equal_nan=True)
        assert b.values == json_safe(w.values)
        assert b.metrics == json_safe(w.metrics)
        assert b.warnings == w.warnings and b.devices == w.devices and b.actor == w.actor


# -- the driver's bounded memory -----------------------------------------------------------------
@PROPS
@given(data=st.data(), top_k=st.integers(0, 4))
def test_top_k_board_equals_ranking_every_result(base: Settings, data: st.DataObject, top_k: int) -> None:
    """The driver keeps only the pso_top_k best distinct configurations, not every result; its
    pick must equal ranking all results at the end (the original refine selection)."""
    settings = base.replace(data_storage={"pso_top_k": top_k})
    driver = Driver(settings.config, pool=None, keep_results=False)  # type: ignore[arg-type]
    fits = st.one_of(st.floats(-5, 5), st.just(math.inf), st.just(math.nan))
    drawn = data.draw(st.lists(st.tuples(st.integers(0, 5), fits, st.sampled_from(["baseline", "search", "refine"])),
                               max_size=40))
    every = []
    for eval_id, (config, fitness, phase) in enumerate(drawn):
        r = EvaluationResult(eval_id=eval_id, phase=phase, particle=None, iteration=0, position_in=[], position=[],
                             values={"seqs": config}, metrics={}, fitness=fitness)
        driver.finish(r, journal=False)
        every.append(r)
    ranked = sorted((r for r in every if r.phase in ("baseline", "search") and not r.failed),
                    key=lambda r: (r.fitness, r.eval_id))
    expected, seen = [], set()
    for r in ranked:
        if r.values["seqs"] not in seen and len(expected) < top_k:
            seen.add(r.values["seqs"])
            expected.append(r.eval_id)
    assert [r.eval_id for r in sorted(driver.leaderboard.board.values(), key=lambda r: (r.fitness, r.eval_id))] == expected
    assert driver.results == [] and driver.evaluations == len(every)
    assert driver.failures == sum(r.failed for r in every)
