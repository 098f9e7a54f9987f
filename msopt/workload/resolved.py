"""The run's workload as one resolved object (:class:`ResolvedWorkload`): the ``[workload]`` table, and for a
request trace its window, read once per process, with the window's summary and rate.

:meth:`ResolvedWorkload.resolve` builds it from the table (:func:`msopt.config.split` does, once per run); the
simulator, the benchmarks that replay a trace, the capacity stage and the report take it as an argument,
and the Ray actors receive it pickled (``Validated.parsed``), so no part of a run reads the trace again.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from msopt.workload import trace as _trace
from msopt.workload.replay import TraceWindow
from msopt.workload.summary import TraceSummary, trace_summary
from msopt.workload.table import SIMULATOR_SECTION, WorkloadSettings, benchmark_view, sim_trace, spelled, trace_load
from msopt.workload.trace import TraceCounts, TraceRequest


@dataclass(frozen=True)
class ResolvedWorkload:
    """The run's workload: synthetic (``window`` None) or a trace window.

    Attributes:
        settings: the ``[workload]`` table, checked.
        window: the trace window's requests (arrivals already divided by ``time_scale``), None without a trace.
        summary: the window's statistics (as ``msopt validate`` prints them), None without a trace.
    """

    settings: WorkloadSettings
    window: TraceWindow | None = None
    summary: TraceSummary | None = None

    @classmethod
    def resolve(cls, settings: WorkloadSettings) -> ResolvedWorkload:
        """The workload of ``settings``: for a trace, its window and summary from ONE pass over the file.

        Raises:
            ConfigError: a missing or unreadable trace, a bad row, naming the file, the row and the fix.
        """
        trace = settings.open_trace()
        if trace is None:
            return cls(settings)
        counts = TraceCounts()
        kept: list[TraceRequest] = []
        summary = trace_summary(trace, _kept(trace.requests(counts), kept), counts)
        # a scaled trace's hash id stands for fewer tokens (msopt.workload.trace, "scale"), as open_window gives it
        block = max(1, round(trace.block_size * counts.scale)) if trace.block_size else 0
        return cls(settings, TraceWindow(tuple(kept), block, counts), summary)

    @property
    def is_trace(self) -> bool:
        """True for a request trace's window."""
        return self.window is not None

    @property
    def path(self) -> str | None:
        """The trace file (absolute), or None."""
        return self.settings.trace

    def load(self) -> dict[str, Any]:
        """The trace's load by ``[workload]`` name (:func:`msopt.workload.table.trace_load`); {} without a trace.

        Raises:
            ConfigError: more requests than one run replays.
        """
        return trace_load(self.settings, self.summary) if self.summary is not None else {}

    @property
    def replay_rate(self) -> float | None:
        """The rate a replay of the window is written with (req/s, ``time_scale`` applied, to the
        microrequest: the ``request_rate`` of :meth:`load`), None without a trace or for a window
        whose requests all arrive at once."""
        rate = self.summary.rate if self.summary is not None else None
        return round(rate, 6) if rate else None

    @property
    def trace_rate(self) -> float | None:
        """The trace window's own mean rate (req/s at time scale 1): :attr:`replay_rate` over ``time_scale``."""
        rate = self.replay_rate
        return rate / self.settings.time_scale if rate is not None and math.isfinite(rate) else None

    def simulator_workload(self, table: Mapping[str, Any], benchmark: str | None = None) -> dict[str, Any]:
        """``[simulator.workload]`` (``table``, as written) as the simulator runs it: this workload's load over
        it (:func:`msopt.workload.table.spelled`), the synthetic keys of ``[workload]``, or a trace's
        requests, rate and mean lengths with its own lengths replayed (``benchmark`` ``builtin``: each
        session pinned to one data-parallel rank, as that benchmark sends it). The section itself is never
        written: this is the one place the simulator takes ``[workload]`` from.

        Raises:
            ConfigError: a trace of more requests than one run replays.
        """
        if not self.is_trace:
            return spelled(SIMULATOR_SECTION, table, self.settings.synthetic(), trace=False)
        return spelled(SIMULATOR_SECTION, table, self.load(), trace=True, replaying=True,
                       pin_sessions=benchmark == "builtin")

    def benchmark_section(self, name: str, table: Mapping[str, Any]) -> Mapping[str, Any]:
        """The ``[name]`` benchmark section (``table``, as written) as its adapter reads it: this workload's
        load over it in that benchmark's spelling (:func:`msopt.workload.table.benchmark_view`): the synthetic
        keys of ``[workload]``, or a trace's requests, mean rate and mean lengths (what a benchmark that cannot
        replay would send; one that replays takes the window itself). The section itself is never written.

        Raises:
            ConfigError: a trace of more requests than one run replays.
        """
        if self.is_trace:
            return benchmark_view(name, table, self.load(), trace=True)
        return benchmark_view(name, table, self.settings.synthetic(), trace=False)

    def replay_table(self) -> dict[str, Any] | None:
        """The trace as a replay table (``path`` and the trace's options,
        :data:`msopt.workload.replay.REPLAY_KEYS`): what a benchmark in a process of its own reopens
        (``python -m msopt.benchmarks``); None without a trace."""
        return sim_trace(self.settings) if self.is_trace else None


def _kept(requests: Iterator[TraceRequest], kept: list[TraceRequest]) -> Iterator[TraceRequest]:
    """``requests``, each also kept in ``kept`` up to one past the most one run replays (a longer trace is
    refused by :meth:`ResolvedWorkload.load`: keeping more would only cost memory)."""
    most = _trace.MAX_REQUESTS + 1
    for r in requests:
        if len(kept) < most:
            kept.append(r)
        yield r


__all__ = ["ResolvedWorkload"]
