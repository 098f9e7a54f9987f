"""An engine that died while it served: what its log and its process say, as one record.

A death mid-measurement is a fault of the engine with a cause, never a measurement: the runner
asks the adapter's :class:`CrashReader` for the cause after every benchmark, and the evaluation
then carries the :class:`EngineCrash` (journaled as ``crash``) instead of metrics. Each engine's
own patterns live in its folder (vLLM's: :mod:`msopt.engines.vllm.crash`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["LOG_TAIL_BYTES", "CrashPattern", "CrashReader", "EngineCrash"]

#: How much of the end of a server log is read for a crash (a busy server's log can be large;
#: :func:`msopt.launch.logs.tail_text` reads it).
LOG_TAIL_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class EngineCrash:
    """One death of an engine while it served.

    Attributes:
        engine: the engine as users name it ("vLLM").
        what: what died, as a phrase ("worker died", "engine core died", "server exited with code 1").
        line: the log line that says so ("" when only the process said it).
        log: the server log's path.
        prompt_tokens: the prompt length of the request in flight, or None when nothing says it.
        source: where ``prompt_tokens`` was read ("the server log", "the benchmark"), or "".
    """

    engine: str
    what: str
    line: str
    log: str
    prompt_tokens: int | None = None
    source: str = ""

    @property
    def signature(self) -> str:
        """What two crashes on the same request share: what died and the prompt's length."""
        return f"{self.engine}|{self.what}|{self.prompt_tokens}"

    def message(self) -> str:
        """The one line a run prints: ``vLLM's worker died serving a 4-token prompt (log ...)``."""
        serving = (f"serving a {self.prompt_tokens}-token prompt" if self.prompt_tokens is not None
                   else "serving a request whose length nothing recorded")
        return f"{self.engine}'s {self.what} {serving} (log {self.log})"

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict, as the journal keeps it."""
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EngineCrash:
        """Rebuild a crash from its journaled dict."""
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class CrashPattern:
    """A log line that says the engine died.

    Attributes:
        regex: matched against each line; a named group ``code`` is the exit code where it has one.
        what: the phrase for :attr:`EngineCrash.what` ("worker died"); ``{code}`` is substituted.
        origin: the program, version and source file that prints the line.
        sample: a line as that program logs it (the tests match it).
    """

    regex: str
    what: str
    origin: str
    sample: str


@dataclass(frozen=True)
class CrashReader:
    """An engine's crash patterns, read from the end of its server log.

    Attributes:
        engine: the engine as users name it.
        deaths: the lines that say the engine died, most specific first.
        prompt_tokens: a regex whose group 1 is the in-flight request's prompt length, as the engine
            dumps it when it dies (None: the engine dumps none).
        prompt_origin: where that dump comes from.
    """

    engine: str
    deaths: Sequence[CrashPattern]
    prompt_tokens: str | None = None
    prompt_origin: str = ""

    def read(self, text: str, log: str) -> EngineCrash | None:
        """The crash ``text`` (the end of a server log at ``log``) reports, or None."""
        lines = text.splitlines()
        for pattern in self.deaths:
            rx = re.compile(pattern.regex)
            for i, line in enumerate(lines):
                m = rx.search(line)
                if m is None:
                    continue
                code = m.groupdict().get("code")
                what = pattern.what.format(code=code if code is not None else "?")
                tokens = self._prompt_tokens(lines[max(0, i - 200):])
                return EngineCrash(self.engine, what, line.strip()[:300], log, tokens,
                                   "the server log" if tokens is not None else "")
        return None

    def _prompt_tokens(self, lines: Sequence[str]) -> int | None:
        if self.prompt_tokens is None:
            return None
        rx = re.compile(self.prompt_tokens)
        for line in lines:
            m = rx.search(line)
            if m is not None:
                return int(m.group(1))
        return None
