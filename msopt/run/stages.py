"""The stages of a run, in order, each an object the run loop runs: :class:`Baseline`,
:class:`SyncSearch` or :class:`AsyncSearch`, :class:`Refine` (the re-measurement of the
``pso_top_k`` best) and :class:`Capacity`.

A stage decides what to evaluate and when; the loop (:class:`~msopt.run.driver.Driver`, seen here
as a :class:`Loop`) owns the mechanics: it asks the searcher, dispatches the requests, records
every result (journal first), tells the searcher, refits the prior and checkpoints. A stage tells
the run's callbacks what it begins with typed events (:mod:`msopt.run.events`) and reads the
leaderboard; it never journals, checkpoints or learns itself.

Eval ids. The baseline is 0; a search trial's id is a function of its lane and count,
``1 + count × n + lane`` (:func:`eval_id`), because async lanes are dispatched in the order their
results happen to arrive, and the simulator seeds each evaluation by its id: an id that followed
the dispatch order would make a simulated async run, and a resumed one, depend on timing. The ids
after the search (re-measurements, capacity probes) follow on contiguously from the highest id the
search asked for (:attr:`Dispatcher.next_id`), so a budget that stops the search early leaves no
gap there. A search stopped by a launch budget in the middle of an iteration leaves the ids of
that iteration's unsent trials unused; and with fewer workers than server keys among the capacity
stage's configurations, a probe's id is ``first + rank × max_probes + probe index`` (:class:`Capacity`),
which leaves the ids of probes a search did not need unused: those are the only gaps. Resume replays by the key
(phase, particle, iteration), not by the id; the ids come out the same because the same requests
are asked for in the same order.

A launch budget (``max_launches``) counts every launch of every stage, replayed ones included
(:attr:`Dispatcher.spent`): the baseline, the search, the re-measurements and the capacity probes
together never exceed it. Reuse and start-up refusals cost nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from msopt.config import Config
from msopt.evaluate.results import EvalRequest, EvaluationResult
from msopt.run.budget import BudgetPlan, plan_budget
from msopt.run.capacity import CapacityOptions, CapacitySearch, Probe, probe_verdict, sizing
from msopt.run.dispatcher import Dispatcher
from msopt.run.events import PhaseStarted, RunCallback, TotalChanged
from msopt.run.leaderboard import Leaderboard, values_key
from msopt.run.records import finite
from msopt.search.searcher import Searcher, Trial
from msopt.space import SearchSpace


class RunContext(Protocol):
    """What a stage and the budget read: the loop's parts and counters."""

    config: Config
    space: SearchSpace
    searcher: Searcher
    dispatcher: Dispatcher
    leaderboard: Leaderboard
    capacity_options: CapacityOptions
    n: int
    iters: int
    top_k: int
    search_prompts: int | None
    full_prompts: int | None
    evaluations: int
    max_launches: int

    @property
    def unguided(self) -> bool:
        """TPE without a guide (no prior): the budget plan is the unguided one."""


class Loop(RunContext, Protocol):
    """The run loop as a stage uses it: it owns ask → dispatch → record → tell."""

    @property
    def events(self) -> RunCallback:
        """The run's callbacks (a stage sends them :class:`PhaseStarted` and :class:`TotalChanged`)."""

    def ask(self) -> list[Trial]:
        """The searcher's next trials."""

    def dispatch(self, req: EvalRequest) -> EvaluationResult | None:
        """Replay, reuse or submit one request, recording its result when known at once."""

    def collect(self) -> list[EvaluationResult]:
        """Wait for finished evaluations and record them."""

    def replay(self, prev: EvaluationResult, eval_id: int) -> EvaluationResult:
        """Record a journaled result again as evaluation ``eval_id``."""

    def evaluate(self, reqs: Sequence[EvalRequest], checkpoint: str | None = None) -> dict[int, EvaluationResult]:
        """Dispatch every request, wait for all of them (eval_id -> result); then checkpoint
        ``checkpoint`` (a stage's name), if given."""

    def expect(self, configs: Sequence[EvaluationResult]) -> None:
        """The capacity stage's configurations with probes left: the pool stops the others' kept servers."""

    def checkpoint(self, stage: str) -> None:
        """Checkpoint the run as stage ``stage`` (state.json)."""

    @property
    def workers(self) -> int:
        """How many evaluations the pool runs at once."""

    def server_key(self, values: Mapping[str, Any]) -> str | None:
        """The server key of decoded values (None: no reuse)."""

    def kept_servers(self) -> set[str]:
        """The server keys the pool's idle workers keep running."""

    def tell(self, told: Sequence[tuple[Trial, EvaluationResult]], generation: int | None = None) -> None:
        """Tell the searcher these results in order; then learn and checkpoint (see the driver)."""


def budget_plan(ctx: RunContext) -> BudgetPlan:
    """How the launch budget is split (:func:`msopt.run.budget.plan_budget`). It follows the board
    (the baseline on it or failed keeps nothing beside the picks), so a resumed run computes the same."""
    opts = ctx.capacity_options
    base = ctx.leaderboard.baseline
    on_board = base is None or values_key(base.values) in ctx.leaderboard.board
    return plan_budget(ctx.max_launches, top_k=ctx.top_k, n_particles=ctx.n,
                       capacity_probes=opts.max_probes * max(ctx.top_k, 1) if opts.enabled else 0,
                       baseline_on_board=on_board, unguided=ctx.unguided)


def budget_lines(ctx: RunContext) -> list[str]:
    """The run's first lines under a launch budget: how it will be spent (:meth:`BudgetPlan.lines`),
    planned before the baseline is measured, as if it succeeds off the board of the best."""
    opts = ctx.capacity_options
    plan = plan_budget(ctx.max_launches, top_k=ctx.top_k, n_particles=ctx.n,
                       capacity_probes=opts.max_probes * max(ctx.top_k, 1) if opts.enabled else 0,
                       unguided=ctx.unguided)
    return plan.lines()


def extra_remeasurements(ctx: RunContext) -> int:
    """With a launch budget and ``pso_top_k`` > 1, the large plan: re-measurements beyond one per
    ``pso_top_k`` configuration, a quarter of the budget less one, spent racing the best by mean
    fitness and its closest challenger (:meth:`Leaderboard.race`; close contenders are told apart by
    more than one measurement each; the search under a budget usually finds the optimum early and
    loses it to noise in the pick) and on the baseline, as
    often as the recommendation (:func:`refine`). 0 without a budget and in the small plan, whose
    re-measurements are all in :attr:`BudgetPlan.picks`."""
    return budget_plan(ctx).extra


def capacity_reserve(ctx: RunContext) -> int:
    """With a launch budget and the capacity stage on: the launches kept for its probes,
    ``max_probes`` per configuration, at most half the budget. 0 without a budget."""
    return budget_plan(ctx).capacity


def search_budget(ctx: RunContext) -> int | None:
    """Launches the baseline and the search may use together: ``max_launches`` less the
    re-measurements of the picks, the extra ones (:func:`extra_remeasurements`), the baseline's
    (:attr:`BudgetPlan.baseline`) and the capacity stage's share (:attr:`BudgetPlan.capacity`), at
    least 1 (None: no budget, the search runs ``iters`` iterations)."""
    if ctx.max_launches <= 0:
        return None
    return budget_plan(ctx).search


def expected_evaluations(ctx: RunContext) -> int:
    """Evaluations a run without a launch budget makes before the capacity stage (whose probes
    are added as it goes): the baseline, ``iters`` × ``n`` searches (every lane's
    :func:`max_rounds`), the ``pso_top_k`` re-measurements and the baseline's beside them."""
    return 1 + ctx.searcher.lanes * max_rounds(ctx) + (ctx.top_k + 1 if ctx.top_k > 0 else 0)


def launches_left(ctx: RunContext) -> int | None:
    """Launches the budget still allows (None: no budget)."""
    if ctx.max_launches <= 0:
        return None
    return max(0, ctx.max_launches - ctx.dispatcher.spent)


def max_rounds(ctx: RunContext) -> int:
    """The most evaluations a lane is asked for: ``iters`` × ``n_particles`` / lanes (``iters``
    for the swarm, whose lanes are its particles), or with a launch budget (reuse and refusals
    cost nothing, so the search goes on past that) at least 4 × max_launches / lanes."""
    lanes = max(1, ctx.searcher.lanes)
    rounds = -(-ctx.iters * ctx.n // lanes)
    if ctx.max_launches <= 0:
        return rounds
    return max(rounds, -(-4 * ctx.max_launches // lanes))


def eval_id(ctx: RunContext, particle: int, count: int) -> int:
    """The eval id of lane ``particle``'s ``count``-th search evaluation (0 is the baseline): a
    function of its resume key (``"search"``, lane, count) and the searcher's lanes."""
    return 1 + count * ctx.searcher.lanes + particle


def trial_request(ctx: RunContext, trial: Trial) -> EvalRequest:
    """The request of a searcher's trial."""
    return EvalRequest(eval_id=eval_id(ctx, trial.lane, trial.count), phase="search", particle=trial.lane,
                       iteration=trial.count, position=tuple(float(x) for x in trial.position),
                       context=trial.context, num_prompts=ctx.search_prompts)


def _budget_left(ctx: RunContext) -> bool:
    budget = search_budget(ctx)
    return budget is None or ctx.dispatcher.spent < budget


class Stage(Protocol):
    """One stage of a run: :meth:`run` does its evaluations through the loop."""

    name: str

    def run(self, loop: Loop) -> Any:
        """Run the stage; what it returns is the stage's own (see each stage)."""


class Baseline:
    """Evaluate the default configuration (every field at its ``value``) as eval 0."""

    name = "baseline"

    def run(self, loop: Loop) -> EvaluationResult:
        """The baseline's result."""
        loop.events.on_event(PhaseStarted("baseline", "default configuration"))
        req = EvalRequest(eval_id=0, phase="baseline", particle=None, iteration=0,
                          position=tuple(loop.space.default_position().tolist()), context=None,
                          num_prompts=loop.search_prompts)
        return loop.evaluate([req])[0]


class SyncSearch:
    """Iterations: every trial of a generation evaluated concurrently, told in the order asked.

    With a launch budget the generation that reaches it dispatches its trials in order only
    while launches are left; the rest are never sent and the generation is not told.
    """

    name = "search"

    def run(self, loop: Loop) -> None:
        """Ask, dispatch and tell generation after generation, within ``iters`` and the budget."""
        rounds = max_rounds(loop)
        budget = search_budget(loop)
        for it in range(rounds):
            if not _budget_left(loop):
                break
            text = (f"iteration {it + 1}/{loop.iters}" if budget is None
                    else f"iteration {it + 1}, {loop.dispatcher.spent}/{budget} launches before the re-measurement")
            loop.events.on_event(PhaseStarted("search", text))
            trials = loop.ask()
            if not trials:
                break
            reqs = [trial_request(loop, t) for t in trials]
            got: dict[int, EvaluationResult] = {}
            sent: list[EvalRequest] = []
            for req in reqs:
                if not _budget_left(loop):
                    break
                sent.append(req)
                r = loop.dispatch(req)
                if r is not None:
                    got[r.eval_id] = r
            while any(q.eval_id not in got for q in sent):
                for r in loop.collect():
                    got[r.eval_id] = r
            if len(sent) < len(reqs):
                break
            loop.tell([(t, got[req.eval_id]) for t, req in zip(trials, reqs)], generation=it + 1)


class AsyncSearch:
    """Each trial is told as soon as its own result arrives, and its lane asked and dispatched again."""

    name = "search"

    def run(self, loop: Loop) -> None:
        """Replay the journal's search results in the order they were told, then keep every lane busy."""
        rounds = max_rounds(loop)
        loop.events.on_event(PhaseStarted("search", f"async, {rounds} evaluations per particle" + (
            "" if loop.max_launches <= 0 else f" at most, {search_budget(loop)} launches before the re-measurement")))
        waiting: dict[int, Trial] = {t.lane: t for t in loop.ask()}
        for prev in loop.dispatcher.take_replay_order():
            if prev.phase != "search" or prev.particle is None:
                continue
            t = waiting.get(prev.particle)
            if t is None or t.count != prev.iteration:
                continue
            loop.tell([(t, loop.replay(prev, eval_id(loop, t.lane, t.count)))])
            del waiting[t.lane]  # re-asked below, so ``waiting`` stays in the order its trials were asked
            waiting.update((u.lane, u) for u in loop.ask())
        in_flight: dict[int, Trial] = {}
        for t in list(waiting.values()):  # as the interrupted run dispatched them: in the order asked
            self._dispatch(loop, t, in_flight, rounds)
        while loop.dispatcher.outstanding:
            for r in loop.collect():
                t = in_flight.pop(r.eval_id, None) if r.phase == "search" else None
                if t is not None:
                    loop.tell([(t, r)])
                    for u in loop.ask():
                        self._dispatch(loop, u, in_flight, rounds)

    @staticmethod
    def _dispatch(loop: Loop, t: Trial | None, in_flight: dict[int, Trial], rounds: int) -> None:
        while t is not None and t.count < rounds and _budget_left(loop):
            req = trial_request(loop, t)
            r = loop.dispatch(req)
            if r is None:
                in_flight[req.eval_id] = t
                return
            loop.tell([(t, r)])  # replayed, reused or refused at once: tell and go on with this lane
            t = next((u for u in loop.ask() if u.lane == t.lane), None)


class Refine:
    """The re-measurement of the ``pso_top_k`` best (:func:`refine`)."""

    name = "refine"

    def run(self, loop: Loop) -> list[EvaluationResult]:
        """The re-measurements of the picks."""
        return refine(loop)


def refine(ctx: Loop) -> list[EvaluationResult]:
    """Measure the best ``pso_top_k`` distinct configurations again with the full workload, and
    the baseline configuration beside them; with a launch budget, then re-measure the best by
    mean fitness and its closest challenger (:func:`extra_remeasurements`), both each round, while
    they are within the noise and the budget allows; last,
    measure the baseline again until it has as many measurements with the full workload as the
    recommendation (:meth:`Leaderboard.full_count`), so the verdict compares like with like and
    can tell a gain from the noise (:mod:`msopt.run.verdict`). Under a budget too small for every
    pick, the best ones go first, then the baseline. The further re-measurements are a race
    (:meth:`Leaderboard.race`): the best by mean and its most dangerous challenger among every
    configuration measured, while they are within the noise; with the launches a search that
    ended early left as well.

    The baseline's re-measurements are phase "baseline", iterations 1, 2, ... (the resume key);
    none is made when the baseline failed, nor beside the picks when it is one of them (it is then
    re-measured as a pick). Returns the re-measurements of the picks.
    """
    if ctx.top_k <= 0:
        return []
    plan = budget_plan(ctx)
    if plan.small:
        return _refine_small(ctx)
    picked = ctx.leaderboard.picked()
    base = ctx.leaderboard.baseline
    beside = base is not None and values_key(base.values) not in {values_key(r.values) for r in picked}
    left = launches_left(ctx)
    if left is not None:
        picked = picked[:left]
        beside = beside and left > len(picked)
    # fewer picks than pso_top_k, or no baseline beside them
    ctx.events.on_event(TotalChanged(ctx.evaluations + len(picked) + beside))
    if not picked:
        return []
    ctx.events.on_event(PhaseStarted("refine", f"top {len(picked)} with the full workload"
                                     + (", the baseline beside them" if beside else "")))
    got = _remeasure(ctx, picked, 0, [base] if beside and base is not None else [])
    out = got[:len(picked)]
    extra = extra_remeasurements(ctx)  # the baseline's later re-measurements come out of it too
    left = launches_left(ctx)
    if left is not None:  # launches a search that ended early left unspent race too (not the capacity stage's)
        extra = max(extra, left - capacity_reserve(ctx))
    k = len(out)
    while extra > 0 and (launches_left(ctx) or 0) > 0:
        top = ctx.leaderboard.race()
        if not top:
            break
        while top and len(top) + _baseline_owed(ctx, base, len(top)) > min(extra, launches_left(ctx) or 0):
            top = top[:-1]  # keep what the baseline will be owed
        if not top:
            break
        ctx.events.on_event(PhaseStarted("refine", "the best by mean fitness and its closest challenger again: "
                                         "within the noise"))
        got = _remeasure(ctx, top, k)
        out += got
        k += len(got)
        extra -= len(got)
    if base is not None:
        owed = _baseline_owed(ctx, base, 0)
        left = launches_left(ctx)
        owed = owed if left is None else min(owed, left)
        if owed > 0:
            ctx.events.on_event(PhaseStarted("refine", f"the baseline {owed} more time(s), as often as the "
                                             "recommendation"))
            ctx.events.on_event(TotalChanged(ctx.evaluations + owed))
            _remeasure(ctx, [], 0, [base] * owed)
    return out


def _refine_small(ctx: Loop) -> list[EvaluationResult]:
    """The small plan's re-measurements (:mod:`msopt.run.budget`): while the best configuration by
    mean fitness has a contender within the noise (measured so far, else assumed), re-measure the
    two, best first, with the baseline as often as the recommendation; as many rounds as the
    launches left pay (the best alone when only it and the baseline's are paid). None when the best
    stands out: the launches kept for it are not spent."""
    lb = ctx.leaderboard
    base = lb.baseline
    out: list[EvaluationResult] = []
    k = 0
    while True:
        left = launches_left(ctx) or 0
        pair = lb.race()
        top = list(pair)
        while top and len(top) + _owed_after(ctx, base, top) > left:
            top = top[:-1]
        if len(pair) < 2 or not top:
            break
        ctx.events.on_event(TotalChanged(ctx.evaluations + len(top) + _owed_after(ctx, base, top)))
        ctx.events.on_event(PhaseStarted("refine", "the best and its closest contender again: within the noise"
                                         if len(top) > 1 else "the best again: a contender is within the noise"))
        got = _remeasure(ctx, top, k)
        out += got
        k += len(got)
        owed = min(_baseline_owed(ctx, base, 0), launches_left(ctx) or 0)
        if owed > 0:
            _remeasure(ctx, [], 0, [base] * owed if base is not None else [])
    return out


def _owed_after(ctx: RunContext, base: EvaluationResult | None, top: Sequence[EvaluationResult]) -> int:
    """The baseline's measurements owed once ``top`` is measured once more each: as many as the
    most measured of them will have (0 without a baseline or when it is among them)."""
    if base is None or not top or values_key(base.values) in {values_key(r.values) for r in top}:
        return 0
    lb = ctx.leaderboard
    return max(0, max(lb.full_count(r.values) for r in top) + 1 - lb.full_count(base.values))


def _baseline_owed(ctx: RunContext, base: EvaluationResult | None, coming: int) -> int:
    """Measurements the baseline lacks to match the recommendation's with the full workload (with
    ``coming`` re-measurements about to run: as many as the most measured re-measured
    configuration could have after them); 0 when the recommendation is the baseline's."""
    if base is None:
        return 0
    lb = ctx.leaderboard
    rec = lb.best()
    if rec is not None and values_key(rec.values) == values_key(base.values) and not coming:
        return 0
    most = max((lb.full_count(r.values) for r in lb.refined), default=0) + (1 if coming else 0)
    if not coming:
        most = lb.full_count(rec.values) if rec is not None else 0
    return max(0, most - lb.full_count(base.values))


def _remeasure(ctx: Loop, configs: Sequence[EvaluationResult], first: int,
               baseline: Sequence[EvaluationResult] = ()) -> list[EvaluationResult]:
    """Re-measure ``configs`` with the full workload, together, as refine iterations ``first``,
    ``first + 1``, ... (the resume key), and ``baseline`` (the baseline, as often as it is
    listed) beside them as the baseline's next iterations; the next eval ids, in that order. With the
    capacity stage on, the baseline's are sent first, so that the servers workers keep afterwards are
    the picks', which the capacity stage probes next (the eval ids stay in the order above)."""
    base = ctx.dispatcher.next_id
    reqs = [EvalRequest(eval_id=base + j, phase="refine", particle=None, iteration=first + j,
                        position=tuple(r.position), context=None, num_prompts=ctx.full_prompts)
            for j, r in enumerate(configs)]
    done = ctx.leaderboard.baseline_remeasured
    reqs += [EvalRequest(eval_id=base + len(configs) + j, phase="baseline", particle=None, iteration=done + j + 1,
                         position=tuple(r.position), context=None, num_prompts=ctx.full_prompts)
             for j, r in enumerate(baseline)]
    picks = reqs[:len(configs)]
    if ctx.capacity_options.enabled:  # the picks last: their servers are the ones kept for the capacity stage
        reqs = reqs[len(configs):] + picks
    got = ctx.evaluate(reqs)
    return [got[q.eval_id] for q in picks]


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
