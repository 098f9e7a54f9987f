"""Start one worker process that behaves as vLLM's CPU workers do, then become the server.

    python tests/support/orphan_kids.py PID_DIR COMMAND [ARG ...]

The worker is forked into this process's group, renames itself ``VLLM::Worker`` (so no command
line finds it), exits on SIGTERM while its parent lives but ignores SIGTERM once orphaned (as
``VLLM::EngineCore`` and ``VLLM::Worker`` did in issue 25), and records itself as
``PID_DIR/kid-<pid>`` holding its process group id. Then this process ``exec``s COMMAND (same
pid, same group). Combined with tests/support/record_pid.py, a test knows every pid and group it started.
"""

from __future__ import annotations

import os
import signal
import sys
import time

if __name__ == "__main__":
    pid_dir, argv = sys.argv[1], sys.argv[2:]
    parent = os.getpid()
    kid = os.fork()
    if kid == 0:
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0) if os.getppid() == parent else None)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        path = os.path.join(pid_dir, f"kid-{os.getpid()}")
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpgid(0)))
        os.replace(path + ".tmp", path)
        with open("/proc/self/comm", "w") as f:
            f.write("VLLM::Worker")
        end = time.monotonic() + 600  # a bound, never reached by a passing test
        while time.monotonic() < end:
            time.sleep(1)
        os._exit(0)
    os.execvp(argv[0], argv)
