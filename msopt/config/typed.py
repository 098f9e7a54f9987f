"""The typed run and cluster configuration: built once from validated :class:`Settings`.

:class:`RunConfig` holds the top-level scalars a run reads and :class:`ClusterConfig` the
``[cluster]`` table, each key once, with its one default: the packaged ``defaults.toml`` (every
Settings merges it, so those keys are always present), or, for the few keys it leaves unset,
:data:`msopt.config.keys.UNSET_DEFAULTS`, where each checked key is declared. Both are frozen,
picklable dataclasses: a Settings carries its :class:`Config` (``settings.config``) to the Ray actors,
which read these fields instead of raw keys. The workload (prompts, load) is the benchmark's to say:
:mod:`msopt.evaluate.workload`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from msopt.checks import port_range
from msopt.config.keys import SECTION_TABLES, UNSET_DEFAULTS, checked
from msopt.slo import Slos, parse_slo_table
from msopt.space import SearchSpace
from msopt.space.fields import FieldDecl

__all__ = ["ClusterConfig", "Config", "EngineConfig", "PriorConfig", "RunConfig", "Section", "Table", "TrialShape",
           "build_config", "slos", "top_level"]


@dataclass(frozen=True)
class RunConfig:
    """The top-level scalars of a run (docs/configuration.md), validated at load time.

    Attributes:
        engine: the searched engine's section.
        benchmark: the benchmark adapter's name.
        objective: the objective's name.
        simulate: the embedded simulator stands in for engine and benchmark.
        mode: "sync" or "async".
        duplicate_policy: "reuse" or "rerun".
        seed: seeds the swarm, the simulator and the workload.
        output: parent directory of run directories.
        particles_time_out: seconds one evaluation may take.
        sample_size: caps num_prompts during the search.
        max_launches: the launch budget (0: none).
        backup: keep every attempt's launch record (``--backup``).
        n_particles: particles of the swarm.
        iters: swarm iterations after the baseline.
        pso_top_k: ``[data_storage] pso_top_k``.
        searcher: ``[search] searcher``.
        slos: ``ttft_slo``, ``tpot_slo``, ``success_rate_slo``.
    """

    engine: str
    benchmark: str
    objective: str
    simulate: bool
    mode: str
    duplicate_policy: str
    seed: int
    output: str
    particles_time_out: float
    sample_size: int
    max_launches: int
    backup: bool
    n_particles: int
    iters: int
    pso_top_k: int
    searcher: str
    slos: Slos

    @property
    def reuse_duplicates(self) -> bool:
        """``duplicate_policy = "reuse"``."""
        return self.duplicate_policy == "reuse"


@dataclass(frozen=True)
class TrialShape:
    """``[cluster] devices_per_trial``, resolved once: what every part of a run reads of it.

    Attributes:
        devices: the devices (cores for ``accelerator = "cpu"``) one trial holds, what the pool reserves:
            the key, else the ternary_factories product, else 1.
        explicit: the key is set; only then does a trial span nodes, name device ids for the
            driver's pre-checks and simulated launches, or check PD instances against it.
    """

    devices: int
    explicit: bool

    @classmethod
    def of(cls, value: int | None, fields: tuple[FieldDecl, ...]) -> TrialShape:
        """The shape of ``devices_per_trial = value`` (None: unset) for a search space of ``fields``."""
        if value is not None:
            return cls(int(value), True)
        products = SearchSpace(fields).ternary_products()
        return cls(int(products[0]) if products else 1, False)

    def device_ids(self) -> list[str]:
        """``0 .. devices-1`` as strings where the key is set (empty where it is unset or 0)."""
        return [str(i) for i in range(self.devices)] if self.explicit else []


@dataclass(frozen=True)
class ClusterConfig:
    """``[cluster]``, validated at load time.

    Attributes:
        accelerator: "NPU", "GPU", "cpu" or "none", as written.
        trial: ``devices_per_trial``, resolved.
        devices_per_node: the key as set (None: the cluster's largest node; simulated: the hardware's).
        max_concurrent_trials: 0 for no cap.
        ports: the ``ports`` range as (low, high), None when unset.
        reuse_servers: keep a server for the next evaluation with its server key.
    """

    accelerator: str
    trial: TrialShape
    devices_per_node: int | None
    max_concurrent_trials: int
    ports: tuple[int, int] | None
    reuse_servers: bool

    @property
    def accelerator_key(self) -> str | None:
        """The Ray resource name ("NPU", "GPU", "CPU" for "cpu": cores); None for "none"."""
        return None if self.accelerator.lower() == "none" else self.accelerator.upper()

    @property
    def cpu(self) -> bool:
        """vLLM's CPU build: ``devices_per_trial`` counts cores."""
        return self.accelerator.lower() == "cpu"


@dataclass(frozen=True)
class PriorConfig:
    """The simulator prior's ``[search]`` keys, validated at load time (defaults: defaults.toml, and
    :data:`~msopt.config.keys.UNSET_DEFAULTS` for ``prior_picks``).

    Attributes:
        mode: ``prior``: "auto", "simulator" or "none".
        evaluations: ``prior_evaluations``: simulated evaluations of the prior search.
        picks: ``prior_picks``: how many particles besides the baseline start at the prior's top
            predictions (None: all of them).
        screen: moves a particle proposes per evaluation, the prior ranks them and the best
            predicted is taken (0 or 1: no screening).
        explore: the chance a screened particle takes its first proposal unranked instead, so a
            wrong model cannot trap the search.
        refit: after each iteration, refit the simulator's efficiency factors to the run's own
            measurements (:func:`msopt.sim.calibrate.fit_hardware`, regularised toward the
            catalog) and predict with the refitted hardware from then on.
        correct: after each iteration that measured new configurations on the real engine, correct
            the hardware entry's time scales to them (:meth:`msopt.prior.SimulatorPrior.correct`)
            where that lowers the error on launches the fit did not see.
    """

    mode: str
    evaluations: int
    picks: int | None
    screen: int
    explore: float
    refit: bool
    correct: bool


class Table(Mapping[str, Any]):
    """A read-only, picklable table of the merged TOML: nested tables are Tables, arrays tuples.

    Mapping proxies do not pickle, and a component's table travels to the Ray actors.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = {str(k): _frozen(v) for k, v in (data or {}).items()}

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Table({self._data!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Table, (self._data,))


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return value if isinstance(value, Table) else Table(value)
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


@dataclass(frozen=True)
class Section:
    """One component's top-level table, as the layers merged it, with the file that set each key:
    what the component's own parser reads (and names in its messages), never the whole Settings.

    Attributes:
        name: the table's name (``simulator``, ``capacity``, an engine's or a benchmark's).
        table: its keys (empty when no layer sets it).
        origin: dotted key inside the table (``""``: the table itself) -> the file that set it.
        fallback: the file named where no key says (the highest layer).
        source: the highest layer that set a key of the table (for messages about the table).
        user: the keys (dotted, inside the table) a user's file set, not the packaged defaults.
        layers: the files merged, lowest first.
    """

    name: str
    table: Table = field(default_factory=Table)
    origin: Table = field(default_factory=Table)
    fallback: str = "<defaults>"
    source: str = "<defaults>"
    user: frozenset[str] = frozenset()
    layers: tuple[str, ...] = ()

    def where(self, key: str = "") -> str:
        """The file that set ``key`` (dotted inside the table), or its nearest enclosing table."""
        parts = key.split(".") if key else []
        for i in range(len(parts), -1, -1):
            src = self.origin.get(".".join(parts[:i]))
            if src:
                return str(src)
        return self.fallback

    def source_of(self, key: str) -> str:
        """The highest layer that set ``key`` (dotted inside the table) or a key under it."""
        hits = [self.layers.index(v) for k, v in self.origin.items()
                if (k == key or k.startswith(key + ".")) and v in self.layers]
        return self.layers[max(hits)] if hits else self.where(key)

    def get(self, key: str, default: Any = None) -> Any:
        """A key of the table."""
        return self.table.get(key, default)

    def sub(self, key: str) -> Mapping[str, Any]:
        """A nested table, empty when absent or not a table."""
        value = self.table.get(key)
        return value if isinstance(value, Mapping) else Table()


@dataclass(frozen=True)
class EngineConfig:
    """The searched engine: its name, its field declarations and its ``[<engine>]`` section, which
    its adapter reads (:class:`msopt.engines.base.EngineAdapter`)."""

    name: str
    fields: tuple[FieldDecl, ...]
    section: Section


@dataclass(frozen=True)
class Config:
    """Everything typed that a Settings resolves to (see the module docstring)."""

    run: RunConfig
    cluster: ClusterConfig
    prior: PriorConfig
    #: the searched engine and its section
    engine: EngineConfig
    #: ``[<benchmark>]`` of the run's benchmark
    benchmark: Section
    #: ``[simulator]`` (read by :class:`msopt.evaluate.simulated.SimulatorSetup` and the prior)
    simulator: Section
    #: ``[capacity]`` (:func:`msopt.run.capacity.capacity_options`)
    capacity: Section
    #: ``[health_check]`` (:class:`msopt.evaluate.health.HealthCheck`)
    health_check: Section
    #: ``[pso_options]`` and ``[pso_strategy]`` (:class:`msopt.search.options.SwarmOptions`)
    pso_options: Section
    pso_strategy: Section
    #: ``[workload]`` (:mod:`msopt.workload.table`)
    workload: Section
    #: ``[kubectl]``, the original tool's (:mod:`msopt.engines.mindie.original`)
    kubectl: Section
    #: ``[slo]`` (its limits and statistics are in ``run.slos``; this says which file set each)
    slo: Section
    #: ``[search]`` (its prior keys are in ``prior``, its searcher in ``run.searcher``; this says which file set each)
    search: Section
    #: the top-level scalars, with the file that set each (the objective reads its keys here:
    #: :func:`msopt.evaluate.objective.run_objective`)
    scalars: Section
    #: the effective configuration as TOML text (a run directory's config.toml)
    text: str = ""

    @property
    def catalog_dirs(self) -> tuple[str, ...]:
        """``[simulator] catalog_dirs``, a directory or a list of them as written, parsed once by
        :func:`build_config`: the directories every catalog lookup of the run passes."""
        return tuple(self.simulator.get("catalog_dirs", ()))


def _table(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = data.get(name)
    return value if isinstance(value, Mapping) else {}


def _get(data: Mapping[str, Any], dotted: str) -> Any:
    table, _, key = dotted.rpartition(".")
    where = _table(data, table) if table else data
    return where[key] if key in where else UNSET_DEFAULTS[dotted]


def slos(data: Mapping[str, Any]) -> Slos:
    """The SLOs of merged settings data: the limits, and the statistic ``[slo]`` names (else the means)."""
    terms = parse_slo_table(_table(data, "slo"), "[slo]")
    base = Slos(float(data["ttft_slo"]), float(data["tpot_slo"]), float(data["success_rate_slo"]))
    return Slos(base.ttft, base.tpot, base.success_rate,
                terms["ttft"].column if "ttft" in terms else base.ttft_metric,
                terms["tpot"].column if "tpot" in terms else base.tpot_metric)


def section(data: Mapping[str, Any], name: str, origin: Mapping[str, str] = {},  # noqa: B006  read only
            sources: tuple[str, ...] = (), defaults: str = "") -> Section:
    """The :class:`Section` ``name`` of merged settings data, with its keys' files from ``origin``
    (dotted key -> file) and ``sources`` (the layers, lowest first)."""
    prefix = name + "."
    own = {k[len(prefix):]: v for k, v in origin.items() if k.startswith(prefix)}
    if name in origin:
        own[""] = origin[name]
    best = max((sources.index(v) for v in own.values() if v in sources), default=-1)
    fallback = sources[-1] if sources else "<defaults>"
    user = frozenset(k for k, v in own.items() if k and v != defaults)
    return Section(name, Table(_table(data, name)), Table(own), fallback,
                   sources[best] if best >= 0 else own.get("", fallback), user, tuple(sources))


def build_config(data: Mapping[str, Any], engine: str, fields: tuple[FieldDecl, ...],
                 origin: Mapping[str, str] = {}, sources: tuple[str, ...] = (),  # noqa: B006  read only
                 defaults: str = "") -> Config:
    """The typed configuration of merged, load-time-validated settings data (defaults.toml merged);
    ``origin``, ``sources`` and ``defaults`` (the packaged defaults' path) say which file set each key."""
    run = RunConfig(
        engine=engine, benchmark=str(data["benchmark"]), objective=str(data["objective"]),
        simulate=bool(data["simulate"]), mode=str(data["mode"]), duplicate_policy=str(data["duplicate_policy"]),
        seed=int(data["seed"]), output=str(data["output"]), particles_time_out=float(data["particles_time_out"]),
        sample_size=int(data["sample_size"]), max_launches=int(_get(data, "max_launches") or 0),
        backup=bool(_get(data, "backup")), n_particles=int(data["n_particles"]), iters=int(data["iters"]),
        pso_top_k=int(_table(data, "data_storage")["pso_top_k"] or 0), searcher=str(_get(data, "search.searcher")),
        slos=slos(data))
    cluster = _table(data, "cluster")
    per_node = _get(data, "cluster.devices_per_node")
    picks = _get(data, "search.prior_picks")
    prior = PriorConfig(mode=str(_get(data, "search.prior")), evaluations=int(_get(data, "search.prior_evaluations")),
                        picks=None if picks is None else int(picks), screen=int(_get(data, "search.screen")),
                        explore=float(_get(data, "search.explore")), refit=bool(_get(data, "search.refit")),
                        correct=bool(_get(data, "search.correct")))

    def part(name: str) -> Section:
        return section(data, name, origin, sources, defaults)

    simulator = part("simulator")
    if "catalog_dirs" in simulator.table:  # parsed here once: a directory or a list of them
        dirs = checked(simulator.where("catalog_dirs"), "simulator", "catalog_dirs", simulator.get("catalog_dirs"),
                       SECTION_TABLES["simulator"]["catalog_dirs"])
        simulator = replace(simulator, table=Table({**simulator.table,
                                                    "catalog_dirs": (dirs,) if isinstance(dirs, str) else dirs}))

    return Config(run, ClusterConfig(
        accelerator=str(cluster["accelerator"]), trial=TrialShape.of(_get(data, "cluster.devices_per_trial"), fields),
        devices_per_node=int(per_node) if per_node else None,
        max_concurrent_trials=int(cluster["max_concurrent_trials"] or 0),
        ports=port_range(_get(data, "cluster.ports")), reuse_servers=bool(cluster["reuse_servers"])), prior,
        engine=EngineConfig(engine, fields, part(engine)), benchmark=part(run.benchmark), simulator=simulator,
        capacity=part("capacity"), health_check=part("health_check"), pso_options=part("pso_options"),
        pso_strategy=part("pso_strategy"), workload=part("workload"), kubectl=part("kubectl"), slo=part("slo"),
        search=part("search"), scalars=top_level(data, origin, sources, defaults))


def top_level(data: Mapping[str, Any], origin: Mapping[str, str] = {},  # noqa: B006  read only
              sources: tuple[str, ...] = (), defaults: str = "") -> Section:
    """The top-level scalars of merged settings data as a :class:`Section` named ``""``, each key with
    the file that set it (``Section.where("objective")``)."""
    table = {k: v for k, v in data.items() if not isinstance(v, (Mapping, list, tuple))}
    own = {k: v for k, v in origin.items() if k in table}
    best = max((sources.index(v) for v in own.values() if v in sources), default=-1)
    fallback = sources[-1] if sources else "<defaults>"
    return Section("", Table(table), Table(own), fallback, sources[best] if best >= 0 else fallback,
                   frozenset(k for k, v in own.items() if v != defaults), tuple(sources))
