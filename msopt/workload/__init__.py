"""The load a run measures with: request traces (:mod:`msopt.workload.trace`) and their statistics
(:mod:`msopt.workload.summary`).

A low-level package: it imports only :mod:`msopt.errors` and :mod:`msopt.checks`, so that
benchmarks, the simulator and the configuration can all read a trace the same way.
"""

from __future__ import annotations

from msopt.workload.summary import TraceSummary, trace_summary
from msopt.workload.trace import (
    DEFAULT_BLOCK_SIZE,
    FORMATS,
    LENGTH_POLICIES,
    Trace,
    TraceCounts,
    TraceRequest,
    formats_line,
    read_requests,
)

__all__ = ["DEFAULT_BLOCK_SIZE", "FORMATS", "LENGTH_POLICIES", "Trace", "TraceCounts", "TraceRequest",
           "TraceSummary", "formats_line", "read_requests", "trace_summary"]
