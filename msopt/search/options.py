"""The swarm's options (``[pso_options]``, ``[pso_strategy]``), validated at the boundary."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from msopt.checks import is_finite
from msopt.config.keys import SECTION_TABLES, checked
from msopt.errors import ConfigError, RegistryError
from msopt.search.schedules import COEFFICIENTS, SCHEDULES

if TYPE_CHECKING:
    from msopt.config import Config

__all__ = ["BOUNDARIES", "OPTION_KEYS", "SwarmOptions", "swarm_options"]

#: ``[pso_options]``, each key declared once (its rule, default and doc) in :mod:`msopt.config.keys`.
_DECLARED = SECTION_TABLES["pso_options"]
OPTION_KEYS: tuple[str, ...] = tuple(_DECLARED)
BOUNDARIES: tuple[str, ...] = ("reflect", "absorb")
"""How a move that leaves the box is brought back (``[pso_options] boundary``)."""


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
        for key in OPTION_KEYS:  # the declared checks, in configuration.md's order
            value = checked("", "pso_options", key, getattr(self, key), _DECLARED[key])
            object.__setattr__(self, key, value if isinstance(value, str) else
                               int(value) if key == "restart_patience" else float(value))
        if self.seed is not None:
            object.__setattr__(self, "seed", _check_int(self.seed, "seed", 0))

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
        unknown = sorted(set(options) - set(OPTION_KEYS))
        if unknown:
            raise ConfigError(
                f"[pso_options] has unknown key {unknown[0]!r} (valid: {', '.join(OPTION_KEYS)})"
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



def swarm_options(config: Config) -> SwarmOptions:
    """The run's :class:`msopt.search.swarm.SwarmOptions` from ``[pso_options]`` and ``[pso_strategy]``.

    ``iters = 0`` (baseline and refinement only) plans the coefficient schedules over one
    iteration, which the swarm never takes.

    Raises:
        ConfigError: naming the file, the table and the key.
    """
    try:
        return SwarmOptions.from_settings(config.pso_options.table, config.pso_strategy.table,
                                          config.run.n_particles, max(1, config.run.iters),
                                          seed=config.run.seed)
    except ConfigError as exc:
        a, b = config.pso_options, config.pso_strategy  # the later layer of the two names the pair
        later = max((a.source, b.source), key=lambda s: a.layers.index(s) if s in a.layers else -1)
        raise ConfigError(f"{later}: {exc}") from None
