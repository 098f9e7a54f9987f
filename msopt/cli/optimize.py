"""``msopt optimize`` (also ``msopt optimizer``): run a tuning, locally or on a Ray cluster."""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msopt.benchmarks.engine_metrics import missing_metrics_warning
from msopt.cli.init import add_model_args, init_settings
from msopt.cli.preflight import cheap_preflight
from msopt.cli.progress import ProgressCallback, make_progress
from msopt.config import DEFAULTS_PATH, load_settings
from msopt.config.settings import file_engine
from msopt.engines.mindie.original import MINDIE_PD_UNSUPPORTED
from msopt.errors import ConfigError, Terminated
from msopt.evaluate.workload import replay_lines
from msopt.launch.render import command_table, split_others
from msopt.metrics import fitness_text
from msopt.report.outputs import write_outputs
from msopt.run.session import PoolLauncher, RunSession, Threads, resume_store
from msopt.run.store import RunStore
from msopt.run.validate import load_installed, registered_sections
from msopt.run.verdict import predicted_line
from msopt.slo import parse_slo, slo_table_text

if TYPE_CHECKING:
    from msopt.config import Config
    from msopt.run.events import RunOutcome
    from msopt.run.store import RunStore
    from msopt.run.validate import Validated
    from msopt.run.verdict import Verdict

__all__ = ["Terminated", "cmd_optimize", "register"]


def register(sub: Any) -> None:
    """Add the optimize subcommand (and its aliases: the original tool's name, and msmodeling optix's)."""
    aliases = {"optimizer": "alias of optimize (the original tool's name)",
               "optix": "alias of optimize (msmodeling optix's name, its defaults: -e mindie -b ais_bench)"}
    for name in ("optimize", *aliases):
        p = sub.add_parser(name, help=aliases.get(name, "tune the serving parameters (PSO over a Ray actor pool)"))
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
        # the original's spelling takes the original's defaults, -e mindie -b ais_bench (optimizer.py arg_parse), as
        # optix's does (Ascend/msmodeling docs/design/optix-service-parameter-optimizer-design.md, "CLI 参数")
        p.set_defaults(func=cmd_optimize, original_defaults=name in aliases)


def _original_flags(args: argparse.Namespace) -> None:
    """Refuse the original tool's flags msopt has another way for (docs/migrating.md); accept
    ``-d single`` and ``--pd competition``, which are what msopt does (``--pd disaggregation``: :func:`_load`)."""
    if args.load_breakpoint:
        raise ConfigError("-lb/--load_breakpoint: msopt continues a named run: msopt optimize --resume RUN_DIR "
                          "(run directories are under -o/output, the newest sorts last)")
    if args.deploy_policy == "multiple":
        raise ConfigError("-d/--deploy_policy multiple: msopt needs no master/slave processes; run the trials on a "
                          "Ray cluster (--address auto) and let one trial span nodes with [cluster] devices_per_trial "
                          "above devices_per_node (docs/engines.md, 'Trials that span nodes')")


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
        return resume_store(args.resume)
    if args.model is not None:
        if args.config is not None:
            raise ConfigError(f"--model builds the configuration (as msopt init does) and -c {args.config} names one; "
                              "drop one of them")
        return init_settings(args, _overrides(args)), None
    if args.devices is not None or args.workload is not None:
        raise ConfigError("--devices and --workload build a configuration with --model; with -c, set [cluster] "
                          "devices_per_trial and the benchmark's workload in the file")
    overrides = _overrides(args)
    engine, lines = _engine_and_benchmark(args, overrides)

    def refuse_pd(checked: Validated) -> None:
        if getattr(args, "pd", None) == "disaggregation" and "pd" not in checked.config.engine.section.table:
            # with a [<engine>.pd] table the file is disaggregated already; without one, say how to make it so
            raise ConfigError(f"--pd disaggregation: {MINDIE_PD_UNSUPPORTED}")

    loaded = load_installed(args.config, engine, overrides=overrides, check=refuse_pd)
    checked, got = loaded.checked, loaded.installed
    # every field's origin once one comes from the installation; else only where the trial's devices come from
    lines += got.lines if got.changes else [line for line in got.lines if line.startswith("devices per trial")]
    lines += [f"warning: {w}" for w in metrics_warnings(checked)]
    lines += replay_lines(checked.config, checked.resolved)
    for line in lines:
        print(line, flush=True)
    return checked, None


def metrics_warnings(checked: Validated) -> list[str]:
    """A real run replaying a trace with hash ids on an engine whose ``/metrics`` counters need a flag
    the launch lacks (SGLang's ``--enable-metrics``): one line saying so, as ``msopt validate`` says it."""
    config = checked.config
    if config.run.simulate or checked.trace is None:
        return []
    engine = config.engine.name
    section = config.engine.section.table
    try:
        flags = {f.config_position for f in config.engine.fields}
        flags |= set(split_others(command_table(section, engine).get("others", ""), {}, f"[{engine}.command]"))
    except ConfigError:  # an others the launch substitutes per trial: not knowable here
        return []
    hash_ids = checked.trace.prefix_ceiling is not None
    line = missing_metrics_warning(engine, {f.split("=", 1)[0] for f in flags}, hash_ids)
    return [line] if line else []


#: The original tool's defaults (msserviceprofiler@9582f434 optimizer/optimizer.py ``arg_parse``).
ORIGINAL_DEFAULTS = {"engine": "mindie", "benchmark": "ais_bench"}


def _engine_and_benchmark(args: argparse.Namespace, overrides: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The engine (for ``load``) and the first lines: which engine and benchmark the run uses, and why;
    ``msopt optimizer`` takes the original's defaults where neither a flag nor a file chooses."""
    settings = load_settings(args.config, args.engine, sections=registered_sections())
    chosen: dict[str, tuple[str, str]] = {}
    by_file = file_engine(settings.origin, settings.sources)
    for key, flag in (("engine", args.engine), ("benchmark", overrides.get("benchmark"))):
        source = settings.origin.get(key)
        if flag is not None:
            chosen[key] = (str(flag), f"-{key[0]}")
        elif source is not None and source != str(DEFAULTS_PATH):
            chosen[key] = (str(settings.get(key)), f"the '{key}' key of {source}")
        elif by_file is not None and key == "engine":
            chosen[key] = (by_file[0], by_file[1])
        elif by_file is not None and by_file[2] and chosen["engine"][0] == by_file[0]:
            chosen[key] = (by_file[2], by_file[1])
        elif args.original_defaults:
            chosen[key] = (ORIGINAL_DEFAULTS[key], "msopt optimizer takes the original tool's default")
        else:
            chosen[key] = (str(settings.get(key, "vllm" if key == "engine" else "vllm_benchmark")),
                           "msopt's default (msopt/config/defaults.toml)")
    # a benchmark the file itself names stays the file's (its errors name the file, not the command line)
    own = settings.origin.get("benchmark") not in (None, str(DEFAULTS_PATH))
    if (args.original_defaults or by_file) and "benchmark" not in overrides and not own:
        overrides["benchmark"] = chosen["benchmark"][0]
    engine = chosen["engine"][0] if args.engine is not None or args.original_defaults or by_file else args.engine
    lines = [f"{key}: {value} ({why})" for key, (value, why) in chosen.items()]
    return engine, lines


def cmd_optimize(args: argparse.Namespace) -> int:
    """Run (or resume) one optimization and print its run directory."""
    checked, store = _load(args)
    pools: PoolLauncher
    if args.no_ray:
        pools = Threads(args.max_concurrent)
    else:
        from actors.launcher import RayLauncher

        pools = RayLauncher(args.address, args.max_concurrent)
    preflight = None
    if not args.no_preflight:
        preflight = cheap_preflight
    if store is None and args.model is not None:  # created here to say at once where its configuration is
        store = RunStore.create(Path(checked.config.run.output), checked.config, meta={"argv": sys.argv})
        store.lock()
        saved = store.run_dir / "config.toml"
        print(f"configuration: built for --model {args.model} (as `msopt init` writes it), saved as {saved}; "
              f"run it again with: msopt optimize -c {saved}", flush=True)
    slos = checked.config.run.slos
    session = RunSession(checked, store=store, pools=pools, outputs=[write_outputs], preflight=preflight,
                         display=lambda run_dir: ProgressCallback(
                             make_progress(True if args.plain else None, slo_metrics=(slos.ttft_metric,
                                                                                      slos.tpot_metric)),
                             str(run_dir)),
                         meta={"argv": sys.argv})
    result = session.run()
    if result.stopped is not None:
        terminated = result.stopped == "terminated"
        how = "terminated (SIGTERM)" if terminated else "interrupted"
        print(f"msopt: {how}; continue with: msopt optimize --resume {result.run_dir}", file=sys.stderr)
        return 143 if terminated else 130
    assert result.outcome is not None and result.verdict is not None
    return _print_result(checked.config, result.run_dir, result.outcome, result.verdict)


def _print_result(config: Config, run_dir: Path, outcome: RunOutcome, verdict: Verdict) -> int:
    """The verdict and the recommendation; 1 when no evaluation succeeded."""
    best, mean, count = outcome.best, outcome.mean_fitness, outcome.measurements
    width = min(shutil.get_terminal_size((100, 24)).columns, 100)
    for line in verdict.lines():
        indent = " " * (len(line) - len(line.lstrip()))
        print(textwrap.fill(line, width, subsequent_indent=indent + "  ", break_long_words=False,
                            break_on_hyphens=False), file=sys.stdout if verdict.met_count else sys.stderr, flush=True)
    if best is None:
        print(run_dir)
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
        print(f"recommended: fitness {fitness_text(best.fitness, '.4f')} (lower is better; eval {best.eval_id}, "
              f"{how}):")
        print(textwrap.fill(shown, width, initial_indent="  ", subsequent_indent="  ", break_long_words=False))
    if best.predicted is not None and best.predicted.get("fitness") is not None:
        print(predicted_line(config, best.predicted))
    print(f"launch it: {run_dir / 'best_command.sh'}")
    print(run_dir)
    return 0
