"""ServeGen's per-client workload read as a request trace (alibaba/ServeGen, Apache-2.0, commit f891d118).

ServeGen publishes no requests but what generates them, per client and per window:

- ``chunk-<id>-trace.csv``, one row per window and no header: ``window_start_s,rate,cv,pattern,shape,scale``
  (servegen/clientpool.py ``ClientPool._load_data``: ``timestamp, rate, cv, pat_name, pat_arg1, pat_arg2 =
  line.strip().split(',')``); an empty pattern is a window without requests. The published windows are 600 s
  long (the data's window starts step by 600).
- ``chunk-<id>-dataset.json`` beside it: ``{window_start_s: {"input_tokens": "<Python dict token:
  probability>", "output_tokens": ...}}``; a window whose distribution is empty is left out, and a trace
  window takes the latest dataset window that starts at or before it (``ClientPoolView._get_dataset_window``).

msopt makes each window's requests as ServeGen's ``generate_workload`` makes one client's at its own rate
(servegen/construct.py ``_sample_iats``, ``_sample_data_batch``): ``ceil(rate x window)`` gaps drawn from the
pattern (``Gamma``: shape and scale; ``Weibull``: shape and scale), scaled so that they fill the window, the
arrivals that fall inside it kept; each request's lengths drawn from the window's distributions with one
uniform number for both, as ServeGen draws every field of a request. The draws are numpy's, seeded by the
window's row, so a window's requests are the same in every run and whatever window of the trace is read.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from msopt.errors import ConfigError

#: the columns of a ServeGen trace row, in order (the file has no header)
COLUMNS: tuple[str, ...] = ("window_start_s", "rate", "cv", "pattern", "shape", "scale")
#: the arrival patterns ServeGen draws gaps from (servegen/workload_types.py ``ArrivalPat``)
PATTERNS: tuple[str, ...] = ("Gamma", "Weibull")
#: a window's length where the file does not say it (the last row of a one-row file): the published data's
WINDOW_S = 600.0

#: (line, seconds from the first window's start, input tokens, output tokens) of one generated request
Request = tuple[int, float, int, int]
#: a dataset window: (input tokens, their cumulative probabilities), the same of output tokens
Lengths = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def is_trace_row(cells: Sequence[str]) -> bool:
    """Whether a CSV row (a file's first) is a ServeGen trace row: six cells, a whole number of seconds,
    two numbers, a pattern ServeGen knows or none, two numbers."""
    if len(cells) != len(COLUMNS) or cells[3].strip() not in ("", *PATTERNS):
        return False
    try:
        int(cells[0])
        [float(c) for c in (cells[1], cells[2], cells[4], cells[5])]
    except ValueError:
        return False
    return True


def dataset_path(trace: Path) -> Path:
    """The length distributions beside a trace file: ``chunk-57-trace.csv`` -> ``chunk-57-dataset.json``
    (``servegen_m-large_chunk-57-trace.sample.csv`` -> ``servegen_m-large_chunk-57-dataset.sample.json``)."""
    name = trace.name
    at = name.rfind("-trace")
    if at < 0:
        return trace.with_name(re.sub(r"\.csv(\.gz)?$", "", name) + "-dataset.json")
    return trace.with_name(re.sub(r"\.csv(\.gz)?$", ".json", name[:at] + "-dataset" + name[at + len("-trace"):]))


def _distribution(text: Any, where: str) -> tuple[np.ndarray, np.ndarray] | None:
    """A length distribution as (tokens, cumulative probability), None for an empty one."""
    try:
        pmf = ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ConfigError(f"{where}: not a dict of token counts to probabilities") from None
    if not isinstance(pmf, dict):
        raise ConfigError(f"{where}: not a dict of token counts to probabilities")
    if not pmf:
        return None
    items = sorted(pmf.items())
    if not all(isinstance(k, int) and k >= 0 and isinstance(p, (int, float)) and p >= 0 for k, p in items):
        raise ConfigError(f"{where}: holds other than whole token counts >= 0 with probabilities >= 0")
    return np.array([k for k, _ in items], np.int64), np.cumsum([float(p) for _, p in items])


def read_dataset(path: Path, where: str) -> list[tuple[float, Lengths]]:
    """The dataset's windows that hold both distributions, by start (seconds), in order.

    Raises:
        ConfigError: a missing or unreadable file, a window without ``input_tokens`` / ``output_tokens``.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where}: ServeGen's lengths are in {path.name} beside the trace (chunk-<id>-dataset.json "
                          f"for chunk-<id>-trace.csv), and {path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{where}: {path} cannot be read as ServeGen's dataset JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: {path} is not ServeGen's dataset ({{window_start_s: {{input_tokens, "
                          "output_tokens}}}})")
    out = []
    for start, fields in data.items():
        here = f"{where}: {path}, window {start}"
        if not isinstance(fields, dict) or "input_tokens" not in fields or "output_tokens" not in fields:
            raise ConfigError(f"{here}: needs input_tokens and output_tokens")
        try:
            t = float(start)
        except ValueError:
            raise ConfigError(f"{here}: the key is not a window start in seconds") from None
        ins = _distribution(fields["input_tokens"], f"{here}, input_tokens")
        outs = _distribution(fields["output_tokens"], f"{here}, output_tokens")
        if ins is not None and outs is not None:  # an empty distribution: ServeGen leaves the window out
            out.append((t, (*ins, *outs)))
    return sorted(out, key=lambda w: w[0])


def _draw(tokens: np.ndarray, cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    # construct.py: np.searchsorted(cdf, u); u is scaled to the cdf's total, which a file may round off 1
    return tokens[np.minimum(np.searchsorted(cdf, u * cdf[-1]), len(tokens) - 1)]


def window_requests(line: int, start: float, size: float, rate: float, pattern: str, shape: float,
                    scale: float, lengths: Lengths) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One window's requests: arrivals (s, the trace's own clock), input and output tokens."""
    n = math.ceil(rate * size)
    if n <= 0 or not pattern:
        return np.empty(0), np.empty(0, np.int64), np.empty(0, np.int64)
    rng = np.random.default_rng([0, line])
    gaps = rng.gamma(shape, scale, n) if pattern == "Gamma" else scale * rng.weibull(shape, n)
    total = float(gaps.sum())
    if total > 0:
        gaps = gaps * (size / total)
    times = start + np.cumsum(gaps)
    times = times[times < start + size]
    u = rng.random(len(times))
    return times, _draw(lengths[0], lengths[1], u), _draw(lengths[2], lengths[3], u)


def _window(line: int, cells: list[str],
            bad: Callable[[int, str, str], ConfigError]) -> tuple[float, float, str, float, float]:
    """A trace row's window, checked: (start, rate, pattern, shape, scale)."""
    if len(cells) != len(COLUMNS):
        raise bad(line, "row", f"has {len(cells)} cells; a ServeGen trace row has {len(COLUMNS)}: "
                  f"{','.join(COLUMNS)}")
    values = []
    for name, cell in zip(COLUMNS, cells):
        if name == "pattern":
            continue
        try:
            x = float(cell)
        except ValueError:
            raise bad(line, name, f"{cell!r} is not a number") from None
        if not math.isfinite(x) or x < 0:
            raise bad(line, name, f"{cell!r} must be a finite number >= 0")
        values.append(x)
    start, rate, _, shape, scale = values
    pattern = cells[3].strip()
    if pattern and pattern not in PATTERNS:
        raise bad(line, "pattern", f"{pattern!r} is not a pattern ServeGen draws from ({', '.join(PATTERNS)})")
    if pattern and rate > 0 and not (shape > 0 and scale > 0):
        raise bad(line, "shape", f"{pattern} needs a shape and a scale above 0, got {shape:g} and {scale:g}")
    return start, rate, pattern, shape, scale


def requests(rows: Iterator[tuple[int, list[str]]], dataset: list[tuple[float, Lengths]],
             bad: Callable[[int, str, str], ConfigError]) -> Iterator[Request]:
    """Every request the trace rows ``(line, cells)`` generate, in arrival order; ``bad(line, column,
    problem)`` is the error of a bad cell."""
    starts = [w[0] for w in dataset]
    prev: tuple[int, float, float, str, float, float] | None = None
    step = WINDOW_S

    def emit(row: tuple[int, float, float, str, float, float], size: float) -> Iterator[Request]:
        line, start, rate, pattern, shape, scale = row
        if rate <= 0 or not pattern:
            return
        at = int(np.searchsorted(starts, start, side="right")) - 1
        if at < 0:
            raise bad(line, "window_start_s", f"no window of the dataset starts at or before {start:g} s; "
                      "ServeGen's dataset JSON has no lengths for it")
        times, ins, outs = window_requests(line, start, size, rate, pattern, shape, scale, dataset[at][1])
        for t, i, o in zip(times.tolist(), ins.tolist(), outs.tolist()):
            yield line, t, i, o

    for line, cells in rows:
        start, rate, pattern, shape, scale = _window(line, cells, bad)
        if prev is not None:
            if start <= prev[1]:
                raise bad(line, "window_start_s", f"{cells[0]!r} does not come after the row before; sort the "
                          "windows by start")
            step = start - prev[1]
            yield from emit(prev, step)
        prev = (line, start, rate, pattern, shape, scale)
    if prev is not None:
        yield from emit(prev, step)  # the last window lasts as long as the one before it


def window_stats(rows: Iterator[tuple[int, list[str]]]) -> str:
    """The client's windows as compute_stats.py of the shared traces summarises them: how many, how many
    active (a rate above 0), their rate (mean, p50, max) and CV (p50, p90), and their patterns."""
    n = 0
    rates: list[float] = []
    cvs: list[float] = []
    patterns: dict[str, int] = {}
    for _, cells in rows:
        n += 1
        if len(cells) == len(COLUMNS) and float(cells[1]) > 0:
            rates.append(float(cells[1]))
            cvs.append(float(cells[2]))
            patterns[cells[3]] = patterns.get(cells[3], 0) + 1
    if not rates:
        return f"ServeGen client: {n:,} windows, none active"
    pct = (lambda xs, q: float(np.percentile(xs, q)))  # noqa: E731  linear, as compute_stats.py's pct
    shown = ", ".join(f"{p or 'none'} {k:,}" for p, k in sorted(patterns.items()))
    return (f"ServeGen client: {n:,} windows, {len(rates):,} active; window rate mean {np.mean(rates):.3f} req/s "
            f"(p50 {pct(rates, 50):.3f}, max {max(rates):.3f}); window CV p50 {pct(cvs, 50):.2f}, "
            f"p90 {pct(cvs, 90):.2f}; patterns {shown}")
