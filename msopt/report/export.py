"""The best configuration, ready to use: ``best_command.sh``/``.json`` and the engine's files.

:func:`export_best` renders the recommended configuration with the engine adapter, exactly as a
real launch would be rendered; the adapter says which port a user's server listens on and where
its configuration files go (:meth:`msopt.engines.EngineAdapter.launch_port`,
:meth:`~msopt.engines.EngineAdapter.export_notes`), so this module knows no engine by name.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from msopt.config import Settings
from msopt.engines import get_engine
from msopt.report.data import BEST_COMMAND_JSON, BEST_COMMAND_SH, BEST_CONFIG_JSON, RunData
from msopt.run.store import atomic_write, dumps

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def launch_port(settings: Settings) -> int:
    """The port a user's server should listen on, as the engine adapter reads it from its section."""
    return get_engine(settings.engine).launch_port(settings.section(settings.engine))


def _comment(text: str) -> str:
    """One shell comment line: control characters (newlines above all) become spaces."""
    return "# " + "".join(c if c.isprintable() else " " for c in text)


def shell_script(argv: Sequence[str], env: Mapping[str, str], *, notes: Sequence[str] = ()) -> str:
    """A ``#!/bin/sh`` script that exports ``env`` and execs ``argv``, every item shell-quoted.

    Variables whose names a shell cannot export are left out (they are in best_command.json).
    """
    lines = ["#!/bin/sh", *(_comment(n) for n in notes)]
    skipped = [k for k in env if not _ENV_NAME.fullmatch(k)]
    if skipped:
        lines.append(_comment(f"{len(skipped)} environment variable(s) whose names sh cannot export "
                              f"are listed in {BEST_COMMAND_JSON}"))
    for k, v in env.items():
        if _ENV_NAME.fullmatch(k):
            lines.append(f"export {k}={shlex.quote(str(v))}")
    lines.append("exec " + " ".join(shlex.quote(str(a)) for a in argv))
    return "\n".join(lines) + "\n"


def export_best(settings: Settings, values: Mapping[str, Any], run_dir: str | Path, *,
                eval_id: Any = None, fitness: Any = None) -> list[Path]:
    """Render ``values`` with the engine adapter and write the ready-to-use files into ``run_dir``.

    Returns the paths written: best_command.sh, best_command.json and, for an engine configured
    through a file (MindIE), best_config.json.

    Raises:
        MsoptError: the values cannot be rendered (the configuration changed since the run, ...).
        StoreError: a file cannot be written.
    """
    out = Path(run_dir)
    engine = settings.engine
    port = launch_port(settings)
    adapter = get_engine(engine)
    spec = adapter.render(values, settings.fields, settings.section(engine), port=port)
    argv = [str(a) for a in spec.argv]
    env = {str(k): str(v) for k, v in spec.env.items()}
    written: list[Path] = []
    files = {str(k): v for k, v in spec.files.items()}
    notes = [f"msopt: the best configuration of run {out.name} ({engine}"
             + (f", eval {eval_id}" if eval_id is not None else "")
             + (f", fitness {fitness:.6g}" if isinstance(fitness, (int, float)) else "") + ")"]
    if files:
        target, doc = next(iter(files.items()))
        atomic_write(out / BEST_CONFIG_JSON, (dumps(doc, indent=2) + "\n").encode("utf-8"))
        written.append(out / BEST_CONFIG_JSON)
        where = adapter.export_target(settings.section(engine), target)
        notes.append(f"{engine} reads its configuration from {where}: install {BEST_CONFIG_JSON} "
                     "there (back up the original) before running this script")
    record = {"engine": engine, "argv": argv, "env": env, "port": port, "values": dict(values),
              "files": {t: BEST_CONFIG_JSON for t in list(files)[:1]}, "eval_id": eval_id,
              "fitness": fitness}
    atomic_write(out / BEST_COMMAND_SH, shell_script(argv, env, notes=notes).encode("utf-8"), mode=0o755)
    atomic_write(out / BEST_COMMAND_JSON, (dumps(record, indent=2) + "\n").encode("utf-8"))
    written[:0] = [out / BEST_COMMAND_SH, out / BEST_COMMAND_JSON]
    return written


def export_run_best(data: RunData) -> list[Path]:
    """:func:`export_best` for the run's best.json (nothing when the run has no best)."""
    if not data.best or not isinstance(data.best.get("values"), dict):
        return []
    return export_best(data.settings, data.best["values"], data.run_dir,
                       eval_id=data.best.get("eval_id"), fitness=data.best.get("fitness"))
