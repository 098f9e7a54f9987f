"""The names of the benchmark metrics, defined once for every layer (benchmarks, simulator,
objective, results table, report).

The first five are the original tool's, in its column order; every benchmark reports them.
Percentiles and the duration are reported where the benchmark measures them.
"""

from __future__ import annotations

import math
from typing import Any

GENERATE_SPEED = "generate_speed"
TIME_TO_FIRST_TOKEN = "time_to_first_token"
TIME_PER_OUTPUT_TOKEN = "time_per_output_token"
SUCCESS_RATE = "success_rate"
THROUGHPUT = "throughput"

#: The metrics every benchmark reports, in the original tool's column order.
METRICS: tuple[str, ...] = (GENERATE_SPEED, TIME_TO_FIRST_TOKEN, TIME_PER_OUTPUT_TOKEN, SUCCESS_RATE, THROUGHPUT)

#: TTFT and TPOT percentiles (seconds), where the benchmark reports them.
PERCENTILES: tuple[str, ...] = tuple(f"{m}_p{p}" for m in ("ttft", "tpot") for p in (50, 90, 95, 99))

#: The prefix cache's share of prompt tokens found cached over a measurement, where the server reports
#: it (vLLM's ``/metrics`` counters) or the simulator models it (a trace with hash ids): absent otherwise.
PREFIX_CACHE_HIT_RATE = "prefix_cache_hit_rate"

#: Speculative decoding's mean acceptance length over a measurement (tokens kept per verify step, the
#: target's own included), where the server counts its drafts (vLLM's or SGLang's ``/metrics``): absent otherwise.
SPEC_ACCEPT_LEN = "spec_accept_len"

#: Metrics a measurement reports only where the server measures them, each a results.csv column after the
#: original tool's layout (an empty cell where absent).
MEASURED_COLUMNS: tuple[str, ...] = (SPEC_ACCEPT_LEN,)

#: What a measurement actually sent, journaled with its metrics where the benchmark knows it: requests
#: sent, the span from the first send to the last (s), the mean prompt and output tokens, and (an
#: open-loop trace replay) how late the sends were against their trace times, p50 and p99 (s).
SENT_REQUESTS = "sent_requests"
SENT_SPAN = "sent_span_s"
SENT_INPUT_MEAN = "sent_input_mean"
SENT_OUTPUT_MEAN = "sent_output_mean"
SEND_LATE_P50 = "send_late_p50_s"
SEND_LATE_P99 = "send_late_p99_s"
SENT: tuple[str, ...] = (SENT_REQUESTS, SENT_SPAN, SENT_INPUT_MEAN, SENT_OUTPUT_MEAN, SEND_LATE_P50, SEND_LATE_P99)

#: Why a measurement's requests failed, journaled with its metrics as counts where the benchmark knows them
#: (absent when none failed): ``failed_too_long`` (the server refused a request longer than its context),
#: ``failed_timeout`` (no answer within the request's timeout), ``failed_connection`` (the connection broke:
#: the server closed it or died), ``failed_incomplete`` (the stream ended early or held no token),
#: ``failed_refused`` (the simulated engine's prefill token budget or KV cache cannot hold the request),
#: ``failed_http_<status>`` (any other HTTP error), ``failed_other``.
FAILED_PREFIX = "failed_"
FAILED_TOO_LONG = "failed_too_long"
FAILED_TIMEOUT = "failed_timeout"
FAILED_CONNECTION = "failed_connection"
FAILED_INCOMPLETE = "failed_incomplete"
FAILED_REFUSED = "failed_refused"
FAILED_OTHER = "failed_other"
#: The server's context limit (tokens) a measurement's too-long requests were refused at, where it is known
#: (the server's message, the simulated launch); journaled only beside ``failed_too_long``.
CONTEXT_LIMIT = "context_limit"
#: Requests the server answered with fewer output tokens than asked, their output cut to the context left
#: (vLLM's ``max_tokens`` clamp): journaled as a count where the simulator predicts any or the builtin benchmark,
#: which asks for a fixed output (``ignore_eos``), got any.
OUTPUTS_CUT = "outputs_cut"


def failure_counts(metrics: Any) -> dict[str, int]:
    """The failed requests of a measurement by cause (``too_long``, ``timeout``, ``http_400``, ...) from
    its journaled metrics (:data:`FAILED_PREFIX`); {} where none failed or none was recorded."""
    if not isinstance(metrics, dict):
        return {}
    return {k.removeprefix(FAILED_PREFIX): int(v) for k, v in metrics.items()
            if k.startswith(FAILED_PREFIX) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0}


#: Everything the embedded simulator measures: the metrics, the percentiles and the duration.
SIMULATED: tuple[str, ...] = (*METRICS, *PERCENTILES, "duration")


#: A fitness at or above this is shown as ``>1e6 (far outside the SLOs)``: only an SLO's penalty term (or a
#: vanishing generate_speed) gets there, and a raw ``2e+298`` (a term at its cap) reads as a bug
FITNESS_SHOWN_MAX = 1e6


def fitness_text(value: Any, fmt: str = ".4g") -> str:
    """A fitness for a person: ``fmt`` below :data:`FITNESS_SHOWN_MAX`, ``>1e6 (far outside the SLOs)``
    above it, ``inf`` for a failed evaluation, ``-`` for none. JSON keeps the number itself."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value >= FITNESS_SHOWN_MAX:
        return ">1e6 (far outside the SLOs)"
    return format(float(value), fmt)
