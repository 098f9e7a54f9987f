"""The stages of a run, in order, each an object the run loop runs: :class:`Baseline`,
:class:`SyncSearch` or :class:`AsyncSearch`, :class:`Refine` (the re-measurement of the
``pso_top_k`` best) and :class:`~msopt.run.capacity_stage.Capacity`.

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
stage's configurations, a probe's id is ``first + rank × max_probes + probe index``, or server by server
(:func:`server_by_server`) ``first + pick × max_probes + probe index`` after the re-measurements' ids
(:class:`~msopt.run.capacity_stage.Capacity`), which leaves the ids of probes a search did not need unused:
those are the only gaps. Resume replays by the key (phase, particle, iteration), not by the id; the ids come out
the same because the same requests are asked for, whatever order they run in.

Server by server. With the capacity stage on, no launch budget and fewer workers than server keys among the
picks, the refine stage leaves the picks to the capacity stage, which re-measures each pick right before its
probes, server key by server key, the servers the pool keeps first. With one worker and a search that ended on
B, ``B:refine, A:refine, A:capacity, B:capacity`` becomes ``B:refine, B:capacity, A:refine, A:capacity``: a
server start less, the least the stages allow.

A launch budget (``max_launches``) counts every launch of every stage, replayed ones included
(:attr:`Dispatcher.spent`): the baseline, the search, the re-measurements and the capacity probes
together never exceed it. Reuse and start-up refusals cost nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from msopt.config import Config
from msopt.evaluate.results import EvalRequest, EvaluationResult
from msopt.run.budget import BudgetPlan, ends_search, plan_budget
from msopt.run.capacity import CapacityOptions
from msopt.run.dispatcher import Dispatcher
from msopt.run.events import Note, PhaseStarted, RunCallback, TotalChanged
from msopt.run.leaderboard import Leaderboard, values_key
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

    def trust(self) -> float:
        """How far the run trusts the prior's ranking now, 0..1 (1 without a prior)."""


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
        before = _best_mean(loop)
        for it in range(rounds):
            if not _budget_left(loop) or _ends_early(loop, it, before):
                break
            before = _best_mean(loop)
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


def _best_mean(ctx: RunContext) -> float:
    ranked = ctx.leaderboard.contenders()
    return ranked[0][1] if ranked else math.inf


def _ends_early(loop: Loop, told: int, before: float) -> bool:
    """Whether the guided small plan's search ends before generation ``told`` + 1
    (:func:`~msopt.run.budget.ends_search`; ``before``: the best mean before the last generation); it says
    so in a line, and the refine stage gets the launches left."""
    budget = search_budget(loop)
    plan = budget_plan(loop)
    if budget is None or not plan.small or plan.unguided:
        return False
    left = budget - loop.dispatcher.spent
    if not ends_search(budget, left, loop.searcher.lanes, told, bool(loop.leaderboard.race()),
                       _best_mean(loop) < before, loop.trust()):
        return False
    loop.events.on_event(Note(f"the search ends with {left} launch(es) left: the best has a contender within the "
                              "noise, the last generation found none better and the prior is trusted; they go to the "
                              "re-measurements"))
    return True


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
        """The re-measurements of the picks (none server by server: the capacity stage makes them)."""
        if server_by_server(loop):
            return []
        return refine(loop)


def server_by_server(ctx: Loop) -> bool:
    """Whether the capacity stage re-measures the picks, each right before its probes, server key by server key
    (:class:`~msopt.run.capacity_stage.Capacity`): the stage is on, ``pso_top_k`` > 0, there is no launch budget
    (whose race needs every pick re-measured first) and fewer workers than server keys among the picks. A function
    of the board, which the search leaves the same on resume, and of the pool's size."""
    if not ctx.capacity_options.enabled or ctx.top_k <= 0 or ctx.max_launches > 0:
        return False
    keys = {k for r in ctx.leaderboard.picked() if (k := ctx.server_key(r.values)) is not None}
    return len(keys) > max(1, ctx.workers)


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
    match_baseline(ctx)
    return out


def match_baseline(ctx: Loop) -> None:
    """Re-measure the baseline until it has as many measurements with the full workload as the
    recommendation, as the launches left allow (none without a baseline)."""
    base = ctx.leaderboard.baseline
    if base is None:
        return
    owed = _baseline_owed(ctx, base, 0)
    left = launches_left(ctx)
    owed = owed if left is None else min(owed, left)
    if owed > 0:
        ctx.events.on_event(PhaseStarted("refine", f"the baseline {owed} more time(s), as often as the "
                                         "recommendation"))
        ctx.events.on_event(TotalChanged(ctx.evaluations + owed))
        _remeasure(ctx, [], 0, [base] * owed)


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
    reqs = remeasure_requests(ctx, configs, first, baseline)
    picks = reqs[:len(configs)]
    if ctx.capacity_options.enabled:  # the picks last: their servers are the ones kept for the capacity stage
        reqs = reqs[len(configs):] + picks
    got = ctx.evaluate(reqs)
    return [got[q.eval_id] for q in picks]


def remeasure_requests(ctx: RunContext, configs: Sequence[EvaluationResult], first: int,
                       baseline: Sequence[EvaluationResult] = ()) -> list[EvalRequest]:
    """The requests that re-measure ``configs`` with the full workload, as refine iterations ``first``,
    ``first + 1``, ... (the resume key), then ``baseline`` as the baseline's next iterations; the next eval ids,
    in that order, whatever order they are sent in."""
    base = ctx.dispatcher.next_id
    reqs = [EvalRequest(eval_id=base + j, phase="refine", particle=None, iteration=first + j,
                        position=tuple(r.position), context=None, num_prompts=ctx.full_prompts)
            for j, r in enumerate(configs)]
    done = ctx.leaderboard.baseline_remeasured
    reqs += [EvalRequest(eval_id=base + len(configs) + j, phase="baseline", particle=None, iteration=done + j + 1,
                         position=tuple(r.position), context=None, num_prompts=ctx.full_prompts)
             for j, r in enumerate(baseline)]
    return reqs
