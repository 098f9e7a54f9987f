"""The searcher seam: what proposes the next positions, as ask/tell over opaque trial ids.

In the spirit of Nevergrad's ask/tell and Ray Tune's ``Searcher.suggest`` /
``on_trial_complete``: :meth:`Searcher.ask` hands out :class:`Trial` objects (an opaque id, a
position in the search space's box, the :class:`~msopt.space.DecodeContext` to decode it with,
and the lane and count that name its evaluation), :meth:`Searcher.tell` gives back the fitness
(lower is better, ``inf`` for a failed or refused candidate) and the repaired position that was
really evaluated (write-back). :meth:`Searcher.to_state` is the checkpoint the driver writes to state.json.

The driver holds the searcher and drives it the same way in both modes: ask, dispatch, tell in
the order the trials were asked (sync) or as results arrive (async). Concurrency stays out of the
searcher's model (Ray Tune's ``ConcurrencyLimiter``): the driver sets it (``n_particles``), the
searcher only keeps that many lanes in flight, and the driver names each evaluation by its resume
key (phase ``search``, lane, count), which the journal records as (phase, particle, iteration),
and gives it the eval id ``1 + count × lanes + lane``.

Resume rebuilds the searcher by replay, never from state.json: the driver builds it again from
the same :class:`SearcherSetup` and tells it the journaled results in the order they were told, so
a searcher must be deterministic given its seed and the sequence of asks and tells (and of the
constraint's answers, which the replay reproduces).

Every searcher gets the driver's :class:`~msopt.search.constraint.Constraint` (known refusals,
start-up rules, the prior's screen) in its setup. The particle swarm (:class:`SwarmSearcher`, name
``"swarm"``) is the default; Optuna's TPE (``"tpe"``, :mod:`msopt.search.tpe`) is the second; a
plugin registers a factory in :data:`SEARCHERS` (entry-point group ``msopt.searchers``) with the
signature of :func:`make_swarm_searcher`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from msopt.errors import ConfigError, RegistryError
from msopt.registry import Registry
from msopt.search.constraint import NO_CONSTRAINT, Constraint, SearchDimension
from msopt.search.options import SwarmOptions
from msopt.search.swarm import Swarm
from msopt.space import DecodeContext, SearchSpace
from msopt.space.derived import FactoriesType, TernaryFactoriesType

__all__ = ["SEARCHERS", "Searcher", "SearcherSetup", "SwarmSearcher", "Trial", "check_searcher", "make_searcher",
           "layout_names", "resolve_searcher", "search_dimensions"]


@dataclass(frozen=True)
class Trial:
    """One position to evaluate.

    Attributes:
        id: opaque to the driver; unique within the searcher.
        position: one float per dimension, inside the box.
        context: the DecodeContext an evaluator decodes the position with.
        lane: the particle (or other lane) proposing it: with ``count`` it names the evaluation
            (its eval id and its resume key).
        count: the lane's evaluation count (0-based).
    """

    id: int
    position: np.ndarray
    context: DecodeContext | None
    lane: int
    count: int


@runtime_checkable
class Searcher(Protocol):
    """What the driver needs of a searcher."""

    name: str

    @property
    def lanes(self) -> int:
        """How many trials can be in flight at once (a swarm's particles)."""

    def ask(self) -> list[Trial]:
        """Trials to evaluate now (empty while the searcher waits for results)."""

    def tell(self, trial_id: int, fitness: float, position: Sequence[float] | None = None) -> None:
        """The fitness of a trial and the repaired position really evaluated."""

    def lane_count(self, lane: int) -> int:
        """How many trials of ``lane`` have been told."""

    def to_state(self) -> dict[str, Any]:
        """The searcher as JSON-serialisable data (state.json's checkpoint, for inspection)."""


def search_dimensions(space: SearchSpace) -> tuple[SearchDimension, ...]:
    """The typed dimensions of ``space``: dtype, bounds, step, candidates and each candidate's
    coordinate (``SearchSpace.encode`` of that one value)."""
    steps = space.steps
    out = []
    for i, d in enumerate(space.dimensions):
        coords = None
        if d.candidates is not None:
            coords = tuple(float(space.encode({d.name: c})[i]) for c in d.candidates)
        out.append(SearchDimension(d.name, d.dtype, float(d.low), float(d.high), float(steps[i]),
                                   d.candidates, coords))
    return tuple(out)


def layout_names(space: SearchSpace, *, binary: bool = True) -> tuple[str, ...]:
    """The fields of ``space``'s parallel layout: every field derived as a factor of a product
    (``ternary_factories``, such as ``dp = world / (tp × pp)``, and with ``binary`` the
    ``factories`` too) and its sources."""
    names: list[str] = []
    for n in space.field_names:
        t = space.field_type(n)
        if isinstance(t, TernaryFactoriesType):
            names += [*t.targets, n]
        elif binary and isinstance(t, FactoriesType):
            names += [t.target, n]
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class SearcherSetup:
    """What a searcher factory gets.

    Attributes:
        dimensions: the typed dimensions, in position order (:func:`search_dimensions`).
        seed: the run's seed (``seed``); a searcher seeds its own RNG from it.
        concurrency: how many trials may be in flight at once: the lanes (``n_particles``).
        mode: ``"sync"`` (whole generations: every lane asked once all were told) or
            ``"async"`` (a lane asked again as soon as it was told).
        init_positions: starting positions, row ``k`` for lane ``k`` (the baseline, then the
            prior's picks; at most ``concurrency`` rows), or None; a searcher evaluates them first.
        context: ``context(lane, count)``: the DecodeContext of a lane's evaluation.
        constraint: known refusals, start-up rules and the prior's screen, kept up to date by the
            driver: a searcher does not propose what it refuses (see :mod:`msopt.search.constraint`).
        options: the swarm's options (``[pso_options]``, ``[pso_strategy]``; their
            ``n_particles`` and ``seed`` are ``concurrency`` and ``seed``).
        launches: the launches a launch budget leaves the baseline and the search together
            (:attr:`msopt.run.budget.BudgetPlan.search`), or None without a budget.
        layout: the fields of the parallel layout (:func:`layout_names`): configurations that share
            their values share a layout (a model may expect its errors to follow the layout).
    """

    dimensions: tuple[SearchDimension, ...]
    seed: int | None
    concurrency: int
    mode: str
    init_positions: np.ndarray | None
    context: Callable[[int, int], DecodeContext | None]
    constraint: Constraint = NO_CONSTRAINT
    options: SwarmOptions | None = None
    launches: int | None = None
    layout: tuple[str, ...] = ()

    @property
    def low(self) -> np.ndarray:
        """The box's lower bounds."""
        return np.array([d.low for d in self.dimensions], dtype=float)

    @property
    def high(self) -> np.ndarray:
        """The box's upper bounds."""
        return np.array([d.high for d in self.dimensions], dtype=float)

    @property
    def steps(self) -> np.ndarray:
        """A small move per dimension."""
        return np.array([d.step for d in self.dimensions], dtype=float)


class SwarmSearcher:
    """The particle swarm as a :class:`Searcher`.

    Sync: :meth:`ask` gives every particle's trial once all of the previous generation was told;
    the tells are buffered and handed to :meth:`Swarm.tell` together (write-back first), so the
    swarm moves exactly as before. Async: :meth:`ask` gives a trial for every particle not in
    flight; each tell is :meth:`Swarm.tell` of that particle alone.
    """

    name = "swarm"

    def __init__(self, swarm: Swarm, mode: str, context: Callable[[int, int], DecodeContext | None]) -> None:
        if mode not in ("sync", "async"):
            raise ConfigError(f"mode must be 'sync' or 'async', got {mode!r}")
        self.swarm = swarm
        self.mode = mode
        self._context = context
        self._pending: dict[int, tuple[int, int]] = {}   # trial id -> (lane, count) asked, not told
        self._told: dict[int, tuple[float, np.ndarray | None]] = {}  # sync: lane -> told, this generation

    @property
    def lanes(self) -> int:  # noqa: D102
        return self.swarm.n_particles

    def trial_id(self, lane: int, count: int) -> int:
        """The id of lane ``lane``'s ``count``-th trial (ids are a function of both)."""
        return count * self.lanes + lane

    def lane_count(self, lane: int) -> int:  # noqa: D102
        return int(self.swarm.evaluation_counts[lane])

    def _trial(self, lane: int) -> Trial:
        count = self.lane_count(lane)
        tid = self.trial_id(lane, count)
        self._pending[tid] = (lane, count)
        return Trial(tid, self.swarm.ask_one(lane), self._context(lane, count), lane, count)

    def ask(self) -> list[Trial]:  # noqa: D102
        if self.mode == "sync":
            if self._pending or self._told:
                return []
            return [self._trial(i) for i in range(self.lanes)]
        busy = {lane for lane, _ in self._pending.values()}
        return [self._trial(i) for i in range(self.lanes) if i not in busy]

    def tell(self, trial_id: int, fitness: float, position: Sequence[float] | None = None) -> None:  # noqa: D102
        if trial_id not in self._pending:
            raise KeyError(f"trial {trial_id} was not asked or was already told")
        lane, _ = self._pending.pop(trial_id)
        pos = None if position is None else np.asarray(position, dtype=float)
        if self.mode == "async":
            self.swarm.tell([fitness], None if pos is None else [pos], rows=[lane])
            return
        self._told[lane] = (float(fitness), pos)
        if len(self._told) < self.lanes:
            return
        fit = np.array([self._told[i][0] for i in range(self.lanes)])
        rows = [self._told[i][1] for i in range(self.lanes)]
        self._told = {}
        if any(r is None for r in rows):
            self.swarm.tell(fit)
        else:
            self.swarm.tell(fit, np.array(rows, dtype=float))

    @property
    def best_position(self) -> np.ndarray | None:
        """The best position told so far."""
        return self.swarm.best_position

    @property
    def best_fitness(self) -> float:
        """The best fitness told so far."""
        return self.swarm.best_fitness

    def to_state(self) -> dict[str, Any]:  # noqa: D102
        return {"searcher": self.name, "mode": self.mode, "swarm": self.swarm.to_state()}


def make_swarm_searcher(setup: SearcherSetup) -> SwarmSearcher:
    """The default searcher: a :class:`Swarm` over the box, lanes starting at ``init_positions``,
    moves held to the setup's constraint."""
    options = setup.options if setup.options is not None else SwarmOptions(setup.concurrency, 1, seed=setup.seed)
    if options.n_particles != setup.concurrency:
        raise ValueError(f"swarm options have {options.n_particles} particles for a concurrency of {setup.concurrency}")
    swarm = Swarm(setup.low, setup.high, options, steps=setup.steps, init_positions=setup.init_positions,
                  constraint=setup.constraint)
    return SwarmSearcher(swarm, setup.mode, setup.context)


class _AutoFactory:
    """``"auto"`` (the default) is no searcher of its own: the driver resolves it with
    :func:`resolve_searcher` before it builds one. Registered so the name is reserved and listed."""

    def __call__(self, setup: SearcherSetup) -> Searcher:
        raise ValueError("searcher 'auto' is resolved by resolve_searcher() before make_searcher()")

    @staticmethod
    def available() -> None:
        """Raise ConfigError when TPE, which "auto" takes without a prior, cannot run."""
        check_searcher("tpe")


SEARCHERS: Registry[Callable[[SearcherSetup], Searcher]] = Registry("searcher", "msopt.searchers")
"""Searcher factories by name (``[search] searcher``); entry-point group ``msopt.searchers``."""
SEARCHERS.register("auto", _AutoFactory())
SEARCHERS.register("swarm", make_swarm_searcher)
# "tpe" registers itself in msopt/search/tpe.py (imported by the package), as a plugin's would


def resolve_searcher(name: str, has_prior: bool, max_launches: int = 0) -> str:
    """The searcher ``[search] searcher = name`` stands for in a run with or without a prior.

    ``"auto"`` is the portfolio where a prior seeds and screens the swarm: the swarm and TPE, the
    lanes of each generation split between them by the trust the prior earned
    (:mod:`msopt.search.portfolio`; issue 49, docs/searchers.md). Where none can be built (no
    config.json, unknown hardware, ``prior = "none"``) it is Optuna's TPE at every launch budget,
    which the driver then runs one trial per worker with the budget's launches on the search
    (:mod:`msopt.run.budget`, the unguided plan): on the search bench's independent reality
    without a prior (100 seeds, 6 to 50 launches) TPE run so is at least Optuna's TPE run one
    proposal at a time, where the swarm was behind it at every budget (docs/benchmarks.md, issue
    38 item 2). Without a budget (``max_launches`` 0: ``n_particles`` × ``iters`` evaluations,
    not measured there) it stays the swarm. Any other name is itself.
    """
    if name != "auto":
        return name
    if has_prior:
        return "portfolio"
    return "swarm" if max_launches <= 0 else "tpe"


def make_searcher(name: str, setup: SearcherSetup) -> Searcher:
    """Build the searcher registered as ``name``.

    Raises:
        ConfigError: no searcher of that name (the message lists the valid ones).
    """
    try:
        factory = SEARCHERS.get(name)
    except RegistryError as exc:
        raise ConfigError(f"[search] searcher: {exc}") from None
    return factory(setup)


def check_searcher(name: str) -> None:
    """Check that the searcher registered as ``name`` exists and can be built here (its optional
    dependency is installed: a factory may declare ``available()``, which raises ConfigError).

    Raises:
        ConfigError: unknown name (the message lists the valid ones) or a missing dependency.
    """
    try:
        factory = SEARCHERS.get(name)
    except RegistryError as exc:
        raise ConfigError(f"[search] searcher: {exc}") from None
    available = getattr(factory, "available", None)
    if callable(available):
        available()
