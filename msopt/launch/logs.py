"""The log of a started process: opened 0o644, headed by the exact argv, environment and working directory
msopt started it with, and read back at its end (the last lines, the line that says why it stopped)."""

from __future__ import annotations

import json
import os
import re
import shlex
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

LOG_MODE = 0o644
#: Prefix of the lines msopt writes at the top of every log it starts (argv, env, cwd); health
#: checks and crash lines skip them.
LOG_HEADER = "[msopt] "


def open_log(log_path: str | os.PathLike[str]) -> int:
    """Open (append) a log file created 0o644 (never world-writable); return its descriptor."""
    path = Path(log_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), LOG_MODE)
    mode = os.fstat(fd).st_mode
    if mode & 0o002:
        os.fchmod(fd, mode & ~0o002 & 0o777)
    return fd


def log_header(argv: Sequence[str], env: Mapping[str, str], cwd: str) -> str:
    """The lines that open a log: the exact argv (JSON, and as a shell line to paste), the
    environment msopt set on top of its own, and the working directory; one line each (the shell
    line is left out when an item holds a line break, the JSON argv has it exactly)."""
    command = shlex.join(argv)
    if "\n" in command or "\r" in command:
        command = "(see argv: an item holds a line break)"
    return "".join(f"{LOG_HEADER}{k}: {v}\n" for k, v in (
        ("argv", json.dumps(list(argv), ensure_ascii=False)),
        ("command", command),
        ("env", json.dumps(dict(env), ensure_ascii=False, sort_keys=True)),
        ("cwd", cwd.replace("\n", "\\n"))))


def tail_text(log_path: str | os.PathLike[str], limit: int) -> str:
    """The last ``limit`` bytes of a file as text ("" when it cannot be read)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def tail(log_path: str | os.PathLike[str], n: int = 50) -> list[str]:
    """The last ``n`` lines of a text file (empty when it does not exist)."""
    if n <= 0:
        return []
    return list(deque(tail_text(log_path, max(65536, n * 512)).splitlines(), maxlen=n))


_CRASH_LINE = re.compile(r"(Error|Exception|error:|FATAL|Fatal|Traceback|Killed|Aborted)")


def crash_line(lines: Sequence[str]) -> str:
    """The line of a log's end that says why it stopped: the last one naming an error, else the last
    non-empty one ("" for none)."""
    kept = [ln.strip() for ln in lines if ln.strip() and not ln.startswith(LOG_HEADER)]
    named = [ln for ln in kept if _CRASH_LINE.search(ln) and not ln.startswith("Traceback")]
    return named[-1] if named else (kept[-1] if kept else "")


def exit_report(what: str, log_path: str | os.PathLike[str], lines: Sequence[str]) -> str:
    """``what``, the log's crash line and the log's path on the first line (the one progress lines
    and tables show), then the log's last lines (kept whole in the journal)."""
    why = crash_line(lines)
    head = f"{what}: {why} (log {log_path})" if why else f"{what}; its log {log_path} holds no output"
    return head + ("\nlog ends with:\n" + "\n".join(lines) if lines else "")
