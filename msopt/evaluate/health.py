"""Health checks: classify a service or benchmark log as ok, fatal or retryable.

The ``[health_check]`` table holds, for ``service`` logs and ``benchmark`` logs, named error
types with substring patterns, split into ``fatal`` and ``retryable``::

    [health_check]
    log_snippet_length = 200
    [health_check.service.fatal]
    oom = ["out of memory", "OutOfMemoryError"]
    [health_check.service.retryable]
    port = ["Address already in use"]
    [health_check.benchmark.retryable]
    connection = ["Connection reset by peer"]

Patterns match case-insensitively anywhere in a line of the last ``log_snippet_length`` lines.
A fatal match wins over a retryable one; among matches of one kind, the latest line wins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from msopt.checks import is_int
from msopt.config import DEFAULTS_PATH, read_toml
from msopt.engines import ENGINES
from msopt.engines.health_sources import PatternSource
from msopt.errors import ConfigError
from msopt.launch.logs import LOG_HEADER, tail
from msopt.registry import close_matches

if TYPE_CHECKING:
    from msopt.config import Section

KINDS = ("service", "benchmark")
SEVERITIES = ("fatal", "retryable")
_KEYS = ("log_snippet_length", *KINDS)


@dataclass(frozen=True)
class Verdict:
    """What a log says.

    Attributes:
        kind: "ok", "fatal" or "retryable".
        error_type: the matching error type ("oom", "port", ...), None when ok.
        line: the log line that matched, None when ok.
        pattern: the pattern that matched, None when ok.
    """

    kind: Literal["ok", "fatal", "retryable"]
    error_type: str | None = None
    line: str | None = None
    pattern: str | None = None

    @property
    def ok(self) -> bool:
        """True when no pattern matched."""
        return self.kind == "ok"

    def __str__(self) -> str:
        if self.ok:
            return "ok"
        return f"{self.kind} {self.error_type}: {self.line}"


@dataclass(frozen=True)
class HealthCheck:
    """Compiled health patterns: ``patterns[log kind][severity] = ((error_type, (pattern, ...)), ...)``."""

    log_snippet_length: int
    patterns: Mapping[str, Mapping[str, tuple[tuple[str, tuple[str, ...]], ...]]]

    @classmethod
    def from_config(cls, table: Section, engine_name: str) -> HealthCheck:
        """Build from ``[health_check]`` (``table``), with the service-log patterns the run's engine
        declares (:attr:`~msopt.engines.base.EngineAdapter.health_patterns`) for error types the
        table lists no patterns for; errors name the file and key."""
        check = cls.from_mapping(table.table, where=lambda key: table.where(key.partition(".")[2]))
        engine = ENGINES.get(engine_name) if engine_name in ENGINES else None
        return check.with_patterns(engine.health_patterns) if engine is not None else check

    def with_patterns(self, extra: Mapping[str, Mapping[str, Sequence[str]]], kind: str = "service") -> HealthCheck:
        """These patterns added to ``kind`` logs, ``{severity: {error_type: patterns}}``, after the
        table's own; an error type the table lists patterns for (in either severity) keeps the table's alone."""
        if not extra:
            return self
        named = {etype for sev in SEVERITIES for etype, _ in self.patterns[kind][sev]}
        kinds = {k: dict(v) for k, v in self.patterns.items()}
        for sev, types in extra.items():
            if sev not in SEVERITIES:
                raise ValueError(f"health pattern severity must be one of {SEVERITIES}, got {sev!r}")
            added = tuple((str(etype), tuple(p.lower() for p in pats)) for etype, pats in types.items()
                          if etype not in named and pats)
            kinds[kind][sev] = (*kinds[kind][sev], *added)
        return HealthCheck(self.log_snippet_length, kinds)

    @classmethod
    def default(cls) -> HealthCheck:
        """The packaged defaults (``[health_check]`` of msopt/config/defaults.toml)."""
        return cls.from_mapping(read_toml(DEFAULTS_PATH, "packaged defaults").get("health_check", {}))

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any], where: Any = None) -> HealthCheck:
        """Validate a ``[health_check]`` table.

        Args:
            table: the table.
            where: a callable dotted key -> file name (``Settings.where``), for messages.

        Raises:
            ConfigError: naming the key, the rule and the fix.
        """
        def err(key: str, rule: str, fix: str) -> ConfigError:
            src = where(key) if callable(where) else "<config>"
            return ConfigError(f"{src}: '{key}' {rule}; {fix}")

        if not isinstance(table, Mapping):
            raise err("health_check", "must be a table", "write [health_check]")
        for key in table:
            if key not in _KEYS:
                hint = close_matches(str(key), _KEYS)
                did = f"did you mean '{hint[0]}'?" if hint else f"valid keys: {', '.join(_KEYS)}"
                raise err(f"health_check.{key}", "is not a health_check key", did)
        n = table.get("log_snippet_length", 200)
        if not is_int(n) or not 1 <= n <= 1_000_000:
            raise err("health_check.log_snippet_length", f"must be an integer from 1 to 1000000, got {n!r}",
                      "e.g. log_snippet_length = 200")
        compiled: dict[str, dict[str, tuple[tuple[str, tuple[str, ...]], ...]]] = {}
        for kind in KINDS:
            sub = table.get(kind, {})
            if not isinstance(sub, Mapping):
                raise err(f"health_check.{kind}", "must be a table", f"write [health_check.{kind}.fatal]")
            for key in sub:
                if key not in SEVERITIES:
                    hint = close_matches(str(key), SEVERITIES)
                    did = f"did you mean '{hint[0]}'?" if hint else "use 'fatal' or 'retryable'"
                    raise err(f"health_check.{kind}.{key}", "is not a severity", did)
            compiled[kind] = {}
            for sev in SEVERITIES:
                types = sub.get(sev, {})
                if not isinstance(types, Mapping):
                    raise err(f"health_check.{kind}.{sev}", "must be a table of error_type = [patterns]",
                              f"write [health_check.{kind}.{sev}] then e.g. oom = [\"out of memory\"]")
                entries = []
                for etype, pats in types.items():
                    key = f"health_check.{kind}.{sev}.{etype}"
                    if isinstance(pats, str) or not isinstance(pats, Sequence) or \
                            not all(isinstance(p, str) and p.strip() for p in pats):
                        raise err(key, f"must be a list of non-empty strings, got {pats!r}",
                                  f"write {etype} = [\"pattern\", ...] (or [] to disable it)")
                    if pats:
                        entries.append((str(etype), tuple(p.lower() for p in pats)))
                compiled[kind][sev] = tuple(entries)
        return cls(n, compiled)

    def check(self, lines: Sequence[str], kind: str = "service") -> Verdict:
        """Classify the last ``log_snippet_length`` lines of a ``service`` or ``benchmark`` log."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        snippet = [ln for ln in lines if not ln.startswith(LOG_HEADER)][-self.log_snippet_length:]
        lowered = [line.lower() for line in snippet]
        for sev in SEVERITIES:
            for i in range(len(snippet) - 1, -1, -1):
                for etype, pats in self.patterns[kind][sev]:
                    for p in pats:
                        if p in lowered[i]:
                            return Verdict(sev, etype, snippet[i].rstrip("\r\n"), p)  # type: ignore[arg-type]
        return Verdict("ok")

    def check_file(self, log_path: str | Path, kind: str = "service") -> Verdict:
        """Classify the end of a log file."""
        return self.check(tail(log_path, self.log_snippet_length), kind)


#: The engine-neutral patterns of ``[health_check]`` in msopt/config/defaults.toml, with their
#: sources; the engines declare the rest (:attr:`~msopt.engines.base.EngineAdapter.health_sources`).
NEUTRAL_SOURCES: tuple[PatternSource, ...] = (
    PatternSource("service", "fatal", "oom", "out of memory",
                  "PyTorch / torch_npu allocators (torch.OutOfMemoryError text)",
                  "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."),
    PatternSource("service", "fatal", "oom", "OutOfMemoryError", "PyTorch (torch.OutOfMemoryError)",
                  "torch.OutOfMemoryError: CUDA error"),
    PatternSource("service", "fatal", "invalid_config", "unrecognized arguments", "Python argparse",
                  "api_server.py: error: unrecognized arguments: --disable-log-requests"),
    PatternSource("service", "fatal", "invalid_config", "error: argument", "Python argparse",
                  "api_server.py: error: argument --max-num-seqs: invalid int value: '1.5'"),
    PatternSource("service", "retryable", "connection", "Connection reset by peer", "OS errno 104 (ECONNRESET)",
                  "ConnectionResetError: [Errno 104] Connection reset by peer"),
    PatternSource("service", "retryable", "device_busy", "Device or resource busy", "OS errno 16 (EBUSY)",
                  "RuntimeError: open /dev/davinci0 failed: Device or resource busy"),
    PatternSource("benchmark", "retryable", "connection", "Connection reset by peer", "OS errno 104 (ECONNRESET)",
                  "ConnectionResetError: [Errno 104] Connection reset by peer"),
    PatternSource("benchmark", "retryable", "connection", "Connection refused", "OS errno 111 (ECONNREFUSED)",
                  "ConnectionRefusedError: [Errno 111] Connection refused"),
    PatternSource("benchmark", "retryable", "connection", "Cannot connect to host",
                  "aiohttp client_exceptions.py (ClientConnectorError)",
                  "aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host 127.0.0.1:8000 ssl:default"),
    PatternSource("benchmark", "retryable", "connection", "ServerDisconnectedError",
                  "aiohttp client_exceptions.py",
                  "aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected"),
    PatternSource("benchmark", "retryable", "connection", "RemoteDisconnected", "Python http.client",
                  "http.client.RemoteDisconnected: Remote end closed connection without response"),
    PatternSource("benchmark", "retryable", "port", "Address already in use", "OS errno 98 (EADDRINUSE)",
                  "OSError: [Errno 98] Address already in use"),
)


def pattern_sources() -> tuple[PatternSource, ...]:
    """Every pattern of ``[health_check]`` in msopt/config/defaults.toml, with its source: the
    engine-neutral ones and those the registered engines declare; the tests check that the two
    agree and that every sample is classified as filed."""
    declared = (src for name in ENGINES.names() for src in ENGINES.get(name).health_sources)
    return tuple(dict.fromkeys((*NEUTRAL_SOURCES, *declared)))


def benign_lines() -> tuple[tuple[str, str], ...]:
    """``(origin, line)``: lines the registered engines log that look alarming but are not
    failures; no packaged pattern may match them."""
    return tuple(dict.fromkeys(line for name in ENGINES.names() for line in ENGINES.get(name).benign_lines))
