"""``msopt simulate``: one simulated evaluation of a configuration, without Ray."""

from __future__ import annotations

import argparse
import json
import math
from typing import TYPE_CHECKING, Any

from msopt.errors import ConfigError

if TYPE_CHECKING:
    from msopt.config import Config
    from msopt.space import SearchSpace

import tempfile
import tomllib
from pathlib import Path

from msopt.config import load_settings, split
from msopt.engines import get_engine
from msopt.engines.installed import installed_changes
from msopt.evaluate.evaluator import Evaluator
from msopt.evaluate.results import EvalRequest
from msopt.metrics import fitness_text
from msopt.run.validate import registered_sections, validate
from msopt.sim.simulator import cache_block, launch_assumptions


def register(sub: Any) -> None:
    """Add the simulate subcommand."""
    p = sub.add_parser("simulate", help="run one simulated evaluation of the configuration's values")
    p.add_argument("-c", "--config", metavar="FILE", help="configuration file (highest layer)")
    p.add_argument("-e", "--engine", metavar="ENGINE", help="engine section (vllm, mindie, sglang)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a searched field's value (repeatable); VALUE is a TOML value or a bare string")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_simulate)


def parse_set(items: list[str]) -> dict[str, Any]:
    """Parse ``NAME=VALUE`` items; VALUE is read as a TOML value (8, 0.9, true, "x") or a string."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(f"--set {item!r} is not NAME=VALUE; write e.g. --set max_num_seqs=128")
        try:
            out[name] = tomllib.loads(f"v = {text.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            out[name] = text.strip()
    return out


def _valid_values(space: SearchSpace, name: str) -> str:
    """What a searched field accepts, in words: its candidates or its bounds."""
    t = space.field_type(name)
    dtype = t.decl.dtype
    if dtype == "bool":
        return "true or false"
    cands = t.candidates()
    if dtype != "int" and cands is not None:
        return "one of " + ", ".join(str(c).lower() if isinstance(c, bool) else repr(c) if isinstance(c, str)
                                     else str(c) for c in cands)
    if dtype == "int":
        lo, hi = t.bounds()
        return f"an integer from {int(lo + 0.5)} to {int(hi - 0.5)}"
    if dtype == "range":
        return f"a value from {t.decl.min:g} to {t.decl.max:g} in steps of {t.decl.dtype_param:g}"
    return f"a number from {t.decl.min:g} to {t.decl.max:g}"


def check_set(space: SearchSpace, name: str, value: Any) -> Any:
    """Return ``value`` if field ``name`` takes it exactly, else raise: a value the dtype would
    round, clip or coerce (``tp=3`` on an enum of 1, 2, 4, 8; ``enable_chunked_prefill=no``)
    would simulate another configuration than the one asked for.

    Raises:
        ConfigError: one line with the value and the field's valid values.
    """
    if name not in space.field_names:
        raise ConfigError(f"--set {name}: no such field; fields are: {', '.join(space.field_names)}")
    if name not in space.names:
        raise ConfigError(f"--set {name}: the field is derived or constant, not searched; set its sources "
                          f"({', '.join(space.names)})")
    t = space.field_type(name)
    dtype = t.decl.dtype
    refused = ConfigError(f"--set {name}={value!r}: {dtype} field '{name}' does not take this value; "
                          f"give {_valid_values(space, name)}")
    if isinstance(value, bool) != (dtype == "bool"):
        raise refused
    if dtype == "ratio":  # the value is the product int(ratio x target): any number the target allows
        if not isinstance(value, (int, float)):
            raise refused
        return value
    try:
        back = t.decode(t.encode(value, {}))
    except (ConfigError, TypeError, ValueError, OverflowError):
        raise refused from None
    if type(back) is not type(value) and not (isinstance(back, (int, float)) and isinstance(value, (int, float))):
        raise refused
    if back != value:
        raise refused
    return back


def cmd_simulate(args: argparse.Namespace) -> int:
    """Simulate the configuration at its values (overridden by --set)."""
    settings = load_settings(args.config, args.engine, sections=registered_sections()).replace(simulate=True)
    checked = validate(*split(settings), search=False)
    got = installed_changes(checked.config)  # the baseline a run takes from the installed config.json
    if got.changes:
        installed = settings.with_installed(got.values, got.constants, got.devices)
        checked = validate(*split(installed, checked.resolved), search=False)
    config, space = checked.config, checked.space
    overrides = {name: check_set(space, name, v) for name, v in parse_set(args.set).items()}
    position = space.encode(overrides)
    evaluator = Evaluator(config, simulate=True, parsed=checked.parsed)
    result = evaluator.evaluate(EvalRequest(0, "baseline", None, 0, tuple(position.tolist())))
    metrics = {k: result.metrics.get(k) for k in ("generate_speed", "time_to_first_token",
                                                   "time_per_output_token", "success_rate", "throughput")}
    failed = result.error is not None
    assumed = _assumed(config, result.values)
    if args.json:  # every line the text shows: the values, every metric measured, the fitness
        def number(v: Any) -> Any:
            return None if isinstance(v, float) and not math.isfinite(v) else v

        out: dict[str, Any] = {k: number(v) for k, v in metrics.items()}
        out.update({k: number(v) for k, v in result.metrics.items() if v is not None and k not in out})
        out["fitness"] = number(result.fitness)
        out["values"] = dict(result.values)
        out["error"] = result.error if failed else None
        out["refused"] = result.refused
        out["assumed"] = assumed
        print(json.dumps(out))
    else:
        for k, v in result.values.items():
            print(f"{k} = {v!r}")
        for k, v in result.metrics.items():
            if v is not None:
                print(f"{k}: {v:.6g}")
        if math.isfinite(result.fitness):
            print(f"fitness: {fitness_text(result.fitness, '.6g')}")
        if failed:
            print(f"error: {result.error}")
        for line in assumed:
            print(f"assumed: {line}")
    return 1 if failed else 0


def _assumed(config: Config, values: Any) -> list[str]:
    """The inputs the simulation assumed (:func:`msopt.sim.simulator.launch_assumptions`) for the
    configuration at ``values``; [] where the launch cannot be rendered alone (a disaggregated one)."""
    adapter = get_engine(config.engine.name)
    section = adapter.simulation_section(config.engine.section.table)
    if adapter.is_disaggregated(section):
        return []
    with tempfile.TemporaryDirectory() as tmp:
        spec = adapter.render(dict(values), config.engine.fields, section, port=0, devices=[], workdir=Path(tmp))
    return launch_assumptions(spec, config.simulator.table, adapter.sim_personality)


def cache_block_line(config: Config, space: SearchSpace, trace_block: int) -> str | None:
    """What validate says of the simulated prefix cache: the KV block size it keeps at the baseline's
    values (:func:`msopt.sim.simulator.cache_block`), against the trace's hash-id blocks; None without
    hash ids or for a launch that cannot be rendered alone (a disaggregated one)."""
    adapter = get_engine(config.engine.name)
    section = config.engine.section.table
    if not trace_block or adapter.is_disaggregated(section):
        return None
    values = space.decode(space.encode({})).values
    with tempfile.TemporaryDirectory() as tmp:
        spec = adapter.render(dict(values), config.engine.fields, section, port=0, devices=[], workdir=Path(tmp))
    size, why = cache_block(spec, config.simulator.table, adapter.sim_personality)
    line = f"the simulated prefix cache keeps {size}-token KV blocks ({why})"
    if size != trace_block:
        line += (f"; the trace's hash ids are {trace_block}-token blocks, so a prompt hits up to the last whole "
                 f"{size}-token block it shares")
    return line
