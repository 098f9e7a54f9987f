"""Why the builtin benchmark's requests failed (issue 52): each failure's cause as
:data:`msopt.metrics.FAILED_PREFIX` names it, with the context limit a server named in refusing a request
longer than its context, and the failed requests counted by cause for the journal.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from msopt.metrics import CONTEXT_LIMIT, FAILED_PREFIX


class Outcome(Protocol):
    """What :func:`failure_metrics` reads of one request's record (:class:`msopt.benchmarks.builtin.RequestRecord`)."""

    success: bool
    cause: str | None
    context_limit: int | None


class HttpError(RuntimeError):
    """A server's answer other than 200: its status and the start of its body."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text}")
        self.status = status
        self.text = text


#: How a server says a request is longer than its context, with the limit: vLLM 0.32.0's three messages
#: (vllm/renderers/params.py "This model's maximum context length is N tokens", vllm/v1/engine/
#: input_processor.py "... is longer than the maximum model length of N", vllm/entrypoints/serve/utils/
#: api_utils.py "Input length (L) exceeds model's maximum context length (N)"); msopt's simulated server
#: answers the first (msopt/sim/serve.py)
_CONTEXT_MESSAGES = (re.compile(r"maximum context length is (\d+)"),
                     re.compile(r"longer than the maximum model length of (\d+)"),
                     re.compile(r"maximum context length \((\d+)\)"))


def failure_cause(exc: BaseException) -> tuple[str, int | None]:
    """Why one request failed, as :data:`msopt.metrics.FAILED_PREFIX` names it (``too_long``, ``timeout``,
    ``connection``, ``http_<status>``, ``other``), and for ``too_long`` the context limit the server
    named (None where it named none)."""
    import aiohttp

    if isinstance(exc, HttpError):
        if exc.status == 400:
            for pattern in _CONTEXT_MESSAGES:
                if m := pattern.search(exc.text):
                    return "too_long", int(m.group(1))
        return f"http_{exc.status}", None
    if isinstance(exc, TimeoutError):  # aiohttp's total timeout raises asyncio.TimeoutError, this one
        return "timeout", None
    if isinstance(exc, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, ConnectionError)):
        return "connection", None
    return "other", None


def failure_metrics(records: Sequence[Outcome]) -> dict[str, float]:
    """The failed requests by cause (:data:`msopt.metrics.FAILED_PREFIX`; none where none failed), and
    beside refusals for length the context limit the server named."""
    out: dict[str, float] = {}
    limits = []
    for r in records:
        if not r.success:
            key = FAILED_PREFIX + (r.cause or "other")
            out[key] = out.get(key, 0.0) + 1
            if r.context_limit is not None:
                limits.append(r.context_limit)
    if limits:
        out[CONTEXT_LIMIT] = float(min(limits))
    return out


__all__ = ["HttpError", "Outcome", "failure_cause", "failure_metrics"]
