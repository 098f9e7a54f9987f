"""What a replay of a trace sends: each request's send time, lengths and prompt text.

The simulator (:mod:`msopt.sim.workload`), the builtin benchmark and ``vllm bench serve``'s
``timed_trace`` file (:mod:`msopt.benchmarks.vllm_benchmark`) replay a trace the same way:

- asked for the whole window (or more), request i is the trace's i-th (the trace again, one mean
  gap after its last arrival, when more requests are asked for than the window holds), sent at
  the trace's time;
- asked for fewer (the search's ``sample_size``), the requests of :func:`sample_windows`: windows
  of equal duration, one in each equal slice of the window's time, together as long as the share
  of the span the share of requests asks for. Each window keeps the trace's own gaps, so a burst
  stays a burst and a quiet period quiet, and the slices take the busy and the quiet parts, the
  long prompts and the short, in proportion to their time; the windows are sent one after the
  other, each as long as in the trace (never the first N requests: the start of a trace is
  one part of its day);
- a ``request_rate`` (a capacity probe's load) rescales the send times to that mean rate;
- equal hash ids are equal token blocks, so a server's prefix cache hits where production's did;
  a request without hash ids gets content no other request has, so it is never credited with a hit.

The prompt text (:func:`block_prompt`) is built from :data:`BLOCK_WORDS`, words that are one token
each (checked against the tiny Llama tokenizer of the vLLM CPU build; frequent English words are
one token in the Llama and Qwen tokenizers too), each after a space: a byte-level BPE or
SentencePiece tokenizer never merges across the space, so equal words give equal tokens whatever
precedes them, and a block of ``n`` words is ``n`` tokens.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from msopt.errors import ConfigError
from msopt.workload.trace import Trace, TraceCounts, TraceRequest

#: one token each after a space (see the module docstring); order matters: a block's words are
#: indices into this list, drawn from its hash id
BLOCK_WORDS: tuple[str, ...] = (
    "the", "of", "and", "to", "in", "is", "for", "on", "that", "with", "as", "by", "at", "from", "an", "are",
    "it", "be", "this", "which", "or", "not", "but", "one", "all", "has", "when", "will", "no", "if", "out",
    "so", "up", "its", "into", "than", "them", "can", "only", "new", "time", "may", "do", "first", "any",
    "over", "me", "before", "must", "back", "should", "each", "state", "make", "get", "both", "same", "last",
    "off", "used")

#: keys of a replay table (``[builtin] trace``, ``[vllm_benchmark] trace``, ``[simulator.workload] trace``):
#: ``path`` and :class:`Trace`'s options
REPLAY_KEYS: tuple[str, ...] = ("path", "format", "window", "time_scale", "block_size", "max_model_len",
                                "length_policy", "time_unit", "columns")


@dataclass(frozen=True)
class TraceWindow:
    """A trace window, read once: its requests in order, and the tokens each hash id stands for.

    What is derived from the requests (their arrivals, conversations, and each replay's indices and
    send times) is computed once per window and kept with it, so that every evaluation of a run
    replays the one window without reading or deriving it again.

    Attributes:
        requests: the window's requests (arrivals from 0, already divided by ``time_scale``).
        block_tokens: tokens per hash id after the length policy (0 when the trace records none).
        counts: what the pass saw.
    """

    requests: tuple[TraceRequest, ...]
    block_tokens: int
    counts: TraceCounts

    @property
    def rate(self) -> float | None:
        """The window's mean rate, (requests - 1) / span, or None for a span of 0."""
        span = self.requests[-1].arrival_s - self.requests[0].arrival_s
        return (len(self.requests) - 1) / span if span > 0 else None

    @property
    def has_prefixes(self) -> bool:
        """True when some request carries hash ids (a prefix cache can hit)."""
        return bool(self.block_tokens) and any(r.hash_ids for r in self.requests)

    @cached_property
    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """(input tokens, output tokens) of every request, int64 arrays (read-only: computed once per window)."""
        ins = np.asarray([r.input_tokens for r in self.requests], np.int64)
        outs = np.asarray([r.output_tokens for r in self.requests], np.int64)
        ins.flags.writeable = outs.flags.writeable = False
        return ins, outs

    @cached_property
    def conversations(self) -> tuple[str | None, ...]:
        """Each request's conversation (:func:`conversation_keys`)."""
        return tuple(conversation_keys(self.requests))

    def pick(self, n: int) -> list[TraceRequest]:
        """The requests of a replay of ``n`` (see :func:`replay_indices`)."""
        return [self.requests[i] for i in self.replay(n)[0].tolist()]

    @cached_property
    def _arrivals(self) -> np.ndarray:
        out = np.asarray([r.arrival_s for r in self.requests], np.float64)
        out.flags.writeable = False  # shared by every replay of the window
        return out

    def arrival_array(self) -> np.ndarray:
        """The window's arrivals (s) as an array (read-only: computed once per window)."""
        return self._arrivals

    def replay(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """:func:`replay_indices` of a replay of ``n``, computed once per ``n`` and window (read-only arrays)."""
        cache: dict[int, tuple[np.ndarray, np.ndarray]] = self.__dict__.setdefault("_replays", {})
        got = cache.get(n)
        if got is None:
            idx, times = replay_indices(self._arrivals, n)
            idx.flags.writeable = False
            times.flags.writeable = False
            got = cache[n] = (idx, times)
        return got

    def arrivals(self, n: int, request_rate: float | None = None) -> np.ndarray:
        """Send times (s, the first at 0) of a replay of ``n`` requests; see :func:`replay_arrivals`."""
        return rescale_replay(self._arrivals, n, self.replay(n)[1], request_rate)


def open_window(table: Mapping[str, object], where: str) -> TraceWindow:
    """Read a replay table (``path`` and :class:`Trace`'s options) into a :class:`TraceWindow`.

    Raises:
        ConfigError: an unknown key, an unreadable trace, a bad row, an empty window.
    """

    unknown = sorted(set(table) - set(REPLAY_KEYS))
    if unknown or "path" not in table:
        raise ConfigError(f"{where}: a trace table needs 'path' and may hold {', '.join(REPLAY_KEYS[1:])}; "
                          f"got {', '.join(sorted(table)) or 'nothing'}")
    opts = {k: table[k] for k in REPLAY_KEYS[1:] if k in table}
    if "window" in opts:
        opts["window"] = tuple(opts["window"])  # type: ignore[arg-type]
    if "columns" in opts:
        opts["columns"] = dict(opts["columns"])  # type: ignore[call-overload]
    trace = Trace(str(table["path"]), where=where, **opts)  # type: ignore[arg-type]
    counts = TraceCounts()
    requests = tuple(trace.requests(counts))
    # a scaled trace's hash id stands for fewer tokens (msopt.workload.trace, "scale")
    block = max(1, round(trace.block_size * counts.scale)) if trace.block_size else 0
    return TraceWindow(requests, block, counts)


#: requests per window of a sample, at least (a window keeps the trace's own gaps: long enough to hold a burst)
WINDOW_REQUESTS = 32
#: windows of a sample, at most (enough slices of the day for its busy and quiet hours)
MAX_WINDOWS = 16


def sample_windows(arrivals: np.ndarray, n: int) -> tuple[tuple[int, int, float, float], ...]:
    """The windows a replay of ``n`` requests (fewer than the trace's ``m``) sends: ``(first, end,
    start_s, duration_s)`` each, requests ``first`` to ``end - 1`` of the trace, sent as they lie in
    the window from ``start_s`` (trace time) for ``duration_s``.

    The trace's span is cut into ``k`` equal slices of time (``n`` // :data:`WINDOW_REQUESTS`, at
    most :data:`MAX_WINDOWS`, at least 1). Slice j, holding ``c_j`` of the ``m`` requests, gives
    ``n_j`` = ``n`` c_j / m of them (largest remainders: ``n`` in all), the run of ``n_j``
    consecutive requests whose span is nearest the window's duration ``D`` = slice × n / m (the
    nearest the slice's middle among equals): it arrives at the slice's own mean rate, with the
    trace's own gaps inside. The windows together last the sample's share of the span, so the
    replay's mean rate is the trace's, and each part of the day, busy or quiet, gives its share of
    the requests. An empty slice is a quiet window of ``D``. A trace whose requests share one time
    gives ``n`` requests evenly spaced over it, in one window of duration 0.
    """
    m = len(arrivals)
    if n >= m:
        return ((0, m, float(arrivals[0]) if m else 0.0, float(arrivals[-1] - arrivals[0]) if m else 0.0),)
    t0, span = float(arrivals[0]), float(arrivals[-1] - arrivals[0])
    if span <= 0:
        return ((0, m, t0, 0.0),)  # replay_indices spaces n of them evenly
    k = max(1, min(MAX_WINDOWS, n // WINDOW_REQUESTS))
    width = span / k
    edges = np.searchsorted(arrivals, t0 + np.arange(1, k) * width, side="left")
    lo = np.concatenate([[0], edges])
    hi = np.concatenate([edges, [m]])
    share = n * (hi - lo) / m
    take = np.floor(share).astype(np.int64)
    for j in np.argsort(-(share - take), kind="stable")[: n - int(take.sum())]:
        take[j] += 1
    dur = width * n / m
    out = []
    for j in range(k):
        a, b, nj = int(lo[j]), int(hi[j]), int(take[j])
        middle = t0 + (j + 0.5) * width
        if nj == 0:
            out.append((a, a, middle - dur / 2, dur))
            continue
        starts = np.arange(a, b - nj + 1)
        spans = arrivals[starts + nj - 1] - arrivals[starts]
        target = dur * (nj - 1) / nj  # n_j arrivals at the slice's rate span (n_j - 1) gaps
        miss = np.abs(spans - target) / target if target > 0 else spans
        if nj > 2 and b - a > 2:
            # and whose gaps vary as the slice's do (its bursts): the CV of a run's gaps from running sums
            gaps = np.diff(arrivals[a:b])
            c1, c2 = np.concatenate([[0.0], np.cumsum(gaps)]), np.concatenate([[0.0], np.cumsum(gaps * gaps)])
            r = starts - a
            g1, g2 = c1[r + nj - 1] - c1[r], c2[r + nj - 1] - c2[r]
            mean = g1 / (nj - 1)
            cv = np.sqrt(np.maximum(g2 / (nj - 1) - mean * mean, 0.0)) / np.where(mean > 0, mean, 1.0)
            whole = gaps.std() / gaps.mean() if gaps.mean() > 0 else 0.0
            miss = miss + (np.abs(cv - whole) / whole if whole > 0 else cv)
        centre = (arrivals[starts] + arrivals[starts + nj - 1]) / 2
        best = int(starts[np.lexsort((np.abs(centre - middle), np.round(miss, 9)))[0]])
        run = float(arrivals[best + nj - 1] - arrivals[best])
        d = max(dur, run)
        out.append((best, best + nj, float(arrivals[best]) - (d - run) / 2, d))
    return tuple(out)


def replay_indices(arrivals: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(the trace index of each request of a replay of ``n``, its send time in s, the first at 0),
    before any rate scaling.

    ``n`` at least the trace's requests: request i is the trace's i % m, the trace repeated one mean
    gap after its last arrival. Fewer: the requests of :func:`sample_windows`, each window sent after
    the one before, as long as it lasts in the trace.
    """
    m = len(arrivals)
    span = float(arrivals[-1] - arrivals[0]) if m else 0.0
    if n >= m:
        trace_rate = (m - 1) / span if span > 0 else None
        arr = arrivals
        if n > m:
            period = span + (1.0 / trace_rate if trace_rate else 0.0)
            arr = np.resize(arrivals, n) + np.repeat(np.arange(-(-n // m)), m)[:n] * period
        return np.arange(n) % m, arr[:n] - arr[0]
    if span <= 0:
        idx = np.linspace(0, m - 1, n).round().astype(np.int64)
        return idx, np.zeros(n)
    parts_i, parts_t = [], []
    offset = 0.0
    for first, end, start, duration in sample_windows(arrivals, n):
        parts_i.append(np.arange(first, end))
        parts_t.append(arrivals[first:end] - start + offset)
        offset += duration
    idx, times = np.concatenate(parts_i), np.concatenate(parts_t)
    return idx, times - times[0]


def replay_arrivals(arrivals: np.ndarray, n: int, request_rate: float | None = None) -> np.ndarray:
    """Send times of a replay of ``n`` requests of a trace whose arrivals are ``arrivals``
    (:func:`replay_indices`; the first send at 0).

    A finite ``request_rate`` rescales the times to that mean rate (a capacity probe; a sample's
    own mean rate is rescaled), an infinite one sends everything at once.
    """
    return rescale_replay(arrivals, n, replay_indices(arrivals, n)[1], request_rate)


def rescale_replay(arrivals: np.ndarray, n: int, times: np.ndarray, request_rate: float | None) -> np.ndarray:
    """The send times ``times`` of a replay of ``n`` (:func:`replay_indices`) at ``request_rate``, as
    :func:`replay_arrivals` gives them (a new array)."""
    m = len(arrivals)
    out = times.copy()
    if n >= m:
        span = float(arrivals[-1] - arrivals[0]) if m else 0.0
        rate = (m - 1) / span if span > 0 else None
    else:
        rate = (n - 1) / float(out[-1]) if n > 1 and out[-1] > 0 else None
    if request_rate is not None and rate:
        out = out * (rate / request_rate) if math.isfinite(request_rate) else np.zeros(n)
    return out


def conversation_keys(requests: Sequence[TraceRequest]) -> list[str | None]:
    """Each request's conversation: its ``session_id`` (BurstGPT, generic CSV), or for a Bailian turn
    the first turn's ``chat_id``, followed up its ``parent_chat_id`` chain (every turn has a chat_id of
    its own); None for a request of no session."""
    root: dict[str, str] = {}
    out: list[str | None] = []
    for r in requests:
        if r.session_id is None:
            out.append(None)
            continue
        key = root.get(r.parent_id, r.parent_id) if r.parent_id is not None else r.session_id
        root.setdefault(r.session_id, key or r.session_id)
        out.append(root[r.session_id])
    return out


def session_rank(key: str, ranks: int) -> int:
    """The data-parallel rank a session is pinned to among ``ranks``: a stable digest of its key
    (the same in every process), so the simulator and the client agree."""
    digest = hashlib.blake2b(f"session:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % max(1, ranks)


def _gap_cv(times: np.ndarray) -> float | None:
    gaps = np.diff(times)
    return float(gaps.std() / gaps.mean()) if len(gaps) and gaps.mean() > 0 else None


def describe_replay(window: TraceWindow, n: int, who: str = "the search") -> list[str]:
    """What a replay of ``n`` requests of ``window`` sends, in lines for the run's first lines: the
    windows (trace seconds), their share of the trace's requests and span, and their mean rate,
    burstiness (CV of the gaps) and input p99 against the whole window's."""
    arr = window.arrival_array()
    m = len(arr)
    span = float(arr[-1] - arr[0]) if m else 0.0
    if n >= m:
        more = f", the trace repeated to {n:,}" if n > m else ""
        return [f"{who} replays the whole window: {m:,} requests over {span:,.0f} s{more}"]
    idx, times = window.replay(n)
    wins = sample_windows(arr, n)
    ins = np.asarray([r.input_tokens for r in window.requests], np.float64)

    def rate(t: np.ndarray) -> str:
        return f"{(len(t) - 1) / float(t[-1] - t[0]):.3g}" if len(t) > 1 and t[-1] > t[0] else "all at once"

    def cv(t: np.ndarray) -> str:
        c = _gap_cv(t)
        return "n/a" if c is None else f"{c:.2f}"

    covered = sum(d for *_, d in wins)
    shown = ", ".join(f"{s - arr[0]:,.0f}-{s - arr[0] + d:,.0f}" for _, _, s, d in wins)
    return [f"{who} replays {n:,} of the trace's {m:,} requests ({n / m:.1%}) in {len(wins)} window(s) across its "
            f"{span:,.0f} s, {covered:,.0f} s together ({covered / span if span > 0 else 0:.1%} of the span), "
            "never its first requests alone",
            f"  windows (s from the trace's start): {shown}",
            f"  rate {rate(times)} req/s against the trace's {rate(arr)}, burstiness (CV of gaps) {cv(times)} "
            f"against {cv(arr)}, input p99 {np.percentile(ins[idx], 99):,.0f} against "
            f"{np.percentile(ins, 99):,.0f} tokens"]


#: the words as they stand in a prompt, each after its space
_SPACED = np.array([" " + w for w in BLOCK_WORDS])


def _block_words(key: str, size: int) -> tuple[str, ...]:
    """``size`` words (each after its space) drawn from a stable digest of ``key`` (the same in every
    process: Python's own ``hash`` of a string is salted per process)."""
    seed = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
    return tuple(_SPACED[np.random.default_rng(seed).integers(0, len(BLOCK_WORDS), size=size)].tolist())


def block_prompt(hash_ids: Sequence[int], block_tokens: int, input_tokens: int, seed: int,
                 unique: str, cache: dict[int, tuple[str, tuple[str, ...]]] | None = None) -> str:
    """The prompt text of one request: ``input_tokens`` words, each one token.

    Block j (``block_tokens`` words) is drawn from ``(seed, hash_ids[j])`` alone, so requests with
    equal leading hash ids share those blocks word for word; a last, partial block is the start of
    its id's full block. Tokens past the hash ids (or every token, without them) are drawn from
    ``(seed, unique)``: give each request its own ``unique`` and no other request shares them.
    ``cache`` (hash id -> its block's text and words, for one seed and block size) saves drawing a
    block again.
    """
    pieces: list[str] = []
    left = input_tokens
    if block_tokens > 0:
        for h in hash_ids:
            if left <= 0:
                break
            block = cache.get(h) if cache is not None else None
            if block is None:
                words = _block_words(f"{seed}:h:{h}", block_tokens)
                block = ("".join(words), words)
                if cache is not None:
                    cache[h] = block
            pieces.append(block[0] if left >= block_tokens else "".join(block[1][:left]))
            left -= block_tokens
    if left > 0:
        pieces.append("".join(_block_words(f"{seed}:u:{unique}", left)))
    return "".join(pieces)


__all__ = ["BLOCK_WORDS", "MAX_WINDOWS", "REPLAY_KEYS", "WINDOW_REQUESTS", "TraceWindow", "block_prompt",
           "conversation_keys", "describe_replay", "open_window", "replay_arrivals", "replay_indices", "rescale_replay",
           "sample_windows", "session_rank"]
