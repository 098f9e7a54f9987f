"""The run directory's file names, its error, and the durable writes every part of it shares.

A document is replaced atomically: a temp file beside it, fsync, ``os.replace``, fsync of the
directory. JSON is written without NaN/Infinity (non-finite numbers become null).
"""

from __future__ import annotations

import errno
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msopt.errors import MsoptError

JOURNAL = "journal.jsonl"
STATE = "state.json"
RESULTS_CSV = "results.csv"
CONFIG = "config.toml"
RUN_META = "run.json"
BEST = "best.json"
LOCK = ".lock"
LOGS = "logs"

FILE_MODE = 0o644
DIR_MODE = 0o755


class StoreError(MsoptError):
    """The run directory cannot be created, read or written: the message names the path and fix."""


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


def fsync_dir(path: Path) -> None:
    """Fsync a directory (best effort: some filesystems do not let one be opened)."""
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


def why(exc: OSError) -> str:
    """The reason of a failed write, in words ("the disk is full" for ENOSPC and EDQUOT)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk is full ({exc.strerror or 'No space left on device'})"
    return str(exc.strerror or exc)


def write_error(path: Path, exc: OSError, what: str, *, resume: bool = True) -> StoreError:
    """The :class:`StoreError` of a failed write of ``what`` at ``path``, with the fix."""
    again = "--resume the run" if resume else "start the run again"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = f"free space on that filesystem (or choose another --output), then {again}"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "make the directory writable or choose another --output"
    else:
        fix = f"check the filesystem, then {again}"
    return StoreError(f"{path}: cannot write {what}: {why(exc)}; {fix}")


def atomic_write(path: Path, data: bytes, *, mode: int = FILE_MODE, resume: bool = True) -> None:
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
        raise write_error(path, exc, path.name, resume=resume) from None
    fsync_dir(path.parent)
