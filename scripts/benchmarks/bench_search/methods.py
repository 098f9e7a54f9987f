"""The methods compared, one adapter each: msopt through its public API (``Driver.run`` with a
launch budget and the simulator prior), the prior alone, and the peers (Optuna GPSampler, TPE and
CMA-ES, random search; Nevergrad PSO and NGOpt and pyswarms on request) over the same search
space. Each runs until ``budget`` launches (msopt's duplicate reuse and refused candidates are
free) and returns nothing or (launches, pick): the oracle's launch list is the record.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from msopt.config import Config, Settings
from msopt.errors import DecodeError
from msopt.evaluate.results import EvalRequest, EvaluationResult
from msopt.prior import PriorGuide, SimulatorPrior, make_prior
from msopt.run.driver import Driver
from msopt.run.pool import InProcessPool
from msopt.search import resolve_searcher
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
        top_k: ``pso_top_k`` (re-measured inside the budget).
        search: ``[search]`` keys overriding the packaged defaults (prior, screen, prior_picks).
    """

    label: str
    pso_options: tuple[tuple[str, Any], ...] = ()
    top_k: int = REFINE_TOP_K
    search: tuple[tuple[str, Any], ...] = ()
    generic: bool = False


SHIPPED = Variant("shipped")
FIXED_PRIOR = Variant("fixed prior", search=(("refit", False),))
#: msopt where no prior can be built (issue 38 item 2): ``prior = "none"`` and the default searcher
#: "auto" (Optuna's TPE, one lane per worker of the pool: here one, the unguided budget plan)
NO_PRIOR = Variant("no prior", search=(("prior", "none"),))
#: the same with TPE, and with the swarm, at every budget
NO_PRIOR_TPE = Variant("no prior, tpe", search=(("prior", "none"), ("searcher", "tpe")))
NO_PRIOR_SWARM = Variant("no prior, swarm", search=(("prior", "none"), ("searcher", "swarm")))
#: msopt on hardware outside the catalog: the prior starts from a roofline entry and is refitted
GENERIC = Variant("generic roofline, refit", generic=True)


@cache
def generic_hardware(hardware: str) -> str:
    """A TOML path: the problem's hardware as msopt sees a part outside its catalog. The roofline
    entry :func:`msopt.sim.detect.hardware_for` would build for it, from the nearest *other*
    catalog entry by memory of the same kind (of any kind where there is none: Atlas is the only
    NPU entry), with the part's own memory, devices per node and memory kind: every peak figure
    and efficiency is another part's, for the in-run refit to learn."""
    import tempfile
    from dataclasses import replace
    from pathlib import Path

    from msopt.sim.catalog_load import hardware_toml, list_hardware, load_hardware

    own = load_hardware(hardware)
    others = [load_hardware(n) for n in list_hardware() if n != hardware]
    same = [h for h in others if h.memory_kind == own.memory_kind] or others
    base = min(same, key=lambda h: (abs(h.hbm_gib - own.hbm_gib), h.name))
    hw = replace(base, name=f"generic-{hardware}", memory_kind=own.memory_kind, hbm_gib=own.hbm_gib,
                 devices_per_node=own.devices_per_node,
                 description=f"{own.name} as an unknown part: figures and efficiencies of {base.name}")
    path = Path(tempfile.mkdtemp(prefix="msopt-bench-generic-")) / f"generic-{hardware}.toml"
    path.write_text(hardware_toml(hw))
    return str(path)


def _msopt_settings(table: Table, budget: int, seed: int, mode: str, variant: Variant = SHIPPED) -> Settings:
    """msopt as its user configures it (the catalog's hardware, not the hidden reality), with a
    launch budget: ``max_launches = budget`` (baseline, search and re-measurements together)."""
    iters = max(1, math.ceil((budget - variant.top_k - 1) / N_PARTICLES))
    options = {**table.user_settings.config.pso_options.table, **dict(variant.pso_options)}
    search = {**table.user_settings.get("search", {}), **dict(variant.search)}
    extra: dict[str, Any] = {}
    if variant.generic:
        from msopt.config import thaw

        sim = thaw(table.user_settings.config.simulator.table)
        extra["simulator"] = {**sim, "hardware": generic_hardware(str(sim["hardware"]))}
    return table.user_settings.replace(n_particles=N_PARTICLES, iters=iters, seed=seed, mode=mode,
                                       duplicate_policy="reuse", data_storage={"pso_top_k": variant.top_k},
                                       pso_options=options, max_launches=budget, search=search, **extra)


@cache
def _prior_memo(problem: str) -> dict[str, Any]:
    """The simulations of a problem's prior, shared by the runs of one process (the same numbers
    each run would compute; see SimulatorPrior's ``memo``)."""
    return {}


def _prior(table: Table, config: Config) -> SimulatorPrior | None:
    prior = make_prior(config, table.space)
    if prior is None:
        return None
    key = f"{table.problem.name} on {config.simulator.get('hardware')}"
    return SimulatorPrior(config, table.space, options=prior.options, memo=_prior_memo(key))


def _pick(table: Table, best: EvaluationResult | None) -> int:
    return -1 if best is None else table.index.get(table_key(table.space, best.values), -1)


Launches = list[tuple[int, float]]


def run_msopt(table: Table, oracle: Oracle, budget: int, seed: int, mode: str = "sync",
              variant: Variant = SHIPPED) -> tuple[Launches, int]:
    """msopt through its public API: ``Driver(settings.config, pool, guide=PriorGuide(prior)).run()`` with
    ``max_launches = budget`` over an in-process pool whose evaluator asks the oracle; the pick
    is the run's recommendation (``RunOutcome.best``). Async results come back one at a time in
    dispatch order (:class:`_InOrderPool`), as from evaluations of equal duration."""
    settings = _msopt_settings(table, budget, seed, mode, variant)
    pool: Any = _Batches(InProcessPool(settings.config, size=1, evaluator_factory=lambda k: OracleEvaluator(oracle))
                         if mode == "sync" else _InOrderPool(OracleEvaluator(oracle)), oracle)
    prior = _prior(table, settings.config)
    try:  # the searcher as `msopt optimize` resolves it (run.driver.optimize)
        out = Driver(settings.config, pool, guide=PriorGuide(prior) if prior is not None else None,
                     searcher=resolve_searcher(settings.config.run.searcher, prior is not None,
                                               settings.config.run.max_launches)).run()
    finally:
        pool.close()
    if len(oracle.launches) > budget:
        raise RuntimeError(f"msopt launched {len(oracle.launches)} > {budget}")
    return list(oracle.launches), _pick(table, out.best)


def run_prior_alone(table: Table, oracle: Oracle, budget: int, seed: int) -> tuple[Launches, int]:
    """Zero launches: the configuration the simulator prior predicts best (as msopt's run of
    this seed searches it), scored on the hidden reality."""
    settings = _msopt_settings(table, budget, seed, "sync")
    prior = _prior(table, settings.config)
    if prior is None:
        return [], -1
    prior.search(prior.options.evaluations, np.random.default_rng(np.random.SeedSequence([seed, 0x9121])))
    best = next((p for p in prior.ranked() if math.isfinite(p.fitness)), None)
    pick = -1 if best is None else table.index.get(table_key(table.space, best.values), -1)
    return [], pick


class _Batches:
    """An EvaluatorPool around another that records each request's dispatch batch in
    ``oracle.batch_of``: the requests the driver submits between two waits, which a pool of as many
    workers runs together (a search iteration; a round of re-measurements; the baseline's beside
    them when the driver sends it with them). The hours bench lays the launches out by it."""

    def __init__(self, pool: Any, oracle: Oracle) -> None:
        self._pool = pool
        self._oracle = oracle
        self._batch = 0
        self._waited = False

    @property
    def size(self) -> int:
        return int(self._pool.size)

    def submit(self, req: EvalRequest) -> None:
        if self._waited:
            self._batch += 1
            self._waited = False
        self._oracle.batch_of[req.eval_id] = self._batch
        self._pool.submit(req)

    def wait(self, timeout: float | None = None) -> list[EvaluationResult]:
        self._waited = True
        return list(self._pool.wait(timeout))

    def running(self) -> list[tuple[int, list[str]]]:
        return list(self._pool.running())

    def close(self) -> None:
        self._pool.close()

    def __getattr__(self, name: str) -> Any:  # the pool's optional parts (retain, kept_keys), as the driver asks
        return getattr(self._pool, name)


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
    """msopt's own TPE searcher (``[search] searcher = "tpe"``, :class:`msopt.search.tpe.TPESearcher`:
    multivariate TPE on candidate indices, the default enqueued first), driven one launch per
    proposal like every peer: no duplicate reuse, no prior, no re-measurement. Its constraint
    refuses a tp·pp that does not divide the world size, so such a proposal is drawn again instead
    of being repaired by our decode; a failed launch is told the peers' penalty.
    """
    _optuna_quiet()
    from msopt.search import Constraint, SearcherSetup, make_searcher, search_dimensions

    space = table.space
    dims = search_dimensions(space)
    world = table.problem.world

    def proposed(x: np.ndarray) -> dict[str, Any]:
        return {d.name: (d.candidates[d.nearest(v)] if d.candidates is not None else float(v)) for d, v in zip(dims, x)}

    def product(v: Any) -> str | None:
        return None if world % (v["tp"] * v.get("pp", 1)) == 0 else f"tp·pp does not divide {world}"

    searcher = make_searcher("tpe", SearcherSetup(
        dims, seed, 1, "sync", np.array([space.default_position()]), lambda lane, count: None,
        constraint=Constraint(decode=proposed, rules=product)))
    penalty = _Penalty()
    while len(oracle.launches) < budget:
        (trial,) = searcher.ask()
        f, _, _ = oracle.launch(_decode_values(space, trial.position))
        searcher.tell(trial.id, penalty(f))


def run_gp(table: Table, oracle: Oracle, budget: int, seed: int) -> None:
    """Optuna's GPSampler (Gaussian-process BO, log EI) over the candidate indices, the default
    first (enqueued); our decode repairs an invalid tp·pp; a failure is told the penalty."""
    import torch

    torch.set_num_threads(1)  # one core per worker (--jobs): threads only contend on a shared machine
    optuna = _optuna_quiet()
    space = table.space
    cands = [d.candidates for d in space.dimensions]
    study = optuna.create_study(sampler=optuna.samplers.GPSampler(seed=seed))
    default = space.decode(space.default_position(), None).values
    study.enqueue_trial({n: list(c).index(default[n]) for n, c in zip(space.names, cands)})
    penalty = _Penalty()
    while len(oracle.launches) < budget:
        trial = study.ask()
        proposed = {n: c[trial.suggest_int(n, 0, len(c) - 1)] for n, c in zip(space.names, cands)}
        f, _, _ = oracle.launch(_decode_values(space, space.encode(proposed)))
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
    run: Callable[..., Any]
    budget_free: bool   # behaviour does not depend on the budget: the 20 run is a prefix of the 50 run
    how: str
    default: bool = True  # run unless --methods names it


METHODS = (
    Method("msopt", lambda *a: run_msopt(*a), False,
           "as shipped: Driver(...).run() with max_launches = budget; simulator prior (baseline + diverse top "
           "predictions), refitted after an iteration that measured a new top-5 configuration, screened moves "
           "(4 per particle, 25 % unranked), 10 particles, reuse and refusals free; refine top 3, then the "
           "two best by mean again (a quarter of the budget less one)", default=False),
    Method("msopt (fixed prior)", lambda *a: run_msopt(*a, variant=FIXED_PRIOR), False,
           "as shipped but the prior is not refitted ([search] refit = false): cheaper to benchmark"),
    Method("msopt (prior from a generic roofline entry + refit)", lambda *a: run_msopt(*a, variant=GENERIC), False,
           "as shipped, on hardware outside the catalog: the prior starts from a roofline entry with the "
           "part's memory and the figures and efficiencies of the nearest other catalog entry "
           "(methods.generic_hardware), refitted to the run's launches", default=False),
    Method("msopt (no prior)", lambda *a: run_msopt(*a, variant=NO_PRIOR), False,
           "as shipped where no prior can be built ([search] prior = \"none\"): the default searcher \"auto\" "
           "is then Optuna's TPE, one lane per worker (the bench's pool has one), the search given every launch "
           "but 3 kept from 30 launches for contenders within the noise", default=False),
    Method("msopt (no prior; tpe)", lambda *a: run_msopt(*a, variant=NO_PRIOR_TPE), False,
           "as msopt (no prior), with [search] searcher = \"tpe\" set explicitly (the same run)", default=False),
    Method("msopt (no prior; swarm)", lambda *a: run_msopt(*a, variant=NO_PRIOR_SWARM), False,
           "as msopt (no prior), with [search] searcher = \"swarm\": the default before \"auto\"", default=False),
    Method("msopt async", lambda *a: run_msopt(*a, mode="async"), False,
           "as above, async: one result at a time in dispatch order", default=False),
    Method("simulator prior alone", run_prior_alone, False,
           "zero launches: the prior's best prediction, as msopt searches it for this seed"),
    Method("Optuna GPSampler", run_gp, True, "Gaussian-process BO on candidate indices; default enqueued"),
    Method("Optuna TPE", run_tpe, True,
           "msopt's TPE searcher (multivariate TPE on candidate indices), one launch per proposal; "
           "tp·pp refused by its constraint"),
    Method("Optuna CMA-ES", run_cmaes, True, "CmaEsSampler on the position box, x0 = default"),
    Method("Nevergrad PSO", run_ng_pso, False, "ConfiguredPSO(popsize=10) on the position box", default=False),
    Method("Nevergrad NGOpt", run_ngopt, False, "NGOpt on ordered choices (TransitionChoice)", default=False),
    Method("pyswarms GBest", run_pyswarms, False, "GlobalBestPSO, c1 = c2 = 2, w = 1.8, 10 particles",
           default=False),
    Method("random search", run_random, True, "uniform on the position box"),
)


ABLATION: tuple[tuple[float, tuple[str, ...], Variant], ...] = (
    (0.03, ("sync",), Variant("no prior: the swarm alone (msopt before issue 17, with a launch budget)",
                              search=(("prior", "none"), ("searcher", "swarm")))),
    (0.03, ("sync",), Variant("+ prior: baseline + diverse top predictions (no screening, no refit)",
                              search=(("screen", 0), ("refit", False)))),
    (0.03, ("sync",), Variant("+ screened moves (fixed prior: no refit)", search=(("refit", False),))),
    (0.03, ("sync",), Variant("fixed prior, picks for only 4 of the 10 particles",
                              search=(("refit", False), ("prior_picks", 4)))),
)
"""The ablation's rows: (noise, modes, variant). Each row changes one thing of the shipped msopt."""
