"""The simulated benchmark client: request lengths and arrivals, from ``[simulator.workload]``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Union

import numpy as np

from msopt.checks import is_number
from msopt.errors import ConfigError
from msopt.workload.replay import TraceWindow, open_window
from msopt.workload.trace import MAX_REQUESTS

#: an int, or a table {dist = "uniform", low, high} / {dist = "lognormal", mean, sigma} /
#: {dist = "list", values = [...]} (a replay of recorded lengths, request i the i-th)
LengthSpec = Union[int, Mapping[str, Any]]  # noqa: UP007  a runtime alias: X | Y needs 3.10 objects

_KEYS = frozenset({"input_len", "output_len", "num_prompts", "concurrency", "request_rate", "warmup", "trace",
                   "pin_sessions"})
#: keys of ``[simulator.workload] trace`` (msopt.workload.Trace's options; ``path`` the file)
TRACE_KEYS = ("path", "format", "window", "time_scale", "block_size", "max_model_len", "length_policy", "time_unit",
              "columns")


@dataclass(frozen=True)
class Workload:
    """What the benchmark client sends.

    Attributes:
        input_len: prompt tokens, fixed or a distribution table.
        output_len: generated tokens per request, fixed or a distribution table.
        num_prompts: requests in the run.
        concurrency: closed loop: at most this many requests in flight (None: unlimited).
        request_rate: open loop: Poisson arrivals per second (None or inf: all at once).
        warmup: requests sent before the measured ones and left out of the figures; the measured
            run starts once all of them have finished (``vllm bench serve --num-warmups`` gathers
            them first, vllm 0.32.0 ``vllm/benchmarks/serve.py`` benchmark(); aiperf
            ``--warmup-request-count`` waits for every warm-up response by default). The simulated
            server keeps no state between requests (no compile, no cache), so a waited-out warm-up
            leaves the measured run exactly as without it: the key records the protocol a run
            was measured with (``msopt calibrate`` reads it from ``--num-warmups``).
        trace: a request trace replayed (``path`` and :class:`msopt.workload.Trace`'s options), or
            None. Request i takes the trace's i-th lengths and arrival (the trace repeated, one
            mean gap after its last arrival, when ``num_prompts`` is larger; fewer: windows across
            the whole trace, :func:`msopt.workload.replay.sample_windows`); ``input_len`` and
            ``output_len`` are not used, and a ``request_rate`` (a capacity probe's load) scales
            the arrivals to that mean rate.
        pin_sessions: the client sends each session's requests with one ``X-Data-Parallel-Rank``
            (:func:`msopt.workload.replay.session_rank`), as msopt's builtin benchmark does; an engine
            whose personality takes the header keeps the session on that replica. ``[workload] trace``
            sets it for the builtin benchmark.
        window: the trace window replayed, read once per run (``ResolvedWorkload.window``: a run's
            ``[workload] trace``), instead of a ``trace`` table read here; replayed as ``trace`` is.
    """

    input_len: LengthSpec = 1024
    output_len: LengthSpec = 256
    num_prompts: int = 1000
    concurrency: int | None = 64
    request_rate: float | None = None
    warmup: int = 0
    trace: Mapping[str, Any] | None = None
    pin_sessions: bool = False
    window: TraceWindow | None = field(default=None, compare=False, repr=False)

    def with_overrides(self, overrides: Mapping[str, Any]) -> Workload:
        """A copy with keys replaced (as :func:`msopt.sim.benchmark_overrides` returns them); the trace
        window it replays stays the same object (not read again)."""
        out = workload_from_mapping({**self.as_mapping(), **dict(overrides)})
        return replace(out, window=self._window()) if self.replays else out

    def replaying(self, window: TraceWindow | None) -> Workload:
        """This workload replaying ``window`` (a run's trace, read once: ``ResolvedWorkload.window``);
        itself for None."""
        return self if window is None else replace(self, window=window)

    def as_mapping(self) -> dict[str, Any]:
        """The workload as a ``[simulator.workload]`` table (a window given as an object is not in it)."""
        out: dict[str, Any] = {
            "input_len": self.input_len,
            "output_len": self.output_len,
            "num_prompts": self.num_prompts,
        }
        if self.concurrency is not None:
            out["concurrency"] = self.concurrency
        if self.request_rate is not None:
            out["request_rate"] = self.request_rate
        if self.warmup:
            out["warmup"] = self.warmup
        if self.trace is not None:
            out["trace"] = dict(self.trace)
        if self.pin_sessions:
            out["pin_sessions"] = True
        return out

    @property
    def replays(self) -> bool:
        """True when the workload replays a trace (:attr:`window` or :attr:`trace`)."""
        return self.window is not None or self.trace is not None

    def _window(self) -> TraceWindow:
        """The window replayed: :attr:`window`, else :attr:`trace` read once per workload."""
        if self.window is not None:
            return self.window
        cached = self.__dict__.get("_opened")
        if cached is None:
            assert self.trace is not None
            cached = open_window(self.trace, "[simulator.workload] trace")
            object.__setattr__(self, "_opened", cached)
        return cached

    def sample_lengths(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Draw (input lengths, output lengths), int64 arrays of ``num_prompts``, each >= 1."""
        n = self.num_prompts
        if self.replays:
            window = self._window()
            ins, outs = window.lengths
            idx = window.replay(n)[0]
            return ins[idx], outs[idx]
        return _draw(self.input_len, n, rng), _draw(self.output_len, n, rng)

    def sample_arrivals(self, rng: np.random.Generator) -> np.ndarray:
        """Open-loop send times in seconds (zeros when there is no request_rate)."""
        rate = self.request_rate
        if self.replays:
            return self._window().arrivals(self.num_prompts, self.request_rate)
        if rate is None or math.isinf(rate):
            return np.zeros(self.num_prompts)
        gaps = rng.exponential(1.0 / rate, size=self.num_prompts)
        gaps[0] = 0.0
        return np.cumsum(gaps)

    def sample_prefixes(self) -> tuple[list[tuple[int, ...]], int] | None:
        """Each request's prompt block ids (equal ids: equal token blocks) and the tokens per id, or
        None: a trace without hash ids, or no trace (never credited with prefix-cache hits)."""
        if not self.replays:
            return None
        window = self._window()
        if not window.block_tokens or not any(r.hash_ids for r in window.requests):
            return None
        reqs = window.requests
        return [reqs[i].hash_ids for i in window.replay(self.num_prompts)[0].tolist()], window.block_tokens

    def sample_sessions(self) -> list[str | None] | None:
        """Each replayed request's conversation (:func:`msopt.workload.replay.conversation_keys`), or
        None: no trace, or a trace without sessions."""
        if not self.replays:
            return None
        window = self._window()
        keys = window.conversations
        if not any(k is not None for k in keys):
            return None
        return [keys[i] for i in window.replay(self.num_prompts)[0].tolist()]


def _draw(spec: LengthSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(spec, Mapping):
        dist = spec["dist"]
        if dist == "list":  # a replay: request i takes values[i], the list repeated when shorter
            return np.resize(np.asarray(spec["values"], dtype=np.int64), n)
        if dist == "uniform":
            values = rng.integers(int(spec["low"]), int(spec["high"]) + 1, size=n)
        else:  # lognormal: mean is the distribution's mean in tokens
            sigma = float(spec["sigma"])
            mu = math.log(float(spec["mean"])) - sigma * sigma / 2
            values = np.rint(rng.lognormal(mu, sigma, size=n))
        return np.maximum(values.astype(np.int64), 1)
    return np.full(n, int(spec), dtype=np.int64)


#: Upper bounds, checked at load time: a simulated evaluation of MAX_PROMPTS prompts takes about
#: 180 MB and 5 s; lengths up to a 1 Mi-token context.
MAX_PROMPTS = MAX_REQUESTS
MAX_CONCURRENCY = 1_000_000
MAX_LENGTH = 1_048_576


def _positive_int(table: Mapping[str, Any], key: str, where: str, most: int = MAX_LENGTH) -> int:
    value = table[key]
    if not is_number(value) or not 1 <= value <= most or value != int(value):
        raise ConfigError(f"{where}.{key} = {value!r}: must be an integer from 1 to {most}")
    return int(value)


def _length(table: Mapping[str, Any], key: str, where: str) -> LengthSpec:
    value = table[key]
    if not isinstance(value, Mapping):
        return _positive_int(table, key, where)
    dist = value.get("dist")
    if dist == "uniform":
        for k in ("low", "high"):
            if k not in value:
                raise ConfigError(f"{where}.{key}: uniform needs keys low and high (missing {k!r})")
            _positive_int(value, k, f"{where}.{key}")
        if int(value["low"]) > int(value["high"]):
            raise ConfigError(f"{where}.{key}: low ({value['low']}) must be <= high ({value['high']})")
    elif dist == "lognormal":
        for k in ("mean", "sigma"):
            if k not in value:
                raise ConfigError(f"{where}.{key}: lognormal needs keys mean and sigma (missing {k!r})")
        mean, sigma = value["mean"], value["sigma"]
        if not all(is_number(v) for v in (mean, sigma)) or \
                not 1 <= mean <= MAX_LENGTH or not 0 <= sigma <= 10:
            raise ConfigError(
                f"{where}.{key}: lognormal needs mean from 1 to {MAX_LENGTH} and sigma from 0 to 10, "
                f"got {dict(value)!r}"
            )
    elif dist == "list":
        values = value.get("values")
        if not isinstance(values, (list, tuple)) or not values or not all(
                is_number(v) and not isinstance(v, bool) and v == int(v) and 1 <= v <= MAX_LENGTH for v in values):
            raise ConfigError(f"{where}.{key}: list needs values = [lengths], integers from 1 to {MAX_LENGTH} "
                              "(request i takes the i-th, the list repeated when shorter)")
        return {"dist": "list", "values": [int(v) for v in values]}
    else:
        raise ConfigError(
            f"{where}.{key}.dist = {dist!r}: use an integer or a table with dist = 'uniform', 'lognormal' or 'list'"
        )
    return dict(value)


def workload_from_mapping(table: Mapping[str, Any], where: str = "simulator.workload") -> Workload:
    """Validate a ``[simulator.workload]`` table into a :class:`Workload`.

    Raises:
        ConfigError: an unknown key or an invalid value; the message names the key.
    """
    unknown = set(table) - _KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; valid keys: {sorted(_KEYS)}")
    w = Workload()
    kwargs: dict[str, Any] = {}
    for key in ("input_len", "output_len"):
        if key in table:
            kwargs[key] = _length(table, key, where)
    if "num_prompts" in table:
        kwargs["num_prompts"] = _positive_int(table, "num_prompts", where, MAX_PROMPTS)
    has_c, has_r = "concurrency" in table, "request_rate" in table
    if has_c:
        kwargs["concurrency"] = _positive_int(table, "concurrency", where, MAX_CONCURRENCY)
    elif has_r:
        kwargs["concurrency"] = None
    if "warmup" in table:
        value = table["warmup"]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PROMPTS:
            raise ConfigError(f"{where}.warmup = {value!r}: must be an integer from 0 to {MAX_PROMPTS} "
                              "(requests sent and waited out before the measured ones)")
        kwargs["warmup"] = value
    if has_r:
        rate = table["request_rate"]
        if not is_number(rate) or not rate > 0:
            raise ConfigError(f"{where}.request_rate = {rate!r}: must be a number > 0 (inf for all at once)")
        kwargs["request_rate"] = float(rate)
    if "trace" in table:
        kwargs["trace"] = _trace_table(table["trace"], where)
    if "pin_sessions" in table:
        if not isinstance(table["pin_sessions"], bool):
            raise ConfigError(f"{where}.pin_sessions = {table['pin_sessions']!r}: must be true or false")
        kwargs["pin_sessions"] = table["pin_sessions"]
    return replace(w, **kwargs)


def _trace_table(value: Any, where: str) -> dict[str, Any]:
    """``[simulator.workload] trace``: a table with ``path`` and the trace's options, checked as
    :class:`msopt.workload.Trace` checks them (the file itself is read when it is sampled)."""
    if not isinstance(value, Mapping) or not isinstance(value.get("path"), str):
        raise ConfigError(f"{where}.trace: must be a table with path = \"TRACE\" (and {', '.join(TRACE_KEYS[1:])}); "
                          "[workload] trace sets it")
    unknown = sorted(set(value) - set(TRACE_KEYS))
    if unknown:
        raise ConfigError(f"{where}.trace: unknown key(s) {unknown}; valid keys: {', '.join(TRACE_KEYS)}")
    return dict(value)
