"""Fit a hardware entry's efficiency factors to measured serving runs, and score the simulator.

:func:`fit_hardware` is the one fitting function: measurements in, a fitted :class:`Hardware`
out (shared roofline factors plus per-engine overheads in ``[engines.<engine>]``), regularised
toward the catalog entry it starts from. ``msopt calibrate`` and the in-run refit call it; the run's coarser
correction of two time scales is :mod:`msopt.sim.correct`.
:func:`load_measurements_csv` reads the reference format of ``/work/shared/reference``.
"""

from __future__ import annotations

import csv
import math
import shlex
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from msopt.errors import ConfigError, MsoptError
from msopt.sim.catalog_load import list_models, load_hardware, load_model
from msopt.sim.catalog_types import ENGINE_KEYS, Hardware, ModelSpec
from msopt.sim.hf_config import config_path
from msopt.sim.knobs import EngineKnobs
from msopt.sim.launch_rules import DEFAULT_LAUNCH_RULE, LAUNCH_RULES, row_knobs
from msopt.sim.personality import PERSONALITIES, known
from msopt.sim.result import SimResult
from msopt.sim.simulator import simulate
from msopt.sim.workload import Workload, workload_from_mapping
from msopt.workload.replay import TraceWindow

METRICS = ("ttft", "tpot", "tokens_per_s")
#: requests simulated per row = this x concurrency, for rows that do not give their count: the
#: reference rows come from aiconfigurator's gap analysis, whose ``aiconfigurator eval`` measured
#: each deployed configuration with ``aiperf profile --request-count $((c * 10))`` after a
#: ``--warmup-request-count $((c * 2))`` that aiperf waits out (aiconfigurator 0.5.0-0.7.0
#: aiconfigurator/eval/benchmarks/genai_perf_runner.py; its later benchmark scripts send 20 x c,
#: its Kubernetes template 50 x c)
PROMPTS_PER_SLOT = 10

#: fitted factors: (hardware attribute, kind, step); "mul" factors move by x(1 +- step),
#: "add" factors by +- step in their unit. Shared factors first, then per-engine ones.
SHARED_PARAMS: tuple[tuple[str, str, float], ...] = (
    ("compute_eff", "mul", 0.10),
    ("memory_eff", "mul", 0.06),
    ("comm_eff", "mul", 0.15),
    ("allreduce_latency_us", "add", 4.0),
)
ENGINE_PARAMS: tuple[tuple[str, str, float], ...] = (
    ("reserve_gib", "add", 0.5),
    ("step_overhead_ms", "add", 1.0),
    ("per_seq_overhead_us", "add", 8.0),
    ("api_overhead_ms", "add", 2.0),
    ("api_jitter_ms", "add", 3.0),
    ("frontend_ms_per_req", "add", 1.0),
    ("client_think_ms", "add", 3.0),
    ("frontend_us_per_output_token", "add", 20.0),
)
_CSV_COLUMNS = ("model", "hardware", "engine", "weight_dtype", "input_len", "output_len", "concurrency",
                "tp", "pp", "ttft_ms", "tpot_ms")


@dataclass(frozen=True)
class Measurement:
    """One measured closed-loop benchmark run of one server configuration.

    Attributes:
        knobs: the server's engine knobs (engine, tp, pp, scheduler flags).
        model: a catalog model name or TOML path.
        input_len, output_len, concurrency: the fixed-length closed-loop load.
        ttft_s, tpot_s: measured means, seconds.
        tokens_per_s: measured output tokens/s (derived from TTFT/TPOT when not given).
        weight_dtype, kv_dtype: as in :func:`simulate`.
        num_prompts: requests in the run (None: ``PROMPTS_PER_SLOT x concurrency``).
        source: where it came from (file:line), for messages.
        workload: the full ``[simulator.workload]`` table when the run's load was richer than
            fixed lengths (a run directory's); None: fixed lengths, closed loop.
        hardware: the hardware the run was measured on, as its CSV names it ("": not given);
            simulated on it only with ``per_row_hardware`` (see :func:`fit_hardware`).
        group: the rows measured together (one source's engine, model and hardware), for
            per-group errors ("": none).
        assumed: what reading the row assumed (a layout rule, mean lengths as fixed ones, ...).
        window: the trace window the run replayed, read once (the run's ``ResolvedWorkload.window``: the
            in-run refit's rows), or None.

    ``ttft_s``, ``tpot_s`` or ``tokens_per_s`` is NaN where the source does not publish it; the
    errors then leave that metric of the row out.
    """

    knobs: EngineKnobs
    model: str
    input_len: int
    output_len: int
    concurrency: int
    ttft_s: float
    tpot_s: float
    tokens_per_s: float
    weight_dtype: str = "bf16"
    kv_dtype: str | None = None
    num_prompts: int | None = None
    source: str = ""
    workload: Mapping[str, Any] | None = None
    hardware: str = ""
    group: str = ""
    assumed: tuple[str, ...] = ()
    window: TraceWindow | None = field(default=None, compare=False, repr=False)

    def sim_workload(self, prompts_per_slot: int = PROMPTS_PER_SLOT) -> Workload:
        """The :class:`Workload` to simulate this run with (:meth:`workload_table`, replaying :attr:`window`),
        built once per ``prompts_per_slot`` and kept with the row: a fit simulates each row many times."""
        cache: dict[int, Workload] = self.__dict__.setdefault("_workloads", {})
        got = cache.get(prompts_per_slot)
        if got is None:
            got = cache[prompts_per_slot] = workload_from_mapping(self.workload_table(prompts_per_slot)).replaying(
                self.window)
        return got

    def workload_table(self, prompts_per_slot: int = PROMPTS_PER_SLOT) -> dict[str, Any]:
        """The ``[simulator.workload]`` table to simulate this run with."""
        if self.workload is not None:
            table = dict(self.workload)
            table.setdefault("num_prompts", self.num_prompts or prompts_per_slot * self.concurrency)
            return table
        return {"input_len": self.input_len, "output_len": self.output_len,
                "num_prompts": self.num_prompts or prompts_per_slot * self.concurrency,
                "concurrency": self.concurrency}

    @property
    def engine(self) -> str:
        """The engine that served the run."""
        return self.knobs.engine

    @property
    def configuration(self) -> tuple:
        """The server configuration and load shape, without concurrency (a cross-validation group)."""
        k = self.knobs
        return (k.engine, self.model, self.weight_dtype, k.tp, k.pp, k.dp, k.max_num_seqs,
                k.max_num_batched_tokens, k.memory_fraction, self.input_len, self.output_len)

    def measured(self) -> np.ndarray:
        """(ttft_s, tpot_s, tokens_per_s)."""
        return np.array([self.ttft_s, self.tpot_s, self.tokens_per_s])


def closed_loop_tokens_per_s(concurrency: int, output_len: int, ttft_s: float, tpot_s: float) -> float:
    """The reference README's derived output throughput: ``c*out / (ttft + tpot*(out-1))``."""
    return concurrency * output_len / (ttft_s + tpot_s * (output_len - 1))


def _model_name(text: str) -> str:
    """A model for :func:`load_model` from a CSV's model column: a catalog name or TOML path; the
    catalog entry whose hf_id or ``aliases`` name it (case aside); else a model directory, or a hub
    id in the local Hugging Face cache, with a config.json (:mod:`msopt.sim.hf_config`: the catalog
    entry of the same architecture, else the model its config.json describes)."""
    names = list_models()
    if text in names or text.endswith(".toml"):
        return text
    for name in names:
        spec = load_model(name)
        if text.lower() in (a.lower() for a in (spec.hf_id, *spec.aliases)):
            return name
    path = config_path(text)
    if path is not None:
        return str(path.parent)
    raise ConfigError(f"model {text!r} is neither a catalog name ({', '.join(names)}), nor the hf_id or an alias "
                      "of one, nor a directory (or cached Hugging Face id) with a config.json; give its model "
                      "directory or add a model TOML (see docs/simulator.md)")


def load_measurements_csv(path: str | Path, engine: str | None = None,
                          launch_rule: str = DEFAULT_LAUNCH_RULE) -> list[Measurement]:
    """Read measured runs in the reference CSV format (columns of ``/work/shared/reference``).

    Args:
        path: the CSV file (``model, hardware, engine, weight_dtype, input_len, output_len,
            concurrency, tp, pp, ttft_ms, tpot_ms``; optional ``tokens_per_s``, ``num_prompts``
            and ``server_args``, the server's flags as one shell-quoted string).
        engine: keep only rows of this engine (None: all).
        launch_rule: a :data:`LAUNCH_RULES` name: the server flags of rows without
            ``server_args`` (default: aiconfigurator's, which produced the reference rows).

    Raises:
        ConfigError: a missing column, a malformed value or an unknown rule; the message names
            file and line.
    """
    try:
        rule = LAUNCH_RULES.get(launch_rule)
    except MsoptError as exc:
        raise ConfigError(f"{exc}; pass one of them as the launch rule") from None
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"measurements file {str(path)!r} does not exist; give a CSV in the reference format")
    out: list[Measurement] = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in _CSV_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise ConfigError(f"{path}: missing column(s) {missing}; the header needs {list(_CSV_COLUMNS)}")
        models: dict[str, str] = {}
        for line, row in enumerate(reader, start=2):
            try:
                eng = row["engine"].strip().lower()
                if engine is not None and eng != engine:
                    continue
                if not known(eng):
                    raise ValueError(f"engine {eng!r} is not one of {PERSONALITIES.names()}")
                if row["model"] not in models:
                    models[row["model"]] = _model_name(row["model"])
                c, out_len = int(row["concurrency"]), int(row["output_len"])
                ttft, tpot = float(row["ttft_ms"]) / 1e3, float(row["tpot_ms"]) / 1e3
                tok = row.get("tokens_per_s")
                in_len = int(row["input_len"])
                given = (row.get("server_args") or "").strip()
                argv = shlex.split(given) if given else rule(eng, in_len, out_len, c)
                knobs = row_knobs(eng, int(row["tp"]), int(row["pp"]), argv)
                out.append(Measurement(
                    knobs=knobs, model=models[row["model"]], input_len=in_len,
                    output_len=out_len, concurrency=c, ttft_s=ttft, tpot_s=tpot,
                    tokens_per_s=float(tok) if tok else closed_loop_tokens_per_s(c, out_len, ttft, tpot),
                    weight_dtype=row["weight_dtype"] or "bf16",
                    num_prompts=int(row["num_prompts"]) if row.get("num_prompts") else None,
                    source=f"{path}:{line}", hardware=(row.get("hardware") or "").strip(),
                ))
            except (TypeError, ValueError, MsoptError) as exc:
                raise ConfigError(f"{path}:{line}: {exc}; fix the row") from None
    return out


def on_hardware(fitted: Hardware, datasheet: Hardware) -> Hardware:
    """``datasheet``'s figures (FLOPS, memory, links) with ``fitted``'s efficiency factors and
    per-engine overheads: a fit carried to another device of the same kind (H100 -> H200)."""
    attrs = {a for a, _, _ in SHARED_PARAMS} | {a for a, _, _ in ENGINE_PARAMS} | {"frontend_us_per_token"}
    kw: dict[str, Any] = {a: getattr(fitted, a) for a in attrs}
    return replace(datasheet, engine_overrides={e: dict(t) for e, t in fitted.engine_overrides.items()}, **kw)


def simulation_key(knobs: EngineKnobs, hw: Hardware, model: ModelSpec, workload: Workload,
                   weight_dtype: str, kv_dtype: str | None, seed: int) -> str:
    """The key of one noise-free simulation in a :data:`Simulations` memo: every input of
    :func:`simulate` (the simulator is deterministic, so equal keys give equal results)."""
    return repr((knobs, hw, model, workload, weight_dtype, kv_dtype, int(seed)))


#: Noise-free simulations by :func:`simulation_key`, shared between callers that simulate the same
#: launches on the same hardware (the in-run refit and the prior's predictions).
Simulations = MutableMapping[str, SimResult]


def simulate_memo(memo: Simulations | None, knobs: EngineKnobs, hw: Hardware, model: ModelSpec,
                  workload: Workload, *, weight_dtype: str = "bf16", kv_dtype: str | None = None,
                  seed: int = 0) -> SimResult:
    """:func:`simulate` with noise off, looked up in ``memo`` first (None: no memo).

    What the memo keeps drops the per-request arrays (``requests``), which no caller of a memo reads.
    """
    if memo is None:
        return simulate(knobs, hw, model, workload, weight_dtype=weight_dtype, kv_dtype=kv_dtype, seed=seed)
    key = simulation_key(knobs, hw, model, workload, weight_dtype, kv_dtype, seed)
    hit = memo.get(key)
    if hit is None:
        hit = replace(simulate(knobs, hw, model, workload, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                               seed=seed), requests={})
        memo[key] = hit
    return hit


def simulate_measurements(measurements: Sequence[Measurement], hw: Hardware,
                          prompts_per_slot: int = PROMPTS_PER_SLOT, seed: int = 0,
                          models: Mapping[str, ModelSpec] | None = None,
                          per_row_hardware: bool = False, memo: Simulations | None = None,
                          loads: Sequence[Workload] | None = None) -> np.ndarray:
    """(n, 3) simulated (ttft_s, tpot_s, tokens/s) per measurement; NaN rows where the server fails.

    Each row is simulated with fixed lengths (as measured), ``prompts_per_slot x concurrency``
    requests unless the measurement gives its own count, and one seed for every row. With
    ``per_row_hardware`` a row whose ``hardware`` names another catalog entry is simulated on that
    entry with ``hw``'s factors (:func:`on_hardware`). ``memo``: simulations to look up and add to
    (see :func:`simulate_memo`). ``loads``: each row's workload built already (a caller that simulates
    the rows many times reads a trace once), else built here.
    """
    cache = dict(models or {})
    devices: dict[str, Hardware] = {}
    out = np.full((len(measurements), 3), np.nan)
    for j, m in enumerate(measurements):
        if m.model not in cache:
            cache[m.model] = load_model(m.model)
        row_hw = hw
        if per_row_hardware and m.hardware and m.hardware != hw.name:
            if m.hardware not in devices:
                devices[m.hardware] = load_hardware(m.hardware)
            row_hw = on_hardware(hw, devices[m.hardware])
        load = loads[j] if loads is not None else m.sim_workload(prompts_per_slot)
        res = simulate_memo(memo, m.knobs, row_hw, cache[m.model], load, weight_dtype=m.weight_dtype,
                            kv_dtype=m.kv_dtype, seed=seed)
        if res.error is None:
            out[j] = res.time_to_first_token, res.time_per_output_token, res.generate_speed
    return out


def mape(measurements: Sequence[Measurement], sim: np.ndarray) -> dict[str, float]:
    """Mean absolute percentage error per metric, and ``refused`` (rows the simulator failed).

    A refused row counts as 100 % error in every metric; a metric a row does not publish (NaN) is
    left out of that metric's mean (NaN when no row publishes it).
    """
    if not measurements:
        return {**{k: math.nan for k in METRICS}, "refused": 0}
    meas = np.array([m.measured() for m in measurements])
    err = np.abs(sim - meas) / meas
    refused = np.isnan(sim).any(axis=1)
    err[refused] = 1.0
    err[np.isnan(meas)] = np.nan
    out = {k: float(np.nanmean(col)) if np.isfinite(col).any() else math.nan
           for k, col in zip(METRICS, err.T)}
    return {**out, "refused": int(refused.sum())}


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties sharing their mean rank."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    for v in np.unique(x):
        tie = x == v
        ranks[tie] = ranks[tie].mean()
    return ranks


def spearman(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation of two sequences (pairs with a NaN left out; NaN below 3 pairs
    or when either side is constant)."""
    x, y = np.asarray(a, float), np.asarray(b, float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(np.corrcoef(_ranks(x), _ranks(y))[0, 1])


def group_errors(measurements: Sequence[Measurement], sim: np.ndarray) -> dict[str, dict[str, float]]:
    """Per :attr:`Measurement.group`: :func:`mape`, ``rows`` and ``spearman`` (of tokens/s,
    measured against simulated, within the group: the ranking a prior needs)."""
    out: dict[str, dict[str, float]] = {}
    for g in sorted({m.group for m in measurements}):
        idx = [i for i, m in enumerate(measurements) if m.group == g]
        rows = [measurements[i] for i in idx]
        err: dict[str, float] = dict(mape(rows, sim[idx]))
        err["rows"] = len(rows)
        err["spearman"] = spearman([m.tokens_per_s for m in rows], sim[idx, 2])
        out[g] = err
    return out


@dataclass(frozen=True)
class Calibration:
    """What :func:`fit_hardware` returns.

    Attributes:
        hardware: the fitted entry (shared factors, ``engine_overrides`` per fitted engine).
        before, after: MAPE per metric (and ``refused``) of the start and the fitted entry.
        cross_validated: MAPE of each row predicted by a fit that never saw its configuration
            (empty when ``folds`` < 2).
        factors: fitted value per factor (``name`` or ``engine.name``).
        evaluations: objective evaluations spent.
        cross_validated_sim: (n, 3) the held-out predictions of every row (None: no folds).
    """

    hardware: Hardware
    before: dict[str, float]
    after: dict[str, float]
    cross_validated: dict[str, float] = field(default_factory=dict)
    factors: dict[str, float] = field(default_factory=dict)
    evaluations: int = 0
    cross_validated_sim: np.ndarray | None = None


def _objective(err: dict[str, float]) -> float:
    known = [err[k] for k in METRICS if not math.isnan(err[k])]
    return sum(known) / len(known) if known else math.inf


def _params(hw: Hardware, engines: Iterable[str], shared: bool = True) -> list[tuple[str, str | None, str, float]]:
    """(attribute, engine or None, kind, step) of every fitted factor."""
    out: list[tuple[str, str | None, str, float]] = [(a, None, k, s) for a, k, s in SHARED_PARAMS] if shared else []
    for engine in sorted(set(engines)):
        out += [(a, engine, k, s) for a, k, s in ENGINE_PARAMS]
    return out


def _get(hw: Hardware, attr: str, engine: str | None) -> float:
    if engine is None:
        return float(getattr(hw, attr))
    return float(hw.engine_overrides.get(engine, {}).get(attr, getattr(hw, attr)))


def _set(hw: Hardware, attr: str, engine: str | None, value: float) -> Hardware:
    if engine is None:
        kw: dict[str, Any] = {attr: value}
        return replace(hw, **kw)
    over = {e: dict(t) for e, t in hw.engine_overrides.items()}
    over.setdefault(engine, {})[attr] = value
    return replace(hw, engine_overrides=over)


def _clip(attr: str, value: float) -> float:
    if attr.endswith("_eff"):
        return min(1.0, max(0.05, value))
    return max(0.0, value)


def fit_hardware(
    measurements: Sequence[Measurement],
    hardware: Hardware,
    *,
    regularization: float = 0.001,
    rounds: int = 4,
    folds: int = 0,
    prompts_per_slot: int = PROMPTS_PER_SLOT,
    seed: int = 0,
    fit_shared: bool = True,
    progress: Callable[[str], None] | None = None,
    start: Hardware | None = None,
    start_scale: float = 1.0,
    max_evaluations: int | None = None,
    group_of: Callable[[Measurement], Any] | None = None,
    per_row_hardware: bool = False,
    simulations: Simulations | None = None,
) -> Calibration:
    """Fit ``hardware``'s efficiency factors and per-engine overheads to measured runs.

    A pattern search (coordinate steps that halve when no step improves) minimises the mean of
    the TTFT, TPOT and tokens/s MAPEs plus ``regularization x sum(((x - x0) / step)^2)``,
    which keeps factors the data do not pin near the catalog entry. Datasheet figures (peak
    FLOPS, HBM bandwidth and size) are never changed; ``ENGINE_KEYS`` overheads are fitted per
    engine present in the measurements and written to ``engine_overrides``.

    Args:
        measurements: measured runs (any engines; one hardware).
        hardware: the catalog entry to start from and regularise toward.
        regularization: weight of the pull toward the start values.
        rounds: step-halvings of the search.
        folds: > 1: also cross-validate, grouping rows by configuration (all concurrencies of a
            server configuration and load shape are held out together).
        prompts_per_slot: requests per row, x concurrency.
        seed: the simulator seed (one for every row).
        fit_shared: also fit the shared roofline factors (compute, memory, comm, all-reduce
            latency); False keeps them and fits only the per-engine overheads, so that the
            entry's other engines are unchanged.
        progress: called with a line of text after each round (None: silent).
        start: where the search starts (a warm start: an earlier fit of the same entry); the
            pull is still toward ``hardware`` (None: start at ``hardware``).
        start_scale: the first round's steps, as a fraction of the factors' steps (a warm start
            needs only the finer steps).
        max_evaluations: stop each search (the fit and every fold's) after this many objective
            evaluations (None: when the last round's steps no longer improve).
        group_of: the cross-validation group of a row (None: its configuration). Rows of one
            group are held out together; ``folds`` = 0 or more than the groups: leave one group
            out (e.g. ``lambda m: (m.model, m.hardware)``: each model and hardware predicted by a
            fit on the others).
        per_row_hardware: simulate each row on the hardware it names, with the fitted factors
            (:func:`on_hardware`); rows of several devices of one kind are fitted together.
        simulations: a memo of simulations to look up and add to, shared with the caller (the
            in-run refit shares it with the prior's predictions and its earlier refits).

    Returns:
        A :class:`Calibration`.

    Raises:
        ConfigError: no measurements.
    """
    if not measurements:
        raise ConfigError("no measurements to calibrate against; give a CSV or run directories with results")
    cache: dict[str, ModelSpec] = {}
    # the simulator is deterministic: a hardware scored on the same rows again (the search's
    # start and best, "before" and "after" below) is looked up, not simulated again
    scored: dict[tuple[str, tuple[int, ...]], dict[str, float]] = {}

    def sim(rows: Sequence[Measurement], hw: Hardware) -> np.ndarray:
        return simulate_measurements(rows, hw, prompts_per_slot, seed, cache, per_row_hardware, simulations)

    def score(hw: Hardware, rows: Sequence[Measurement]) -> dict[str, float]:
        key = (repr(hw), tuple(map(id, rows)))
        if key not in scored:
            scored[key] = mape(rows, sim(rows, hw))
        return dict(scored[key])

    fitted, evals = _search(measurements, hardware, regularization, rounds, score, progress, fit_shared,
                            start, start_scale, max_evaluations)
    before = score(hardware, measurements)
    after = score(fitted, measurements)
    cv: dict[str, float] = {}
    held: np.ndarray | None = None
    key = group_of or (lambda m: m.configuration)
    groups = sorted({key(m) for m in measurements}, key=repr)
    if group_of is not None and (folds == 0 or folds > len(groups)):
        folds = len(groups)  # leave one group out
    if folds > 1:
        order = np.random.default_rng(seed).permutation(len(groups))
        fold_of = {groups[g]: i % folds for i, g in enumerate(order)}
        held = np.full((len(measurements), 3), np.nan)
        for k in range(min(folds, len(groups))):
            train = [m for m in measurements if fold_of[key(m)] != k]
            test_idx = [j for j, m in enumerate(measurements) if fold_of[key(m)] == k]
            if not train or not test_idx:
                continue
            hw_k, n = _search(train, hardware, regularization, rounds, score, None, fit_shared,
                              max_evals=max_evaluations)
            evals += n
            held[test_idx] = sim([measurements[j] for j in test_idx], hw_k)
            if progress:
                progress(f"fold {k + 1}/{folds}: {len(train)} rows fitted, {len(test_idx)} held out")
        cv = mape(measurements, held)
    params = _params(hardware, {m.engine for m in measurements}, fit_shared)
    factors = {(f"{e}.{a}" if e else a): _get(fitted, a, e) for a, e, _, _ in params}
    if fit_shared:  # its efficiencies are now its own, not another entry's
        fitted = replace(fitted, efficiency_from="")
    return Calibration(hardware=fitted, before=before, after=after, cross_validated=cv, factors=factors,
                       evaluations=evals, cross_validated_sim=held)


def _search(rows: Sequence[Measurement], start: Hardware, reg: float, rounds: int,
            score: Callable[[Hardware, Sequence[Measurement]], dict[str, float]],
            progress: Callable[[str], None] | None, shared: bool = True, warm: Hardware | None = None,
            scale: float = 1.0, max_evals: int | None = None) -> tuple[Hardware, int]:
    params = _params(start, {m.engine for m in rows}, shared)
    x0 = np.array([_get(start, a, e) for a, e, _, _ in params])
    x_start = x0 if warm is None else np.array([_get(warm, a, e) for a, e, _, _ in params])
    kinds = [k for _, _, k, _ in params]
    # an additive step is at least a tenth of the start value: the GPU-sized steps would need
    # hundreds of evaluations to move a CPU host's 10 ms steps or 500 us per sequence
    steps = np.array([max(s, 0.1 * abs(v)) if k == "add" else s
                      for (_, _, k, s), v in zip(params, x0)])

    def build(x: np.ndarray) -> Hardware:
        hw = start
        for (a, e, _, _), v in zip(params, x):
            hw = _set(hw, a, e, v)
        return hw

    def penalty(x: np.ndarray) -> float:
        z = np.empty(len(x))
        for i, kind in enumerate(kinds):
            z[i] = math.log(x[i] / x0[i]) / steps[i] if kind == "mul" else (x[i] - x0[i]) / steps[i]
        return reg * float((z * z).sum())

    def f(x: np.ndarray) -> float:
        return _objective(score(build(x), rows)) + penalty(x)

    x = x_start.copy()
    best = f(x)
    evals = 1
    for r in range(rounds):
        improved = True
        while improved:
            improved = False
            for i, (attr, _, kind, _) in enumerate(params):
                for sign in (1.0, -1.0):
                    cand = x.copy()
                    delta = sign * float(steps[i]) * scale
                    cand[i] = _clip(attr, x[i] * (1.0 + delta) if kind == "mul" else x[i] + delta)
                    if cand[i] == x[i] or (max_evals is not None and evals >= max_evals):
                        continue
                    val = f(cand)
                    evals += 1
                    if val < best - 1e-6:
                        x, best, improved = cand, val, True
                        break
        if progress:
            progress(f"round {r + 1}/{rounds}: objective {best:.4f} after {evals} evaluations")
        scale /= 2.0
    return build(x), evals


__all__ = [
    "ENGINE_KEYS",
    "Calibration",
    "Measurement",
    "Simulations",
    "closed_loop_tokens_per_s",
    "fit_hardware",
    "group_errors",
    "load_measurements_csv",
    "mape",
    "on_hardware",
    "simulate_measurements",
    "simulate_memo",
    "simulation_key",
    "spearman",
]
