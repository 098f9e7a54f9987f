"""What one simulated evaluation returns: the benchmark's metrics, or the server's failure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

NAN = float("nan")


@dataclass(frozen=True)
class SimResult:
    """Metrics of one simulated server + benchmark run.

    Times are seconds. A run whose server fails to start has ``error`` set, ``log_lines`` with
    the server's error, ``success_rate`` 0, speeds 0 and latencies NaN: never a made-up score.

    Attributes:
        generate_speed: output tokens per second over the run.
        time_to_first_token, time_per_output_token: means over successful requests.
        ttft_p50, ttft_p90, ttft_p95, ttft_p99, tpot_p50, tpot_p90, tpot_p95, tpot_p99: percentiles of
            the same.
        success_rate: completed / sent requests.
        throughput: completed requests per second.
        duration: simulated wall time from the first send to the last completion.
        num_prompts: requests sent.
        preemptions: KV-cache preemptions (recompute) over all replicas.
        kv_cache_tokens: KV-cache capacity of one replica, tokens.
        requests: per-request arrays: send, first_token, finish, input_len, output_len, ok, replica.
        error: None, or the reason the server failed.
        log_lines: what the server log would say (startup, warnings, the failure).
        ignored: launch flags / config keys read but not modelled.
        prefix_cache_hits, prefix_cache_queries: prompt tokens found in the prefix cache and prompt
            tokens looked up (vLLM's ``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries``);
            0 without a prefix cache.
        assumed: inputs the prediction assumed rather than knew (efficiencies of another hardware
            entry, a default acceptance length), one line each.
        failed_too_long, failed_refused: requests the engine refused, as longer than ``context_limit``
            (its max_model_len) and for its prefill token budget or KV cache; 0 where none failed.
        context_limit: the context the engine refused requests at (0 where it refused none).
        outputs_cut: requests served with their output cut to the context left, by an engine that cuts
            rather than refuses (:attr:`~msopt.sim.personality.Personality.cuts_output_to_context`).
    """

    generate_speed: float = 0.0
    time_to_first_token: float = NAN
    time_per_output_token: float = NAN
    ttft_p50: float = NAN
    ttft_p90: float = NAN
    ttft_p95: float = NAN
    ttft_p99: float = NAN
    tpot_p50: float = NAN
    tpot_p90: float = NAN
    tpot_p95: float = NAN
    tpot_p99: float = NAN
    success_rate: float = 0.0
    throughput: float = 0.0
    duration: float = 0.0
    num_prompts: int = 0
    preemptions: int = 0
    kv_cache_tokens: int = 0
    requests: Mapping[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)
    error: str | None = None
    log_lines: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    prefix_cache_hits: int = 0
    prefix_cache_queries: int = 0
    failed_too_long: int = 0
    failed_refused: int = 0
    context_limit: int = 0
    outputs_cut: int = 0

    @property
    def ok(self) -> bool:
        """True when the server started and at least one request completed."""
        return self.error is None

    def metrics(self) -> dict[str, float]:
        """The original tool's five metric columns."""
        return {
            "generate_speed": self.generate_speed,
            "time_to_first_token": self.time_to_first_token,
            "time_per_output_token": self.time_per_output_token,
            "success_rate": self.success_rate,
            "throughput": self.throughput,
        }


def failed(error: str, log_lines: list[str], ignored: tuple[str, ...], num_prompts: int) -> SimResult:
    """A server that did not start: the error, the log, no metrics."""
    return SimResult(error=error, log_lines=tuple(log_lines), ignored=ignored, num_prompts=num_prompts)


def summarize(
    send: np.ndarray,
    first: np.ndarray,
    finish: np.ndarray,
    ok: np.ndarray,
    in_len: np.ndarray,
    out_len: np.ndarray,
    replica: np.ndarray,
    *,
    preemptions: int,
    kv_cache_tokens: int,
    log_lines: list[str],
    ignored: tuple[str, ...],
) -> SimResult:
    """Benchmark-style metrics from per-request times (as vLLM's ``bench serve`` computes them)."""
    n = len(send)
    good = ok & np.isfinite(first) & np.isfinite(finish)
    requests = {"send": send, "first_token": first, "finish": finish, "input_len": in_len,
                "output_len": out_len, "ok": good, "replica": replica}
    if not good.any():
        return SimResult(error="no request completed", log_lines=tuple(log_lines), ignored=ignored,
                         num_prompts=n, requests=requests, preemptions=preemptions,
                         kv_cache_tokens=kv_cache_tokens)
    ttft = first[good] - send[good]
    multi = good & (out_len > 1)
    tpot = (finish[multi] - first[multi]) / (out_len[multi] - 1)
    duration = float(np.nanmax(finish) - np.nanmin(send))
    duration = max(duration, 1e-9)

    def pct(x: np.ndarray, q: float) -> float:
        return float(np.percentile(x, q)) if len(x) else NAN

    return SimResult(
        generate_speed=float(out_len[good].sum()) / duration,
        time_to_first_token=float(ttft.mean()),
        time_per_output_token=float(tpot.mean()) if len(tpot) else NAN,
        ttft_p50=pct(ttft, 50), ttft_p90=pct(ttft, 90), ttft_p95=pct(ttft, 95), ttft_p99=pct(ttft, 99),
        tpot_p50=pct(tpot, 50), tpot_p90=pct(tpot, 90), tpot_p95=pct(tpot, 95), tpot_p99=pct(tpot, 99),
        success_rate=float(good.sum()) / n,
        throughput=float(good.sum()) / duration,
        duration=duration,
        num_prompts=n,
        preemptions=preemptions,
        kv_cache_tokens=kv_cache_tokens,
        requests=requests,
        error=None,
        log_lines=tuple(log_lines),
        ignored=ignored,
    )

