"""``msopt optimize`` (also ``msopt optimizer``): run a tuning, locally or on a Ray cluster."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msopt.errors import ConfigError, FaultError, MsoptError

if TYPE_CHECKING:
    from msopt.config import Settings
    from msopt.evaluate.prior import SimulatorPrior
    from msopt.evaluate.results import EvaluationResult
    from msopt.run.events import RunOutcome
    from msopt.run.pool import EvaluatorPool
    from msopt.run.store import RunStore
    from msopt.run.validate import Validated


def register(sub: Any) -> None:
    """Add the optimize subcommand (and its original-tool alias)."""
    for name in ("optimize", "optimizer"):
        p = sub.add_parser(name, help="tune the serving parameters (PSO over a Ray actor pool)"
                           if name == "optimize" else "alias of optimize (the original tool's name)")
        p.add_argument("-c", "--config", metavar="FILE", help="configuration file (highest layer)")
        p.add_argument("-e", "--engine", metavar="ENGINE", help="engine section to search (vllm, mindie, sglang)")
        p.add_argument("-b", "--benchmark", "--benchmark_policy", dest="benchmark", metavar="BENCHMARK",
                       help="benchmark adapter (vllm_benchmark, ais_bench, builtin); --benchmark_policy is the "
                            "original tool's spelling")
        p.add_argument("--simulate", action="store_true", default=None,
                       help="evaluate with the embedded simulator instead of launching the engine")
        p.add_argument("-o", "--output", metavar="DIR", help="parent directory of run directories")
        p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR whose driver died")
        p.add_argument("--seed", type=int, help="seed of the swarm, the simulator and the workload")
        p.add_argument("--mode", choices=("sync", "async"), help="sync iterations or async particles")
        p.add_argument("--address", metavar="ADDR",
                       help="join this Ray cluster ('auto': the running one / RAY_ADDRESS); "
                            "default: start a local instance")
        p.add_argument("--max-concurrent", type=int, metavar="N", help="cap on concurrent evaluations")
        p.add_argument("--particles", type=int, metavar="N", help="swarm size (n_particles)")
        p.add_argument("--iters", type=int, metavar="N", help="swarm iterations (iters)")
        p.add_argument("--max-launches", type=int, metavar="N",
                       help="launch budget (max_launches): baseline, search, re-measurements (the baseline's "
                            "too) and capacity probes together, a resumed run's journal included; failures "
                            "count, reuse and start-up refusals are free; 0: iters decides")
        from msopt.cli.init import add_model_args

        add_model_args(p, required=False)  # without -c: the configuration `msopt init` would write
        p.add_argument("--slo", metavar="SLOS",
                       help='the SLOs as one string, e.g. "ttft:p99<500ms,tpot:p95<50ms,success>=0.99" '
                            "(mean, p50, p90, p95, p99; ms or s): replaces those metrics' [slo] / ttft_slo, ...")
        p.add_argument("--backup", action="store_true", default=None,
                       help="keep what every evaluation launched: its command line, environment and files (MindIE's "
                            "config.json as edited) in RUN_DIR/backup/, and the originals of files edited in place "
                            "(backup = true)")
        p.add_argument("--plain", action="store_true", help="one plain line per event instead of the live table")
        p.add_argument("--no-ray", action="store_true",
                       help="evaluate in threads of this process (debugging; no device pinning)")
        p.add_argument("--no-preflight", action="store_true",
                       help="skip the quick preflight checks (executable, model path, config.json, fixed "
                            "ports) this machine runs before a real run's baseline")
        # the original tool's flags (ms_serviceparam_optimizer optimizer/optimizer.py arg_parse,
        # msserviceprofiler@9582f434): what msopt does anyway is accepted, the rest refused in one line
        p.add_argument("-lb", "--load_breakpoint", action="store_true", help=argparse.SUPPRESS)
        p.add_argument("-d", "--deploy_policy", choices=("single", "multiple"), help=argparse.SUPPRESS)
        p.add_argument("--pd", choices=("competition", "disaggregation"), help=argparse.SUPPRESS)
        # the original's spelling takes the original's defaults, -e mindie -b ais_bench (optimizer.py arg_parse)
        p.set_defaults(func=cmd_optimize, original_defaults=name == "optimizer")


def _original_flags(args: argparse.Namespace) -> None:
    """Refuse the original tool's flags msopt has another way for (docs/migrating.md); accept
    ``-d single`` and ``--pd competition``, which are what msopt does."""
    if args.load_breakpoint:
        raise ConfigError("-lb/--load_breakpoint: msopt continues a named run: msopt optimize --resume RUN_DIR "
                          "(run directories are under -o/output, the newest sorts last)")
    if args.deploy_policy == "multiple":
        raise ConfigError("-d/--deploy_policy multiple: msopt needs no master/slave processes; run the trials on a "
                          "Ray cluster (--address auto) and let one trial span nodes with [cluster] devices_per_trial "
                          "above devices_per_node (docs/engines.md, 'Trials that span nodes')")
    if args.pd == "disaggregation":
        from msopt.engines.mindie_original import MINDIE_PD_UNSUPPORTED

        raise ConfigError(f"--pd disaggregation: {MINDIE_PD_UNSUPPORTED}")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for flag, key in (("particles", "n_particles"), ("iters", "iters"), ("seed", "seed"), ("mode", "mode"),
                      ("benchmark", "benchmark"), ("output", "output"),
                      ("max_launches", "max_launches")):
        v = getattr(args, flag)
        if v is not None:
            out[key] = v
    if args.simulate:
        out["simulate"] = True
    if args.backup:
        out["backup"] = True
    if args.slo is not None:
        from msopt.slo import parse_slo, slo_table_text

        out["slo"] = slo_table_text(parse_slo(args.slo))
    if "n_particles" in out and not 1 <= out["n_particles"] <= 100_000:
        raise ConfigError(f"--particles {out['n_particles']} must be from 1 to 100000")
    if "iters" in out and out["iters"] < 0:
        raise ConfigError(f"--iters {out['iters']} must be >= 0")
    if "seed" in out and out["seed"] < 0:
        raise ConfigError(f"--seed {out['seed']} must be >= 0")
    if "max_launches" in out and out["max_launches"] < 0:
        raise ConfigError(f"--max-launches {out['max_launches']} must be >= 0 (0: no budget)")
    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise ConfigError(f"--max-concurrent {args.max_concurrent} must be >= 1")
    return out


def _load(args: argparse.Namespace) -> tuple[Validated, RunStore | None]:
    """The validated settings of a new run (with the command-line overrides) or of ``--resume``."""
    from msopt.run.store import RunStore
    from msopt.run.validate import load

    _original_flags(args)

    if args.resume:
        given = [flag for flag, v in (("-c", args.config), ("-e", args.engine), ("-b", args.benchmark),
                                      ("--simulate", args.simulate), ("-o", args.output), ("--seed", args.seed),
                                      ("--mode", args.mode), ("--particles", args.particles),
                                      ("--iters", args.iters), ("--backup", args.backup),
                                      ("--slo", args.slo), ("--model", args.model)) if v is not None]
        if given:
            raise ConfigError(f"--resume continues the run with the configuration saved in {args.resume}; drop "
                              f"{', '.join(given)} (a different configuration is a new run: use -c)")
        store = RunStore.open(args.resume)
        store.lock()  # before anything reads the journal: a second resume stops here
        try:
            store.check_config()
            checked = load(str(Path(args.resume) / "config.toml"), None, environ={})
        except BaseException:
            store.close()
            raise
        return checked, store
    if args.model is not None:
        if args.config is not None:
            raise ConfigError(f"--model builds the configuration (as msopt init does) and -c {args.config} names one; "
                              "drop one of them")
        from msopt.cli.init import init_settings

        return init_settings(args, _overrides(args)), None
    if args.devices is not None or args.workload is not None:
        raise ConfigError("--devices and --workload build a configuration with --model; with -c, set [cluster] "
                          "devices_per_trial and the benchmark's workload in the file")
    overrides = _overrides(args)
    engine, lines = _engine_and_benchmark(args, overrides)
    checked = load(args.config, engine, overrides=overrides)
    if not checked.settings.config.run.simulate:
        from msopt.engines.installed import installed_baseline
        from msopt.run.validate import validate

        values, said = installed_baseline(checked.settings)
        checked = validate(checked.settings.with_field_values(values)) if values else checked
        lines += said
    for line in lines:
        print(line, flush=True)
    return checked, None


#: The original tool's defaults (msserviceprofiler@9582f434 optimizer/optimizer.py ``arg_parse``).
ORIGINAL_DEFAULTS = {"engine": "mindie", "benchmark": "ais_bench"}


def _engine_and_benchmark(args: argparse.Namespace, overrides: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The engine (for ``load``) and the first lines: which engine and benchmark the run uses, and why;
    ``msopt optimizer`` takes the original's defaults where neither a flag nor a file chooses."""
    from msopt.config import DEFAULTS_PATH, load_settings
    from msopt.run.validate import registered_sections

    settings = load_settings(args.config, args.engine, sections=registered_sections())
    chosen: dict[str, tuple[str, str]] = {}
    for key, flag in (("engine", args.engine), ("benchmark", overrides.get("benchmark"))):
        source = settings.origin.get(key)
        if flag is not None:
            chosen[key] = (str(flag), f"-{key[0]}")
        elif source is not None and source != str(DEFAULTS_PATH):
            chosen[key] = (str(settings.get(key)), f"the '{key}' key of {source}")
        elif args.original_defaults:
            chosen[key] = (ORIGINAL_DEFAULTS[key], "msopt optimizer takes the original tool's default")
        else:
            chosen[key] = (str(settings.get(key, "vllm" if key == "engine" else "vllm_benchmark")),
                           "msopt's default (msopt/config/defaults.toml)")
    if args.original_defaults and "benchmark" not in overrides:
        overrides["benchmark"] = chosen["benchmark"][0]
    engine = chosen["engine"][0] if args.engine is not None or args.original_defaults else args.engine
    lines = [f"{key}: {value} ({why})" for key, (value, why) in chosen.items()]
    return engine, lines


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``ray job stop``): stops the run as Ctrl-C does, exit status 143."""


class _SigtermSeen:
    """The SIGTERM handler, remembering that SIGTERM came.

    Raising :class:`Terminated` is not enough on the Ray path: a signal that arrives while the
    driver waits inside ``ray.wait``/``ray.get`` is turned by Ray's core worker into a plain
    ``KeyboardInterrupt`` (its ``check_signals`` maps any KeyboardInterrupt to an "Interrupted"
    status, re-raised as ``KeyboardInterrupt()``; Ray 2.60 ``_raylet.pyx``), which would exit 130.
    """

    def __init__(self) -> None:
        self.seen = False

    def __call__(self, signum: int, frame: Any) -> None:
        self.seen = True
        raise Terminated


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else 'no message'}"


def _write_outputs(settings: Any, run_dir: Path, best: Any) -> None:
    """The best configuration's launch files and the report; a failure here costs one line on
    stderr, never the run (everything needed to retry is in the run directory)."""
    try:
        from msopt.report.export import export_best

        if best is not None:
            export_best(settings, best.values, run_dir, eval_id=best.eval_id, fitness=best.fitness)
    except Exception as exc:  # noqa: BLE001  the run is done and journaled; say so and go on
        print(f"msopt: warning: could not write the best configuration's launch command "
              f"({_one_line(exc)})", file=sys.stderr)
    try:
        from msopt.report.html import write_report

        print(f"report: {write_report(run_dir, export=False)}", flush=True)
    except Exception as exc:  # noqa: BLE001
        print(f"msopt: warning: could not write the report ({_one_line(exc)}); retry with: "
              f"msopt report {run_dir}", file=sys.stderr)


def _real_prior_table(settings: Settings, *, ray_nodes: bool, run_dir: Path) -> dict[str, Any] | None:
    """A real run's prior: its model from the model's config.json and its hardware from the nodes
    (a Ray task per node, or this machine), unless ``[simulator]`` sets them; prints what it uses."""
    from msopt.evaluate.prior import prior_options
    from msopt.run.prior_source import prior_source, user_set

    if prior_options(settings).mode == "none":
        return None
    probes: list[tuple[str, dict[str, str]]] | None = None
    if not user_set(settings, "hardware"):
        if ray_nodes:
            from actors.preflight import cluster_hardware

            try:
                probes = cluster_hardware()
            except Exception as exc:  # noqa: BLE001  a node that cannot be probed costs the prior, not the run
                print(f"prior: the nodes could not be probed for their hardware ({_one_line(exc)})", flush=True)
        else:
            from msopt.run.preflight import hardware_probe

            probes = [("", hardware_probe())]
    source = prior_source(settings, probes, run_dir)
    for line in source.lines:
        print(line, flush=True)
    return source.table


def _open_store(args: argparse.Namespace, checked: Validated,
                store: RunStore | None) -> tuple[RunStore, list[EvaluationResult]]:
    """The run directory (created for a new run, locked) and the journal of a resumed one."""
    from msopt.run.store import RunStore

    settings = checked.settings
    if store is None:
        store = RunStore.create(Path(settings.config.run.output), settings, meta={"argv": sys.argv})
        store.lock()
        return store, []
    previous = store.load_journal()
    store.rebuild_results_csv()
    return store, previous


def _discard_if_empty(store: RunStore, previous: list[EvaluationResult]) -> None:
    """Nothing ran: leave no empty run directory behind (a resumed one is kept)."""
    if not previous:
        store.close()
        shutil.rmtree(store.run_dir, ignore_errors=True)


class _Stopped(Exception):
    """Ends a :class:`_PriorSearch` that is no longer wanted."""


class _PriorSearch:
    """The simulator prior's search, run in a thread while the main thread starts Ray and the
    actor pool (seconds of ray.init and of actors starting, mostly spent waiting).

    Ray must be started by the main thread, not this one: its processes get SIGKILL when the
    thread that started them ends (Ray's fate sharing sets ``prctl(PR_SET_PDEATHSIG)``, which
    follows the thread).
    """

    def __init__(self, prior: SimulatorPrior, seed: int | None) -> None:
        self.error: BaseException | None = None
        self._stop = threading.Event()
        report = prior.report

        def tell(text: str) -> None:  # the search reports every tenth of its budget: where it can stop
            if self._stop.is_set():
                raise _Stopped
            if report is not None:
                report(text)

        prior.report = tell
        self._thread = threading.Thread(target=self._run, args=(prior, seed, report), name="msopt-prior-search",
                                        daemon=True)
        self._thread.start()

    def _run(self, prior: SimulatorPrior, seed: int | None, report: Callable[[str], None] | None) -> None:
        try:
            prior.search_for_run(seed)
        except _Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001  raised again in the main thread, by result()
            self.error = exc
        finally:
            prior.report = report

    def result(self) -> None:
        """Wait for the search to end; raises what it raised."""
        self._thread.join()
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        """End the search at its next report (the run stops) and wait for it."""
        self._stop.set()
        self._thread.join()


def _announce_ray(args: argparse.Namespace) -> None:
    """ray.init takes seconds: say what the silence is."""
    where = args.address or os.environ.get("RAY_ADDRESS")
    print(f"joining the Ray cluster at {where} ..." if where else "starting Ray ...", flush=True)


def _make_pool(args: argparse.Namespace, settings: Settings, store: RunStore, on_term: _SigtermSeen,
               previous: list[EvaluationResult]) -> tuple[EvaluatorPool, object]:
    """The evaluation pool (threads with --no-ray, else Ray actors) and what init_ray started
    (a LocalCluster for multi-node simulation; False: nothing to shut down)."""
    from msopt.run.pool import InProcessPool

    if args.no_ray:
        return InProcessPool(settings, size=args.max_concurrent or 1, run_dir=str(store.run_dir)), False
    from actors.pool import RayPool, init_ray

    simulate = settings.config.run.simulate
    cap = args.max_concurrent or settings.config.cluster.max_concurrent_trials
    slots = min(settings.n_particles, cap) if cap else settings.n_particles
    try:
        started = init_ray(settings, args.address, simulate=simulate, slots=slots)
        signal.signal(signal.SIGTERM, on_term)  # ray.init installed its own (a dump and exit 1)
        return RayPool(settings, simulate=simulate, run_dir=str(store.run_dir),
                       max_concurrent=args.max_concurrent or 0), started
    except MsoptError:
        _discard_if_empty(store, previous)
        raise


def _say(text: str) -> None:
    """Print one line at once (the prior's search reports from its own thread)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def cmd_optimize(args: argparse.Namespace) -> int:
    """Run (or resume) one optimization and print its run directory."""
    checked, store = _load(args)
    settings = checked.settings
    from msopt.cli.progress import ProgressCallback, make_progress
    from msopt.evaluate.prior import make_prior
    from msopt.run.driver import optimize
    from msopt.run.store import StoreError

    store, previous = _open_store(args, checked, store)
    if args.model is not None:
        saved = store.run_dir / "config.toml"
        print(f"configuration: built for --model {args.model} (as `msopt init` writes it), saved as {saved}; "
              f"run it again with: msopt optimize -c {saved}", flush=True)
    if not settings.config.run.simulate and not args.no_preflight:
        from msopt.cli.preflight import cheap_preflight

        try:
            cheap_preflight(settings)
        except MsoptError:
            _discard_if_empty(store, previous)
            raise
    shown: ProgressCallback | None = None
    pool: EvaluatorPool | None = None
    started_ray: object = False
    search: _PriorSearch | None = None
    outcome: RunOutcome | None = None
    outputs: threading.Thread | None = None  # the report, written while Ray stops
    # SIGTERM (ray job stop, kill) ends the run like Ctrl-C: the journal is already on disk
    on_term = _SigtermSeen()
    term_before = signal.signal(signal.SIGTERM, on_term)
    try:
        simulated = settings.config.run.simulate
        prior = make_prior(settings, checked.space) if simulated else None
        if prior is not None:  # its search takes a while before the first launch: say how far it is
            prior.report = _say
        if not args.no_ray:
            _announce_ray(args)
            if prior is not None:  # searched while Ray starts
                search = _PriorSearch(prior, checked.swarm.seed)
        pool, started_ray = _make_pool(args, settings, store, on_term, previous)
        if search is not None:
            search.result()
        print(f"run directory: {store.run_dir}", flush=True)
        slos = settings.config.run.slos
        shown = ProgressCallback(make_progress(True if args.plain else None,
                                               slo_metrics=(slos.ttft_metric, slos.tpot_metric)), str(store.run_dir))
        if not simulated:
            table = _real_prior_table(settings, ray_nodes=not args.no_ray, run_dir=store.run_dir)
            prior = make_prior(settings, checked.space, simulator=table)
            if prior is not None:
                prior.report = _say
        outcome = optimize(checked, pool, callbacks=[shown], store=store, previous=previous, prior=prior)
    except KeyboardInterrupt as exc:
        if search is not None:
            search.stop()
        if shown is not None:
            shown.close({"interrupted": True})
        terminated = isinstance(exc, Terminated) or on_term.seen
        how = "terminated (SIGTERM)" if terminated else "interrupted"
        print(f"msopt: {how}; continue with: msopt optimize --resume {store.run_dir}", file=sys.stderr)
        return 143 if terminated else 130
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
        if started_ray:
            from actors.pool import shutdown_ray

            if outcome is not None:  # Ray takes a second or two to stop: the report is drawn meanwhile
                outputs = threading.Thread(target=_write_outputs, args=(settings, store.run_dir, outcome.best),
                                           name="msopt-outputs")
                outputs.start()
            shutdown_ray(started_ray)
        signal.signal(signal.SIGTERM, term_before)
    assert outcome is not None
    if outputs is not None:
        outputs.join()
    else:
        _write_outputs(settings, store.run_dir, outcome.best)
    return _print_result(settings, store, outcome)


def _print_result(settings: Settings, store: RunStore, outcome: RunOutcome) -> int:
    """The verdict and the recommendation; 1 when no evaluation succeeded."""
    best, mean, count = outcome.best, outcome.mean_fitness, outcome.measurements
    verdict = outcome.verdict
    if verdict is None or outcome.unreplayed:
        # a resumed run that never asked again for some journaled results (what it measured anew
        # after the interruption led elsewhere): the verdict covers the whole journal, as the report does
        from msopt.run.store import RunStore
        from msopt.run.verdict import make_verdict

        verdict = make_verdict(settings, RunStore.open(store.run_dir).load_journal(), best,
                               mean_fitness=mean, measurements=count)
    width = min(shutil.get_terminal_size((100, 24)).columns, 100)
    for line in verdict.lines():
        indent = " " * (len(line) - len(line.lstrip()))
        print(textwrap.fill(line, width, subsequent_indent=indent + "  ", break_long_words=False,
                            break_on_hyphens=False), file=sys.stdout if verdict.met_count else sys.stderr, flush=True)
    if best is None:
        print(store.run_dir)
        return 1
    shown = verdict.shown_values()
    if best.phase == "capacity":
        load = ", ".join(f"{k}={v}" for k, v in best.load.items())
        print(f"best goodput {best.metrics.get('generate_speed') or 0:.1f} tok/s at {load} "
              f"(eval {best.eval_id}, capacity): {shown}")
    else:
        how = best.phase
        if best.phase == "refine":
            how = f"re-measured with the full workload; mean of {count} measurements {mean:.4f}"
        print(f"recommended: fitness {best.fitness:.4f} (lower is better; eval {best.eval_id}, {how}):")
        print(textwrap.fill(shown, width, initial_indent="  ", subsequent_indent="  ", break_long_words=False))
    if best.predicted is not None and best.predicted.get("fitness") is not None:
        from msopt.run.verdict import predicted_line

        print(predicted_line(settings, best.predicted))
    print(f"launch it: {store.run_dir / 'best_command.sh'}")
    print(store.run_dir)
    return 0
