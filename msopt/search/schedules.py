"""Coefficient schedules of the particle swarm: how ``w``, ``c1`` and ``c2`` vary over a particle's
evaluations, with pyswarms' ``OptionsHandler`` semantics (``[pso_strategy]``)."""

from __future__ import annotations

import math

import numpy as np

from msopt.registry import Registry

__all__ = ["COEFFICIENTS", "SCHEDULES", "CoefficientSchedule"]

COEFFICIENTS: tuple[str, ...] = ("w", "c1", "c2")
"""The coefficients a ``[pso_strategy]`` table can give a schedule."""

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
