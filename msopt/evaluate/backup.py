"""``msopt optimize --backup`` (``backup = true``): keep what every evaluation launched.

The original tool's ``--backup`` copied, after each evaluation, the server's log, the engine's
configuration file (there, MindIE's config.json) and the benchmark's output into ``result/bak/``
(ms_serviceparam_optimizer optimizer/scheduler.py ``Scheduler.backup``, optimizer/plugins/simulate.py
``Simulator.backup``, msserviceprofiler@9582f434). msopt keeps every log and the benchmark's result
files in the run directory anyway (``logs/``, ``work/``); what it does not keep is what a launch
wrote outside the run directory, above all an engine's configuration file that msopt edits in
place and restores after the trial (MindIE's config.json, for one). With ``backup`` on, each
attempt writes, before its server starts:

- ``backup/eval-<id>-a<attempt>/launch.json``: every process of the launch (role, argv, the
  environment it adds, host, port, the files it writes) and a copy of each of those files as
  that launch wrote it (``<role>-<name>``);
- once per run and file, the file as it was before msopt touched it:
  ``backup/originals/<host>/<its absolute path>``, to copy back by hand.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Sequence
from pathlib import Path

from msopt.evaluate.results import EvalRequest
from msopt.launch.files import BACKUP_SUFFIX, file_bytes, write_atomic
from msopt.launch.render import LaunchSpec

BACKUP_DIR = "backup"


def _keep_original(run_dir: Path, target: Path) -> None:
    """Copy the pristine ``target`` (its ``.msopt-backup`` while another trial has it edited) to
    ``backup/originals/<host>/<path>`` unless this run has it already."""
    copy = run_dir / BACKUP_DIR / "originals" / socket.gethostname() / str(target.resolve()).lstrip(os.sep)
    if copy.exists():
        return
    pristine = target.with_name(target.name + BACKUP_SUFFIX)
    source = pristine if pristine.exists() else target
    if source.is_file():
        write_atomic(copy, source.read_bytes())


def write_backup(run_dir: Path, req: EvalRequest, attempt: int,
                 launches: Sequence[tuple[str, LaunchSpec]]) -> Path:
    """Record one attempt's launch (see the module docstring).

    Args:
        run_dir: the run directory.
        req: the evaluation.
        attempt: the attempt number.
        launches: ``(role, spec)`` of every process the attempt starts (``server``, ``node1``, ...).

    Returns:
        the attempt's backup directory.
    """
    out = run_dir / BACKUP_DIR / f"eval-{req.eval_id:05d}-a{attempt}"
    record = []
    run_root = run_dir.resolve()
    for role, spec in launches:
        files = {}
        for target, doc in spec.files.items():
            name = f"{role}-{Path(target).name}"
            write_atomic(out / name, file_bytes(doc))
            files[str(target)] = name
            path = Path(target)
            if path.is_absolute() and run_root not in path.resolve().parents:
                _keep_original(run_dir, path)
        record.append({"role": role, "engine": spec.engine, "argv": list(spec.argv), "env": dict(spec.env),
                       "host": spec.host, "port": spec.port, "files": files,
                       **({"unset": list(spec.unset_env)} if spec.unset_env else {})})
    doc = {"eval_id": req.eval_id, "attempt": attempt, "launches": record}
    write_atomic(out / "launch.json", (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    return out
