"""Processes a test started, and only those: see tests/support/record_pid.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.support.record_pid import TOKEN

RECORDER = Path(__file__).with_name("record_pid.py")


def recorded(argv: list[str], pid_dir: Path) -> list[str]:
    """``argv`` run through the recorder, which notes its pid in ``pid_dir`` before it starts."""
    pid_dir.mkdir(parents=True, exist_ok=True)
    return [sys.executable, str(RECORDER), str(pid_dir), *argv]


def survivors(pid_dir: Path) -> list[int]:
    """The recorded processes still running: their pid exists and runs the recorded command line
    (a pid reused by another program, or a reaped or zombie process, does not count)."""
    out = []
    for f in sorted(pid_dir.iterdir()) if pid_dir.is_dir() else ():
        if not f.name.isdigit():
            continue
        try:
            running = Path(f"/proc/{f.name}/cmdline").read_bytes()
        except OSError:
            continue
        if running and running == f.read_bytes():
            out.append(int(f.name))
    return out


def started(pid_dir: Path) -> int:
    """How many processes the recorder started (a test checks it saw some, so it cannot pass idly)."""
    return sum(1 for f in pid_dir.iterdir() if f.name.isdigit()) if pid_dir.is_dir() else 0


def _pgid(pid: int) -> int | None:
    """The process group of a live, non-zombie ``pid`` (None when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in (b"Z", b"X") else int(fields[2])


def _carries(pid: int, token: bytes) -> bool:
    """Whether ``pid``'s environment holds ``token`` (``NAME=value``), inherited from the recorder."""
    try:
        return token in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def left_behind(pid_dir: Path) -> list[int]:
    """Every live process in a group the recorder started (a server leads its own group, so the
    recorded pid is the group id), and every recorded worker (tests/support/orphan_kids.py) still alive
    in its recorded group: judged by pid, process group and the recorder's token in the environment
    (record_pid.py), never by command line (vLLM's workers rename themselves)."""
    if not pid_dir.is_dir():
        return []
    token = f"{TOKEN}={os.path.abspath(pid_dir)}".encode()
    groups = {int(f.name) for f in pid_dir.iterdir() if f.name.isdigit()}
    out = {int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit() and _pgid(int(d.name)) in groups}
    for f in pid_dir.glob("kid-*"):
        pid = int(f.name[4:])
        if _pgid(pid) == int(f.read_text() or -1):
            out.add(pid)
    return sorted(p for p in out if _carries(p, token))


def kids(pid_dir: Path) -> int:
    """How many workers tests/support/orphan_kids.py started."""
    return len(list(pid_dir.glob("kid-*"))) if pid_dir.is_dir() else 0
