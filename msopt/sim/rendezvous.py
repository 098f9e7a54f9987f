"""Multi-node ``msopt sim-serve``: the nodes of one instance meet as the engines' own nodes do.

A command line that places its server in a multi-node instance (SGLang ``--nnodes N --node-rank
R --dist-init-addr HOST:PORT``; vLLM ``--data-parallel-size-local L --data-parallel-address HOST
--data-parallel-rpc-port PORT [--headless --data-parallel-start-rank S]`` or ``--nnodes N
--node-rank R --master-addr HOST --master-port PORT [--headless]``) makes sim-serve join a
rendezvous: rank 0 listens on HOST:PORT, every other rank connects and sends its command line.
Rank 0 refuses to become ready (and exits 1) unless all N - 1 ranks arrived, each rank once, with
the same command line but for the per-node flags; the others serve no HTTP and exit once rank 0
is gone, like the engines' follower nodes.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

from msopt.errors import EvaluationError
from msopt.launch.render import drop_flags, flag_value, int_flag

#: Flags that differ between the nodes of one instance (with a value unless listed in _BARE).
PER_NODE = ("--node-rank", "-r", "--headless", "--data-parallel-start-rank", "-dpr")
_BARE = ("--headless",)


@dataclass(frozen=True)
class Placement:
    """Where one command line sits in a multi-node instance."""

    nnodes: int
    rank: int
    host: str
    port: int


def _int(argv: Sequence[str], default: int, *names: str) -> int:
    """:func:`~msopt.launch.render.int_flag`, refused as sim-serve's command line is."""
    try:
        return int_flag(argv, default, *names)
    except EvaluationError:
        raise SystemExit(f"msopt sim-serve: error: {names[0]} {flag_value(argv, *names)!r} is not an integer") \
            from None


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise SystemExit(f"msopt sim-serve: error: --dist-init-addr {addr!r} is not HOST:PORT") from None


def placement(argv: Sequence[str]) -> Placement | None:
    """The multi-node placement a command line asks for, None for a one-node server."""
    argv = list(argv)
    dist = flag_value(argv, "--dist-init-addr", "--nccl-init-addr")
    nnodes = _int(argv, 1, "--nnodes", "-n")
    if dist is not None and nnodes > 1:
        host, port = _split(dist)
        return Placement(nnodes, _int(argv, 0, "--node-rank"), host, port)
    local = flag_value(argv, "--data-parallel-size-local", "-dpl")
    dp_addr = flag_value(argv, "--data-parallel-address", "-dpa")
    if local is not None and dp_addr is not None:
        local_n = _int(argv, 1, "--data-parallel-size-local", "-dpl")
        dp = _int(argv, 1, "--data-parallel-size", "-dp")
        if local_n < 1 or dp % local_n:
            raise SystemExit(f"msopt sim-serve: error: --data-parallel-size {dp} is not a multiple of "
                             f"--data-parallel-size-local {local_n}")
        if dp // local_n > 1:
            start = _int(argv, 0, "--data-parallel-start-rank", "-dpr")
            return Placement(dp // local_n, start // local_n, dp_addr,
                             _int(argv, 29550, "--data-parallel-rpc-port", "-dpp"))
    if nnodes > 1:
        return Placement(nnodes, _int(argv, 0, "--node-rank", "-r"), flag_value(argv, "--master-addr") or "127.0.0.1",
                         _int(argv, 29501, "--master-port"))
    return None


def instance_key(argv: Sequence[str]) -> list[str]:
    """The command line without its per-node flags: equal on every node of one instance."""
    return drop_flags(argv, PER_NODE, _BARE)[0]


def _differs(a: Sequence[str], b: Sequence[str]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"item {i}: {x!r} here, {y!r} there"
    return f"{len(a)} items here, {len(b)} there"


def lead(place: Placement, argv: Sequence[str], timeout: float) -> tuple[list[socket.socket], str | None]:
    """Rank 0: wait for every other rank; returns their connections and the first problem (or None)."""
    key = instance_key(argv)
    srv = socket.create_server((place.host, place.port), reuse_port=False)
    srv.settimeout(1.0)
    conns: list[socket.socket] = []
    seen: dict[int, bool] = {}
    problem = None
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < place.nnodes - 1 and problem is None:
            if time.monotonic() > deadline:
                problem = (f"only {len(seen)} of {place.nnodes - 1} other nodes joined within {timeout:g}s "
                           f"(ranks {sorted(seen)})")
                break
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            conns.append(conn)
            conn.settimeout(30.0)
            line = conn.makefile("r", encoding="utf-8").readline()
            try:
                msg = json.loads(line)
                rank, other = int(msg["rank"]), [str(x) for x in msg["argv"]]
            except (ValueError, KeyError, TypeError):
                problem = f"a node sent {line[:200]!r}, not its rank and command line"
                break
            if not 0 < rank < place.nnodes or rank in seen:
                problem = f"node rank {rank} joined twice or is outside 1..{place.nnodes - 1}"
            elif instance_key(other) != key:
                problem = f"node {rank}'s command line differs from node 0's ({_differs(key, instance_key(other))})"
            seen[rank] = True
    finally:
        srv.close()
    reply = ("error: " + problem if problem else "ok") + "\n"
    for conn in conns:
        try:
            conn.sendall(reply.encode())
        except OSError:
            pass
    return conns, problem


def follow(place: Placement, argv: Sequence[str], timeout: float) -> socket.socket:
    """Rank >= 1: join rank 0 (retrying until ``timeout``); returns the open connection.

    Raises:
        SystemExit: rank 0 is not reachable in time or refused this node.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = socket.create_connection((place.host, place.port), timeout=5.0)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"msopt sim-serve: error: node {place.rank} could not reach node 0 at "
                                 f"{place.host}:{place.port} within {timeout:g}s") from None
            time.sleep(0.2)
    conn.sendall((json.dumps({"rank": place.rank, "argv": list(argv)}) + "\n").encode())
    conn.settimeout(None)
    reply = conn.makefile("r", encoding="utf-8").readline().strip()
    if reply != "ok":
        raise SystemExit(f"msopt sim-serve: error: node 0 refused node {place.rank}: {reply or 'connection closed'}")
    return conn
