"""Run a command after writing its pid and argv into a directory the test owns.

    python tests/support/record_pid.py PID_DIR COMMAND [ARG ...]

The file ``PID_DIR/<pid>`` holds the command's argv joined by NUL (what ``/proc/<pid>/cmdline`` will
read), then the command replaces this process (``exec``: same pid, same process group). A test that
wraps every executable it configures with this script can then look at exactly the processes it
started (:func:`tests.support.procs.survivors`), never at the rest of the machine.
"""

from __future__ import annotations

import os
import sys

TOKEN = "MSOPT_TEST_RECORDED"

if __name__ == "__main__":
    pid_dir, argv = sys.argv[1], sys.argv[2:]
    path = os.path.join(pid_dir, str(os.getpid()))
    with open(path + ".tmp", "wb") as f:
        f.write(b"\0".join(a.encode() for a in argv) + b"\0")
    os.replace(path + ".tmp", path)
    # the token every descendant inherits: tests.support.procs.left_behind counts only processes carrying it, so a
    # recorded pid reused as another program's process group (pid_max can be 32768) is never taken for a server's
    os.environ[TOKEN] = os.path.abspath(pid_dir)
    os.execvp(argv[0], argv)
