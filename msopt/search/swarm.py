"""Particle swarm optimization as ask/tell over numpy arrays.

The swarm knows nothing about fields, engines or Ray: it hands out positions (one float per
dimension, inside ``[low, high]``), is told a fitness per position (lower is better; ``inf``
means the evaluation failed) and, optionally, the repaired position that was really evaluated
(write-back). Two ways to drive it:

* sync: ``ask()`` the whole swarm, evaluate, ``tell(fitness, positions)``; the whole swarm moves.
* async: ``ask_one(i)``, evaluate, ``tell_one(i, fitness, position)``; only particle ``i`` moves,
  with the coefficients of its own evaluation count.

The velocity update is the global-best PSO of Kennedy & Eberhart with inertia (Shi & Eberhart)::

    v <- w v + c1 r1 (pbest - x) + c2 r2 (gbest - x),   r1, r2 ~ U(0, 1) per dimension
    v <- clip(v, -clamp (high - low), clamp (high - low))
    x <- reflect(x + v) into [low, high]     (boundary = "reflect", the default)
    x <- clip(x + v), v <- 0 where clipped    (boundary = "absorb")

An attractor whose fitness is still ``inf`` (nothing evaluated successfully) does not pull.

Step mutation (``mutation`` = p > 0): after its move, each moved particle, with probability p,
takes one step along one dimension drawn at random, up or down (down or up where the step would
leave the box). A step is one candidate of a dimension with few candidates, else a tenth of the
dimension's range (:meth:`Swarm.__init__`'s ``steps``). On discrete serving knobs the near-miss
of a short search is one candidate away in one dimension (the smallest batched-token budget, the
next pipeline depth), which the velocity update alone reaches slowly.

Stall restart (``restart_patience`` = k > 0): a particle told k evaluations in a row that did not
improve its personal best is re-drawn uniformly in the box after its move, with a fresh initial
velocity; its personal best (and the global best) are kept. On the discrete spaces msopt searches
a converged particle otherwise keeps landing on configurations already evaluated (which the driver
reuses without a launch), so the search stops finding anything new long before the budget is spent.
``w``, ``c1`` and ``c2`` follow coefficient schedules (:data:`SCHEDULES`) with pyswarms'
``OptionsHandler`` semantics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from msopt.checks import is_finite
from msopt.errors import ConfigError, RegistryError
from msopt.registry import Registry

if TYPE_CHECKING:
    from msopt.config import Settings

__all__ = [
    "COEFFICIENTS",
    "SCHEDULES",
    "CoefficientSchedule",
    "Swarm",
    "SwarmOptions",
]

COEFFICIENTS: tuple[str, ...] = ("w", "c1", "c2")
"""The coefficients a ``[pso_strategy]`` table can give a schedule."""

_OPTION_KEYS = ("c1", "c2", "w", "velocity_clamp", "restart_patience", "boundary", "mutation")
BOUNDARIES: tuple[str, ...] = ("reflect", "absorb")
"""How a move that leaves the box is brought back (``[pso_options] boundary``)."""
_INIT_VELOCITY = 0.1  # initial speed: up to a tenth of each dimension's range
_DEFAULT_STEP = 0.1  # a mutation step where none is given: a tenth of the dimension's range
#: Moves (or restarts) drawn again, at most, when every candidate is a known refusal (set_refused).
REFUSED_REDRAWS = 16
_STATE_VERSION = 1


# --------------------------------------------------------------------------------------------
# Coefficient schedules
# --------------------------------------------------------------------------------------------


class CoefficientSchedule:
    """How a coefficient (``w``, ``c1``, ``c2``) varies over a particle's evaluations.

    ``value(start, end, t, t_max, rng)`` gives the coefficient used for the move after
    evaluation ``t`` (0-based) of a run of ``t_max`` iterations, like pyswarms'
    ``OptionsHandler(iternow=t, itermax=t_max)``. ``start`` is the ``[pso_options]`` value,
    ``end`` the ``<name>_end`` value of ``[pso_strategy]`` or :meth:`default_end`.
    """

    name: str = ""
    hint: str = ""  # appended to the message when a configuration takes the value below 0

    def value(
        self, start: float, end: float, t: float, t_max: float, rng: np.random.Generator
    ) -> float:
        """Return the coefficient at move ``t``."""
        raise NotImplementedError

    def default_end(self, coefficient: str, start: float) -> float:
        """Return the end value used when ``<coefficient>_end`` is not given.

        pyswarms' defaults: ``w`` ends at 0.4, ``c1`` at 0.8 × its start, ``c2`` at its start.
        """
        if coefficient == "w":
            return 0.4
        if coefficient == "c1":
            return 0.8 * start
        return start

    def extremes(self, start: float, end: float, t_max: float) -> tuple[float, float]:
        """Return the smallest and largest value over ``0 <= t <= t_max`` (for validation)."""
        a = self.value(start, end, 0.0, t_max, np.random.default_rng(0))
        b = self.value(start, end, t_max, t_max, np.random.default_rng(0))
        return min(a, b), max(a, b)

    def uses_end(self) -> bool:
        """Return whether the schedule reads an end value."""
        return True


class ConstantSchedule(CoefficientSchedule):
    """``c(t) = start``: the coefficient never changes (the default for an absent key)."""

    name = "constant"

    def value(self, start, end, t, t_max, rng):  # noqa: D102
        return start

    def uses_end(self) -> bool:  # noqa: D102
        return False


class ExpDecaySchedule(CoefficientSchedule):
    """Exponent decreasing inertia (Li & Gao 2009), exactly as pyswarms computes it.

    ``c(t) = (start - end - d1) · exp(1 / (1 + d2 · t / t_max))`` with ``d1 = 0.2``, ``d2 = 7``.

    The factor falls from e (t = 0) to exp(1/8) ≈ 1.133 (t = t_max). The value meets
    ``start`` and ``end`` only for the paper's constants (w = 0.95 → 0.4); in general it
    starts at ``e·(start − end − 0.2)``. It is negative whenever ``start − end < 0.2``, which
    includes pyswarms' default end for ``c2`` (= start): a configuration where the schedule
    would go below 0 is rejected, set ``<name>_end`` lower.
    """

    name = "exp_decay"
    hint = "exp_decay stays >= 0 only while start - end >= 0.2"
    d1 = 0.2
    d2 = 7.0

    def value(self, start, end, t, t_max, rng):  # noqa: D102
        return (start - end - self.d1) * math.exp(1.0 / (1.0 + self.d2 * t / t_max))


class LinVariationSchedule(CoefficientSchedule):
    """Linear variation (Shi & Eberhart 1999), as in pyswarms.

    ``c(t) = end + (start - end) · (t_max - t) / t_max``: ``start`` at t = 0, ``end`` at
    t = t_max (decreasing or increasing, whichever way ``end`` lies).
    """

    name = "lin_variation"

    def value(self, start, end, t, t_max, rng):  # noqa: D102
        return end + (start - end) * (t_max - t) / t_max


class NonlinModSchedule(CoefficientSchedule):
    """Nonlinear variation with modulation index (Chatterjee & Siarry 2006), as in pyswarms.

    ``c(t) = end + (start - end) · (t_max - t)^n / t_max^n`` with ``n = 1.2``.
    """

    name = "nonlin_mod"
    n = 1.2

    def value(self, start, end, t, t_max, rng):  # noqa: D102
        return end + (start - end) * (t_max - t) ** self.n / t_max**self.n


class RandomSchedule(CoefficientSchedule):
    """Random value (Eberhart & Shi 2001), as in pyswarms.

    ``c(t) = start + (end - start) · u`` with ``u ~ U(0, 1)`` drawn from the swarm's own RNG at
    every move (once per sync iteration, once per async move). The default end is
    ``start + 1`` (pyswarms' default).
    """

    name = "random"

    def value(self, start, end, t, t_max, rng):  # noqa: D102
        return start + (end - start) * float(rng.random())

    def default_end(self, coefficient: str, start: float) -> float:  # noqa: D102
        return start + 1.0

    def extremes(self, start: float, end: float, t_max: float) -> tuple[float, float]:  # noqa: D102
        return min(start, end), max(start, end)


SCHEDULES: Registry[CoefficientSchedule] = Registry(
    "coefficient schedule", "msopt.coefficient_schedules"
)
for _schedule in (
    ConstantSchedule(),
    ExpDecaySchedule(),
    LinVariationSchedule(),
    NonlinModSchedule(),
    RandomSchedule(),
):
    SCHEDULES.register(_schedule.name, _schedule)
del _schedule


# --------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------


def _check_number(value: Any, where: str, rule: str, ok) -> float:
    if not is_finite(value) or not ok(value):
        raise ConfigError(f"{where} must be a number {rule}, got {value!r}")
    return float(value)


def _check_int(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{where} must be an integer >= {minimum}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class SwarmOptions:
    """Everything that shapes a swarm's search, validated.

    Attributes:
        n_particles: number of particles.
        iters: planned number of iterations (``t_max`` of the coefficient schedules).
        c1: cognitive coefficient (pull toward the particle's own best), >= 0.
        c2: social coefficient (pull toward the global best), >= 0.
        w: inertia weight, >= 0.
        strategy: coefficient name -> schedule name (``constant`` for absent names).
        end_values: coefficient name -> end value of its schedule (schedule default if absent).
        velocity_clamp: fraction of each dimension's range a velocity may reach, > 0.
        seed: seed of the swarm's RNG; None draws fresh entropy.
        restart_patience: evaluations in a row without a personal-best improvement after which
            a particle is re-drawn uniformly in the box (its bests kept); 0 never restarts.
        boundary: ``reflect`` folds a move that leaves the box back inside and flips the
            velocity; ``absorb`` stops it on the bound and zeroes that velocity component, so
            the extreme candidates of an enum / range / int dimension (often where a serving
            knob's best value lies) are reached and kept instead of bounced away from.
        mutation: probability, 0..1, that a particle takes one step along one random dimension
            after its move (see the module docstring); 0 never.
    """

    n_particles: int
    iters: int
    c1: float = 1.49618
    c2: float = 1.49618
    w: float = 0.7298
    strategy: Mapping[str, str] = field(default_factory=dict)
    end_values: Mapping[str, float] = field(default_factory=dict)
    velocity_clamp: float = 0.5
    seed: int | None = None
    restart_patience: int = 0
    boundary: str = "reflect"
    mutation: float = 0.0

    def __post_init__(self) -> None:
        _check_int(self.n_particles, "n_particles", 1)
        _check_int(self.iters, "iters", 1)
        object.__setattr__(self, "n_particles", int(self.n_particles))
        object.__setattr__(self, "iters", int(self.iters))
        for key in ("c1", "c2", "w"):
            value = _check_number(
                getattr(self, key), f"[pso_options] {key}", ">= 0", lambda v: v >= 0
            )
            object.__setattr__(self, key, value)
        clamp = _check_number(
            self.velocity_clamp, "[pso_options] velocity_clamp", "> 0", lambda v: v > 0
        )
        object.__setattr__(self, "velocity_clamp", clamp)
        mutation = _check_number(
            self.mutation, "[pso_options] mutation", "in [0, 1]", lambda v: 0 <= v <= 1
        )
        object.__setattr__(self, "mutation", mutation)
        if self.seed is not None:
            object.__setattr__(self, "seed", _check_int(self.seed, "seed", 0))
        if self.boundary not in BOUNDARIES:
            raise ConfigError(
                f"[pso_options] boundary must be one of {', '.join(map(repr, BOUNDARIES))}, "
                f"got {self.boundary!r}"
            )
        object.__setattr__(
            self, "restart_patience",
            _check_int(self.restart_patience, "[pso_options] restart_patience", 0),
        )

        strategy: dict[str, str] = {}
        for key, name in dict(self.strategy).items():
            if key not in COEFFICIENTS:
                raise ConfigError(
                    f"[pso_strategy] has unknown key {key!r} (valid: "
                    f"{', '.join(COEFFICIENTS + tuple(c + '_end' for c in COEFFICIENTS))})"
                )
            if not isinstance(name, str):
                raise ConfigError(
                    f"[pso_strategy] {key} must be a schedule name, got {name!r} "
                    f"(valid: {', '.join(SCHEDULES.names())})"
                )
            try:
                SCHEDULES.get(name)
            except RegistryError as exc:
                raise ConfigError(f"[pso_strategy] {key}: {exc}") from None
            strategy[key] = name
        for key in COEFFICIENTS:
            strategy.setdefault(key, "constant")
        object.__setattr__(self, "strategy", MappingProxyType(strategy))

        ends: dict[str, float] = {}
        for key, value in dict(self.end_values).items():
            if key not in COEFFICIENTS:
                raise ConfigError(
                    f"[pso_strategy] has unknown key {key}_end (valid: "
                    f"{', '.join(c + '_end' for c in COEFFICIENTS)})"
                )
            ends[key] = _check_number(
                value, f"[pso_strategy] {key}_end", ">= 0", lambda v: v >= 0
            )
            if not SCHEDULES.get(strategy[key]).uses_end():
                raise ConfigError(
                    f"[pso_strategy] {key}_end is set but {key} is {strategy[key]!r}, which has "
                    f"no end value; give {key} a schedule (e.g. {key} = \"lin_variation\") or "
                    f"drop {key}_end"
                )
        object.__setattr__(self, "end_values", MappingProxyType(ends))

        for key in COEFFICIENTS:
            schedule = SCHEDULES.get(strategy[key])
            start, end = getattr(self, key), self.end(key)
            low, high = schedule.extremes(start, end, float(self.iters))
            if not (math.isfinite(low) and math.isfinite(high)) or low < 0:
                raise ConfigError(
                    f"[pso_strategy] {key} = {schedule.name!r} with {key} = {start:g} and "
                    f"{key}_end = {end:g} takes {key} from {low:.4g} to {high:.4g}, below 0; "
                    f"set {key}_end so that it stays >= 0 or choose another schedule"
                    + (f" ({schedule.hint})" if schedule.hint else "")
                )

    def __hash__(self) -> int:
        return hash(
            (self.n_particles, self.iters, self.c1, self.c2, self.w,
             tuple(sorted(self.strategy.items())), tuple(sorted(self.end_values.items())),
             self.velocity_clamp, self.seed, self.restart_patience, self.boundary, self.mutation)
        )

    @classmethod
    def from_settings(
        cls,
        pso_options: Mapping[str, Any],
        pso_strategy: Mapping[str, Any],
        n_particles: int,
        iters: int,
        seed: int | None = None,
    ) -> SwarmOptions:
        """Build options from the ``[pso_options]`` and ``[pso_strategy]`` tables.

        ``[pso_options]`` keys: ``c1``, ``c2``, ``w``, ``velocity_clamp``, ``restart_patience``,
        ``boundary``, ``mutation`` (absent ones keep the defaults). ``[pso_strategy]`` keys: ``w``, ``c1``,
        ``c2`` naming a schedule (absent means ``constant``) and ``w_end``, ``c1_end``, ``c2_end`` giving
        that schedule's end value.

        Raises:
            ConfigError: naming the table and key of an invalid or unknown entry.
        """
        options = dict(pso_options or {})
        unknown = sorted(set(options) - set(_OPTION_KEYS))
        if unknown:
            raise ConfigError(
                f"[pso_options] has unknown key {unknown[0]!r} (valid: {', '.join(_OPTION_KEYS)})"
            )
        strategy: dict[str, Any] = {}
        ends: dict[str, Any] = {}
        for key, value in dict(pso_strategy or {}).items():
            if isinstance(key, str) and key.endswith("_end") and key[:-4] in COEFFICIENTS:
                ends[key[:-4]] = value
            else:
                strategy[key] = value
        return cls(
            n_particles=n_particles,
            iters=iters,
            strategy=strategy,
            end_values=ends,
            seed=seed,
            **options,
        )

    def end(self, coefficient: str) -> float:
        """Return the end value of ``coefficient``'s schedule (given or the schedule's default)."""
        if coefficient in self.end_values:
            return float(self.end_values[coefficient])
        schedule = SCHEDULES.get(self.strategy[coefficient])
        return float(schedule.default_end(coefficient, float(getattr(self, coefficient))))

    def coefficient(self, name: str, t: float, rng: np.random.Generator) -> float:
        """Return coefficient ``name`` for the move after evaluation ``t`` (0-based).

        ``t`` is clamped to ``[0, iters]``, so a swarm run past its planned iterations (or an
        async particle evaluated more often than ``iters``) keeps the end value.
        """
        t = min(max(float(t), 0.0), float(self.iters))
        schedule = SCHEDULES.get(self.strategy[name])
        start = float(getattr(self, name))
        return float(schedule.value(start, self.end(name), t, float(self.iters), rng))

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict that :meth:`from_dict` reads back."""
        return {
            "n_particles": self.n_particles,
            "iters": self.iters,
            "c1": self.c1,
            "c2": self.c2,
            "w": self.w,
            "strategy": dict(self.strategy),
            "end_values": dict(self.end_values),
            "velocity_clamp": self.velocity_clamp,
            "seed": self.seed,
            "restart_patience": self.restart_patience,
            "boundary": self.boundary,
            "mutation": self.mutation,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SwarmOptions:
        """Rebuild options written by :meth:`to_dict`."""
        return cls(**dict(data))


# --------------------------------------------------------------------------------------------
# Swarm
# --------------------------------------------------------------------------------------------


def _encode_fitness(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _decode_fitness(value: Any) -> float:
    return math.inf if value is None else float(value)


class Swarm:
    """A global-best particle swarm over the box ``[low, high]``, minimising.

    Args:
        low: lower bound per dimension.
        high: upper bound per dimension; a dimension with ``high == low`` stays fixed.
        options: the swarm's options (its seed seeds the swarm's own RNG).
        init_position: where particle 0 starts (the encoded default configuration); the
            others start uniformly at random inside the bounds.
        steps: the mutation step per dimension (``SearchSpace.steps``: one candidate, or a
            tenth of the range where there are many); default a tenth of each range.
        init_positions: where particles ``0..k-1`` start (k rows, k <= n_particles; the
            baseline and the prior's picks); applied after ``init_position``, which it overrides
            for particle 0. The random draws are the same with or without it, so the other
            particles start where they would have.
    """

    def __init__(
        self,
        low: Any,
        high: Any,
        options: SwarmOptions,
        init_position: Any = None,
        steps: Any = None,
        init_positions: Any = None,
    ) -> None:
        self._setup(low, high, options, steps)
        n, d = options.n_particles, self._low.size
        self._rng = np.random.default_rng(options.seed)
        positions = self._low + self._rng.random((n, d)) * self._width
        if init_position is not None:
            positions[0] = self._sanitize(
                np.asarray(init_position, dtype=float).reshape(-1), positions[0], "init_position"
            )
        if init_positions is not None:
            rows = np.asarray(init_positions, dtype=float).reshape(-1, d)
            if rows.shape[0] > n:
                raise ValueError(f"init_positions has {rows.shape[0]} rows for {n} particles")
            for k, row in enumerate(rows):
                positions[k] = self._sanitize(row, positions[k], "init_positions")
        velocities = (self._rng.random((n, d)) * 2.0 - 1.0) * _INIT_VELOCITY * self._width
        self._positions = positions
        self._velocities = np.clip(velocities, -self._vmax, self._vmax)
        self._pbest_pos = positions.copy()
        self._pbest_fit = np.full(n, np.inf)
        self._gbest_pos = positions[0].copy()
        self._gbest_fit = math.inf
        self._counts = np.zeros(n, dtype=np.int64)
        self._stalls = np.zeros(n, dtype=np.int64)
        self._screen: tuple[int, float, Callable[[np.ndarray], np.ndarray]] | None = None
        self._refused: Callable[[np.ndarray], bool] | None = None

    def _setup(self, low: Any, high: Any, options: SwarmOptions, steps: Any = None) -> None:
        low = np.array(low, dtype=float).reshape(-1)
        high = np.array(high, dtype=float).reshape(-1)
        if low.shape != high.shape:
            raise ValueError(f"low and high differ in length: {low.size} != {high.size}")
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError("bounds must be finite")
        if np.any(high < low):
            raise ValueError(f"high < low in dimension(s) {np.flatnonzero(high < low).tolist()}")
        self._low, self._high = low, high
        self._width = high - low
        with np.errstate(over="ignore"):  # an enormous clamp means "unclamped": inf is fine
            self._vmax = options.velocity_clamp * self._width
        if steps is None:
            self._steps = _DEFAULT_STEP * self._width
        else:
            given = np.array(steps, dtype=float).reshape(-1)
            if given.shape != low.shape or not np.all(np.isfinite(given)) or np.any(given < 0):
                raise ValueError(f"steps must be {low.size} finite values >= 0, got {steps!r}")
            self._steps = np.minimum(given, self._width)
        self._options = options

    # ---- read-only state -------------------------------------------------------------------

    @property
    def options(self) -> SwarmOptions:
        """The swarm's options."""
        return self._options

    @property
    def n_particles(self) -> int:
        """Number of particles."""
        return self._options.n_particles

    @property
    def dimensions(self) -> int:
        """Number of dimensions (fixed ones included)."""
        return int(self._low.size)

    @property
    def low(self) -> np.ndarray:
        """Lower bounds (a copy)."""
        return self._low.copy()

    @property
    def high(self) -> np.ndarray:
        """Upper bounds (a copy)."""
        return self._high.copy()

    @property
    def positions(self) -> np.ndarray:
        """Current positions, n_particles × d (a copy)."""
        return self._positions.copy()

    @property
    def velocities(self) -> np.ndarray:
        """Current velocities, n_particles × d (a copy)."""
        return self._velocities.copy()

    @property
    def best_position(self) -> np.ndarray | None:
        """The best position told so far, or None while no evaluation has succeeded."""
        return self._gbest_pos.copy() if math.isfinite(self._gbest_fit) else None

    @property
    def best_fitness(self) -> float:
        """The best fitness told so far (``inf`` while no evaluation has succeeded)."""
        return float(self._gbest_fit)

    @property
    def personal_best_positions(self) -> np.ndarray:
        """Each particle's best position (its start where its fitness is still ``inf``)."""
        return self._pbest_pos.copy()

    @property
    def personal_best_fitness(self) -> np.ndarray:
        """Each particle's best fitness (``inf`` while none of its evaluations succeeded)."""
        return self._pbest_fit.copy()

    @property
    def evaluation_counts(self) -> np.ndarray:
        """How many evaluations each particle has been told (a copy)."""
        return self._counts.copy()

    @property
    def iteration(self) -> int:
        """Completed iterations: the evaluation count every particle has reached."""
        return int(self._counts.min())

    @property
    def evaluations(self) -> int:
        """Total evaluations told, all particles together."""
        return int(self._counts.sum())

    # ---- sync API --------------------------------------------------------------------------

    def ask(self) -> np.ndarray:
        """Return the positions to evaluate now, n_particles × d (a copy)."""
        return self._positions.copy()

    def tell(self, fitness: Any, positions: Any = None) -> None:
        """Tell the fitness of every particle's current position, then move the whole swarm.

        Args:
            fitness: one value per particle, lower is better; NaN and ±inf count as failed
                evaluations (``inf``).
            positions: the repaired positions that were really evaluated (write-back). They
                replace the current positions before the bests are updated; NaN entries keep
                the asked value, other entries are clipped into the bounds.
        """
        n, d = self.n_particles, self.dimensions
        fit = self._clean_fitness(np.asarray(fitness, dtype=float).reshape(-1), n)
        if positions is not None:
            given = np.asarray(positions, dtype=float)
            if given.shape != (n, d):
                raise ValueError(f"positions must have shape {(n, d)}, got {given.shape}")
            self._positions = self._sanitize(given, self._positions, "positions")
        improved = fit < self._pbest_fit
        self._pbest_fit[improved] = fit[improved]
        self._pbest_pos[improved] = self._positions[improved]
        self._stalls = np.where(improved, 0, self._stalls + 1)
        self._update_global_best()
        t = self.iteration
        self._counts += 1
        self._move(np.arange(n), t)
        self._restart_stalled(np.arange(n))

    # ---- async API -------------------------------------------------------------------------

    def ask_one(self, i: int) -> np.ndarray:
        """Return particle ``i``'s current position (a copy)."""
        return self._positions[self._index(i)].copy()

    def tell_one(self, i: int, fitness: float, position: Any = None) -> None:
        """Tell particle ``i``'s fitness, update the bests, then move particle ``i`` only.

        The move uses the coefficients at the particle's own evaluation count, so particles
        dispatched independently each follow their schedule.

        Args:
            i: particle index.
            fitness: lower is better; NaN and ±inf count as a failed evaluation.
            position: the repaired position really evaluated (write-back), sanitised as in
                :meth:`tell`.
        """
        i = self._index(i)
        fit = float(fitness)
        if not math.isfinite(fit):
            fit = math.inf
        if position is not None:
            given = np.asarray(position, dtype=float).reshape(-1)
            if given.shape != (self.dimensions,):
                raise ValueError(
                    f"position must have {self.dimensions} entries, got {given.size}"
                )
            self._positions[i] = self._sanitize(given, self._positions[i], "position")
        if fit < self._pbest_fit[i]:
            self._pbest_fit[i] = fit
            self._pbest_pos[i] = self._positions[i]
            self._stalls[i] = 0
            if fit < self._gbest_fit:
                self._gbest_fit = fit
                self._gbest_pos = self._positions[i].copy()
        else:
            self._stalls[i] += 1
        t = int(self._counts[i])
        self._counts[i] += 1
        self._move(np.array([i]), t)
        self._restart_stalled(np.array([i]))

    # ---- checkpoint ------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """Return the whole swarm as a JSON-serialisable dict.

        Arrays become nested lists of floats; a fitness of ``inf`` is written as ``None``; the
        RNG is saved through ``rng.bit_generator.state``, so :meth:`from_state` continues
        exactly where this swarm is.
        """
        return {
            "version": _STATE_VERSION,
            "options": self._options.to_dict(),
            "low": self._low.tolist(),
            "high": self._high.tolist(),
            "positions": self._positions.tolist(),
            "velocities": self._velocities.tolist(),
            "personal_best_positions": self._pbest_pos.tolist(),
            "personal_best_fitness": [_encode_fitness(f) for f in self._pbest_fit.tolist()],
            "best_position": self._gbest_pos.tolist(),
            "best_fitness": _encode_fitness(self._gbest_fit),
            "evaluation_counts": self._counts.tolist(),
            "stalls": self._stalls.tolist(),
            "steps": self._steps.tolist(),
            "rng": self._rng.bit_generator.state,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Swarm:
        """Rebuild a swarm from :meth:`to_state` output (after a JSON round trip too).

        Raises:
            ConfigError: the state is malformed or from another version.
        """
        try:
            if state.get("version") != _STATE_VERSION:
                raise ConfigError(
                    f"swarm state version {state.get('version')!r} is not supported "
                    f"(expected {_STATE_VERSION})"
                )
            swarm = cls.__new__(cls)
            # "steps" is absent in checkpoints written before step mutation existed
            swarm._setup(state["low"], state["high"], SwarmOptions.from_dict(state["options"]),
                         state.get("steps"))
            n, d = swarm.n_particles, swarm.dimensions

            def matrix(key: str) -> np.ndarray:
                arr = np.array(state[key], dtype=float).reshape(n, d)
                if not np.all(np.isfinite(arr)):
                    raise ValueError(f"{key} holds non-finite values")
                return arr

            swarm._positions = matrix("positions")
            swarm._velocities = matrix("velocities")
            swarm._pbest_pos = matrix("personal_best_positions")
            pbest_fit = [_decode_fitness(f) for f in state["personal_best_fitness"]]
            swarm._pbest_fit = np.array(pbest_fit, dtype=float).reshape(n)
            swarm._gbest_pos = np.array(state["best_position"], dtype=float).reshape(d)
            swarm._gbest_fit = _decode_fitness(state["best_fitness"])
            swarm._counts = np.array(state["evaluation_counts"], dtype=np.int64).reshape(n)
            # absent in checkpoints written before stall restarts existed: no stall yet
            swarm._stalls = np.array(state.get("stalls", [0] * n), dtype=np.int64).reshape(n)
            rng_state = dict(state["rng"])
            rng = np.random.default_rng()
            if rng_state.get("bit_generator") != type(rng.bit_generator).__name__:
                raise ValueError(f"unsupported bit generator {rng_state.get('bit_generator')!r}")
            rng.bit_generator.state = rng_state
            swarm._rng = rng
            swarm._screen = None
            swarm._refused = None
        except ConfigError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"swarm state is malformed: {exc}") from None
        return swarm

    # ---- internals -------------------------------------------------------------------------

    def _index(self, i: int) -> int:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"particle index must be an integer, got {i!r}")
        if not 0 <= i < self.n_particles:
            raise IndexError(f"particle index {i} out of range 0..{self.n_particles - 1}")
        return int(i)

    @staticmethod
    def _clean_fitness(fitness: np.ndarray, n: int) -> np.ndarray:
        if fitness.shape != (n,):
            raise ValueError(f"fitness must have {n} values, got {fitness.size}")
        return np.where(np.isfinite(fitness), fitness, np.inf)

    def _sanitize(self, given: np.ndarray, fallback: np.ndarray, what: str) -> np.ndarray:
        """Return ``given`` with NaN replaced by ``fallback`` and everything clipped to bounds.

        Written-back positions are encodings of real values, so an out-of-range one is the
        bound itself (clipped), not a bounce (reflected) as in a move.
        """
        if given.shape != fallback.shape:
            raise ValueError(f"{what} must have shape {fallback.shape}, got {given.shape}")
        out = np.where(np.isnan(given), fallback, given)
        return np.clip(out, self._low, self._high)

    def _update_global_best(self) -> None:
        best = int(np.argmin(self._pbest_fit))
        if self._pbest_fit[best] < self._gbest_fit:
            self._gbest_fit = float(self._pbest_fit[best])
            self._gbest_pos = self._pbest_pos[best].copy()

    def set_screen(self, k: int, explore: float, score: Callable[[np.ndarray], np.ndarray] | None) -> None:
        """Screen moves: each move draws ``k`` candidate moves, ``score`` (lower is better, one
        value per row of a k × d array; a model's predicted fitness) ranks them and the best is
        taken; with probability ``explore`` the first candidate is taken unranked. ``k <= 1`` or
        ``score = None``: no screening. Candidates :meth:`set_refused` knows as refused are left
        out of both picks. The screen is not part of :meth:`to_state` (the caller attaches it
        again after :meth:`from_state`)."""
        if not 0.0 <= explore <= 1.0:
            raise ValueError(f"explore must be in [0, 1], got {explore!r}")
        self._screen = (int(k), float(explore), score) if score is not None and k > 1 else None

    def set_refused(self, refused: Callable[[np.ndarray], bool] | None) -> None:
        """Never propose a position ``refused`` says is known to be refused (a configuration that
        breaks the engine's start-up rules, or that was refused at launch): a move draws among the
        candidate moves that are not, drawing up to :data:`REFUSED_REDRAWS` more when every one
        is, and a stalled particle's restart is drawn again the same way. ``None``: no check. Not
        part of :meth:`to_state` (the caller attaches it again after :meth:`from_state`)."""
        self._refused = refused

    def _allowed(self, x: np.ndarray) -> bool:
        return self._refused is None or not self._refused(x)

    def _move(self, rows: np.ndarray, t: int) -> None:
        """Move particles ``rows`` with the coefficients of move ``t``."""
        opts = self._options
        w = opts.coefficient("w", t, self._rng)
        c1 = opts.coefficient("c1", t, self._rng)
        c2 = opts.coefficient("c2", t, self._rng)
        x = self._positions[rows]
        v = self._velocities[rows]
        nx, nv = self._step(rows, x, v, w, c1, c2)
        screen = self._screen
        if screen is not None or self._refused is not None:
            k, explore, score = screen if screen is not None else (1, 1.0, None)
            cands = [(nx, nv)] + [self._step(rows, x, v, w, c1, c2) for _ in range(k - 1)]
            unranked = self._rng.random(rows.size) < explore if screen is not None else np.ones(rows.size, bool)
            for r in range(rows.size):
                mine = [(c[0][r], c[1][r]) for c in cands]
                ok = [j for j, (cx, _) in enumerate(mine) if self._allowed(cx)]
                redraws = 0
                while not ok and redraws < REFUSED_REDRAWS:
                    one = rows[r:r + 1]
                    cx, cv = self._step(one, x[r:r + 1], v[r:r + 1], w, c1, c2)
                    mine.append((cx[0], cv[0]))
                    redraws += 1
                    if self._allowed(cx[0]):
                        ok = [len(mine) - 1]
                if not ok:
                    continue  # every draw is a known refusal: the first stands (refused again, free)
                j = ok[0]
                if not unranked[r] and score is not None and len(ok) > 1:
                    s = np.asarray(score(np.array([mine[i][0] for i in ok])), dtype=float)
                    if np.any(np.isfinite(s)):
                        j = ok[int(np.argmin(np.where(np.isnan(s), np.inf, s)))]
                nx[r], nv[r] = mine[j]
        self._positions[rows] = nx
        self._velocities[rows] = nv

    def _step(self, rows: np.ndarray, x: np.ndarray, v: np.ndarray, w: float, c1: float,
              c2: float) -> tuple[np.ndarray, np.ndarray]:
        """One candidate move of ``rows`` from ``x``, ``v``: velocity update, boundary, mutation."""
        r1 = self._rng.random(x.shape)
        r2 = self._rng.random(x.shape)
        # A failed (inf) attractor says nothing about where good configurations are.
        cognitive = np.where(
            np.isfinite(self._pbest_fit[rows])[:, None], self._pbest_pos[rows] - x, 0.0
        )
        social = (self._gbest_pos - x) if math.isfinite(self._gbest_fit) else np.zeros_like(x)
        with np.errstate(over="ignore", invalid="ignore"):
            v = w * v + c1 * r1 * cognitive + c2 * r2 * social
        v = np.clip(np.nan_to_num(v, nan=0.0), -self._vmax, self._vmax)
        if self._options.boundary == "absorb":
            x, v = self._absorb(x + v, v)
        else:
            x, v = self._reflect(x + v, v)
        return self._mutated(x), v

    def _mutated(self, x: np.ndarray) -> np.ndarray:
        """``x`` with each row, with probability ``mutation``, moved one step along a random dimension."""
        p = self._options.mutation
        movable = np.flatnonzero(self._steps > 0)
        if p <= 0 or movable.size == 0:
            return x
        x = x.copy()
        hit = np.flatnonzero(self._rng.random(x.shape[0]) < p)
        if hit.size == 0:
            return x
        dims = movable[self._rng.integers(0, movable.size, size=hit.size)]
        signs = np.where(self._rng.random(hit.size) < 0.5, -1.0, 1.0)
        for i, j, sign in zip(hit, dims, signs):
            y = x[i, j] + sign * self._steps[j]
            if not self._low[j] <= y <= self._high[j]:
                y = x[i, j] - sign * self._steps[j]
            x[i, j] = min(max(y, self._low[j]), self._high[j])
        return x

    def _restart_stalled(self, rows: np.ndarray) -> None:
        """Re-draw the particles of ``rows`` that stalled ``restart_patience`` times in a row."""
        k = self._options.restart_patience
        if k <= 0:
            return
        stalled = rows[self._stalls[rows] >= k]
        if stalled.size == 0:
            return
        shape = (stalled.size, self.dimensions)
        fresh = self._low + self._rng.random(shape) * self._width
        if self._refused is not None:
            for r in range(stalled.size):
                for _ in range(REFUSED_REDRAWS):
                    if self._allowed(fresh[r]):
                        break
                    fresh[r] = self._low + self._rng.random(self.dimensions) * self._width
        self._positions[stalled] = fresh
        v = (self._rng.random(shape) * 2.0 - 1.0) * _INIT_VELOCITY * self._width
        self._velocities[stalled] = np.clip(v, -self._vmax, self._vmax)
        self._stalls[stalled] = 0

    def _absorb(self, x: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stop ``x`` on the bound it crossed and zero that velocity component."""
        out = ~((x >= self._low) & (x <= self._high))  # NaN counts as out
        x = np.where(np.isnan(x), self._low, x)
        return np.clip(x, self._low, self._high), np.where(out, 0.0, v)

    def _reflect(self, x: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Fold ``x`` back into the bounds, as often as needed; flip ``v`` on an odd count."""
        low, width = self._low, self._width
        inside = (x >= low) & (x <= self._high)
        span = np.where(width > 0, width, 1.0)
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = (x - low) / span
            bounces = np.floor(scaled)
            frac = scaled - bounces
            odd = np.mod(bounces, 2.0) == 1.0
            folded = low + np.where(odd, 1.0 - frac, frac) * width
        # x + v can overflow to ±inf with an enormous velocity_clamp; such a point sits on a bound
        folded = np.where(np.isfinite(folded), folded, np.clip(x, low, self._high))
        x = np.where(inside, x, folded)
        v = np.where(inside | ~odd, v, -v)
        return np.clip(x, low, self._high), v


def swarm_options(settings: Settings) -> SwarmOptions:
    """The run's :class:`msopt.search.swarm.SwarmOptions` from ``[pso_options]`` and ``[pso_strategy]``.

    ``iters = 0`` (baseline and refinement only) plans the coefficient schedules over one
    iteration, which the swarm never takes.

    Raises:
        ConfigError: naming the file, the table and the key.
    """
    try:
        return SwarmOptions.from_settings(settings.section("pso_options"), settings.section("pso_strategy"),
                                          settings.n_particles, max(1, settings.iters),
                                          seed=settings.config.run.seed)
    except ConfigError as exc:
        raise ConfigError(f"{settings.table_source('pso_options', 'pso_strategy')}: {exc}") from None
