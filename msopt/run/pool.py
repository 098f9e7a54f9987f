"""Where evaluations run: the :class:`EvaluatorPool` protocol the driver talks to, and
:class:`InProcessPool`, its implementation with threads of the driver process (tests, ``--no-ray``).
``actors.pool.RayPool`` implements the same protocol with Ray actors.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from msopt.config import Config
from msopt.evaluate import EvalRequest, EvaluationResult, Evaluator, Parsed
from msopt.evaluate.results import describe_fault, fault_result
from msopt.launch.process import ProcessRegistry


class LaunchCosts:
    """What a launch costs in this run, from the results a pool has seen: the mean seconds of a
    server start (``server.start_s`` as journaled: measured on the real path, the simulator's
    modelled start-up in a simulated run) and of a measurement (the benchmark's ``duration``, else
    the evaluation's time less its start: simulated seconds in a simulated run, as the starts)."""

    def __init__(self) -> None:
        self._start = [0.0, 0]
        self._measure = [0.0, 0]

    def add(self, result: EvaluationResult) -> None:
        """Count one finished evaluation (one that launched nothing, or failed, is skipped)."""
        server = result.server or {}
        if result.reused or not server or result.failed:
            return
        start = server.get("start_s")
        start = float(start) if isinstance(start, (int, float)) and math.isfinite(start) else 0.0
        if server.get("start") == "started":
            self._start[0] += start
            self._start[1] += 1
        duration = result.metrics.get("duration")
        if not (isinstance(duration, (int, float)) and math.isfinite(duration)):
            duration = result.finished - result.started - start if result.finished > result.started else None
        if duration is not None and duration >= 0:
            self._measure[0] += float(duration)
            self._measure[1] += 1

    @property
    def start_s(self) -> float | None:
        """Mean seconds of a server start (None: none seen yet)."""
        return self._start[0] / self._start[1] if self._start[1] else None

    @property
    def measure_s(self) -> float | None:
        """Mean seconds of a measurement (None: none seen yet)."""
        return self._measure[0] / self._measure[1] if self._measure[1] else None

    def wait_for_busy(self) -> bool:
        """Whether a request should wait for the busy worker running its server rather than start it
        on an idle worker that keeps another one: yes unless a measurement takes longer than two
        starts (the one waiting saves, and the other kept server's, stopped for it and needed again),
        and yes while either cost is unknown."""
        start, measure = self.start_s, self.measure_s
        return start is None or measure is None or measure <= 2 * start


def route(pending: Sequence[EvalRequest], idle: Sequence[str | None],
          busy: Collection[str] = (), costs: LaunchCosts | None = None) -> list[tuple[int, int]]:
    """Which pending request goes to which idle worker, as ``(request index, worker index)``.

    Affinity first: a request whose ``server_key`` is the key of the server an idle worker keeps
    goes to that worker. A request whose server a busy worker is running (``busy``: their
    requests' keys) waits for that worker unless an idle worker keeps nothing, since a start is
    what reuse saves, or unless ``costs`` says a start costs less than the wait
    (:meth:`LaunchCosts.wait_for_busy`). The other requests, in order, go to the idle workers that
    keep no server, then to the rest (whose kept server then stops). ``idle`` holds each idle
    worker's kept key.
    """
    wait = costs is None or costs.wait_for_busy()
    free = list(range(len(idle)))
    out: list[tuple[int, int]] = []
    for i, req in enumerate(pending):
        w = next((w for w in free if req.server_key is not None and idle[w] == req.server_key), None)
        if w is not None:
            out.append((i, w))
            free.remove(w)
    taken = {i for i, _ in out}
    free.sort(key=lambda w: idle[w] is not None)  # a worker keeping nothing costs no kept server
    for i, req in enumerate(pending):
        if not free:
            break
        if i in taken:
            continue
        if wait and req.server_key is not None and req.server_key in busy and idle[free[0]] is not None:
            continue  # its server is running on a busy worker: wait for it
        out.append((i, free.pop(0)))
    return out


#: A worker's inbox item that stops the server it keeps (:meth:`InProcessPool.retain`).
_STOP = "stop"


def unneeded(kept: Sequence[str | None], keep: Collection[str],
             pending: Sequence[EvalRequest] = ()) -> list[int]:
    """The indices of the idle workers whose kept server (``kept``: each one's key, None: none) is
    needed neither by ``keep`` (what the run may still measure) nor by a ``pending`` request."""
    need = set(keep) | {r.server_key for r in pending if r.server_key is not None}
    return [w for w, key in enumerate(kept) if key is not None and key not in need]


class Evaluating(Protocol):
    """What a pool's worker runs: :class:`Evaluator`, or a stand-in (tests, benchmarks)."""

    def evaluate(self, req: EvalRequest) -> EvaluationResult:
        """Evaluate one request; failures are results, not exceptions."""
        ...


class EvaluatorPool(Protocol):
    """Where evaluations run: a Ray actor pool or an in-process one."""

    @property
    def size(self) -> int:
        """How many evaluations run at once."""

    def submit(self, req: EvalRequest) -> None:
        """Queue one evaluation."""

    def wait(self, timeout: float | None = None) -> list[EvaluationResult]:
        """Return the evaluations finished since the last call (empty on timeout)."""

    def running(self) -> list[tuple[int, list[str]]]:
        """(eval_id, devices) of the evaluations started since the last call."""

    def close(self) -> None:
        """Stop every worker and everything they started."""


class RetainingPool(EvaluatorPool, Protocol):
    """A pool whose workers keep servers between evaluations (issue 26) and can be told which ones
    the run still needs; both pools here are one (the dispatcher calls :meth:`retain` when a pool has it)."""

    def retain(self, keys: Collection[str]) -> None:
        """Stop the servers idle workers keep whose key is not in ``keys`` and no queued request has."""

    def kept_keys(self) -> set[str]:
        """The server keys the idle workers keep (the capacity stage starts with their configurations)."""


class InProcessPool:
    """Threads in this process, one :class:`Evaluator` each (tests, ``--no-ray``); a request goes
    to the idle worker keeping its server when there is one (:func:`route`).

    Args:
        config: the effective config.
        size: worker threads.
        run_dir: the run directory for logs.
        evaluator_factory: builds the evaluator of worker ``k`` (default: :class:`Evaluator`).
        parsed: the sections the run parsed once, for the default evaluators (None: each parses its own).
    """

    def __init__(self, config: Config, *, size: int = 1, run_dir: str | None = None,
                 evaluator_factory: Callable[[int], Evaluating] | None = None, parsed: Parsed | None = None) -> None:
        self._size = max(1, int(size))
        self.processes = ProcessRegistry()
        factory = evaluator_factory or (
            lambda k: Evaluator(config, run_dir=run_dir, actor=f"worker-{k}", devices=[],
                                processes=self.processes, parsed=parsed))
        self._evaluators: list[Evaluating] = [factory(k) for k in range(self._size)]
        self._lock = threading.Lock()
        self._pending: list[EvalRequest] = []
        self._idle: list[int] = list(range(self._size))
        self._running: dict[int, str | None] = {}  # busy worker -> the server key of its request
        self._inbox: list[queue.Queue[EvalRequest | str | None]] = [queue.Queue() for _ in range(self._size)]
        self._results: queue.Queue[EvaluationResult] = queue.Queue()
        self._started: queue.Queue[tuple[int, list[str]]] = queue.Queue()
        self.stopped = 0  # kept servers told to stop because the run no longer needed them (retain)
        self.costs = LaunchCosts()
        self._threads = [threading.Thread(target=self._work, args=(k,), daemon=True)
                         for k in range(self._size)]
        for t in self._threads:
            t.start()

    @property
    def size(self) -> int:
        return self._size

    def _route(self) -> None:
        """Hand pending requests to idle workers, by server key first (:func:`route`); under the lock."""
        keys = [getattr(self._evaluators[w], "kept_key", None) for w in self._idle]
        busy = {k for w, k in self._running.items() if k is not None}
        pairs = route(self._pending, keys, busy, self.costs)
        for i, w in pairs:
            self._running[self._idle[w]] = self._pending[i].server_key
            self._inbox[self._idle[w]].put(self._pending[i])
        for i in sorted((i for i, _ in pairs), reverse=True):
            del self._pending[i]
        for w in sorted((w for _, w in pairs), reverse=True):
            del self._idle[w]

    def _work(self, k: int) -> None:
        evaluator = self._evaluators[k]
        while True:
            req = self._inbox[k].get()
            if req is None:
                close = getattr(evaluator, "close", None)
                if close is not None:
                    close()  # the server it kept, from the thread that started it
                return
            if isinstance(req, str):  # _STOP
                close = getattr(evaluator, "close", None)
                if close is not None:
                    close()
                with self._lock:
                    self._running.pop(k, None)
                    self._idle.append(k)
                    self._route()
                continue
            devices = list(getattr(evaluator, "devices", []))
            self._started.put((req.eval_id, devices))
            try:
                result = evaluator.evaluate(req)
            except Exception as exc:  # noqa: BLE001  a worker that died would leave the driver waiting forever
                result = fault_result(req, describe_fault(exc), devices=devices,
                                      actor=getattr(evaluator, "actor", None))
            with self._lock:
                self.costs.add(result)
                self._running.pop(k, None)
                self._idle.append(k)
                # not routed here but when the driver has seen the result: what it makes the driver
                # submit (a capacity probe's next one) then comes first to the worker keeping its server
                self._results.put(result)

    def submit(self, req: EvalRequest) -> None:
        # routed when the driver waits (or a worker frees), so that a batch (a capacity round,
        # the re-measurements) is routed as a whole and each request finds its kept server
        with self._lock:
            self._pending.append(req)

    def kept_keys(self) -> set[str]:
        """The server keys the idle workers keep."""
        with self._lock:
            return {k for w in self._idle if (k := getattr(self._evaluators[w], "kept_key", None)) is not None}

    def retain(self, keys: Collection[str]) -> None:
        """Stop the servers idle workers keep that neither ``keys`` (what the run may still measure)
        nor a queued request needs; each worker stops its own, in its own thread, and is busy until
        it has (with the server's grace)."""
        with self._lock:
            kept = [getattr(self._evaluators[w], "kept_key", None) for w in self._idle]
            for i in sorted(unneeded(kept, keys, self._pending), reverse=True):
                w = self._idle.pop(i)
                self._running[w] = None
                self._inbox[w].put(_STOP)
                self.stopped += 1

    def _route_now(self) -> None:
        with self._lock:
            if self._results.empty():  # else the driver sees those results first (see _work)
                self._route()

    def wait(self, timeout: float | None = None) -> list[EvaluationResult]:
        self._route_now()
        out: list[EvaluationResult] = []
        try:
            out.append(self._results.get(timeout=timeout))
        except queue.Empty:
            return out
        while True:
            try:
                out.append(self._results.get_nowait())
            except queue.Empty:
                return out

    def running(self) -> list[tuple[int, list[str]]]:
        out = []
        while True:
            try:
                out.append(self._started.get_nowait())
            except queue.Empty:
                return out

    def close(self, join_timeout: float = 30.0) -> None:
        """Stop the servers the workers are running or keep (each with its grace) and refuse new ones, then
        wait up to ``join_timeout`` s for the workers to return; their results are dropped (the
        driver has stopped listening, and a stopped server's failure is not the configuration's).
        The threads are daemons, so a worker stuck elsewhere never keeps the process alive."""
        with self._lock:
            self._pending.clear()
        for inbox in self._inbox:
            inbox.put(None)
        self.processes.close()
        deadline = time.monotonic() + join_timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
