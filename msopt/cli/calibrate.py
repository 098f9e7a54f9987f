"""``msopt calibrate``: fit a simulator hardware entry to measured runs and write it as TOML.

Measurements are CSV files in the reference format (``docs/simulator.md``) or run directories
of real ``msopt optimize`` runs: each successful real evaluation of the journal is one measured
run; its launch and benchmark are rendered again from the run's config.toml to read the engine
knobs and the load, exactly as the simulated path reads them.
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from msopt.benchmarks import get_benchmark
from msopt.checks import is_finite
from msopt.config import Config
from msopt.engines import get_engine
from msopt.errors import ConfigError, MsoptError
from msopt.evaluate.workload import benchmark_table, simulator_workload
from msopt.launch.render import Candidate
from msopt.prior.source import user_set
from msopt.run.store import CONFIG, JOURNAL, RunStore, atomic_write
from msopt.run.validate import load
from msopt.sim.calibrate import (
    PROMPTS_PER_SLOT,
    Measurement,
    fit_hardware,
    group_errors,
    load_measurements_csv,
    mape,
    simulate_measurements,
)
from msopt.sim.catalog_load import entry_path, hardware_toml, load_hardware
from msopt.sim.hf_config import config_path
from msopt.sim.knobs import benchmark_overrides, load_overrides
from msopt.sim.launch_rules import LAUNCH_RULES
from msopt.sim.measured import SIDECAR_SUFFIX, is_measured_schema, load_measured_csv
from msopt.sim.personality import knobs_from_launch
from msopt.sim.workload import workload_from_mapping


def register(sub: Any) -> None:
    """Add the calibrate subcommand."""
    p = sub.add_parser("calibrate", help="fit a simulator hardware entry to measured runs; write it as TOML")
    p.add_argument("measurements", nargs="+", metavar="MEASUREMENTS",
                   help="CSV files in the reference format or the measured schema (../shared/measured), or run "
                        "directories of real 'msopt optimize' runs")
    p.add_argument("-e", "--engine", metavar="ENGINE", help="use only the runs of this engine (vllm, sglang, mindie)")
    p.add_argument("--hardware", metavar="NAME",
                   help="catalog name or TOML path to start from (default: the CSV's hardware column or the "
                        "run's [simulator] hardware)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="the hardware TOML to write (without it: no fit; each row is simulated on its own "
                        "catalog entry and the errors are printed per group)")
    p.add_argument("--name", metavar="NAME", help="name written into the TOML (default: the output file's stem)")
    p.add_argument("--folds", type=int, default=5, metavar="K",
                   help="cross-validation folds, rows grouped by configuration (0: skip; default 5)")
    p.add_argument("--rounds", type=int, default=3, metavar="N", help="step-halvings of the search (default 3)")
    p.add_argument("--regularization", type=float, default=0.001, metavar="W",
                   help="pull toward the starting entry (default 0.001)")
    p.add_argument("--prompts-per-slot", type=int, default=None, metavar="N",
                   help="simulated requests per row = N x concurrency when a row does not say (default 10, as "
                        "aiconfigurator's eval pipeline measured the reference rows)")
    p.add_argument("--engine-only", action="store_true",
                   help="fit only the per-engine overheads ([engines.<engine>]); keep the shared roofline factors, "
                        "so that the entry's other engines simulate as before")
    p.add_argument("--launch-rule", default="aiconfigurator", metavar="RULE",
                   help="server flags of CSV rows without a server_args column: 'aiconfigurator' (the flags "
                        "NVIDIA aiconfigurator's generator sets, which produced the reference CSVs; the default) or "
                        "'engine-defaults' (rows measured against a server started with its defaults)")
    p.add_argument("--held-out", nargs="+", default=[], metavar="MEASUREMENTS",
                   help="more CSV files or run directories, not fitted: scored with the fitted entry (the "
                        "error on runs the fit never saw)")
    p.add_argument("--seed", type=int, default=0, help="simulator seed (default 0)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_calibrate)


def _sim_catalog(config: Config) -> tuple[str | None, str | None, tuple[str, ...]]:
    table = config.simulator.table
    return table.get("hardware"), table.get("model"), config.catalog_dirs


def measurements_from_run(run_dir: Path, engine: str | None) -> tuple[list[Any], str | None]:
    """Measured runs of one ``msopt optimize`` run directory, and its ``[simulator] hardware``.

    Raises:
        ConfigError: the directory has no journal or config, or ``[simulator] model`` is not set.
    """
    if not (run_dir / JOURNAL).is_file() or not (run_dir / CONFIG).is_file():
        raise ConfigError(f"{run_dir}: not a run directory ({JOURNAL} and {CONFIG} expected); give a run "
                          "directory of 'msopt optimize' or a CSV file")
    store = RunStore.open(run_dir)
    checked = load(str(run_dir / CONFIG))
    config, resolved = checked.config, checked.resolved
    hw_name, model, dirs = _sim_catalog(config)
    found = None if user_set(config.simulator, "model") else config_path(
        get_engine(config.engine.name).model_path(config.engine.section.table))
    if found is not None:  # the model the run served, from its config.json (not the packaged default)
        model = str(found.parent)
    if not model:
        raise ConfigError(f"{run_dir / CONFIG}: [simulator] model is not set; add model = \"<catalog name or "
                          "TOML path>\" so that the runs can be simulated")
    if dirs and found is None:
        model = str(_resolve_model(model, dirs))
    adapter = get_engine(config.engine.name)
    bench_name = config.run.benchmark
    bench = get_benchmark(bench_name)
    base = simulator_workload(config, resolved)
    bench_table = benchmark_table(config, resolved)
    replay = resolved.replay_table() if resolved is not None else None
    if replay is not None:  # a measurement records the trace it replayed, as a table (it is simulated later)
        base["trace"] = replay
    replaying = {"workload": resolved} if replay is not None and bench.replays_trace else {}
    out: list[Measurement] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in store.load_journal():
            m = r.metrics
            ttft, tpot, speed = (m.get("time_to_first_token"), m.get("time_per_output_token"),
                                 m.get("generate_speed"))
            if r.error or not r.real_evaluation or r.reused:
                continue
            if not (is_finite(ttft) and is_finite(tpot) and is_finite(speed) and min(ttft, tpot, speed) > 0):
                continue
            spec = adapter.render(Candidate(r.values, config.engine.fields, config.engine.section.table), port=0,
                                  devices=list(r.devices), workdir=Path(tmp))
            knobs = knobs_from_launch(spec, adapter.sim_personality)
            if engine is not None and knobs.engine != engine:
                continue
            argv, _ = bench.render(Candidate(r.values, config.engine.fields, bench_table), server=spec,
                                   num_prompts=r.num_prompts, load=r.load, result_dir=Path(tmp), **replaying)
            # what the run sent, as the simulated path simulates it (msopt.evaluate.simulated): the
            # evaluation's own request count and load (a capacity probe's rate), whatever the benchmark's
            # command line spells (the builtin benchmark's is one JSON argument), and its load fields
            sent = {**base, **({"num_prompts": int(r.num_prompts)} if r.num_prompts else {})}
            field_load = {k: v for k, v in bench.field_load(r.values).items() if k not in r.load}
            wl = workload_from_mapping(sent).with_overrides(benchmark_overrides(argv)).with_overrides(
                load_overrides({**field_load, **dict(r.load)}))
            table = wl.as_mapping()
            c = int(wl.concurrency or 0)
            out.append(Measurement(
                knobs=knobs, model=model, input_len=wl.input_len if isinstance(wl.input_len, int) else 0,
                output_len=wl.output_len if isinstance(wl.output_len, int) else 0, concurrency=c,
                ttft_s=float(ttft), tpot_s=float(tpot), tokens_per_s=float(speed),
                weight_dtype=str(config.simulator.table.get("weight_dtype", "bf16")),
                kv_dtype=config.simulator.table.get("kv_dtype"),
                num_prompts=int(table["num_prompts"]), source=f"{run_dir / JOURNAL} eval {r.eval_id}",
                workload=table,
            ))
    return out, hw_name


def _resolve_model(model: str, dirs: Sequence[str]) -> Path:
    return entry_path("models", model, dirs)


def _fmt(err: Mapping[str, float]) -> str:
    return (f"TTFT {err['ttft']:6.1%}  TPOT {err['tpot']:6.1%}  tokens/s {err['tokens_per_s']:6.1%}  "
            f"refused {err['refused']}")


def _row_figures(rows: Sequence[Any], sim: Any) -> list[dict[str, Any]]:
    """Measured and simulated (ttft_s, tpot_s, tokens_per_s) of each row, for --json."""
    if sim is None:
        return []
    return [{"source": r.source, "measured": [float(v) for v in r.measured()],
             "simulated": [float(v) for v in s]} for r, s in zip(rows, sim)]


def _read_measurements(items: Sequence[str], args: argparse.Namespace, hw_names: set[str],
                       skipped: list[Any] | None = None) -> list[Any]:
    """The measured runs of CSV files and run directories; adds the hardware they name to ``hw_names``
    and the rows of measured-schema files that cannot be simulated to ``skipped``."""
    rows: list[Any] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            found, hw_name = measurements_from_run(path, args.engine)
            if hw_name:
                hw_names.add(str(hw_name))
        elif path.is_file():
            if path.name.endswith(SIDECAR_SUFFIX):
                main_csv = path.name.removesuffix(SIDECAR_SUFFIX) + ".csv"
                raise ConfigError(f"measurements {item!r}: the per-request lengths beside {main_csv}, not runs; "
                                  f"give {main_csv} (its rows replay these lengths)")
            with path.open(newline="") as f:
                measured = is_measured_schema(csv.DictReader(f).fieldnames)
            if measured:
                found, left = load_measured_csv(path, engine=args.engine)
                hw_names.update(m.hardware for m in found)
                if skipped is not None:
                    skipped += left
            else:
                found = load_measurements_csv(path, engine=args.engine, launch_rule=args.launch_rule)
                with path.open(newline="") as f:
                    hw_names.update(r["hardware"] for r in csv.DictReader(f) if r.get("hardware"))
        else:
            raise ConfigError(f"measurements {item!r}: no such file or directory; give CSV files or run directories")
        rows += found
    return rows


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Fit, print MAPE before / after / cross-validated, write the hardware TOML."""
    if args.launch_rule not in LAUNCH_RULES:
        raise ConfigError(f"--launch-rule {args.launch_rule!r} is not one of {', '.join(LAUNCH_RULES.names())}")
    hw_names: set[str] = set()
    skipped: list[Any] = []
    rows = _read_measurements(args.measurements, args, hw_names, skipped)
    held = _read_measurements(args.held_out, args, hw_names, skipped)
    if args.output is None:
        return _score(rows + held, skipped, args)
    if not rows:
        raise ConfigError("no usable measurements (successful real evaluations or CSV rows"
                          + (f" of engine {args.engine!r}" if args.engine else "") + "); nothing to calibrate")
    if args.hardware:
        start = load_hardware(args.hardware)
    elif len(hw_names) == 1:
        start = load_hardware(hw_names.pop())
    else:
        raise ConfigError(f"the measurements name hardware {sorted(hw_names) or 'none'}; pick the entry to fit "
                          "with --hardware NAME")
    if args.folds < 0 or args.rounds < 1 or args.regularization < 0:
        raise ConfigError("--folds must be >= 0, --rounds >= 1 and --regularization >= 0")
    out = Path(args.output)
    if out.suffix != ".toml":
        raise ConfigError(f"-o {args.output}: write a .toml file (it is used as [simulator] hardware = \"...\")")
    progress = None if args.json else print
    cal = fit_hardware(rows, start, regularization=args.regularization, rounds=args.rounds, folds=args.folds,
                       prompts_per_slot=args.prompts_per_slot or PROMPTS_PER_SLOT, seed=args.seed,
                       fit_shared=not args.engine_only, progress=progress)
    pps = args.prompts_per_slot or PROMPTS_PER_SLOT
    held_sim = simulate_measurements(held, cal.hardware, pps, args.seed) if held else None
    held_err = mape(held, held_sim) if held_sim is not None else {}
    name = args.name or out.stem
    hw = replace(cal.hardware, name=name,
                 description=f"{start.description} (calibrated by msopt calibrate on {len(rows)} runs)")
    engines = sorted({r.engine for r in rows})
    header = (f"Calibrated by `msopt calibrate` from {start.name} on {len(rows)} measured runs "
              f"({', '.join(engines)}; CSV rows launched by the {args.launch_rule!r} rule).\n"
              f"MAPE before: {_fmt(cal.before)}\nMAPE after:  {_fmt(cal.after)}")
    if cal.cross_validated:
        header += f"\n{args.folds}-fold cross-validated: {_fmt(cal.cross_validated)}"
    if held_err:
        header += f"\nheld out ({len(held)} runs, not fitted): {_fmt(held_err)}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        # replaced whole or not at all: an interrupted write never leaves half a TOML
        atomic_write(out, hardware_toml(hw, header).encode("utf-8"), mode=0o644, resume=False)
    except (OSError, MsoptError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise MsoptError(f"-o {args.output}: cannot write ({why or exc}); choose a writable path") from None
    load_hardware(out)  # what [simulator] hardware = "<file>" will read
    if args.json:
        print(json.dumps({"rows": len(rows), "before": cal.before, "after": cal.after,
                          "cross_validated": cal.cross_validated, "held_out": held_err,
                          "held_out_rows": _row_figures(held, held_sim), "factors": cal.factors,
                          "output": str(out)}))
    else:
        print(f"{len(rows)} measured runs ({', '.join(engines)}), starting from {start.name}")
        print(f"MAPE before:            {_fmt(cal.before)}")
        print(f"MAPE after (in-sample): {_fmt(cal.after)}")
        if cal.cross_validated:
            print(f"MAPE {args.folds}-fold cross-validated: {_fmt(cal.cross_validated)}")
        if held_err:
            print(f"MAPE held out ({len(held)} runs):  {_fmt(held_err)}")
        print("fitted: " + ", ".join(f"{k} = {v:.4g}" for k, v in cal.factors.items()))
        print(f"wrote {out}; use it with [simulator] hardware = \"{out}\"")
    return 0


def _score(rows: Sequence[Any], skipped: Sequence[Any], args: argparse.Namespace) -> int:
    """No fit: simulate each row on its own catalog entry, print the errors per group and the rows
    that were not simulated, with why."""

    pps = args.prompts_per_slot or PROMPTS_PER_SLOT
    sim = np.full((len(rows), 3), np.nan)
    for name in sorted({r.hardware for r in rows}):
        idx = [i for i, r in enumerate(rows) if r.hardware == name]
        if not name:
            raise ConfigError(f"{rows[idx[0]].source}: the row names no hardware; give -o and --hardware to fit one")
        sim[idx] = simulate_measurements([rows[i] for i in idx], load_hardware(name), pps, args.seed)
    groups = group_errors(rows, sim) if rows else {}
    total = mape(rows, sim) if rows else {}
    if args.json:
        print(json.dumps(_no_nan({
            "rows": len(rows), "errors": total, "groups": groups,
            "rows_detail": [{**f, "group": r.group, "assumed": list(r.assumed)}
                            for f, r in zip(_row_figures(rows, sim), rows)],
            "skipped": [{"source": k.source, "what": k.what, "reason": k.reason} for k in skipped]})))
        return 0
    print(f"{len(rows)} rows simulated, {len(skipped)} not simulated")
    for g, err in groups.items():
        rho = err["spearman"]
        print(f"  {g} ({int(err['rows'])} rows): {_fmt_nan(err)}  Spearman tokens/s "
              + ("n/a" if rho != rho else f"{rho:.2f}"))
    if rows:
        print(f"all rows: {_fmt_nan(total)}")
    assumed = Counter(a for r in rows for a in r.assumed)
    for what, n in assumed.most_common():
        print(f"assumed ({n} rows): {what}")
    reasons = Counter(k.reason for k in skipped)
    for reason, n in reasons.most_common():
        first = next(k for k in skipped if k.reason == reason)
        print(f"not simulated ({n} rows, e.g. {first.source}: {first.what}): {reason}")
    return 0


def _fmt_nan(err: Mapping[str, float]) -> str:
    def pct(v: float) -> str:
        return "   n/a" if v != v else f"{v:6.1%}"

    return (f"TTFT {pct(err['ttft'])}  TPOT {pct(err['tpot'])}  tokens/s {pct(err['tokens_per_s'])}  "
            f"refused {err['refused']}")


def _no_nan(value: Any) -> Any:
    """``value`` with every NaN float as None (JSON has no NaN: a figure not published or refused)."""
    if isinstance(value, float):
        return None if value != value else value
    if isinstance(value, Mapping):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_no_nan(v) for v in value]
    return value
