"""What a finished run leaves beside its journal: the best configuration's launch files and the
report (``outputs`` of :class:`msopt.run.session.RunSession`)."""

from __future__ import annotations

import sys
from pathlib import Path

from msopt.config import Config
from msopt.evaluate.results import EvaluationResult
from msopt.report import export, html
from msopt.workload.resolved import ResolvedWorkload

__all__ = ["write_outputs"]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else 'no message'}"


def write_outputs(config: Config, run_dir: Path, best: EvaluationResult | None,
                  workload: ResolvedWorkload | None = None) -> None:
    """The best configuration's launch files and the report (``workload``: the run's, resolved once, for the
    report's trace panel); a failure here costs one line on stderr, never the run (everything needed to
    retry is in the run directory)."""
    try:
        if best is not None:
            export.export_best(config, best.values, run_dir, eval_id=best.eval_id, fitness=best.fitness)
    except Exception as exc:  # noqa: BLE001  the run is done and journaled; say so and go on
        print(f"msopt: warning: could not write the best configuration's launch command "
              f"({_one_line(exc)})", file=sys.stderr)
    try:
        print(f"report: {html.write_report(run_dir, export=False, workload=workload)}", flush=True)
    except Exception as exc:  # noqa: BLE001
        print(f"msopt: warning: could not write the report ({_one_line(exc)}); retry with: "
              f"msopt report {run_dir}", file=sys.stderr)
