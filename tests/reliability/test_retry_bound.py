"""One retry policy (msopt.evaluate.results.RETRY) bounds the launches of one evaluation over every
layer that retries: the evaluator (a retryable error), the Ray pool (an actor that died) and the
dispatcher (a fault of the machinery). Before it, each layer counted its own three, so an
evaluation whose launches failed first retryably and then by a fault was launched 3 x 3 = 9 times
without Ray, up to 27 times with it."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from msopt.cli.main import main
from msopt.errors import RetryableError
from msopt.evaluate import EvalRequest
from msopt.evaluate.results import RETRY
from msopt.evaluate.simulated import SimRunner
from tests.reliability.test_disk_full import CFG

FAULTY = 5


def test_retryable_then_fault_is_launched_at_most_retry_attempts_times(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cfg.toml"
    path.write_text(CFG.format(mode="sync"), encoding="utf-8")
    launches: list[int] = []
    measure = SimRunner.measure

    def failing(runner: SimRunner, values: Any, req: EvalRequest, attempt: int) -> dict[str, Any]:
        if req.eval_id != FAULTY:
            return measure(runner, values, req, attempt)
        launches.append(attempt)
        if len(launches) % RETRY.attempts:  # each round: retryable failures, then a fault
            raise RetryableError("Connection reset by peer")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(SimRunner, "measure", failing)
    code = main(["optimize", "-c", str(path), "-o", str(tmp_path / "runs"), "--no-ray", "--plain"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"evaluation {FAULTY}" in err and "No space left on device" in err
    assert launches == list(range(1, RETRY.attempts + 1))  # 3 launches, numbered on; it was 9
