"""The capacity stage (:class:`Capacity`): the highest load each top configuration sustains within the SLOs, found
by a :class:`~msopt.run.capacity.CapacitySearch` per configuration, its probes sent through the run loop
(:class:`~msopt.run.stages.Loop`) in rounds or server key by server key; server by server
(:func:`~msopt.run.stages.server_by_server`) each pick's re-measurement too, right before its probes."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from msopt.evaluate.results import EvalRequest, EvaluationResult
from msopt.run.capacity import CapacitySearch, Probe, probe_verdict, sizing
from msopt.run.events import Note, PhaseStarted, TotalChanged
from msopt.run.leaderboard import Leaderboard, values_key
from msopt.run.records import finite
from msopt.run.stages import Loop, launches_left, match_baseline, remeasure_requests, server_by_server


class Capacity:
    """Find the highest load each top configuration sustains within the SLOs.

    Every configuration's bracket/bisect is sequential. With a worker for each server key among
    the configurations, their next probes go to the pool together, round by round (eval ids follow
    on contiguously, in that order). With fewer workers than server keys (:class:`_ServerLanes`), each
    worker takes one server key's configurations at a time and runs their probes back to back on the
    server it keeps, the keys the pool already keeps first, so a server starts at most once in the
    stage; a probe's eval id is then ``first + rank × max_probes + probe index``, whatever order the
    probes ran in.

    Server by server (:func:`~msopt.run.stages.server_by_server`: no launch budget, fewer workers than
    server keys among the picks), the refine stage leaves the picks to this one, which sends each key's
    re-measurements (the baseline's beside them too) before its probes, on the same worker: the server a
    re-measurement leaves warm serves its configuration's probes. A probe's eval id is then ``first + pick
    × max_probes + probe index``, ``first`` following the re-measurements' ids; the baseline is measured as
    often as the recommendation last.

    A probe's resume key is (``"capacity"``, slot, probe index), the slot being the refine iteration of its
    configuration's first re-measurement (its place among the picks without a launch budget), known before
    the ranking by mean fitness is, and the same whichever way the stage runs.
    """

    name = "capacity"

    def run(self, loop: Loop) -> list[dict[str, Any]]:
        """Each configuration's capacity (empty when the stage is off or nothing was re-measured)."""
        opts = loop.capacity_options
        if not opts.enabled:
            return []
        if server_by_server(loop):
            return self._server_by_server(loop)
        configs = loop.leaderboard.capacity_configs()
        if not configs:
            return []
        loop.events.on_event(PhaseStarted("capacity", _phase_text(loop, len(configs))))
        slots = _slots(loop.leaderboard, configs)
        searches = [CapacitySearch(opts, opts.start_for(r.values)) for r in configs]
        keys = [loop.server_key(r.values) for r in configs]
        if len({k for k in keys if k is not None}) > loop.workers:
            left = launches_left(loop)
            n = len(configs)
            items = [_Item(slot, rank, r, search=s, share=None if left is None else left // n + (rank < left % n))
                     for rank, (slot, r, s) in enumerate(zip(slots, configs, searches))]
            _ServerLanes(loop, items, loop.dispatcher.next_id).run()
        else:
            self._rounds(loop, configs, searches, slots)
        loop.events.on_event(TotalChanged(loop.evaluations))
        return _records(loop, configs, searches)

    def _server_by_server(self, loop: Loop) -> list[dict[str, Any]]:
        """Each pick re-measured and then probed, server key by server key; then the baseline as often as the
        recommendation. Says how many server starts the order saved."""
        lb = loop.leaderboard
        picks = lb.picked()
        base = lb.baseline
        beside = base is not None and values_key(base.values) not in {values_key(r.values) for r in picks}
        reqs = remeasure_requests(loop, picks, 0, [base] if beside and base is not None else [])
        loop.events.on_event(PhaseStarted("refine", f"top {len(picks)} with the full workload"
                                          + (", the baseline beside them" if beside else "")
                                          + ", each followed by its capacity probes, server by server"))
        loop.events.on_event(PhaseStarted("capacity", _phase_text(loop, len(picks))))
        items = [_Item(j, j, r, remeasure=req) for j, (r, req) in enumerate(zip(picks, reqs))]
        if beside and base is not None:
            items.append(_Item(len(picks), len(picks), base, remeasure=reqs[-1], probed=False))
        lanes = _ServerLanes(loop, items, reqs[0].eval_id + len(reqs), keep=[base] if base is not None else [])
        lanes.run()
        text = lanes.starts_text()
        if text is not None:
            loop.events.on_event(Note(text))
        match_baseline(loop)
        loop.expect([])
        searches = {values_key(it.config.values): it.search for it in items if it.search is not None}
        configs = [r for r in lb.capacity_configs() if values_key(r.values) in searches]
        loop.events.on_event(TotalChanged(loop.evaluations))
        return _records(loop, configs, [searches[values_key(r.values)] for r in configs])

    def _rounds(self, loop: Loop, configs: Sequence[EvaluationResult], searches: Sequence[CapacitySearch],
                slots: Sequence[int]) -> None:
        """Every configuration's next probes together, round by round."""
        opts = loop.capacity_options
        next_id = loop.dispatcher.next_id
        while True:
            reqs: list[tuple[int, EvalRequest]] = []
            for rank, (r, s) in enumerate(zip(configs, searches)):
                for j, load in enumerate(s.next_loads()):
                    reqs.append((rank, _request(loop, slots[rank], r, s, j, load, next_id)))
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
                    _tell(loop, s, mine, got)
            loop.expect([r for r, s in zip(configs, searches) if s.next_loads()])  # the others' servers stop


def _phase_text(loop: Loop, n: int) -> str:
    opts = loop.capacity_options
    what = "mean" if opts.percentile is None else f"p{opts.percentile}"
    return f"highest {opts.load} within the SLOs ({what} TTFT/TPOT) of {n} configuration" + ("s" if n > 1 else "")


def _slots(board: Leaderboard, configs: Sequence[EvaluationResult]) -> list[int]:
    """Each configuration's slot, its probes' resume key: the refine iteration of its first successful
    re-measurement (its rank when it has none: the best of a run without ``pso_top_k``)."""
    first: dict[str, int] = {}
    for r in board.refined:
        key = values_key(r.values)
        first[key] = min(first.get(key, r.iteration), r.iteration)
    return [first.get(values_key(r.values), rank) for rank, r in enumerate(configs)]


def _records(loop: Loop, configs: Sequence[EvaluationResult],
             searches: Sequence[CapacitySearch]) -> list[dict[str, Any]]:
    """Each configuration's capacity, best mean fitness first (its rank)."""
    opts = loop.capacity_options
    per_replica = loop.config.cluster.trial.devices
    return [{"rank": rank, "eval_id": r.eval_id, "fitness": finite(r.fitness), "values": dict(r.values),
             **s.result(), **sizing(s.result(), opts, per_replica)}
            for rank, (r, s) in enumerate(zip(configs, searches))]


def _request(loop: Loop, slot: int, r: EvaluationResult, s: CapacitySearch, j: int, load: float,
             eval_id: int) -> EvalRequest:
    opts = loop.capacity_options
    value: float | int = int(load) if opts.integer else float(load)
    return EvalRequest(eval_id=eval_id, phase="capacity", particle=slot, iteration=s.used + j,
                       position=tuple(r.position), context=None, num_prompts=loop.full_prompts,
                       load={opts.load: value})


def _tell(loop: Loop, s: CapacitySearch, reqs: Sequence[EvalRequest], got: Mapping[int, EvaluationResult]) -> None:
    opts = loop.capacity_options
    probes = []
    for q in reqs:
        res = got[q.eval_id]
        ok, why = probe_verdict(res.metrics, res.error, loop.config.run.slos, opts)
        probes.append(Probe(q.eval_id, float(q.load[opts.load]), ok, why, dict(res.metrics)))
    s.tell(probes)


@dataclass(eq=False)
class _Item:
    """One configuration of a :class:`_ServerLanes` lane: its re-measurement first (server by server), then
    its capacity probes.

    Attributes:
        slot: its probes' resume key (their ``particle``).
        pos: its block of probe eval ids, ``first + pos × max_probes``.
        config: the configuration (its re-measurement's result once that succeeded).
        remeasure: the re-measurement to send before the probes (None: none left).
        probed: false for the baseline beside the picks, which is only re-measured.
        search: its capacity search (None: not yet, or no probes: the re-measurement failed).
        share: the launches its probes may spend (None: no launch budget).
    """

    slot: int
    pos: int
    config: EvaluationResult
    remeasure: EvalRequest | None = None
    probed: bool = True
    search: CapacitySearch | None = None
    share: int | None = None


@dataclass(eq=False)
class _Lane:
    """One worker's share of the stage: the items of one server key, and the batch of requests (a
    re-measurement, or the probes :meth:`CapacitySearch.next_loads` asked for) it sends one at a time."""

    items: list[_Item]
    batch: list[EvalRequest] = field(default_factory=list)
    got: dict[int, EvaluationResult] = field(default_factory=dict)
    flying: bool = False  # a request of the batch is in flight


class _ServerLanes:
    """Fewer workers than server keys: one lane per worker, each running one server key's items (in
    ``pos`` order) to the end, one request at a time, so the requests of a key run back to back on the
    worker keeping its server; the keys the pool keeps go first, then by ``pos``, a key with nothing to
    probe (the baseline's) last. Under a launch budget each item's probes spend at most its share.

    Args:
        loop: the run loop.
        items: the configurations.
        first: the eval id of the first probe block.
        keep: configurations whose kept servers stay while the lanes run (the baseline, measured again last).
    """

    def __init__(self, loop: Loop, items: Sequence[_Item], first: int,
                 keep: Sequence[EvaluationResult] = ()) -> None:
        self.loop = loop
        self.items = list(items)
        self.first = first
        self.keep = list(keep)
        self.keys = {id(it): loop.server_key(it.config.values) for it in self.items}  # None: no reuse
        groups: dict[str, list[_Item]] = {}
        for it in self.items:
            key = self.keys[id(it)]
            groups.setdefault(key if key is not None else f"pos {it.pos}", []).append(it)
        kept = loop.kept_servers()
        self.warm = kept & set(groups)
        self.waiting = deque(its for _, its in sorted(
            groups.items(), key=lambda g: (g[0] not in kept, not any(i.probed for i in g[1]), g[1][0].pos)))
        self.lanes: list[_Lane] = []
        self.done: set[int] = set()  # ids of the items done
        self.inflight: dict[int, _Lane] = {}
        self.results: list[EvaluationResult] = []  # what the lanes measured, replayed results too
        if any(it.remeasure is not None for it in self.items):
            loop.expect([*(it.config for it in self.items), *self.keep])  # what the picks' servers are kept for

    def run(self) -> None:
        """Run every lane to its end."""
        while True:
            before = len(self.done)
            while True:  # open a lane for every free worker, until each open lane has a request in flight
                while len(self.lanes) < max(1, self.loop.workers) and self.waiting:
                    self.lanes.append(_Lane(list(self.waiting.popleft())))
                over = [lane for lane in self.lanes if not self._advance(lane)]
                if not over:
                    break
                self.lanes = [lane for lane in self.lanes if lane not in over]
            if len(self.done) > before:  # the servers of the items done are no longer needed: they stop
                self.loop.expect([*(it.config for it in self.items if id(it) not in self.done), *self.keep])
            if not self.lanes:
                return
            for r in self.loop.collect():
                lane = self.inflight.pop(r.eval_id, None)
                if lane is not None:
                    lane.flying = False
                    self._got(lane, r)

    def _advance(self, lane: _Lane) -> bool:
        """Send the lane's next request (taking what replays answer at once); False when its items are done."""
        while not lane.flying:
            if not lane.batch and not self._next_batch(lane):
                return False
            req = lane.batch[len(lane.got)]
            r = self.loop.dispatch(req)
            if r is None:
                self.inflight[req.eval_id] = lane
                lane.flying = True
            else:  # replayed (--resume): go on with this lane
                self._got(lane, r)
        return True

    def _next_batch(self, lane: _Lane) -> bool:
        """The lane's next batch, its items done popped; False when none is left."""
        while lane.items:
            it = lane.items[0]
            if it.remeasure is not None:
                lane.batch, it.remeasure = [it.remeasure], None
            elif it.search is None or not self._probes(it, lane):
                self.done.add(id(lane.items.pop(0)))  # its search is over (or its share spent, or none)
                continue
            lane.got = {}
            self.loop.events.on_event(TotalChanged(self.loop.evaluations + self._left()))
            return True
        return False

    def _probes(self, it: _Item, lane: _Lane) -> bool:
        """Put the item's next probes in the lane's batch; False when its search is over or its share spent."""
        assert it.search is not None
        loads = it.search.next_loads()
        if not loads or (it.share is not None and len(loads) > it.share):
            return False
        if it.share is not None:
            it.share -= len(loads)
        base = self.first + it.pos * self.loop.capacity_options.max_probes + it.search.used
        lane.batch = [_request(self.loop, it.slot, it.config, it.search, j, load, base + j)
                      for j, load in enumerate(loads)]
        return True

    def _left(self) -> int:
        """Evaluations the items not done may still ask for."""
        most = self.loop.capacity_options.max_probes
        return sum((it.remeasure is not None) + (most - it.search.used if it.search is not None
                                                 else most if it.probed and it.remeasure is not None else 0)
                   for it in self.items if id(it) not in self.done)

    def _got(self, lane: _Lane, r: EvaluationResult) -> None:
        """A result of the lane's batch; once the batch is whole, tell its search (or start it after a
        successful re-measurement)."""
        lane.got[r.eval_id] = r
        self.results.append(r)
        if len(lane.got) < len(lane.batch):
            return
        it = lane.items[0]
        if lane.batch[0].phase == "capacity":
            assert it.search is not None
            _tell(self.loop, it.search, lane.batch, lane.got)
        elif it.probed and not r.failed:
            opts = self.loop.capacity_options
            it.config, it.search = r, CapacitySearch(opts, opts.start_for(r.values))
        self.loop.checkpoint("capacity" if lane.batch[0].phase == "capacity" else "refine")
        lane.batch = []

    def starts_text(self) -> str | None:
        """The server starts the lanes made, against the least that re-measuring every configuration before
        the first probe needs: one per re-measured key the pool did not keep, and one per probed key past one
        a worker (None: no result says whether its server started)."""
        servers = [r.server for r in self.results if not r.reused and r.server]
        if not servers:
            return None
        started = sum(1 for s in servers if s.get("start") == "started")
        remeasured = {k for k in self.keys.values() if k is not None}
        probed = {k for it in self.items if it.search is not None and (k := self.keys[id(it)]) is not None}
        least = len(remeasured - self.warm) + max(0, len(probed) - max(1, self.loop.workers))
        return (f"re-measurements and capacity probes server by server: {started} server start"
                + ("s" if started != 1 else "") + f", {max(0, least - started)} fewer than the {least} at least "
                "that re-measuring every pick before the first probe needs")
