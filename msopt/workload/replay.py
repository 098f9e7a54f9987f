"""What a replay of a trace sends: each request's send time, lengths and prompt text.

The simulator (:mod:`msopt.sim.workload`), the builtin benchmark and ``vllm bench serve``'s
``timed_trace`` file (:mod:`msopt.benchmarks.vllm_benchmark`) replay a trace the same way:

- request i is the trace's i-th (the trace again, one mean gap after its last arrival, when more
  requests are asked for than the window holds), sent at the trace's time;
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

    def pick(self, n: int) -> list[TraceRequest]:
        """Request i of a replay of ``n``: the trace's i-th, the trace repeated when shorter."""
        m = len(self.requests)
        return [self.requests[i % m] for i in range(n)]

    def arrivals(self, n: int, request_rate: float | None = None) -> np.ndarray:
        """Send times (s, the first at 0) of a replay of ``n`` requests; see :func:`replay_arrivals`."""
        return replay_arrivals(np.asarray([r.arrival_s for r in self.requests], np.float64), n, request_rate)


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


def replay_arrivals(arrivals: np.ndarray, n: int, request_rate: float | None = None) -> np.ndarray:
    """Send times of a replay of ``n`` requests of a trace whose arrivals are ``arrivals``.

    The trace is repeated, one mean gap after its last arrival, when ``n`` is larger; the first
    send is at 0. A finite ``request_rate`` rescales the times to that mean rate (a capacity probe),
    an infinite one sends everything at once.
    """
    m = len(arrivals)
    span = float(arrivals[-1] - arrivals[0]) if m else 0.0
    trace_rate = (m - 1) / span if span > 0 else None
    arr = arrivals
    if n > m:
        period = span + (1.0 / trace_rate if trace_rate else 0.0)
        arr = np.resize(arrivals, n) + np.repeat(np.arange(-(-n // m)), m)[:n] * period
    out = arr[:n] - arr[0]
    if request_rate is not None and trace_rate:
        out = out * (trace_rate / request_rate) if math.isfinite(request_rate) else np.zeros(n)
    return out


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


__all__ = ["BLOCK_WORDS", "REPLAY_KEYS", "TraceWindow", "block_prompt", "open_window", "replay_arrivals"]
