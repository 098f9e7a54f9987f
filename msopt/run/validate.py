"""One validation pass, run by every command before it does anything.

Loading (:func:`msopt.config.load_settings`) checks the schema: top-level keys, scalars, field
declarations; :func:`msopt.config.split` makes the typed :class:`~msopt.config.Config` of the settings
(``-e`` checked against the files' search space, ``[workload]`` resolved: a trace read once). :func:`validate` then
asks each component to check its own part of the Config, in the order a run uses them, and returns
what it built so the caller does not build it again:

1. the search space (the field model), the swarm options, the objective, ``[capacity]``;
2. the engine adapter (registered name, its ``[<engine>]`` section and every field's position),
   what every launch renders (executable, ``others``, ``env`` names), ``[health_check]``, and
   field names that would collide with results.csv's columns;
3. the simulator's ``[simulator]`` table for a simulated run, else the benchmark adapter and its
   section (``BenchmarkAdapter.check``);
4. that the objective's and the capacity stage's metrics are ones the benchmark produces.

Every failure is a :class:`~msopt.errors.ConfigError` naming the file, the key and the fix.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msopt.benchmarks import BENCHMARKS, BenchmarkAdapter, get_benchmark
from msopt.config import Config, load_settings, split
from msopt.engines import ENGINES, EngineAdapter, get_engine
from msopt.engines.installed import Installed, installed_changes
from msopt.errors import ConfigError, MsoptError
from msopt.evaluate.evaluator import Parsed
from msopt.evaluate.health import HealthCheck
from msopt.evaluate.objective import Objective, check_metrics_available, run_objective
from msopt.evaluate.simulated import SimulatorSetup
from msopt.evaluate.workload import (
    WorkloadConfig,
    benchmark_table,
    resolved_workload,
    simulator_workload,
    workload_config,
)
from msopt.launch.render import Candidate, check_launch
from msopt.metrics import MEASURED_COLUMNS, METRICS, PERCENTILES, SIMULATED
from msopt.run.capacity import CapacityOptions, capacity_options, check_capacity_metrics
from msopt.run.store import TAIL_COLUMNS
from msopt.search import SEARCHERS, SwarmOptions, check_searcher, swarm_options
from msopt.sim.simulator import context_limit
from msopt.space import SearchSpace
from msopt.workload import TraceSummary
from msopt.workload.resolved import ResolvedWorkload


@dataclass(frozen=True)
class Validated:
    """The components a valid configuration builds.

    Attributes:
        config: the typed configuration validated (what the run's parts take).
        space: the search space of the searched engine.
        swarm: the swarm options.
        objective: the fitness function.
        capacity: the ``[capacity]`` options.
        engine: the engine adapter.
        benchmark: the benchmark adapter (None for a simulated run).
        simulator: the ``[simulator]`` table, checked (None for a real run).
        health: the ``[health_check]`` patterns, compiled with the engine's.
        produces: the metrics the run's measurements report.
        workload: the prompts and load of an evaluation (:mod:`msopt.evaluate.workload`).
        resolved: the ``[workload]`` table resolved once (:class:`~msopt.workload.resolved.ResolvedWorkload`:
            a trace's window, every row checked, and its summary), which the run's parts take.
        notes: what validate says of the run besides the components (the server's context limit
            against the trace's lengths).
    """

    config: Config
    space: SearchSpace
    swarm: SwarmOptions
    objective: Objective
    capacity: CapacityOptions
    engine: EngineAdapter
    benchmark: BenchmarkAdapter | None
    simulator: SimulatorSetup | None
    health: HealthCheck
    produces: frozenset[str]
    workload: WorkloadConfig | None = None
    resolved: ResolvedWorkload | None = None
    notes: tuple[str, ...] = ()

    @property
    def trace(self) -> TraceSummary | None:
        """The ``[workload] trace``'s summary (every row checked), or None without one."""
        return self.resolved.summary if self.resolved is not None else None

    @property
    def parsed(self) -> Parsed:
        """What every evaluator of the run reads, parsed here once (:class:`msopt.evaluate.Parsed`)."""
        return Parsed(self.simulator, self.health, self.resolved)


@dataclass(frozen=True)
class Loaded:
    """What :func:`load_installed` found.

    Attributes:
        checked: the validated configuration a run takes (the installation's values applied).
        installed: what the installed configuration changed, and the lines that say so.
        notes: what loading changed to read the original tool's spellings (``msopt validate`` says them).
    """

    checked: Validated
    installed: Installed
    notes: tuple[str, ...]


def registered_sections() -> tuple[str, ...]:
    """Top-level tables a configuration may hold besides the built-in ones: one per registered
    engine and benchmark, plugins (entry points) included."""
    return (*ENGINES.names(), *BENCHMARKS.names())


def load(config_path: str | os.PathLike[str] | None = None, engine: str | None = None, *,
         environ: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None,
         search: bool = True) -> Validated:
    """Load the configuration layers (a section for every registered engine and benchmark
    accepted), apply top-level ``overrides`` (command-line flags), :func:`msopt.config.split` them
    into the :class:`Config` and :func:`validate` it (``search``: see there).

    Raises:
        ConfigError: one line naming the file, the key and the fix.
    """
    settings = load_settings(config_path, engine, environ=environ, sections=registered_sections())
    if overrides:
        settings = settings.replace(**overrides)
    return validate(*split(settings), search=search)


def load_installed(config_path: str | os.PathLike[str] | None = None, engine: str | None = None, *,
                   overrides: Mapping[str, Any] | None = None, search: bool = True, devices_only: bool = False,
                   check: Callable[[Validated], None] | None = None) -> Loaded:
    """:func:`load`, then, when a run takes anything from the installed configuration
    (:func:`msopt.engines.installed.installed_changes`), validate the settings again with it applied (the
    workload resolved by the first validation is reused: a trace is read once).

    Args:
        config_path, engine, overrides, search: as :func:`load`'s.
        devices_only: apply the installation only when it sets the trial's devices (``msopt preflight``).
        check: called with the first validated configuration, before the installation is read (a command's
            own refusal, raised before any of the installation's).

    Returns:
        The validated configuration a run takes, what the installation changed, and the loading's notes.

    Raises:
        ConfigError: one line naming the file, the key and the fix.
    """
    settings = load_settings(config_path, engine, sections=registered_sections())
    if overrides:
        settings = settings.replace(**overrides)
    checked = validate(*split(settings), search=search)
    if check is not None:
        check(checked)
    got = installed_changes(checked.config)
    if got.devices is not None if devices_only else got.changes:
        installed = settings.with_installed(got.values, got.constants, got.devices)
        checked = validate(*split(installed, checked.resolved), search=search)
    return Loaded(checked, got, settings.notes)


def validate(config: Config, workload: ResolvedWorkload | None = None, *, search: bool = True) -> Validated:
    """Check every component's part of ``config``; see the module docstring for the order.

    Args:
        config: the typed configuration (:func:`msopt.config.split` makes it of the settings).
        workload: its ``[workload]`` resolved (``split`` returns it; None: resolved here, the trace read).
        search: the command searches (optimize, validate, decode), so at least one field must
            be a dimension; ``simulate`` evaluates the values and passes False.

    Raises:
        ConfigError: one line naming the file, the key and the fix.
    """
    name, fields, top = config.engine.name, config.engine.fields, config.scalars
    workload = workload if workload is not None else resolved_workload(config)  # the trace read here
    trace = workload.summary
    if trace is not None:
        _refuse_unreplayable(config)
    if name in ENGINES:  # an unknown engine is named below, where the adapter is needed
        ENGINES.get(name)().check_config(config)
    space = SearchSpace(fields)
    if search and not space.names:
        raise ConfigError(f"{config.engine.section.where('target_field')}: [{name}] has no searched field "
                          f"({len(fields)} field(s), all constant or derived), so a search would evaluate one "
                          "configuration over and over; give a field min < max or candidates, or evaluate it once "
                          "with `msopt simulate`")
    swarm = swarm_options(config)
    searcher = config.run.searcher
    if searcher not in SEARCHERS:
        raise ConfigError(f"{config.search.where('searcher')}: [search] searcher: unknown searcher {searcher!r} "
                          f"(valid: {', '.join(SEARCHERS.names())})")
    try:
        check_searcher(str(searcher))  # its optional dependency (tpe: optuna)
    except ConfigError as exc:
        raise ConfigError(f"{config.search.where('searcher')}: {exc}") from None
    try:
        objective = run_objective(config)
    except ConfigError as exc:
        raise ConfigError(f"{top.where('objective')}: 'objective': {exc}") from None
    capacity = capacity_options(config, workload)
    try:
        engine = get_engine(name)
    except ConfigError as exc:
        raise ConfigError(f"{top.where('engine')}: 'engine': {exc}") from None
    section = config.engine.section.table
    try:
        engine.check(fields, section)
    except ConfigError as exc:
        text = str(exc)
        where = config.engine.section.source
        named = any(text.startswith(src) for src in config.engine.section.layers)  # a field's error names its file
        raise ConfigError(text if named else f"{where}: [{name}]: {text}") from None
    try:
        check_launch(section, fields, name, engine.default_executable or ("server",))
    except ConfigError as exc:
        raise ConfigError(f"{config.engine.section.source}: {exc}") from None
    # a bad pattern fails here, not in every actor; the evaluators get this one (Validated.parsed)
    health = HealthCheck.from_config(config.health_check, name)
    taken = set(METRICS) | set(TAIL_COLUMNS) | set(MEASURED_COLUMNS)
    for decl in fields:
        if decl.name in taken:
            raise ConfigError(f"{decl.where}: the field name '{decl.name}' is a column of results.csv already "
                              "(a metric or msopt's own) and would lose its values there; rename the field, "
                              f"e.g. to '{decl.name}_value'")
    benchmark: BenchmarkAdapter | None = None
    simulator: SimulatorSetup | None = None
    bench_name = config.run.benchmark
    try:  # a simulated run records the benchmark too (run.json): a misspelt name is an error either way
        benchmark_adapter = get_benchmark(bench_name)
    except ConfigError as exc:
        raise ConfigError(f"{top.where('benchmark')}: 'benchmark': {exc}") from None
    if config.run.simulate:
        simulator = SimulatorSetup.from_config(config.simulator, config.run.seed, simulator_workload(config, workload))
        produces = frozenset(SIMULATED)
        produced_by = "simulator"
        check_capacity_metrics(capacity, [*SIMULATED[:5], *PERCENTILES], produced_by,
                               config.capacity.where("percentile"))
        # checked too: dropping `simulate` must not break it
        _check_benchmark(config, benchmark_adapter, workload)
    else:
        benchmark = benchmark_adapter
        _check_benchmark(config, benchmark, workload)
        bench_section = benchmark_table(config, workload)
        produces = frozenset(benchmark.produced(bench_section))
        note = benchmark.produced_note(bench_section)
        produced_by = f"{bench_name} ({note})" if note else bench_name
        check_capacity_metrics(capacity, sorted(produces), produced_by, config.capacity.where("percentile"))
    def objective_metrics() -> None:
        try:
            check_metrics_available(objective, produces, produced_by)
        except ConfigError as exc:
            raise ConfigError(f"{top.where('objective')}: {exc}") from None

    if not {METRICS[1], METRICS[2]} <= produces:
        objective_metrics()  # a benchmark without TTFT or TPOT at all: this line names what lacks and why
    _check_slo_statistics(config, produces, produced_by)  # then which statistic of them the SLOs can hold
    objective_metrics()
    notes = (_check_context(config, engine, space, trace),) if trace is not None else ()
    return Validated(config, space, swarm, objective, capacity, engine, benchmark, simulator, health, produces,
                     workload_config(config, workload), workload, tuple(n for n in notes if n))


def _check_context(config: Config, engine: EngineAdapter, space: SearchSpace, trace: TraceSummary) -> str | None:
    """The trace's requests against the server's context limit (the baseline launch's, or in a simulated run
    the engine's default for the ``[simulator]`` model): a note of how many the length policy changed, or
    None where the limit is not known.

    Raises:
        ConfigError: requests as sent are longer than the limit (the server would fail them), naming how
            many and the ``[workload]`` keys that say what to do with them.
    """
    section = config.engine.section.table
    if engine.is_disaggregated(section):
        return None
    try:
        values = space.decode(space.encode({})).values
        with tempfile.TemporaryDirectory() as tmp:
            spec = engine.render(Candidate(dict(values), config.engine.fields, section), port=0, devices=[],
                                 workdir=Path(tmp))
        found = context_limit(spec, config.simulator.table if config.run.simulate else None, engine.sim_personality)
    except MsoptError:  # a launch only the real engine can read: its own start-up says
        return None
    if found is None:
        return None
    limit, why, cuts = found
    longer = trace.over(limit)
    # an engine that cuts outputs refuses only a prompt that fills the context (vLLM: sim personality's
    # cuts_output_to_context); the others refuse any request longer than it, input plus output
    over = trace.prompts_over(limit) if cuts else longer
    wl = config.workload
    if over:
        over_what = (f"have prompts of at least {why} {limit}, which leave no room for output (the longest "
                     f"request {trace.longest():,} tokens)" if cuts else f"are longer than {why} {limit} (input + "
                     f"output tokens; the longest {trace.longest():,})")
        raise ConfigError(f"{wl.where('trace')}: [workload] trace {wl.get('trace')}: {over:,} of {trace.requests:,} "
                          f"requests {over_what}, and the server would fail them; set [workload] max_model_len = "
                          f"{limit} with length_policy = \"clip\" (cut their prompts), \"drop\" (leave them out) or "
                          f"\"scale\" (shrink every length by one factor), or raise the limit")
    c = trace.counts
    cut = (f"; {longer:,} request(s) fit only with their output cut to the context left: the server answers "
           f"them with fewer output tokens than the trace asks" if longer else "")
    if not c.over_limit:
        return f"context: {why} {limit}; " + (cut[2:] if cut else "every request fits")
    policy = wl.get("length_policy", "clip")
    what = {"clip": "clipped to it", "drop": "dropped", "scale": f"fit by scaling every length by {c.scale:.3g}"}
    return (f"context: {why} {limit}; {c.over_limit:,} request(s) longer than [workload] max_model_len "
            f"{wl.get('max_model_len')}: {what.get(str(policy), str(policy))} "
            f"([workload] length_policy = \"{policy}\")" + cut)


def _refuse_unreplayable(config: Config) -> None:
    """A real run on ``[workload] trace`` needs a benchmark that replays it (``BenchmarkAdapter.replays_trace``:
    its send times and shared prefixes); the simulator always does."""
    bench = config.run.benchmark
    if not config.run.simulate and bench in BENCHMARKS and not BENCHMARKS.get(bench).replays_trace:
        replaying = ", ".join(n for n in BENCHMARKS.names() if BENCHMARKS.get(n).replays_trace)
        raise ConfigError(f"{config.workload.where('trace')}: [workload] trace: benchmark {bench!r} cannot replay "
                          f"a request trace (its send times and shared prefixes); set benchmark = \"builtin\" "
                          f"(replaying: {replaying}), or simulate")


def _check_slo_statistics(config: Config, produces: frozenset[str], source: str) -> None:
    """A statistic ``[slo]`` (or ``--slo``) holds must be one the run's measurements report."""
    slos = config.run.slos
    for metric, column, mean in (("ttft", slos.ttft_metric, METRICS[1]), ("tpot", slos.tpot_metric, METRICS[2])):
        if column in produces:
            continue
        have = (["mean"] if mean in produces else []) + [c.rpartition("_")[2] for c in sorted(produces)
                                                         if c.startswith(f"{metric}_p")]
        stat = "mean" if column == mean else column.rpartition("_")[2]
        raise ConfigError(f"{config.slo.where(metric)}: [slo] {metric}: {source} does not report the {stat} "
                          f"of {metric} ({column}); it reports {', '.join(have) or 'no statistic of it'}: use "
                          f"one of those")


def _check_benchmark(config: Config, benchmark: BenchmarkAdapter, workload: ResolvedWorkload) -> None:
    section, name = config.benchmark, config.run.benchmark
    replay = {"workload": workload} if workload.is_trace and benchmark.replays_trace else {}
    try:
        benchmark.check(config.engine.fields, workload.benchmark_section(name, section.table), **replay)
    except ConfigError as exc:
        text = str(exc)
        where = section.source
        raise ConfigError(text if text.startswith(where) else f"{where}: [{name}]: {text}") from None
