"""The run directory ``<output>/<run-id>/``: :class:`RunStore` puts its parts together.

The journal (:class:`~msopt.run.store._journal.JournalFile`) is the truth; results.csv
(:class:`~msopt.run.store._table.ResultsTable`) is a projection of it; the lock
(:class:`~msopt.run.store._lock.RunLock`) says who owns the directory; state.json, best.json and the
other documents are replaced atomically (:func:`~msopt.run.store._files.atomic_write`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msopt._version import __version__
from msopt.config.layers import same_toml
from msopt.evaluate.results import EvaluationResult
from msopt.run.store._files import (
    BEST,
    CONFIG,
    DIR_MODE,
    FILE_MODE,
    JOURNAL,
    LOCK,
    LOGS,
    RESULTS_CSV,
    RUN_META,
    STATE,
    StoreError,
    atomic_write,
    dumps,
    write_error,
)
from msopt.run.store._journal import JournalFile
from msopt.run.store._lock import RunLock
from msopt.run.store._table import ResultsTable, csv_columns
from msopt.space.space import SearchSpace

if TYPE_CHECKING:
    from msopt.config import Config

log = logging.getLogger(__name__)

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_LOG_KIND = re.compile(r"[A-Za-z0-9_-]{1,32}")


def new_run_id() -> str:
    """A run id: the UTC time ``YYYYmmdd-HHMMSS`` and a short random suffix (from os.urandom)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + os.urandom(3).hex()


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


class RunStore:
    """One run directory. Create it with :meth:`create`, reopen it with :meth:`open`.

    Attributes:
        run_dir: the directory.
        meta: the content of run.json.
        warnings: what loading the journal noticed (a torn last line dropped, duplicate eval ids).
    """

    def __init__(self, run_dir: Path, meta: Mapping[str, Any]) -> None:
        # absolute once, here: every path handed to a server, a benchmark or an actor derives from it, and
        # those run with another working directory (the evaluation's work dir, a Ray worker's)
        self.run_dir = Path(os.path.abspath(run_dir))
        self.meta: dict[str, Any] = dict(meta)
        self.warnings: list[str] = []
        self.journal = JournalFile(self.run_dir / JOURNAL, self._warn)
        self.table = ResultsTable(self.run_dir / RESULTS_CSV, csv_columns(self.field_names))
        self._lock = RunLock(self.run_dir, self.run_dir / LOCK)

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def create(cls, output_dir: str | os.PathLike[str], config: Config, *,
               run_id: str | None = None, meta: Mapping[str, Any] | None = None) -> RunStore:
        """Create ``<output_dir>/<run_id>/`` with config.toml, run.json and an empty journal.

        Args:
            output_dir: parent directory, created if missing.
            config: the effective configuration, saved as config.toml (its ``text``).
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
        out = Path(os.path.abspath(os.path.expanduser(os.fspath(output_dir))))
        run_dir = out / rid
        not_dir = StoreError(f"{out}: the output path is not a directory; choose another --output")
        if out.exists() and not out.is_dir():  # mkdir(exist_ok=True) would fail with "File exists"
            raise not_dir
        try:
            out.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        except OSError as exc:
            raise write_error(out, exc, "the output directory") from None
        if not out.is_dir():
            raise not_dir
        try:
            os.mkdir(run_dir, DIR_MODE)
        except FileExistsError:
            raise StoreError(f"{run_dir}: the run directory exists already; continue it with "
                             f"--resume {run_dir}, or choose another run id") from None
        except OSError as exc:
            raise write_error(run_dir, exc, "the run directory") from None

        fields = [f.name for f in config.engine.fields]
        info: dict[str, Any] = {
            "run_id": rid,
            "engine": config.engine.name,
            "benchmark": config.run.benchmark,
            "seed": config.run.seed,
            "mode": config.run.mode,
            "fields": fields,
            "dimensions": list(SearchSpace(config.engine.fields).names),
            "msopt_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "argv": list(sys.argv),
        }
        info.update(meta or {})
        info["run_id"] = rid
        try:
            text = config.text
            info["config_toml"] = text  # what the journal was made with: resume compares config.toml to it
            atomic_write(run_dir / CONFIG, text.encode("utf-8"), resume=False)
            atomic_write(run_dir / RUN_META, (dumps(info, indent=2) + "\n").encode("utf-8"), resume=False)
            store = cls(run_dir, info)
            store.table.write_header(resume=False)
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
        path = Path(os.path.abspath(os.path.expanduser(os.fspath(run_dir))))
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
        return list(self.table.columns)

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
        return self.journal.read()

    def append(self, result: EvaluationResult) -> None:
        """Journal one evaluation (one line, fsynced), then add its row to results.csv.

        Raises:
            StoreError: the journal could not be written (disk full, ...); the journal is left as
                it was. Or results.csv could not be written after the journal was: the result is
                safe and the table is rebuilt on the next append or :meth:`rebuild_results_csv`.
            ValueError: ``result.eval_id`` is already journaled (a driver bug).
        """
        self.journal.append(result, self.run_id)
        if self.table.stale:
            self.rebuild_results_csv()
            return
        self.table.append(result)

    def rebuild_results_csv(self) -> None:
        """Regenerate results.csv from the journal, atomically (csv == journal afterwards)."""
        self.table.rebuild(self.load_journal())

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
            path.parent.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        except OSError as exc:
            raise write_error(path.parent, exc, "a directory") from None
        atomic_write(path, text.encode("utf-8", "backslashreplace"), mode=0o755 if executable else FILE_MODE)
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

    def write_best(self, best: Mapping[str, Any]) -> Path:
        """Write best.json atomically."""
        return self.write_json(BEST, best)

    def log_path(self, kind: str, eval_id: int, attempt: int = 1) -> Path:
        """``logs/eval-<eval_id>-<kind>-a<attempt>.log`` (``logs/`` is created)."""
        if not _LOG_KIND.fullmatch(kind):
            raise ValueError(f"log kind {kind!r} must be letters, digits, '_' or '-'")
        logs = self.run_dir / LOGS
        try:
            logs.mkdir(exist_ok=True, mode=DIR_MODE)
        except OSError as exc:
            raise write_error(logs, exc, "the logs directory") from None
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
        self._lock.acquire()

    # -- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Close the journal and give up the lock; a later :meth:`append` reopens the journal."""
        self.journal.close()
        self._lock.release()

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
