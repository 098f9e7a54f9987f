"""The run loop, as one object: it runs the stages (baseline, search sync or async, refine,
capacity) and owns ask → dispatch → record → tell.

:class:`Driver` holds the loop's parts:

- :mod:`msopt.run.stages`: the stage objects, what each asks for and in which order;
- :class:`~msopt.run.dispatcher.Dispatcher`: requests in flight, duplicates (leaders and
  followers, the reuse cache) and the replay of journaled results on resume; it returns
  results and never calls back into the loop;
- :class:`~msopt.run.leaderboard.Leaderboard`: the ranking, the mean pick, the recommendation;
- :mod:`msopt.run.records`: best.json, capacity.json and the CLI's text;
- the callbacks (:mod:`msopt.run.events`): every event of the run, typed, goes to each in order;
  the run directory's (:class:`~msopt.run.callbacks.StoreCallback`) comes first.

:func:`optimize` runs the loop: the validated configuration, the pool, the callbacks in, the
:class:`~msopt.run.events.RunOutcome` out; :class:`msopt.run.session.RunSession` is the whole run
around it (run directory, prior, pool, signals, outputs), as ``msopt optimize`` runs it.

The driver talks to an :class:`~msopt.run.pool.EvaluatorPool` (submit a request, wait for finished
results); ``actors.pool.RayPool`` implements it with Ray actors,
:class:`~msopt.run.pool.InProcessPool` with threads for tests and ``--no-ray``. Every finished
evaluation is journaled before the swarm learns of it; the repaired position is written back into
the swarm before bests are updated; the swarm is checkpointed to state.json after every tell.

Resume replays the run: the journal's results stand in for the evaluations they record, so the
seeded swarm goes through exactly the same states, and only evaluations missing from the journal
are dispatched.

Memory stays flat over long runs: with a run directory the journal is the record of every result,
and the driver keeps only counters, the best result, the ``pso_top_k`` best distinct
configurations (with the running mean of their measurements) and the refined results. The
duplicate cache (``duplicate_policy = "reuse"``) holds one entry per distinct configuration,
which reuse needs, and the verdict's tally (:class:`~msopt.run.verdict.VerdictTally`) one number
per measurement with the full workload, which the verdict needs to compare like with like.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from msopt.config import Config
from msopt.engines import get_engine
from msopt.errors import ConfigError, DecodeError, EngineCrashStop
from msopt.evaluate.results import EvalRequest, EvaluationResult
from msopt.evaluate.runner import server_key
from msopt.evaluate.screen import CandidateScreen
from msopt.evaluate.workload import workload_config
from msopt.run import stages
from msopt.run.budget import plan_budget
from msopt.run.callbacks import RunRecord, StoreCallback
from msopt.run.capacity import CapacityOptions, capacity_options
from msopt.run.capacity_stage import Capacity
from msopt.run.crashes import CrashWatch
from msopt.run.dispatcher import Dispatcher, was_launched
from msopt.run.events import (
    CallbackList,
    Checkpoint,
    Finished,
    Note,
    PhaseStarted,
    Picked,
    RunCallback,
    RunEnded,
    RunEvent,
    RunOutcome,
    RunStarted,
)
from msopt.run.guide import Guide
from msopt.run.leaderboard import Leaderboard, values_key
from msopt.run.pool import EvaluatorPool
from msopt.run.records import best_record, capacity_line, capacity_record
from msopt.run.servers import planned
from msopt.run.validate import Validated
from msopt.run.verdict import VerdictTally
from msopt.search import Constraint, swarm_options
from msopt.search.searcher import (
    Searcher,
    SearcherSetup,
    Trial,
    layout_names,
    make_searcher,
    resolve_searcher,
    search_dimensions,
)
from msopt.space import DecodeContext, SearchSpace

# re-exported: the homes of the last five are msopt.run.events, .callbacks and .records
__all__ = ["Driver", "optimize", "RunOutcome", "RunRecord", "best_record", "capacity_line", "capacity_record"]


class Driver:
    """Runs one optimization over a pool.

    Args:
        config: the effective config (n_particles, iters, seed, mode, ...).
        pool: where evaluations run.
        store: the run directory (``append``, ``save_state``, ``write_best``), or None: its
            callback (:class:`~msopt.run.callbacks.StoreCallback`) comes before ``callbacks``.
        callbacks: receive every event of the run (:mod:`msopt.run.events`), in this order;
            e.g. the progress display (:class:`msopt.cli.progress.ProgressCallback`).
        previous: results already journaled (``--resume``): they are replayed, not re-run.
        keep_results: keep every result in :attr:`results` (and the outcome); default: only when
            there is no store, whose journal otherwise is the record (long runs stay flat).
        validated: what :func:`msopt.run.validate.validate` returned for ``config``: its search
            space, swarm options and capacity options are used instead of being built again.
        guide: a model of the run around the searcher (:class:`msopt.run.guide.Guide`, e.g. the
            simulator prior's ``msopt.prior.PriorGuide``): the searcher starts from the baseline
            plus its starting positions, its constraint carries the guide's screen, every request
            carries its prediction to the journal, and the guide learns after each iteration.
            None: no guide.
        screen: check the engine's start-up rules before dispatching (default true): a refused
            candidate is never launched, costs nothing and is answered again without a check.
        searcher: the searcher to build (a name in ``SEARCHERS``); None: ``[search] searcher``,
            where ``"auto"`` is the swarm. :func:`optimize` (``msopt optimize``) passes
            :func:`~msopt.search.resolve_searcher`'s choice (TPE without a prior). TPE without a guide runs
            one lane per worker of ``pool`` (at most ``n_particles``), the swarm ``n_particles``.
    """

    def __init__(self, config: Config, pool: EvaluatorPool, *, store: RunRecord | None = None,
                 callbacks: Sequence[RunCallback] = (), previous: Sequence[EvaluationResult] = (),
                 keep_results: bool | None = None, validated: Validated | None = None,
                 guide: Guide | None = None, screen: bool = True, searcher: str | None = None) -> None:
        if validated is not None and validated.config is not config:
            raise ValueError("Driver: 'validated' must be the validation of this configuration")
        self.config = config
        self.pool = pool
        self.store = store
        self.events = CallbackList([*([StoreCallback(store)] if store is not None else []), *callbacks])
        self.space = validated.space if validated is not None else SearchSpace(config.engine.fields)
        self.mode = config.run.mode
        self.n = config.run.n_particles
        self.iters = config.run.iters
        self.max_launches = config.run.max_launches
        self.seed = config.run.seed
        self.reuse = config.run.reuse_duplicates
        self.top_k = config.run.pso_top_k
        workload = validated.workload if validated is not None and validated.workload else workload_config(
            config, validated.resolved if validated is not None else None)
        self.search_prompts = workload.search_prompts
        self.full_prompts = workload.full_prompts
        self.capacity_options: CapacityOptions = (validated.capacity if validated is not None
                                                  else capacity_options(config))
        self.capacity: list[dict[str, Any]] = []
        options = validated.swarm if validated is not None else swarm_options(config)
        self.guide = guide
        checker = CandidateScreen(config, setup=validated.simulator if validated is not None else None) \
            if screen else None
        self.checker = checker
        self.refused_keys: set[str] = set()  # values keys of configurations refused (rules or at launch)
        # every searcher is held to it: known refusals (this very set), the start-up rules, the guide's screen
        self.constraint = Constraint(decode=self._decode_plain, key=values_key, refused_keys=self.refused_keys,
                                     rules=checker.refusal if checker is not None else None,
                                     screen=guide.screen() if guide is not None else None)
        name = searcher or config.run.searcher
        if name == "auto":
            name = "swarm"  # a Driver built directly; optimize() resolves "auto" with resolve_searcher
        lanes = options.n_particles
        if name == "tpe" and guide is None:
            # without a prior TPE's model of the measurements is the only guide: one trial per worker,
            # each proposed from every result told before it (not n_particles from one model)
            lanes = max(1, min(lanes, pool.size))
        opts = self.capacity_options
        plan = plan_budget(self.max_launches, top_k=self.top_k, n_particles=self.n,
                           capacity_probes=opts.max_probes * max(self.top_k, 1) if opts.enabled else 0,
                           unguided=guide is None and name == "tpe")  # as stages.budget_lines plans it
        launches = plan.search if self.max_launches > 0 else None
        init = self._initial_positions(options.n_particles, options.seed, launches)
        self.searcher: Searcher = make_searcher(name, SearcherSetup(
            dimensions=search_dimensions(self.space), seed=options.seed, concurrency=lanes,
            mode=self.mode if self.mode in ("sync", "async") else "sync", init_positions=init,
            context=lambda i, c: DecodeContext(i, self.n, c), constraint=self.constraint, options=options,
            launches=launches, layout=layout_names(self.space)))
        used = 1 + max((r.particle for r in previous if r.phase == "search" and r.particle is not None), default=-1)
        if used > self.searcher.lanes:
            raise ConfigError(f"--resume: the journal's search ran {used} lanes, this run has {self.searcher.lanes} "
                              f"({self.searcher.name} without a prior runs one per worker): resume with as many "
                              "workers as the interrupted run had")
        self.keep_results = store is None if keep_results is None else bool(keep_results)
        self.results: list[EvaluationResult] = []
        self.evaluations = 0
        self.failures = 0
        self.reused = 0
        self.leaderboard = Leaderboard(self.top_k, self.full_prompts)
        # what the verdict needs of every result, counted as they come
        self.tally = VerdictTally(config, validated.resolved if validated is not None else None)
        self.crashes = CrashWatch.for_budget(self.max_launches)
        self.stage = "baseline"  # msopt.run.servers.STAGES: what the rest of the run may measure
        self._expected: list[EvaluationResult] | None = None
        self.dispatcher = Dispatcher(pool, self.space, reuse=self.reuse, previous=previous, events=self.events,
                                     refusal=checker.refusal if checker is not None else None,
                                     predict=guide.predict if guide is not None else None,
                                     server_key=self.server_key, wanted=self.servers_wanted)

    @property
    def unguided(self) -> bool:
        """TPE without a guide: its model of the measurements is the search's only guide, and the
        budget plan is the unguided one (:mod:`msopt.run.budget`); the swarm keeps its plan."""
        return self.guide is None and self.searcher.name == "tpe"

    def trust(self) -> float:
        """How far the run trusts the prior's ranking now (:meth:`~msopt.prior.PriorGuide.trust`; 1 without one)."""
        return self.guide.trust() if self.guide is not None else 1.0

    def server_key(self, values: Mapping[str, Any]) -> str | None:
        """The server key a pool routes ``values`` by (:func:`msopt.evaluate.runner.server_key`)."""
        return server_key(self.config, get_engine(self.config.engine.name), values)

    def servers_wanted(self) -> set[str]:
        """The server keys the rest of the run may still use (:func:`msopt.run.servers.planned`)."""
        configs = planned(self.stage, self.leaderboard, top_k=self.top_k, capacity=self.capacity_options.enabled,
                          budget=self.max_launches > 0, expected=self._expected)
        return {k for r in configs if (k := self.server_key(r.values)) is not None}

    @property
    def workers(self) -> int:
        """How many evaluations the pool runs at once (the capacity stage goes by server key with fewer
        workers than keys)."""
        return self.pool.size

    def kept_servers(self) -> set[str]:
        """The server keys the pool's idle workers keep (empty for a pool that keeps none)."""
        kept = getattr(self.pool, "kept_keys", None)
        return set(kept()) if kept is not None else set()

    def expect(self, configs: Sequence[EvaluationResult]) -> None:
        """The capacity stage's configurations with probes left: the pool stops the others' kept servers."""
        self._expected = list(configs)
        self.dispatcher.retain()

    # -- the guide --------------------------------------------------------------------------
    def _initial_positions(self, n: int, seed: int | None, launches: int | None) -> np.ndarray:
        """Lane 0 at the default configuration; with a guide, lanes 1..k at its starting positions
        (``launches``: the search's launch budget, None without one)."""
        default = self.space.default_position()
        rows = [default]
        if self.guide is not None:
            rows.extend(self.guide.starts(self.space, default, n, seed, launches))
        return np.array(rows, dtype=float)

    def learn(self) -> None:
        """After an iteration: the guide learns from this run's measurements (e.g. the prior's refit)."""
        if self.guide is not None:
            self.guide.learn(lambda text: self.emit(PhaseStarted("search", text)))

    def _decode_plain(self, position: np.ndarray) -> Mapping[str, Any] | None:
        """``position``'s values decoded without a context, or None where it cannot be decoded."""
        try:
            return self.space.decode(np.asarray(position, dtype=float), None).values
        except DecodeError:
            return None

    # -- recording ------------------------------------------------------------------------
    def emit(self, event: RunEvent) -> None:
        """Send one event to every callback, in order."""
        self.events.on_event(event)

    def finish(self, r: EvaluationResult, journal: bool = True) -> None:
        """Record one finished evaluation (``journal`` false: replayed by --resume, already in the
        journal): the callbacks first (the store journals it), then count it, rank it, show it."""
        self.record(Finished(r, replayed=not journal, launched=was_launched(r)))

    def record(self, done: Finished) -> None:
        """Record one finished evaluation as the dispatcher returned it; see :meth:`finish`."""
        r = done.result
        self.emit(done)  # the store's callback is first: journaled before anything learns of it
        if self.keep_results:
            self.results.append(r)
        self.evaluations += 1
        self.failures += r.failed
        self.reused += r.reused
        self.leaderboard.add(r)
        self.tally.add(r)
        if r.refused and r.values:
            self.refused_keys.add(values_key(r.values))
        stop = self.crashes.add(r) if done.launched else None
        if stop is not None:  # journaled above: the run stops with every result kept
            raise EngineCrashStop(stop)
        if self.guide is not None:
            self.guide.observe(r)
        if r.phase == "refine" and not r.failed:
            pick = self.leaderboard.best()
            if pick is not None:
                self.emit(Picked(pick))

    def checkpoint(self, stage: str, **extra: Any) -> None:
        """Send the run's state (state.json) to the callbacks (none listening: nothing to build)."""
        if not self.events.callbacks:
            return
        self.emit(Checkpoint({"stage": stage, "mode": self.mode, "seed": self.seed,
                              "searcher": self.searcher.name, **self._searcher_state(),
                              "evaluations": self.evaluations, "launched": self.launched,
                              "launches": self.dispatcher.spent, **extra}))

    def _searcher_state(self) -> dict[str, Any]:
        # the swarm's state stays under "swarm", as state.json always had it
        state = self.searcher.to_state()
        return {"swarm": state["swarm"]} if self.searcher.name == "swarm" and "swarm" in state \
            else {"searcher_state": state}

    # -- the loop's mechanics (what a stage uses, see :class:`msopt.run.stages.Loop`) -------
    def ask(self) -> list[Trial]:
        """The searcher's next trials."""
        return self.searcher.ask()

    def tell(self, told: Sequence[tuple[Trial, EvaluationResult]], generation: int | None = None) -> None:
        """Tell the searcher ``told`` in order (each repaired position written back before its
        bests move). Then, in sync mode (``generation``: the iteration just told, from 1), let the
        guide learn and checkpoint with the iteration; in async mode, learn after each
        iteration's worth of results and checkpoint after every tell."""
        for t, r in told:
            self.searcher.tell(t.id, r.fitness, list(r.position))
        if generation is not None:
            self.learn()
            self.checkpoint("search", iteration=generation)
            return
        if sum(self.searcher.lane_count(i) for i in range(self.searcher.lanes)) % self.searcher.lanes == 0:
            self.learn()  # an iteration's worth of results: learn from them
        self.checkpoint("search")

    def dispatch(self, req: EvalRequest) -> EvaluationResult | None:
        """Replay, reuse or submit one request; record and return its result when known at once."""
        done = self.dispatcher.dispatch(req)
        if done is None:
            return None
        self.record(done)
        return done.result

    def replay(self, prev: EvaluationResult, eval_id: int) -> EvaluationResult:
        """Record a journaled result again as evaluation ``eval_id`` (not journaled twice)."""
        done = self.dispatcher.replay(prev, eval_id)
        self.record(done)
        return done.result

    def collect(self, timeout: float = 0.5) -> list[EvaluationResult]:
        """Wait for finished evaluations (and their followers); record them, in order. A fault
        past its retries is raised once the others of the batch are recorded."""
        got = self.dispatcher.collect(timeout)
        out: list[EvaluationResult] = []
        for e in got.events:
            if isinstance(e, Finished):
                self.record(e)
                out.append(e.result)
            else:
                self.emit(e)
        if out:  # once the board holds them: the kept servers nothing planned needs are stopped
            self.dispatcher.retain()
        if got.fault is not None:
            raise got.fault
        return out

    def evaluate(self, reqs: Sequence[EvalRequest], checkpoint: str | None = None) -> dict[int, EvaluationResult]:
        """Dispatch every request and wait until all of them finished: eval_id -> result; then
        checkpoint as stage ``checkpoint``, if given."""
        got: dict[int, EvaluationResult] = {}
        for req in reqs:
            r = self.dispatch(req)
            if r is not None:
                got[r.eval_id] = r
        want = {req.eval_id for req in reqs}
        while not want <= set(got):
            for r in self.collect():
                got[r.eval_id] = r
        if checkpoint is not None:
            self.checkpoint(checkpoint)
        return got

    @property
    def outstanding(self) -> int:
        """Evaluations submitted or waiting on a duplicate, not yet finished."""
        return self.dispatcher.outstanding

    @property
    def launched(self) -> int:
        """Evaluations submitted to the pool (not replayed, not reused)."""
        return self.dispatcher.launched

    def expected_evaluations(self) -> int:
        """Evaluations a run without a launch budget makes: see :func:`stages.expected_evaluations`."""
        return stages.expected_evaluations(self)

    # -- stages ---------------------------------------------------------------------------
    def plan(self) -> list[stages.Stage]:
        """The stages of this run, in order."""
        search: stages.Stage = stages.AsyncSearch() if self.mode == "async" else stages.SyncSearch()
        return [stages.Baseline(), search, stages.Refine(), Capacity()]

    # -- ranking (the leaderboard's) ----------------------------------------------------------
    def mean_fitness(self, r: EvaluationResult) -> tuple[float, int]:
        """The weighted mean fitness over every counted measurement of ``r``'s configuration and
        how many there were; see :meth:`Leaderboard.mean_fitness`."""
        return self.leaderboard.mean_fitness(r)

    def best(self) -> EvaluationResult | None:
        """The recommendation; see :meth:`Leaderboard.best`."""
        return self.leaderboard.best(self.capacity)

    def run(self) -> RunOutcome:
        """Run every stage, tell the callbacks the outcome (:class:`RunEnded`) and return it."""
        if self.mode not in ("sync", "async"):
            raise ConfigError(f"mode must be 'sync' or 'async', got {self.mode!r}")
        names = set(self.space.names) | set(self.space.derived)
        # under a launch budget the number of evaluations is not known (reuse and refusals are free)
        self.emit(RunStarted(total=0 if self.max_launches > 0 else self.expected_evaluations(),
                             n_particles=self.n, dimensions=tuple(f.name for f in self.config.engine.fields
                                                                  if f.name in names),
                             steps={f.name: f.step for f in self.config.engine.fields}, launches=self.max_launches))
        for line in stages.budget_lines(self):  # the run's first lines: how the launch budget will be spent
            self.emit(Note(line))
        intro = self.guide.intro() if self.guide is not None else None
        if intro is not None:
            self.emit(PhaseStarted(*intro))
        for stage in self.plan():
            self.stage = stage.name  # the kept servers the rest of the run may use follow it
            got = stage.run(self)
            if isinstance(stage, Capacity):
                self.capacity = got
        best = self.best()
        self.checkpoint("done")
        mean, count = self.mean_fitness(best) if best is not None else (None, 1)
        outcome = RunOutcome(best=best, evaluations=self.evaluations, failures=self.failures, reused=self.reused,
                             launched=self.launched, refused=self.dispatcher.refused, results=list(self.results),
                             capacity=list(self.capacity), launches=self.dispatcher.spent, mean_fitness=mean,
                             measurements=count, counts=self.counts(), records=self.records(best),
                             verdict=self.tally.verdict(best, mean_fitness=mean, measurements=count),
                             unreplayed=len(self.dispatcher.previous))
        self.emit(RunEnded(outcome))
        return outcome

    def records(self, best: EvaluationResult | None) -> dict[str, Any]:
        """The run's JSON records by file name, in the order they are written: the guide's (the
        prior's prior.json), capacity.json (when the capacity stage ran), best.json (when some
        evaluation succeeded)."""
        out: dict[str, Any] = {}
        slos = self.config.run.slos
        if self.guide is not None:
            out.update(self.guide.records())
        if self.capacity:
            out["capacity.json"] = capacity_record(self.capacity, self.capacity_options, slos,
                                                     self.config.cluster.trial.devices)
        if best is not None:
            mean = self.mean_fitness(best) if best.phase == "refine" else None
            record = best_record(best, self.config.engine.name, mean)
            record["counts"] = self.counts()
            if self.capacity:
                record["capacity"] = capacity_record(self.capacity, self.capacity_options, slos,
                                                     self.config.cluster.trial.devices)
            out["best.json"] = record
        return out

    def counts(self) -> dict[str, int]:
        """The run's counters as best.json and the closing line give them: evaluations (journal
        lines, replayed ones included), failures (reused ones included), reused, launches (what
        ``max_launches`` counts, replayed ones included; 0 in max_launches: no budget)."""
        return {"evaluations": self.evaluations, "failures": self.failures, "reused": self.reused,
                "launches": self.dispatcher.spent, "max_launches": self.max_launches}


def optimize(validated: Validated, pool: EvaluatorPool, *, callbacks: Sequence[RunCallback] = (),
             store: RunRecord | None = None, previous: Sequence[EvaluationResult] = (),
             guide: Guide | None = None) -> RunOutcome:
    """Run one optimization's loop over a pool the caller started: what
    :class:`msopt.run.session.RunSession` (``msopt optimize``) runs between its start and its outputs.

    Args:
        validated: what :func:`msopt.run.validate.validate` (or ``load``) returned.
        pool: where evaluations run (the caller creates and closes it).
        callbacks: receive every event, after the store's (e.g. the progress display).
        store: the run directory (journal, state.json, records), or None.
        previous: the journal of the run resumed (``--resume``): replayed, not re-run.
        guide: a model of the run around the searcher (the simulator prior's
            ``msopt.prior.PriorGuide``), or None.

    Returns:
        The outcome, with its verdict; the callbacks got it as :class:`RunEnded` too.
    """
    run = validated.config.run
    searcher = resolve_searcher(run.searcher, guide is not None, run.max_launches)
    driver = Driver(validated.config, pool, store=store, callbacks=callbacks, previous=previous,
                    validated=validated, guide=guide, searcher=searcher)
    return driver.run()
