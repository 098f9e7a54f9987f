"""The ``[workload]`` table: one description of the load for every benchmark and the simulator.

``[workload]`` holds the synthetic keys (``input_len``, ``output_len``, ``num_prompts``,
``concurrency``, ``request_rate``, ``warmup``) and a request trace's (``trace``, ``format``,
``window``, ``time_scale``, ``block_size``, ``max_model_len``, ``length_policy``).

:func:`workload_settings` reads the table into a typed :class:`WorkloadSettings`;
:func:`apply_workload` (run by :func:`msopt.config.load_settings`) checks it against each built-in
benchmark's and the simulator's own spelling (:data:`SPELLINGS`): a key set in a user's file under both
spellings with different values is refused in one line naming both. No key is copied: the simulator and
each benchmark read the load over their own section from the resolved workload (:func:`spelled`,
:meth:`msopt.workload.resolved.ResolvedWorkload.benchmark_section`), so the per-benchmark keys keep working.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from msopt.checks import is_finite, is_int
from msopt.errors import ConfigError
from msopt.workload import trace as _trace
from msopt.workload.summary import TraceSummary
from msopt.workload.trace import COLUMN_FIELDS, FORMATS, LENGTH_POLICIES, TIME_UNITS, Trace

#: the synthetic keys of ``[workload]``
SYNTHETIC_KEYS: tuple[str, ...] = ("input_len", "output_len", "num_prompts", "concurrency", "request_rate", "warmup")
#: the trace keys of ``[workload]``
TRACE_KEYS: tuple[str, ...] = ("trace", "format", "window", "time_scale", "block_size", "max_model_len",
                               "length_policy", "time_unit", "columns")
#: what a trace decides, so ``[workload]`` may not also set it
TRACE_SETS: tuple[str, ...] = ("input_len", "output_len", "num_prompts", "request_rate")

#: each built-in section's spelling of the synthetic keys, read over the section, never written into it (a key it lacks
#: is not read there):
#: ``[simulator.workload]`` (msopt/sim/workload.py), ``[builtin]`` (msopt/benchmarks/builtin.py),
#: ``[vllm_benchmark.command]`` (``vllm bench serve --random-input-len`` ..., msopt/benchmarks/
#: vllm_benchmark.py), ``[ais_bench.command]`` (msopt/benchmarks/ais_bench.py)
SPELLINGS: Mapping[str, Mapping[str, str]] = {
    "simulator.workload": {k: k for k in SYNTHETIC_KEYS},
    "builtin": {"input_len": "input_len", "output_len": "output_len", "num_prompts": "num_prompts",
                "concurrency": "concurrency", "request_rate": "request_rate"},
    "vllm_benchmark.command": {"input_len": "random_input_len", "output_len": "random_output_len",
                               "num_prompts": "num_prompts", "concurrency": "max_concurrency",
                               "request_rate": "request_rate"},
    "ais_bench.command": {"input_len": "input_len", "output_len": "output_len", "num_prompts": "num_prompts",
                          "concurrency": "max_concurrency", "request_rate": "request_rate"},
}


#: the simulator's section of :data:`SPELLINGS`: never written; the simulator reads ``[workload]`` from the
#: resolved workload (:meth:`msopt.workload.resolved.ResolvedWorkload.simulator_workload`)
SIMULATOR_SECTION = "simulator.workload"


def _key(default: Any, ok: Callable[[Any], bool], rule: str, doc: str) -> Any:
    """A ``[workload]`` key as a field: its default, its check, the rule a message states and one line of doc
    (as :class:`msopt.config.keys.Key` declares a top-level key)."""
    return field(default=default, metadata={"ok": ok, "rule": rule, "doc": doc})


@dataclass(frozen=True)
class WorkloadSettings:
    """The ``[workload]`` table, checked (None: not set there); each field declares its key once: its
    type, its default, its check and rule (``metadata``: ``ok``, ``rule``) and one line of doc
    (``metadata["doc"]``). ``where``: the file that set the table."""

    # a distribution of lengths is the simulator's alone: [simulator.workload] input_len = { dist = ... }
    input_len: int | None = _key(None, lambda v: is_int(v) and v >= 1, "a whole number of tokens >= 1",
                                 "prompt tokens")
    output_len: int | None = _key(None, lambda v: is_int(v) and v >= 1, "a whole number of tokens >= 1",
                                  "output tokens")
    num_prompts: int | None = _key(None, lambda v: is_int(v) and v >= 1, "a whole number >= 1",
                                   "requests of one uncapped run")
    concurrency: int | None = _key(None, lambda v: is_int(v) and v >= 1, "a whole number >= 1",
                                   "requests in flight at most (closed loop)")
    request_rate: Any = _key(None, lambda v: v == "inf" or (is_finite(v) and v > 0)
                             or (isinstance(v, float) and math.isinf(v)),
                             "a number of requests/s above 0, or \"inf\" (all at once)", "requests/s (open loop)")
    warmup: int | None = _key(None, lambda v: is_int(v) and v >= 0, "a whole number >= 0",
                              "requests sent and waited out before the measured ones")
    trace: str | None = _key(None, lambda v: isinstance(v, str) and v != "", "the path of a request trace",
                             "the request trace's path (resolved against the file that set it)")
    format: str | None = _key(None, lambda v: v in FORMATS,
                              f"one of {', '.join(FORMATS)} (omit it to detect the format)",
                              "the trace's format (None: detected)")
    window: tuple[float, float] | None = _key(
        None, lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(is_finite(x) for x in v)
        and 0 <= v[0] < v[1], "[start_s, end_s] with 0 <= start_s < end_s",
        "(start_s, end_s) of the trace replayed (None: all of it)")
    time_scale: float = _key(1.0, lambda v: is_finite(v) and v > 0, "a number above 0 (2: twice the trace's rate)",
                             "replay speed (2: twice the trace's rate)")
    block_size: int | None = _key(None, lambda v: is_int(v) and v >= 1, "a whole number of tokens >= 1",
                                  "tokens per hash id (None: the format's)")
    max_model_len: int | None = _key(None, lambda v: is_int(v) and v >= 2, "a whole number of tokens >= 2",
                                     "the server's context limit the length policy applies (None: no limit)")
    length_policy: str = _key("clip", lambda v: v in LENGTH_POLICIES, f"one of {', '.join(LENGTH_POLICIES)}",
                              "what a request longer than max_model_len becomes: clip, scale or drop")
    time_unit: str | None = _key(None, lambda v: v in TIME_UNITS,
                                 f"one of {', '.join(TIME_UNITS)} (the timestamps' unit)",
                                 "the timestamps' unit (None: the format's)")
    columns: Mapping[str, str] | None = _key(
        None, lambda v: isinstance(v, Mapping) and set(v) <= set(COLUMN_FIELDS)
        and set(COLUMN_FIELDS[:3]) <= set(v) and all(isinstance(x, str) and x for x in v.values()),
        f"a table mapping {', '.join(COLUMN_FIELDS[:3])} (and optionally {', '.join(COLUMN_FIELDS[3:])}) "
        "to the file's column names, e.g. { arrival_s = \"ts\", input_tokens = \"prompt\", "
        "output_tokens = \"completion\" }",
        "the file's column of each field msopt reads (a CSV or JSON lines file of any layout)")
    where: str = "[workload]"

    def synthetic(self) -> dict[str, Any]:
        """The synthetic keys set, by ``[workload]`` name."""
        return {k: getattr(self, k) for k in SYNTHETIC_KEYS if getattr(self, k) is not None}

    def open_trace(self) -> Trace | None:
        """The trace, opened (its format detected from the first row), or None without one.

        Raises:
            ConfigError: a missing or unreadable file, an unrecognised format.
        """
        if self.trace is None:
            return None
        return Trace(self.trace, format=self.format, window=self.window, time_scale=self.time_scale,
                     block_size=self.block_size, max_model_len=self.max_model_len,
                     length_policy=self.length_policy, time_unit=self.time_unit, columns=self.columns,
                     where=f"{self.where}: [workload] trace")


#: each ``[workload]`` key's (check, rule), from :class:`WorkloadSettings`' fields
_CHECKS: Mapping[str, tuple[Any, str]] = {f.name: (f.metadata["ok"], f.metadata["rule"])
                                          for f in fields(WorkloadSettings) if "ok" in f.metadata}
#: each ``[workload]`` key's one line of doc, from :class:`WorkloadSettings`' fields
KEY_DOCS: Mapping[str, str] = {f.name: f.metadata["doc"] for f in fields(WorkloadSettings) if "doc" in f.metadata}


def workload_settings(table: Mapping[str, Any] | None, where: str = "<defaults>",
                      base: Path | None = None) -> WorkloadSettings:
    """Read a ``[workload]`` table into :class:`WorkloadSettings`.

    Args:
        table: the table (None or empty: nothing set).
        where: the file that set it, for messages.
        base: the directory a relative ``trace`` path is resolved against (default: as written).

    Raises:
        ConfigError: an unknown key, a wrong type or range, or a trace with keys it decides.
    """
    table = table or {}
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: 'workload' must be a table, e.g. [workload] input_len = 1024")
    for key, value in table.items():
        if key not in _CHECKS:
            raise ConfigError(f"{where}: unknown key '{key}' in [workload]; valid keys: {', '.join(_CHECKS)}")
        ok, rule = _CHECKS[key]
        if not ok(value):
            raise ConfigError(f"{where}: [workload] '{key}' must be {rule}, got {value!r}; fix '{key}'")
    if "trace" not in table:
        stray = [k for k in TRACE_KEYS if k in table]
        if stray:
            raise ConfigError(f"{where}: [workload] '{stray[0]}' applies to a trace, and [workload] has no trace; "
                              "add trace = \"PATH\" or remove it")
    else:
        decided = [k for k in TRACE_SETS if k in table]
        if decided:
            raise ConfigError(f"{where}: [workload] '{decided[0]}' and trace both set the requests; the trace "
                              f"decides {', '.join(TRACE_SETS)}: remove '{decided[0]}' (window and time_scale "
                              "choose the part and the rate)")
    values = dict(table)
    if "trace" in values:
        p = Path(values["trace"]).expanduser()
        values["trace"] = str((base / p if base is not None and not p.is_absolute() else p).absolute())
    if "window" in values:
        values["window"] = (float(values["window"][0]), float(values["window"][1]))
    if "columns" in values:
        values["columns"] = dict(values["columns"])
    return WorkloadSettings(**values, where=where)


def _get(data: Mapping[str, Any], dotted: str) -> Mapping[str, Any] | None:
    node: Any = data
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None


def apply_workload(data: dict[str, Any], origin: dict[str, str], defaults: str) -> WorkloadSettings:
    """Check ``[workload]`` against every built-in section's spelling of its synthetic keys (:data:`SPELLINGS`),
    writing none of them there: each consumer reads ``[workload]`` over its own section from the resolved
    workload (:class:`msopt.workload.resolved.ResolvedWorkload`). A packaged default it replaces is removed.

    Args:
        data: the merged configuration (changed in place: the trace's path made absolute, the packaged
            defaults ``[workload]`` replaces removed).
        origin: dotted key -> the file that set it (updated for the keys removed).
        defaults: the packaged defaults' path: a key set only there never conflicts.

    Raises:
        ConfigError: a bad ``[workload]`` key, or one key set under both spellings with different
            values in the user's files (one line naming both).
    """
    table = data.get("workload")
    where = origin.get("workload", defaults)
    base = Path(where).parent if where not in (defaults, "<defaults>", "<command line>") else None
    wl = workload_settings(table, where, base)
    if wl.trace is not None:  # absolute from here on: a run directory's config.toml names the same file
        data["workload"]["trace"] = wl.trace
    for key, value in wl.synthetic().items():
        key_where = origin.get(f"workload.{key}", where)
        for section, spelling in SPELLINGS.items():
            if key not in spelling:
                continue
            name = spelling[key]
            node = _get(data, section)
            dotted = f"{section}.{name}"
            set_by = origin.get(dotted)
            if node is not None and name in node and set_by not in (None, defaults) and node[name] != value:
                raise ConfigError(f"{set_by}: [{section}] {name} = {node[name]!r} and {key_where}: [workload] "
                                  f"{key} = {value!r} both set {key}; keep one ([workload] {key} sets it for "
                                  "every benchmark and the simulator)")
            # never written: the simulator and each benchmark read [workload] over their section
            # (ResolvedWorkload.simulator_workload, .benchmark_section); a packaged default it replaces is
            # dropped, so that a run's saved config.toml loads again
            if node is not None and name in node and set_by in (None, defaults):
                del node[name]  # type: ignore[attr-defined]
                origin.pop(dotted, None)
    _drop_default_load(data, origin, defaults, wl)
    return wl


def _drop_default_load(data: dict[str, Any], origin: dict[str, str], defaults: str, wl: WorkloadSettings) -> None:
    """A load ``[workload]`` sets replaces the packaged default of the other load key: a
    ``request_rate`` alone is not capped by a packaged concurrency, nor a ``concurrency`` alone paced
    by a packaged rate. (A section's key from a user's file stays: a rate capped by a concurrency.)"""
    set_ = wl.synthetic()
    other = {"request_rate": "concurrency", "concurrency": "request_rate"}
    for key, drop in other.items():
        if key not in set_ or drop in set_:
            continue
        for section, spelling in SPELLINGS.items():
            name = spelling.get(drop)
            node = _get(data, section)
            if name and node is not None and name in node and origin.get(f"{section}.{name}", defaults) == defaults:
                del node[name]  # type: ignore[attr-defined]
                origin.pop(f"{section}.{name}", None)




def trace_load(wl: WorkloadSettings, summary: TraceSummary) -> dict[str, Any]:
    """The load of a trace, by ``[workload]`` name: its requests, its mean rate (where a capacity
    search starts; a replay sends at the trace's own times) and its mean lengths (what a benchmark
    that cannot replay would send); ``[workload] concurrency`` stays a cap.

    Raises:
        ConfigError: more requests than one run replays (:data:`msopt.workload.trace.MAX_REQUESTS`),
            naming the trace and the window that holds as many.
    """
    most = _trace.MAX_REQUESTS
    if summary.requests > most:
        start = wl.window[0] if wl.window else 0.0
        end = math.floor((start + (summary.cap_arrival_s or 0.0) * wl.time_scale) * 1000) / 1000
        raise ConfigError(f"{wl.where}: [workload] trace {wl.trace}: {summary.requests:,} requests, more than the "
                          f"{most:,} one run replays; set [workload] window = [{start:g}, {end:g}] (the first "
                          f"{most:,}) or a narrower one")
    load: dict[str, Any] = {"input_len": max(1, round(summary.input_pct["mean"])),
                            "output_len": max(1, round(summary.output_pct["mean"])),
                            "num_prompts": summary.requests,
                            "request_rate": round(summary.rate, 6) if summary.rate else math.inf}
    return {**load, **wl.synthetic()}


def sim_trace(wl: WorkloadSettings) -> dict[str, Any]:
    """The trace as a replay table (``path`` and :class:`~msopt.workload.trace.Trace`'s options): what a
    benchmark in a process of its own reopens (``ResolvedWorkload.replay_table``)."""
    out: dict[str, Any] = {"path": wl.trace}
    for key in TRACE_KEYS[1:]:
        value = getattr(wl, key)
        if value is not None:
            out[key] = list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, Mapping) else value
    return out


def benchmark_view(name: str, table: Mapping[str, Any], load: Mapping[str, Any], *, trace: bool) -> Mapping[str, Any]:
    """The ``[name]`` benchmark section (as written) with ``load`` (by ``[workload]`` name) over it in that
    benchmark's spelling (:data:`SPELLINGS`): what its adapter reads, never written back. ``trace``: as
    :func:`spelled`. A benchmark without a spelling (a plugin), or a ``load`` of nothing to write, is read as
    written."""
    out = table
    for section in SPELLINGS:
        top, _, sub = section.partition(".")
        if top != name or section == SIMULATOR_SECTION or not (load or trace):
            continue
        if not sub:
            out = spelled(section, out, load, trace=trace)
            continue
        node = out.get(sub, {})
        if isinstance(node, Mapping):
            out = {**_thaw(out), sub: spelled(section, node, load, trace=trace)}
    return out


def spelled(section: str, table: Mapping[str, Any], load: Mapping[str, Any], *, trace: bool,
            replaying: bool = False, pin_sessions: bool = False) -> dict[str, Any]:
    """``table`` (the ``[section]`` table of :data:`SPELLINGS`, as written) with ``load`` (by ``[workload]``
    name) over it in that section's spelling: the view a consumer reads, never written back. ``trace``: the
    load is a trace's (:func:`trace_load`), which decides the rate, so a ``concurrency`` or ``request_rate``
    it lacks is removed. ``replaying`` (the simulator): the trace's own lengths replace ``input_len`` and
    ``output_len``; ``pin_sessions``: each session pinned to one data-parallel rank, as the builtin
    benchmark does (X-Data-Parallel-Rank). Applying it twice gives the same table."""
    node = _thaw(table)
    for key, name in SPELLINGS[section].items():
        if key in load:
            node[name] = load[key]
        elif trace and key in ("concurrency", "request_rate"):
            node.pop(name, None)
    if replaying:
        node.pop("input_len", None)
        node.pop("output_len", None)
        if pin_sessions:
            node["pin_sessions"] = True
    return node


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


__all__ = ["KEY_DOCS", "SPELLINGS", "SYNTHETIC_KEYS", "TRACE_KEYS", "TRACE_SETS", "WorkloadSettings", "apply_workload",
           "SIMULATOR_SECTION", "benchmark_view", "sim_trace", "spelled", "trace_load", "workload_settings"]
