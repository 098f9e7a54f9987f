"""Where MindIE's patterns of the packaged ``[health_check]`` table come from
(:mod:`msopt.engines.health_sources`)."""

from __future__ import annotations

from msopt.engines.health_sources import PatternSource

_MINDIE = "MindIE-LLM 8b4871a"

#: The packaged patterns MindIE (and the Ascend runtime under it) prints.
MINDIE_SOURCES: tuple[PatternSource, ...] = (
    PatternSource("service", "fatal", "oom", "FAIL_TO_ALLOCATE_MEMORY",
                  "Ascend runtime error name (kept from the original tool; not checked against a source)",
                  "EL0004: FAIL_TO_ALLOCATE_MEMORY"),
    PatternSource("service", "retryable", "port", "listen port is occupied",
                  f"{_MINDIE} src/server/endpoint/http_wrapper/http_server.cpp:400-405 (HttpServer::HttpServerInit: "
                  "a port MindIE is to listen on cannot be bound; a race with another trial, so try again)",
                  "[ERROR] [endpoint] Management or Business or Metrics Http server listen port is occupied"),
)
