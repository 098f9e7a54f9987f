"""The real evaluation path: start the engine, wait until ready, benchmark it, stop everything.

The server runs in its own process group with the actor's environment (so it inherits the
device ids Ray assigned) plus the rendered ``env``; a parent-death guard kills it with the
actor. Logs go to the run directory; a failure is classified by the ``[health_check]``
patterns: fatal ends the evaluation, retryable raises :class:`RetryableError` so the
evaluator tries again (up to its attempt limit).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msopt.errors import EvaluationError, RetryableError
from msopt.results import EvalRequest

if TYPE_CHECKING:
    from msopt.evaluation import Evaluator


def _classify(evaluator: Evaluator, server_log: Path, bench_log: Path, exc: EvaluationError) -> EvaluationError:
    for path, kind in ((server_log, "service"), (bench_log, "benchmark")):
        if not path.exists():
            continue
        verdict = evaluator.health.check_file(path, kind)
        if verdict.kind == "ok":
            continue
        text = f"{kind} log: {verdict.error_type}: {verdict.line.strip()} ({path})"
        return RetryableError(text) if verdict.kind == "retryable" else EvaluationError(text)
    return exc


def run_real_evaluation(evaluator: Evaluator, values: Mapping[str, Any], req: EvalRequest,
                        attempt: int) -> dict[str, Any]:
    """Launch, benchmark and stop one server for ``values``; return the benchmark's metrics.

    Raises:
        RetryableError: a retryable health-check pattern matched a log.
        EvaluationError: the server or the benchmark failed (fatal pattern, crash, timeout).
    """
    from msopt.process import free_port, launched

    settings = evaluator.settings
    base = evaluator.run_dir / "work" if evaluator.run_dir is not None else None
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"eval-{req.eval_id:05d}-a{attempt}-", dir=base))
    server_log = evaluator.log_path(req, attempt, "server") or workdir / "server.log"
    bench_log = evaluator.log_path(req, attempt, "benchmark") or workdir / "benchmark.log"
    spec = evaluator.engine.render(values, settings.fields, evaluator.engine_section, port=free_port(),
                                   devices=evaluator.devices, workdir=workdir)
    timeout = float(settings.get("particles_time_out", 3600))
    try:
        with launched(spec, server_log, cwd=workdir) as proc:
            metrics = evaluator.benchmark.run(
                spec, values, settings.fields, settings.section(evaluator.benchmark_name),
                num_prompts=req.num_prompts, load=req.load, result_dir=workdir / "result",
                log_path=bench_log, timeout=timeout)
            if proc.poll() is not None:
                raise EvaluationError(f"the server exited (code {proc.returncode}) during the benchmark; "
                                      f"see {server_log}")
    except EvaluationError as exc:
        raise _classify(evaluator, server_log, bench_log, exc) from None
    finally:
        if evaluator.run_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return metrics
