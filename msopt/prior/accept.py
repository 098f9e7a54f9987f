"""The speculative acceptance lengths a run measured (the ``spec_accept_len`` metric, the server's own
counters), by draft method, for the prior's predictions of the configurations that draft
(:meth:`msopt.prior.simulator.SimulatorPrior.accept_len`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from msopt.sim.speculative import chain_accept_len, chain_accept_rate, chain_steps

if TYPE_CHECKING:
    from msopt.sim.knobs import EngineKnobs


class MeasuredAccepts:
    """The measured acceptance lengths by draft method: (draft tokens in the chain, acceptance length)."""

    def __init__(self) -> None:
        self._rows: dict[str, list[tuple[int, float]]] = {}

    def add(self, knobs: EngineKnobs, accept: float) -> None:
        """One acceptance length measured on a launch of ``knobs`` (which drafts: ``spec_method`` set)."""
        self._rows.setdefault(knobs.spec_method, []).append((chain_steps(knobs), float(accept)))

    def of(self, knobs: EngineKnobs) -> float | None:
        """The acceptance length measured for ``knobs``' draft method and number of draft tokens: their mean
        where that number was measured, else the chain of the mean per-token rate the measurements of other
        numbers give (:func:`msopt.sim.speculative.chain_accept_rate`); None where the method was not
        measured."""
        rows = self._rows.get(knobs.spec_method) if knobs.spec_method else None
        if not rows:
            return None
        steps = chain_steps(knobs)
        same = [a for s, a in rows if s == steps]
        if same:
            return float(np.mean(same))
        return chain_accept_len(float(np.mean([chain_accept_rate(a, s) for s, a in rows])), steps)


__all__ = ["MeasuredAccepts"]
