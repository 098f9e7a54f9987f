"""journal.jsonl, the truth of a run: one JSON line per evaluation, appended in one ``os.write``
and fsynced before anything else is written.

Reading keeps a torn last line out (a driver killed mid-write) and keeps the first record of a
duplicated eval id; opening for appends cuts the torn line off, so the next record starts clean.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from msopt.evaluate.results import EvaluationResult
from msopt.run.store._files import FILE_MODE, StoreError, dumps, write_error


class _IdSet:
    """The journaled eval ids, compact: a bitmap for the dense ids a run uses (one bit each), a
    set for any other. A set of ints costs about 90 bytes per evaluation; long runs stay flat."""

    _DENSE = 1 << 26  # ids below this live in the bitmap (at most 8 MiB)

    def __init__(self, ids: Iterable[int] = ()) -> None:
        self._bits = bytearray()
        self._other: set[int] = set()
        for i in ids:
            self.add(i)

    def add(self, i: int) -> None:
        if 0 <= i < self._DENSE:
            byte = i >> 3
            if byte >= len(self._bits):
                self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits))))
            self._bits[byte] |= 1 << (i & 7)
        else:
            self._other.add(i)

    def __contains__(self, i: object) -> bool:
        if isinstance(i, int) and 0 <= i < self._DENSE:
            byte = i >> 3
            return byte < len(self._bits) and bool(self._bits[byte] & (1 << (i & 7)))
        return i in self._other


class JournalFile:
    """The journal backend: read every record, append one durably.

    Args:
        path: journal.jsonl.
        warn: told what reading noticed (a torn last line dropped, a duplicate eval id).
    """

    def __init__(self, path: Path, warn: Callable[[str], None]) -> None:
        self.path = path
        self._warn = warn
        self._fd: int | None = None
        self._ids = _IdSet()

    def _parse(self) -> tuple[list[EvaluationResult], int, bool]:
        """Parse the journal: the results, the byte length of its valid prefix, and whether
        the file needs a newline appended after that prefix."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return [], 0, False
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot read the journal: {exc.strerror or exc}; "
                             "fix its permissions") from None
        lines = data.split(b"\n")
        # byte offsets of line starts; the last element is what follows the final newline
        starts = [0]
        for line in lines[:-1]:
            starts.append(starts[-1] + len(line) + 1)
        last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
        results: list[EvaluationResult] = []
        seen: set[int] = set()
        valid_end = len(data)
        need_newline = bool(data) and not data.endswith(b"\n")
        for i, raw in enumerate(lines):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
                if not isinstance(obj, dict):
                    raise ValueError("not a JSON object")
                result = EvaluationResult.from_json(obj)
            except (UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
                if i == last:
                    self._warn(f"{self.path}: line {i + 1} is incomplete (the driver stopped "
                               "while writing it) and is ignored")
                    valid_end, need_newline = starts[i], False
                    break
                raise StoreError(f"{self.path}: line {i + 1} is corrupt ({exc}); the journal "
                                 "can only be torn at its end: restore it from a backup, or delete "
                                 f"line {i + 1} and every line after it and --resume") from None
            if result.eval_id in seen:
                self._warn(f"{self.path}: line {i + 1}: eval_id {result.eval_id} appears "
                           "again; the first record is kept")
                continue
            seen.add(result.eval_id)
            results.append(result)
        return results, valid_end, need_newline

    def read(self) -> list[EvaluationResult]:
        """Every journaled evaluation, in journal order.

        Raises:
            StoreError: a line other than the last is corrupt.
        """
        return self._parse()[0]

    def _open(self) -> int:
        if self._fd is not None:
            return self._fd
        results, valid_end, need_newline = self._parse()
        try:
            if self.path.exists() and (valid_end != self.path.stat().st_size or need_newline):
                with open(self.path, "r+b") as fh:
                    fh.truncate(valid_end)
                    if need_newline:
                        fh.seek(valid_end)
                        fh.write(b"\n")
                    fh.flush()
                    os.fsync(fh.fileno())
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        except OSError as exc:
            raise write_error(self.path, exc, "the journal") from None
        self._ids = _IdSet(r.eval_id for r in results)
        return self._fd

    def append(self, result: EvaluationResult, run_id: str) -> None:
        """Journal one evaluation: one line, fsynced; on failure the journal is left as it was.

        Raises:
            StoreError: the line could not be written (disk full, ...).
            ValueError: ``result.eval_id`` is already journaled (a driver bug).
        """
        fd = self._open()
        if result.eval_id in self._ids:
            raise ValueError(f"eval_id {result.eval_id} is already in {self.path}")
        line = (dumps(result.to_json(run_id)) + "\n").encode("utf-8")
        if b"\n" in line[:-1]:  # json.dumps escapes newlines; never let one split a record
            raise ValueError("a journal record must be one line")
        try:
            size = os.fstat(fd).st_size
        except OSError as exc:
            raise write_error(self.path, exc, "the journal") from None
        try:
            n = os.write(fd, line)
            if n != len(line):
                raise OSError(errno.ENOSPC, f"short write ({n} of {len(line)} bytes)")
            os.fsync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass  # the next open drops the torn last line
            raise write_error(self.path, exc, f"evaluation {result.eval_id} to the journal") from None
        self._ids.add(result.eval_id)

    def close(self) -> None:
        """Close the append descriptor; a later :meth:`append` reopens the journal."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
