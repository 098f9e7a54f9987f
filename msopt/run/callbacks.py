"""The run directory as a callback of the run loop: the journal, state.json and the records.

:class:`StoreCallback` comes first among the loop's callbacks (:class:`msopt.run.driver.Driver`
puts it there), so every result is journaled (fsynced) before the searcher, the leaderboard or
the display learn of it; a replayed result (``--resume``) is already in the journal and is not
written again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from msopt.evaluate.results import EvaluationResult
from msopt.run.events import Checkpoint, Finished, RunEnded, RunEvent

#: best.json: written with :meth:`RunRecord.write_best`.
BEST = "best.json"


class RunRecord(Protocol):
    """The run directory as the loop uses it (:class:`msopt.run.store.RunStore`)."""

    def append(self, result: EvaluationResult) -> None: ...

    def save_state(self, state: Mapping[str, Any]) -> None: ...

    def write_json(self, name: str, obj: Any) -> Any: ...

    def write_best(self, best: Mapping[str, Any]) -> Any: ...


class StoreCallback:
    """Journals each new result, replaces state.json at each checkpoint, and writes the run's
    records (prior.json, capacity.json, best.json) when it ends.

    Args:
        store: the run directory.
    """

    def __init__(self, store: RunRecord) -> None:
        self.store = store

    def on_event(self, event: RunEvent) -> None:
        """Write what ``event`` adds to the run directory."""
        if isinstance(event, Finished):
            if not event.replayed:
                self.store.append(event.result)
        elif isinstance(event, Checkpoint):
            self.store.save_state(event.state)
        elif isinstance(event, RunEnded):
            for name, obj in event.outcome.records.items():
                if name == BEST:
                    self.store.write_best(obj)
                else:
                    self.store.write_json(name, obj)
