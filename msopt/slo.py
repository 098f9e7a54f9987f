"""The run's service-level objectives and the one check of a measurement against them.

The verdict (``msopt.run.verdict``), the capacity stage's probes (``msopt.run.capacity``) and the
``goodput`` objective (``msopt.evaluate.objective``) all judge metrics by :func:`slo_checks`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from msopt.metrics import SUCCESS_RATE, TIME_PER_OUTPUT_TOKEN, TIME_TO_FIRST_TOKEN

__all__ = ["BROKEN", "MET", "SloCheck", "Slos", "slo_checks"]

MET = "✓"
BROKEN = "✗"


def _seconds(v: float) -> str:
    return f"{v:.3g} s" if v >= 1 else f"{v * 1000:.3g} ms"


def _percent(v: float) -> str:
    return f"{v * 100:.4g} %"


@dataclass(frozen=True)
class Slos:
    """The limits: ``ttft_slo`` and ``tpot_slo`` (seconds, upper), ``success_rate_slo`` (lower)."""

    ttft: float
    tpot: float
    success_rate: float


@dataclass(frozen=True)
class SloCheck:
    """One SLO against one measurement.

    Attributes:
        label: "TTFT", "TPOT", "success rate".
        metric: the metric's column name.
        value: the measured value (None: not measured).
        limit: the SLO.
        upper: True when the value must stay at or below the limit, False at or above.
    """

    label: str
    metric: str
    value: float | None
    limit: float
    upper: bool

    @property
    def met(self) -> bool:
        """True when measured and within the limit."""
        v = self.value
        if v is None or not math.isfinite(v):
            return False
        return v <= self.limit if self.upper else v >= self.limit

    @property
    def violation(self) -> float:
        """How far past the limit, relative to it (0 when within): ``value/limit - 1`` for an upper
        limit, ``limit/value - 1`` for a lower one. Needs a measured value (a lower limit: > 0)."""
        v = float(self.value) if self.value is not None else math.nan
        return max(0.0, v / self.limit - 1.0) if self.upper else max(0.0, self.limit / v - 1.0)

    def _fmt(self, v: float) -> str:
        return _percent(v) if self.metric == SUCCESS_RATE else _seconds(v)

    @property
    def measured(self) -> str:
        """The measured value with its unit ("18.5 ms"), or "not measured"."""
        v = self.value
        return self._fmt(v) if v is not None and math.isfinite(v) else "not measured"

    @property
    def bound(self) -> str:
        """The limit with its comparison ("≤ 20 ms")."""
        return f"{'≤' if self.upper else '≥'} {self._fmt(self.limit)}"

    def text(self) -> str:
        """"TPOT 18.5 ms ≤ 20 ms ✓" (broken: "TPOT 24 ms > 20 ms ✗")."""
        if self.met:
            return f"{self.label} {self.measured} {self.bound} {MET}"
        op = ">" if self.upper else "<"
        return f"{self.label} {self.measured} {op} {self._fmt(self.limit)} {BROKEN}"

    def reason(self) -> str:
        """Why it is broken, in the metric's own name: "ttft_p99 2.61 > 2.5"."""
        op = ">" if self.upper else "<"
        return f"{self.metric} {self.value:.4g} {op} {self.limit:g}"


def _number(metrics: Mapping[str, Any], name: str) -> float | None:
    v = metrics.get(name)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def slo_checks(slos: Slos, metrics: Mapping[str, Any], *, ttft: str = TIME_TO_FIRST_TOKEN,
               tpot: str = TIME_PER_OUTPUT_TOKEN) -> list[SloCheck]:
    """The SLOs against ``metrics``, TTFT, TPOT, success rate in that order; ``ttft``/``tpot`` name
    the statistic held to the limits (default the means; capacity's ``percentile``: ``ttft_p99``)."""
    return [
        SloCheck("TTFT", ttft, _number(metrics, ttft), slos.ttft, True),
        SloCheck("TPOT", tpot, _number(metrics, tpot), slos.tpot, True),
        SloCheck("success rate", SUCCESS_RATE, _number(metrics, SUCCESS_RATE), slos.success_rate, False),
    ]
