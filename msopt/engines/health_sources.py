"""Where the engine-specific patterns of the packaged ``[health_check]`` table come from.

Each built-in adapter declares the packaged patterns its engine prints (its folder's ``health.py``)
(:attr:`~msopt.engines.base.EngineAdapter.health_sources`) and the alarming lines it prints that
are no failure (:attr:`~msopt.engines.base.EngineAdapter.benign_lines`);
:func:`msopt.evaluate.health.pattern_sources` gathers them with the engine-neutral ones, and the
tests check that they and msopt/config/defaults.toml agree.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PatternSource:
    """Where a packaged health pattern comes from, and a log line it must match.

    Attributes:
        kind: "service" or "benchmark".
        severity: "fatal" or "retryable".
        error_type: the error type it is filed under in msopt/config/defaults.toml.
        pattern: the pattern, as in defaults.toml.
        origin: the program and version that prints it, and the source file.
        sample: a line as that program logs it.
    """

    kind: str
    severity: str
    error_type: str
    pattern: str
    origin: str
    sample: str
