"""Run ``msopt optimize`` and SIGKILL it at an exact point of the run, not after some time.

    python tests/support/kill_at.py WHEN OPTIMIZE-ARGS ...

``WHEN`` is ``line:N`` (right after the journal holds N lines, that line fsynced, before its
results.csv row) or ``lock`` (right after a run took the run directory's lock, before it replays or
evaluates anything). The process kills itself with SIGKILL, so nothing of msopt's own cleanup runs:
for the run it is the same as ``kill -9`` from outside, but at a point the test chose, so a test
never races the run it kills.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm(when: str) -> None:
    """Patch the store so that this process dies at ``when`` (see the module docstring)."""
    from msopt.run.store import JournalFile, RunStore

    if when == "lock":
        lock = RunStore.lock

        def lock_then_die(self: RunStore) -> None:
            lock(self)
            _die()

        RunStore.lock = lock_then_die  # type: ignore[method-assign]
        return
    kind, _, count = when.partition(":")
    if kind != "line" or not count.isdigit():
        raise SystemExit(f"kill_at: WHEN must be line:N or lock, got {when!r}")
    append = JournalFile.append

    def append_then_die(self: JournalFile, *args: Any, **kwargs: Any) -> None:
        append(self, *args, **kwargs)
        if Path(self.path).read_bytes().count(b"\n") >= int(count):
            _die()

    JournalFile.append = append_then_die  # type: ignore[method-assign]


if __name__ == "__main__":
    arm(sys.argv[1])
    from msopt.cli.main import main

    sys.exit(main(["optimize", *sys.argv[2:]]))
