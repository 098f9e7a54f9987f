"""The optimization loop: baseline, swarm iterations (sync or async), top-k refinement, capacity.

The driver talks to an :class:`~msopt.run.pool.EvaluatorPool` (submit a request, wait for finished
results); ``actors.pool.RayPool`` implements it with Ray actors,
:class:`~msopt.run.pool.InProcessPool` with threads for tests and ``--no-ray``. Every finished
evaluation is journaled before the swarm learns of it; the repaired position is written back into
the swarm before bests are updated; the swarm is checkpointed after every tell.

Resume replays the run: the journal's results stand in for the evaluations they record, so the
seeded swarm goes through exactly the same states, and only evaluations missing from the journal
are dispatched.

Memory stays flat over long runs: with a run directory the journal is the record of every result,
and the driver keeps only counters, the best result, the ``pso_top_k`` best distinct
configurations (with the running mean of their measurements) and the refined results. Only the
duplicate cache (``duplicate_policy = "reuse"``) holds one entry per distinct configuration,
which reuse needs.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from msopt.config import Settings
from msopt.errors import ConfigError, DecodeError, FaultError
from msopt.evaluate.evaluator import configured_num_prompts, search_num_prompts
from msopt.evaluate.results import EvalRequest, EvaluationResult
from msopt.run.capacity import (
    CapacityOptions,
    CapacitySearch,
    Probe,
    capacity_options,
    probe_verdict,
)
from msopt.run.pool import EvaluatorPool
from msopt.search import swarm_options
from msopt.search.swarm import Swarm
from msopt.space import DecodeContext, SearchSpace


@dataclass
class RunOutcome:
    """What a finished run reports."""

    best: EvaluationResult | None
    evaluations: int
    failures: int
    reused: int
    launched: int
    results: list[EvaluationResult] = field(default_factory=list)  # empty unless the driver keeps them
    capacity: list[dict[str, Any]] = field(default_factory=list)


#: Times an evaluation that met a fault of the machinery is submitted again before the run stops.
FAULT_RETRIES = 2


def _values_key(values: Mapping[str, Any]) -> str:
    return json.dumps(values, sort_keys=True, default=str)


def _rank(r: EvaluationResult) -> tuple[float, int]:
    return (r.fitness, r.eval_id)


def _load_text(load: Mapping[str, Any]) -> str | None:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in load.items()) or None


def _request_key(phase: str, particle: int | None, iteration: int) -> tuple[str, int | None, int]:
    return (phase, particle, iteration)


class Driver:
    """Runs one optimization over a pool.

    Args:
        settings: the effective settings (n_particles, iters, seed, mode, ...).
        pool: where evaluations run.
        store: the run directory (``append``, ``save_state``, ``write_best``), or None.
        progress: receives :class:`msopt.run.progress.ProgressEvent` objects, or None.
        previous: results already journaled (``--resume``): they are replayed, not re-run.
        keep_results: keep every result in :attr:`results` (and the outcome); default: only when
            there is no store, whose journal otherwise is the record (long runs stay flat).
    """

    def __init__(self, settings: Settings, pool: EvaluatorPool, *, store: Any = None, progress: Any = None,
                 previous: Sequence[EvaluationResult] = (), keep_results: bool | None = None) -> None:
        self.settings = settings
        self.pool = pool
        self.store = store
        self.progress = progress
        self.space = SearchSpace.from_settings(settings)
        self.mode = str(settings.get("mode", "sync"))
        self.n = settings.n_particles
        self.iters = settings.iters
        self.seed = int(settings.get("seed", 0))
        self.reuse = settings.get("duplicate_policy", "reuse") == "reuse"
        self.top_k = int(settings.section("data_storage").get("pso_top_k", 0) or 0)
        self.search_prompts = search_num_prompts(settings)
        self.full_prompts = configured_num_prompts(settings)
        self.capacity_options: CapacityOptions = capacity_options(settings)
        self.capacity: list[dict[str, Any]] = []
        options = swarm_options(settings)
        low, high = self.space.bounds
        self.swarm = Swarm(low, high, options, init_position=self.space.default_position(),
                           steps=self.space.steps)
        self._previous = {_request_key(r.phase, r.particle, r.iteration): r for r in previous}
        self._replay_order = [r for r in previous]
        self.keep_results = store is None if keep_results is None else bool(keep_results)
        self.results: list[EvaluationResult] = []
        self.evaluations = 0
        self.failures = 0
        self.reused = 0
        self._best: EvaluationResult | None = None      # best successful baseline/search result
        self._refined: list[EvaluationResult] = []      # successful refine results (<= pso_top_k)
        self._probes: dict[int, EvaluationResult] = {}  # capacity probes (<= max_probes per config)
        self._board: dict[str, EvaluationResult] = {}   # the pso_top_k best distinct configurations
        self._tally: dict[str, list[float]] = {}  # board key -> [sum of weight·fitness, sum of weights, count]
        self._cache: dict[str, EvaluationResult] = {}   # duplicate_policy = "reuse" only
        self._leaders: dict[str, int] = {}           # values key -> eval_id in flight
        self._followers: dict[int, list[tuple[EvalRequest, np.ndarray]]] = {}
        self._inflight: dict[int, EvalRequest] = {}
        self._decoded: dict[int, dict[str, Any]] = {}  # eval_id -> the driver's own decode of it
        self._faults: dict[int, int] = {}  # eval_id -> faults met (never journaled; bounded retries)
        self.launched = 0

    # -- events ---------------------------------------------------------------------------
    def _emit(self, kind: str, **kw: Any) -> None:
        if self.progress is None:
            return
        from msopt.run.progress import ProgressEvent

        self.progress.update(ProgressEvent(kind=kind, **kw))

    def _emit_result(self, r: EvaluationResult) -> None:
        kind = "reused" if r.reused else ("failed" if r.failed else "done")
        self._emit(kind, eval_id=r.eval_id, phase=r.phase, particle=r.particle, iteration=r.iteration,
                   values=r.values, metrics=r.metrics, fitness=r.fitness, devices=r.devices, error=r.error,
                   text=_load_text(r.load))

    # -- dispatch -------------------------------------------------------------------------
    def _pre_decode(self, req: EvalRequest) -> tuple[str | None, np.ndarray, dict[str, Any]]:
        try:
            d = self.space.decode(np.asarray(req.position, dtype=float), req.context)
        except DecodeError as exc:
            return None, np.asarray(req.position, dtype=float), exc.values
        return _values_key(d.values), d.position, d.values

    def dispatch(self, req: EvalRequest) -> EvaluationResult | None:
        """Replay, reuse or submit one request; return its result when known at once."""
        prev = self._previous.pop(_request_key(req.phase, req.particle, req.iteration), None)
        if prev is not None:
            prev = replace(prev, eval_id=req.eval_id)
            self._finish(prev, journal=False)
            return prev
        key, position, values = self._pre_decode(req)
        if self.reuse and key is not None and req.phase == "search":
            done = self._cache.get(key)
            if done is not None:
                r = self._reused(done, req, position)
                self._finish(r)
                return r
            if key in self._leaders:
                self._followers.setdefault(self._leaders[key], []).append((req, position))
                self._emit("queued", eval_id=req.eval_id, phase=req.phase, particle=req.particle,
                           iteration=req.iteration)
                return None
            self._leaders[key] = req.eval_id
        self._decoded[req.eval_id] = values
        self._inflight[req.eval_id] = req
        self.pool.submit(req)
        self.launched += 1
        self._emit("queued", eval_id=req.eval_id, phase=req.phase, particle=req.particle, iteration=req.iteration,
                   text=_load_text(req.load))
        return None

    def _reused(self, done: EvaluationResult, req: EvalRequest, position: np.ndarray) -> EvaluationResult:
        now = time.time()
        return replace(done, eval_id=req.eval_id, phase=req.phase, particle=req.particle,
                       iteration=req.iteration, position_in=[float(x) for x in req.position],
                       position=position.tolist(), reused=True, attempts=0, devices=[], actor=None,
                       started=now, finished=now, num_prompts=req.num_prompts)

    def _finish(self, r: EvaluationResult, journal: bool = True) -> None:
        if journal and self.store is not None:
            self.store.append(r)
        if self.keep_results:
            self.results.append(r)
        self.evaluations += 1
        self.failures += r.failed
        self.reused += r.reused
        key = _values_key(r.values)
        if self.reuse and r.values and not r.reused:
            self._cache.setdefault(key, r)
        if r.phase == "capacity":
            self._probes[r.eval_id] = r
        elif not r.failed:
            if r.phase == "refine":
                self._refined.append(r)
                self._count(key, r)
            elif r.phase in ("baseline", "search"):
                if self._best is None or _rank(r) < _rank(self._best):
                    self._best = r
                self._rank_for_refine(key, r)
        self._emit_result(r)

    def _rank_for_refine(self, key: str, r: EvaluationResult) -> None:
        """Keep the ``pso_top_k`` best distinct configurations, each with its best result.

        A configuration pushed out can never come back with its old result (the ones ahead of
        it only get better), so this equals ranking every result at the end.
        """
        if self.top_k <= 0:
            return
        held = self._board.get(key)
        if held is not None:
            if _rank(r) < _rank(held):
                self._board[key] = r
            if not r.reused:  # a reused result is the earlier measurement again, not a new one
                self._count(key, r)
            return
        self._board[key] = r
        self._count(key, r)
        if len(self._board) > self.top_k:
            worst = max(self._board, key=lambda k: _rank(self._board[k]))
            del self._board[worst]
            self._tally.pop(worst, None)

    def _count(self, key: str, r: EvaluationResult) -> None:
        """Add a successful measurement to its configuration's running mean.

        Weighted by the prompts it served (a search capped by ``sample_size`` measured fewer
        than a re-measurement with the full workload); weight 1 when the count is unknown.
        """
        prompts = r.num_prompts if r.num_prompts is not None else self.full_prompts
        weight = float(prompts) if prompts else 1.0
        t = self._tally.setdefault(key, [0.0, 0.0, 0])
        t[0] += weight * r.fitness
        t[1] += weight
        t[2] += 1

    def mean_fitness(self, r: EvaluationResult) -> tuple[float, int]:
        """The weighted mean fitness over every successful measurement of ``r``'s configuration
        that the driver counted (search and re-measurements of the ``pso_top_k`` best), and
        how many there were; ``(r.fitness, 1)`` for a configuration it did not count."""
        t = self._tally.get(_values_key(r.values))
        if t is None or t[1] <= 0:
            return r.fitness, 1
        return t[0] / t[1], int(t[2])

    def _by_mean(self, results: Sequence[EvaluationResult]) -> list[EvaluationResult]:
        """One result per configuration (its last), best mean fitness first."""
        last = {_values_key(r.values): r for r in results}
        return sorted(last.values(), key=lambda r: (self.mean_fitness(r)[0], r.eval_id))

    def collect(self, timeout: float = 0.5) -> list[EvaluationResult]:
        """Wait for finished evaluations (and their followers); journal them."""
        for eval_id, devices in self.pool.running():  # drained even without a display: pools queue them
            req = self._inflight.get(eval_id)
            if req is not None and self.progress is not None:
                self._emit("running", eval_id=eval_id, phase=req.phase, particle=req.particle,
                           iteration=req.iteration, devices=devices)
        out: list[EvaluationResult] = []
        fault: FaultError | None = None
        for r in self.pool.wait(timeout):
            if r.fault is not None and r.eval_id in self._inflight:
                fault = fault or self._retry_fault(r)
                continue
            req = self._inflight.pop(r.eval_id, None)
            if req is None:
                continue  # a result for an evaluation already failed (timeout) or resubmitted
            values = self._decoded.pop(r.eval_id, None)
            if not r.values and values:  # the actor died or timed out before it could say
                r.values = dict(values)
            self._finish(r)
            out.append(r)
            for key, leader in list(self._leaders.items()):
                if leader == r.eval_id:
                    del self._leaders[key]
            for freq, fpos in self._followers.pop(r.eval_id, []):
                fr = self._reused(r, freq, fpos)
                self._finish(fr)
                out.append(fr)
        if fault is not None:  # the others of this batch are journaled first: nothing finished is lost
            raise fault
        return out

    def _retry_fault(self, r: EvaluationResult) -> FaultError | None:
        """Resubmit an evaluation that met a fault of the machinery, up to :data:`FAULT_RETRIES`
        times; past that, the error that stops the run. A fault is never journaled."""
        n = self._faults.get(r.eval_id, 0) + 1
        self._faults[r.eval_id] = n
        req = self._inflight[r.eval_id]
        where = f"evaluation {r.eval_id} ({r.phase}" + (f", particle {r.particle}" if r.particle is not None else "")
        if n <= FAULT_RETRIES:
            self._emit("message", text=f"{where}): a fault, not a result ({r.fault}); "
                                       f"running it again ({n + 1} of {FAULT_RETRIES + 1})")
            self.pool.submit(req)
            return None
        return FaultError(f"{where}) stopped by a fault that is not the configuration's ({n} attempts): {r.fault}; "
                          "it was not journaled")

    @property
    def outstanding(self) -> int:
        """Evaluations submitted or waiting on a duplicate, not yet finished."""
        return len(self._inflight) + sum(len(v) for v in self._followers.values())

    # -- stages ---------------------------------------------------------------------------
    def _eval_id(self, particle: int, count: int) -> int:
        return 1 + count * self.n + particle

    def _search_request(self, particle: int, count: int, position: np.ndarray) -> EvalRequest:
        return EvalRequest(eval_id=self._eval_id(particle, count), phase="search", particle=particle,
                           iteration=count, position=tuple(float(x) for x in position),
                           context=DecodeContext(particle, self.n, count), num_prompts=self.search_prompts)

    def _run_all(self, reqs: Sequence[EvalRequest]) -> dict[int, EvaluationResult]:
        got: dict[int, EvaluationResult] = {}
        for req in reqs:
            r = self.dispatch(req)
            if r is not None:
                got[r.eval_id] = r
        want = {req.eval_id for req in reqs}
        while not want <= set(got):
            for r in self.collect():
                got[r.eval_id] = r
        return got

    def _checkpoint(self, stage: str, **extra: Any) -> None:
        if self.store is None:
            return
        self.store.save_state({"stage": stage, "mode": self.mode, "seed": self.seed,
                               "swarm": self.swarm.to_state(), "evaluations": self.evaluations, **extra})

    def run_baseline(self) -> EvaluationResult:
        """Evaluate the default configuration (every field at its ``value``)."""
        self._emit("phase", phase="baseline", text="default configuration")
        req = EvalRequest(eval_id=0, phase="baseline", particle=None, iteration=0,
                          position=tuple(self.space.default_position().tolist()), context=None,
                          num_prompts=self.search_prompts)
        return self._run_all([req])[0]

    def run_sync(self) -> None:
        """Iterations: every particle evaluated concurrently, told in particle order."""
        for it in range(self.iters):
            self._emit("phase", phase="search", text=f"iteration {it + 1}/{self.iters}")
            positions = self.swarm.ask()
            reqs = [self._search_request(i, it, positions[i]) for i in range(self.n)]
            got = self._run_all(reqs)
            ordered = [got[req.eval_id] for req in reqs]
            self.swarm.tell(np.array([r.fitness for r in ordered]),
                            np.array([r.position for r in ordered], dtype=float))
            self._checkpoint("search", iteration=it + 1)

    def run_async(self) -> None:
        """Each particle is told and moved as soon as its own result arrives, then dispatched again."""
        self._emit("phase", phase="search", text=f"async, {self.iters} evaluations per particle")
        # replay the journal's search results in the order they were told
        for prev in self._replay_order:
            if prev.phase != "search" or prev.particle is None:
                continue
            i = prev.particle
            if int(self.swarm.evaluation_counts[i]) != prev.iteration:
                continue
            self._previous.pop(_request_key("search", i, prev.iteration), None)
            self._finish(replace(prev, eval_id=self._eval_id(i, prev.iteration)), journal=False)
            self._tell_async(prev)
        self._replay_order = []
        for i in range(self.n):
            c = int(self.swarm.evaluation_counts[i])
            if c < self.iters:
                self._dispatch_async(i, c)
        while self.outstanding:
            for r in self.collect():
                if r.phase == "search":
                    self._tell_async(r)
                    c = int(self.swarm.evaluation_counts[r.particle])
                    if c < self.iters:
                        self._dispatch_async(r.particle, c)

    def _dispatch_async(self, i: int, count: int) -> None:
        r = self.dispatch(self._search_request(i, count, self.swarm.ask_one(i)))
        while r is not None:  # replayed or reused at once: tell and go on with this particle
            self._tell_async(r)
            count = int(self.swarm.evaluation_counts[i])
            if count >= self.iters:
                return
            r = self.dispatch(self._search_request(i, count, self.swarm.ask_one(i)))

    def _tell_async(self, r: EvaluationResult) -> None:
        self.swarm.tell_one(r.particle, r.fitness, np.asarray(r.position, dtype=float))
        self._checkpoint("search")

    def run_refine(self) -> list[EvaluationResult]:
        """Measure the best ``pso_top_k`` distinct configurations again with the full workload."""
        if self.top_k <= 0:
            return []
        picked = sorted(self._board.values(), key=_rank)
        if self.progress is not None and len(picked) < self.top_k:
            self.progress.set_total(1 + self.n * self.iters + len(picked))
        if not picked:
            return []
        self._emit("phase", phase="refine", text=f"top {len(picked)} with the full workload")
        base = 1 + self.iters * self.n
        reqs = [EvalRequest(eval_id=base + k, phase="refine", particle=None, iteration=k,
                            position=tuple(r.position), context=None, num_prompts=None)
                for k, r in enumerate(picked)]
        got = self._run_all(reqs)
        return [got[q.eval_id] for q in reqs]

    def _capacity_configs(self) -> list[EvaluationResult]:
        """The configurations whose capacity is searched: the refined ones by mean fitness, else the best."""
        refined = self._by_mean(self._refined)
        if refined or self.top_k > 0:
            return refined
        return [self._best] if self._best is not None else []

    def run_capacity(self) -> list[dict[str, Any]]:
        """Find the highest load each top configuration sustains within the SLOs.

        Every configuration's bracket/bisect is sequential; the configurations' next probes go
        to the pool together, round by round, so eval ids (and a resumed run) are deterministic.
        A probe's resume key is (``"capacity"``, configuration rank, probe index).
        """
        opts = self.capacity_options
        if not opts.enabled:
            return []
        configs = self._capacity_configs()
        if not configs:
            return []
        what = "mean" if opts.percentile is None else f"p{opts.percentile}"
        self._emit("phase", phase="capacity",
                   text=f"highest {opts.load} within the SLOs ({what} TTFT/TPOT) of {len(configs)} configuration"
                        + ("s" if len(configs) > 1 else ""))
        searches = [CapacitySearch(opts, opts.start_for(r.values)) for r in configs]
        next_id = 1 + self.iters * self.n + max(self.top_k, 0)
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
            if self.progress is not None:
                left = sum(opts.max_probes - s.used for s in searches if s.next_loads())
                self.progress.set_total(self.evaluations + left)
            got = self._run_all([q for _, q in reqs])
            for rank, s in enumerate(searches):
                mine = [q for k, q in reqs if k == rank]
                if mine:
                    probes = []
                    for q in mine:
                        res = got[q.eval_id]
                        ok, why = probe_verdict(res.metrics, res.error, self.settings, opts)
                        probes.append(Probe(q.eval_id, float(q.load[opts.load]), ok, why, dict(res.metrics)))
                    s.tell(probes)
            self._checkpoint("capacity")
        if self.progress is not None:
            self.progress.set_total(self.evaluations)
        out = []
        for rank, (r, s) in enumerate(zip(configs, searches)):
            out.append({"rank": rank, "eval_id": r.eval_id, "fitness": _finite(r.fitness),
                        "values": dict(r.values), **s.result()})
        self.capacity = out
        return out

    def best(self) -> EvaluationResult | None:
        """The recommendation.

        When the capacity stage ran and a configuration sustains some load: the edge probe of
        the configuration with the highest goodput. Otherwise, when refinement ran, the
        re-measured configuration with the best mean fitness over all of its measurements (its
        search result and its re-measurement: one lucky measurement does not decide), as its
        re-measured result; else the best of all.
        """
        sustained = [c for c in self.capacity if c["edge_eval_id"] is not None and c["goodput"] > 0]
        if sustained:
            top = max(sustained, key=lambda c: (c["goodput"], -c["rank"]))
            edge = self._probes.get(top["edge_eval_id"])
            if edge is not None:
                return edge
        if self._refined:
            return self._by_mean(self._refined)[0]
        return self._best

    def run(self) -> RunOutcome:
        """Run every stage and return the outcome."""
        if self.mode not in ("sync", "async"):
            raise ConfigError(f"mode must be 'sync' or 'async', got {self.mode!r}")
        self.run_baseline()
        if self.mode == "async":
            self.run_async()
        else:
            self.run_sync()
        self.run_refine()
        self.run_capacity()
        best = self.best()
        self._checkpoint("done")
        if self.store is not None and self.capacity:
            self.store.write_json("capacity.json", capacity_record(self.capacity, self.capacity_options,
                                                                   self.settings))
        if self.store is not None and best is not None:
            record = best_record(best, self.settings, self.mean_fitness(best) if best.phase == "refine" else None)
            if self.capacity:
                record["capacity"] = capacity_record(self.capacity, self.capacity_options, self.settings)
            self.store.write_best(record)
        return RunOutcome(best=best, evaluations=self.evaluations, failures=self.failures, reused=self.reused,
                          launched=self.launched, results=list(self.results), capacity=list(self.capacity))


def _finite(x: Any) -> Any:
    return None if isinstance(x, float) and not math.isfinite(x) else x


def best_record(best: EvaluationResult, settings: Settings,
                mean: tuple[float, int] | None = None) -> dict[str, Any]:
    """The content of best.json; ``mean``: (mean fitness, measurements) of a re-measured pick."""
    record = {"eval_id": best.eval_id, "phase": best.phase, "fitness": _finite(best.fitness),
              "engine": settings.engine, "values": best.values,
              "metrics": {k: _finite(v) for k, v in best.metrics.items()}, "position": best.position,
              "num_prompts": best.num_prompts, "load": dict(best.load)}
    if mean is not None:
        record["mean_fitness"] = _finite(mean[0])
        record["measurements"] = mean[1]
    return record


def capacity_record(capacity: Sequence[Mapping[str, Any]], options: CapacityOptions,
                    settings: Settings) -> dict[str, Any]:
    """capacity.json (and best.json's "capacity" section): the SLOs and every configuration's result."""
    ttft, tpot = options.metric_names()
    configs = []
    for c in capacity:
        c = dict(c)
        c["edge_metrics"] = {k: _finite(v) for k, v in c.get("edge_metrics", {}).items()}
        configs.append(c)
    return {"load": options.load, "percentile": options.percentile, "tolerance": options.tolerance,
            "repeats": options.repeats, "max_probes": options.max_probes,
            "slo": {ttft: settings.ttft_slo, tpot: settings.tpot_slo, "success_rate": settings.success_rate_slo},
            "configurations": configs}


def capacity_line(c: Mapping[str, Any]) -> str:
    """One line for a configuration's capacity (plain log, live table, CLI)."""
    load = c["sustainable_load"]
    shown = f"{load:g}" if load else "0"
    text = (f"capacity #{c['rank']} (eval {c['eval_id']}): {c['load']}={shown} "
            f"goodput={c['goodput']:.1f} tok/s")
    if c.get("limited_by"):
        text += f" (limited by {c['limited_by']}"
        if c.get("failed_load") is not None and c.get("failed_reason"):
            text += f"; at {c['failed_load']:g}: {c['failed_reason']}"
        text += ")"
    if c.get("sustainable_load") and not c.get("verified"):
        text += " [not all repeats ran]"
    return text
