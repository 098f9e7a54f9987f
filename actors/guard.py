"""A guard that stops the local Ray instance a driver started when that driver dies, even by SIGKILL.

Ray's own processes (GCS, raylet, dashboard and runtime-env agents, the actors) outlive a driver
killed with SIGKILL by a minute or more. :func:`start_guard` starts a small process holding the
read end of a pipe whose only write end is the driver's: when the driver dies, the kernel closes
it and the guard reads EOF. Meanwhile the guard records the driver's descendants once a second
(pid and start time, so a reused pid is never mistaken for one); at EOF it stops (SIGSTOP) every
recorded process still alive and, round by round, their descendants, so that none can start
another, then kills them all (SIGKILL). Nothing else is touched. The servers the actors started
die with their actors: each server's process group holds a watcher that kills the group when its
actor is gone (msopt/launch/process.py), including workers already orphaned.

Run as ``python -m actors.guard DRIVER_PID`` with the pipe's read end on stdin; it imports no Ray.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

POLL_SECONDS = 1.0
MAX_ROUNDS = 20


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a live process, None when it is gone."""
    try:
        fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[19])


def _table() -> dict[int, tuple[int, int]]:
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            st = _stat(int(d.name))
            if st is not None:
                out[int(d.name)] = st
    return out


def descendants(roots: set[int], table: dict[int, tuple[int, int]]) -> dict[int, int]:
    """pid -> start time of every live descendant of ``roots``."""
    out: dict[int, int] = {}
    todo = list(roots)
    while todo:
        p = todo.pop()
        for pid, (ppid, start) in table.items():
            if ppid == p and pid not in out:
                out[pid] = start
                todo.append(pid)
    return out


def _signal(procs: dict[int, int], sig: int) -> int:
    sent = 0
    for pid, start in procs.items():
        st = _stat(pid)
        if st is not None and st[1] == start:
            try:
                os.kill(pid, sig)
                sent += 1
            except (ProcessLookupError, PermissionError):
                pass
    return sent


def guard(driver: int, stdin_fd: int = 0) -> int:
    """Watch ``driver`` until ``stdin_fd`` reads EOF, then stop what it started."""
    me = os.getpid()
    seen: dict[int, int] = {}
    while True:
        ready, _, _ = select.select([stdin_fd], [], [], POLL_SECONDS)
        if ready and not os.read(stdin_fd, 4096):
            break
        table = _table()
        seen.update({p: s for p, s in descendants({driver}, table).items() if p != me})
        seen = {p: s for p, s in seen.items() if p in table and table[p][1] == s}
    procs = dict(seen)
    for _ in range(MAX_ROUNDS):  # freeze first: a stopped raylet starts no new worker behind our back
        _signal(procs, signal.SIGSTOP)
        more = {p: s for p, s in descendants(set(procs), _table()).items() if p != me and p not in procs}
        if not more:
            break
        procs.update(more)
    _signal(procs, signal.SIGKILL)
    return 0


def start_guard() -> int | None:
    """Start the guard of this process; returns the guard's pid (None where /proc is missing).

    The pipe's write end is left open, never written, in this process only (non-inheritable),
    so that it closes exactly when this process dies.
    """
    if not Path("/proc/self/stat").exists():
        return None
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "actors.guard", str(os.getpid())], stdin=read_end,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                    [str(Path(__file__).resolve().parents[1]),
                                     *filter(None, [os.environ.get("PYTHONPATH")])])})
    except OSError:
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    return proc.pid


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the terminal is the driver's to handle
    sys.exit(guard(int(sys.argv[1])))
