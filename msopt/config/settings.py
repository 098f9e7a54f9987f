"""TOML configuration layering and validation into one immutable :class:`Settings`.

Layers, lowest first: the packaged ``defaults.toml`` < the file named by
``$MODEL_EVAL_STATE_CONFIG_PATH`` (kept for users of the original tool) < the ``-c/--config``
file. Tables merge key by key; any array (``[[vllm.target_field]]`` included) is replaced whole
by the higher layer (:mod:`msopt.config.layers` reads and merges the files, :mod:`msopt.config.keys`
checks the keys). Settings are passed to whoever needs them: there is no global instance.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from msopt.config.keys import check_keys, check_scalars
from msopt.config.layers import (
    dump_toml,
    freeze,
    merge,
    read_toml,
    resolve_config_path,
    resolve_launch_paths,
    same_toml,
    thaw,
)
from msopt.config.optix import map_optix, unread_environment
from msopt.config.original import (
    VLLM_IMPLICIT_FLAGS,
    map_ais_bench,
    map_health_check,
    map_vllm_env_flags,
    refuse_no_equivalent,
)
from msopt.config.typed import Config, build_config
from msopt.errors import ConfigError
from msopt.slo import parse_slo_table
from msopt.space import SearchSpace
from msopt.space.fields import FieldDecl, parse_field
from msopt.workload.resolved import ResolvedWorkload
from msopt.workload.table import apply_workload, workload_settings

ENV_CONFIG = "MODEL_EVAL_STATE_CONFIG_PATH"
#: The most ``target_field`` entries an engine section may declare.
MAX_FIELDS = 256
DEFAULTS_PATH = Path(__file__).with_name("defaults.toml")


@dataclass(frozen=True)
class Settings:
    """The effective configuration: merged, validated, immutable.

    Attributes:
        data: the merged configuration, read-only mappings and tuples.
        engine: the section whose ``target_field`` list is the search space.
        fields: that section's field declarations.
        sources: the files merged, lowest layer first.
        config_path: the ``-c`` file, if any.
        origin: dotted key -> the file that set it (top-level keys and sections).
        notes: what loading changed to read the original tool's spellings (``msopt validate``
            prints them).
    """

    data: Mapping[str, Any]
    engine: str
    fields: tuple[FieldDecl, ...]
    sources: tuple[str, ...]
    config_path: str | None = None
    origin: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __reduce__(self) -> tuple[Any, ...]:  # mapping proxies do not pickle; Ray ships Settings
        return (_rebuild_settings, (thaw(self.data), self.engine, self.fields, self.sources,
                                    self.config_path, dict(self.origin), self.notes, self.config))

    @property
    def config(self) -> Config:
        """The typed run and cluster configuration (:mod:`msopt.config.typed`), built once per
        Settings (at load time; an unpickled Settings, in an actor, brings its own along)."""
        cached: Config | None = self.__dict__.get("_config")
        if cached is None:
            cached = replace(build_config(self.data, self.engine, self.fields, self.origin, self.sources,
                                          str(DEFAULTS_PATH)), text=self.to_toml())
            object.__setattr__(self, "_config", cached)
        return cached

    def get(self, key: str, default: Any = None) -> Any:
        """A top-level value."""
        return self.data.get(key, default)

    def section(self, name: str) -> Mapping[str, Any]:
        """A top-level table, empty when absent."""
        value = self.data.get(name)
        return value if isinstance(value, Mapping) else MappingProxyType({})

    def where(self, key: str) -> str:
        """The file that set a dotted key (or its nearest enclosing table)."""
        parts = key.split(".")
        for i in range(len(parts), 0, -1):
            src = self.origin.get(".".join(parts[:i]))
            if src:
                return src
        return self.sources[-1] if self.sources else "<defaults>"

    def replace(self, **top_level: Any) -> Settings:
        """A copy with top-level keys overridden (CLI flags such as --particles, ``msopt.optimize``'s keywords).

        Raises:
            ConfigError: a key that is not a top-level key (with close matches), or a value out of range.
        """
        check_keys(top_level, "<command line>", tuple(self.data))
        data = thaw(self.data)
        slo = top_level.get("slo")
        if isinstance(slo, Mapping):  # --slo names some metrics: the file's [slo] keeps the others
            top_level = {**top_level, "slo": {**data.get("slo", {}), **slo}}
        data.update(top_level)
        origin = dict(self.origin)
        origin.update({k: "<command line>" for k in top_level})
        check_scalars(data, origin)
        if isinstance(slo, Mapping):
            _apply_slo(data, origin, conflicts=False)
        out = Settings(freeze(data), self.engine, self.fields, self.sources, self.config_path,
                       MappingProxyType(origin), self.notes)
        out.config  # noqa: B018  built once, after the checks
        return out

    def with_field_values(self, values: Mapping[str, Any], constants: Mapping[str, Any] | None = None) -> Settings:
        """A copy whose searched section's fields named in ``values`` have that ``value`` (the baseline
        the original tool took from the installed configuration, msopt.engines.installed), and those named
        in ``constants`` that ``constant`` (a value the installed configuration leaves the only one)."""
        constants = constants or {}
        if not values and not constants:
            return self
        data = thaw(self.data)
        raws = data[self.engine]["target_field"]
        for raw in raws:
            if isinstance(raw, dict) and raw.get("name") in values:
                raw["value"] = values[raw["name"]]
            if isinstance(raw, dict) and raw.get("name") in constants:
                raw["constant"] = constants[raw["name"]]
                raw.pop("value", None)
        where = self.origin.get(f"{self.engine}.target_field", self.sources[-1] if self.sources else "<defaults>")
        fields = tuple(parse_field(r, source=where, section=self.engine, index=i) for i, r in enumerate(raws))
        out = Settings(freeze(data), self.engine, fields, self.sources, self.config_path, self.origin, self.notes)
        out.config  # noqa: B018  built once, after the checks
        return out

    def with_installed(self, values: Mapping[str, Any], constants: Mapping[str, Any],
                       devices: tuple[int, str] | None) -> Settings:
        """A copy with what a run takes from the installed configuration
        (:func:`msopt.engines.installed.installed_changes`): the fields' baseline ``value``s, the ``constant``s
        it leaves, and ``[cluster] devices_per_trial`` (with the file it was read from)."""
        out = self.with_field_values(values, constants)
        return out.with_cluster("devices_per_trial", devices[0], devices[1]) if devices else out

    def with_cluster(self, key: str, value: Any, source: str) -> Settings:
        """A copy with ``[cluster] key = value``, set by ``source`` (the installed file it was read from)."""
        data = thaw(self.data)
        data.setdefault("cluster", {})[key] = value
        origin = {**self.origin, f"cluster.{key}": source}
        out = Settings(freeze(data), self.engine, self.fields, self.sources, self.config_path,
                       MappingProxyType(origin), self.notes)
        out.config  # noqa: B018  built once, after the checks
        return out

    def relabeled(self, source: str, label: str, keys: Mapping[str, str] | None = None) -> Settings:
        """A copy whose keys set by the file ``source`` name ``label`` as their origin instead, and each
        dotted key of ``keys`` its own: for a configuration built in memory (``msopt optimize --model``),
        whose temporary file names nothing a user could open or fix."""
        keys = keys or {}
        origin = {k: keys.get(k, label if src == source else src) for k, src in self.origin.items()}
        origin.update(keys)
        sources = tuple(label if s == source else s for s in self.sources)
        top = sources[-1] if sources else "<defaults>"
        where = origin.get(f"{self.engine}.target_field", origin.get(self.engine, top))
        raws = self.data[self.engine].get("target_field", ())
        fields = tuple(parse_field(thaw(r), source=where, section=self.engine, index=i) for i, r in enumerate(raws))
        path = None if self.config_path == source else self.config_path
        notes = tuple(n.replace(source, label) for n in self.notes)
        out = Settings(self.data, self.engine, fields, sources, path, MappingProxyType(origin), notes)
        out.config  # noqa: B018  built once, with the new origins
        return out

    def to_toml(self) -> str:
        """The effective configuration as TOML text (saved in every run directory).

        Raises:
            ConfigError: the text would not read back as this configuration.
        """
        text = dump_toml(self.data)
        try:
            back = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"the effective configuration does not read back as TOML ({exc})") from None
        if not same_toml(back, thaw(self.data)):
            raise ConfigError("the effective configuration does not read back equal from TOML; "
                              "report this as a bug with your -c file")
        return text

    def scalars(self) -> dict[str, Any]:
        """The effective top-level scalars (n_particles, iters, SLOs, ...)."""
        return {k: v for k, v in self.data.items() if not isinstance(v, (Mapping, tuple))}


def _rebuild_settings(data: dict[str, Any], engine: str, fields: tuple[FieldDecl, ...],
                      sources: tuple[str, ...], config_path: str | None, origin: dict[str, str],
                      notes: tuple[str, ...] = (), config: Config | None = None) -> Settings:
    out = Settings(freeze(data), engine, fields, sources, config_path, MappingProxyType(origin), notes)
    if config is not None:
        object.__setattr__(out, "_config", config)
    return out


def load_settings(
    config_path: str | os.PathLike[str] | None = None,
    engine: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    sections: Iterable[str] = (),
) -> Settings:
    """Load, merge and validate the configuration layers.

    Args:
        config_path: the ``-c`` file (highest layer); absolute, relative or a bare name.
        engine: the section whose target_field list is searched; default: the ``engine`` key,
            else the one the user's files mean (:func:`file_engine`), else ``vllm``.
        environ: the environment to read ``$MODEL_EVAL_STATE_CONFIG_PATH`` from (default
            ``os.environ``).
        cwd: the directory relative paths are resolved against (default: the current one).
        sections: further top-level tables to accept: the sections of plugin engines and
            benchmarks (:func:`msopt.run.validate.registered_sections`).

    Raises:
        ConfigError: one line naming the file, the key and the fix.
    """
    env = os.environ if environ is None else environ
    layers: list[tuple[str, dict[str, Any]]] = [(str(DEFAULTS_PATH), read_toml(DEFAULTS_PATH, "packaged defaults"))]
    # optix's settings read it in any case (pydantic-settings): the lower-case spelling too
    env_path = env.get(ENV_CONFIG) or env.get(ENV_CONFIG.lower())
    if env_path:
        p = resolve_config_path(env_path, cwd)
        layers.append((str(p), read_toml(p, f"config file (from ${ENV_CONFIG})")))
    cpath: Path | None = None
    if config_path is not None:
        cpath = resolve_config_path(config_path, cwd)
        layers.append((str(cpath), read_toml(cpath)))

    data: dict[str, Any] = {}
    origin: dict[str, str] = {}
    extra = tuple(sections)
    notes: list[str] = []
    for source, layer in layers:
        refuse_no_equivalent(layer, source)
        check_keys(layer, source, extra)
        mapped = map_health_check(layer, source)
        if mapped != layer:
            notes.append(f"{source}: [health_check.*_errors.*_patterns] (the original tool's spelling) read as "
                         "[health_check.service|benchmark.fatal|retryable]")
        mapped, moved = map_ais_bench(mapped, source)
        notes += moved
        if source != str(DEFAULTS_PATH):
            mapped = resolve_launch_paths(mapped, Path(source).parent)
        merge(data, mapped, source, origin)
    check_scalars(data, origin)
    _apply_slo(data, origin, conflicts=True)
    apply_workload(data, origin, str(DEFAULTS_PATH))

    by_file = file_engine(origin, tuple(src for src, _ in layers))
    keyed = origin.get("engine") not in (None, str(DEFAULTS_PATH))  # a user's file sets the engine key
    eng = engine or (data.get("engine") if keyed or not by_file else by_file[0]) or "vllm"
    if by_file and by_file[2] and eng == by_file[0] and origin.get("benchmark") in (None, str(DEFAULTS_PATH)):
        data["benchmark"] = by_file[2]  # the original's pair: its default benchmark with its default engine
    notes += map_optix(data, origin, eng, str(DEFAULTS_PATH)) + unread_environment(env)
    section = data.get(eng)
    if not isinstance(section, Mapping):
        have = [k for k, v in data.items() if isinstance(v, Mapping) and "target_field" in v]
        raise ConfigError(f"{layers[-1][0]}: engine '{eng}' has no [{eng}] section; "
                          f"use -e with one of: {', '.join(have) or 'vllm'}, or add [[{eng}.target_field]]")
    if "wait_start_time" in data:
        notes.append(f"top-level wait_start_time (the original tool's) read as [{eng}] wait_start_time")
    _place_wait_start_time(data, origin, eng)
    if eng == "vllm":
        notes += [f"[[vllm.target_field]] '{name}' (config_position = \"env\") rendered as "
                  f"{VLLM_IMPLICIT_FLAGS[name]}, as the original tool's vLLM command did"
                  for name in map_vllm_env_flags(data)]
    section = data[eng]
    raw_fields = section.get("target_field", [])
    fsource = origin.get(f"{eng}.target_field", origin.get(eng, layers[-1][0]))
    if not isinstance(raw_fields, list):
        raise ConfigError(f"{fsource}: '{eng}.target_field' must be an array of tables; "
                          f"write [[{eng}.target_field]]")
    if len(raw_fields) > MAX_FIELDS:
        raise ConfigError(f"{fsource}: '{eng}.target_field' declares {len(raw_fields)} fields; at most {MAX_FIELDS} "
                          "are accepted: search fewer parameters (make the others constant in 'others')")
    fields = tuple(parse_field(r, source=fsource, section=eng, index=i) for i, r in enumerate(raw_fields))
    notes += [f"{d.where}: REQUESTRATE can only be {d.max:g}: no request rate (unpaced), as the original tool "
              "dropped --request-rate for a rate <= 0" for d in fields
              if d.name == "REQUESTRATE" and d.dtype in ("int", "float") and d.max <= 0]
    data["engine"] = eng
    settings = Settings(freeze(data), eng, fields, tuple(s for s, _ in layers),
                        str(cpath) if cpath else None, MappingProxyType(origin), tuple(notes))
    SearchSpace(fields)  # the field model checks itself now, not during the search
    settings.config  # noqa: B018  the typed configuration, built once, after every check above
    return settings


#: The original tool's default engine and benchmark (msserviceprofiler@9582f434 optimizer/optimizer.py arg_parse).
ORIGINAL_ENGINE, ORIGINAL_BENCHMARK = "mindie", "ais_bench"


def file_engine(origin: Mapping[str, str], sources: tuple[str, ...]) -> tuple[str, str, str | None] | None:
    """The engine the user's files mean when neither ``-e`` nor an ``engine`` key says: (engine, why, the
    benchmark that goes with it or None), so every command reads one file as one engine. The only engine
    whose ``[[X.target_field]]`` they declare; of several, ``mindie`` with ``ais_bench`` where one of them
    is, as the original tool's config.toml declares both and tuned MindIE with AISBench by default; None:
    msopt's default (vllm)."""
    user = [s for s in sources if s != str(DEFAULTS_PATH)]
    declared: list[str] = []
    for key, src in origin.items():
        name = key.split(".")[0]
        if key.endswith(".target_field") and key.count(".") == 1 and src in user and name not in declared:
            declared.append(name)
    if len(declared) == 1:
        return declared[0], f"the only engine whose [[{declared[0]}.target_field]] {user[-1]} declares", None
    if ORIGINAL_ENGINE in declared:
        return (ORIGINAL_ENGINE, f"{user[-1]} declares the search spaces of {', '.join(declared)}, as the original "
                f"tool's config.toml does, which tuned {ORIGINAL_ENGINE} with {ORIGINAL_BENCHMARK} by default",
                ORIGINAL_BENCHMARK)
    return None


def check_engine_section(settings: Settings) -> None:
    """Refuse an engine (``-e``) whose search space would silently come from the packaged
    defaults while the user's files declare the search space of another engine
    (:func:`msopt.run.validate.validate` runs it first).

    Raises:
        ConfigError: naming the file, the engines and the fix.
    """
    eng = settings.engine
    user = [s for s in settings.sources if s != str(DEFAULTS_PATH)]
    if not user or settings.origin.get(f"{eng}.target_field") in user:
        return
    declared = sorted({k.split(".")[0] for k, src in settings.origin.items()
                       if k.endswith(".target_field") and k.count(".") == 1 and src in user})
    if declared:
        raise ConfigError(f"{user[-1]}: engine '{eng}' has no [[{eng}.target_field]] in this file, which declares "
                          f"the search space of {', '.join(declared)}; the packaged defaults' {len(settings.fields)} "
                          f"{eng} field(s) would be searched instead. Add [[{eng}.target_field]] tables, or "
                          f"use -e {declared[0]}")


def with_trace(settings: Settings, workload: ResolvedWorkload | None = None) -> tuple[Settings, ResolvedWorkload]:
    """Resolve ``[workload]`` (:meth:`msopt.workload.resolved.ResolvedWorkload.resolve`): with a ``trace``, read every
    row once (a bad one is one line, before anything launches) and check its load (its requests, rate and
    mean lengths: :func:`msopt.workload.table.trace_load`); msopt.run.validate refuses a real run of a
    benchmark that cannot replay. Nothing is written into the settings: the simulator and the benchmarks take
    the load (and the window) from the returned object. Returns the settings, unchanged, and the resolved
    workload.

    Args:
        settings: the settings.
        workload: the workload resolved already for these settings' ``[workload]`` table (a second split of
            the same settings, e.g. with the installed configuration): not read again.

    Raises:
        ConfigError: a bad row or ``[workload]`` key, or more requests than one run replays, naming the file,
            the row and the fix.
    """
    wl = workload_settings(settings.config.workload.table, settings.config.workload.where())
    if workload is None or workload.settings != wl:
        workload = ResolvedWorkload.resolve(wl)
    workload.load()  # a trace of more requests than one run replays is refused here, before anything reads it
    return settings, workload


def split(settings: Settings, workload: ResolvedWorkload | None = None) -> tuple[Config, ResolvedWorkload]:
    """The boundary where the whole settings become the typed :class:`Config` that every part outside
    msopt/config takes (:func:`msopt.run.validate.validate` checks each component's part of it): ``-e``
    checked against the files' search space (:func:`check_engine_section`), ``[workload]`` resolved
    (:func:`with_trace`; ``workload``: resolved already, as there), then the Config, with the resolved workload.

    Raises:
        ConfigError: one line naming the file, the key and the fix.
    """
    check_engine_section(settings)
    settings, resolved = with_trace(settings, workload)
    return settings.config, resolved


_SLO_KEYS = {"ttft": "ttft_slo", "tpot": "tpot_slo", "success": "success_rate_slo"}


def _apply_slo(data: dict[str, Any], origin: dict[str, str], *, conflicts: bool) -> None:
    """``[slo]`` (msopt.slo's grammar) sets ``ttft_slo``, ``tpot_slo`` and ``success_rate_slo``;
    the statistic it names is read again by the typed configuration. With ``conflicts``, a metric
    that a user's file sets both ways is refused (which one would hold is not obvious)."""
    table = data.get("slo")
    if table is None:
        return
    where = origin.get("slo", "<defaults>")
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: 'slo' must be a table, e.g. [slo] ttft = \"p99<500ms\"")
    terms = parse_slo_table(table, where)
    for metric, term in terms.items():
        key = _SLO_KEYS[metric]
        set_by = origin.get(key)
        # a saved run's config.toml holds both, equal: only two different limits are ambiguous
        if conflicts and set_by not in (None, str(DEFAULTS_PATH)) and data.get(key) != term.limit:
            raise ConfigError(f"{set_by}: '{key}' = {data.get(key)!r} and [slo] {metric} "
                              f"({origin.get(f'slo.{metric}', where)}: {term.limit:g}) both set the {metric} SLO; "
                              "keep one")
        data[key] = term.limit
        origin[key] = origin.get(f"slo.{metric}", where)


def _place_wait_start_time(data: dict[str, Any], origin: dict[str, str], engine: str) -> None:
    """The original's top-level ``wait_start_time`` is the searched engine's readiness timeout
    (``[<engine>] wait_start_time`` wins where both are set)."""
    if "wait_start_time" not in data:
        return
    value = data.pop("wait_start_time")
    section = data[engine]
    if "wait_start_time" not in section:
        section["wait_start_time"] = value
        origin[f"{engine}.wait_start_time"] = origin.get("wait_start_time", "<defaults>")
