"""Transport between the stages and the pool: what is in flight, duplicates, and resume.

A request is either replayed (``--resume``: the journal's result stands in for the evaluation it
records, so the seeded swarm goes through exactly the same states), reused (``duplicate_policy =
"reuse"``: a search of a configuration already measured, or a follower of one in flight, gets
that measurement again at no cost), or submitted to the :class:`~msopt.run.pool.EvaluatorPool`.
The dispatcher returns every finished result as a :class:`~msopt.run.events.Finished` event
(replayed or not, launched or not); the run loop records it (journal first) before a stage sees
it. It never calls back into the loop: what it has to say on the way (queued, running, a fault's
retry) goes to the run's callbacks as events.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from msopt.errors import DecodeError, FaultError
from msopt.evaluate.results import RETRY, EvalRequest, EvaluationResult, failed_result
from msopt.run.events import Finished, Note, Queued, RunCallback, Running
from msopt.run.leaderboard import values_key
from msopt.run.pool import EvaluatorPool
from msopt.space import SearchSpace

#: A request's resume key: (phase, particle, iteration).
RequestKey = tuple[str, "int | None", int]

#: ``refusal(values)``: the engine's start-up refusal of decoded values, or None.
Refusal = Callable[[Mapping[str, Any]], "str | None"]

#: ``server_key(values)``: the key of the server decoded values start (None: no reuse).
ServerKey = Callable[[Mapping[str, Any]], "str | None"]

#: ``wanted()``: the server keys the rest of the run may still use (see :mod:`msopt.run.servers`).
Wanted = Callable[[], "set[str]"]

#: ``predict(values, position)``: the prior's prediction record for decoded values, or None.
Predict = Callable[[Mapping[str, Any], np.ndarray], "dict[str, Any] | None"]


def was_launched(r: EvaluationResult) -> bool:
    """Whether ``r`` cost a launch (was submitted to the pool): not a duplicate's reuse and not a
    candidate the start-up rules refused before dispatch (``refused`` with no attempt)."""
    return not r.reused and not (r.refused and r.attempts == 0)


def request_key(phase: str, particle: int | None, iteration: int) -> RequestKey:
    """The key under which a request's result is journaled and found again on resume."""
    return (phase, particle, iteration)


@dataclass
class Collected:
    """What one :meth:`Dispatcher.collect` gathered.

    Attributes:
        events: the results that finished (followers of a duplicate included) and the notes of
            faults retried, in the order they came.
        fault: the error that stops the run (a fault past its retries), raised by the loop once
            the results are recorded: nothing measured is lost.
    """

    events: list[Finished | Note] = field(default_factory=list)
    fault: FaultError | None = None

    @property
    def finished(self) -> list[Finished]:
        """The results that finished, in order."""
        return [e for e in self.events if isinstance(e, Finished)]


class Dispatcher:
    """Replays, reuses or submits requests and collects their results.

    Args:
        pool: where evaluations run.
        space: decodes a request's position, to recognise duplicates before they run.
        reuse: ``duplicate_policy = "reuse"``.
        previous: results already journaled (``--resume``): replayed, not re-run.
        events: the run's callbacks: :class:`~msopt.run.events.Queued`,
            :class:`~msopt.run.events.Running` and :class:`~msopt.run.events.Note` go there.
        refusal: the engine's start-up rules (see :data:`Refusal`): a refused candidate is
            finished at once as refused (fitness ``inf``), never submitted and not counted in
            :attr:`launched`; the same configuration asked again gets that result back (reused).
        predict: the prior's prediction (see :data:`Predict`), journaled with the result.
        server_key: the server key of decoded values (see :data:`ServerKey`); a submitted request
            carries it, so the pool routes it to the worker keeping that server.
        wanted: the server keys the run may still use (see :data:`Wanted`): after results arrive
            (and on :meth:`retain`) a pool that keeps servers stops every other one its idle workers keep.
    """

    def __init__(self, pool: EvaluatorPool, space: SearchSpace, *, reuse: bool,
                 previous: Sequence[EvaluationResult], events: RunCallback,
                 refusal: Refusal | None = None, predict: Predict | None = None,
                 server_key: ServerKey | None = None, wanted: Wanted | None = None) -> None:
        self.pool = pool
        self.space = space
        self.reuse = reuse
        self._events = events
        self.previous: dict[RequestKey, EvaluationResult] = {
            request_key(r.phase, r.particle, r.iteration): r for r in previous}
        self.replay_order: list[EvaluationResult] = list(previous)  # async search replays in this order
        self.cache: dict[str, EvaluationResult] = {}     # duplicate_policy = "reuse" only
        self.leaders: dict[str, int] = {}                # values key -> eval_id in flight
        self.followers: dict[int, list[tuple[EvalRequest, np.ndarray]]] = {}
        self.inflight: dict[int, EvalRequest] = {}
        self.decoded: dict[int, dict[str, Any]] = {}     # eval_id -> the driver's own decode of it
        self.faults: dict[int, int] = {}                 # eval_id -> faults met (never journaled)
        self.launched = 0
        self.replayed_launches = 0  # journaled results (--resume) that cost a launch in the run resumed
        self.next_id = 0  # one past the highest eval id asked for so far (replayed ones too)
        self.refused = 0
        self._refusal = refusal
        self._predict = predict
        self._server_key = server_key
        self._wanted = wanted
        self.refusals: dict[str, EvaluationResult] = {}  # values key -> the refused result

    def _finished(self, r: EvaluationResult, replayed: bool = False) -> Finished:
        """One finished result, as the loop records it; a measurement joins the duplicate cache."""
        if self.reuse and r.values and not r.reused:
            self.cache.setdefault(values_key(r.values), r)
        return Finished(r, replayed=replayed, launched=was_launched(r))

    def take_replay_order(self) -> list[EvaluationResult]:
        """The journaled results in the order they were told (the async search replays them in
        it), once: the list is emptied."""
        out, self.replay_order = self.replay_order, []
        return out

    def replay(self, prev: EvaluationResult, eval_id: int) -> Finished:
        """A journaled result again as evaluation ``eval_id`` (replayed: not journaled twice)."""
        self.previous.pop(request_key(prev.phase, prev.particle, prev.iteration), None)
        self.next_id = max(self.next_id, eval_id + 1)
        self.replayed_launches += was_launched(prev)
        return self._finished(replace(prev, eval_id=eval_id), replayed=True)

    def _pre_decode(self, req: EvalRequest) -> tuple[str | None, np.ndarray, dict[str, Any]]:
        try:
            d = self.space.decode(np.asarray(req.position, dtype=float), req.context)
        except DecodeError as exc:
            return None, np.asarray(req.position, dtype=float), exc.values
        return values_key(d.values), d.position, d.values

    def dispatch(self, req: EvalRequest) -> Finished | None:
        """Replay, reuse or submit one request; return its result when known at once."""
        prev = self.previous.get(request_key(req.phase, req.particle, req.iteration))
        if prev is not None:
            return self.replay(prev, req.eval_id)
        self.next_id = max(self.next_id, req.eval_id + 1)
        key, position, values = self._pre_decode(req)
        if self._predict is not None and key is not None and req.predicted is None:
            req = replace(req, predicted=self._predict(values, position))
        if key is not None and self._refusal is not None:
            refused = self._refused(req, key, position, values)
            if refused is not None:
                return self._finished(refused)
        if self.reuse and key is not None and req.phase == "search":
            done = self.cache.get(key)
            if done is not None:
                return self._finished(self._reused(done, req, position))
            if key in self.leaders:
                self.followers.setdefault(self.leaders[key], []).append((req, position))
                self._events.on_event(Queued(req.eval_id, req.phase, req.particle, req.iteration, values))
                return None
            self.leaders[key] = req.eval_id
        if key is not None and self._server_key is not None and req.server_key is None:
            req = replace(req, server_key=self._server_key(values))
        self.decoded[req.eval_id] = values
        self.inflight[req.eval_id] = req
        self.pool.submit(req)
        self.launched += 1
        self._events.on_event(Queued(req.eval_id, req.phase, req.particle, req.iteration, values, dict(req.load)))
        return None

    def _refused(self, req: EvalRequest, key: str, position: np.ndarray,
                 values: dict[str, Any]) -> EvaluationResult | None:
        """The refused result of a candidate that breaks a start-up rule, or None."""
        done = self.refusals.get(key)
        if done is not None:
            return self._reused(done, req, position)
        assert self._refusal is not None
        message = self._refusal(values)
        if message is None:
            return None
        r = failed_result(req, message, position=position.tolist(), values=values, attempts=0, refused=True,
                          predicted=dict(req.predicted) if req.predicted is not None else None)
        self.refusals[key] = r
        self.refused += 1
        return r

    @staticmethod
    def _reused(done: EvaluationResult, req: EvalRequest, position: np.ndarray) -> EvaluationResult:
        now = time.time()
        return replace(done, eval_id=req.eval_id, phase=req.phase, particle=req.particle,
                       iteration=req.iteration, position_in=[float(x) for x in req.position],
                       position=position.tolist(), reused=True, attempts=0, devices=[], actor=None, server=None,
                       started=now, finished=now, num_prompts=req.num_prompts,
                       predicted=dict(req.predicted) if req.predicted is not None else done.predicted)

    def collect(self, timeout: float = 0.5) -> Collected:
        """Wait for finished evaluations (and their followers)."""
        for eval_id, devices in self.pool.running():  # drained even without a display: pools queue them
            req = self.inflight.get(eval_id)
            if req is not None:
                self._events.on_event(Running(eval_id, req.phase, req.particle, req.iteration, devices))
        out: list[Finished | Note] = []
        fault: FaultError | None = None
        for r in self.pool.wait(timeout):
            if r.fault is not None and r.eval_id in self.inflight:
                fault = fault or self._retry_fault(r, out)
                continue
            req = self.inflight.pop(r.eval_id, None)
            if req is None:
                continue  # a result for an evaluation already failed (timeout) or resubmitted
            values = self.decoded.pop(r.eval_id, None)
            if not r.values and values:  # the actor died or timed out before it could say
                r.values = dict(values)
            if r.predicted is None and req.predicted is not None:
                r.predicted = dict(req.predicted)
            out.append(self._finished(r))
            for key, leader in list(self.leaders.items()):
                if leader == r.eval_id:
                    del self.leaders[key]
            for freq, fpos in self.followers.pop(r.eval_id, []):
                out.append(self._finished(self._reused(r, freq, fpos)))
        # a fault is raised by the loop once the others of this batch are recorded: nothing measured is lost
        return Collected(out, fault)

    def retain(self) -> None:
        """Tell the pool which kept servers the run still needs (``wanted`` and the requests in
        flight); it stops the others its idle workers keep. Nothing without ``wanted`` or a pool
        that keeps servers (:class:`msopt.run.pool.RetainingPool`)."""
        retain = getattr(self.pool, "retain", None)
        if self._wanted is None or retain is None:
            return
        retain(self._wanted() | {q.server_key for q in self.inflight.values() if q.server_key is not None})

    def _retry_fault(self, r: EvaluationResult, notes: list[Finished | Note]) -> FaultError | None:
        """Resubmit an evaluation that met a fault of the machinery while :data:`RETRY` allows it
        another launch (its attempts so far count, whatever failed them); past that, the error that
        stops the run. A fault is never finished (journaled)."""
        n = max(r.attempts, self.inflight[r.eval_id].attempts_used + 1)
        self.faults[r.eval_id] = n
        req = replace(self.inflight[r.eval_id], attempts_used=n)
        where = f"evaluation {r.eval_id} ({r.phase}" + (f", particle {r.particle}" if r.particle is not None else "")
        if RETRY.again(n):
            notes.append(Note(f"{where}): a fault, not a result ({r.fault}); "
                              f"running it again ({n + 1} of {RETRY.attempts})"))
            self.inflight[r.eval_id] = req
            self.pool.submit(req)
            return None
        return FaultError(f"{where}) stopped by a fault that is not the configuration's ({n} attempts): {r.fault}; "
                          "it was not journaled")

    @property
    def spent(self) -> int:
        """Launches of the whole run, what a launch budget counts: the ones submitted here and the
        ones the replayed journal records (a resumed run spends only what is left)."""
        return self.launched + self.replayed_launches

    @property
    def outstanding(self) -> int:
        """Evaluations submitted or waiting on a duplicate, not yet finished."""
        return len(self.inflight) + sum(len(v) for v in self.followers.values())
