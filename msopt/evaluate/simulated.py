"""The simulated evaluation path: the engine's rendered launch, run by the embedded simulator.

:class:`SimRunner` is the :class:`~msopt.evaluate.runner.Runner` of a simulated run; it renders
the launch exactly as :class:`~msopt.evaluate.real.RealRunner` would and hands it to the simulator.

``[simulator]`` keys read here besides the simulator's own (hardware, model, weight_dtype,
kv_dtype, seed, noise, workload, catalog_dirs):

- ``emulate_wall_time`` (bool, default false): an evaluation takes wall time as a real one would:
  ``eval_seconds`` when set, else the simulated benchmark duration × ``time_scale`` (default 1).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from msopt.benchmarks import get_benchmark
from msopt.benchmarks.base import BenchmarkAdapter
from msopt.config import Config, Section, thaw
from msopt.config.keys import SECTION_TABLES, checked
from msopt.engines.base import EngineAdapter, sim_personality_of
from msopt.engines.pd import PdLaunch, without_pd
from msopt.engines.rules import ModelFacts, check_rules
from msopt.errors import ConfigError, EvaluationError, MsoptError, SimulationError
from msopt.evaluate.results import EvalRequest
from msopt.evaluate.runner import EngineRunner, RunnerContext, server_key
from msopt.evaluate.workload import resolved_workload, simulator_workload
from msopt.launch.hccl import NodeFacts
from msopt.launch.placement import virtual_nodes
from msopt.launch.render import Candidate, LaunchSpec, TrialNode
from msopt.metrics import (
    CONTEXT_LIMIT,
    FAILED_REFUSED,
    FAILED_TOO_LONG,
    OUTPUTS_CUT,
    PREFIX_CACHE_HIT_RATE,
    SENT_INPUT_MEAN,
    SENT_OUTPUT_MEAN,
    SENT_REQUESTS,
    SENT_SPAN,
    SIMULATED,
)
from msopt.registry import close_matches
from msopt.sim import load_hardware, load_model, simulate_launch, workload_from_mapping
from msopt.sim.catalog_parts import catalog_part
from msopt.sim.catalog_types import DTYPE_BYTES, Hardware
from msopt.sim.simulator import simulate_disaggregated
from msopt.space.fields import FieldDecl
from msopt.workload.replay import TraceWindow
from msopt.workload.resolved import ResolvedWorkload

#: ``[simulator]``'s keys besides its ``workload`` table, each declared once in :mod:`msopt.config.keys`.
SIMULATOR_KEYS = SECTION_TABLES["simulator"]
#: Those this module reads, not the simulator (:data:`~msopt.sim.simulator.SIM_KEYS`).
WALL_KEYS = ("emulate_wall_time", "time_scale", "eval_seconds")


def _catalog_entry(loader: Any, table: Mapping[str, Any], key: str, dirs: tuple[str, ...],
                   where: Callable[[str], str]) -> Any:
    """``[simulator] key``'s catalog entry, loaded by ``loader``; a ConfigError names the file and the key."""
    try:
        return loader(table[key], dirs)
    except ConfigError as exc:
        raise ConfigError(f"{where(key)}: [simulator] {key}: {exc}") from None


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def metrics_of(res: Any) -> dict[str, float | None]:
    """The benchmark metrics of a SimResult (NaN becomes None), percentiles included, and the prefix
    cache's hit rate where the simulator modelled one (a trace with hash ids, caching on): the
    prediction a real replay's measured ``prefix_cache_hit_rate`` stands beside. And what the
    simulated client sent (:data:`msopt.metrics.SENT`, but the lateness: a simulated send is on time):
    requests, span, mean prompt and output tokens, where the run sent any. And why requests failed
    (:data:`msopt.metrics.FAILED_PREFIX`), where any did."""
    out = {k: _finite(getattr(res, k)) for k in SIMULATED}
    queries = getattr(res, "prefix_cache_queries", 0)
    if queries:
        out[PREFIX_CACHE_HIT_RATE] = res.prefix_cache_hits / queries
    for key in (FAILED_TOO_LONG, FAILED_REFUSED):  # why requests failed, where any did
        if getattr(res, key, 0):
            out[key] = float(getattr(res, key))
    if getattr(res, FAILED_TOO_LONG, 0):
        out[CONTEXT_LIMIT] = float(res.context_limit)
    if getattr(res, OUTPUTS_CUT, 0):
        out[OUTPUTS_CUT] = float(res.outputs_cut)
    reqs = getattr(res, "requests", None) or {}
    send = np.asarray(reqs.get("send", ()), dtype=float)
    sent = send[np.isfinite(send)]
    if len(sent):
        out[SENT_REQUESTS] = float(len(sent))
        out[SENT_SPAN] = float(sent.max() - sent.min())
        out[SENT_INPUT_MEAN] = float(np.mean(reqs["input_len"]))
        out[SENT_OUTPUT_MEAN] = float(np.mean(reqs["output_len"]))
    return out


def explicit_devices(config: Config) -> int:
    """``[cluster] devices_per_trial`` where it is set, else 0: only an explicit one spans nodes."""
    return config.cluster.trial.devices if config.cluster.trial.explicit else 0


def simulated_devices_per_node(config: Config, setup: SimulatorSetup | None = None) -> int | None:
    """``[cluster] devices_per_node``, else the simulated hardware's ``devices_per_node`` (None: neither):
    the count :mod:`msopt.launch.placement` splits a simulated trial by. ``setup``: ``config``'s
    ``[simulator]`` as the caller parsed it, whose hardware is loaded once for all its callers (None: the
    hardware TOML is read here)."""
    configured = config.cluster.devices_per_node
    if configured:
        return configured
    try:
        if setup is not None:
            return setup.hardware.devices_per_node
        return load_hardware(str(config.simulator.get("hardware", "")), config.catalog_dirs).devices_per_node
    except MsoptError:
        return None


@dataclass(frozen=True)
class SimulatorSetup:
    """The ``[simulator]`` table, checked once per run (each key as :mod:`msopt.config.keys` declares it).

    Attributes:
        table: the simulator's own keys (:data:`msopt.sim.simulator.SIM_KEYS`; ``catalog_dirs`` as a list).
        emulate: ``emulate_wall_time``.
        time_scale: ``time_scale``.
        eval_seconds: ``eval_seconds`` (None: unset).
        where: the file that set ``hardware``.
        run_seed: the run's top-level ``seed``.
        catalog_dirs: ``catalog_dirs``, a directory or a list of them as written, as a tuple: what every
            catalog lookup of the run passes (:meth:`hardware`, :meth:`model`).
    """

    table: Mapping[str, Any]
    emulate: bool
    time_scale: float
    eval_seconds: float | None
    where: str
    run_seed: int = 0
    catalog_dirs: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, section: Section, run_seed: int = 0,
                    workload: Mapping[str, Any] | None = None) -> SimulatorSetup:
        """Read and check ``[simulator]`` (``section``) once, at start-up: every key, the catalog
        entries and the workload, so that a bad value fails the run before it starts, not every
        evaluation; ``run_seed``: the run's top-level ``seed``; ``workload``: ``[simulator.workload]`` as the
        simulator runs it, the run's resolved ``[workload]`` over it
        (:func:`msopt.evaluate.workload.simulator_workload`; None: the section as written).

        Raises:
            ConfigError: naming the file that set the key, the key and the fix.
        """
        table = thaw(section.table)
        written = table.get("workload", {})
        if workload is not None and isinstance(written, Mapping) and (written or workload):
            table["workload"] = thaw(workload)
        where = section.where
        for key in table:
            if key not in SIMULATOR_KEYS and key != "workload":
                valid = sorted({*SIMULATOR_KEYS, "workload"})
                hint = close_matches(str(key), valid)
                did = f"did you mean '{hint[0]}'?" if hint else f"valid keys: {', '.join(valid)}"
                raise ConfigError(f"{where(key)}: unknown key '{key}' in [simulator]; {did}")
        for key in ("hardware", "model"):
            if key not in table:
                raise ConfigError(f"{where(key)}: [simulator] {key} is missing; name a catalog entry or a TOML file")
        for key, decl in SIMULATOR_KEYS.items():
            value = table.get(key, table.get("weight_dtype", "bf16") if key == "kv_dtype" else None)
            if value is not None:
                checked(where(key), "simulator", key, value, decl)
        dirs = table.pop("catalog_dirs", ())
        dirs = (dirs,) if isinstance(dirs, str) else tuple(dirs)
        if dirs:
            table["catalog_dirs"] = list(dirs)
        hardware = _catalog_entry(load_hardware, table, "hardware", dirs, where)
        _catalog_entry(load_model, table, "model", dirs, where)
        weight_dtype = table.get("weight_dtype", "bf16")
        try:
            hardware.peak_flops(weight_dtype)
        except SimulationError as exc:
            raise ConfigError(f"{where('weight_dtype')}: [simulator] weight_dtype: {exc}") from None
        workload = table.get("workload", {})
        if not isinstance(workload, Mapping):
            raise ConfigError(f"{where('workload')}: [simulator] workload must be a table, got {workload!r}; "
                              "write [simulator.workload]")
        try:
            workload_from_mapping(workload)
        except ConfigError as exc:
            raise ConfigError(f"{section.source_of('workload')}: {exc}") from None
        emulate, scale, secs = (table.pop(k, d) for k, d in (("emulate_wall_time", False), ("time_scale", 1.0),
                                                              ("eval_seconds", None)))
        return cls(table, bool(emulate), float(scale), float(secs) if secs is not None else None, where("hardware"),
                   run_seed, dirs)

    def model(self) -> Any:
        """The ``model`` catalog entry (:class:`msopt.sim.ModelSpec`)."""
        return load_model(str(self.table["model"]), self.catalog_dirs)

    def run(self, spec: LaunchSpec, *, values: Mapping[str, Any], fields: Sequence[FieldDecl],
            num_prompts: int | None = None, load: Mapping[str, float] | None = None,
            seed_offset: int = 0, bench_argv: Sequence[str] | None = None,
            field_load: Mapping[str, Any] | None = None, trace: TraceWindow | None = None) -> Any:
        """Simulate one evaluation; ``bench_argv`` is a benchmark command line whose load flags
        override the workload, ``field_load`` the load the configuration's own fields set
        (:func:`field_load_of`), ``trace`` the run's trace window (``ResolvedWorkload.window``) replayed.

        The simulator's seed is ``[simulator] seed`` + ``seed_offset`` (the eval id) + the run's
        top-level ``seed`` (``--seed``) shifted past any eval id, so two runs that differ only in
        ``--seed`` draw different workloads and noise, and seed 0 keeps the seeds of earlier runs.
        """
        return simulate_launch(spec, self._table(num_prompts, load, seed_offset), bench_argv, field_load,
                               personality=sim_personality_of(spec.engine), trace=trace)

    @cached_property
    def hardware(self) -> Hardware:
        """The ``[simulator] hardware`` entry, loaded at the first use and kept with this setup.

        Raises:
            ConfigError: the entry cannot be loaded.
        """
        return load_hardware(str(self.table.get("hardware", "")), self.catalog_dirs)

    def run_pd(self, launch: PdLaunch, *, num_prompts: int | None = None, load: Mapping[str, float] | None = None,
               seed_offset: int = 0, bench_argv: Sequence[str] | None = None,
               field_load: Mapping[str, Any] | None = None, trace: TraceWindow | None = None) -> Any:
        """Simulate one evaluation of a disaggregated trial (``bench_argv``, ``field_load``, ``trace``: as
        :meth:`run`)."""
        table = self._table(num_prompts, load, seed_offset)
        return simulate_disaggregated(launch.prefill[0], launch.decode[0], launch.counts, table, bench_argv,
                                      field_load, personality=sim_personality_of(launch.prefill[0].engine),
                                      trace=trace)

    def _table(self, num_prompts: int | None, load: Mapping[str, float] | None, seed_offset: int) -> dict[str, Any]:
        """The ``[simulator]`` table of one evaluation: its load over the workload, and its seed."""
        table = thaw(self.table)
        workload = dict(table.get("workload", {}))
        if num_prompts is not None:
            workload["num_prompts"] = int(num_prompts)
        workload.update(load or {})
        table["workload"] = workload
        table["seed"] = int(table.get("seed", 0)) + int(seed_offset) + (self.run_seed << 32)
        return table

    def emulate_wall_time(self, result: Any, elapsed: float) -> None:
        """Sleep so the evaluation takes the wall time a real one would (when enabled)."""
        if not self.emulate:
            return
        target = self.eval_seconds if self.eval_seconds is not None else result.duration * self.time_scale
        if target > elapsed:
            time.sleep(target - elapsed)


def field_load_of(benchmark: BenchmarkAdapter, values: Mapping[str, Any], req: EvalRequest) -> dict[str, Any] | None:
    """The load the benchmark takes from the configuration's own load fields
    (:meth:`~msopt.benchmarks.base.BenchmarkAdapter.field_load`) where the request sets none."""
    load = {k: v for k, v in benchmark.field_load(values).items() if k not in req.load}
    return load or None


#: Simulated server start-up: a fixed part (process and engine start, graph capture, warm-up), then
#: the weights read at :data:`SIM_LOAD_GB_S` (a model, not a measurement: issue 26 asks only that
#: simulated runs account for starts and reuses as real ones do).
SIM_STARTUP_BASE_S = 30.0
SIM_LOAD_GB_S = 2.0


def simulated_start_s(params_b: float, weight_dtype: str) -> float:
    """Simulated seconds one server start takes: :data:`SIM_STARTUP_BASE_S` + weights / :data:`SIM_LOAD_GB_S`."""
    return round(SIM_STARTUP_BASE_S + params_b * DTYPE_BYTES.get(weight_dtype, 2.0) / SIM_LOAD_GB_S, 3)


class SimRunner(EngineRunner):
    """Renders the engine's launch and runs it on the embedded simulator.

    Args:
        config: the effective config.
        engine: the engine adapter that renders the launch.
        ctx: the evaluator's run directory and devices.
        sim: ``[simulator]`` as the run parsed it once (None: parsed here, from ``config``).
        workload: ``[workload]`` as the run resolved it once (None: resolved here, a trace read).

    Like the real runner it keeps its (simulated) server for the next evaluation with the same
    server key: that one is journaled ``reused``, the others ``started`` with the simulated
    start-up time (:func:`simulated_start_s`).
    """

    def __init__(self, config: Config, engine: EngineAdapter, ctx: RunnerContext,
                 sim: SimulatorSetup | None = None, workload: ResolvedWorkload | None = None) -> None:
        super().__init__(config, engine, ctx)
        self.engine_section = engine.simulation_section(self.engine_section)  # no installed engine needed
        self.workload = workload if workload is not None else resolved_workload(config)
        self.sim = sim if sim is not None else SimulatorSetup.from_config(
            config.simulator, config.run.seed, simulator_workload(config, self.workload))
        self.benchmark = get_benchmark(config.run.benchmark)
        self.model_facts = self._model_facts()
        self._kept: str | None = None
        # a trial that spans nodes, simulated without a cluster (msopt simulate, --no-ray)
        self.virtual = virtual_nodes(explicit_devices(config), simulated_devices_per_node(config, self.sim))

    def _model_facts(self) -> ModelFacts:
        """The simulated model's facts, for the engine's start-up rules."""
        model = self.sim.model()
        self.start_s = simulated_start_s(model.params_b, str(self.sim.table.get("weight_dtype", "bf16")))
        self._is_moe = bool(model.is_moe)
        return ModelFacts.of_spec(model)

    def port_facts(self, spec: LaunchSpec) -> NodeFacts:
        """The simulated hardware's Atlas generation and the simulated model's experts (MC² operators on
        Atlas A2); the CANN version is not known (the newest pages' rules)."""
        hardware = str(self.sim.table.get("hardware", ""))
        entry = catalog_part(hardware) or hardware
        atlas = {"atlas-800i-a2": "A2", "atlas-800i-a3": "A3"}.get(entry)
        return NodeFacts(atlas=atlas, cann=None, mc2=self._is_moe)

    @property
    def kept_key(self) -> str | None:
        return self._kept

    def close(self) -> None:
        """Forget the simulated server kept running."""
        self._kept = None

    def _start(self, values: Mapping[str, Any], one_node: bool) -> str | None:
        """Record how this evaluation gets its simulated server; the key to keep on success."""
        key = server_key(self.config, self.engine, values) if one_node else None
        if key is not None and key == self._kept:
            self.last_server = {"start": "reused", "start_s": 0.0, "key": key, "kept": True}
        else:
            self.last_server = {"start": "started", "start_s": self.start_s, "key": key, "kept": False}
        self._kept = None
        return key

    def measure(self, values: Mapping[str, Any], req: EvalRequest, attempt: int) -> dict[str, Any]:
        """Simulate one evaluation; the log holds the rendered command line and the simulator's lines.

        Raises:
            RefusedError: the candidate breaks one of the engine's start-up rules (the same table
                the real path checks, :mod:`msopt.engines.rules`).
            EvaluationError: the configuration fails as the engine would (out of memory, ...).
        """
        if self.engine.is_disaggregated(self.engine_section):
            return self._measure_pd(values, req, attempt)
        nodes = self.ctx.nodes or self.virtual or self.ctx.placement
        specs = self.engine.render_nodes(Candidate(values, self.config.engine.fields, self.engine_section), port=0,
                                         nodes=nodes, rendezvous_port=0, workdir=self.ctx.run_dir)
        specs = self.plan_ports(specs)
        spec = specs[0]
        self.last_server = None
        check_rules(spec, values, self.engine_section, model=self.model_facts, rules=self.engine.startup_rules)
        self.backup(req, attempt, [("server" if i == 0 else f"node{i}", s) for i, s in enumerate(specs)])
        key = self._start(values, len(specs) == 1)
        t0 = time.monotonic()
        res = self.sim.run(spec, values=values, fields=self.config.engine.fields, num_prompts=req.num_prompts,
                           load=req.load, seed_offset=req.eval_id,
                           field_load=field_load_of(self.benchmark, values, req), trace=self.workload.window)
        log = self.ctx.log_path(req, attempt, "server")
        if log is not None:
            cmds = ["$ " + " ".join(spec.argv)] if len(specs) == 1 else [
                f"$ [node {n.rank} {n.address} devices {','.join(n.devices)}] " + " ".join(s.argv)
                for n, s in zip(nodes, specs, strict=True)]
            log.write_text("\n".join([*cmds, *res.log_lines]) + "\n", encoding="utf-8")
        self.sim.emulate_wall_time(res, time.monotonic() - t0)
        if res.error:
            raise EvaluationError(res.error)
        if key is not None and self.last_server is not None:
            self._kept = key
            self.last_server["kept"] = True
        return metrics_of(res)

    def _measure_pd(self, values: Mapping[str, Any], req: EvalRequest, attempt: int) -> dict[str, Any]:
        """A prefill/decode-disaggregated trial: every instance and the router rendered, both pools simulated."""
        nodes = self.ctx.nodes or self.virtual
        launch = render_pd_trial(self.engine, values, self.config, self.engine_section, self.ctx.devices, nodes,
                                 workdir=self.ctx.run_dir)
        launch = launch.with_instances(self.plan_ports(launch.instances))  # the HCCL port plan, as the real path's
        inner = without_pd(self.engine_section)
        self.last_server = None
        for spec in launch.instances:
            check_rules(spec, values, inner, model=self.model_facts, rules=self.engine.startup_rules)
        self._start(values, False)
        self.backup(req, attempt, [*launch.named(), ("router", launch.router),
                                   *([("controller", launch.controller)] if launch.controller else [])])
        t0 = time.monotonic()
        res = self.sim.run_pd(launch, num_prompts=req.num_prompts, load=req.load, seed_offset=req.eval_id,
                              field_load=field_load_of(self.benchmark, values, req), trace=self.workload.window)
        log = self.ctx.log_path(req, attempt, "server")
        if log is not None:
            roles = [(f"prefill {i}", s) for i, s in enumerate(launch.prefill)]
            roles += [(f"decode {i}", s) for i, s in enumerate(launch.decode)]
            cmds = [f"$ [{name}{f' node {launch.nodes[j]}' if len(nodes) > 1 else ''}] "
                    + " ".join(f"{k}={v}" for k, v in s.env.items()) + " " + " ".join(s.argv)
                    for j, (name, s) in enumerate(roles)]
            cmds += [f"$ [{name}] " + " ".join([*(f"{k}={v}" for k, v in s.env.items()), *s.argv])
                     for name, s in (("router", launch.router), ("controller", launch.controller)) if s is not None]
            log.write_text("\n".join([*cmds, *res.log_lines]) + "\n", encoding="utf-8")
        self.sim.emulate_wall_time(res, time.monotonic() - t0)
        if res.error:
            raise EvaluationError(res.error)
        return metrics_of(res)


def render_pd_trial(engine: EngineAdapter, values: Mapping[str, Any], config: Config, section: Mapping[str, Any],
                    devices: Sequence[str], nodes: Sequence[TrialNode], workdir: Path | None = None) -> PdLaunch:
    """A disaggregated trial as a simulated evaluation renders it (every instance and the router), on ``devices``
    (none: ``0 .. devices_per_trial-1``); the simulator prior renders it the same way.

    Raises:
        EvaluationError: the layout needs more devices than the trial holds, or cannot be rendered.
    """
    default = config.cluster.trial.device_ids()
    return engine.render_pd(Candidate(values, config.engine.fields, section), ports=[0] * 1024,
                            devices=list(devices) or default, workdir=workdir, nodes=nodes)

