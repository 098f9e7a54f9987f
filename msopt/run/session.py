"""One run, start to end: the session behind ``msopt optimize`` and the Python API.

:class:`RunSession` owns a run's lifecycle, as Ray Tune's ``Tuner.fit`` owns its
``TuneController``'s: the run directory (created and locked, or resumed), the simulator prior
(searched in a thread while a slow pool starts), the evaluation pool (:class:`PoolLauncher`:
threads here, Ray actors with ``actors.pool.RayLauncher``), SIGTERM, the run loop
(:func:`msopt.run.driver.optimize`), the outputs (written while a slow pool stops) and the verdict.
The command line only parses its arguments into one and prints its :class:`SessionResult`::

    from msopt.run.session import RunSession
    from msopt.run.validate import load

    result = RunSession(load("configs/quickstart.toml")).run()
    print(result.run_dir, result.verdict.lines() if result.verdict else "no result")

gives the run directory, journal and verdict ``msopt optimize -c configs/quickstart.toml --no-ray``
gives (add ``pools=actors.pool.RayLauncher()`` for Ray actors, and
``outputs=[msopt.report.outputs.write_outputs]`` for the launch files and the report).
"""

from __future__ import annotations

import shutil
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from msopt.config import Config
from msopt.errors import FaultError, MsoptError, Terminated
from msopt.evaluate.evaluator import Parsed
from msopt.evaluate.results import EvaluationResult
from msopt.prior import PriorGuide, PriorSearch, make_prior, real_prior_table
from msopt.run.driver import optimize
from msopt.run.events import RunCallback, RunOutcome
from msopt.run.pool import EvaluatorPool, InProcessPool
from msopt.run.preflight import hardware_probe
from msopt.run.store import RunStore, StoreError, atomic_write
from msopt.run.validate import Validated, load
from msopt.run.verdict import Verdict, make_verdict
from msopt.workload.resolved import ResolvedWorkload

__all__ = ["Display", "Outputs", "PoolLauncher", "RunSession", "SessionResult", "Terminated", "Threads",
           "resume_store"]

#: Hardware probes of the nodes: (node name, what :func:`msopt.run.preflight.hardware_probe` found).
Probes = list[tuple[str, dict[str, str]]]
#: Writes what a finished run leaves beside its journal (launch files, the report) from its best result and
#: its resolved workload (the report's trace panel: not read again).
Outputs = Callable[[Config, Path, EvaluationResult | None, ResolvedWorkload | None], None]


class PoolLauncher(Protocol):
    """Starts and stops the evaluation pool of a session.

    Attributes:
        slow: whether starting takes seconds (Ray): the prior is then searched in a thread
            meanwhile, and the outputs are written while it stops.
    """

    slow: bool

    def announce(self, say: Callable[[str], None]) -> None:
        """Say what a slow start is about to do (before the prior's search reports)."""

    def start(self, config: Config, parsed: Parsed, run_dir: Path, say: Callable[[str], None]) -> EvaluatorPool:
        """Start the pool (in the main thread: Ray ties its processes to the thread that started them); its
        evaluators take ``parsed``, the sections the run parsed once."""

    def hardware(self, say: Callable[[str], None]) -> Probes | None:
        """What each node's hardware is, for a real run's prior (None: it could not be probed)."""

    def stop(self) -> None:
        """Stop what :meth:`start` started beside the pool (after the pool is closed)."""


class Threads:
    """The in-process pool (``--no-ray``): ``size`` threads of this process, no device pinning.

    Args:
        size: concurrent evaluations (``--max-concurrent``; default 1).
    """

    slow = False

    def __init__(self, size: int | None = None) -> None:
        self.size = size or 1

    def announce(self, say: Callable[[str], None]) -> None:
        """Nothing to say: the threads start at once."""

    def start(self, config: Config, parsed: Parsed, run_dir: Path, say: Callable[[str], None]) -> EvaluatorPool:
        """The pool of threads."""
        return InProcessPool(config, size=self.size, run_dir=str(run_dir), parsed=parsed)

    def hardware(self, say: Callable[[str], None]) -> Probes | None:
        """This machine's hardware."""
        return [("", hardware_probe())]

    def stop(self) -> None:
        """Nothing beside the pool to stop."""


class Display(RunCallback, Protocol):
    """A progress display: a callback the session closes once (``{"interrupted": True}``: the run
    was interrupted; None: it stopped, by its end or an error)."""

    def close(self, summary: Mapping[str, Any] | None) -> None:
        """Close the display (a no-op the second time)."""


class _SigtermSeen:
    """The SIGTERM handler, remembering that SIGTERM came.

    Raising :class:`Terminated` is not enough on the Ray path: a signal that arrives while the
    driver waits inside ``ray.wait``/``ray.get`` is turned by Ray's core worker into a plain
    ``KeyboardInterrupt`` (its ``check_signals`` maps any KeyboardInterrupt to an "Interrupted"
    status, re-raised as ``KeyboardInterrupt()``; Ray 2.60 ``_raylet.pyx``), which would exit 130.
    """

    def __init__(self) -> None:
        self.seen = False

    def __call__(self, _signum: int, _frame: Any) -> None:
        self.seen = True
        raise Terminated


@dataclass(frozen=True)
class SessionResult:
    """How a session ended.

    Attributes:
        run_dir: the run directory (journal.jsonl, state.json, the records).
        outcome: the run's outcome (None: it was stopped).
        verdict: the verdict over the whole journal (None: stopped).
        stopped: ``"interrupted"`` (Ctrl-C), ``"terminated"`` (SIGTERM) or None (it ran to its end).
    """

    run_dir: Path
    outcome: RunOutcome | None
    verdict: Verdict | None
    stopped: str | None = None


def resume_store(run_dir: str | Path) -> tuple[Validated, RunStore]:
    """The run directory of ``--resume`` (locked before anything reads its journal: a second resume
    stops here) and its saved configuration, validated."""
    store = RunStore.open(run_dir)
    store.lock()
    try:
        store.check_config()
        checked = load(str(Path(run_dir) / "config.toml"), None, environ={})
    except BaseException:
        store.close()
        raise
    return checked, store


def _say(text: str) -> None:
    """Print one line at once (the prior's search reports from its own thread)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class RunSession:
    """One run (or the resumption of one), from its run directory to its verdict.

    Args:
        validated: the validated configuration (:func:`msopt.run.validate.load`); for
            ``--resume``, the first of :func:`resume_store`'s pair.
        store: the resumed run's directory (the second of :func:`resume_store`'s pair); None: a
            new run directory under ``output``.
        pools: starts the evaluation pool (default: :class:`Threads`, one thread).
        callbacks: receive every event of the run, after the store's.
        display: makes the progress display once the pool is up, from the run directory; it is
            closed when the run stops.
        outputs: write what the run leaves beside its journal once it ended (e.g.
            :func:`msopt.report.outputs.write_outputs`); a slow pool is stopped meanwhile.
        preflight: checks a real run makes before its pool starts (raises :class:`MsoptError`).
        say: where the session's lines go (the prior's progress, the run directory); default: stdout.
        meta: what run.json records beside the configuration (e.g. ``{"argv": sys.argv}``).
    """

    def __init__(self, validated: Validated, *, store: RunStore | None = None, pools: PoolLauncher | None = None,
                 callbacks: Sequence[RunCallback] = (), display: Callable[[Path], Display] | None = None,
                 outputs: Sequence[Outputs] = (), preflight: Callable[[Config], None] | None = None,
                 say: Callable[[str], None] | None = None, meta: Mapping[str, Any] | None = None) -> None:
        self.validated = validated
        self.config = validated.config
        self.pools: PoolLauncher = pools if pools is not None else Threads()
        self.callbacks = list(callbacks)
        self.display = display
        self.outputs = list(outputs)
        self.preflight = preflight
        self.say = say or _say
        self.meta = dict(meta or {})
        self._store = store
        self._ran = False

    def _open_store(self) -> tuple[RunStore, list[EvaluationResult]]:
        """The run directory (created for a new run, locked) and the journal of a resumed one."""
        store = self._store
        if store is None:
            store = RunStore.create(Path(self.config.run.output), self.config, meta=self.meta)
            store.lock()
            return store, []
        previous = store.load_journal()
        store.rebuild_results_csv()
        return store, previous

    def run(self) -> SessionResult:
        """Run (or resume) the optimization.

        Returns:
            The run directory, the outcome and the verdict; or, when Ctrl-C or SIGTERM stopped the
            run, ``stopped`` (the journal holds every finished evaluation: resume it).

        Raises:
            MsoptError: the configuration, the preflight or the pool refused to start (a new run
                directory is removed), or a fault stopped the run (its journal is intact).
        """
        if self._ran:
            raise RuntimeError("RunSession.run: a session runs once; make a new one (or resume its run directory)")
        self._ran = True
        checked = self.validated
        config = checked.config
        store, previous = self._open_store()
        if not config.run.simulate and self.preflight is not None:
            try:
                self.preflight(config)
            except MsoptError:
                _discard_if_empty(store, previous)
                raise
        shown: Display | None = None
        pool: EvaluatorPool | None = None
        search: PriorSearch | None = None
        outcome: RunOutcome | None = None
        outputs: threading.Thread | None = None  # the outputs, written while a slow pool stops
        # SIGTERM (ray job stop, kill) ends the run like Ctrl-C: the journal is already on disk
        on_term = _SigtermSeen()
        main = threading.current_thread() is threading.main_thread()  # only the main thread gets signals
        term_before = signal.signal(signal.SIGTERM, on_term) if main else None
        try:
            simulated = config.run.simulate
            prior = (make_prior(config, checked.space, setup=checked.simulator, workload=checked.resolved)
                     if simulated else None)
            if prior is not None:  # its search takes a while before the first launch: say how far it is
                prior.report = self.say
            self.pools.announce(self.say)
            if prior is not None and self.pools.slow:  # searched while the pool starts
                search = PriorSearch(prior, checked.swarm.seed)
            try:
                pool = self.pools.start(config, checked.parsed, store.run_dir, self.say)
            except MsoptError:
                _discard_if_empty(store, previous)
                raise
            if main:
                signal.signal(signal.SIGTERM, on_term)  # ray.init installed its own (a dump and exit 1)
            if search is not None:
                search.result()
            self.say(f"run directory: {store.run_dir}")
            callbacks = list(self.callbacks)
            if self.display is not None:
                shown = self.display(store.run_dir)
                callbacks.append(shown)
            if not simulated:
                table = real_prior_table(config, lambda: self.pools.hardware(self.say), store.run_dir, self.say,
                                         write=atomic_write)
                prior = make_prior(config, checked.space, simulator=table, workload=checked.resolved)
                if prior is not None:
                    prior.report = self.say
            outcome = optimize(checked, pool, callbacks=callbacks, store=store, previous=previous,
                               guide=PriorGuide(prior) if prior is not None else None)
        except KeyboardInterrupt as exc:
            if search is not None:
                search.stop()
            if shown is not None:
                shown.close({"interrupted": True})
            terminated = isinstance(exc, Terminated) or on_term.seen
            return SessionResult(store.run_dir, None, None, "terminated" if terminated else "interrupted")
        except (StoreError, FaultError) as exc:  # disk full, a bad environment, ...: every journaled result is safe
            raise type(exc)(f"{exc}; the run stopped with its journal intact: once fixed, continue with: "
                            f"msopt optimize --resume {store.run_dir}") from None
        finally:
            if search is not None:
                search.stop()  # a no-op once it ended
            if shown is not None:
                shown.close(None)  # a no-op once the run ended or was interrupted
            if pool is not None:
                pool.close()
            store.close()
            if outcome is not None and self.pools.slow and self.outputs:
                # Ray takes a second or two to stop: the outputs are written meanwhile
                outputs = threading.Thread(target=self._write_outputs, args=(store.run_dir, outcome.best),
                                           name="msopt-outputs")
                outputs.start()
            self.pools.stop()  # a no-op where nothing started
            if main:
                signal.signal(signal.SIGTERM, term_before)
        if outputs is not None:
            outputs.join()
        else:
            self._write_outputs(store.run_dir, outcome.best)
        return SessionResult(store.run_dir, outcome, self._verdict(store.run_dir, outcome))

    def _write_outputs(self, run_dir: Path, best: EvaluationResult | None) -> None:
        for write in self.outputs:
            write(self.config, run_dir, best, self.validated.resolved)

    def _verdict(self, run_dir: Path, outcome: RunOutcome) -> Verdict:
        """The run's verdict; a resumed run that never asked again for some journaled results (what
        it measured anew after the interruption led elsewhere) gets one over the whole journal, as
        the report does."""
        if outcome.verdict is not None and not outcome.unreplayed:
            return outcome.verdict
        return make_verdict(self.config, RunStore.open(run_dir).load_journal(), outcome.best,
                            mean_fitness=outcome.mean_fitness, measurements=outcome.measurements,
                            workload=self.validated.resolved)


def _discard_if_empty(store: RunStore, previous: list[EvaluationResult]) -> None:
    """Nothing ran: leave no empty run directory behind (a resumed one is kept)."""
    if not previous:
        store.close()
        shutil.rmtree(store.run_dir, ignore_errors=True)
