"""The stages of a run, in order: the baseline, the swarm (sync or async), the re-measurement of
the ``pso_top_k`` best (refine), and the capacity search.

Each stage is a function of a :class:`RunContext` (the :class:`~msopt.run.driver.Driver`): it
asks the swarm, sends requests through the context's dispatcher and reads the leaderboard. Eval
ids are a function of (phase, particle, iteration), so a resumed run asks for the same ids.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from msopt.config import Settings
from msopt.evaluate.results import EvalRequest, EvaluationResult
from msopt.run.capacity import CapacityOptions, CapacitySearch, Probe, probe_verdict
from msopt.run.dispatcher import Dispatcher
from msopt.run.leaderboard import Leaderboard
from msopt.run.records import finite
from msopt.search.swarm import Swarm
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
    swarm: Swarm
    dispatcher: Dispatcher
    leaderboard: Leaderboard
    capacity_options: CapacityOptions
    n: int
    iters: int
    top_k: int
    search_prompts: int | None
    evaluations: int

    @property
    def progress(self) -> ProgressSink | None: ...

    def emit(self, kind: str, **kw: Any) -> None: ...

    def checkpoint(self, stage: str, **extra: Any) -> None: ...


def eval_id(ctx: RunContext, particle: int, count: int) -> int:
    """The eval id of particle ``particle``'s ``count``-th search evaluation (0 is the baseline)."""
    return 1 + count * ctx.n + particle


def search_request(ctx: RunContext, particle: int, count: int, position: np.ndarray) -> EvalRequest:
    """The request to evaluate ``position`` as particle ``particle``'s ``count``-th search."""
    return EvalRequest(eval_id=eval_id(ctx, particle, count), phase="search", particle=particle,
                       iteration=count, position=tuple(float(x) for x in position),
                       context=DecodeContext(particle, ctx.n, count), num_prompts=ctx.search_prompts)


def baseline(ctx: RunContext) -> EvaluationResult:
    """Evaluate the default configuration (every field at its ``value``)."""
    ctx.emit("phase", phase="baseline", text="default configuration")
    req = EvalRequest(eval_id=0, phase="baseline", particle=None, iteration=0,
                      position=tuple(ctx.space.default_position().tolist()), context=None,
                      num_prompts=ctx.search_prompts)
    return ctx.dispatcher.run_all([req])[0]


def sync_swarm(ctx: RunContext) -> None:
    """Iterations: every particle evaluated concurrently, told in particle order."""
    for it in range(ctx.iters):
        ctx.emit("phase", phase="search", text=f"iteration {it + 1}/{ctx.iters}")
        positions = ctx.swarm.ask()
        reqs = [search_request(ctx, i, it, positions[i]) for i in range(ctx.n)]
        got = ctx.dispatcher.run_all(reqs)
        ordered = [got[req.eval_id] for req in reqs]
        ctx.swarm.tell(np.array([r.fitness for r in ordered]),
                       np.array([r.position for r in ordered], dtype=float))
        ctx.checkpoint("search", iteration=it + 1)


def async_swarm(ctx: RunContext) -> None:
    """Each particle is told and moved as soon as its own result arrives, then dispatched again."""
    ctx.emit("phase", phase="search", text=f"async, {ctx.iters} evaluations per particle")
    swarm, dispatcher = ctx.swarm, ctx.dispatcher
    # replay the journal's search results in the order they were told
    for prev in dispatcher.replay_order:
        if prev.phase != "search" or prev.particle is None:
            continue
        i = prev.particle
        if int(swarm.evaluation_counts[i]) != prev.iteration:
            continue
        dispatcher.replay(prev, eval_id(ctx, i, prev.iteration))
        _tell_async(ctx, prev)
    dispatcher.replay_order = []
    for i in range(ctx.n):
        c = int(swarm.evaluation_counts[i])
        if c < ctx.iters:
            _dispatch_async(ctx, i, c)
    while dispatcher.outstanding:
        for r in dispatcher.collect():
            if r.phase == "search" and r.particle is not None:
                _tell_async(ctx, r)
                c = int(swarm.evaluation_counts[r.particle])
                if c < ctx.iters:
                    _dispatch_async(ctx, r.particle, c)


def _dispatch_async(ctx: RunContext, i: int, count: int) -> None:
    r = ctx.dispatcher.dispatch(search_request(ctx, i, count, ctx.swarm.ask_one(i)))
    while r is not None:  # replayed or reused at once: tell and go on with this particle
        _tell_async(ctx, r)
        count = int(ctx.swarm.evaluation_counts[i])
        if count >= ctx.iters:
            return
        r = ctx.dispatcher.dispatch(search_request(ctx, i, count, ctx.swarm.ask_one(i)))


def _tell_async(ctx: RunContext, r: EvaluationResult) -> None:
    assert r.particle is not None
    ctx.swarm.tell_one(r.particle, r.fitness, np.asarray(r.position, dtype=float))
    ctx.checkpoint("search")


def refine(ctx: RunContext) -> list[EvaluationResult]:
    """Measure the best ``pso_top_k`` distinct configurations again with the full workload."""
    if ctx.top_k <= 0:
        return []
    picked = ctx.leaderboard.picked()
    if ctx.progress is not None and len(picked) < ctx.top_k:
        ctx.progress.set_total(1 + ctx.n * ctx.iters + len(picked))
    if not picked:
        return []
    ctx.emit("phase", phase="refine", text=f"top {len(picked)} with the full workload")
    base = 1 + ctx.iters * ctx.n
    reqs = [EvalRequest(eval_id=base + k, phase="refine", particle=None, iteration=k,
                        position=tuple(r.position), context=None, num_prompts=None)
            for k, r in enumerate(picked)]
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
    next_id = 1 + ctx.iters * ctx.n + max(ctx.top_k, 0)
    while True:
        reqs: list[tuple[int, EvalRequest]] = []
        for rank, (r, s) in enumerate(zip(configs, searches)):
            for j, load in enumerate(s.next_loads()):
                value: float | int = int(load) if opts.integer else float(load)
                reqs.append((rank, EvalRequest(eval_id=next_id, phase="capacity", particle=rank,
                                               iteration=s.used + j, position=tuple(r.position),
                                               context=None, num_prompts=None, load={opts.load: value})))
                next_id += 1
        if not reqs:
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
        ctx.checkpoint("capacity")
    if ctx.progress is not None:
        ctx.progress.set_total(ctx.evaluations)
    return [{"rank": rank, "eval_id": r.eval_id, "fitness": finite(r.fitness), "values": dict(r.values),
             **s.result()}
            for rank, (r, s) in enumerate(zip(configs, searches))]

