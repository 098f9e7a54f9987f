"""Capacity search: the highest load each top configuration sustains within the SLOs.

After the swarm and the top-k re-measurement, each top configuration is probed at increasing
loads (request rate or concurrency): bracket from the configuration's own load (double until a
probe fails, or halve until one passes), then bisect to ``[capacity] tolerance``. A probe passes
when TTFT and TPOT (mean, or ``percentile``) are within ``ttft_slo``/``tpot_slo`` and the success
rate reaches ``success_rate_slo``. The load found is probed ``repeats`` times in all; a load that
failed any probe is never reported.

On a request trace (``[workload] trace``) the load is the request rate, and a probe at rate R
replays the trace with its send times rescaled to mean rate R (:mod:`msopt.workload.replay`): the
search finds the largest time scale at which the SLOs hold, reported in req/s and as a multiple of
the trace's own rate (``trace_multiple``). With ``target_rate`` (req/s, or ``"3x"``: three times
the trace's rate) each configuration's result says how many replicas, and devices, serve the target
(:func:`sizing`), and the record names the one that needs the fewest devices.

This module holds the options, the pass test and the per-configuration search as a small
state machine (:class:`CapacitySearch`); the driver runs the searches of all configurations
through its pool (:class:`msopt.run.capacity_stage.Capacity`: in rounds, or server key by server key with fewer
workers than keys), with eval ids that do not depend on timing, so resume is deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from msopt.benchmarks import BENCHMARKS, BenchmarkAdapter
from msopt.benchmarks.base import LOAD_KEYS
from msopt.checks import is_finite
from msopt.config import Config
from msopt.config.keys import SECTION_TABLES, checked, percentile
from msopt.errors import ConfigError
from msopt.evaluate.workload import configured_load, resolved_workload
from msopt.slo import Slos, slo_checks
from msopt.space import SearchSpace
from msopt.workload.resolved import ResolvedWorkload

#: The keys of ``[capacity]``, each declared once (rule, default, doc) in :mod:`msopt.config.keys`.
_DECLARED = SECTION_TABLES["capacity"]
CAPACITY_KEYS = tuple(_DECLARED)


def _load_fields(config: Config) -> dict[str, str]:
    """load kind -> name of the field that sets it (the benchmark's ``load_field_keys``, env fields)."""
    name = config.run.benchmark
    keys = (BENCHMARKS.get(name) if name in BENCHMARKS else BenchmarkAdapter).load_field_keys
    out: dict[str, str] = {}
    for f in config.engine.fields:
        kind = keys.get(f.name)
        if kind is not None and str(f.config_position).lower() == "env":
            out[kind] = f.name
    return out


def _varied_load_fields(config: Config) -> list[str]:
    dims = set(SearchSpace(config.engine.fields).names)
    return [name for name in _load_fields(config).values() if name in dims]


@dataclass(frozen=True)
class CapacityOptions:
    """``[capacity]``, validated.

    Attributes:
        enabled: whether the stage runs.
        percentile: None for the mean TTFT/TPOT, else 50, 90 or 99 (``ttft_pNN``/``tpot_pNN``).
        tolerance: relative precision of the load found.
        max_probes: evaluations per configuration, repeats included.
        repeats: probes of the reported load, all of which must pass.
        load: "request_rate" or "concurrency": the load that is varied.
        field: the configuration field that sets that load (the benchmark's ``load_field_keys``), or None.
        start_load: the load to start from when a configuration has none of its own.
        min_load: the lowest load probed; failing there means zero capacity.
        max_load: the highest load probed (None: no cap but ``max_probes``).
        trace_rate: the trace window's own mean rate (req/s at time scale 1), None without a trace.
        target_rate: the rate to size a deployment for (req/s), or None.
        target_multiple: ``target_rate`` as written in multiples of the trace's rate (``"3x"``), or None.
    """

    enabled: bool
    percentile: int | None = None
    tolerance: float = 0.05
    max_probes: int = 12
    repeats: int = 1
    load: str = "request_rate"
    field: str | None = None
    start_load: float | None = None
    min_load: float | None = None
    max_load: float | None = None
    trace_rate: float | None = None
    target_rate: float | None = None
    target_multiple: float | None = None

    @property
    def integer(self) -> bool:
        """Concurrency is a whole number of requests."""
        return self.load == "concurrency"

    def metric_names(self) -> tuple[str, str]:
        """The TTFT and TPOT metrics compared with the SLOs."""
        if self.percentile is None:
            return "time_to_first_token", "time_per_output_token"
        return f"ttft_p{self.percentile}", f"tpot_p{self.percentile}"

    def judged(self, slos: Slos) -> tuple[str, str]:
        """The TTFT and TPOT metrics a probe is held to: ``percentile``'s, or for "mean" (the
        default) what the SLOs hold, the statistic ``[slo]`` names (else the means)."""
        return self.metric_names() if self.percentile is not None else (slos.ttft_metric, slos.tpot_metric)

    def start_for(self, values: Mapping[str, Any]) -> float:
        """The load a configuration starts from: its own field's value, else ``start_load``."""
        v = values.get(self.field) if self.field else None
        start = float(v) if is_finite(v) and v > 0 else self.start_load
        if start is None:  # checked by capacity_options; kept for direct callers
            raise ConfigError(f"[capacity] start_load is needed: no configured {self.load} to start from")
        if self.integer:
            start = float(max(1, round(start)))
        lo = self.floor(start)
        start = max(start, lo)
        return min(start, self.max_load) if self.max_load is not None else start

    def floor(self, start: float) -> float:
        """The lowest load probed for a configuration starting at ``start``."""
        if self.min_load is not None:
            return self.min_load
        return 1.0 if self.integer else start / 64.0


def capacity_options(config: Config, resolved: ResolvedWorkload | None = None) -> CapacityOptions:
    """Read and validate ``[capacity]`` once per run (each key as :mod:`msopt.config.keys` declares it); raise
    ConfigError naming the file, the key and the fix. ``resolved``: the run's workload, whose trace's own rate a
    ``target_rate`` of ``"3x"`` multiplies (None: resolved here, a trace read).

    Default: enabled when the configuration varies a field the benchmark reads as its load
    (its adapter's ``load_field_keys``: the original tool's load fields, ``config_position =
    "env"``), else off.
    """
    section = config.capacity
    unknown = sorted(set(section.table) - set(CAPACITY_KEYS))
    if unknown:
        raise ConfigError(f"{section.where()}: [capacity] unknown key(s) {unknown}; "
                          f"valid keys: {', '.join(CAPACITY_KEYS)}")

    def where(key: str) -> str:
        return f"{section.where(key)}: [capacity] {key}"

    def value(key: str, default: Any = None) -> Any:
        """The key's value, checked as declared (None where neither set nor defaulted)."""
        v = section.table.get(key, default)
        return None if v is None else checked(section.where(key), "capacity", key, v, _DECLARED[key])

    resolved = resolved if resolved is not None else resolved_workload(config)
    trace_rate = resolved.trace_rate
    target, multiple = _target(section.table.get("target_rate"), trace_rate, where("target_rate"))
    enabled = value("enabled")
    if enabled is None:
        enabled = bool(_varied_load_fields(config)) or target is not None
    if target is not None and not enabled:
        raise ConfigError(f"{where('target_rate')} sizes the deployment from the capacity stage's result, which "
                          "enabled = false turns off; remove one of them")
    pct, tolerance = percentile(value("percentile", "mean")), float(value("tolerance", 0.05))
    probes = value("max_probes", 12)
    repeats = value("repeats", 1 if config.run.simulate else 2)
    if repeats > probes:
        raise ConfigError(f"{where('repeats')} = {repeats} exceeds max_probes = {probes}; "
                          "raise max_probes or lower repeats")
    fields, workload = _load_fields(config), configured_load(config, resolved)
    load = _load(value("load", "auto"), fields, _varied_load_fields(config), workload)
    if target is not None and load != "request_rate":
        raise ConfigError(f"{where('target_rate')} is a request rate, and the capacity search varies {load}; "
                          "set [capacity] load = \"request_rate\"")
    own = workload.get(load)
    start = value("start_load", own if is_finite(own) and own > 0 else None)
    min_load, max_load = value("min_load"), value("max_load")
    if min_load is not None and max_load is not None and min_load > max_load:
        raise ConfigError(f"{where('min_load')} = {min_load} exceeds max_load = {max_load}")
    if enabled and start is None and load not in fields:
        raise ConfigError(f"{where('start_load')} is needed: the configuration sets no {load} to start "
                          f"the capacity search from; e.g. start_load = 8")
    return CapacityOptions(enabled=enabled, percentile=pct, tolerance=tolerance,
                           max_probes=probes, repeats=repeats, load=load, field=fields.get(load),
                           start_load=_float(start), min_load=_float(min_load), max_load=_float(max_load),
                           trace_rate=trace_rate, target_rate=target, target_multiple=multiple)


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _load(load: str, fields: Mapping[str, str], varied: Sequence[str], workload: Mapping[str, Any]) -> str:
    """The load the search varies: ``[capacity] load``, or for "auto" the varied load field's, else any load
    field's, else the request rate of an open-loop workload, else the concurrency."""
    if load != "auto":
        return load
    if fields:
        by_var = [k for k in LOAD_KEYS if fields.get(k) in varied]
        return (by_var or [k for k in LOAD_KEYS if k in fields])[0]
    return "request_rate" if "request_rate" in workload else "concurrency"


def _target(value: Any, trace_rate: float | None, where: str) -> tuple[float | None, float | None]:
    """(req/s, multiple of the trace's rate as written) of ``[capacity] target_rate``."""
    if value is None:
        return None, None
    if is_finite(value) and value > 0:
        return float(value), None
    text = value.strip().lower() if isinstance(value, str) else ""
    if text.endswith("x"):
        try:
            multiple = float(text[:-1])
        except ValueError:
            multiple = math.nan
        if math.isfinite(multiple) and multiple > 0:
            if trace_rate is None:
                raise ConfigError(f"{where} = {value!r} is a multiple of the trace's rate, and [workload] has no "
                                  "trace with a rate; give requests/s, e.g. target_rate = 20")
            return multiple * trace_rate, multiple
    raise ConfigError(f"{where} must be requests/s above 0 or a multiple of the trace's rate such as \"3x\", "
                      f"got {value!r}")


def sizing(result: Mapping[str, Any], options: CapacityOptions, devices_per_replica: int) -> dict[str, Any]:
    """What one configuration's capacity means for the trace and the target: ``trace_multiple`` (its
    sustainable rate over the trace's own: the largest time scale within the SLOs), and for a
    ``target_rate`` the ``replicas`` (each serving at most its sustainable rate) and ``devices``
    (replicas x the devices one trial holds) that serve it; None where it sustains nothing."""
    out: dict[str, Any] = {}
    load = result.get("sustainable_load") or 0.0
    if options.load != "request_rate":
        return out
    if options.trace_rate:
        out["trace_multiple"] = load / options.trace_rate
    if options.target_rate is not None:
        replicas = math.ceil(options.target_rate / load - 1e-9) if load > 0 else None
        out["target_rate"] = options.target_rate
        if options.target_multiple is not None:
            out["target_multiple"] = options.target_multiple
        out["replicas"] = replicas
        out["devices"] = replicas * devices_per_replica if replicas is not None else None
    return out


def sizing_pick(configs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The configuration that serves the target with the fewest devices (then the most capacity,
    then the better rank), or None when none can."""
    able = [c for c in configs if c.get("devices") is not None]
    if not able:
        return None
    return min(able, key=lambda c: (c["devices"], -(c.get("sustainable_load") or 0.0), c.get("rank", 0)))


def check_capacity_metrics(options: CapacityOptions, produced: Sequence[str], source: str,
                           where: str = "<config>") -> None:
    """A percentile needs ``ttft_pNN``/``tpot_pNN`` from the benchmark: refuse before running (``where``: the
    file that set ``[capacity] percentile``)."""
    if not options.enabled or options.percentile is None:
        return
    missing = [m for m in options.metric_names() if m not in produced]
    if missing:
        raise ConfigError(f"{where}: [capacity] percentile = {options.percentile} needs {', '.join(missing)}, which "
                          f"{source} does not report; use percentile = \"mean\"")


def probe_verdict(metrics: Mapping[str, Any], error: str | None, slos: Slos,
                  options: CapacityOptions) -> tuple[bool, str | None]:
    """(passed, why not) of one probe's metrics against the SLOs."""
    ttft_name, tpot_name = options.judged(slos)
    checks = slo_checks(slos, metrics, ttft=ttft_name, tpot=tpot_name)
    if not all(is_finite(c.value) for c in checks):
        return False, error or "a metric is missing"
    broken = next((c for c in checks if not c.met), None)
    return (True, None) if broken is None else (False, broken.reason())


@dataclass
class Probe:
    """One capacity evaluation, as the search saw it."""

    eval_id: int
    load: float
    passed: bool
    reason: str | None
    metrics: dict[str, Any] = field(default_factory=dict)


class CapacitySearch:
    """Bracket-then-bisect for one configuration, as a state machine.

    :meth:`next_loads` gives the loads to probe now (one, or the remaining repeats of the load
    found, which may run together); :meth:`tell` gives back the probes' results in that order.
    The search is over when :meth:`next_loads` returns an empty list.
    """

    def __init__(self, options: CapacityOptions, start: float) -> None:
        self.o = options
        self.start = start
        self.floor = min(options.floor(start), start)
        self.cap = options.max_load
        self.probes: list[Probe] = []
        self.passes: dict[float, int] = {}
        self.failed: set[float] = set()
        self.lo: float | None = None   # highest load that passed (never failed)
        self.hi: float | None = None   # lowest load that failed
        self.limited_by: str | None = None
        self._pending: list[float] | None = None

    # -- helpers --------------------------------------------------------------------------
    @property
    def used(self) -> int:
        return len(self.probes)

    def _round(self, x: float) -> float:
        return float(max(1, round(x))) if self.o.integer else float(x)

    def _converged(self) -> bool:
        assert self.lo is not None and self.hi is not None
        gap = self.hi - self.lo
        return gap <= self.o.tolerance * self.lo or (self.o.integer and gap <= 1)

    def _best_passing_below(self, limit: float) -> float | None:
        ok = [x for x, n in self.passes.items() if n > 0 and x not in self.failed and x < limit]
        return max(ok) if ok else None

    def _search_room(self) -> bool:
        # a new probe that passes must leave room to repeat it
        return self.used + 1 + (self.o.repeats - 1) <= self.o.max_probes

    # -- protocol -------------------------------------------------------------------------
    def next_loads(self) -> list[float]:
        """The loads to probe now; empty when the search is over."""
        if self._pending is None:
            self._pending = self._plan()
        return list(self._pending)

    def _plan(self) -> list[float]:
        lo, hi = self.lo, self.hi
        if lo is None and hi is None:
            return [self.start] if self._search_room() else self._stop("probes")
        if lo is None:  # only failures so far: go down
            assert hi is not None
            if hi <= self.floor:
                return self._stop("floor")
            x = self._round(max(self.floor, hi / 2))
            if x >= hi:
                return self._stop("floor")
            return [x] if self._search_room() else self._stop("probes")
        if hi is None:  # only passes: go up
            if self.cap is not None and lo >= self.cap:
                return self._verify("cap")
            x = self._round(lo * 2 if not self.o.integer else max(lo + 1, lo * 2))
            if self.cap is not None:
                x = min(x, self.cap)
            return [x] if self._search_room() else self._verify("probes")
        if not self._converged():
            x = self._round((lo + hi) / 2)
            if lo < x < hi:
                return [x] if self._search_room() else self._verify("probes")
        return self._verify("slo")

    def _verify(self, why: str) -> list[float]:
        assert self.lo is not None
        need = self.o.repeats - self.passes.get(self.lo, 0)
        if need <= 0:
            return self._stop(why)
        if self.used + need > self.o.max_probes:
            return self._stop("probes")
        self.limited_by = why
        return [self.lo] * need

    def _stop(self, why: str) -> list[float]:
        self.limited_by = why
        return []

    def tell(self, probes: Sequence[Probe]) -> None:
        """The results of the probes :meth:`next_loads` asked for, in order."""
        asked = self._pending or []
        if [p.load for p in probes] != asked:
            raise ValueError(f"capacity search asked for {asked}, got {[p.load for p in probes]}")
        self._pending = None
        for p in probes:
            self.probes.append(p)
            if p.passed:
                self.passes[p.load] = self.passes.get(p.load, 0) + 1
            else:
                self.failed.add(p.load)
        self.hi = min(self.failed) if self.failed else None
        self.lo = self._best_passing_below(self.hi if self.hi is not None else math.inf)

    @property
    def done(self) -> bool:
        return not self.next_loads()

    def result(self) -> dict[str, Any]:
        """The sustainable load (0 when none passed), its goodput and the metrics at the edge."""
        lo = self.lo if self.lo is not None and self.lo not in self.failed else None
        at = [p for p in self.probes if lo is not None and p.load == lo and p.passed]
        edge = min(at, key=lambda p: (p.metrics.get("generate_speed") or 0.0, p.eval_id)) if at else None
        above = [p for p in self.probes if not p.passed and (lo is None or p.load > lo)]
        nxt = min(above, key=lambda p: (p.load, p.eval_id)) if above else None
        return {
            "load": self.o.load,
            "start_load": self.start,
            "sustainable_load": lo if lo is not None else 0.0,
            "goodput": (edge.metrics.get("generate_speed") or 0.0) if edge is not None else 0.0,
            "edge_eval_id": edge.eval_id if edge is not None else None,
            "edge_metrics": dict(edge.metrics) if edge is not None else {},
            "verified": edge is not None and len(at) >= self.o.repeats,
            "failed_load": nxt.load if nxt is not None else None,
            "failed_reason": nxt.reason if nxt is not None else None,
            "limited_by": self.limited_by,
            "probes": [{"eval_id": p.eval_id, "load": p.load, "passed": p.passed, "reason": p.reason}
                       for p in self.probes],
        }
