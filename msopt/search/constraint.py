"""What every searcher is held to: the constraint the driver hands it, and the typed dimensions.

In the spirit of Nevergrad's ``register_cheap_constraint``: a :class:`Constraint` is cheap to
ask and a searcher consults it before it proposes a position, so a configuration known to be
refused (it breaks the engine's start-up rules, or it was refused before in this run) is never
proposed, and a proposal can be picked among several by the prior's predicted fitness
(:class:`Screen`). The driver builds one for every searcher (:class:`~msopt.search.SearcherSetup`);
the searcher never calls back into the driver. A searcher that ignores it still never launches a
refused configuration (the driver answers those without a launch), it only spends evaluations on
them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["NO_CONSTRAINT", "REFUSED_REDRAWS", "Constraint", "Screen", "SearchDimension"]

#: Proposals drawn again, at most, when every candidate is a known refusal.
REFUSED_REDRAWS = 16


@dataclass(frozen=True)
class Screen:
    """Pick a proposal among ``k`` by a model's prediction (``[search] screen``, ``explore``).

    Attributes:
        k: candidate proposals drawn per proposal (``<= 1``: no screening).
        explore: probability, 0..1, that a candidate is taken unranked while the model is fully
            trusted.
        score: predicted fitness of each row of a k × d array of positions (lower is better;
            ``inf``: predicted to fail, e.g. memory that cannot fit; NaN: no prediction).
        trust: how far the run trusts the model now, 0..1 (earned by measurement, e.g.
            :meth:`msopt.prior.PriorGuide.trust`); None: fully.
    """

    k: int
    explore: float
    score: Callable[[np.ndarray], np.ndarray]
    trust: Callable[[], float] | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.explore <= 1.0:
            raise ValueError(f"explore must be in [0, 1], got {self.explore!r}")

    def chance_unranked(self) -> float:
        """The probability that a proposal is taken unranked now: ``explore`` at full trust, 1 at
        none (``1 - trust · (1 - explore)``). An unranked proposal still avoids a predicted
        failure (:meth:`first_feasible`): the model's word on what cannot start is kept, its
        ranking is not."""
        trust = 1.0 if self.trust is None else min(1.0, max(0.0, float(self.trust())))
        return 1.0 - trust * (1.0 - self.explore)

    def first_feasible(self, candidates: np.ndarray) -> int:
        """The index of the first row of ``candidates`` not predicted to fail (``score`` not
        ``inf``), else 0."""
        s = np.asarray(self.score(candidates), dtype=float)
        feasible = np.flatnonzero(~np.isposinf(s))
        return int(feasible[0]) if feasible.size else 0


@dataclass(frozen=True)
class Constraint:
    """The known refusals and the screen, as the driver keeps them up to date.

    Attributes:
        decode: a position's values (decoded without a context), or None where it cannot be decoded.
        key: the key of a configuration's values (``values_key``).
        refused_keys: keys of configurations refused in this run (by the rules or at launch); the
            driver adds to this very set as refusals are journaled (or replayed by ``--resume``).
        rules: why a configuration breaks the engine's start-up rules, or None where it does not
            (None: no pre-check).
        screen: the prior's screen, or None.
    """

    decode: Callable[[np.ndarray], Mapping[str, Any] | None] | None = None
    key: Callable[[Mapping[str, Any]], str] | None = None
    refused_keys: set[str] = field(default_factory=set)
    rules: Callable[[Mapping[str, Any]], str | None] | None = None
    screen: Screen | None = None

    def refused(self, position: np.ndarray) -> bool:
        """Whether ``position`` is a configuration known to be refused."""
        if self.decode is None:
            return False
        values = self.decode(np.asarray(position, dtype=float))
        if values is None:
            return False
        if self.key is not None and self.key(values) in self.refused_keys:
            return True
        return self.rules is not None and self.rules(values) is not None

    @property
    def checks(self) -> bool:
        """Whether :meth:`refused` can ever say yes."""
        return self.decode is not None and (self.key is not None or self.rules is not None)

    def choose(self, candidates: Sequence[np.ndarray], unranked: bool) -> int | None:
        """The index of the candidate to propose among ``candidates`` (positions), or None when
        every one is a known refusal: the first allowed one, or with the screen the allowed one of the
        lowest finite predicted fitness (``unranked``: the first allowed one not predicted to fail)."""
        ok = [j for j, x in enumerate(candidates) if not self.refused(x)]
        if not ok:
            return None
        j = ok[0]
        if unranked and self.screen is not None and len(ok) > 1:
            j = ok[self.screen.first_feasible(np.array([candidates[i] for i in ok]))]
        elif not unranked and self.screen is not None and len(ok) > 1:
            s = np.asarray(self.screen.score(np.array([candidates[i] for i in ok])), dtype=float)
            if np.any(np.isfinite(s)):
                j = ok[int(np.argmin(np.where(np.isnan(s), np.inf, s)))]
        return j


NO_CONSTRAINT = Constraint()
"""Nothing refused, nothing screened."""


@dataclass(frozen=True)
class SearchDimension:
    """One searched coordinate, typed, as a searcher sees it.

    Attributes:
        name: the field's name.
        dtype: the field's dtype (``int``, ``float``, ``bool``, ``enum``, ``range``, ``ratio``, ...).
        low, high: the coordinate's bounds in the position box.
        step: a small move along it: one candidate of a dimension with at most 10 candidates,
            else a tenth of its range (``SearchSpace.steps``).
        candidates: the values it can take (enum, range, bool, a short int range), else None.
        coordinates: the position coordinate of each candidate (same order), else None: a
            searcher that picks candidate ``k`` proposes ``coordinates[k]``.
    """

    name: str
    dtype: str
    low: float
    high: float
    step: float
    candidates: tuple[Any, ...] | None = None
    coordinates: tuple[float, ...] | None = None

    @property
    def ordered(self) -> bool:
        """Whether the candidates are numbers (an order a model may use), not names or booleans."""
        return self.candidates is not None and all(
            isinstance(c, (int, float)) and not isinstance(c, bool) for c in self.candidates)

    def nearest(self, x: float) -> int:
        """The index of the candidate whose coordinate is nearest ``x``."""
        if self.coordinates is None:
            raise ValueError(f"dimension {self.name!r} has no candidates")
        return int(np.argmin(np.abs(np.asarray(self.coordinates) - float(x))))
