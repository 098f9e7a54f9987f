"""The msopt exception hierarchy.

Every error a user can cause derives from :class:`MsoptError`; the CLI catches it and prints
one line. Anything else reaching the CLI is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import Any


class MsoptError(Exception):
    """Root of every error msopt raises on purpose."""


class ConfigError(MsoptError, ValueError):
    """The configuration is invalid: the message names the file, the key and the fix."""


class RegistryError(ConfigError, KeyError):
    """A registry lookup or registration failed (unknown or duplicate name)."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else ""


class DecodeError(MsoptError, ValueError):
    """A position cannot be decoded into a consistent configuration.

    Raised when an int ``ternary_factories`` product cannot be made divisible by any candidate
    pair of its source fields. ``values`` holds the particle's own decoded values so that the
    evaluation can journal them with fitness = inf.
    """

    def __init__(self, message: str, values: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.values = dict(values or {})


class EvaluationError(MsoptError):
    """One evaluation failed (server did not start, benchmark failed, ...)."""


class SimulationError(EvaluationError):
    """The simulator cannot run the given configuration (bad knobs, unknown catalog entry)."""


class RetryableError(EvaluationError):
    """An evaluation failure worth another attempt (a retryable health-check pattern, a port clash)."""


class EngineCrashError(EvaluationError):
    """The engine died while it served the benchmark: a fault with its cause, never a measurement.

    ``crash`` is the :class:`msopt.engines.crash.EngineCrash` as a dict (what died, the log line, the
    prompt length of the request in flight), journaled beside the error.
    """

    def __init__(self, message: str, crash: dict[str, Any]) -> None:
        super().__init__(message)
        self.crash = dict(crash)


class EngineCrashStop(MsoptError):
    """Every configuration a run launched died on the same request: searching on would only repeat it."""


class RefusedError(EvaluationError):
    """The engine would refuse this configuration at start-up (one of its start-up rules), so it
    is not launched. ``rule`` is the rule's id (:mod:`msopt.engines.rules`)."""

    def __init__(self, message: str, rule: str = "") -> None:
        super().__init__(message)
        self.rule = rule


class FaultError(MsoptError):
    """A fault of the machinery (disk, environment, msopt, Ray), not a measurement of a configuration.

    An evaluation that meets one is never journaled as that configuration's result: the driver
    retries it a bounded number of times, then stops the run; ``--resume`` runs it again.
    """


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``ray job stop``): stops a run as Ctrl-C does (the CLI exits 143)."""
