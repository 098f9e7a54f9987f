"""msopt's own load generator for OpenAI-compatible servers (asyncio + aiohttp).

Streams ``/v1/completions`` (or ``/v1/chat/completions``) with synthetic prompts of a given
token length, either closed-loop (``concurrency`` requests in flight) or open-loop at a Poisson
``request_rate`` (seeded; still capped by ``concurrency`` when both are set). With ``[workload]
trace`` (the run's resolved window, handed to :meth:`BuiltinBenchmark.run`) it replays the trace
instead, open loop: each request at its trace time with the trace's lengths, its prompt built from
its hash ids so that equal ids are token-identical blocks (:mod:`msopt.workload.replay`). Per
request it records TTFT, TPOT and end-to-end latency (and, replaying, how late it was sent); it
writes ``builtin_result.json`` (summary) and ``requests.jsonl`` (one record per request) into the
result directory. Around the measurement it reads the server's prefix-cache counters
(:mod:`msopt.benchmarks.engine_metrics`).

Runs in-process (``run``); ``python -m msopt.benchmarks PARAMS_JSON`` runs the same thing as a
child process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from msopt.benchmarks.base import (
    BENCHMARKS,
    BenchmarkAdapter,
    check_metrics,
    no_result_report,
    positive_int,
    resolve_load,
)
from msopt.benchmarks.engine_metrics import cache_report, read_counters, spec_report
from msopt.benchmarks.failures import HttpError, failure_cause, failure_metrics
from msopt.checks import is_int, is_number
from msopt.config import thaw
from msopt.errors import ConfigError, EvaluationError
from msopt.launch.render import Candidate, LaunchSpec, env_fields
from msopt.metrics import (
    CONTEXT_LIMIT,
    FAILED_PREFIX,
    METRICS,
    OUTPUTS_CUT,
    PERCENTILES,
    PREFIX_CACHE_HIT_RATE,
    SEND_LATE_P50,
    SEND_LATE_P99,
    SENT,
    SENT_INPUT_MEAN,
    SENT_OUTPUT_MEAN,
    SENT_REQUESTS,
    SENT_SPAN,
    SPEC_ACCEPT_LEN,
)
from msopt.space.fields import FieldDecl
from msopt.workload.replay import TraceWindow, block_prompt, open_window, session_rank
from msopt.workload.resolved import ResolvedWorkload

RESULT_FILE = "builtin_result.json"
#: what ``builtin_result.json`` holds besides the five metrics and goes into the journal with them
_EXTRA = (*PERCENTILES, PREFIX_CACHE_HIT_RATE, SPEC_ACCEPT_LEN, *SENT, "duration")
REQUESTS_FILE = "requests.jsonl"


def _extra(summary: Mapping[str, Any]) -> tuple[str, ...]:
    """What goes into the journal: :data:`_EXTRA` and the failed requests by cause where any failed."""
    return (*_EXTRA, *(k for k in summary if k.startswith(FAILED_PREFIX)), CONTEXT_LIMIT, OUTPUTS_CUT)
ENDPOINTS = ("/v1/completions", "/v1/chat/completions")

# Short common words: each is about one token for BPE tokenizers when preceded by a space.
_WORDS = ["the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at", "from", "his", "her", "an", "are", "were", "it", "be", "this", "which", "or", "had", "not", "but", "they", "have", "one", "you", "all", "their", "there", "been", "has", "more", "when", "who", "will", "no", "if", "out", "so", "said", "what", "up", "its", "about", "into", "than", "them", "can", "only", "other", "new", "some", "could", "time", "these", "two", "may", "then", "do", "first", "any", "my", "now", "such", "like", "our", "over", "man", "me", "even", "most", "made", "after", "also", "did", "many", "before", "must", "through", "back", "years", "where", "much", "your", "way", "well", "down", "should", "because", "each", "just", "those", "people", "how", "too", "little", "state", "good", "very", "make", "world", "still", "own", "see", "men", "work", "long", "get", "here", "between", "both", "life", "being", "under", "never", "day", "same", "another", "know", "while", "last", "might", "us", "great", "old", "year", "off", "come", "since", "against", "go", "came", "right", "used", "take", "three"]  # noqa: E501


@dataclass(frozen=True)
class LoadParams:
    """One run of the load generator."""

    url: str
    model: str
    endpoint: str = "/v1/completions"
    num_prompts: int = 200
    input_len: int = 1024
    output_len: int = 256
    max_tokens: int | None = None
    ignore_eos: bool = True
    concurrency: int | None = 8
    request_rate: float = math.inf
    seed: int = 0
    request_timeout: float = 600.0
    stream: bool = True
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    #: a trace replayed (``path`` and the trace's options, :data:`msopt.workload.replay.REPLAY_KEYS`),
    #: or None for synthetic prompts
    trace: Mapping[str, Any] | None = None
    #: the server's data-parallel ranks a request may name (:attr:`LaunchSpec.rank_header_ranks`): a
    #: replayed session's requests all carry one ``X-Data-Parallel-Rank``; 1: no header
    dp_ranks: int = 1


@dataclass
class RequestRecord:
    """What happened to one request (times in seconds since the run started; ``scheduled``: when a
    replay meant to send it, None for synthetic load)."""

    index: int
    start: float = 0.0
    scheduled: float | None = None
    input_tokens: int | None = None
    ttft: float | None = None
    latency: float | None = None
    tpot: float | None = None
    output_tokens: int = 0
    asked: int | None = None  # the max_tokens sent
    success: bool = False
    error: str | None = None
    cause: str | None = None
    context_limit: int | None = None


def synthetic_prompts(n: int, input_len: int, seed: int) -> list[str]:
    """``n`` distinct prompts of about ``input_len`` tokens each (seeded, so reproducible)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(_WORDS), size=(n, max(1, input_len)))
    return [" ".join(_WORDS[i] for i in row) for row in idx]


def arrival_gaps(n: int, rate: float, seed: int) -> list[float]:
    """Seconds between successive request sends: Poisson arrivals at ``rate``, 0 when unpaced."""
    if n <= 1 or not math.isfinite(rate):
        return [0.0] * max(0, n - 1)
    return [float(x) for x in np.random.default_rng([seed, 1]).exponential(1.0 / rate, size=n - 1)]


def workload_prompts(section: Mapping[str, Any]) -> int:
    """``[builtin] num_prompts`` (default 200): the prompts of one uncapped run."""
    return positive_int(section, "num_prompts", 200, "[builtin]")


def params_from_section(section: Mapping[str, Any], server: LaunchSpec, values: Mapping[str, Any],
                        fields: Sequence[FieldDecl], num_prompts: int | None,
                        load: Mapping[str, float], workload: ResolvedWorkload | None = None) -> LoadParams:
    """Validate ``[builtin]`` and combine it with the server, the load and num_prompts; ``workload``: the run's,
    whose trace is replayed (else a ``trace`` table of ``section``, a replay outside a run)."""
    where = "[builtin]"
    endpoint = section.get("endpoint", "/v1/completions")
    if endpoint not in ENDPOINTS:
        raise ConfigError(f"{where}: 'endpoint' must be one of {', '.join(ENDPOINTS)}, got {endpoint!r}")
    trace = workload.replay_table() if workload is not None and workload.is_trace else section.get("trace")
    if trace is not None:
        if not isinstance(trace, Mapping):
            raise ConfigError(f"{where}: 'trace' must be a table with path = \"TRACE\" (a run replays [workload] "
                              "trace)")
        # open loop at the trace's times: only an explicit concurrency caps it, and only a load's
        # rate (a capacity probe, a REQUESTRATE field) rescales it; [builtin] request_rate is the
        # trace's own mean rate
        conc, rate = resolve_load(values, fields, {k: section[k] for k in ("concurrency",) if k in section},
                                  load, where)
    else:
        conc, rate = resolve_load(values, fields, {"concurrency": 8, **section}, load, where)
        if conc is None and (rate is None or not math.isfinite(rate)):
            raise ConfigError(f"{where}: give a concurrency or a finite request_rate")
    output_len = positive_int(section, "output_len", 256, where)
    timeout = section.get("request_timeout", 600.0)
    if not is_number(timeout) or timeout <= 0:
        raise ConfigError(f"{where}: 'request_timeout' must be a positive number of seconds")
    seed = section.get("seed", 0)
    if not is_int(seed) or seed < 0:
        raise ConfigError(f"{where}: 'seed' must be a non-negative integer, got {seed!r}")
    extra = section.get("extra_body", {})
    if not isinstance(extra, Mapping):
        raise ConfigError(f"{where}: 'extra_body' must be a table of request fields")
    for key in ("ignore_eos", "stream"):
        if not isinstance(section.get(key, True), bool):
            raise ConfigError(f"{where}: '{key}' must be true or false")
    return LoadParams(
        url=server.base_url,
        model=server.served_model_name or server.model,
        endpoint=endpoint,
        num_prompts=int(num_prompts) if num_prompts is not None else workload_prompts(section),
        input_len=positive_int(section, "input_len", 1024, where),
        output_len=output_len,
        max_tokens=positive_int(section, "max_tokens", output_len, where),
        ignore_eos=bool(section.get("ignore_eos", True)),
        concurrency=conc,
        request_rate=rate if rate is not None else math.inf,
        seed=seed,
        request_timeout=float(timeout),
        stream=bool(section.get("stream", True)),
        extra_body=thaw(extra),
        trace=thaw(trace) if trace is not None else None,
        dp_ranks=server.rank_header_ranks,
    )


def _body(p: LoadParams, prompt: str, max_tokens: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": p.model, "max_tokens": max_tokens or p.max_tokens or p.output_len,
                            "stream": p.stream, "temperature": 0.0}
    if p.ignore_eos:
        body["ignore_eos"] = True
    if p.stream:
        body["stream_options"] = {"include_usage": True}
    if p.endpoint == "/v1/chat/completions":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body.update(p.extra_body)
    return body


def _text_of(chunk: Mapping[str, Any]) -> str:
    out = []
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, Mapping):
            continue
        text = choice.get("text")
        if text is None and isinstance(choice.get("delta"), Mapping):
            text = choice["delta"].get("content")
        if text is None and isinstance(choice.get("message"), Mapping):
            text = choice["message"].get("content")
        if text:
            out.append(str(text))
    return "".join(out)


def rank_headers(p: LoadParams, conversation: str | None) -> dict[str, str]:
    """The header that keeps a replayed session on one data-parallel replica (the engines that take
    it: :attr:`msopt.engines.cmdline.CommandLineAdapter.rank_header_flags`), the rank the simulator
    routes it to (:func:`msopt.workload.replay.session_rank`); none for a request of no session."""
    if conversation is None or p.dp_ranks <= 1:
        return {}
    return {"X-Data-Parallel-Rank": str(session_rank(conversation, p.dp_ranks))}


async def _one(session: Any, p: LoadParams, rec: RequestRecord, prompt: str, t0: float,
               log: Any, max_tokens: int | None = None, headers: Mapping[str, str] | None = None) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    rec.start = start - t0
    chunks = 0
    usage_tokens: int | None = None
    first: float | None = None
    done = not p.stream
    body = _body(p, prompt, max_tokens)
    rec.asked = body["max_tokens"]
    try:
        async with session.post(p.url + p.endpoint, json=body, headers=headers) as resp:
            if resp.status != 200:
                text = (await resp.text())[:300]
                raise HttpError(resp.status, text)
            if p.stream:
                async for raw in resp.content:
                    line = raw.decode("utf-8", "replace").strip()
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    chunk = json.loads(data)
                    if isinstance(chunk.get("usage"), Mapping):
                        usage_tokens = chunk["usage"].get("completion_tokens", usage_tokens)
                    if _text_of(chunk):
                        chunks += 1
                        if first is None:
                            first = loop.time()
            else:
                payload = await resp.json()
                first = loop.time()
                chunks = 1 if _text_of(payload) else 0
                usage = payload.get("usage")
                if isinstance(usage, Mapping):
                    usage_tokens = usage.get("completion_tokens")
    except Exception as exc:  # noqa: BLE001 - any failure of one request is recorded, not raised
        rec.error = f"{type(exc).__name__}: {exc}"
        rec.cause, rec.context_limit = failure_cause(exc)
        log(f"request {rec.index} failed: {rec.error}")
        return
    end = loop.time()
    rec.output_tokens = int(usage_tokens) if usage_tokens is not None else chunks
    if not done or first is None or rec.output_tokens < 1:
        rec.error = "stream ended early" if not done else "no output tokens"
        rec.cause = "incomplete"
        log(f"request {rec.index} failed: {rec.error}")
        return
    rec.success = True
    rec.ttft = first - start
    rec.latency = end - start
    if rec.output_tokens > 1:
        rec.tpot = (end - first) / (rec.output_tokens - 1)


@dataclass(frozen=True)
class Replay:
    """A trace replay's requests: send times (s), prompts, output lengths, input lengths."""

    send: Sequence[float]
    prompts: Sequence[str]
    max_tokens: Sequence[int]
    input_tokens: Sequence[int]
    trace_span: float
    conversations: Sequence[str | None] = ()


def replay_plan(p: LoadParams, window: TraceWindow | None = None) -> Replay:
    """What a replay of ``p.trace`` sends: ``p.num_prompts`` requests of the window (repeated when
    it holds fewer), at its times (rescaled to a finite ``p.request_rate``), with prompts whose equal
    hash ids are token-identical blocks; content without hash ids is the request's own."""
    assert p.trace is not None
    window = window or open_window(p.trace, "[builtin] trace")
    reqs = window.pick(p.num_prompts)
    by_row = {r.row: k for r, k in zip(window.requests, window.conversations)}
    rate = p.request_rate if math.isfinite(p.request_rate) else None
    send = window.arrivals(p.num_prompts, rate).tolist()
    # the n-th pass over the trace is the trace again (its hash ids too, as the simulator replays
    # it); content without hash ids stays each request's own
    blocks: dict[int, tuple[str, tuple[str, ...]]] = {}
    prompts = [block_prompt(r.hash_ids, window.block_tokens, r.input_tokens, p.seed, str(i), blocks)
               for i, r in enumerate(reqs)]
    return Replay(send, prompts, [r.output_tokens for r in reqs], [r.input_tokens for r in reqs],
                  float(send[-1] - send[0]) if send else 0.0, [by_row.get(r.row) for r in reqs])


async def run_load(p: LoadParams, log: Any = print,
                   window: TraceWindow | None = None) -> tuple[dict[str, Any], list[RequestRecord]]:
    """Send the whole workload; return the summary and the per-request records (``window``: ``p.trace``
    read already, the run's window)."""
    import aiohttp

    replay = replay_plan(p, window) if p.trace is not None else None
    prompts = replay.prompts if replay else synthetic_prompts(p.num_prompts, p.input_len, p.seed)
    gaps = arrival_gaps(p.num_prompts, p.request_rate, p.seed) if replay is None else []
    records = [RequestRecord(i) for i in range(p.num_prompts)]
    sem = asyncio.Semaphore(p.concurrency) if p.concurrency else None
    timeout = aiohttp.ClientTimeout(total=p.request_timeout)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(timeout=timeout, connector=connector, trust_env=False) as session:
        t0 = loop.time()

        async def guarded(i: int) -> None:
            max_tokens = replay.max_tokens[i] if replay else None
            headers = rank_headers(p, replay.conversations[i]) if replay and replay.conversations else None
            if sem is None:
                await _one(session, p, records[i], prompts[i], t0, log, max_tokens, headers)
                return
            async with sem:
                await _one(session, p, records[i], prompts[i], t0, log, max_tokens, headers)

        tasks = []
        for i in range(p.num_prompts):
            if replay is not None:
                # open loop at absolute times: a late send does not delay the ones after it
                records[i].scheduled = replay.send[i]
                records[i].input_tokens = replay.input_tokens[i]
                wait = t0 + replay.send[i] - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
            elif i > 0 and gaps[i - 1] > 0:
                await asyncio.sleep(gaps[i - 1])
            tasks.append(asyncio.create_task(guarded(i)))
        await asyncio.gather(*tasks)
        duration = loop.time() - t0
    summary = summarize(records, duration, p)
    if replay is not None:
        summary["replay"] = replay_report(records, replay)
    summary.update(sent_metrics(summary.get("replay"), records))
    return summary, records


def sent_metrics(replay: Mapping[str, Any] | None, records: Sequence[RequestRecord]) -> dict[str, float | None]:
    """What a run actually sent, as the journal keeps it (:data:`msopt.metrics.SENT`): a replay's
    :func:`replay_report` flattened; synthetic load: requests, span and mean output tokens (its
    prompts' token counts are the server's tokenizer's, not known here; its sends are not late)."""
    if replay is not None:
        late = replay["lateness_s"]
        return {SENT_REQUESTS: float(replay["requests"]), SENT_SPAN: replay["span_s"],
                SENT_INPUT_MEAN: replay["mean_input_tokens"], SENT_OUTPUT_MEAN: replay["mean_output_tokens"],
                SEND_LATE_P50: late["p50"], SEND_LATE_P99: late["p99"]}
    starts = [r.start for r in records]
    out = [r.output_tokens for r in records if r.success]
    return {SENT_REQUESTS: float(len(records)), SENT_SPAN: (max(starts) - min(starts)) if starts else 0.0,
            SENT_OUTPUT_MEAN: float(np.mean(out)) if out else None}


def replay_report(records: Sequence[RequestRecord], replay: Replay) -> dict[str, Any]:
    """What a replay actually sent: requests, span (first to last send) against the trace's,
    mean lengths, and how late each send was against its trace time (the client's own delay; a
    request held back by ``concurrency`` counts as late)."""
    sent = [r for r in records if r.scheduled is not None]
    starts = [r.start for r in sent]
    late = [r.start - (r.scheduled or 0.0) for r in sent]
    out_tokens = [r.output_tokens for r in sent if r.success]

    def q(xs: Sequence[float], pct: float) -> float | None:
        return float(np.percentile(xs, pct)) if xs else None

    return {"requests": len(sent), "span_s": (max(starts) - min(starts)) if starts else 0.0,
            "trace_span_s": replay.trace_span,
            "mean_input_tokens": float(np.mean(replay.input_tokens)) if replay.input_tokens else None,
            "mean_output_tokens": float(np.mean(out_tokens)) if out_tokens else None,
            "lateness_s": {"p50": q(late, 50), "p99": q(late, 99), "max": max(late) if late else None}}


def summarize(records: Sequence[RequestRecord], duration: float, p: LoadParams | None = None) -> dict[str, Any]:
    """The five metrics (and a few more) from the request records."""
    ok = [r for r in records if r.success]
    out_tokens = sum(r.output_tokens for r in ok)
    tpots = [r.tpot for r in ok if r.tpot is not None]

    def mean(xs: Sequence[Any]) -> float | None:
        return float(np.mean(xs)) if xs else None

    summary: dict[str, Any] = {
        "generate_speed": out_tokens / duration if duration > 0 else None,
        "time_to_first_token": mean([r.ttft for r in ok]),
        "time_per_output_token": mean(tpots),
        "success_rate": len(ok) / len(records) if records else None,
        "throughput": len(ok) / duration if duration > 0 else None,
        "duration": duration,
        "completed": len(ok),
        "num_prompts": len(records),
        "total_output_tokens": out_tokens,
        "mean_latency": mean([r.latency for r in ok]),
        "p99_ttft": float(np.percentile([r.ttft for r in ok], 99)) if ok else None,
        **failure_metrics(records),
    }
    if p is not None and p.ignore_eos:  # answered with fewer tokens than asked: the server cut the output to its
        # context (vllm 0.32.0 entrypoints/serve/utils/api_utils.py:169-205); journaled only where any was
        cut = sum(1 for r in ok if r.asked is not None and r.output_tokens < r.asked)
        if cut:
            summary[OUTPUTS_CUT] = float(cut)
    for column in PERCENTILES:  # ttft_p99, ...: what an SLO's percentile holds
        metric, _, stat = column.partition("_")
        values = [float(v) for v in ([r.ttft for r in ok] if metric == "ttft" else tpots) if v is not None]
        summary[column] = float(np.percentile(values, int(stat[1:]))) if values else None
    if p is not None:
        summary["params"] = {k: v for k, v in asdict(p).items() if k != "extra_body"}
        if not math.isfinite(p.request_rate):
            summary["params"]["request_rate"] = "inf"
    return summary


def _run_sync(p: LoadParams, timeout: float, log: Any,
              window: TraceWindow | None = None) -> tuple[dict[str, Any], list[RequestRecord]]:
    async def bounded() -> tuple[dict[str, Any], list[RequestRecord]]:
        return await asyncio.wait_for(run_load(p, log, window), timeout)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(bounded())
    # Called from inside an event loop (an async actor): run on a thread of our own.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, bounded()).result()


def write_results(result_dir: Path, summary: Mapping[str, Any], records: Sequence[RequestRecord]) -> None:
    """``builtin_result.json`` and ``requests.jsonl`` in ``result_dir``."""
    result_dir.mkdir(parents=True, exist_ok=True)
    (result_dir / RESULT_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    with (result_dir / REQUESTS_FILE).open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(asdict(r)) + "\n")


class BuiltinBenchmark(BenchmarkAdapter):
    """msopt's in-process OpenAI-compatible load generator (``[builtin]`` table)."""

    name = "builtin"
    produces = frozenset((*METRICS, *PERCENTILES))
    replays_trace = True

    def num_prompts(self, section: Mapping[str, Any]) -> int:
        """``[builtin] num_prompts`` (default 200)."""
        return workload_prompts(section)

    def configured_load(self, section: Mapping[str, Any]) -> dict[str, Any]:
        """``[builtin] concurrency`` and ``request_rate`` (its own table, not a ``command`` one); a rate
        of ``"inf"`` is the closed loop: no rate."""
        out: dict[str, Any] = {}
        rate = section.get("request_rate")
        if is_number(rate) and math.isfinite(rate):
            out["request_rate"] = rate
        if section.get("concurrency") is not None:
            out["concurrency"] = section["concurrency"]
        return out

    def with_seed(self, section: Mapping[str, Any], offset: int) -> Mapping[str, Any]:
        """``[builtin] seed`` (default 0) moved ``offset`` on: it seeds the synthetic prompts."""
        return {**section, "seed": int(section.get("seed", 0)) + offset} if offset else section

    def render(self, candidate: Candidate, *, server: LaunchSpec, num_prompts: int | None, load: Mapping[str, float],
               result_dir: Path, workload: ResolvedWorkload | None = None) -> tuple[tuple[str, ...], dict[str, str]]:
        """The equivalent child-process command (``python -m msopt.benchmarks PARAMS_JSON``: a trace by its table)."""
        values, fields, section = candidate.values, candidate.fields, candidate.section
        p = params_from_section(section, server, values, fields, num_prompts, load, workload)
        params = asdict(p)
        params["request_rate"] = p.request_rate if math.isfinite(p.request_rate) else "inf"
        params["result_dir"] = str(result_dir)
        return ((sys.executable, "-m", "msopt.benchmarks", json.dumps(params)),
                env_fields(candidate, self.name))

    def parse(self, result_dir: Path, log_path: Path) -> dict[str, float | None]:
        """Read ``builtin_result.json``."""
        path = Path(result_dir) / RESULT_FILE
        if not path.exists():
            raise EvaluationError(no_result_report(f"benchmark {self.name}", RESULT_FILE, result_dir, log_path))
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
            return check_metrics(self.name, summary, _extra(summary))
        except (OSError, json.JSONDecodeError) as exc:
            raise EvaluationError(f"cannot read the builtin benchmark result {path}: {exc}") from None

    def run(self, server: LaunchSpec, candidate: Candidate, *, num_prompts: int | None, load: Mapping[str, float],
            result_dir: Path, log_path: Path, timeout: float,
            workload: ResolvedWorkload | None = None) -> dict[str, float | None]:
        """Run the load in this process (a trace replayed from ``workload``'s window, not read again); a
        timeout is an EvaluationError."""
        values, fields, section = candidate.values, candidate.fields, candidate.section
        p = params_from_section(section, server, values, fields, num_prompts, load, workload)
        window = workload.window if workload is not None else None
        result_dir = Path(result_dir)
        log_path = Path(log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("a", encoding="utf-8") as logf:
            def log(msg: str) -> None:
                logf.write(f"{time.strftime('%H:%M:%S')} {msg}\n")
                logf.flush()

            what = f"a replay of {p.trace['path']}" if p.trace else "synthetic prompts"
            log(f"builtin benchmark: {p.num_prompts} prompts ({what}) to {p.url}{p.endpoint}, concurrency "
                f"{p.concurrency}, request_rate {p.request_rate}")
            before = read_counters(p.url, engine=server.engine)
            try:
                summary, records = _run_sync(p, timeout, log, window)
            except TimeoutError:
                log(f"timed out after {timeout:g} s")
                raise EvaluationError(f"builtin benchmark did not finish within {timeout:g} s") from None
            after = read_counters(p.url, engine=server.engine)
            cache = cache_report(before, after)
            summary["prefix_cache"] = cache
            accept = spec_report(before, after)
            if accept is not None:  # absent where the server drafted nothing
                summary[SPEC_ACCEPT_LEN] = accept
                log(f"speculative decoding: mean acceptance length {accept:.3f} (the server's counters)")
            if cache[PREFIX_CACHE_HIT_RATE] is not None:  # absent where not measured: journals stay as they were
                summary[PREFIX_CACHE_HIT_RATE] = cache[PREFIX_CACHE_HIT_RATE]
                log(f"prefix cache: {cache[PREFIX_CACHE_HIT_RATE]:.1%} of {cache['prefix_cache_queries']:.0f} "
                    "prompt tokens queried were cached")
            log(f"done: {summary['completed']}/{summary['num_prompts']} succeeded in "
                f"{summary['duration']:.3f} s")
        write_results(result_dir, summary, records)
        return check_metrics(self.name, summary, _extra(summary))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m msopt.benchmarks PARAMS_JSON``: run the builtin load and write the results."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m msopt.benchmarks PARAMS_JSON", file=sys.stderr)
        return 2
    params = json.loads(args[0])
    result_dir = Path(params.pop("result_dir", "."))
    rate = params.get("request_rate", "inf")
    params["request_rate"] = math.inf if rate == "inf" else float(rate)
    p = LoadParams(**params)
    summary, records = asyncio.run(run_load(p, lambda m: print(m, flush=True)))
    write_results(result_dir, summary, records)
    print(json.dumps({k: summary[k] for k in ("generate_speed", "success_rate", "throughput")}))
    return 0


BENCHMARKS.register("builtin", BuiltinBenchmark)
