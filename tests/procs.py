"""Processes a test started, and only those: see tests/record_pid.py."""

from __future__ import annotations

import sys
from pathlib import Path

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
