"""The run's correction of a hardware entry to its own measured launches: two time scales (the serial
frontend's and an engine step's) on a lattice, judged on the launches the fit left out
(:func:`correct_hardware`; ``[search] correct``). The finer fit of every factor is
:func:`msopt.sim.calibrate.fit_hardware`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from msopt.errors import ConfigError
from msopt.sim.calibrate import (
    PROMPTS_PER_SLOT,
    Measurement,
    Simulations,
    _objective,
    mape,
    simulate_measurements,
)
from msopt.sim.catalog_load import load_model
from msopt.sim.catalog_types import Hardware, ModelSpec
from msopt.sim.workload import Workload

#: :func:`correct_hardware`'s multiplicative time scales: (name, the factors it multiplies, the factors it
#: divides (at most 1), its bounds in lattice steps). ``frontend``: the serial API server's costs (a
#: request's way in, its prompt, each streamed output token); ``engine``: an engine step's time (its fixed
#: and per-sequence overheads, and its roofline: compute and memory efficiency). Two, so that two to a
#: handful of launches pin them; a third (the streamed token's cost apart, or compute apart from the
#: rest of a step) predicted the held-out real CPU replays' tok/s no better and their fitted rows left
#: out worse (issue 52 item 9's closing note).
CORRECTION_GROUPS: tuple[tuple[str, tuple[str, ...], tuple[str, ...], tuple[int, int]], ...] = (
    ("frontend", ("api_overhead_ms", "frontend_ms_per_req", "frontend_us_per_token", "frontend_us_per_output_token"),
     (), (-20, 12)),
    ("engine", ("step_overhead_ms", "per_seq_overhead_us"), ("compute_eff", "memory_eff"), (-12, 12)),
)
CORRECTION_SCALES = tuple(name for name, *_ in CORRECTION_GROUPS)
#: the scales' search lattice: log2 steps of a quarter (x 1.19); the bounds above are 1/32 to 8 times the
#: entry's frontend costs and 1/8 to 8 times its engine step
_LATTICE = 0.25
#: the search's steps on the lattice, coarse to fine (x 4, x 2, x 1.41, x 1.19)
_STEPS = (8, 4, 2, 1)
#: a simulated run that fails where the measured one succeeded: its log error in each metric (x 20)
_REFUSED_LOG_ERROR = 3.0
#: rows from which :func:`correct_hardware` judges its fit on the rows it did not fit
LEAVE_ONE_OUT_FROM = 3


def scale_hardware(hw: Hardware, **scales: float) -> Hardware:
    """``hw`` with each of :data:`CORRECTION_GROUPS`' factors (and their ``[engines.<engine>]``
    overrides) times its group's scale, or divided by it (an efficiency, at most 1); a group not
    named keeps its factors.

    Raises:
        ValueError: a scale of no group.
    """
    unknown = set(scales) - set(CORRECTION_SCALES)
    if unknown:
        raise ValueError(f"no correction scale {sorted(unknown)}; the scales are {', '.join(CORRECTION_SCALES)}")
    kw: dict[str, Any] = {}
    over = {name: dict(table) for name, table in hw.engine_overrides.items()}
    for name, times, divided, _ in CORRECTION_GROUPS:
        k = float(scales.get(name, 1.0))
        kw.update({a: float(getattr(hw, a)) * k for a in times})
        kw.update({a: min(1.0, float(getattr(hw, a)) / k) for a in divided})
        for row in over.values():
            for a in times:
                if a in row:
                    row[a] = float(row[a]) * k
    return replace(hw, engine_overrides=over, **kw)


@dataclass(frozen=True)
class Correction:
    """What :func:`correct_hardware` found.

    Attributes:
        hardware: the corrected entry (:func:`scale_hardware` of the start at ``scales``).
        scales: the fitted time scale of each of :data:`CORRECTION_GROUPS`.
        rows: the measurements fitted.
        before: :func:`mape` of the start entry on every row.
        after: :func:`mape` of the correction as ``judged``: each row predicted by a fit on the
            others (leave-one-out, from :data:`LEAVE_ONE_OUT_FROM` rows), else in-sample.
        in_sample: :func:`mape` of ``hardware`` on every row (the rows it was fitted to).
        judged: "leave-one-out" or "in-sample".
        simulations: simulated runs spent.
        held_out_sim: (rows, 3) each row's (ttft_s, tpot_s, tokens/s) as the fit that did not see
            it predicts it (leave-one-out; None: in-sample).
    """

    hardware: Hardware
    scales: dict[str, float]
    rows: int
    before: dict[str, float]
    after: dict[str, float]
    in_sample: dict[str, float]
    judged: str
    simulations: int
    held_out_sim: np.ndarray | None = None

    @property
    def better(self) -> bool:
        """Whether the correction lowers the error (mean of the TTFT, TPOT and tok/s errors) on
        rows it did not fit (leave-one-out; in-sample below :data:`LEAVE_ONE_OUT_FROM` rows)."""
        moved = any(v != 1.0 for v in self.scales.values())
        return moved and _objective(self.after) < _objective(self.before) - 1e-9

    def errors(self) -> str:
        """``TTFT error 1,322% → 14%, TPOT error ..., tok/s error 46% → 6% (leave-one-out)``."""
        parts = [f"{label} error {_pct(self.before[k])} → {_pct(self.after[k])}"
                 for k, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("tokens_per_s", "tok/s"))]
        return f"{', '.join(parts)} ({self.judged})"

    def record(self) -> dict[str, Any]:
        """The correction as JSON (``prior.json``'s ``corrections``)."""
        def clean(err: Mapping[str, float]) -> dict[str, Any]:
            return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in err.items()}

        return {"rows": self.rows, "scales": dict(self.scales), "judged": self.judged, "better": self.better,
                "before": clean(self.before), "after": clean(self.after), "in_sample": clean(self.in_sample),
                "simulations": self.simulations}


def _pct(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:,.0%}"


def correct_hardware(
    measurements: Sequence[Measurement],
    hardware: Hardware,
    *,
    seed: int = 0,
    regularization: float = 0.01,
    prompts_per_slot: int = PROMPTS_PER_SLOT,
    models: Mapping[str, ModelSpec] | None = None,
    simulations: Simulations | None = None,
) -> Correction:
    """Correct ``hardware`` to measured runs with the time scales of :data:`CORRECTION_GROUPS`
    (:func:`scale_hardware`): few enough that two to a handful of runs can pin them, and judged on
    runs the fit did not see.

    The scales are searched on a lattice of quarter log2 steps (coarse to fine) for the least mean
    absolute log error of TTFT, TPOT and tok/s (a refused row counts ``ln 20`` per metric), plus
    ``regularization x sum(log2(scale)^2)``. From :data:`LEAVE_ONE_OUT_FROM` rows each row is
    also predicted by the fit of the others (the lattice's simulations are shared between these
    fits); :attr:`Correction.better` says whether that lowered the error.

    Args:
        measurements: measured runs on one hardware (any workload: fixed lengths or a trace replay).
        hardware: the entry to correct (a catalog entry, ``cpu-x86``).
        seed: the simulator seed (one for every row).
        regularization: the pull toward scales of 1.
        prompts_per_slot: requests per row, x concurrency, where a row does not give its count.
        models: model specs by :attr:`Measurement.model` (default: loaded by name).
        simulations: a memo of simulations to look up and add to (:func:`simulate_memo`).

    Raises:
        ConfigError: no measurements.
    """
    if not measurements:
        raise ConfigError("no measurements to correct the simulator with; give at least one measured run")
    n = len(measurements)
    specs = dict(models or {})
    for m in measurements:
        if m.model not in specs:
            specs[m.model] = load_model(m.model)
    # one Workload per row: a trace is read once, not once per simulation
    loads = [m.sim_workload(prompts_per_slot) for m in measurements]
    meas = np.array([m.measured() for m in measurements])
    lattice = _Lattice(measurements, hardware, specs, loads, seed, simulations)

    def loss(rows: np.ndarray, point: tuple[int, ...]) -> float:
        return _log_error(lattice.at(point)[rows], meas[rows]) + regularization * sum(
            (k * _LATTICE) ** 2 for k in point)

    origin = (0,) * len(CORRECTION_GROUPS)
    every = np.arange(n)
    fitted = _descend(partial(loss, every))
    before, in_sample = mape(measurements, lattice.at(origin)), mape(measurements, lattice.at(fitted))
    held: np.ndarray | None = None
    if n >= LEAVE_ONE_OUT_FROM:
        held = np.full((n, 3), np.nan)
        for k in range(n):
            held[k] = lattice.at(_descend(partial(loss, np.delete(every, k))))[k]
        after, judged = mape(measurements, held), "leave-one-out"
    else:
        after, judged = in_sample, "in-sample"
    return Correction(hardware=scale_hardware(hardware, **_scales(fitted)), scales=_scales(fitted), rows=n,
                      before=before, after=after, in_sample=in_sample, judged=judged,
                      simulations=len(lattice.table) * n, held_out_sim=held)


def _scales(point: tuple[int, ...]) -> dict[str, float]:
    """The time scale of each of :data:`CORRECTION_GROUPS` at a lattice point."""
    return {name: float(2.0 ** (k * _LATTICE)) for name, k in zip(CORRECTION_SCALES, point)}


@dataclass
class _Lattice:
    """Each row's simulated (ttft_s, tpot_s, tokens/s) at a lattice point (NaN where the simulated run
    failed), simulated once per point."""

    measurements: Sequence[Measurement]
    hardware: Hardware
    specs: Mapping[str, ModelSpec]
    loads: Sequence[Workload]
    seed: int
    simulations: Simulations | None
    table: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict)

    def at(self, point: tuple[int, ...]) -> np.ndarray:
        """The rows' simulated metrics at ``point``, shape (rows, 3)."""
        if point not in self.table:
            self.table[point] = simulate_measurements(
                self.measurements, scale_hardware(self.hardware, **_scales(point)), seed=self.seed,
                models=self.specs, memo=self.simulations, loads=self.loads)
        return self.table[point]


def _log_error(sim: np.ndarray, ref: np.ndarray) -> float:
    """The mean absolute log error of simulated against measured metrics (rows, 3), over the metrics the
    rows publish; a simulated run that failed counts :data:`_REFUSED_LOG_ERROR` per metric."""
    published = np.isfinite(ref) & (ref > 0)  # a metric a row does not publish is left out
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.abs(np.log(sim / np.where(published, ref, 1.0)))
    err[~np.isfinite(err)] = _REFUSED_LOG_ERROR  # the simulated run failed
    known = err[published]
    return float(known.mean()) if known.size else math.inf


def _neighbours(point: tuple[int, ...], step: int) -> Iterator[tuple[int, ...]]:
    """The lattice points ``step`` away from ``point`` along one scale, within its bounds, in search order."""
    for axis, (*_, (low, high)) in enumerate(CORRECTION_GROUPS):
        for sign in (1, -1):
            cand = point[:axis] + (point[axis] + sign * step,) + point[axis + 1:]
            if low <= cand[axis] <= high:
                yield cand


def _descend(loss: Callable[[tuple[int, ...]], float]) -> tuple[int, ...]:
    """The lattice point of least ``loss`` a descent from the origin finds, coarse steps to fine
    (:data:`_STEPS`): at each step size it moves to the first neighbour that lowers the loss until none does."""
    point = (0,) * len(CORRECTION_GROUPS)
    best = loss(point)
    for step in _STEPS:
        improved = True
        while improved:
            improved = False
            for cand in _neighbours(point, step):
                value = loss(cand)
                if value < best - 1e-12:
                    point, best, improved = cand, value, True
                    break
    return point

__all__ = [
    "CORRECTION_GROUPS",
    "CORRECTION_SCALES",
    "LEAVE_ONE_OUT_FROM",
    "Correction",
    "correct_hardware",
    "scale_hardware",
]
