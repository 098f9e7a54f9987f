"""The run directory ``<output>/<run-id>/``: journal, swarm checkpoint, results table, resume.

The journal (``journal.jsonl``) is the truth: one JSON line per evaluation, appended in one
``os.write`` and fsynced before anything else is written. ``results.csv`` is derived from it and
can always be rebuilt; ``state.json``, ``best.json`` and the other documents are replaced
atomically (temp file, fsync, ``os.replace``, fsync of the directory).
"""

from __future__ import annotations

import csv
import errno
import io
import json
import logging
import math
import os
import re
import shutil
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msopt.errors import MsoptError
from msopt.evaluate.results import METRICS, EvaluationResult

if TYPE_CHECKING:
    from msopt.config import Settings

log = logging.getLogger(__name__)

JOURNAL = "journal.jsonl"
STATE = "state.json"
RESULTS_CSV = "results.csv"
CONFIG = "config.toml"
RUN_META = "run.json"
BEST = "best.json"
LOCK = ".lock"
LOGS = "logs"

#: Columns after the metrics and the field columns, in order.
TAIL_COLUMNS = ("error", "real_evaluation", "fitness", "num_prompts",
                "eval_id", "phase", "particle", "iteration", "reused", "attempts", "load")

_FILE_MODE = 0o644
_DIR_MODE = 0o755
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_LOG_KIND = re.compile(r"[A-Za-z0-9_-]{1,32}")


class StoreError(MsoptError):
    """The run directory cannot be created, read or written: the message names the path and fix."""


def new_run_id() -> str:
    """A run id: the UTC time ``YYYYmmdd-HHMMSS`` and a short random suffix (from os.urandom)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + os.urandom(3).hex()


def json_safe(obj: Any) -> Any:
    """A copy of ``obj`` that :func:`json.dumps` accepts with ``allow_nan=False``.

    Non-finite floats become None; numpy scalars and arrays become Python numbers and lists;
    tuples become lists, paths strings, mapping keys strings.
    """
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    tolist = getattr(obj, "tolist", None)  # numpy scalars and arrays, without importing numpy
    if callable(tolist):
        return json_safe(tolist())
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def dumps(obj: Any, *, indent: int | None = None) -> str:
    """JSON text of ``obj``; non-finite numbers are written as null, never as NaN/Infinity."""
    return json.dumps(json_safe(obj), allow_nan=False, indent=indent)  # ASCII: safe for any error text


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some filesystems do not let a directory be opened; nothing more to do
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _why(exc: OSError) -> str:
    """The reason of a failed write, in words ("the disk is full" for ENOSPC and EDQUOT)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk is full ({exc.strerror or 'No space left on device'})"
    return str(exc.strerror or exc)


def _write_error(path: Path, exc: OSError, what: str, *, resume: bool = True) -> StoreError:
    again = "--resume the run" if resume else "start the run again"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = f"free space on that filesystem (or choose another --output), then {again}"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "make the directory writable or choose another --output"
    else:
        fix = f"check the filesystem, then {again}"
    return StoreError(f"{path}: cannot write {what}: {_why(exc)}; {fix}")


def atomic_write(path: Path, data: bytes, *, mode: int = _FILE_MODE, resume: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically and durably (``resume``: whether a failure's
    message tells to resume the run, or, while a run directory is created, to start again).

    Raises:
        StoreError: the write failed; ``path`` keeps its previous content.
    """
    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise _write_error(path, exc, path.name, resume=resume) from None
    _fsync_dir(path.parent)


def csv_columns(field_names: Iterable[str]) -> list[str]:
    """The results.csv header: the metrics, one column per field, then :data:`TAIL_COLUMNS`."""
    fields = [f for f in field_names if f not in METRICS and f not in TAIL_COLUMNS]
    return [*METRICS, *fields, *TAIL_COLUMNS]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return repr(value)
    if isinstance(value, (list, tuple, Mapping)):
        return dumps(value)
    return str(value)


def csv_row(result: EvaluationResult, columns: Sequence[str]) -> list[str]:
    """One results.csv row for ``result`` (missing values are empty cells)."""
    error = " | ".join(ln.strip() for ln in result.error.splitlines() if ln.strip()) if result.error else None
    own = {  # one physical line per row: the journal keeps the error text as it was
        "error": error, "real_evaluation": result.real_evaluation, "fitness": result.fitness,
        "num_prompts": result.num_prompts, "eval_id": result.eval_id, "phase": result.phase,
        "particle": result.particle, "iteration": result.iteration, "reused": result.reused,
        "attempts": result.attempts, "load": dict(result.load) or None,
    }
    row = []
    for col in columns:
        if col in own:
            row.append(_cell(own[col]))
        elif col in METRICS:
            row.append(_cell(result.metrics.get(col)))
        else:
            row.append(_cell(result.values.get(col)))
    return row


def _csv_text(rows: Iterable[Sequence[str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerows(rows)
    return buf.getvalue()


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list) and any(isinstance(v, Mapping) for v in value):
        for i, v in enumerate(value):
            _flatten(v, f"{prefix}[{i}]", out)
    else:
        out[prefix] = value


def config_changes(original: str, current: str, *, limit: int = 5) -> list[str]:
    """What differs between two TOML texts, one item per dotted key (``n_particles: 3 -> 4``).

    At most ``limit`` items, then how many more; an unparsable ``current`` is one item.
    """
    import tomllib

    from msopt.config.settings import same_toml

    try:
        new = tomllib.loads(current)
    except tomllib.TOMLDecodeError as exc:
        return [f"it is no longer valid TOML ({exc})"]
    old_flat: dict[str, Any] = {}
    new_flat: dict[str, Any] = {}
    _flatten(tomllib.loads(original), "", old_flat)
    _flatten(new, "", new_flat)
    out = []
    for key in sorted(old_flat.keys() | new_flat.keys()):
        if key not in new_flat:
            out.append(f"{key} removed")
        elif key not in old_flat:
            out.append(f"{key} added")
        elif not same_toml(old_flat[key], new_flat[key]):
            out.append(f"{key}: {old_flat[key]!r} -> {new_flat[key]!r}")
    if len(out) > limit:
        out = out[:limit] + [f"{len(out) - limit} more"]
    return out


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


class RunStore:
    """One run directory. Create it with :meth:`create`, reopen it with :meth:`open`.

    Attributes:
        run_dir: the directory.
        meta: the content of run.json.
        warnings: what loading the journal noticed (a torn last line dropped, duplicate eval ids).
    """

    def __init__(self, run_dir: Path, meta: Mapping[str, Any]) -> None:
        self.run_dir = Path(run_dir)
        self.meta: dict[str, Any] = dict(meta)
        self.warnings: list[str] = []
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self._ids = _IdSet()
        self._csv_stale = False
        self._columns = csv_columns(self.field_names)

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def create(cls, output_dir: str | os.PathLike[str], settings: Settings, *,
               run_id: str | None = None, meta: Mapping[str, Any] | None = None) -> RunStore:
        """Create ``<output_dir>/<run_id>/`` with config.toml, run.json and an empty journal.

        Args:
            output_dir: parent directory, created if missing.
            settings: the effective configuration, saved as config.toml.
            run_id: the directory name; default :func:`new_run_id`.
            meta: extra run.json entries; they override the computed ones.

        Raises:
            StoreError: the run directory exists already, the id is not a plain name, or the
                directory cannot be written.
        """
        rid = new_run_id() if run_id is None else str(run_id)
        if not _RUN_ID.fullmatch(rid):
            raise StoreError(f"run id {rid!r} is not a plain directory name; use letters, digits, "
                             "'.', '_' and '-' (at most 128, not starting with '.' or '-')")
        out = Path(os.path.expanduser(os.fspath(output_dir)))
        run_dir = out / rid
        try:
            out.mkdir(parents=True, exist_ok=True, mode=_DIR_MODE)
        except OSError as exc:
            raise _write_error(out, exc, "the output directory") from None
        if not out.is_dir():
            raise StoreError(f"{out}: the output path is not a directory; choose another --output")
        try:
            os.mkdir(run_dir, _DIR_MODE)
        except FileExistsError:
            raise StoreError(f"{run_dir}: the run directory exists already; continue it with "
                             f"--resume {run_dir}, or choose another run id") from None
        except OSError as exc:
            raise _write_error(run_dir, exc, "the run directory") from None

        from msopt import __version__
        from msopt.space.space import SearchSpace

        fields = [f.name for f in settings.fields]
        info: dict[str, Any] = {
            "run_id": rid,
            "engine": settings.engine,
            "benchmark": settings.config.run.benchmark,
            "seed": settings.config.run.seed,
            "mode": settings.config.run.mode,
            "fields": fields,
            "dimensions": list(SearchSpace(settings.fields).names),
            "msopt_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "argv": list(sys.argv),
        }
        info.update(meta or {})
        info["run_id"] = rid
        try:
            text = settings.to_toml()
            info["config_toml"] = text  # what the journal was made with: resume compares config.toml to it
            atomic_write(run_dir / CONFIG, text.encode("utf-8"), resume=False)
            atomic_write(run_dir / RUN_META, (dumps(info, indent=2) + "\n").encode("utf-8"), resume=False)
            store = cls(run_dir, info)
            atomic_write(run_dir / RESULTS_CSV, _csv_text([store._columns]).encode("utf-8"), resume=False)
            atomic_write(run_dir / JOURNAL, b"", resume=False)
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)  # only the directory made just above
            raise
        return store

    @classmethod
    def open(cls, run_dir: str | os.PathLike[str]) -> RunStore:
        """Open an existing run directory (``--resume``).

        Raises:
            StoreError: not a run directory, or run.json unreadable; the message names the path
                and the fix.
        """
        path = Path(os.path.expanduser(os.fspath(run_dir)))
        fix = "give the run directory that msopt printed when the run started (<output>/<run-id>)"
        if not path.is_dir():
            what = "does not exist" if not path.exists() else "is not a directory"
            raise StoreError(f"{path}: {what}; {fix}")
        for name in (CONFIG, RUN_META):
            if not (path / name).is_file():
                raise StoreError(f"{path}: not a msopt run directory ({name} is missing); {fix}")
        try:
            meta = json.loads((path / RUN_META).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StoreError(f"{path / RUN_META}: cannot read the run description: {exc}; "
                             "restore it from a backup or start a new run") from None
        if not isinstance(meta, dict) or not isinstance(meta.get("fields"), list):
            raise StoreError(f"{path / RUN_META}: not a msopt run description (no 'fields' list); "
                             "restore it from a backup or start a new run")
        meta.setdefault("run_id", path.name)
        for leftover in path.glob(".*.tmp"):  # temp files of an atomic write that was cut short
            try:
                leftover.unlink()
            except OSError:
                pass
        return cls(path, meta)

    # -- properties ------------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        """The run id (the directory name unless run.json says otherwise)."""
        return str(self.meta["run_id"])

    @property
    def field_names(self) -> list[str]:
        """Every field, in declaration order (the results.csv value columns)."""
        return [str(f) for f in self.meta.get("fields", [])]

    @property
    def dimension_names(self) -> list[str]:
        """The searched fields, in dimension order."""
        return [str(f) for f in self.meta.get("dimensions", [])]

    @property
    def columns(self) -> list[str]:
        """The results.csv header."""
        return list(self._columns)

    @property
    def journal_path(self) -> Path:
        return self.run_dir / JOURNAL

    @property
    def results_path(self) -> Path:
        return self.run_dir / RESULTS_CSV

    @property
    def state_path(self) -> Path:
        return self.run_dir / STATE

    @property
    def config_path(self) -> Path:
        return self.run_dir / CONFIG

    # -- journal ---------------------------------------------------------------------------
    def _read_journal(self) -> tuple[list[EvaluationResult], int, bool]:
        """Parse the journal: the results, the byte length of its valid prefix, and whether
        the file needs a newline appended after that prefix."""
        try:
            data = self.journal_path.read_bytes()
        except FileNotFoundError:
            return [], 0, False
        except OSError as exc:
            raise StoreError(f"{self.journal_path}: cannot read the journal: {exc.strerror or exc}; "
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
                    self._warn(f"{self.journal_path}: line {i + 1} is incomplete (the driver stopped "
                               "while writing it) and is ignored")
                    valid_end, need_newline = starts[i], False
                    break
                raise StoreError(f"{self.journal_path}: line {i + 1} is corrupt ({exc}); the journal "
                                 "can only be torn at its end: restore it from a backup, or delete "
                                 f"line {i + 1} and every line after it and --resume") from None
            if result.eval_id in seen:
                self._warn(f"{self.journal_path}: line {i + 1}: eval_id {result.eval_id} appears "
                           "again; the first record is kept")
                continue
            seen.add(result.eval_id)
            results.append(result)
        return results, valid_end, need_newline

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)
            log.warning(message)

    def load_journal(self) -> list[EvaluationResult]:
        """Every journaled evaluation, in journal order.

        An unparseable last line (a driver killed mid-write) is ignored; duplicate eval ids keep
        the first record. Both are reported in :attr:`warnings`.

        Raises:
            StoreError: a line other than the last is corrupt.
        """
        return self._read_journal()[0]

    def _open_journal(self) -> int:
        if self._fd is not None:
            return self._fd
        results, valid_end, need_newline = self._read_journal()
        try:
            if self.journal_path.exists() and (valid_end != self.journal_path.stat().st_size or need_newline):
                with open(self.journal_path, "r+b") as fh:
                    fh.truncate(valid_end)
                    if need_newline:
                        fh.seek(valid_end)
                        fh.write(b"\n")
                    fh.flush()
                    os.fsync(fh.fileno())
            self._fd = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, _FILE_MODE)
        except OSError as exc:
            raise _write_error(self.journal_path, exc, "the journal") from None
        self._ids = _IdSet(r.eval_id for r in results)
        return self._fd

    def append(self, result: EvaluationResult) -> None:
        """Journal one evaluation (one line, fsynced), then add its row to results.csv.

        Raises:
            StoreError: the journal could not be written (disk full, ...); the journal is left as
                it was. Or results.csv could not be written after the journal was: the result is
                safe and the table is rebuilt on the next append or :meth:`rebuild_results_csv`.
            ValueError: ``result.eval_id`` is already journaled (a driver bug).
        """
        fd = self._open_journal()
        if result.eval_id in self._ids:
            raise ValueError(f"eval_id {result.eval_id} is already in {self.journal_path}")
        line = (dumps(result.to_json(self.run_id)) + "\n").encode("utf-8")
        if b"\n" in line[:-1]:  # json.dumps escapes newlines; never let one split a record
            raise ValueError("a journal record must be one line")
        try:
            size = os.fstat(fd).st_size
        except OSError as exc:
            raise _write_error(self.journal_path, exc, "the journal") from None
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
            raise _write_error(self.journal_path, exc, f"evaluation {result.eval_id} to the journal") from None
        self._ids.add(result.eval_id)

        if self._csv_stale:
            self.rebuild_results_csv()
            return
        try:
            with open(self.results_path, "a", encoding="utf-8", errors="backslashreplace", newline="") as fh:
                start = fh.tell()
                try:
                    fh.write(_csv_text([csv_row(result, self._columns)]))
                    fh.flush()
                except OSError:
                    fh.truncate(start)
                    raise
        except OSError as exc:
            self._csv_stale = True
            raise StoreError(f"{self.results_path}: cannot add evaluation {result.eval_id}: "
                             f"{_why(exc)}; it is safe in the journal and results.csv is "
                             "rebuilt from it on --resume") from None

    def rebuild_results_csv(self) -> None:
        """Regenerate results.csv from the journal, atomically (csv == journal afterwards)."""
        rows = [self._columns] + [csv_row(r, self._columns) for r in self.load_journal()]
        try:
            atomic_write(self.results_path, _csv_text(rows).encode("utf-8", "backslashreplace"))
        except StoreError:
            self._csv_stale = True
            raise
        self._csv_stale = False

    # -- documents ---------------------------------------------------------------------------
    def _path(self, name: str) -> Path:
        rel = Path(name)
        if not name or rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"{name!r} is not a file name inside the run directory")
        return self.run_dir / rel

    def write_text(self, name: str, text: str, *, executable: bool = False) -> Path:
        """Write ``<run_dir>/<name>`` atomically (subdirectories are created); return its path."""
        path = self._path(name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=_DIR_MODE)
        except OSError as exc:
            raise _write_error(path.parent, exc, "a directory") from None
        atomic_write(path, text.encode("utf-8", "backslashreplace"), mode=0o755 if executable else _FILE_MODE)
        return path

    def write_json(self, name: str, obj: Any) -> Path:
        """Write ``obj`` as JSON to ``<run_dir>/<name>`` atomically; non-finite numbers as null."""
        return self.write_text(name, dumps(obj, indent=2) + "\n")

    def read_json(self, name: str) -> Any | None:
        """A JSON document of the run directory, or None when absent.

        Raises:
            StoreError: it exists but cannot be read or parsed.
        """
        path = self._path(name)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(f"{path}: cannot read: {exc}; fix its permissions or remove it") from None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise StoreError(f"{path}: not valid JSON ({exc}); restore it or remove it to start "
                             "that part afresh") from None

    def save_state(self, state: Mapping[str, Any]) -> None:
        """Checkpoint the swarm to state.json, atomically and durably."""
        self.write_json(STATE, state)

    def load_state(self) -> dict[str, Any] | None:
        """The last checkpoint, or None when the run has none yet."""
        state = self.read_json(STATE)
        if state is not None and not isinstance(state, dict):
            raise StoreError(f"{self.state_path}: not a swarm checkpoint (a JSON object expected); "
                             "remove it to restart the swarm from the journal")
        return state

    def write_best(self, best: Mapping[str, Any]) -> Path:
        """Write best.json atomically."""
        return self.write_json(BEST, best)

    def log_path(self, kind: str, eval_id: int, attempt: int = 1) -> Path:
        """``logs/eval-<eval_id>-<kind>-a<attempt>.log`` (``logs/`` is created)."""
        if not _LOG_KIND.fullmatch(kind):
            raise ValueError(f"log kind {kind!r} must be letters, digits, '_' or '-'")
        logs = self.run_dir / LOGS
        try:
            logs.mkdir(exist_ok=True, mode=_DIR_MODE)
        except OSError as exc:
            raise _write_error(logs, exc, "the logs directory") from None
        return logs / f"eval-{int(eval_id):05d}-{kind}-a{int(attempt)}.log"

    def check_config(self) -> None:
        """Check that config.toml is still the configuration the journal was made with.

        Run directories written before run.json kept ``config_toml`` are not checked.

        Raises:
            StoreError: config.toml was edited; the message says what changed and how to restore it.
        """
        original = self.meta.get("config_toml")
        if not isinstance(original, str):
            return
        try:
            current = self.config_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(f"{self.config_path}: cannot read it ({exc}); restore it from run.json's "
                             "'config_toml'") from None
        changes = config_changes(original, current)
        if changes:
            raise StoreError(f"{self.config_path}: changed since the run started ({'; '.join(changes)}); the "
                             "journal was made with the original, which run.json keeps as 'config_toml': restore "
                             "it to resume, or start a new run with -c")

    # -- ownership ---------------------------------------------------------------------------
    def lock(self) -> None:
        """Own the run directory: an exclusive ``flock`` on ``.lock``, held until :meth:`close`.

        The kernel drops the lock when the owner dies (even by SIGKILL), so a stale lock never
        blocks a resume.

        Raises:
            StoreError: another process owns the run (its pid in the message), or the lock file
                cannot be written.
        """
        if self._lock_fd is not None:
            return
        import fcntl

        path = self.run_dir / LOCK
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, _FILE_MODE)
        except OSError as exc:
            raise _write_error(path, exc, "the lock file") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            try:
                owner = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            finally:
                os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise StoreError(f"{self.run_dir}: the run is in use by another msopt optimize (pid {owner}); "
                                 "wait for it to end or stop it, then --resume") from None
            raise StoreError(f"{path}: cannot lock the run directory: {exc.strerror or exc}") from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        except OSError:
            pass  # the pid is only for the message of a second owner; the lock itself holds
        self._lock_fd = fd

    # -- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Close the journal and give up the lock; a later :meth:`append` reopens the journal."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001  best effort at interpreter exit
            pass

    def __repr__(self) -> str:
        return f"RunStore({str(self.run_dir)!r})"
