"""A request trace's statistics (:class:`TraceSummary`, :func:`trace_summary`), read in one pass of
:class:`msopt.workload.trace.Trace`: what ``msopt validate`` prints, what the ``[workload]`` table sizes a run
by, and the warnings of a trace that looks misread.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from msopt.workload import trace as _trace
from msopt.workload.trace import Trace, TraceCounts, TraceRequest

#: a rate or a span that looks like timestamps read in the wrong unit
_UNIT_WARN_RATE = 1000.0
_UNIT_WARN_REQUESTS = 100


@dataclass(frozen=True)
class TraceSummary:
    """A trace's statistics, as ``msopt validate`` prints them.

    Attributes:
        requests: requests sent (after window, failures and length policy).
        span_s: last arrival minus first, in replay seconds.
        rate: mean requests per second ((requests - 1) / span), or None for a span of 0.
        gap_cv: coefficient of variation of the gaps between arrivals (1 for Poisson), or None.
        input_pct, output_pct: {50, 90, 99: tokens} and "mean".
        block_size: tokens per hash id (0 when the trace records none).
        prefix_ceiling: share of prompt blocks whose hash id repeats one seen earlier (an infinite
            cache's reuse; a prompt without hash ids counts its blocks, none repeated), or None for a
            trace without hash ids.
        counts: the pass's :class:`TraceCounts`.
        format: the trace's format.
        cap_arrival_s: the arrival of request :data:`msopt.workload.trace.MAX_REQUESTS` (replay seconds), or
            None for a trace of fewer requests: the window a run can replay ends there.
        totals: every request's input plus output tokens as sent, sorted (:meth:`over`).
        prompts: every request's input tokens as sent, sorted (:meth:`prompts_over`).
        unit_s: seconds per unit of the file's timestamps as read (0: wall clock).
        hashed, hash_mismatch: prompts with hash ids, and those whose count of ids is not their
            input over ``block_size`` rounded up (a block_size that disagrees with the ids).
        implied_block: the mean tokens per hash id of the prompts with hash ids, or None.
        about: what the file says besides its requests (a ServeGen client's windows), a line each.
    """

    requests: int
    span_s: float
    rate: float | None
    gap_cv: float | None
    input_pct: Mapping[str, float]
    output_pct: Mapping[str, float]
    block_size: int
    prefix_ceiling: float | None
    counts: TraceCounts = field(default_factory=TraceCounts)
    format: str = ""
    cap_arrival_s: float | None = None
    totals: tuple[int, ...] = field(default=(), repr=False, compare=False)
    prompts: tuple[int, ...] = field(default=(), repr=False, compare=False)
    unit_s: float = 1.0
    hashed: int = 0
    hash_mismatch: int = 0
    implied_block: float | None = None
    about: tuple[str, ...] = ()

    def warnings(self) -> list[str]:
        """What looks like a misread trace: a rate or span of timestamps in the wrong unit, a block_size
        the hash ids disagree with."""
        out = []
        unit = {1.0: "s", 1e-3: "ms", 1e-6: "us"}.get(self.unit_s, f"{self.unit_s:g} s")
        read = f"timestamps read in {unit}" if self.unit_s else "wall-clock timestamps"
        if self.rate is not None and self.rate > _UNIT_WARN_RATE:
            out.append(f"{self.rate:,.0f} req/s looks like {read} that are in another unit; set [workload] "
                       f"time_unit (s, ms or us)")
        elif self.requests > _UNIT_WARN_REQUESTS and self.span_s < 1.0:
            out.append(f"{self.requests:,} requests within {self.span_s:.3g} s looks like {read} that are in "
                       "another unit; set [workload] time_unit (s, ms or us)")
        if self.hash_mismatch > 0.1 * self.hashed and self.block_size:
            out.append(f"block_size {self.block_size} disagrees with the hash ids: {self.hash_mismatch:,} of "
                       f"{self.hashed:,} prompts carry other than input/{self.block_size} ids (rounded up), about "
                       f"{self.implied_block or 0:.0f} tokens per id; set [workload] block_size")
        return out

    def over(self, limit: int) -> int:
        """How many requests, as sent (after the length policy), are longer than ``limit`` tokens
        (input plus output): a server of that context refuses them, unless it cuts their output
        (:attr:`~msopt.sim.personality.Personality.cuts_output_to_context`)."""
        return len(self.totals) - bisect.bisect_right(self.totals, limit)

    def prompts_over(self, limit: int) -> int:
        """How many requests, as sent, have a prompt of at least ``limit`` tokens: one that leaves no room for
        an output token, which even a server that cuts outputs to its context refuses."""
        return len(self.prompts) - bisect.bisect_left(self.prompts, limit)

    def longest(self) -> int:
        """The longest request as sent (input plus output tokens), 0 for none."""
        return self.totals[-1] if self.totals else 0

    def as_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready values."""
        c = self.counts
        return {"format": self.format, "requests": self.requests, "span_s": self.span_s, "rate": self.rate,
                "gap_cv": self.gap_cv, "input_tokens": dict(self.input_pct), "output_tokens": dict(self.output_pct),
                "block_size": self.block_size, "prefix_ceiling": self.prefix_ceiling, "about": list(self.about),
                "rows": {"read": c.rows, "in_window": c.in_window, "failed": c.failed, "over_limit": c.over_limit,
                         "dropped": c.dropped, "scale": c.scale}}

    def lines(self) -> list[str]:
        """The summary as lines for a terminal."""
        def pct(p: Mapping[str, float]) -> str:
            return f"mean {p['mean']:.0f}, p50 {p['50']:.0f}, p90 {p['90']:.0f}, p99 {p['99']:.0f}"

        c = self.counts
        rate = f"{self.rate:.3g} req/s" if self.rate is not None else "all at once"
        cv = f"{self.gap_cv:.2f}" if self.gap_cv is not None else "n/a"
        out = [f"requests {self.requests} over {self.span_s:.1f} s, {rate}, burstiness (CV of gaps) {cv}",
               *self.about, f"input tokens {pct(self.input_pct)}", f"output tokens {pct(self.output_pct)}"]
        if self.prefix_ceiling is None:
            out.append("prefix reuse ceiling: n/a (no hash ids: never credited with prefix-cache hits)")
        else:
            scaled = (f", {self.block_size * self.counts.scale:.0f} tokens each once scaled"
                      if self.counts.scale != 1.0 else "")
            out.append(f"prefix reuse ceiling {self.prefix_ceiling:.1%} of {self.block_size}-token blocks{scaled}")
        skipped = []
        if c.failed:
            skipped.append(f"{c.failed} failed (zero tokens) skipped")
        if c.over_limit:
            if c.dropped:
                what = "dropped"
            elif c.scale != 1.0:
                what = f"every length scaled by {c.scale:.3g}"
            else:
                what = "clipped"
            skipped.append(f"{c.over_limit} over max_model_len ({what})")
        if skipped:
            out.append("; ".join(skipped))
        out.extend(f"warning: {w}" for w in self.warnings())
        return out


def _percentiles(xs: Sequence[float]) -> dict[str, float]:
    """Linear-interpolation percentiles (numpy's default) and the mean."""
    s = sorted(xs)
    if not s:
        return {"mean": 0.0, "50": 0.0, "90": 0.0, "99": 0.0}
    out = {"mean": math.fsum(s) / len(s)}
    for q in (50, 90, 99):
        k = (len(s) - 1) * q / 100.0
        lo, hi = math.floor(k), math.ceil(k)
        out[str(q)] = s[lo] + (s[hi] - s[lo]) * (k - lo)
    return out


def trace_summary(trace: Trace, requests: Iterable[TraceRequest] | None = None,
                  counts: TraceCounts | None = None) -> TraceSummary:
    """``trace``'s requests, span, rate, burstiness, length percentiles and prefix-reuse ceiling, in one pass.

    Args:
        trace: the trace.
        requests: its requests, read with ``counts`` (None: read here, ``trace.requests(counts)``): a
            caller that keeps the requests too passes the one pass it reads them in.
        counts: what the pass counts (None: a new one).
    """
    counts = counts if counts is not None else TraceCounts()
    ins: list[int] = []
    outs: list[int] = []
    first = prev = None
    n_gaps = 0
    gap_sum = gap_sq = 0.0
    seen: set[int] = set()
    blocks = repeats = unhashed = 0
    cap_arrival = None
    for r in (trace.requests(counts) if requests is None else requests):
        if len(ins) == _trace.MAX_REQUESTS - 1:
            cap_arrival = r.arrival_s
        ins.append(r.input_tokens)
        outs.append(r.output_tokens)
        if first is None:
            first = r.arrival_s
        if prev is not None:
            g = r.arrival_s - prev
            n_gaps += 1
            gap_sum += g
            gap_sq += g * g
        prev = r.arrival_s
        if not r.hash_ids and trace.block_size:
            # a prompt without hash ids (a generic row without a prefix_group) shares nothing, but its
            # blocks are prompt blocks all the same: the ceiling's denominator counts them
            unhashed += -(-r.input_tokens // max(1, round(trace.block_size * counts.scale)))
        for h in r.hash_ids:
            blocks += 1
            if h in seen:
                repeats += 1
            else:
                seen.add(h)
    span = (prev or 0.0) - (first or 0.0)
    cv = None
    if n_gaps and gap_sum > 0:
        mean = gap_sum / n_gaps
        cv = math.sqrt(max(0.0, gap_sq / n_gaps - mean * mean)) / mean
    return TraceSummary(requests=len(ins), span_s=span, rate=(len(ins) - 1) / span if span > 0 else None,
                        gap_cv=cv, input_pct=_percentiles(ins), output_pct=_percentiles(outs),
                        block_size=trace.block_size if blocks else 0,
                        prefix_ceiling=repeats / (blocks + unhashed) if blocks else None, counts=counts,
                        format=trace.format, cap_arrival_s=cap_arrival,
                        totals=tuple(sorted(i + o for i, o in zip(ins, outs, strict=True))),
                        prompts=tuple(sorted(ins)),
                        unit_s=0.0 if trace.format == "azure" else trace.unit, hashed=counts.hashed,
                        hash_mismatch=counts.hash_mismatch,
                        implied_block=counts.per_id / counts.hashed if counts.hashed else None,
                        about=trace.about())


__all__ = ["TraceSummary", "trace_summary"]
