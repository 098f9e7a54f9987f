"""The ``msopt`` command line: argument parsing and wiring (the composition root).

Every subcommand reports an :class:`MsoptError` as one line on stderr with exit code 2;
anything else is a bug and keeps its traceback. Heavy imports (Ray, the simulator) happen
inside the subcommands that need them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from msopt._version import __version__
from msopt.cli import calibrate, init, optimize, preflight, report, serve, simulate
from msopt.engines.rules import advisories
from msopt.errors import ConfigError, DecodeError, MsoptError
from msopt.evaluate.workload import benchmark_table
from msopt.run.validate import load, load_installed
from msopt.slo import slo_checks
from msopt.space import DecodeContext

if TYPE_CHECKING:
    from msopt.run.validate import Validated


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, as for MsoptError
        self.exit(2, f"msopt: error: {message} (see 'msopt {self.prog.split()[-1]} --help')\n"
                  if " " in self.prog else f"msopt: error: {message} (see 'msopt --help')\n")


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    return value


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--config", metavar="FILE",
                   help="configuration file (highest layer; absolute, relative or a bare name in the "
                        "current directory)")
    p.add_argument("-e", "--engine", metavar="ENGINE",
                   help="section whose target_field list is searched (vllm, mindie, sglang, ...); "
                        "default: the config's 'engine' key, else vllm")


def _load(args: argparse.Namespace) -> Validated:
    return load(args.config, args.engine)


def cmd_validate(args: argparse.Namespace) -> int:
    """Load and check the configuration, print the dimensions and derived fields (``--json``: the same
    notes as fields, and every line the text prints under ``lines``)."""
    loaded = load_installed(args.config, args.engine)  # with what a run takes from the installed configuration
    checked, got = loaded.checked, loaded.installed
    config, space = checked.config, checked.space
    lines: list[str] = [f"configuration OK: {' < '.join(config.scalars.layers)}",
                        f"engine: {config.engine.name}; {len(space.dimensions)} dimension(s), "
                        f"{len(space.derived)} derived field(s)"]
    searcher = config.run.searcher
    if searcher == "auto":
        searcher = ("auto (the swarm and tpe, split by the trust the prior earns; tpe where no prior can be built and "
                    "a launch budget is set)")
    lines.append(f"searcher: {searcher}, {config.run.n_particles} evaluation(s) in flight ({config.run.mode})")
    slos = [f"{c.metric} {c.bound}" for c in slo_checks(config.run.slos, {})]
    lines.append("SLOs: " + ", ".join(slos))
    workload: dict[str, Any] | None = None
    if checked.trace is not None:
        tr = checked.trace
        bench = config.run.benchmark
        real = "" if config.run.simulate else (
            f"; {bench} replays it too, each request at its trace time, equal hash ids as token-identical "
            "prompt blocks, and reads the server's prefix-cache hits")
        notes = [*tr.lines(), "the simulator replays its arrivals and lengths (and the engine's prefix cache on "
                 "its hash ids)" + real]
        notes += list(checked.notes)
        if config.run.simulate:
            block = simulate.cache_block_line(config, space, tr.block_size)
            notes += [block] if block else []
        lines.append(f"workload: trace {config.workload.get('trace')} ({tr.format})")
        lines.extend(f"  {line}" for line in notes)
        workload = {"trace": config.workload.get("trace"), **tr.as_dict(), "notes": notes}
    for d in space.dimensions:
        cands = ""
        if d.dtype == "int":
            cands = f" integers {math.ceil(d.low)}..{math.floor(d.high)}"
        elif d.candidates is not None:
            shown = list(d.candidates)
            cands = f" candidates {shown[:12]}{' ...' if len(shown) > 12 else ''}"
        lines.append(f"  {d.name:<32} {d.dtype:<8} [{d.low:g}, {d.high:g}]{cands}")
    for name in space.derived:
        t = space.field_type(name)
        lines.append(f"  {name:<32} {t.decl.dtype} (derived from {', '.join(t.deps)})")
    const = [f.name for f in config.engine.fields
             if f.name not in space.names and f.name not in space.derived]
    if const:
        lines.append(f"  constant: {', '.join(const)}")
    engine_notes = list(checked.engine.notes(config.engine.section.table))
    bench_notes = (list(checked.benchmark.notes(benchmark_table(config, checked.resolved)))
                   if not config.run.simulate and checked.benchmark is not None else [])
    original = list(loaded.notes)
    devices = [line for line in got.lines if line.startswith("devices per trial")]
    installed = list(got.lines if got.changes else devices)  # every field's origin, once one is installed
    warnings = [*advisories(checked.engine.advisories, config.engine.fields, config.engine.section.table),
                *optimize.metrics_warnings(checked)]
    lines.extend(f"{config.engine.name}: {line}" for line in engine_notes)
    lines.extend(f"{config.run.benchmark}: {line}" for line in bench_notes)
    lines.extend(f"original tool: {line}" for line in original)
    lines.extend(f"installed: {line}" for line in installed)
    lines.extend(f"warning: {line}" for line in warnings)
    if not args.json:
        for line in lines:
            print(line)
        return 0
    out: dict[str, Any] = {
        "layers": list(config.scalars.layers),
        "engine": config.engine.name,
        "searcher": config.run.searcher,
        "slos": slos,
        "dimensions": [{"name": d.name, "dtype": d.dtype, "low": d.low, "high": d.high,
                        "candidates": list(d.candidates) if d.candidates is not None and d.dtype != "int" else None}
                       for d in space.dimensions],
        "derived": list(space.derived),
        "constant": const,
        "settings": dict(config.scalars.table),
        "engine_notes": engine_notes,
        "benchmark_notes": bench_notes,
        "original_tool": original,
        "installed": installed,
        "warnings": warnings,
        "lines": lines,
    }
    if workload is not None:
        out["workload"] = workload
    print(json.dumps(_jsonable(out)))
    return 0


def _parse_position(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip() != ""]
    except ValueError:
        raise ConfigError(f"--position {text!r} is not a comma-separated list of numbers; "
                          "write e.g. --position 0.5,0.2,128") from None


def cmd_decode(args: argparse.Namespace) -> int:
    """Decode one position with an optional DecodeContext."""
    space = _load(args).space
    position = _parse_position(args.position)
    ctx = None
    if args.particle is not None or args.particles is not None or args.iteration is not None:
        if args.particle is None or args.particles is None:
            raise ConfigError("--particle and --particles go together; give both (and --iteration)")
        if not 0 <= args.particle < args.particles:
            raise ConfigError(f"--particle {args.particle} is not in [0, --particles {args.particles})")
        ctx = DecodeContext(args.particle, args.particles, args.iteration or 0)
    try:
        decoded = space.decode(position, ctx)
    except DecodeError as exc:
        out: dict[str, Any] = {"values": exc.values, "position": position, "repaired": False,
               "error": str(exc), "warnings": []}
        code = 1
    else:
        out = {"values": decoded.values, "position": decoded.position.tolist(),
               "repaired": decoded.repaired, "error": None, "warnings": list(decoded.warnings)}
        code = 0
    if args.json:
        print(json.dumps(_jsonable(out)))
    else:
        for k, v in out["values"].items():
            print(f"{k} = {v!r}")
        print(f"position = {out['position']}")
        print(f"repaired = {out['repaired']}")
        for w in out["warnings"]:
            print(f"warning: {w}")
        if out["error"]:
            print(f"error: {out['error']}", file=sys.stderr)
    return code


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(prog="msopt", description="Ray-parallel PSO tuning of LLM serving parameters.")
    parser.add_argument("--version", action="version", version=f"msopt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("validate", help="check a configuration and print its search space")
    _add_config_args(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("decode", help="decode one position into concrete values")
    _add_config_args(p)
    p.add_argument("--position", required=True, metavar="X1,X2,...",
                   help="coordinates in dimension order (see 'msopt validate')")
    p.add_argument("--particle", type=int, metavar="I", help="particle index of the DecodeContext")
    p.add_argument("--particles", type=int, metavar="N", help="swarm size of the DecodeContext")
    p.add_argument("--iteration", type=int, metavar="K", help="iteration of the DecodeContext")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_decode)

    for module in (init, simulate, optimize, serve, report, preflight):
        module.register(sub)
    calibrate.register(sub)
    return parser




#: What str.splitlines() breaks at, escaped so that an error is one line whatever a value holds.
_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(text: str) -> str:
    """``text`` with every line break escaped (an error message quoting a user's value)."""
    return text.strip().translate(_BREAKS)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``msopt`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except MsoptError as exc:
        print(f"msopt: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, optimize.Terminated)
        print("msopt: terminated (SIGTERM)" if terminated else "msopt: interrupted", file=sys.stderr)
        return 143 if terminated else 130
    except BrokenPipeError:  # output piped into `head` and closed early
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
