"""Request traces: read a recorded service's arrivals, lengths and prefix blocks, streaming.

A trace is read row by row (:meth:`Trace.__iter__`), never whole: a trace of millions of rows
costs one row of memory, and a window stops reading at its end (timestamps must not go back).
Each row becomes a :class:`TraceRequest` whose arrival is in seconds since the trace's first row,
then cut to ``window`` and divided by ``time_scale``.

Formats (:data:`FORMATS`), detected from the JSON keys or the CSV header:

- ``mooncake``: JSON lines ``timestamp`` (ms), ``input_length``, ``output_length``, optional
  ``hash_ids`` (prefix-chained ids of 512-token blocks; kvcache-ai/Mooncake FAST25-release/traces);
- ``bailian``: JSON lines ``chat_id``, ``parent_chat_id`` (-1: a first turn), ``timestamp`` (s),
  ``input_length``, ``output_length``, ``turn``, ``hash_ids`` of 16-token blocks
  (alibaba-edu/qwen-bailian-usagetraces-anon);
- ``azure``: CSV ``TIMESTAMP,ContextTokens,GeneratedTokens`` with wall-clock timestamps in the
  2023 (``2023-11-16 18:17:03.9799600``), 2024 (``2024-05-10 00:00:00.009930+00:00``) and 2025
  (``2024-10-15T12:00:00.269Z``, an extra ``NumImages`` column) forms (Azure/AzurePublicDataset);
- ``burstgpt``: CSV ``Timestamp`` (s), ``Request tokens``, ``Response tokens``, read by name
  (v3 inserts ``Session ID,Elapsed time`` after ``Timestamp``); a row with zero tokens is a
  failed request (HPMLL/BurstGPT README) and is skipped, counted in ``failed``;
- ``servegen``: a ServeGen client's ``chunk-<id>-trace.csv`` (no header: a row per window of its rate,
  CV and arrival pattern) with the length distributions of ``chunk-<id>-dataset.json`` beside it; the
  reader generates the requests as ServeGen does (:mod:`msopt.workload.servegen`);
- ``generic``: CSV ``arrival_s,input_tokens,output_tokens[,session_id][,prefix_group]``, for a
  service's own logs. Requests of one ``prefix_group`` share their prompt's leading tokens, up to
  the shorter prompt (a document or a conversation that grows): the reader gives block j of a
  group's prompt the hash id of (group, j) (:func:`group_hash_ids`), so the simulator and the
  benchmarks see the sharing as they see a Mooncake trace's hash ids.

A row with zero input or output tokens is skipped in every format and counted in ``failed``.
A request longer than ``max_model_len`` (input plus output) follows the length policy
(:data:`LENGTH_POLICIES`): ``clip`` cuts its input (and its output to leave one input token),
``drop`` skips it, ``scale`` multiplies every request's lengths by one factor, the limit over
the longest request in the window, so the distribution keeps its shape (a first pass finds it).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timezone
from pathlib import Path
from typing import Any

from msopt.errors import ConfigError
from msopt.workload import servegen

#: the trace formats msopt reads
FORMATS: tuple[str, ...] = ("mooncake", "bailian", "azure", "burstgpt", "generic", "servegen")
#: what happens to a request longer than max_model_len
LENGTH_POLICIES: tuple[str, ...] = ("clip", "scale", "drop")
#: tokens per hash id, by format (Mooncake FAST'25 README: 512; Bailian's file names: blksz_16; a generic
#: CSV's ``prefix_group`` blocks: 16, vLLM's default KV block)
DEFAULT_BLOCK_SIZE: Mapping[str, int] = {"mooncake": 512, "bailian": 16, "generic": 16}
#: the most requests one run replays (a simulated evaluation of as many takes about 180 MB and 5 s);
#: a longer trace needs a window
MAX_REQUESTS = 1_000_000

# the columns each format needs (by name), and the optional ones it reads
_COLUMNS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "mooncake": (("timestamp", "input_length", "output_length"), ("hash_ids",)),
    "bailian": (("timestamp", "input_length", "output_length", "chat_id"), ("hash_ids", "parent_chat_id", "turn")),
    "azure": (("TIMESTAMP", "ContextTokens", "GeneratedTokens"), ()),
    "burstgpt": (("Timestamp", "Request tokens", "Response tokens"), ("Session ID",)),
    "generic": (("arrival_s", "input_tokens", "output_tokens"), ("session_id", "prefix_group")),
    "servegen": (servegen.COLUMNS, ()),  # no header: the columns in this order
}
_JSON_FORMATS = ("mooncake", "bailian")
_TIME_UNIT = {"mooncake": 1e-3}  # ms; the others are seconds (azure: wall clock, parsed)
#: ``time_unit``: seconds per unit of a trace's timestamps
TIME_UNITS: Mapping[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
#: ``columns``: the fields msopt reads, each mapped to the file's own column (a CSV header name or a JSON
#: key); the first three are needed (vLLM's timed_trace maps its columns the same way:
#: ``--timed-trace-label-timestamp``, ``-input-length``, ``-output-length``, ``-hash-ids``)
COLUMN_FIELDS: tuple[str, ...] = ("arrival_s", "input_tokens", "output_tokens", "hash_ids", "session_id",
                                  "prefix_group")
_GZIP_MAGIC = b"\x1f\x8b"


def group_hash_ids(group: str, blocks: int) -> tuple[int, ...]:
    """The hash ids of a generic CSV's ``prefix_group`` prompt of ``blocks`` blocks: block j's is a
    stable 63-bit digest of (group, j), the same in every process and for every request of the group."""
    return tuple(int.from_bytes(hashlib.blake2b(f"prefix_group:{group}:{j}".encode(), digest_size=8).digest(),
                                "little") >> 1 for j in range(blocks))


def formats_line() -> str:
    """The accepted formats with their identifying columns, for error messages."""
    return "; ".join(f"{name} ({', '.join(_COLUMNS[name][0])}{'; no header' if name == 'servegen' else ''})"
                     for name in FORMATS)


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace.

    Attributes:
        arrival_s: send time, seconds after the window's start, divided by ``time_scale``.
        input_tokens, output_tokens: lengths after the length policy (each >= 1).
        hash_ids: the prompt's block ids, prefix-chained (equal ids: equal token blocks); empty
            when the trace records none (never credited with prefix hits).
        session_id: the conversation (Bailian ``chat_id``, BurstGPT ``Session ID``, generic
            ``session_id``), or None.
        parent_id: the previous turn's ``chat_id`` (Bailian), or None.
        prefix_group: a generic CSV's shared-prefix label, or None.
        row: the row's line number in the file (1-based, the header counted).
    """

    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    session_id: str | None = None
    parent_id: str | None = None
    prefix_group: str | None = None
    row: int = 0


@dataclass
class TraceCounts:
    """What a pass over the trace saw (filled while it streams).

    Attributes:
        rows: data rows read (up to the window's end).
        in_window: rows inside the window (before the length policy and failures).
        failed: rows skipped for zero input or output tokens.
        over_limit: rows longer than max_model_len (clipped, scaled or dropped by the policy).
        dropped: rows dropped by the ``drop`` policy.
        scale: the factor every length was multiplied by (``scale`` policy; 1.0 otherwise).
        hashed: prompts with hash ids (as recorded, before the length policy).
        hash_mismatch: those of them whose count of ids is not input / ``block_size`` rounded up.
        per_id: the sum over them of input tokens per hash id.
    """

    rows: int = 0
    in_window: int = 0
    failed: int = 0
    over_limit: int = 0
    dropped: int = 0
    scale: float = 1.0
    hashed: int = 0
    hash_mismatch: int = 0
    per_id: float = 0.0


def _bad_text(text: str) -> bool:
    """Whether ``text`` holds a byte that was not UTF-8 (a lone surrogate of ``surrogateescape``)."""
    return any("\udc80" <= ch <= "\udcff" for ch in text)


def _azure_seconds(text: str) -> float:
    """Epoch seconds of an Azure timestamp (2023: 7 fraction digits, no zone; 2024: ``+00:00``;
    2025: ``T`` and ``Z``); no zone means UTC."""
    s = text.strip().replace("T", " ")
    tz = UTC
    if s.endswith("Z"):
        s = s[:-1]
    elif len(s) > 6 and s[-6] in "+-" and s[-3] == ":":
        sign = 1 if s[-6] == "+" else -1
        tz = timezone(sign * (datetime.strptime(s[-5:], "%H:%M") - datetime(1900, 1, 1)))
        s = s[:-6]
    base, _, frac = s.partition(".")
    if frac and not frac.isdigit():
        raise ValueError(text)
    return datetime.strptime(base, "%Y-%m-%d %H:%M:%S").replace(tzinfo=tz).timestamp() + (
        float("0." + frac) if frac else 0.0)


class Trace:
    """A request trace on disk, read lazily; every iteration streams the file again.

    Args:
        path: the trace file.
        format: one of :data:`FORMATS`, or None to detect it from the columns.
        window: (start_s, end_s) in seconds after the trace's first row, or None for all of it.
        time_scale: replay speed: arrivals are divided by it (2: twice the trace's rate).
        block_size: tokens per hash id (default: 512 Mooncake, 16 Bailian).
        max_model_len: the server's context limit, or None for no limit.
        length_policy: one of :data:`LENGTH_POLICIES`.
        time_unit: the unit of the timestamps (:data:`TIME_UNITS`), or None for the format's.
        columns: the file's column for each of :data:`COLUMN_FIELDS` (a CSV or JSON lines file of any
            layout, read as ``generic``), or None for the format's own names.
        where: how errors name the setting (e.g. ``"[workload] trace"``).

    Raises:
        ConfigError: a missing or unreadable file, an unknown or undetectable format, a bad option.
    """

    def __init__(self, path: str | os.PathLike[str], *, format: str | None = None,  # noqa: A002  the key's name
                 window: tuple[float, float] | None = None, time_scale: float = 1.0,
                 block_size: int | None = None, max_model_len: int | None = None,
                 length_policy: str = "clip", time_unit: str | None = None,
                 columns: Mapping[str, str] | None = None, where: str = "trace") -> None:
        self.path = Path(path).expanduser()
        self.where = where
        if time_unit is not None and time_unit not in TIME_UNITS:
            raise ConfigError(f"{where}: time_unit {time_unit!r} is not one of {', '.join(TIME_UNITS)}")
        self.columns: dict[str, str] | None = None
        if columns is not None:
            unknown = sorted(set(columns) - set(COLUMN_FIELDS))
            missing = [c for c in COLUMN_FIELDS[:3] if c not in columns]
            if unknown or missing or not all(isinstance(v, str) and v for v in columns.values()):
                raise ConfigError(f"{where}: columns must map {', '.join(COLUMN_FIELDS[:3])} (and optionally "
                                  f"{', '.join(COLUMN_FIELDS[3:])}) to the file's column names, got {dict(columns)!r}")
            if format not in (None, "generic"):
                raise ConfigError(f"{where}: columns maps a file of any layout and reads it as format 'generic'; "
                                  f"remove format {format!r} or columns")
            self.columns = dict(columns)
            format = "generic"  # noqa: A001  the key's name
        if format is not None and format not in FORMATS:
            raise ConfigError(f"{where}: format {format!r} is not one msopt reads; use one of {', '.join(FORMATS)}")
        if length_policy not in LENGTH_POLICIES:
            raise ConfigError(f"{where}: length policy {length_policy!r} is not one of {', '.join(LENGTH_POLICIES)}")
        if not (isinstance(time_scale, (int, float)) and math.isfinite(time_scale) and time_scale > 0):
            raise ConfigError(f"{where}: time_scale {time_scale!r} must be a number above 0 (2: twice the rate)")
        if window is not None:
            start, end = window
            if not (0 <= start < end):
                raise ConfigError(f"{where}: window [{start}, {end}] must be [start_s, end_s] with "
                                  "0 <= start_s < end_s")
        if block_size is not None and block_size < 1:
            raise ConfigError(f"{where}: block_size {block_size!r} must be a whole number of tokens >= 1")
        if max_model_len is not None and max_model_len < 2:
            raise ConfigError(f"{where}: max_model_len {max_model_len!r} must be >= 2 tokens")
        self.window = window
        self.time_scale = float(time_scale)
        self.max_model_len = max_model_len
        self.length_policy = length_policy
        self.kind = "json" if format in _JSON_FORMATS else "csv"  # the file's, once its first row is read
        self.format = self._detect() if format is None else format
        if format is not None:
            self._check_columns()
        if time_unit is not None and self.format == "azure":
            raise ConfigError(f"{where}: time_unit {time_unit!r}: format 'azure' has wall-clock timestamps "
                              "(2023-11-16 18:17:03.98); remove time_unit")
        if time_unit is not None and self.format == "servegen":
            raise ConfigError(f"{where}: time_unit {time_unit!r}: format 'servegen' gives its windows in seconds; "
                              "remove time_unit")
        self.unit = TIME_UNITS[time_unit] if time_unit is not None else _TIME_UNIT.get(self.format, 1.0)
        self.block_size = block_size if block_size is not None else DEFAULT_BLOCK_SIZE.get(self.format, 0)

    # -- reading ------------------------------------------------------------------------------
    def _open(self) -> io.TextIOWrapper:
        """The file as text, gunzipped where it is gzip. A byte that is not UTF-8 is kept (as a lone
        surrogate) and refused only in a column msopt reads, naming its row (:meth:`_text`)."""
        try:
            raw: Any = self.path.open("rb")
            if raw.peek(2)[:2] == _GZIP_MAGIC:
                raw = gzip.GzipFile(fileobj=raw)
            # -sig: a spreadsheet's byte-order mark
            return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="surrogateescape", newline="")
        except FileNotFoundError:
            raise ConfigError(f"{self.where} {self.path}: no such file; give the path of a request trace") from None
        except OSError as exc:
            raise ConfigError(f"{self.where} {self.path}: cannot be read ({exc.strerror or exc})") from None

    def _first(self) -> tuple[str, list[str] | dict[str, Any]]:
        """("json", the first row's keys and values) or ("csv", the header)."""
        with self._open() as f:
            try:
                for line in f:
                    if not line.strip():
                        continue
                    if "\x00" in line or _bad_text(line[:200]):
                        break
                    if line.lstrip().startswith("{"):
                        try:
                            row = json.loads(line)
                        except json.JSONDecodeError:
                            row = None
                        if not isinstance(row, dict):
                            raise ConfigError(f"{self.where} {self.path}: row 1 is not a JSON object; "
                                              f"msopt reads {formats_line()}")
                        return "json", row
                    return "csv", [name.strip() for name in next(csv.reader([line]))]
            except (OSError, EOFError):  # a truncated or corrupt gzip file
                pass
        raise ConfigError(f"{self.where} {self.path}: empty or not text; msopt reads {formats_line()}")

    def _detect(self) -> str:
        kind, first = self._first()
        if kind == "csv" and servegen.is_trace_row(list(first)):  # no header: its first row says it
            return "servegen"
        keys = set(first)
        candidates = [n for n in (_JSON_FORMATS if kind == "json" else
                                  [f for f in FORMATS if f not in (*_JSON_FORMATS, "servegen")])
                      if set(_COLUMNS[n][0]) <= keys]
        if candidates:
            return candidates[-1] if kind == "json" else candidates[0]  # bailian's columns include mooncake's
        shown = ", ".join(sorted(keys))[:120]
        raise ConfigError(f"{self.where} {self.path}: format not recognised from its columns ({shown}); "
                          f"msopt reads {formats_line()}; or set format")

    def _needed(self) -> tuple[str, ...]:
        """The file's names of the columns every row needs (time, input, output[, chat_id])."""
        if self.columns is not None:
            return tuple(self.columns[c] for c in COLUMN_FIELDS[:3])
        return _COLUMNS[self.format][0]

    def _col(self, name: str) -> str | None:
        """The file's column for an optional field of :data:`COLUMN_FIELDS`, or None."""
        if self.columns is not None:
            return self.columns.get(name)
        if name == "hash_ids":
            return name if self.format in _JSON_FORMATS else None
        return name if self.format == "generic" and name in _COLUMNS["generic"][1] else None

    def _check_columns(self) -> None:
        kind, first = self._first()
        if self.columns is None and (kind == "json") != (self.format in _JSON_FORMATS):
            raise ConfigError(f"{self.where} {self.path}: format {self.format!r} is "
                              f"{'JSON lines' if self.format in _JSON_FORMATS else 'CSV'}, the file is "
                              f"{'JSON lines' if kind == 'json' else 'CSV'}; msopt reads {formats_line()}")
        self.kind = kind
        if self.format == "servegen":
            if not servegen.is_trace_row(list(first)):
                raise ConfigError(f"{self.where} {self.path}: format 'servegen' has no header and rows of "
                                  f"{','.join(servegen.COLUMNS)}; row 1 is {','.join(map(str, first))[:120]!r}")
            return
        needed = self._needed()
        missing = [c for c in needed if c not in first]
        if missing:
            whose = "columns maps to" if self.columns is not None else f"format {self.format!r} needs"
            raise ConfigError(f"{self.where} {self.path}: row 1 has no column {missing[0]!r}, which {whose} "
                              f"({', '.join(needed)}); it has {', '.join(sorted(map(str, first)))[:160]}")

    def _bad(self, row: int, column: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.where} {self.path}: row {row}, column {column!r}: {problem}")

    def _text(self, value: Any, row: int, column: str) -> Any:
        """``value``, refused where it holds a byte that is not UTF-8 (kept as a lone surrogate by :meth:`_open`)."""
        if isinstance(value, str) and _bad_text(value):
            raise self._bad(row, column, "holds a byte that is not UTF-8 text; fix the file's encoding")
        return value

    def _number(self, value: Any, row: int, column: str, *, integer: bool) -> float:
        if isinstance(value, bool) or value is None:
            raise self._bad(row, column, f"{value!r} is not a number")
        self._text(value, row, column)
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise self._bad(row, column, f"{value!r} is not a number") from None
        if not math.isfinite(x) or x < 0:
            raise self._bad(row, column, f"{value!r} must be a finite number >= 0")
        if integer and x != int(x):
            raise self._bad(row, column, f"{value!r} is not a whole number of tokens")
        return x

    def _hashes(self, raw: Any, row: int, column: str, *, cell: bool) -> tuple[int, ...]:
        """A row's hash ids: a JSON list of whole numbers (a CSV ``cell``: that list as text, or ids apart by
        spaces)."""
        if cell and isinstance(raw, str):
            self._text(raw, row, column)
            text = raw.strip()
            if not text:
                return ()
            try:
                raw = json.loads(text) if text.startswith("[") else [int(x) for x in text.replace(",", " ").split()]
            except ValueError:
                raise self._bad(row, column, f"{raw[:40]!r} is not a list of whole numbers") from None
        if not isinstance(raw, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in raw):
            raise self._bad(row, column, "must be a list of whole numbers")
        return tuple(raw)

    def _raw(self) -> Iterator[tuple[int, float, int, int, tuple[int, ...], str | None, str | None, str | None]]:
        """(line, seconds since the first row, input, output, hash ids, session, parent, prefix group)
        for every data row, checked, in file order, stopping after the window's end."""
        fmt = self.format
        if fmt == "servegen":
            yield from self._servegen_raw()
            return
        t_col, in_col, out_col = self._needed()[:3]
        h_col, s_col, g_col = self._col("hash_ids"), self._col("session_id"), self._col("prefix_group")
        end = self.window[1] if self.window else math.inf
        t0: float | None = None
        last = -math.inf
        line = 0
        with self._open() as f:
            rows: Iterator[tuple[int, Mapping[str, Any]]]
            json_kind = self.kind == "json" if self.columns is not None else fmt in _JSON_FORMATS
            rows = self._json_rows(f) if json_kind else self._csv_rows(f)
            try:
                for line, rec in rows:
                    t = self._seconds(rec, line, t_col)
                    if t < last:
                        raise self._bad(line, t_col, f"{rec.get(t_col)!r} is earlier than the row before; "
                                        "sort the trace by arrival time")
                    last = t
                    if t0 is None:
                        t0 = t
                    rel = t - t0
                    if rel > end:
                        return
                    n_in = int(self._number(rec.get(in_col), line, in_col, integer=True))
                    n_out = int(self._number(rec.get(out_col), line, out_col, integer=True))
                    hashes: tuple[int, ...] = ()
                    raw_h = rec.get(h_col) if h_col is not None else None
                    if raw_h is not None:
                        hashes = self._hashes(raw_h, line, str(h_col), cell=not json_kind)
                    session, parent, group = self._who(rec, line, s_col, g_col)
                    if group is not None and self.block_size:
                        hashes = group_hash_ids(group, -(-n_in // self.block_size))
                    yield line, rel, n_in, n_out, hashes, session, parent, group
            except (OSError, EOFError) as exc:  # a corrupt or truncated gzip stream
                raise ConfigError(f"{self.where} {self.path}: after row {line}: cannot be read ({exc}); "
                                  "check the file (a gzip file cut short?)") from None

    def _seconds(self, rec: Mapping[str, Any], line: int, t_col: str) -> float:
        """A row's timestamp in seconds (an Azure trace's wall clock as epoch seconds)."""
        if self.format != "azure":
            return self._number(rec.get(t_col), line, t_col, integer=False) * self.unit
        try:
            return _azure_seconds(str(self._text(rec.get(t_col, ""), line, t_col)))
        except ValueError:
            raise self._bad(line, t_col, f"{rec.get(t_col)!r} is not a timestamp like "
                            "2023-11-16 18:17:03.9799600, 2024-05-10 00:00:00+00:00 or "
                            "2024-10-15T12:00:00.269Z") from None

    def _who(self, rec: Mapping[str, Any], line: int, s_col: str | None,
             g_col: str | None) -> tuple[str | None, str | None, str | None]:
        """A row's (session, parent, prefix group): Bailian's ``chat_id`` and ``parent_chat_id``, BurstGPT's
        ``Session ID``, a generic CSV's ``session_id`` and ``prefix_group``; None where the format has none."""
        if self.format == "bailian":
            session = str(self._text(rec["chat_id"], line, "chat_id"))
            p = rec.get("parent_chat_id")
            return session, None if p in (None, -1, "-1") else str(self._text(p, line, "parent_chat_id")), None
        if self.format == "burstgpt":
            return self._text(rec.get("Session ID"), line, "Session ID") or None, None, None
        if self.format == "generic":
            named = (self._text(rec.get(s_col), line, s_col) or None) if s_col else None
            group = (self._text(rec.get(g_col), line, g_col) or None) if g_col else None
            return None if named is None else str(named), None, None if group is None else str(group)
        return None, None, None

    def _servegen_raw(self) -> Iterator[tuple[int, float, int, int, tuple[int, ...], str | None, str | None,
                                              str | None]]:
        """:meth:`_raw` of a ServeGen client: the requests its windows generate (:mod:`msopt.workload.servegen`)."""
        end = self.window[1] if self.window else math.inf
        dataset = servegen.read_dataset(servegen.dataset_path(self.path), f"{self.where} {self.path}")
        t0: float | None = None
        with self._open() as f:
            for line, t, n_in, n_out in servegen.requests(self._cells(f), dataset, self._bad):
                if t0 is None:
                    t0 = t
                if t - t0 > end:
                    return
                yield line, t - t0, n_in, n_out, (), None, None, None

    def _cells(self, f: io.TextIOWrapper) -> Iterator[tuple[int, list[str]]]:
        """A header-less CSV's rows as (line, cells), blank rows skipped."""
        reader = csv.reader(f)
        for values in reader:
            if values and any(v.strip() for v in values):
                line = reader.line_num
                yield line, [str(self._text(v.strip(), line, "row")) for v in values]

    def _json_rows(self, f: io.TextIOWrapper) -> Iterator[tuple[int, Mapping[str, Any]]]:
        needed = self._needed()
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{self.where} {self.path}: row {line_no}: not JSON ({exc.msg} at column "
                                  f"{exc.colno})") from None
            if not isinstance(rec, dict):
                raise ConfigError(f"{self.where} {self.path}: row {line_no}: not a JSON object")
            for col in needed:
                if col not in rec:
                    raise self._bad(line_no, col, "missing")
            yield line_no, rec

    def _csv_rows(self, f: io.TextIOWrapper) -> Iterator[tuple[int, Mapping[str, Any]]]:
        reader = csv.reader(f)
        header = next(reader, None) or []
        index = {name.strip(): i for i, name in enumerate(header)}
        optional = ([c for c in (self._col(n) for n in COLUMN_FIELDS[3:]) if c] if self.columns is not None
                    else list(_COLUMNS[self.format][1]))
        wanted = [c for c in (*self._needed(), *optional) if c in index]
        for values in reader:
            if not values or not any(v.strip() for v in values):
                continue
            line = reader.line_num
            if len(values) < len(header):
                missing = header[len(values)].strip()
                if missing in wanted:
                    raise self._bad(line, missing, f"missing: the row has {len(values)} of {len(header)} columns")
            yield line, {c: values[index[c]].strip() for c in wanted if index[c] < len(values)}

    def _longest(self) -> int:
        """The longest request (input + output) in the window, for the ``scale`` policy."""
        start = self.window[0] if self.window else 0.0
        return max((i + o for _, t, i, o, *_ in self._raw() if t >= start and i > 0 and o > 0), default=0)

    def requests(self, counts: TraceCounts | None = None) -> Iterator[TraceRequest]:
        """Stream the window's requests, after failures and the length policy.

        Args:
            counts: filled while streaming (rows read, failed, over the limit, dropped, scale).

        Raises:
            ConfigError: a bad row (naming the file, the row and the column), or an empty window.
        """
        counts = counts if counts is not None else TraceCounts()
        start = self.window[0] if self.window else 0.0
        limit = self.max_model_len
        factor = 1.0
        if limit is not None and self.length_policy == "scale":
            longest = self._longest()
            factor = min(1.0, limit / longest) if longest else 1.0
        counts.scale = factor
        sent = 0
        for line, t, n_in, n_out, hashes, session, parent, group in self._raw():
            counts.rows += 1
            if t < start:
                continue
            counts.in_window += 1
            if n_in == 0 or n_out == 0:
                counts.failed += 1
                continue
            if hashes and self.block_size and group is None:  # as recorded (a prefix_group's agree by construction)
                counts.hashed += 1
                counts.per_id += n_in / len(hashes)
                counts.hash_mismatch += len(hashes) != -(-n_in // self.block_size)
            if limit is not None and n_in + n_out > limit:
                counts.over_limit += 1
                if self.length_policy == "drop":
                    counts.dropped += 1
                    continue
                if self.length_policy == "clip":
                    n_out = min(n_out, limit - 1)
                    n_in = limit - n_out
            if factor != 1.0:
                n_in = max(1, int(n_in * factor))
                n_out = max(1, int(n_out * factor))
            if hashes and self.block_size and n_in < len(hashes) * self.block_size * factor:
                # a clipped prompt keeps the blocks it still covers (a scaled one keeps all: each
                # block stands for block_size * factor tokens)
                hashes = hashes[:max(1, math.ceil(n_in / (self.block_size * factor)))]
            sent += 1
            yield TraceRequest((t - start) / self.time_scale, n_in, n_out, hashes, session, parent, group, line)
        if sent == 0:
            where = f"window [{self.window[0]:g}, {self.window[1]:g}] s" if self.window else "the trace"
            raise ConfigError(f"{self.where} {self.path}: {where} holds no request "
                              f"({counts.rows} rows read, {counts.in_window} in the window, {counts.failed} failed, "
                              f"{counts.dropped} dropped); widen the window or check the file")

    def __iter__(self) -> Iterator[TraceRequest]:
        return self.requests()

    def about(self) -> tuple[str, ...]:
        """What the file says besides its requests, a line each (a ServeGen client's windows; empty for the
        other formats), as :func:`msopt.workload.summary.trace_summary` shows it."""
        if self.format != "servegen":
            return ()
        with self._open() as f:
            return (servegen.window_stats(self._cells(f)),)


def read_requests(path: str | os.PathLike[str], **options: Any) -> list[TraceRequest]:
    """Every request of a trace window as a list (for small traces and tests); see :class:`Trace`."""
    return list(Trace(path, **options))


__all__: list[str] = ["COLUMN_FIELDS", "DEFAULT_BLOCK_SIZE", "FORMATS", "LENGTH_POLICIES", "MAX_REQUESTS",
                      "TIME_UNITS", "Trace", "TraceCounts", "TraceRequest", "formats_line",
                      "group_hash_ids", "read_requests"]
