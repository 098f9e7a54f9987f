"""The capacity stage (:class:`Capacity`): the highest load each top configuration sustains within the SLOs, found
by a :class:`~msopt.run.capacity.CapacitySearch` per configuration, its probes sent through the run loop
(:class:`~msopt.run.stages.Loop`) in rounds or server key by server key."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from msopt.evaluate.results import EvalRequest, EvaluationResult
from msopt.run.capacity import CapacitySearch, Probe, probe_verdict, sizing
from msopt.run.events import PhaseStarted, TotalChanged
from msopt.run.records import finite
from msopt.run.stages import Loop, launches_left


class Capacity:
    """Find the highest load each top configuration sustains within the SLOs.

    Every configuration's bracket/bisect is sequential. With a worker for each server key among
    the configurations, their next probes go to the pool together, round by round (eval ids follow
    on contiguously, in that order). With fewer workers than server keys (:meth:`_by_server`), each
    worker takes one server key's configurations at a time and runs their probes back to back on the
    server it keeps, the keys the pool already keeps first, so a server starts at most once in the
    stage; a probe's eval id is then ``first + rank × max_probes + probe index``, a function of its
    resume key whatever the order the probes ran in. A probe's resume key is (``"capacity"``,
    configuration rank, probe index).
    """

    name = "capacity"

    def run(self, loop: Loop) -> list[dict[str, Any]]:
        """Each configuration's capacity (empty when the stage is off or nothing was re-measured)."""
        opts = loop.capacity_options
        if not opts.enabled:
            return []
        configs = loop.leaderboard.capacity_configs()
        if not configs:
            return []
        what = "mean" if opts.percentile is None else f"p{opts.percentile}"
        loop.events.on_event(PhaseStarted(
            "capacity", f"highest {opts.load} within the SLOs ({what} TTFT/TPOT) of {len(configs)} configuration"
                        + ("s" if len(configs) > 1 else "")))
        searches = [CapacitySearch(opts, opts.start_for(r.values)) for r in configs]
        keys = [loop.server_key(r.values) for r in configs]
        if len({k for k in keys if k is not None}) > loop.workers:
            self._by_server(loop, configs, searches, keys)
        else:
            self._rounds(loop, configs, searches)
        loop.events.on_event(TotalChanged(loop.evaluations))
        per_replica = loop.config.cluster.trial.devices
        return [{"rank": rank, "eval_id": r.eval_id, "fitness": finite(r.fitness), "values": dict(r.values),
                 **s.result(), **sizing(s.result(), opts, per_replica)}
                for rank, (r, s) in enumerate(zip(configs, searches))]

    @staticmethod
    def _request(loop: Loop, rank: int, r: EvaluationResult, s: CapacitySearch, j: int, load: float,
                 eval_id: int) -> EvalRequest:
        opts = loop.capacity_options
        value: float | int = int(load) if opts.integer else float(load)
        return EvalRequest(eval_id=eval_id, phase="capacity", particle=rank, iteration=s.used + j,
                           position=tuple(r.position), context=None, num_prompts=loop.full_prompts,
                           load={opts.load: value})

    @staticmethod
    def _tell(loop: Loop, s: CapacitySearch, reqs: Sequence[EvalRequest], got: Mapping[int, EvaluationResult]) -> None:
        opts = loop.capacity_options
        probes = []
        for q in reqs:
            res = got[q.eval_id]
            ok, why = probe_verdict(res.metrics, res.error, loop.config.run.slos, opts)
            probes.append(Probe(q.eval_id, float(q.load[opts.load]), ok, why, dict(res.metrics)))
        s.tell(probes)

    def _rounds(self, loop: Loop, configs: Sequence[EvaluationResult], searches: Sequence[CapacitySearch]) -> None:
        """Every configuration's next probes together, round by round."""
        opts = loop.capacity_options
        next_id = loop.dispatcher.next_id
        while True:
            reqs: list[tuple[int, EvalRequest]] = []
            for rank, (r, s) in enumerate(zip(configs, searches)):
                for j, load in enumerate(s.next_loads()):
                    reqs.append((rank, self._request(loop, rank, r, s, j, load, next_id)))
                    next_id += 1
            left = launches_left(loop)
            if not reqs or (left is not None and len(reqs) > left):  # a round the budget cannot pay: stop
                break
            left = sum(opts.max_probes - s.used for s in searches if s.next_loads())
            loop.events.on_event(TotalChanged(loop.evaluations + left))
            got = loop.evaluate([q for _, q in reqs], checkpoint="capacity")
            for rank, s in enumerate(searches):
                mine = [q for k, q in reqs if k == rank]
                if mine:
                    self._tell(loop, s, mine, got)
            loop.expect([r for r, s in zip(configs, searches) if s.next_loads()])  # the others' servers stop

    def _by_server(self, loop: Loop, configs: Sequence[EvaluationResult], searches: Sequence[CapacitySearch],
                   keys: Sequence[str | None]) -> None:
        """Fewer workers than server keys: one lane per worker, each running one server key's
        configurations (rank by rank) to the end of their searches, one probe at a time, so the
        probes of a key run back to back on the worker keeping its server; the keys the pool keeps
        go first, the rest by rank. Under a launch budget each configuration may spend an equal
        share of the launches left (the better ranks get the remainder), whatever order they run in."""
        opts = loop.capacity_options
        first = loop.dispatcher.next_id
        left = launches_left(loop)
        n = len(configs)
        share: list[int | None] = [None if left is None else left // n + (rank < left % n) for rank in range(n)]
        groups: dict[str, list[int]] = {}
        for rank, key in enumerate(keys):
            groups.setdefault(key if key is not None else f"rank {rank}", []).append(rank)
        kept = loop.kept_servers()
        waiting = deque(sorted(groups.values(), key=lambda ranks: (keys[ranks[0]] not in kept, ranks[0])))
        lanes: list[_Lane] = []
        done: set[int] = set()
        inflight: dict[int, _Lane] = {}

        def advance(lane: _Lane) -> bool:
            """Send the lane's next probe (telling its search what replays answer at once); False
            when its configurations are all done."""
            while not lane.flying:
                if not lane.batch:
                    rank = lane.ranks[0]
                    s = searches[rank]
                    loads = s.next_loads()
                    budget = share[rank]
                    if not loads or (budget is not None and len(loads) > budget):
                        done.add(lane.ranks.pop(0))  # its search is over (or its share is spent)
                        if not lane.ranks:
                            return False
                        continue
                    if budget is not None:
                        share[rank] = budget - len(loads)
                    lane.batch = [self._request(loop, rank, configs[rank], s, j, load,
                                                first + rank * opts.max_probes + s.used + j)
                                  for j, load in enumerate(loads)]
                    lane.got = {}
                    loop.events.on_event(TotalChanged(loop.evaluations + sum(
                        opts.max_probes - x.used for k, x in enumerate(searches) if k not in done)))
                req = lane.batch[len(lane.got)]
                r = loop.dispatch(req)
                if r is None:
                    inflight[req.eval_id] = lane
                    lane.flying = True
                else:  # replayed (--resume): go on with this lane
                    lane.got[r.eval_id] = r
                    self._told(loop, lane, searches)
            return True

        while True:
            before = len(done)
            while True:  # open a lane for every free worker, until each open lane has a probe in flight
                while len(lanes) < max(1, loop.workers) and waiting:
                    lanes.append(_Lane(list(waiting.popleft())))
                over = [lane for lane in lanes if not advance(lane)]
                if not over:
                    break
                lanes = [lane for lane in lanes if lane not in over]
            if len(done) > before:  # the servers of the configurations done are no longer needed: they stop
                loop.expect([configs[k] for k in range(n) if k not in done])
            if not lanes:
                return
            for r in loop.collect():
                lane = inflight.pop(r.eval_id, None)
                if lane is not None:
                    lane.flying = False
                    lane.got[r.eval_id] = r
                    self._told(loop, lane, searches)

    def _told(self, loop: Loop, lane: _Lane, searches: Sequence[CapacitySearch]) -> None:
        """Tell the lane's search its batch once every probe of it has a result."""
        if lane.batch and len(lane.got) == len(lane.batch):
            self._tell(loop, searches[lane.ranks[0]], lane.batch, lane.got)
            lane.batch = []
            loop.checkpoint("capacity")


@dataclass(eq=False)
class _Lane:
    """One worker's share of the capacity stage: the ranks of one server key, and the batch of probes
    (what :meth:`CapacitySearch.next_loads` asked for) it sends one at a time."""

    ranks: list[int]
    batch: list[EvalRequest] = field(default_factory=list)
    got: dict[int, EvaluationResult] = field(default_factory=dict)
    flying: bool = False  # a probe of the batch is in flight
