"""The run's service-level objectives and the one check of a measurement against them.

The verdict (``msopt.run.verdict``), the capacity stage's probes (``msopt.run.capacity``) and the
``goodput`` objective (``msopt.evaluate.objective``) all judge metrics by :func:`slo_checks`.

SLOs are written as one string, the way other tuners write them (``--slo`` and ``[slo]``):
``"ttft:p99<500ms,tpot:p95<50ms,success>=0.99"``, read by :func:`parse_slo`. Each term is
``METRIC[:STATISTIC] OP VALUE[UNIT]``: ``ttft`` and ``tpot`` with ``mean`` (the default), ``p50``,
``p90``, ``p95`` or ``p99`` and a time in ``ms`` or ``s`` (a bare number is seconds), held at most
(``<`` or ``<=``: msopt's checks include the limit); ``success`` with a fraction (``0.99``) or a
percentage (``99%``), held at least (``>`` or ``>=``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from msopt.errors import ConfigError
from msopt.metrics import SUCCESS_RATE, TIME_PER_OUTPUT_TOKEN, TIME_TO_FIRST_TOKEN

__all__ = ["BROKEN", "MET", "SLO_METRICS", "STATISTICS", "SloCheck", "SloTerm", "Slos", "parse_slo",
           "parse_slo_table", "slo_checks", "slo_metric", "slo_table_text"]

MET = "✓"
BROKEN = "✗"


def _seconds(v: float) -> str:
    return f"{v:.3g} s" if v >= 1 else f"{v * 1000:.3g} ms"


def _percent(v: float) -> str:
    return f"{v * 100:.4g} %"


@dataclass(frozen=True)
class Slos:
    """The limits: ``ttft_slo`` and ``tpot_slo`` (seconds, upper), ``success_rate_slo`` (lower), and
    the statistic each time limit holds (``ttft_metric``/``tpot_metric``: the means unless ``[slo]``
    names a percentile, then ``ttft_p99``, ...)."""

    ttft: float
    tpot: float
    success_rate: float
    ttft_metric: str = TIME_TO_FIRST_TOKEN
    tpot_metric: str = TIME_PER_OUTPUT_TOKEN


#: The metrics an SLO term may name, and the key of ``[slo]`` each is written under.
SLO_METRICS = ("ttft", "tpot", "success")
#: The statistics of ``ttft`` and ``tpot``: the mean and the percentiles.
STATISTICS = ("mean", "p50", "p90", "p95", "p99")
#: Metrics other tools judge that msopt does not measure, and what to use instead.
_UNMEASURED = {"itl": "tpot (time per output token, what msopt measures between tokens)",
               "e2el": "ttft and tpot", "e2e": "ttft and tpot", "latency": "ttft and tpot",
               "throughput": "the objective (generate_speed_target), not an SLO"}
_TERM = re.compile(r"^\s*(?P<metric>[A-Za-z_]+)\s*(?::\s*(?P<stat>[A-Za-z0-9_]+)\s*)?"
                   r"(?P<op><=|>=|<|>|=)\s*(?P<num>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>[A-Za-z%]*)\s*$")


@dataclass(frozen=True)
class SloTerm:
    """One SLO term, normalised.

    Attributes:
        metric: "ttft", "tpot" or "success".
        statistic: "mean", "p50", "p90", "p95" or "p99" ("mean" for success).
        limit: seconds for ttft/tpot, a fraction in (0, 1] for success.
    """

    metric: str
    statistic: str
    limit: float

    @property
    def column(self) -> str:
        """The metric's column name: ``time_to_first_token`` (mean), ``ttft_p99``, ``success_rate``."""
        return slo_metric(self.metric, self.statistic)

    def text(self) -> str:
        """The term as ``[slo]`` holds it: ``"p99<=0.5s"``, ``">=0.99"``."""
        if self.metric == "success":
            return f">={self.limit:g}"
        return f"{self.statistic}<={self.limit:g}s"


def slo_metric(metric: str, statistic: str) -> str:
    """The column a term is checked against: the mean's own name, else ``ttft_p99`` and so on."""
    if metric == "success":
        return SUCCESS_RATE
    if statistic == "mean":
        return TIME_TO_FIRST_TOKEN if metric == "ttft" else TIME_PER_OUTPUT_TOKEN
    return f"{metric}_{statistic}"


_EXAMPLE = 'e.g. "ttft:p99<500ms,tpot:p95<50ms,success>=0.99"'


def _term(text: str, where: str) -> SloTerm:
    m = _TERM.match(text)
    if not m:
        raise ConfigError(f"{where}: SLO term {text.strip()!r} is not METRIC[:STATISTIC]<VALUE; {_EXAMPLE}")
    metric, stat, op = m["metric"].lower(), (m["stat"] or "").lower(), m["op"]
    num, unit = float(m["num"]), m["unit"].lower()
    if metric in ("success_rate", "success-rate"):
        metric = "success"
    if metric not in SLO_METRICS:
        instead = _UNMEASURED.get(metric)
        fix = f"use {instead}" if instead else f"use one of {', '.join(SLO_METRICS)}"
        raise ConfigError(f"{where}: SLO metric {m['metric']!r} is not one msopt measures; {fix}")
    if metric == "success":
        if stat:
            raise ConfigError(f"{where}: SLO term {text.strip()!r}: success takes no statistic; "
                              "write success>=0.99")
        if op not in (">", ">="):
            raise ConfigError(f"{where}: SLO term {text.strip()!r}: success is a floor; write success>=0.99")
        if unit not in ("", "%"):
            raise ConfigError(f"{where}: SLO term {text.strip()!r}: unit {m['unit']!r}; success is a fraction "
                              "(0.99) or a percentage (99%)")
        limit = num / 100 if unit == "%" else num
        if not 0 < limit <= 1:
            raise ConfigError(f"{where}: SLO term {text.strip()!r}: success must be in (0, 1] (or 0-100%)")
        return SloTerm("success", "mean", limit)
    stat = stat or "mean"
    if stat == "avg" or stat == "average":
        stat = "mean"
    if stat not in STATISTICS:
        raise ConfigError(f"{where}: SLO term {text.strip()!r}: statistic {stat!r} is not one of "
                          f"{', '.join(STATISTICS)}")
    if op not in ("<", "<="):
        raise ConfigError(f"{where}: SLO term {text.strip()!r}: {metric} is a ceiling; write {metric}:{stat}<VALUE")
    if unit not in ("ms", "s", ""):
        raise ConfigError(f"{where}: SLO term {text.strip()!r}: unit {m['unit']!r} is not ms or s")
    limit = num / 1000 if unit == "ms" else num
    if not 0 < limit <= 1e6:
        raise ConfigError(f"{where}: SLO term {text.strip()!r}: the limit must be a positive time up to 1e6 s")
    return SloTerm(metric, stat, limit)


def parse_slo(text: str, where: str = "--slo") -> dict[str, SloTerm]:
    """Read an SLO string, ``"ttft:p99<500ms,tpot:p95<50ms,success>=0.99"`` (see the module docstring).

    Args:
        text: comma-separated terms (``;`` accepted too), each metric at most once.
        where: what to name in messages (``--slo``, a file and its ``[slo]`` key).

    Returns:
        metric ("ttft", "tpot", "success") -> its term, in the order written.

    Raises:
        ConfigError: one line naming the term and the fix.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{where}: an SLO string is needed, {_EXAMPLE}")
    out: dict[str, SloTerm] = {}
    for part in re.split(r"[,;]", text):
        if not part.strip():
            raise ConfigError(f"{where}: empty SLO term in {text!r}; separate terms with one comma, {_EXAMPLE}")
        term = _term(part, where)
        if term.metric in out:
            raise ConfigError(f"{where}: SLO metric {term.metric!r} is given twice in {text!r}; keep one")
        out[term.metric] = term
    return out


def parse_slo_table(table: Mapping[str, Any], where: str) -> dict[str, SloTerm]:
    """Read ``[slo]``: each key a metric, each value the rest of its term (``ttft = "p99<500ms"``,
    ``success = ">=0.99"``), or ``spec = "ttft:p99<500ms,..."`` for the whole string.

    Raises:
        ConfigError: one line naming ``where``, the key and the fix.
    """
    out: dict[str, SloTerm] = {}
    for key, value in table.items():
        if key == "spec":
            if not isinstance(value, str):
                raise ConfigError(f"{where}: [slo] 'spec' must be a string, {_EXAMPLE}")
            for metric, term in parse_slo(value, f"{where}: [slo] spec").items():
                if metric in out:
                    raise ConfigError(f"{where}: [slo] names {metric!r} twice (spec and its own key); keep one")
                out[metric] = term
            continue
        if key not in SLO_METRICS:
            instead = _UNMEASURED.get(str(key).lower())
            fix = f"use {instead}" if instead else f"valid keys: {', '.join(SLO_METRICS)}, spec"
            raise ConfigError(f"{where}: unknown key {key!r} in [slo]; {fix}")
        if not isinstance(value, str):
            example = '">=0.99"' if key == "success" else '"p99<500ms"'
            raise ConfigError(f"{where}: [slo] {key!r} must be a string such as {example}, got {value!r}")
        if key in out:
            raise ConfigError(f"{where}: [slo] names {key!r} twice (spec and its own key); keep one")
        rest = value.strip()
        sep = "" if rest[:1] in "<>=" else ":"
        term = _term(f"{key}{sep}{rest}", f"{where}: [slo] {key}")
        out[key] = term
    return out


def slo_table_text(terms: Mapping[str, SloTerm]) -> dict[str, str]:
    """``[slo]`` as a table of strings, one key per metric (what ``--slo`` writes into a config)."""
    return {metric: term.text() for metric, term in terms.items()}


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


def _label(name: str, metric: str) -> str:
    stat = metric.rpartition("_")[2]
    return f"{name} {stat}" if re.fullmatch(r"p\d+", stat) else name


def slo_checks(slos: Slos, metrics: Mapping[str, Any], *, ttft: str | None = None,
               tpot: str | None = None) -> list[SloCheck]:
    """The SLOs against ``metrics``, TTFT, TPOT, success rate in that order; ``ttft``/``tpot`` name
    the statistic held to the limits (default the SLOs' own, ``slos.ttft_metric``: the means unless
    ``[slo]`` names a percentile; capacity's ``percentile``: ``ttft_p99``)."""
    ttft = ttft or slos.ttft_metric
    tpot = tpot or slos.tpot_metric
    return [
        SloCheck(_label("TTFT", ttft), ttft, _number(metrics, ttft), slos.ttft, True),
        SloCheck(_label("TPOT", tpot), tpot, _number(metrics, tpot), slos.tpot, True),
        SloCheck("success rate", SUCCESS_RATE, _number(metrics, SUCCESS_RATE), slos.success_rate, False),
    ]
