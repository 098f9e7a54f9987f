"""The driver's guard (actors/guard.py): what a driver started does not outlive it, even when the
driver is killed with SIGKILL (issue 18, item 6). No Ray needed: the "driver" here is a small
Python process that starts its guard and a child, as ray.init starts Ray's processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

DRIVER = """
import fcntl, os, subprocess, sys, termios, time
from actors.guard import start_guard
guard = start_guard()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", sys.argv[1]], start_new_session=True,
                         stdout=subprocess.DEVNULL)  # a driver that fails ends the test's readline
# wait until the guard has recorded the child, not for its poll: a byte on the guard's pipe wakes it
# for a recording pass, and it reads the next byte only once that pass is over
pipe = os.readlink(f"/proc/{guard}/fd/0")
def link(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # the descriptor listdir itself held
        return None
(end,) = [int(fd) for fd in os.listdir("/proc/self/fd") if link(fd) == pipe]
for _ in range(2):  # the first pass starts after the child exists; the second byte is read after it ended
    os.write(end, b"x")
    while int.from_bytes(fcntl.ioctl(end, termios.FIONREAD, bytes(4)), sys.byteorder):
        time.sleep(0.01)
print(child.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_sigkilled_driver_takes_what_it_started_along(tmp_path: Path) -> None:
    token = f"guard-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, token], stdout=subprocess.PIPE, text=True, env=env,
                              start_new_session=True)
    child = 0
    try:
        assert driver.stdout is not None
        child = int(driver.stdout.readline())
        assert _alive(child) and token in (Path("/proc") / str(child) / "cmdline").read_text()
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 120  # a guard against a hang only; nothing here is timed
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), "the driver's child outlived it"
    finally:
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
