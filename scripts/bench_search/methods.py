"""The methods compared, one adapter each: msopt (sync, sync without write-back, async) through its
own Driver, and the peers (Optuna TPE and CMA-ES, Nevergrad PSO and NGOpt, pyswarms, random search)
over the same search space. Each runs until ``budget`` launches (msopt's duplicate reuse is free)
and returns nothing or (launches, pick): the oracle's launch list is the record.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from msopt.config import Settings
from msopt.errors import DecodeError
from msopt.evaluate.results import EvalRequest, EvaluationResult
from msopt.run.driver import Driver
from msopt.run.pool import InProcessPool
from msopt.space import SearchSpace

from .oracle import Oracle, OracleEvaluator
from .problems import Table, table_key

N_PARTICLES = 10            # msopt's swarm size; nevergrad PSO and pyswarms use the same
REFINE_TOP_K = 3            # msopt's [data_storage] pso_top_k: re-measured after the search, in the budget
PEER_PENALTY_FLOOR = 1e3    # fitness told to a peer for a failed launch before any success


def _decode_values(space: SearchSpace, position: np.ndarray) -> dict[str, Any] | None:
    """Peers' repair: our SearchSpace.decode without a context (tp kept, pp repaired)."""
    try:
        return space.decode(np.clip(position, *space.bounds), None).values
    except DecodeError:
        return None


class _Penalty:
    """What a peer is told for a failed launch: 10 × the worst finite fitness it has seen."""

    def __init__(self) -> None:
        self.worst = 0.0

    def __call__(self, f: float) -> float:
        if math.isfinite(f):
            self.worst = max(self.worst, f)
            return f
        return max(PEER_PENALTY_FLOOR, 10.0 * self.worst)


@dataclass(frozen=True)
class Variant:
    """An msopt configuration other than the shipped one, for the ablation (``--ablation-seeds``).

    Attributes:
        label: the row's name.
        pso_options: ``[pso_options]`` keys overriding the packaged defaults.
        top_k: ``pso_top_k`` (the search gets ``budget − top_k`` launches).
        pick: ``"mean"``: Driver.best() (best mean over each configuration's measurements, as
            shipped); ``"last"``: the best single re-measured result (msopt before the change).
    """

    label: str
    pso_options: tuple[tuple[str, Any], ...] = ()
    top_k: int = REFINE_TOP_K
    pick: str = "mean"


SHIPPED = Variant("shipped")


def _msopt_settings(table: Table, budget: int, seed: int, mode: str, variant: Variant = SHIPPED) -> Settings:
    iters = max(1, math.ceil((budget - variant.top_k - 1) / N_PARTICLES))
    options = {**table.settings.section("pso_options"), **dict(variant.pso_options)}
    return table.settings.replace(n_particles=N_PARTICLES, iters=iters, seed=seed, mode=mode,
                                  duplicate_policy="reuse", data_storage={"pso_top_k": variant.top_k},
                                  pso_options=options)


def _msopt_pick(table: Table, drv: Driver, variant: Variant = SHIPPED) -> int:
    """msopt's recommendation, Driver.best(): of the re-measured configurations the one with the
    best mean fitness over its measurements (else the best of all). Variant pick ``"last"``: the
    best single re-measured result instead."""
    best = drv.best()
    if variant.pick == "last" and drv.leaderboard.refined:
        best = min(drv.leaderboard.refined, key=lambda r: (r.fitness, r.eval_id))
    return -1 if best is None else table.index.get(table_key(table.space, best.values), -1)


Launches = list[tuple[int, float]]


def run_msopt_sync(table: Table, oracle: Oracle, budget: int, seed: int,
                   writeback: bool = True, variant: Variant = SHIPPED) -> tuple[Launches, int]:
    """Driver over an InProcessPool: baseline, whole iterations, then Driver.run_refine().

    The search runs until ``budget − pso_top_k`` launches; as reuse costs nothing it goes on past
    the planned ``iters`` (ceil((budget − pso_top_k − 1) / n_particles), which only sets the
    coefficient schedules' horizon), at most 4 × budget proposals. The iteration that reaches the
    search budget dispatches its particles in order only while launches are left; the rest are
    never proposed, so the driver (its top-k board included) sees exactly the search budget.
    Then the top ``pso_top_k`` distinct configurations are measured again (one launch each) and
    msopt's pick is Driver.best().
    """
    settings = _msopt_settings(table, budget, seed, "sync", variant)
    search_budget = budget - variant.top_k
    pool = InProcessPool(settings, size=1, evaluator_factory=lambda k: OracleEvaluator(oracle))
    try:
        drv = Driver(settings, pool)
        drv.run_baseline()
        it = 0
        while drv.launched < search_budget and (it + 1) * drv.n < 4 * budget:
            positions = drv.swarm.ask()
            reqs = [drv.search_request(i, it, positions[i]) for i in range(drv.n)]
            got: dict[int, EvaluationResult] = {}
            sent: list[EvalRequest] = []
            for req in reqs:
                if drv.launched >= search_budget:
                    break
                sent.append(req)
                r = drv.dispatch(req)
                if r is not None:
                    got[r.eval_id] = r
            while any(q.eval_id not in got for q in sent):
                for r in drv.collect():
                    got[r.eval_id] = r
            if len(sent) < len(reqs):
                break  # the search budget is spent in the middle of this iteration: no tell
            ordered = [got[r.eval_id] for r in reqs]
            fit = np.array([r.fitness for r in ordered])
            drv.swarm.tell(fit, np.array([r.position for r in ordered], dtype=float) if writeback else None)
            it += 1
        if len(oracle.launches) > search_budget:
            raise RuntimeError(f"msopt launched {len(oracle.launches)} > {search_budget} in its search")
        drv.run_refine()
        return list(oracle.launches), _msopt_pick(table, drv, variant)
    finally:
        pool.close()


class _InOrderPool:
    """An EvaluatorPool that hands results back one per ``wait``, in submission order.

    InProcessPool returns whatever its thread has finished at each wait, so in async mode the
    order of tells (and so the swarm's random draws) depends on thread timing. This pool makes
    the async run reproducible: as with evaluations of equal duration, one result at a time.
    """

    def __init__(self, evaluator: Any) -> None:
        self._evaluator = evaluator
        self._queue: list[EvalRequest] = []

    @property
    def size(self) -> int:
        return 1

    def submit(self, req: EvalRequest) -> None:
        self._queue.append(req)

    def wait(self, timeout: float | None = None) -> list[EvaluationResult]:
        return [self._evaluator.evaluate(self._queue.pop(0))] if self._queue else []

    def running(self) -> list[tuple[int, list[str]]]:
        return []

    def close(self) -> None:
        self._queue.clear()


def run_msopt_async(table: Table, oracle: Oracle, budget: int, seed: int,
                    variant: Variant = SHIPPED) -> tuple[Launches, int]:
    """Driver's async loop (write-back on) until ``budget − pso_top_k`` launches, then
    Driver.run_refine(); the pick is Driver.best(). Results come back one at a time in dispatch
    order (:class:`_InOrderPool`), as from evaluations of equal duration."""
    settings = _msopt_settings(table, budget, seed, "async", variant)
    search_budget = budget - variant.top_k
    pool = _InOrderPool(OracleEvaluator(oracle))
    try:
        drv = Driver(settings, pool)
        drv.run_baseline()
        cap = 4 * budget // drv.n + 1   # proposals per particle, reuse included

        def dispatch(i: int) -> None:
            while drv.launched < search_budget and int(drv.swarm.evaluation_counts[i]) < cap:
                c = int(drv.swarm.evaluation_counts[i])
                r = drv.dispatch(drv.search_request(i, c, drv.swarm.ask_one(i)))
                if r is None:
                    return
                drv.swarm.tell_one(i, r.fitness, np.asarray(r.position, dtype=float))

        for i in range(drv.n):
            dispatch(i)
        while drv.outstanding:
            for r in drv.collect():
                if r.phase == "search":
                    drv.swarm.tell_one(r.particle, r.fitness, np.asarray(r.position, dtype=float))
                    dispatch(r.particle)
        drv.run_refine()
        return list(oracle.launches), _msopt_pick(table, drv, variant)
    finally:
        pool.close()


def run_random(table: Table, oracle: Oracle, budget: int, seed: int) -> None:
    space = table.space
    low, high = space.bounds
    rng = np.random.default_rng(seed)
    oracle.launch(_decode_values(space, space.default_position()))
    while len(oracle.launches) < budget:
        oracle.launch(_decode_values(space, low + rng.random(low.size) * (high - low)))


def _optuna_quiet() -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module="optuna")  # CmaEsSampler x0
    return optuna


def run_tpe(table: Table, oracle: Oracle, budget: int, seed: int) -> None:
    """Multivariate TPE over the candidate indices; the product constraint via constraints_func.

    TPE proposes tp, pp and the knobs; our decode repairs an invalid tp·pp (as for every peer)
    and the repaired configuration is launched, its fitness told for the proposal. The trial's
    constraint values are [tp·pp does not divide the world size, the launch failed] (1 = violated),
    so TPE learns to propose valid, feasible configurations.
    """
    optuna = _optuna_quiet()
    space = table.space
    cands = [d.candidates for d in space.dimensions]
    world = table.problem.world
    # Optuna 5 replaced constraints_func by Trial.set_constraint (the same trial.constraints
    # that TPE reads); older versions get constraints_func.
    modern = hasattr(optuna.trial.Trial, "set_constraint")
    extra = {} if modern else {"constraints_func": lambda t: t.user_attrs["constraints"]}
    sampler = optuna.samplers.TPESampler(multivariate=True, seed=seed, **extra)
    study = optuna.create_study(sampler=sampler)
    default = space.decode(space.default_position(), None).values
    study.enqueue_trial({n: list(c).index(default[n]) for n, c in zip(space.names, cands)})
    penalty = _Penalty()
    while len(oracle.launches) < budget:
        trial = study.ask()
        proposed = {n: c[trial.suggest_int(n, 0, len(c) - 1)] for n, c in zip(space.names, cands)}
        values = _decode_values(space, space.encode(proposed))
        f, _, _ = oracle.launch(values)
        bad_product = world % (proposed["tp"] * proposed["pp"]) != 0
        cons = {"product": float(bad_product), "failed": float(not math.isfinite(f))}
        if modern:
            for k, v in cons.items():
                trial.set_constraint(k, v)
        else:
            trial.set_user_attr("constraints", list(cons.values()))
        study.tell(trial, penalty(f))


def run_cmaes(table: Table, oracle: Oracle, budget: int, seed: int) -> None:
    """Optuna's CMA-ES over our continuous position box, x0 = the default position; decode repairs."""
    optuna = _optuna_quiet()
    space = table.space
    low, high = space.bounds
    x0 = {n: float(x) for n, x in zip(space.names, space.default_position())}
    sampler = optuna.samplers.CmaEsSampler(x0=x0, seed=seed, n_startup_trials=0)
    study = optuna.create_study(sampler=sampler)
    study.enqueue_trial(x0)
    penalty = _Penalty()
    while len(oracle.launches) < budget:
        trial = study.ask()
        pos = np.array([trial.suggest_float(n, lo, hi) for n, lo, hi in zip(space.names, low, high)])
        f, _, _ = oracle.launch(_decode_values(space, pos))
        study.tell(trial, penalty(f))


def _ng_run(table: Table, oracle: Oracle, budget: int, seed: int, discrete: bool, make) -> None:
    import nevergrad as ng

    space = table.space
    low, high = space.bounds
    default = space.default_position()
    if discrete:
        cands = [d.candidates for d in space.dimensions]
        param = ng.p.Tuple(*[ng.p.TransitionChoice(list(range(len(c)))) for c in cands])
        dvals = space.decode(default, None).values
        init = tuple(list(c).index(dvals[n]) for n, c in zip(space.names, cands))

        def to_values(x: Any) -> dict[str, Any] | None:
            return _decode_values(space, space.encode({n: c[i] for n, c, i in zip(space.names, cands, x)}))
    else:
        param = ng.p.Array(init=default, lower=low, upper=high)
        init = default

        def to_values(x: Any) -> dict[str, Any] | None:
            return _decode_values(space, np.asarray(x, dtype=float))
    param.random_state = np.random.RandomState(seed)
    opt = make(ng)(parametrization=param, budget=budget)
    opt.suggest(init)
    penalty = _Penalty()
    while len(oracle.launches) < budget:
        cand = opt.ask()
        f, _, _ = oracle.launch(to_values(cand.value))
        opt.tell(cand, penalty(f))


def run_ng_pso(table: Table, oracle: Oracle, budget: int, seed: int) -> None:
    """Nevergrad's PSO, popsize = msopt's n_particles, over our position box; decode repairs."""
    _ng_run(table, oracle, budget, seed, False, lambda ng: ng.optimizers.ConfiguredPSO(popsize=N_PARTICLES))


def run_ngopt(table: Table, oracle: Oracle, budget: int, seed: int) -> None:
    """Nevergrad's NGOpt over ordered choices (candidate indices); decode repairs."""
    _ng_run(table, oracle, budget, seed, True, lambda ng: ng.optimizers.NGOpt)


def run_pyswarms(table: Table, oracle: Oracle, budget: int, seed: int) -> None:
    """pyswarms GlobalBestPSO with the original tool's constants c1 = c2 = 2, w = 1.8;
    particle 0 starts at the default position; budget // n_particles iterations."""
    import logging

    import pyswarms as ps

    logging.getLogger("pyswarms").setLevel(logging.ERROR)
    space = table.space
    low, high = space.bounds
    np.random.seed(seed)  # pyswarms draws from numpy's global RNG
    init = low + np.random.random((N_PARTICLES, low.size)) * (high - low)
    init[0] = space.default_position()
    penalty = _Penalty()

    def cost(x: np.ndarray) -> np.ndarray:
        return np.array([penalty(oracle.launch(_decode_values(space, row))[0]) for row in x])

    opt = ps.single.GlobalBestPSO(n_particles=N_PARTICLES, dimensions=low.size,
                                  options={"c1": 2.0, "c2": 2.0, "w": 1.8}, bounds=(low, high), init_pos=init)
    opt.optimize(cost, iters=max(1, budget // N_PARTICLES), verbose=False)


@dataclass(frozen=True)
class Method:
    name: str
    run: Callable[..., None]
    budget_free: bool   # behaviour does not depend on the budget: the 50 run is a prefix of the 200 run
    how: str


METHODS = (
    Method("msopt sync", run_msopt_sync, False,
           "Driver over InProcessPool, 10 particles, write-back on, duplicate reuse (free); refine top 3"),
    Method("msopt sync (no write-back)", lambda *a: run_msopt_sync(*a, writeback=False), False,
           "as above, but Swarm.tell without the repaired positions"),
    Method("msopt async", run_msopt_async, False,
           "Driver's async loop, 10 particles, one result at a time in dispatch order; refine top 3"),
    Method("Optuna TPE", run_tpe, True,
           "multivariate TPE on candidate indices; constraints (constraints_func / Trial.set_constraint)"),
    Method("Optuna CMA-ES", run_cmaes, True, "CmaEsSampler on the position box, x0 = default"),
    Method("Nevergrad PSO", run_ng_pso, False, "ConfiguredPSO(popsize=10) on the position box"),
    Method("Nevergrad NGOpt", run_ngopt, False, "NGOpt on ordered choices (TransitionChoice)"),
    Method("pyswarms GBest", run_pyswarms, False, "GlobalBestPSO, c1 = c2 = 2, w = 1.8, 10 particles"),
    Method("random search", run_random, True, "uniform on the position box"),
)


_BEFORE = (("boundary", "reflect"), ("restart_patience", 0), ("c2", 1.5), ("mutation", 0.0))
ABLATION: tuple[tuple[float, tuple[str, ...], Variant], ...] = (
    (0.03, ("sync", "async"), Variant("before: reflect, no restart, c2 = 1.5, best single re-measurement",
                                      _BEFORE, pick="last")),
    (0.03, ("sync", "async"), Variant("+ stall restart (restart_patience = 3)", _BEFORE[::2] + _BEFORE[3:],
                                      pick="last")),
    (0.03, ("sync", "async"), Variant("+ absorbing boundary", _BEFORE[2:], pick="last")),
    (0.03, ("sync", "async"), Variant("+ c2 = 2.0", _BEFORE[3:], pick="last")),
    (0.03, ("sync", "async"), Variant("+ pick by mean fitness", _BEFORE[3:])),
    (0.03, ("sync", "async"), Variant("+ step mutation 0.5 (shipped)")),
    (0.06, ("sync",), Variant("noise 0.06: best single re-measurement", pick="last")),
    (0.06, ("sync",), Variant("noise 0.06: pick by mean fitness (shipped)")),
    (0.06, ("sync",), Variant("noise 0.06: pick by mean fitness, pso_top_k = 5", top_k=5)),
)
"""The ablation's rows: (noise, modes, variant). Each row adds one change to the row above it,
from msopt before this benchmark to msopt as shipped; the noise 0.06 rows compare final picks."""
