"""What the driver sees of a model of the run that guides its searcher (:class:`Guide`): starting
positions, a screen for the searcher's constraint, a prediction for each request, and the run's
measurements to learn from. ``msopt.prior.PriorGuide`` is the simulator's; the driver never names it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from msopt.evaluate.results import EvaluationResult
from msopt.search import Screen
from msopt.space import SearchSpace

__all__ = ["Guide"]


class Guide(Protocol):
    """A model of the run around the searcher (Optuna: the sampler's surrogate)."""

    def starts(self, space: SearchSpace, default: np.ndarray, n: int, seed: int | None,
               launches: int | None = None) -> list[np.ndarray]:
        """Starting positions for lanes 1.. (at most ``n - 1``) beside the baseline's ``default``;
        ``launches``: the search's launch budget (None: none)."""

    def intro(self) -> tuple[str, str] | None:
        """(phase, text) of the run's first line about the guide, or None."""

    def screen(self) -> Screen | None:
        """The screen the searcher's :class:`~msopt.search.Constraint` carries, or None."""

    def predict(self, values: Mapping[str, Any], position: np.ndarray) -> dict[str, Any] | None:
        """What the journal records as ``predicted`` beside the result of ``values``."""

    def observe(self, result: EvaluationResult) -> None:
        """Learn of one recorded result (replayed ones too)."""

    def learn(self, say: Callable[[str], None]) -> None:
        """After an iteration's worth of results: update the model, saying how."""

    def records(self) -> dict[str, Any]:
        """The run's records the guide adds, by file name (e.g. prior.json)."""

    def trust(self) -> float:
        """How far the run trusts the guide's ranking now, 0..1 (1 before it was judged)."""
