"""The run's watch on engine deaths: when every configuration it launched died on the same
request, another launch would only die on it too, so the run stops and says why."""

from __future__ import annotations

from dataclasses import dataclass, field

from msopt.engines.crash import EngineCrash
from msopt.evaluate.results import EvaluationResult, values_key

#: Distinct configurations that must all have died on one request before the run stops (fewer when
#: the launch budget is smaller): one death can be the configuration's, three on the same request are
#: the request's.
CONFIGURATIONS = 3


@dataclass
class CrashWatch:
    """Counts, per configuration launched, the death it met (None: it served).

    Args:
        needed: distinct configurations that must all have died on the same request.
    """

    needed: int = CONFIGURATIONS
    _seen: dict[str, str | None] = field(default_factory=dict)
    _first: EngineCrash | None = None

    @classmethod
    def for_budget(cls, max_launches: int) -> CrashWatch:
        """A watch for a run of ``max_launches`` launches (0: no launch budget): all of them where fewer than
        :data:`CONFIGURATIONS`, but never one death alone (a run of one launch ends with it anyway)."""
        return cls(CONFIGURATIONS if max_launches <= 0 else max(2, min(CONFIGURATIONS, max_launches)))

    def add(self, r: EvaluationResult) -> str | None:
        """Count one launched evaluation; the line that stops the run, or None to go on."""
        key = values_key(r.values)
        if key in self._seen:  # a configuration launched again (a re-measurement) counts once, as first met
            return None
        crash = EngineCrash.from_json(r.crash) if r.crash else None
        self._seen[key] = crash.signature if crash is not None else None
        if crash is not None and self._first is None:
            self._first = crash
        signatures = set(self._seen.values())
        if len(self._seen) < self.needed or len(signatures) != 1 or None in signatures or self._first is None:
            return None
        return (f"every configuration launched so far ({len(self._seen)}) died on the same request: "
                f"{self._first.message()}; another configuration would die on it too, so the run stops: drop "
                "such requests from the workload or use another build of the engine (docs/engines.md, "
                "\"When the engine dies\")")
