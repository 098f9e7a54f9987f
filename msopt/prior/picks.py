"""The simulator prior's picks: where the first generation starts (:meth:`SimulatorPrior.picks
<msopt.prior.simulator.SimulatorPrior.picks>`), diverse top predictions."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from msopt.evaluate.results import fitness_level


class _Predicted(Protocol):
    """A prediction as the picks read it (:class:`msopt.prior.simulator.Prediction`)."""

    @property
    def values(self) -> Mapping[str, Any]: ...

    @property
    def fitness(self) -> float: ...


Prediction = TypeVar("Prediction", bound=_Predicted)

__all__ = ["PICK_TIE", "diverse_picks"]

#: Prediction levels within this fraction of the prior's best are ones it cannot rank apart: its
#: picks (:func:`diverse_picks`) measure each of them once before a second configuration of
#: any. Far below the simulator's error, and below one measurement's noise (2-3 %), so such gaps are
#: ties; chosen on the bench's visible problems (docs/searchers.md, issue 49, fifth session).
PICK_TIE = 0.005


def diverse_picks(ranked_all: Sequence[Prediction], names: Sequence[str], layout: Sequence[str], k: int,
                  exclude: Sequence[Mapping[str, Any]] = ()) -> list[Prediction]:
    """Up to ``k`` diverse top predictions: for half of them the best of each distinct parallel
    layout (the ``layout`` fields), layouts in the order of their best; then one of each further
    prediction level within :data:`PICK_TIE` of the best (configurations predicted the same are
    one level: a plateau); then further top predictions that differ from every pick (and from
    ``exclude``, the baseline) in at least ``max(2, dimensions // 3)`` searched values (every one
    in a smaller space): starts in several basins, not around one optimum.

    Order: the first pick of each level within :data:`PICK_TIE` of the best, best first, then
    the others, best first. Where the prior cannot rank its top levels apart, each is measured
    before any level twice; where one level stands out, its other configurations come next."""
    need = min(len(names), max(2, len(names) // 3))
    ranked = [p for p in ranked_all if math.isfinite(p.fitness)]
    chosen: list[Prediction] = []
    taken = [tuple(v.get(n) for n in names) for v in exclude]
    if not ranked:
        return []
    tie = ranked[0].fitness + PICK_TIE * abs(ranked[0].fitness)
    if layout:
        seen_layouts: set[tuple[Any, ...]] = set()
        for p in ranked:
            lay = tuple(p.values.get(n) for n in layout)
            if lay in seen_layouts:
                continue
            seen_layouts.add(lay)
            t = tuple(p.values.get(n) for n in names)
            if len(chosen) < (k + 1) // 2 and t not in taken:
                chosen.append(p)
                taken.append(t)
    levels = {_level(p) for p in chosen}
    for p in ranked:
        if len(chosen) >= k or p.fitness > tie:
            break
        t = tuple(p.values.get(n) for n in names)
        if _level(p) not in levels and t not in taken:
            chosen.append(p)
            taken.append(t)
            levels.add(_level(p))
    for p in ranked:
        if len(chosen) >= k:
            break
        t = tuple(p.values.get(n) for n in names)
        if all(sum(a != b for a, b in zip(t, u)) >= need for u in taken):
            chosen.append(p)
            taken.append(t)
    first: set[str] = set()

    def order(p: Prediction) -> tuple[int, float]:
        new = _level(p) not in first and p.fitness <= tie
        first.add(_level(p))
        return (0 if new else 1, p.fitness)

    return sorted(sorted(chosen, key=lambda p: p.fitness), key=order)


def _level(p: _Predicted) -> str:
    return fitness_level(p.fitness)
