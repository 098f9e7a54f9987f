"""Fitness from benchmark metrics; lower is better, ``inf`` marks a failed evaluation.

Metric names used across msopt (one benchmark may produce a subset):

* ``generate_speed``: output tokens per second
* ``time_to_first_token``: seconds (TTFT)
* ``time_per_output_token``: seconds (TPOT)
* ``success_rate``: fraction of successful requests, 0..1
* ``throughput``: requests per second

Each objective declares the metrics it needs, so :func:`check_metrics_available` can reject a
benchmark that cannot produce them before the first server starts.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, fields
from typing import Any, cast

from msopt.config import Config
from msopt.errors import ConfigError
from msopt.metrics import (
    GENERATE_SPEED,
    METRICS,
    SUCCESS_RATE,
    THROUGHPUT,
    TIME_PER_OUTPUT_TOKEN,
    TIME_TO_FIRST_TOKEN,
)
from msopt.registry import Registry
from msopt.slo import Slos, parse_slo_table, slo_checks

__all__ = [
    "GENERATE_SPEED",
    "METRIC_NAMES",
    "MAX_FINITE_FITNESS",
    "OBJECTIVES",
    "SUCCESS_RATE",
    "THROUGHPUT",
    "TIME_PER_OUTPUT_TOKEN",
    "TIME_TO_FIRST_TOKEN",
    "DefaultObjective",
    "GoodputObjective",
    "Metrics",
    "Objective",
    "ObjectiveSettings",
    "check_metrics_available",
    "make_objective",
    "run_objective",
]

METRIC_NAMES: tuple[str, ...] = METRICS

Metrics = Mapping[str, float | None]
"""Metric name -> value; None (or NaN) when the benchmark could not measure it."""

_TERM_CAP = 1e299
MAX_FINITE_FITNESS = 1e300
"""Upper bound of any fitness computed from finite measurements.

Every term of a formula is capped at 1e299 (an ``exp`` argument at ln 1e299 ≈ 688.5), so a
terrible but real measurement gets a large finite fitness that still sorts below ``inf``,
which is reserved for failed evaluations. Nothing overflows or raises.
"""
_EXP_CAP = math.log(_TERM_CAP)


def _metric(metrics: Metrics, name: str) -> float | None:
    """Return the metric as a float, or None when missing, None, NaN or not a number."""
    value = metrics.get(name)
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _capped_exp(x: float) -> float:
    return math.exp(min(x, _EXP_CAP))


def _capped(x: float) -> float:
    return min(x, _TERM_CAP)


@dataclass(frozen=True)
class ObjectiveSettings:
    """The scalars objectives read, validated.

    Attributes:
        generate_speed_target: output tokens/s the ``default`` objective aims at (> 0); only
            ``default`` needs it.
        ttft_slo: TTFT limit in seconds (> 0).
        tpot_slo: TPOT limit in seconds (> 0).
        success_rate_slo: lowest acceptable success rate, in (0, 1].
        ttft_penalty: exponent scale of the TTFT term (>= 0; 0 switches the constraint off).
        tpot_penalty: exponent scale of the TPOT term (>= 0).
        success_rate_penalty: exponent scale of the success-rate term (>= 0).
        ttft_metric, tpot_metric: the statistic each time SLO holds (``[slo]``): the means
            (``time_to_first_token``, ``time_per_output_token``) or a percentile (``ttft_p99``).
    """

    ttft_slo: float
    tpot_slo: float
    generate_speed_target: float | None = None
    success_rate_slo: float = 1.0
    ttft_penalty: float = 1.0
    tpot_penalty: float = 1.0
    success_rate_penalty: float = 5.0
    ttft_metric: str = TIME_TO_FIRST_TOKEN
    tpot_metric: str = TIME_PER_OUTPUT_TOKEN

    def __post_init__(self) -> None:
        rules: dict[str, tuple[str, Callable[[float], bool]]] = {
            "ttft_slo": ("> 0", lambda v: v > 0),
            "tpot_slo": ("> 0", lambda v: v > 0),
            "generate_speed_target": ("> 0", lambda v: v > 0),
            "success_rate_slo": ("in (0, 1]", lambda v: 0 < v <= 1),
            "ttft_penalty": (">= 0", lambda v: v >= 0),
            "tpot_penalty": (">= 0", lambda v: v >= 0),
            "success_rate_penalty": (">= 0", lambda v: v >= 0),
        }
        for key in ("ttft_metric", "tpot_metric"):
            if not isinstance(getattr(self, key), str) or not getattr(self, key):
                raise ConfigError(f"{key} must be a metric name, got {getattr(self, key)!r}")
        for key, (rule, ok) in rules.items():
            value = getattr(self, key)
            if value is None and key == "generate_speed_target":
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or not ok(value)
            ):
                raise ConfigError(f"{key} must be a number {rule}, got {value!r}")
            object.__setattr__(self, key, float(value))

    @property
    def slos(self) -> Slos:
        """The three SLOs, as :func:`msopt.slo.slo_checks` takes them."""
        return Slos(self.ttft_slo, self.tpot_slo, self.success_rate_slo, self.ttft_metric, self.tpot_metric)

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> ObjectiveSettings:
        """Read the settings' own keys from ``settings``; other keys are left to their owners.

        Raises:
            ConfigError: a required key (``ttft_slo``, ``tpot_slo``) is missing or a value breaks
                its rule; the message names the key.
        """
        names = [f.name for f in fields(cls)]
        for required in ("ttft_slo", "tpot_slo"):
            if required not in settings:
                raise ConfigError(f"{required} is required by the objective but not set")
        kwargs = {k: settings[k] for k in names if k in settings}
        table = settings.get("slo")
        if isinstance(table, Mapping):  # [slo] names the statistic (its limits are ttft_slo, ... already)
            terms = parse_slo_table(table, "[slo]")
            for metric in ("ttft", "tpot"):
                if metric in terms:
                    kwargs[f"{metric}_metric"] = terms[metric].column
        return cls(**kwargs)


class Objective(ABC):
    """A fitness function over metrics: lower is better, ``inf`` for a failed evaluation.

    Attributes:
        name: the registered name.
        required_metrics: the metrics ``__call__`` reads.
    """

    name: str = ""
    required_metrics: frozenset[str] = frozenset()

    def __init__(self, settings: ObjectiveSettings) -> None:
        self.settings = settings
        # the SLOs' statistics stand in for the means a formula names (``[slo] ttft = "p99<..."``)
        swap = {TIME_TO_FIRST_TOKEN: settings.ttft_metric, TIME_PER_OUTPUT_TOKEN: settings.tpot_metric}
        self.required_metrics = frozenset(swap.get(m, m) for m in type(self).required_metrics)

    @abstractmethod
    def __call__(self, metrics: Metrics) -> float:
        """Return the fitness of ``metrics``."""


OBJECTIVES: Registry[Callable[[ObjectiveSettings], Objective]] = Registry(
    "objective", "msopt.objectives"
)


@OBJECTIVES.register("default")
class DefaultObjective(Objective):
    """The original tool's weighted fitness.

    ``0.4 · target / speed
    + 0.2 · exp(ttft_penalty · (TTFT / ttft_slo − 1))
    + 0.3 · exp(tpot_penalty · (TPOT / tpot_slo − 1))
    + 0.1 · exp(success_rate_penalty · (success_rate_slo / success_rate − 1))``

    TTFT and TPOT are the statistics the SLOs hold (``[slo]``: the means unless a percentile is named).
    At exactly the target and the SLOs the fitness is 1.0. ``inf`` when ``generate_speed`` or
    ``success_rate`` is missing, NaN or <= 0, or when TTFT / TPOT is missing, NaN or negative
    while its penalty is > 0. A penalty of 0 makes its term exactly its weight (the metric is
    then not read). Each term is capped at 1e299 (see :data:`MAX_FINITE_FITNESS`).
    """

    name = "default"
    required_metrics = frozenset(
        {GENERATE_SPEED, TIME_TO_FIRST_TOKEN, TIME_PER_OUTPUT_TOKEN, SUCCESS_RATE}
    )

    def __init__(self, settings: ObjectiveSettings) -> None:
        if settings.generate_speed_target is None:
            raise ConfigError(
                "generate_speed_target is required by the 'default' objective but not set"
            )
        super().__init__(settings)

    def __call__(self, metrics: Metrics) -> float:  # noqa: D102
        s = self.settings
        speed = _metric(metrics, GENERATE_SPEED)
        success = _metric(metrics, SUCCESS_RATE)
        if speed is None or success is None or speed <= 0 or success <= 0:
            return math.inf
        total = 0.4 * _capped(cast(float, s.generate_speed_target) / speed)  # checked in __init__
        for weight, key, slo, penalty in (
            (0.2, s.ttft_metric, s.ttft_slo, s.ttft_penalty),
            (0.3, s.tpot_metric, s.tpot_slo, s.tpot_penalty),
        ):
            if penalty == 0:
                total += weight
                continue
            value = _metric(metrics, key)
            if value is None or value < 0:
                return math.inf
            total += weight * _capped_exp(penalty * (value / slo - 1.0))
        if s.success_rate_penalty == 0:
            total += 0.1
        else:
            total += 0.1 * _capped_exp(
                s.success_rate_penalty * (s.success_rate_slo / success - 1.0)
            )
        return total


@OBJECTIVES.register("goodput")
class GoodputObjective(Objective):
    """Maximise generate_speed within the SLOs; guide infeasible points back by distance.

    Feasible (``TTFT <= ttft_slo``, ``TPOT <= tpot_slo``, ``success_rate >= success_rate_slo``):
    ``fitness = −generate_speed`` (<= 0).

    Infeasible: ``fitness = 1 + V`` (> 0, so worse than every feasible point), with the total
    relative violation ``V = max(0, TTFT/ttft_slo − 1) + max(0, TPOT/tpot_slo − 1)
    + max(0, success_rate_slo/success_rate − 1)``, capped at 1e299; a point closer to
    feasibility is better. The penalties are not used.

    ``inf`` when any required metric is missing or NaN, ``generate_speed`` or ``success_rate``
    is <= 0, or TTFT / TPOT is negative.
    """

    name = "goodput"
    required_metrics = frozenset(
        {GENERATE_SPEED, TIME_TO_FIRST_TOKEN, TIME_PER_OUTPUT_TOKEN, SUCCESS_RATE}
    )

    def __call__(self, metrics: Metrics) -> float:  # noqa: D102
        s = self.settings
        speed = _metric(metrics, GENERATE_SPEED)
        ttft = _metric(metrics, s.ttft_metric)
        tpot = _metric(metrics, s.tpot_metric)
        success = _metric(metrics, SUCCESS_RATE)
        if speed is None or ttft is None or tpot is None or success is None:
            return math.inf
        if speed <= 0 or success <= 0 or ttft < 0 or tpot < 0:
            return math.inf
        checks = slo_checks(s.slos, {s.ttft_metric: ttft, s.tpot_metric: tpot, SUCCESS_RATE: success})
        violation = checks[0].violation + checks[1].violation + checks[2].violation
        if violation == 0.0:
            return -_capped(speed)
        return 1.0 + _capped(violation)


def make_objective(
    name: str, settings: Mapping[str, Any] | ObjectiveSettings
) -> Objective:
    """Build the objective registered as ``name`` from settings.

    Args:
        name: a name in :data:`OBJECTIVES` (``default``, ``goodput`` or a plugin's).
        settings: an :class:`ObjectiveSettings` or a mapping holding its keys (other keys are
            ignored, so the top-level settings table can be passed as is).

    Raises:
        ConfigError: unknown name (listing the valid ones) or invalid settings.
    """
    factory = OBJECTIVES.get(name)
    if not isinstance(settings, ObjectiveSettings):
        settings = ObjectiveSettings.from_mapping(settings)
    return factory(settings)


def run_objective(config: Config) -> Objective:
    """The run's objective: ``objective`` built from the top-level scalars and the statistic ``[slo]``
    names (``config.slo``), as validation builds it; the scalars alone would hold the means.

    Raises:
        ConfigError: unknown name (listing the valid ones) or invalid settings.
    """
    return make_objective(config.run.objective, {**config.scalars.table, "slo": config.slo.table})


def check_metrics_available(objective: Objective, produced: AbstractSet[str], benchmark_name: str) -> None:
    """Fail at start when ``benchmark_name`` cannot produce a metric ``objective`` needs.

    Raises:
        ConfigError: naming the missing metrics, the objective and the benchmark.
    """
    missing = sorted(set(objective.required_metrics) - set(produced))
    if missing:
        plural = "s" if len(missing) > 1 else ""
        raise ConfigError(
            f"objective {objective.name!r} needs metric{plural} {', '.join(missing)}, which "
            f"benchmark {benchmark_name!r} does not produce (it produces: "
            f"{', '.join(sorted(produced)) or 'nothing'}); choose another objective or benchmark"
        )

