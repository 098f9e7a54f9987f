"""The run directory's owner: an exclusive ``flock`` on ``.lock``.

The kernel drops the lock when the owner dies (even by SIGKILL), so a stale lock never blocks a
resume. The lock file holds the owner's pid, for the message a second owner gets.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from msopt.run.store._files import FILE_MODE, StoreError, write_error


class RunLock:
    """The lock of one run directory (``<run_dir>/.lock``), held from :meth:`acquire` to :meth:`release`."""

    def __init__(self, run_dir: Path, path: Path) -> None:
        self.run_dir = run_dir
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock (a no-op when this object holds it already).

        Raises:
            StoreError: another process owns the run (its pid in the message), or the lock file
                cannot be written.
        """
        if self._fd is not None:
            return
        import fcntl

        path = self.path
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        except OSError as exc:
            raise write_error(path, exc, "the lock file") from None
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
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (closing the last descriptor releases the flock)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
