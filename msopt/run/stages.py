"""The stages of a run, in order: the baseline, the swarm (sync or async), the re-measurement of
the ``pso_top_k`` best (refine), and the capacity search.

Each stage is a function of a :class:`RunContext` (the :class:`~msopt.run.driver.Driver`): it
asks the searcher (:mod:`msopt.search.searcher`), sends requests through the context's
dispatcher and reads the leaderboard.

Eval ids. The baseline is 0; a search trial's id is a function of its lane and count,
``1 + count × n + lane`` (:func:`eval_id`), because async lanes are dispatched in the order their
results happen to arrive, and the simulator seeds each evaluation by its id: an id that followed
the dispatch order would make a simulated async run, and a resumed one, depend on timing. The ids
after the search (re-measurements, capacity probes) follow on contiguously from the highest id the
search asked for (:attr:`Dispatcher.next_id`), so a budget that stops the search early leaves no
gap there. A search stopped by a launch budget in the middle of an iteration leaves the ids of
that iteration's unsent trials unused: those are the only gaps. Resume replays by the key
(phase, particle, iteration), not by the id; the ids come out the same because the same requests
are asked for in the same order.

A launch budget (``max_launches``) counts every launch of every stage, replayed ones included
(:attr:`Dispatcher.spent`): the baseline, the search, the re-measurements and the capacity probes
together never exceed it. Reuse and start-up refusals cost nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from msopt.config import Settings
from msopt.evaluate.results import EvalRequest, EvaluationResult
from msopt.run.capacity import CapacityOptions, CapacitySearch, Probe, probe_verdict
from msopt.run.dispatcher import Dispatcher
from msopt.run.leaderboard import Leaderboard, values_key
from msopt.run.records import finite
from msopt.search.searcher import Searcher, Trial
from msopt.space import DecodeContext, SearchSpace


class ProgressSink(Protocol):
    """A progress display as the driver uses it (:class:`msopt.run.progress.Progress`)."""

    def update(self, event: Any) -> None:
        """Show one :class:`~msopt.run.progress.ProgressEvent`."""

    def set_total(self, total: int) -> None:
        """Change the number of evaluations expected."""


class RunContext(Protocol):
    """What a stage reads and uses: the driver's parts."""

    settings: Settings
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
    def progress(self) -> ProgressSink | None: ...

    def emit(self, kind: str, **kw: Any) -> None: ...

    def checkpoint(self, stage: str, **extra: Any) -> None: ...

    def learn(self) -> None: ...

    def expect(self, configs: Sequence[EvaluationResult]) -> None: ...


def extra_remeasurements(ctx: RunContext) -> int:
    """With a launch budget and ``pso_top_k`` > 1: re-measurements beyond one per ``pso_top_k``
    configuration, a quarter of the budget less one, spent on the two best by mean fitness (close
    contenders are told apart by more than one measurement each; the search under a budget
    usually finds the optimum early and loses it to noise in the pick) and on the baseline, as
    often as the recommendation (:func:`refine`). 0 without a budget."""
    if ctx.max_launches <= 0 or ctx.top_k < 2:
        return 0
    return max(0, ctx.max_launches // 4 - 1)


def capacity_reserve(ctx: RunContext) -> int:
    """With a launch budget and the capacity stage on: the launches kept for its probes,
    ``max_probes`` per configuration, at most half the budget. 0 without a budget."""
    opts = ctx.capacity_options
    if ctx.max_launches <= 0 or not opts.enabled:
        return 0
    return min(opts.max_probes * max(ctx.top_k, 1), ctx.max_launches // 2)


def baseline_reserve(ctx: RunContext) -> int:
    """With a launch budget: the launch kept for measuring the baseline beside the re-measured
    picks (:func:`refine`; its later re-measurements come out of :func:`extra_remeasurements`).
    0 without a budget, without ``pso_top_k``, when the baseline failed (it is not measured
    again) or while it is on the board (it would be re-measured as one of the picks). It follows
    the board, so a resumed run computes the same."""
    base = ctx.leaderboard.baseline
    if ctx.max_launches <= 0 or ctx.top_k <= 0 or base is None:
        return 0
    return 0 if values_key(base.values) in ctx.leaderboard.board else 1


def search_budget(ctx: RunContext) -> int | None:
    """Launches the baseline and the search may use together: ``max_launches`` less the
    ``pso_top_k`` re-measurements, the extra ones (:func:`extra_remeasurements`), the baseline's
    (:func:`baseline_reserve`) and the capacity stage's share (:func:`capacity_reserve`), at
    least 1 (None: no budget, the search runs ``iters`` iterations)."""
    if ctx.max_launches <= 0:
        return None
    return max(1, ctx.max_launches - max(ctx.top_k, 0) - extra_remeasurements(ctx) - baseline_reserve(ctx)
               - capacity_reserve(ctx))


def expected_evaluations(ctx: RunContext) -> int:
    """Evaluations a run without a launch budget makes before the capacity stage (whose probes
    are added as it goes): the baseline, ``iters`` × ``n`` searches, the ``pso_top_k``
    re-measurements and the baseline's beside them."""
    return 1 + ctx.n * ctx.iters + (ctx.top_k + 1 if ctx.top_k > 0 else 0)


def launches_left(ctx: RunContext) -> int | None:
    """Launches the budget still allows (None: no budget)."""
    if ctx.max_launches <= 0:
        return None
    return max(0, ctx.max_launches - ctx.dispatcher.spent)


def max_rounds(ctx: RunContext) -> int:
    """The most evaluations a lane is asked for: ``iters``, or with a launch budget (reuse and
    refusals cost nothing, so the search goes on past ``iters``) 4 × max_launches / lanes."""
    if ctx.max_launches <= 0:
        return ctx.iters
    return max(ctx.iters, -(-4 * ctx.max_launches // ctx.n))


def eval_id(ctx: RunContext, particle: int, count: int) -> int:
    """The eval id of particle ``particle``'s ``count``-th search evaluation (0 is the baseline)."""
    return 1 + count * ctx.n + particle


def search_request(ctx: RunContext, particle: int, count: int, position: np.ndarray) -> EvalRequest:
    """The request to evaluate ``position`` as particle ``particle``'s ``count``-th search."""
    return EvalRequest(eval_id=eval_id(ctx, particle, count), phase="search", particle=particle,
                       iteration=count, position=tuple(float(x) for x in position),
                       context=DecodeContext(particle, ctx.n, count), num_prompts=ctx.search_prompts)


def trial_request(ctx: RunContext, trial: Trial) -> EvalRequest:
    """The request of a searcher's trial."""
    return EvalRequest(eval_id=eval_id(ctx, trial.lane, trial.count), phase="search", particle=trial.lane,
                       iteration=trial.count, position=tuple(float(x) for x in trial.position),
                       context=trial.context, num_prompts=ctx.search_prompts)


def _budget_left(ctx: RunContext) -> bool:
    budget = search_budget(ctx)
    return budget is None or ctx.dispatcher.spent < budget


def baseline(ctx: RunContext) -> EvaluationResult:
    """Evaluate the default configuration (every field at its ``value``)."""
    ctx.emit("phase", phase="baseline", text="default configuration")
    req = EvalRequest(eval_id=0, phase="baseline", particle=None, iteration=0,
                      position=tuple(ctx.space.default_position().tolist()), context=None,
                      num_prompts=ctx.search_prompts)
    return ctx.dispatcher.run_all([req])[0]


def sync_swarm(ctx: RunContext) -> None:
    """Iterations: every trial of a generation evaluated concurrently, told in the order asked.

    With a launch budget the generation that reaches it dispatches its trials in order only
    while launches are left; the rest are never sent and the generation is not told.
    """
    rounds = max_rounds(ctx)
    budget = search_budget(ctx)
    for it in range(rounds):
        if not _budget_left(ctx):
            break
        text = (f"iteration {it + 1}/{ctx.iters}" if budget is None
                else f"iteration {it + 1}, {ctx.dispatcher.spent}/{budget} launches before the re-measurement")
        ctx.emit("phase", phase="search", text=text)
        trials = ctx.searcher.ask()
        if not trials:
            break
        reqs = [trial_request(ctx, t) for t in trials]
        got: dict[int, EvaluationResult] = {}
        sent: list[EvalRequest] = []
        for req in reqs:
            if not _budget_left(ctx):
                break
            sent.append(req)
            r = ctx.dispatcher.dispatch(req)
            if r is not None:
                got[r.eval_id] = r
        while any(q.eval_id not in got for q in sent):
            for r in ctx.dispatcher.collect():
                got[r.eval_id] = r
        if len(sent) < len(reqs):
            break
        for t, req in zip(trials, reqs):
            r = got[req.eval_id]
            ctx.searcher.tell(t.id, r.fitness, list(r.position))
        ctx.learn()
        ctx.checkpoint("search", iteration=it + 1)


def async_swarm(ctx: RunContext) -> None:
    """Each trial is told as soon as its own result arrives, and its lane asked and dispatched again."""
    rounds = max_rounds(ctx)
    ctx.emit("phase", phase="search", text=f"async, {rounds} evaluations per particle"
             + ("" if ctx.max_launches <= 0 else f" at most, {search_budget(ctx)} launches before the re-measurement"))
    searcher, dispatcher = ctx.searcher, ctx.dispatcher
    waiting: dict[int, Trial] = {t.lane: t for t in searcher.ask()}
    # replay the journal's search results in the order they were told
    for prev in dispatcher.replay_order:
        if prev.phase != "search" or prev.particle is None:
            continue
        t = waiting.get(prev.particle)
        if t is None or t.count != prev.iteration:
            continue
        dispatcher.replay(prev, eval_id(ctx, t.lane, t.count))
        _tell_async(ctx, t, prev)
        waiting.update((u.lane, u) for u in searcher.ask())
    dispatcher.replay_order = []
    in_flight: dict[int, Trial] = {}
    for t in sorted(waiting.values(), key=lambda t: t.lane):
        _dispatch_async(ctx, t, in_flight, rounds)
    while dispatcher.outstanding:
        for r in dispatcher.collect():
            t = in_flight.pop(r.eval_id, None) if r.phase == "search" else None
            if t is not None:
                _tell_async(ctx, t, r)
                for u in searcher.ask():
                    _dispatch_async(ctx, u, in_flight, rounds)


def _dispatch_async(ctx: RunContext, t: Trial | None, in_flight: dict[int, Trial], rounds: int) -> None:
    while t is not None and t.count < rounds and _budget_left(ctx):
        req = trial_request(ctx, t)
        r = ctx.dispatcher.dispatch(req)
        if r is None:
            in_flight[req.eval_id] = t
            return
        _tell_async(ctx, t, r)  # replayed, reused or refused at once: tell and go on with this lane
        t = next((u for u in ctx.searcher.ask() if u.lane == t.lane), None)


def _tell_async(ctx: RunContext, t: Trial, r: EvaluationResult) -> None:
    ctx.searcher.tell(t.id, r.fitness, list(r.position))
    told = sum(ctx.searcher.lane_count(i) for i in range(ctx.searcher.lanes))
    if told % ctx.searcher.lanes == 0:  # an iteration's worth of results: learn from them
        ctx.learn()
    ctx.checkpoint("search")


def refine(ctx: RunContext) -> list[EvaluationResult]:
    """Measure the best ``pso_top_k`` distinct configurations again with the full workload, and
    the baseline configuration beside them; with a launch budget, then re-measure the two best by
    mean fitness (:func:`extra_remeasurements`), both each round, while the budget allows; last,
    measure the baseline again until it has as many measurements with the full workload as the
    recommendation (:meth:`Leaderboard.full_count`), so the verdict compares like with like and
    can tell a gain from the noise (:mod:`msopt.run.verdict`). Under a budget too small for every
    pick, the best ones go first, then the baseline.

    The baseline's re-measurements are phase "baseline", iterations 1, 2, ... (the resume key);
    none is made when the baseline failed, nor beside the picks when it is one of them (it is then
    re-measured as a pick). Returns the re-measurements of the picks.
    """
    if ctx.top_k <= 0:
        return []
    picked = ctx.leaderboard.picked()
    base = ctx.leaderboard.baseline
    beside = base is not None and values_key(base.values) not in {values_key(r.values) for r in picked}
    left = launches_left(ctx)
    if left is not None:
        picked = picked[:left]
        beside = beside and left > len(picked)
    if ctx.progress is not None:  # fewer picks than pso_top_k, or no baseline beside them
        ctx.progress.set_total(ctx.evaluations + len(picked) + beside)
    if not picked:
        return []
    ctx.emit("phase", phase="refine", text=f"top {len(picked)} with the full workload"
             + (", the baseline beside them" if beside else ""))
    got = _remeasure(ctx, picked, 0, [base] if beside and base is not None else [])
    out = got[:len(picked)]
    extra = extra_remeasurements(ctx)  # the baseline's later re-measurements come out of it too
    k = len(out)
    while extra > 0 and (launches_left(ctx) or 0) > 0:
        ranked = ctx.leaderboard.by_mean(ctx.leaderboard.refined)
        if len(ranked) < 2:
            break
        top = ranked[:2]
        while top and len(top) + _baseline_owed(ctx, base, len(top)) > min(extra, launches_left(ctx) or 0):
            top = top[:-1]  # keep what the baseline will be owed
        if not top:
            break
        ctx.emit("phase", phase="refine", text="the two best by mean fitness again")
        got = _remeasure(ctx, top, k)
        out += got
        k += len(got)
        extra -= len(got)
    if base is not None:
        owed = _baseline_owed(ctx, base, 0)
        left = launches_left(ctx)
        owed = owed if left is None else min(owed, left)
        if owed > 0:
            ctx.emit("phase", phase="refine", text=f"the baseline {owed} more time(s), as often as the recommendation")
            if ctx.progress is not None:
                ctx.progress.set_total(ctx.evaluations + owed)
            _remeasure(ctx, [], 0, [base] * owed)
    return out


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


def _remeasure(ctx: RunContext, configs: Sequence[EvaluationResult], first: int,
               baseline: Sequence[EvaluationResult] = ()) -> list[EvaluationResult]:
    """Re-measure ``configs`` with the full workload, together, as refine iterations ``first``,
    ``first + 1``, ... (the resume key), and ``baseline`` (the baseline, as often as it is
    listed) beside them as the baseline's next iterations; the next eval ids, in that order."""
    base = ctx.dispatcher.next_id
    reqs = [EvalRequest(eval_id=base + j, phase="refine", particle=None, iteration=first + j,
                        position=tuple(r.position), context=None, num_prompts=ctx.full_prompts)
            for j, r in enumerate(configs)]
    done = ctx.leaderboard.baseline_remeasured
    reqs += [EvalRequest(eval_id=base + len(configs) + j, phase="baseline", particle=None, iteration=done + j + 1,
                         position=tuple(r.position), context=None, num_prompts=ctx.full_prompts)
             for j, r in enumerate(baseline)]
    got = ctx.dispatcher.run_all(reqs)
    return [got[q.eval_id] for q in reqs]


def capacity(ctx: RunContext) -> list[dict[str, Any]]:
    """Find the highest load each top configuration sustains within the SLOs.

    Every configuration's bracket/bisect is sequential; the configurations' next probes go
    to the pool together, round by round, so eval ids (and a resumed run) are deterministic.
    A probe's resume key is (``"capacity"``, configuration rank, probe index).
    """
    opts = ctx.capacity_options
    if not opts.enabled:
        return []
    configs = ctx.leaderboard.capacity_configs()
    if not configs:
        return []
    what = "mean" if opts.percentile is None else f"p{opts.percentile}"
    ctx.emit("phase", phase="capacity",
             text=f"highest {opts.load} within the SLOs ({what} TTFT/TPOT) of {len(configs)} configuration"
                  + ("s" if len(configs) > 1 else ""))
    searches = [CapacitySearch(opts, opts.start_for(r.values)) for r in configs]
    next_id = ctx.dispatcher.next_id
    while True:
        reqs: list[tuple[int, EvalRequest]] = []
        for rank, (r, s) in enumerate(zip(configs, searches)):
            for j, load in enumerate(s.next_loads()):
                value: float | int = int(load) if opts.integer else float(load)
                reqs.append((rank, EvalRequest(eval_id=next_id, phase="capacity", particle=rank,
                                               iteration=s.used + j, position=tuple(r.position),
                                               context=None, num_prompts=ctx.full_prompts,
                                               load={opts.load: value})))
                next_id += 1
        left = launches_left(ctx)
        if not reqs or (left is not None and len(reqs) > left):  # a round the budget cannot pay: stop
            break
        if ctx.progress is not None:
            left = sum(opts.max_probes - s.used for s in searches if s.next_loads())
            ctx.progress.set_total(ctx.evaluations + left)
        got = ctx.dispatcher.run_all([q for _, q in reqs])
        for rank, s in enumerate(searches):
            mine = [q for k, q in reqs if k == rank]
            if mine:
                probes = []
                for q in mine:
                    res = got[q.eval_id]
                    ok, why = probe_verdict(res.metrics, res.error, ctx.settings, opts)
                    probes.append(Probe(q.eval_id, float(q.load[opts.load]), ok, why, dict(res.metrics)))
                s.tell(probes)
        ctx.expect([r for r, s in zip(configs, searches) if s.next_loads()])  # the others' servers stop
        ctx.checkpoint("capacity")
    if ctx.progress is not None:
        ctx.progress.set_total(ctx.evaluations)
    return [{"rank": rank, "eval_id": r.eval_id, "fitness": finite(r.fitness), "values": dict(r.values),
             **s.result()}
            for rank, (r, s) in enumerate(zip(configs, searches))]

