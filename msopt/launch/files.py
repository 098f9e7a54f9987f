"""Files a launch writes: whole or not at all (:func:`write_atomic`), and a LaunchSpec's files staged for the
duration of a launch with the originals restored (:func:`staged_files`)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

BACKUP_SUFFIX = ".msopt-backup"


def write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write a whole file or nothing: a temporary file beside ``path`` (its folder made if need be),
    fsync, then rename over it; ``mode``: the file's permissions (default: the umask's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def file_bytes(doc: object) -> bytes:
    """A LaunchSpec file's bytes as :func:`staged_files` writes them: bytes as they are, else JSON (4-space
    indent, a final newline)."""
    if isinstance(doc, bytes):
        return doc
    return (json.dumps(doc, indent=4, ensure_ascii=False) + "\n").encode("utf-8")


@contextlib.contextmanager
def staged_files(files: Mapping[str, Any]) -> Iterator[list[Path]]:
    """Write a LaunchSpec's files (JSON) for the duration of a launch, then restore them.

    The first time a file is replaced its original is copied to ``<file>.msopt-backup``; a
    backup left by a run that died is taken as the original, so an edited file is never
    mistaken for it. On exit the original comes back and the backup is removed.
    """
    done: list[tuple[Path, bytes | None, int | None, Path]] = []
    try:
        for raw, doc in files.items():
            path = Path(raw)
            backup = path.with_name(path.name + BACKUP_SUFFIX)
            original: bytes | None = None
            mode: int | None = None
            if backup.exists():
                original = backup.read_bytes()
                mode = backup.stat().st_mode & 0o777
            elif path.exists():
                original = path.read_bytes()
                mode = path.stat().st_mode & 0o777
                write_atomic(backup, original, mode)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
            data = file_bytes(doc)
            done.append((path, original, mode, backup))
            write_atomic(path, data, mode if mode is not None else 0o640)
        yield [p for p, *_ in done]
    finally:
        for path, original, mode, backup in reversed(done):
            if original is None:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            else:
                write_atomic(path, original, mode)
            with contextlib.suppress(FileNotFoundError):
                backup.unlink()
