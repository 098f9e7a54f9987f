"""Benchmark adapters: drive load against a started server and report the five metrics."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from msopt.checks import is_int, is_number
from msopt.errors import ConfigError, EvaluationError
from msopt.launch.logs import exit_report, tail
from msopt.launch.process import start_process
from msopt.launch.render import Candidate, LaunchSpec, format_value, plain
from msopt.metrics import METRICS
from msopt.registry import Registry
from msopt.space.fields import FieldDecl
from msopt.workload.resolved import ResolvedWorkload

#: The benchmark of a configuration that names none (the packaged defaults' ``benchmark``).
DEFAULT_BENCHMARK = "vllm_benchmark"
#: Field names (config_position "env") that set the load, as in the original tool.
CONCURRENCY_FIELD = "CONCURRENCY"
REQUEST_RATE_FIELD = "REQUESTRATE"

#: The load fields and the ``EvalRequest.load`` key each one sets.
LOAD_FIELDS: Mapping[str, str] = MappingProxyType(
    {REQUEST_RATE_FIELD: "request_rate", CONCURRENCY_FIELD: "concurrency"})

#: Keys of ``EvalRequest.load`` that the benchmarks understand (the one list: the capacity stage
#: varies one of them, preferring them in this order).
LOAD_KEYS = tuple(LOAD_FIELDS.values())


def unpaced(name: str, value: Any) -> bool:
    """A REQUESTRATE field of 0 or less sets no request rate, as in the original tool, which then
    dropped ``--request-rate`` (ms_serviceparam_optimizer optimizer/interfaces/custom_process.py,
    ``NON_POSITIVE_INVALID_FIELDS``, msserviceprofiler@9582f434)."""
    return name == REQUEST_RATE_FIELD and is_number(value) and value <= 0


def resolve_load(values: Mapping[str, Any], fields: Sequence[FieldDecl], defaults: Mapping[str, Any],
                 load: Mapping[str, float], where: str) -> tuple[int | None, float | None]:
    """Concurrency and request rate: ``load`` > the CONCURRENCY/REQUESTRATE fields > ``defaults``.

    ``defaults`` holds ``max_concurrency``/``concurrency`` and ``request_rate``. A rate of
    ``inf`` (or none) means no pacing: closed loop at the concurrency.
    """
    names = {f.name for f in fields}
    for key in load:
        if key not in LOAD_KEYS:
            raise EvaluationError(f"unknown load key {key!r}; valid: {', '.join(LOAD_KEYS)}")

    def pick(load_key: str, field: str, *keys: str) -> Any:
        if load.get(load_key) is not None:
            return plain(load[load_key])
        if field in names and values.get(field) is not None and not unpaced(field, values[field]):
            return plain(values[field])
        for k in keys:
            if defaults.get(k) is not None:
                return defaults[k]
        return None

    conc = pick("concurrency", CONCURRENCY_FIELD, "max_concurrency", "concurrency")
    rate = pick("request_rate", REQUEST_RATE_FIELD, "request_rate")
    if conc is not None:
        if not is_number(conc) or conc < 1 or \
                not math.isfinite(conc):
            raise ConfigError(f"{where}: concurrency must be a positive integer, got {conc!r}")
        conc = int(conc)
    if rate is not None:
        if isinstance(rate, str) and rate.strip().lower() in ("inf", "infinity"):
            rate = math.inf
        if not is_number(rate) or not rate > 0:
            raise ConfigError(f"{where}: request_rate must be a positive number or inf, got {rate!r}")
        rate = float(rate)
    return conc, rate


def positive_int(section: Mapping[str, Any], key: str, default: int, where: str) -> int:
    """An integer key >= 1 of a benchmark table."""
    value = section.get(key, default)
    if not is_int(value) or value < 1:
        raise ConfigError(f"{where}: '{key}' must be a positive integer, got {value!r}")
    return value


def server_values(server: LaunchSpec) -> dict[str, str]:
    """Names a benchmark's ``others`` and environment may use for the server under test."""
    host = server.base_url.split("//", 1)[1].rsplit(":", 1)[0]
    return {"MSOPT_SERVER_HOST": host, "MSOPT_SERVER_PORT": str(server.port),
            "MSOPT_SERVER_URL": server.base_url, "MSOPT_MODEL": server.model,
            "MSOPT_SERVED_MODEL_NAME": server.served_model_name}


class BenchmarkAdapter:
    """Base of the benchmark adapters; one instance per benchmark, stateless.

    A subclass renders a command line (``render``) and reads its results (``parse``); ``run``
    starts the command with :mod:`msopt.launch.process`, waits and parses. An in-process benchmark
    overrides ``run`` instead.
    """

    name: ClassVar[str] = ""
    produces: ClassVar[frozenset[str]] = frozenset(METRICS)

    #: The fields (by name) this benchmark reads as its load, and the load key (:data:`LOAD_KEYS`)
    #: each sets: the original tool's CONCURRENCY and REQUESTRATE (``config_position = "env"``).
    load_field_keys: ClassVar[Mapping[str, str]] = MappingProxyType(LOAD_FIELDS)

    #: True when the benchmark replays ``[workload] trace`` (each request at its trace time, equal hash ids
    #: as equal token blocks): :meth:`check`, :meth:`render` and :meth:`run` then take the run's resolved
    #: workload as ``workload`` (:class:`~msopt.workload.resolved.ResolvedWorkload`, its window read once);
    #: a real run of a benchmark that cannot is refused at load time, naming ``builtin``.
    replays_trace: ClassVar[bool] = False

    def render(self, candidate: Candidate, *, server: LaunchSpec, num_prompts: int | None, load: Mapping[str, float],
               result_dir: Path, workload: ResolvedWorkload | None = None) -> tuple[tuple[str, ...], dict[str, str]]:
        """The benchmark's argv and the environment to add, for the candidate (its values, the fields and the
        ``[<benchmark>]`` section; ``workload``: see :attr:`replays_trace`)."""
        raise NotImplementedError

    def parse(self, result_dir: Path, log_path: Path) -> dict[str, float | None]:
        """The metrics from what the benchmark wrote (None: not measured)."""
        raise NotImplementedError

    def produced(self, section: Mapping[str, Any]) -> frozenset[str]:
        """The metrics this benchmark measures as ``section`` configures it (default: :attr:`produces`)."""
        return self.produces

    def produced_note(self, section: Mapping[str, Any]) -> str:
        """Why :meth:`produced` lacks some of :attr:`produces` under ``section`` ("" when it does not)."""
        return ""

    def notes(self, section: Mapping[str, Any]) -> list[str]:
        """What the measurement will be, one line each (``msopt validate``); none by default."""
        return []

    def num_prompts(self, section: Mapping[str, Any]) -> int | None:
        """The prompts one uncapped run sends (the full workload), read from this benchmark's own
        ``[<benchmark>]`` section as :meth:`render` reads it; None when the tool decides and msopt
        cannot know. The leaderboard weighs a measurement without a count of its own by it."""
        return None

    def load_fields(self, fields: Sequence[FieldDecl]) -> frozenset[str]:
        """The fields this benchmark reads as its load (:attr:`load_field_keys`: the original tool's
        CONCURRENCY and REQUESTRATE): the server never reads them, so they are no part of its server key."""
        return frozenset(f.name for f in fields if f.name in self.load_field_keys)

    def field_load(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The load (:data:`LOAD_KEYS`) the configuration's own load fields set in ``values``: a
        CONCURRENCY field's value as ``concurrency``, a REQUESTRATE field's as ``request_rate``
        (not when :func:`unpaced`), as :attr:`load_field_keys` maps them; the simulator runs its
        workload at it as this benchmark would."""
        out: dict[str, Any] = {}
        for name, key in sorted(self.load_field_keys.items(), key=lambda kv: LOAD_KEYS.index(kv[1])):
            value = values.get(name)
            if value is not None and not (key == "request_rate" and unpaced(REQUEST_RATE_FIELD, value)):
                out[key] = plain(value)
        return out

    def configured_load(self, section: Mapping[str, Any]) -> dict[str, Any]:
        """The load this benchmark's own section configures, by :data:`LOAD_KEYS` key (as written;
        absent keys left out): ``request_rate`` and ``max_concurrency`` (or ``concurrency``) of its
        ``[<benchmark>.command]`` table by default. The capacity stage starts from it."""
        raw = section.get("command")
        cmd: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        out = {}
        if "request_rate" in cmd:
            out["request_rate"] = cmd["request_rate"]
        for key in ("max_concurrency", "concurrency"):
            if key in cmd:
                out["concurrency"] = cmd[key]
                break
        return out

    def with_seed(self, section: Mapping[str, Any], offset: int) -> Mapping[str, Any]:
        """``section`` with its prompt seed moved ``offset`` on, so that a measurement on a reused
        server sends prompts that server has not seen (its prefix cache cannot flatter it); the
        section itself when this benchmark has no seed msopt knows (the default)."""
        return section

    def check(self, fields: Sequence[FieldDecl], section: Mapping[str, Any],
              workload: ResolvedWorkload | None = None) -> None:
        """Raise ConfigError for a ``[<benchmark>]`` section this benchmark cannot run; every
        command runs it at load time (:func:`msopt.run.validate.validate`; ``workload``: see
        :attr:`replays_trace`)."""

    def run(self, server: LaunchSpec, candidate: Candidate, *, num_prompts: int | None, load: Mapping[str, float],
            result_dir: Path, log_path: Path, timeout: float,
            workload: ResolvedWorkload | None = None) -> dict[str, float | None]:
        """Run the benchmark against ``server`` and return its metrics (``workload``: see :attr:`replays_trace`).

        Raises:
            EvaluationError: it could not start, ran past ``timeout`` (it is stopped), exited
                non-zero, or left no readable result.
        """
        # absolute before the argv is rendered: the benchmark runs with result_dir as its working
        # directory, where a relative --result-dir would name a directory inside itself
        result_dir, log_path = Path(result_dir).absolute(), Path(log_path).absolute()
        result_dir.mkdir(parents=True, exist_ok=True)
        replay = {"workload": workload} if workload is not None else {}  # a benchmark that replays takes it
        argv, env = self.render(candidate, server=server, num_prompts=num_prompts, load=load,
                                result_dir=result_dir, **replay)
        with start_process(argv, env, log_path, cwd=result_dir) as proc:
            code = proc.wait(timeout)
            if code is None:
                proc.stop()
                raise EvaluationError(exit_report(f"benchmark {self.name} did not finish within {timeout:g} s",
                                                  log_path, proc.tail(20)))
        if code != 0:
            raise EvaluationError(exit_report(f"benchmark {self.name} exited with status {code}", log_path,
                                              proc.tail(20)))
        return self.parse(result_dir, Path(log_path))


#: Lines a process prints while its interpreter exits, after its work is done: nanobind's leak report
#: (nanobind src/nb_internals.cpp, printed at module finalisation: "nanobind: leaked N instances!",
#: " - leaked type ...", "See https://nanobind.readthedocs.io/en/latest/refleaks.html"; vLLM 0.32's
#: bench serve ends with it through triton), Python's resource_tracker and warnings. They say nothing
#: about why a benchmark left no result, so a report of a missing result skips them.
_EXIT_NOISE = re.compile(r"^(nanobind: |See https://nanobind\.|\s*- leaked |.*resource_tracker|.*leaked semaphore"
                         r"|\s*warnings\.warn\(|.*(User|Deprecation|Future|Resource)Warning)")

#: How many files :func:`no_result_report` names.
_FILES_SHOWN = 8


def meaningful_tail(lines: Sequence[str], n: int = 8) -> list[str]:
    """The last ``n`` lines of a log's end that are not exit-time noise (:data:`_EXIT_NOISE`) nor blank."""
    kept = [ln.rstrip() for ln in lines if ln.strip() and not _EXIT_NOISE.match(ln.strip())]
    return kept[-n:]


def no_result_report(bench: str, expected: str, result_dir: Path, log_path: Path) -> str:
    """Why there is no result, for a benchmark that exited 0 but left no ``expected`` in ``result_dir``.

    The first line names what was expected where and what the benchmark wrote there instead (a file
    one directory level too deep says the benchmark resolved a path against another directory); the
    rest is the log's last meaningful lines, exit-time warnings left out.
    """
    root = Path(result_dir)
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
    if files:
        shown = ", ".join(files[:_FILES_SHOWN]) + (f" and {len(files) - _FILES_SHOWN} more"
                                                    if len(files) > _FILES_SHOWN else "")
        wrote = f"it wrote {shown} there"
    else:
        wrote = "it wrote no file there"
    lines = meaningful_tail(tail(log_path, 200))
    head = f"{bench} wrote no {expected} into {root}; {wrote} (log {log_path})"
    return head + ("\nthe log's last lines before exit:\n" + "\n".join(lines) if lines else "")


def check_metrics(name: str, metrics: Mapping[str, Any], extra: Sequence[str] = ()) -> dict[str, float | None]:
    """Keep the known metrics as floats (or None): the five, and ``extra`` (percentiles) where present."""
    out: dict[str, float | None] = {}
    for key in (*METRICS, *(k for k in extra if k in metrics)):
        v = metrics.get(key)
        out[key] = None if v is None or (isinstance(v, float) and not math.isfinite(v)) else float(v)
    return out


BENCHMARKS: Registry[type[BenchmarkAdapter]] = Registry("benchmark", entry_point_group="msopt.benchmarks")

__all__ = ["BENCHMARKS", "BenchmarkAdapter", "check_metrics", "format_value", "resolve_load"]
