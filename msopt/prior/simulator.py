"""The simulator as the search's prior: :class:`SimulatorPrior` predicts a configuration's metrics
and fitness with the embedded simulator (noise off) for the run's own model, hardware, workload
and objective, and searches the run's space on it before the first launch
(:meth:`SimulatorPrior.search`), so the searcher starts from the baseline plus diverse top
predictions. Refused candidates (the engine's start-up rules, :class:`msopt.evaluate.screen.CandidateScreen`)
are predicted as failures.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import product
from typing import TYPE_CHECKING, Any

import numpy as np

from msopt.benchmarks import get_benchmark
from msopt.config import Config, PriorConfig, thaw
from msopt.engines import get_engine
from msopt.errors import ConfigError, DecodeError, MsoptError
from msopt.evaluate.objective import run_objective
from msopt.evaluate.results import EvalRequest
from msopt.evaluate.results import values_key as _key
from msopt.evaluate.screen import CandidateScreen, pd_launch
from msopt.evaluate.simulated import (
    SimulatorSetup,
    explicit_devices,
    field_load_of,
    metrics_of,
    simulated_devices_per_node,
)
from msopt.evaluate.workload import resolved_workload, search_num_prompts
from msopt.evaluate.workload import simulator_workload as sim_workload
from msopt.launch.placement import virtual_nodes
from msopt.launch.render import Candidate
from msopt.metrics import SPEC_ACCEPT_LEN
from msopt.prior.accept import MeasuredAccepts
from msopt.prior.correction import CORRECT_ROWS, correction_record
from msopt.prior.picks import diverse_picks
from msopt.search.searcher import layout_names, search_dimensions
from msopt.sim import load_hardware, load_model, workload_from_mapping
from msopt.sim.calibrate import Measurement, fit_hardware, simulate_memo
from msopt.sim.catalog_load import entry_path
from msopt.sim.correct import Correction, correct_hardware
from msopt.sim.knobs import load_overrides
from msopt.sim.personality import knobs_from_launch
from msopt.sim.simulator import assumed_inputs, simulate_pools
from msopt.space import SearchSpace
from msopt.workload.resolved import ResolvedWorkload

if TYPE_CHECKING:
    from msopt.sim.calibrate import Simulations
    from msopt.sim.knobs import EngineKnobs
    from msopt.sim.workload import Workload

__all__ = ["PRIOR_MODES", "REFIT_TOLERANCE", "Prediction", "PriorOptions", "SimulatorPrior", "make_prior",
           "prior_applies"]

#: ``[search] prior``: "auto" (on when the simulator describes the run), "simulator", "none".
PRIOR_MODES = ("auto", "simulator", "none")
#: :meth:`SimulatorPrior.refit` is skipped while the prior predicts the rows it would fit within
#: this (the mean of the TTFT, TPOT and tok/s errors): a few per cent is what repeats of one
#: configuration differ by, which a refit could only fit as noise, at a few dozen simulations each
REFIT_TOLERANCE = 0.05
#: the measured metrics a refit fits, in the order of its rows (ttft, tpot, tok/s)
_FITTED = ("time_to_first_token", "time_per_output_token", "generate_speed")


@dataclass(frozen=True)
class Prediction:
    """The simulator's prediction for one configuration."""

    values: dict[str, Any]
    position: np.ndarray
    fitness: float
    metrics: dict[str, float | None]
    error: str | None = None

    def record(self) -> dict[str, Any]:
        """What the journal holds beside the measured metrics: the metrics and ``fitness``."""
        return {**self.metrics, "fitness": self.fitness if math.isfinite(self.fitness) else None}


#: The prior's ``[search]`` options: :class:`msopt.config.PriorConfig` (``config.prior``).
PriorOptions = PriorConfig


def prior_applies(config: Config, options: PriorOptions, described: bool = False) -> bool:
    """Whether the run uses the simulator prior.

    ``"simulator"``: always. ``"auto"``: when the simulator describes the run, i.e. a simulated
    run, a real run whose model and hardware were found (``described``:
    :func:`msopt.prior.source.prior_source`), or one whose ``[simulator]`` hardware and model
    were set in a configuration file (the packaged defaults describe nobody's cluster). The engine
    must be one the simulator models (its adapter names a ``sim_personality``).
    """
    if options.mode == "none" or options.evaluations <= 0:
        return False
    if get_engine(config.engine.name).sim_personality is None:
        return options.mode == "simulator"
    if options.mode == "simulator" or config.run.simulate or described:
        return True
    return {"hardware", "model"} <= config.simulator.user


class SimulatorPrior:
    """The embedded simulator as a model of the run (noise off), and a search of the space on it.

    Args:
        config: the run's config: its ``[simulator]`` hardware, model and workload (the
            search's ``num_prompts``), its engine section and fields, its objective.
        space: the run's search space.
        screen: the start-up rules (refused candidates are predicted as failures).
        simulator: a ``[simulator]`` table overriding the run's (a refitted hardware, say).
        setup: the run's ``[simulator]`` as validate parsed it, for ``simulator`` None (None: parsed here).
        workload: the run's ``[workload]`` as split resolved it, whose trace window is replayed (None: resolved
            here, a trace read).
        options: the ``[search]`` options (default: read from ``config``).
        memo: simulations shared between priors of the same config and simulator (repeated
            runs of one problem, as in scripts/benchmarks/bench_search): a configuration found there is not
            simulated again. What each prior has predicted (its search) stays its own.
    """

    def __init__(self, config: Config, space: SearchSpace, screen: CandidateScreen | None = None,
                 simulator: Mapping[str, Any] | None = None, options: PriorOptions | None = None,
                 memo: dict[str, Prediction] | None = None, setup: SimulatorSetup | None = None,
                 workload: ResolvedWorkload | None = None) -> None:
        self.config = config
        replayed = workload if workload is not None else resolved_workload(config)
        self.options = options if options is not None else config.prior
        self.searched = False
        self.space = space
        self.engine = get_engine(config.engine.name)
        self.section = self.engine.simulation_section(config.engine.section.table)
        own = None  # [simulator] as the run parsed it, where the prior simulates with it
        if simulator is None:
            own = setup or SimulatorSetup.from_config(config.simulator, config.run.seed, sim_workload(config, replayed))
            simulator = own.table
        table = thaw(simulator)
        self.screen = screen if screen is not None else CandidateScreen(config, simulate=True, simulator=table,
                                                                        setup=own)
        self.table = table
        self.objective = run_objective(config)
        self.num_prompts = search_num_prompts(config, replayed)
        self.benchmark = get_benchmark(config.run.benchmark)
        self.dirs: tuple[str, ...] = config.catalog_dirs
        self.catalog_hardware = own.hardware if own is not None else load_hardware(table["hardware"], self.dirs)
        #: the entry the prior predicts with and the refit starts from: the catalog's, or its
        #: correction to the run's own measured launches (:meth:`correct`)
        self.base_hardware = self.catalog_hardware
        self.hardware = self.catalog_hardware
        #: every correction tried (:meth:`correct`), as prior.json's ``corrections`` lists them
        self.corrections: list[dict[str, Any]] = []
        self.model_spec = load_model(table["model"], self.dirs)
        prompts = {} if self.num_prompts is None else {"num_prompts": int(self.num_prompts)}
        sent = {**replayed.simulator_workload(table.get("workload", {}), config.run.benchmark), **prompts}
        self.workload_table = sent
        self.workload = workload_from_mapping(sent).replaying(replayed.window)
        self.refits = 0
        #: refits skipped because the predictions of the rows to fit were already close enough
        self.kept = 0
        #: what the last :meth:`refit` that did not fit found (None: it fitted, or nothing new)
        self.refit_note: str | None = None
        #: the error the last refit left on its rows (the refit's objective without the penalty)
        self.fit_error = 0.0
        self.search_evaluations = 0
        self._observed: dict[str, tuple[dict[str, Any], float, float, float]] = {}
        self._observed_fitness: dict[str, float] = {}
        #: the observed configurations measured on the real engine (:meth:`correct` fits only these)
        self._real: set[str] = set()
        self._corrected_on: tuple[tuple[str, float, float, float], ...] = ()
        self._accepts = MeasuredAccepts()
        self._fitted_on: tuple[tuple[str, float, float, float], ...] = ()
        self.devices = config.cluster.trial.device_ids()
        self.nodes = virtual_nodes(explicit_devices(config), simulated_devices_per_node(config, own))
        self.disaggregated = self.engine.is_disaggregated(self.section)
        self.evaluations = 0
        self._cache: dict[str, Prediction] = {}
        self._memo = memo
        # noise-free simulations by their inputs, shared by the predictions and the refits: a
        # refit's rows at its final hardware are the predictions that follow it, and the next
        # refit starts where this one ended
        self._sims: Simulations = {}
        #: called with a line of text while :meth:`search` runs (None: silent); msopt optimize prints it
        self.report: Callable[[str], None] | None = None

    def predict(self, values: Mapping[str, Any], position: Sequence[float] | np.ndarray | None = None) -> Prediction:
        """The prediction for decoded ``values`` (cached per configuration)."""
        key = _key(values)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        pos = np.asarray(position if position is not None else self.space.encode(
            {n: values[n] for n in self.space.names if n in values}), dtype=float)
        self.evaluations += 1
        pred = self._memo.get(key) if self._memo is not None else None
        if pred is not None:  # another prior's: this run's own values and position, as if simulated here
            pred = replace(pred, values=dict(values), position=pos)
        else:
            refusal = self.screen.refusal(values)
            pred = (Prediction(dict(values), pos, math.inf, {}, refusal) if refusal is not None
                    else self._simulate(values, pos))
            if self._memo is not None:
                self._memo[key] = pred
        self._cache[key] = pred
        return pred

    def _simulate(self, values: Mapping[str, Any], pos: np.ndarray) -> Prediction:
        try:
            wl = self._workload_of(values, pos)
            dtypes = {"weight_dtype": str(self.table.get("weight_dtype", "bf16")),
                      "kv_dtype": self.table.get("kv_dtype"), "seed": int(self.table.get("seed", 0))}
            if self.disaggregated:
                # the evaluation's own simulation (SimRunner._measure_pd): both pools, the router's split
                launch = pd_launch(self.engine, values, self.config, self.section, self.devices, self.nodes)
                res = simulate_pools(launch.prefill[0], launch.decode[0], launch.counts, self.hardware,
                                     self.model_spec, wl, personality=self.engine.sim_personality, **dtypes,
                                     spec_accept_len=self._knobs(knobs_from_launch(
                                         launch.decode[0], self.engine.sim_personality)).spec_accept_len)
            else:
                spec = self.engine.render(Candidate(values, self.config.engine.fields, self.section), port=0,
                                          devices=list(self.devices), workdir=None)
                knobs = self._knobs(knobs_from_launch(spec, self.engine.sim_personality))
                res = simulate_memo(self._sims, knobs, self.hardware, self.model_spec, wl, **dtypes)
        except MsoptError as exc:
            return Prediction(dict(values), pos, math.inf, {}, str(exc))
        metrics = metrics_of(res)
        if res.error:
            return Prediction(dict(values), pos, math.inf, metrics, str(res.error))
        fit = float(self.objective(metrics))
        return Prediction(dict(values), pos, fit if math.isfinite(fit) else math.inf, metrics, None)

    def _workload_of(self, values: Mapping[str, Any], pos: np.ndarray | None = None) -> Workload:
        """What the benchmark sends to ``values``' launch: the search's workload, with the load the
        configuration's own load fields set (:func:`msopt.evaluate.simulated.field_load_of`)."""
        position = tuple(pos.tolist()) if pos is not None else ()
        req = EvalRequest(0, "search", None, 0, position, num_prompts=self.num_prompts)
        load = field_load_of(self.benchmark, values, req)
        return self.workload.with_overrides(load_overrides(load)) if load else self.workload

    def _knobs(self, knobs: EngineKnobs) -> EngineKnobs:
        """``knobs`` with the acceptance length to simulate: the one this run measured for its draft
        method (:meth:`accept_len`), else ``[simulator] spec_accept_len`` (as
        :func:`msopt.sim.simulator.simulate_launch` applies it), else the assumed default."""
        measured = self.accept_len(knobs)
        accept = measured if measured is not None else self.table.get("spec_accept_len")
        if knobs.spec_method and accept is not None:
            return replace(knobs, spec_accept_len=float(accept))
        return knobs

    def assumed(self, values: Mapping[str, Any]) -> list[str]:
        """What the prediction of ``values`` assumes rather than knows, one line each
        (:func:`msopt.sim.simulator.assumed_inputs` at the prior's hardware, refitted or not, and
        acceptance length, measured or not; disaggregated: the decode pool's); [] where the launch
        cannot be rendered."""

        knobs = self._launch_knobs(values)
        return [] if knobs is None else assumed_inputs(self._knobs(knobs), self.hardware)

    def _launch_knobs(self, values: Mapping[str, Any]) -> EngineKnobs | None:
        """The knobs of ``values``' launch, disaggregated its decode pool's (the one that drafts); None
        where it cannot be rendered."""
        try:
            if self.disaggregated:
                launch = pd_launch(self.engine, values, self.config, self.section, self.devices, self.nodes)
                return knobs_from_launch(launch.decode[0], self.engine.sim_personality)
            candidate = Candidate(values, self.config.engine.fields, self.section)
            return knobs_from_launch(self.engine.render(candidate, port=0, devices=list(self.devices), workdir=None),
                                     self.engine.sim_personality)
        except MsoptError:
            return None

    def accept_len(self, knobs: EngineKnobs) -> float | None:
        """The acceptance length this run measured (the ``spec_accept_len`` metric, the server's own
        counters) for ``knobs``' draft method and number of draft tokens: their mean where that number
        was measured, else the chain of the mean per-token rate the measurements of other numbers
        give (:func:`msopt.sim.speculative.chain_accept_rate`); None where the method was not measured."""
        return self._accepts.of(knobs)

    def observe(self, values: Mapping[str, Any], metrics: Mapping[str, Any], real: bool = False) -> None:
        """Remember one launched, successful measurement of ``values`` for :meth:`refit` (and, measured
        on the real engine, ``real``, for :meth:`correct`), and its acceptance length
        (``spec_accept_len``) for the predictions that follow."""
        self._observe_accept(values, metrics.get(SPEC_ACCEPT_LEN))
        ttft, tpot, speed = (metrics.get("time_to_first_token"), metrics.get("time_per_output_token"),
                             metrics.get("generate_speed"))
        nums = [x for x in (ttft, tpot, speed) if isinstance(x, (int, float)) and math.isfinite(x) and x > 0]
        if len(nums) == 3:
            key = _key(values)
            self._observed.pop(key, None)
            self._observed[key] = (dict(values), float(ttft), float(tpot), float(speed))  # type: ignore[arg-type]
            if real:
                self._real.add(key)
            try:
                f = float(self.objective(metrics))
            except (MsoptError, TypeError, ValueError):
                f = math.inf
            self._observed_fitness[key] = f if math.isfinite(f) else math.inf

    def _observe_accept(self, values: Mapping[str, Any], accept: Any) -> None:
        if not isinstance(accept, (int, float)) or isinstance(accept, bool) or not math.isfinite(accept) or accept < 1:
            return
        knobs = self._launch_knobs(values)  # disaggregated: the decode pool drafts, the server counted its steps
        if knobs is None or not knobs.spec_method:
            return
        self._accepts.add(knobs, float(accept))
        self._cache = {}  # every speculative prediction may change
        self._memo = None  # the shared predictions are of the assumed acceptance

    def _measured_fitness(self, row: tuple[dict[str, Any], float, float, float]) -> float:
        """The run's objective on a measured row, as measured (its last measurement)."""
        return self._observed_fitness.get(_key(row[0]), math.inf)

    @property
    def observed(self) -> list[dict[str, Any]]:
        """The configurations measured so far (what :meth:`refit` fits)."""
        return [v for v, *_ in self._observed.values()]

    def prediction_error(self, rows: Sequence[tuple[dict[str, Any], float, float, float]]) -> float:
        """The mean relative error of the current predictions of measured ``rows`` ((values,
        ttft, tpot, tok/s)): the mean over rows of the TTFT, TPOT and tok/s errors, as the refit's
        objective counts them (a prediction that fails counts 100 %). Predictions not made yet are
        simulated (shared with later predictions and refits) but not added to :meth:`ranked`."""
        errors = []
        for values, *measured in rows:
            hit = self._cache.get(_key(values))
            if hit is None:
                pos = np.asarray(self.space.encode({n: values[n] for n in self.space.names if n in values}),
                                 dtype=float)
                hit = self._simulate(values, pos)
            for name, value in zip(_FITTED, measured):
                got = hit.metrics.get(name) if hit.error is None else None
                ok = isinstance(got, (int, float)) and math.isfinite(got)
                errors.append(abs(float(got) - value) / value if ok else 1.0)  # type: ignore[arg-type]
        return float(np.mean(errors)) if errors else math.inf

    def refit(self, max_rows: int = 5, rounds: int = 1, max_evaluations: int = 24,
              tolerance: float = REFIT_TOLERANCE, progress: Callable[[str], None] | None = None) -> bool:
        """Refit the hardware's efficiency factors to the measurements observed so far with
        :func:`msopt.sim.calibrate.fit_hardware` (regularised toward the catalog entry);
        predictions are made with the refitted entry from then on.

        The fit is kept cheap beside a launch: it uses the ``max_rows`` distinct configurations
        that measured best (where the screen must rank right), is skipped while those rows are
        the ones of the last refit, and starts from the last refit's factors with half steps and
        at most ``max_evaluations`` fit evaluations (the first refit starts at the catalog entry
        with full steps, unbounded). It is skipped too where new rows cannot change the fit much:
        while the current predictions of those rows err by at most ``tolerance`` (the mean of the
        TTFT, TPOT and tok/s errors: :meth:`prediction_error`), or by no more than the last refit
        left on the rows it fitted; :attr:`refit_note` then says so. ``progress`` is called with a
        line before a refit starts. Returns whether a refit happened (it needs two measured
        configurations)."""
        self.refit_note = None
        rows = sorted(self._observed.values(), key=self._measured_fitness)[:max_rows]
        if len(rows) < 2:
            return False
        if self.disaggregated:
            # the fit simulates each row as one co-located server; a disaggregated trial is two pools
            self.refit_note = "prior kept: a prefill/decode-disaggregated trial is not refitted"
            return False
        fitted_on = tuple((_key(v), t, p, g) for v, t, p, g in rows)
        if fitted_on == self._fitted_on:
            return False  # nothing new among the rows it fits
        error = self.prediction_error(rows)
        bar = max(tolerance, self.fit_error)
        if error <= bar:
            self._fitted_on = fitted_on
            self.kept += 1
            self.refit_note = (f"prior kept: it predicts the {len(rows)} best measured configurations within "
                               f"{error:.1%} (mean TTFT, TPOT and tok/s error; it refits above {bar:.1%})")
            return False
        if progress is not None:
            progress(f"refitting the prior to the {len(rows)} best measured configurations (its predictions "
                     f"err by {error:.1%}) ...")
        measurements = self._measurements(rows)
        if len(measurements) < 2:
            return False
        warm = self.hardware is not self.base_hardware  # a refit's factors: start there
        cal = fit_hardware(measurements, self.base_hardware, rounds=rounds, seed=int(self.table.get("seed", 0)),
                           start=self.hardware if warm else None, start_scale=0.5 if warm else 1.0,
                           max_evaluations=max_evaluations if warm else None, simulations=self._sims)
        self._fitted_on = fitted_on
        self.fit_error = (cal.after["ttft"] + cal.after["tpot"] + cal.after["tokens_per_s"]) / 3.0
        self.hardware = cal.hardware
        self._cache = {}
        self._memo = None  # the shared simulations are of the catalog entry
        self.refits += 1
        return True

    def _model_name(self) -> str:
        """The ``[simulator] model`` as :func:`msopt.sim.load_model` finds it outside the prior."""
        model = str(self.table["model"])
        return str(entry_path("models", model, self.dirs)) if self.dirs else model

    def _measurements(self, rows: Sequence[tuple[dict[str, Any], float, float, float]]) -> list[Measurement]:
        """Measured ``rows`` ((values, ttft, tpot, tok/s)) as :class:`msopt.sim.calibrate.Measurement`s,
        each with the launch and the workload its prediction simulates (rows whose launch cannot be
        rendered are left out)."""
        model = self._model_name()
        out = []
        for values, ttft, tpot, speed in rows:
            try:
                spec = self.engine.render(Candidate(values, self.config.engine.fields, self.section), port=0,
                                          devices=list(self.devices), workdir=None)
                knobs = self._knobs(knobs_from_launch(spec, self.engine.sim_personality))
                wl = self._workload_of(values)
            except MsoptError:
                continue
            out.append(Measurement(
                knobs=knobs, model=model, input_len=wl.input_len if isinstance(wl.input_len, int) else 0,
                output_len=wl.output_len if isinstance(wl.output_len, int) else 0,
                concurrency=int(wl.concurrency or 0), ttft_s=ttft, tpot_s=tpot, tokens_per_s=speed,
                weight_dtype=str(self.table.get("weight_dtype", "bf16")), kv_dtype=self.table.get("kv_dtype"),
                num_prompts=wl.num_prompts, workload=wl.as_mapping(), window=wl.window))
        return out

    def correct(self, max_rows: int = CORRECT_ROWS) -> Correction | None:
        """Correct the catalog entry to the configurations measured on the real engine
        (:func:`msopt.sim.correct.correct_hardware`: two time scales, the serial frontend's and an
        engine step's, fitted to the ``max_rows`` that measured best) and predict with the corrected
        entry from then on, the refit starting from it, only where the correction lowers the error
        on the rows it did not fit (leave-one-out from three rows); otherwise the catalog entry.
        Measurements of the simulator itself (a simulated run) are never fitted.

        Returns:
            The correction (its record is added to :attr:`corrections`), or None: fewer than two
            configurations measured on the real engine, none new since the last correction, or a
            prefill/decode-disaggregated trial (two pools, which the fit cannot simulate as one).
        """
        rows = sorted((row for key, row in self._observed.items() if key in self._real),
                      key=self._measured_fitness)[:max_rows]
        if len(rows) < 2 or self.disaggregated:
            return None
        on = tuple((_key(v), t, p, g) for v, t, p, g in rows)
        if on == self._corrected_on:
            return None
        self._corrected_on = on
        measurements = self._measurements(rows)
        if len(measurements) < 2:
            return None
        found = correct_hardware(measurements, self.catalog_hardware, seed=int(self.table.get("seed", 0)),
                                 models={measurements[0].model: self.model_spec}, simulations=self._sims)
        self.corrections.append(correction_record(found, self.catalog_hardware.name))
        base = found.hardware if found.better else self.catalog_hardware
        if base != self.base_hardware:
            self.base_hardware = self.hardware = base
            self._cache = {}
            self._memo = None  # the shared simulations are of the catalog entry
            self._fitted_on = ()  # the refit fits its rows again, from the new entry
            self.fit_error = 0.0
        return found

    def predict_position(self, position: Sequence[float] | np.ndarray) -> Prediction | None:
        """The prediction for a position (decoded without a context); None if it does not decode."""
        try:
            d = self.space.decode(np.asarray(position, dtype=float), None)
        except DecodeError:
            return None
        return self.predict(d.values, d.position)

    def search(self, evaluations: int, rng: np.random.Generator) -> list[Prediction]:
        """Search the space on the simulator; every prediction made, best first.

        Uniform samples (half the budget, the default configuration among them), then a
        first-improvement hill climb from each of the best distinct configurations, one step
        (``SearchSpace.steps``) up or down along one dimension at a time, until the budget of
        simulated evaluations is spent or no climb improves.
        """
        low, high = self.space.bounds
        steps = self.space.steps
        start = self.evaluations
        every = max(1, evaluations // 10)
        said = 0
        began = time.monotonic()

        def tell(phase: str) -> None:
            nonlocal said
            done = self.evaluations - start
            if self.report is not None and done // every > said:
                said = done // every
                self.report(f"simulator prior: {done}/{evaluations} simulated evaluations ({phase}, "
                            f"{time.monotonic() - began:.0f} s)")

        if self.report is not None:
            self.report(f"simulator prior: searching the space on the simulator ({evaluations} simulated "
                        "evaluations) ...")
        self.predict_position(self.space.default_position())
        tries = 0
        while self.evaluations - start < evaluations // 2 and tries < 20 * evaluations:
            tries += 1
            self.predict_position(low + rng.random(low.size) * (high - low))
            tell("uniform samples")
        self.searched = True
        climbed: set[str] = set()
        improved = True
        while improved and self.evaluations - start < evaluations:
            improved = False
            ranked = self.ranked()
            for p in ranked[:8]:
                if not math.isfinite(p.fitness) or _key(p.values) in climbed:
                    continue
                climbed.add(_key(p.values))
                improved = True
                for j in rng.permutation(low.size):
                    for sign in (-1.0, 1.0):
                        if self.evaluations - start >= evaluations or steps[j] <= 0:
                            continue
                        x = p.position.copy()
                        x[j] = min(max(x[j] + sign * steps[j], low[j]), high[j])
                        self.predict_position(x)
                        tell("hill climbs")
                break
        self.search_evaluations += self.evaluations - start
        if self.report is not None:
            done = self.evaluations - start
            why = "" if done >= evaluations else ": no hill climb improved further"
            self.report(f"simulator prior: searched in {time.monotonic() - began:.0f} s, {done} simulated "
                        f"evaluations{why}")
        return self.ranked()

    def predict_grid(self, limit: int) -> int:
        """Predict every configuration of the space's grid (each searched field's candidates) where it
        has at most ``limit`` points and every field has candidates; how many configurations that
        predicted anew (0 where it did not apply). Each distinct configuration is simulated once."""
        dims = search_dimensions(self.space)
        axes = [d.coordinates for d in dims if d.coordinates is not None]
        size = math.prod(len(a) for a in axes)
        if not dims or len(axes) < len(dims) or size > limit:
            return 0
        start = self.evaluations
        began = time.monotonic()
        if self.report is not None:
            self.report(f"simulator prior: predicting the whole grid ({size} configurations) ...")
        for x in product(*axes):
            self.predict_position(np.array(x, dtype=float))
        done = self.evaluations - start
        self.search_evaluations += done
        if self.report is not None:
            self.report(f"simulator prior: predicted the whole grid in {time.monotonic() - began:.0f} s, "
                        f"{done} more simulated evaluations")
        return done

    def search_for_run(self, seed: int | None) -> None:
        """The search a run starts from (once): ``[search] evaluations`` simulations, drawn from the
        run's seed. msopt optimize runs it while Ray starts; the driver, if it has not run."""
        if not self.searched:
            rng = np.random.default_rng(np.random.SeedSequence([int(seed or 0), 0x9121]))
            self.search(self.options.evaluations, rng)

    def ranked(self) -> list[Prediction]:
        """Every prediction made so far, best first (failures last)."""
        return sorted(self._cache.values(), key=lambda p: p.fitness)

    def layout_names(self) -> tuple[str, ...]:
        """The fields of the parallel layout its picks spread over: every ternary_factories field and
        its sources, not the ``factories`` ones (counting SGLang's ``dp`` among them was tried and
        dropped: SGLang's picks, docs/searchers.md)."""
        return layout_names(self.space, binary=False)

    def picks(self, k: int, exclude: Sequence[Mapping[str, Any]] = ()) -> list[Prediction]:
        """Up to ``k`` diverse top predictions, levels the prior cannot rank apart first
        (:func:`msopt.prior.picks.diverse_picks`; ``exclude``: the baseline's values)."""
        return diverse_picks(self.ranked(), self.space.names, self.layout_names(), k, exclude)


def make_prior(config: Config, space: SearchSpace | None = None, simulator: Mapping[str, Any] | None = None,
               setup: SimulatorSetup | None = None, workload: ResolvedWorkload | None = None) -> SimulatorPrior | None:
    """The run's simulator prior when ``[search] prior`` asks for one (see :func:`prior_applies`), else None.

    Args:
        config: the run's config.
        space: its search space (default: built from ``config``).
        simulator: the ``[simulator]`` table the prior models (a real run's, found by
            :func:`msopt.prior.source.prior_source`); None: the run's own table.
        setup: the run's own table as :func:`msopt.run.validate.validate` parsed it (None: parsed again).
        workload: the run's ``[workload]`` as :func:`msopt.config.split` resolved it (None: resolved again).

    Raises:
        ConfigError: a bad ``[search]`` key, or ``prior = "simulator"`` where ``[simulator]``
            does not describe a model and hardware of the catalogs.
    """
    options = config.prior
    if not prior_applies(config, options, described=simulator is not None):
        return None
    try:
        return SimulatorPrior(config, space if space is not None else SearchSpace(config.engine.fields),
                              simulator=simulator, options=options, setup=setup, workload=workload)
    except ConfigError:
        if options.mode == "simulator":
            raise
        return None  # "auto": the simulator cannot describe this run
