"""TCP ports for a trial's servers: one the OS picks, whether one is free or listened on, and a lease of ports
from ``[cluster] ports`` that two trials of one node can never share."""

from __future__ import annotations

import os
import random
import socket
import tempfile
from pathlib import Path

from msopt.errors import EvaluationError


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
