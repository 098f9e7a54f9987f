"""Where SGLang's patterns of the packaged ``[health_check]`` table come from
(:mod:`msopt.engines.health_sources`)."""

from __future__ import annotations

from msopt.engines.health_sources import PatternSource

_SGLANG = "SGLang 0.5.23"

#: The packaged patterns SGLang prints.
SGLANG_SOURCES: tuple[PatternSource, ...] = (
    PatternSource("service", "fatal", "oom", "Not enough memory",
                  f"{_SGLANG} sglang/srt/model_executor/pool_configurator.py",
                  "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
    PatternSource("service", "retryable", "port", "is not available in",
                  f"{_SGLANG} sglang/srt/utils/network.py (wait_port_available)",
                  "ValueError: port at 30000 is not available in 30 seconds. port is used by a process already."),
)
