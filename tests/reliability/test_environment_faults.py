"""A fault of the machinery is never a result (issue 18, item 1).

An evaluation that meets an ``OSError`` of a full disk, an environment the OS refuses, or any
other exception that is not the configuration's doing is not journaled as that configuration's
fitness: the driver runs it again (bounded), then stops the run with one line and the resume
hint, and ``--resume`` runs it again, so the journal ends as an uninterrupted run's. ``--no-ray``
never hangs on such an exception.
"""

from __future__ import annotations

import errno
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from msopt.cli.main import main
from msopt.config import load_settings
from msopt.errors import EvaluationError
from msopt.evaluate import EvalRequest, Evaluator
from msopt.evaluate.simulated import SimRunner
from msopt.run.pool import InProcessPool
from tests.reliability.test_disk_full import CFG, TOTAL

FAULTY = 5  # the evaluation that meets the fault: particle 1 of iteration 1


def _journal(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()]


def _key(rec: dict) -> tuple:
    return (rec["eval_id"], rec["phase"], rec["particle"], rec["iteration"],
            json.dumps(rec["values"], sort_keys=True), rec["fitness"], rec["error"])


def _optimize(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["optimize", *argv, "--no-ray", "--plain"])
    out = capsys.readouterr()
    return code, out.out, out.err


class Faulty:
    """Wraps SimRunner.measure: evaluation ``eval_id`` raises ``exc`` the first ``times`` times."""

    def __init__(self, exc: BaseException, times: int, eval_id: int = FAULTY) -> None:
        self.exc, self.times, self.eval_id, self.raised = exc, times, eval_id, 0
        self.measure = SimRunner.measure

    def install(self, mp: pytest.MonkeyPatch) -> None:
        faulty = self

        def measure(runner: SimRunner, values: Any, req: EvalRequest, attempt: int) -> dict[str, Any]:
            if req.eval_id == faulty.eval_id and faulty.raised < faulty.times:
                faulty.raised += 1
                raise faulty.exc
            return faulty.measure(runner, values, req, attempt)

        mp.setattr(SimRunner, "measure", measure)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "cfg.toml"
    path.write_text(CFG.format(mode="sync"), encoding="utf-8")
    return path


@pytest.fixture
def reference(config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    code, out, err = _optimize(["-c", str(config), "-o", str(tmp_path / "ref")], capsys)
    assert code == 0, err
    return _journal(Path(out.strip().splitlines()[-1]))


@pytest.mark.parametrize("exc", [
    OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
    ValueError("illegal environment variable name"),
    ValueError("embedded null byte"),
    RuntimeError("a bug in msopt"),
])
@pytest.mark.slow
def test_a_fault_stops_the_run_unjournaled_and_resume_runs_it_again(
        exc: BaseException, config: Path, reference: list[dict], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs"
    with monkeypatch.context() as m:
        Faulty(exc, times=10**6).install(m)
        code, _, err = _optimize(["-c", str(config), "-o", str(out)], capsys)
    (run_dir,) = list(out.iterdir())
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"evaluation {FAULTY}" in lines[0] and str(exc) in lines[0], lines[0]
    assert f"msopt optimize --resume {run_dir}" in lines[0], lines[0]
    journal = _journal(run_dir)
    assert FAULTY not in {r["eval_id"] for r in journal}  # never journaled as the configuration's fitness
    assert all(r["fitness"] is not None for r in journal)  # the simulator's runs all succeed here

    code, _, err = _optimize(["--resume", str(run_dir)], capsys)
    assert code == 0, err
    final = _journal(run_dir)
    assert len(final) == TOTAL
    assert sorted(map(_key, final)) == sorted(map(_key, reference))  # as if it never happened


@pytest.mark.slow
def test_a_transient_fault_is_retried_and_leaves_no_trace(config: Path, reference: list[dict], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs"
    faulty = Faulty(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), times=2)
    with monkeypatch.context() as m:
        faulty.install(m)
        code, stdout, err = _optimize(["-c", str(config), "-o", str(out)], capsys)
    assert code == 0, err
    assert faulty.raised == 2
    assert "a fault, not a result" in stdout
    (run_dir,) = list(out.iterdir())
    assert sorted(map(_key, _journal(run_dir))) == sorted(map(_key, reference))


def _settings(tmp_path: Path) -> Any:
    path = tmp_path / "cfg.toml"
    path.write_text(CFG.format(mode="sync"), encoding="utf-8")
    return load_settings(path)


def _request(settings: Any, eval_id: int = 0) -> EvalRequest:
    from msopt.space import SearchSpace

    pos = SearchSpace.from_settings(settings).default_position()
    return EvalRequest(eval_id=eval_id, phase="baseline", particle=None, iteration=0,
                       position=tuple(pos.tolist()), num_prompts=12)


@pytest.mark.parametrize("exc, fault", [
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (ValueError("embedded null byte"), True),
    (KeyError("x"), True),
    (EvaluationError("the server exited (code 1)"), False),
])
def test_the_evaluator_tells_a_fault_from_a_measurement(exc: BaseException, fault: bool, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(tmp_path)
    Faulty(exc, times=10**6, eval_id=0).install(monkeypatch)
    r = Evaluator(settings.config, simulate=True).evaluate(_request(settings))
    assert math.isinf(r.fitness) and r.error
    assert (r.fault is not None) is fault
    assert "fault" not in r.to_json("x") or fault


def test_in_process_pool_survives_an_evaluator_that_raises(tmp_path: Path) -> None:
    settings = _settings(tmp_path)

    class Broken:
        devices = ["7"]
        actor = "broken"

        def evaluate(self, req: EvalRequest) -> Any:
            raise OSError(errno.EIO, "Input/output error")

    pool = InProcessPool(settings.config, size=1, evaluator_factory=lambda k: Broken())
    try:
        for i in range(2):  # the worker thread lives on after the first
            pool.submit(_request(settings, eval_id=i))
            got = pool.wait(timeout=60)
            assert [r.eval_id for r in got] == [i], "the worker thread died: the driver would wait forever"
            assert got[0].fault and "Input/output error" in got[0].fault and got[0].devices == ["7"]
    finally:
        pool.close()


def test_async_a_fault_stops_the_run_and_resume_completes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "cfg.toml"
    config.write_text(CFG.format(mode="async"), encoding="utf-8")
    out = tmp_path / "runs"
    with monkeypatch.context() as m:
        Faulty(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), times=10**6).install(m)
        code, _, err = _optimize(["-c", str(config), "-o", str(out)], capsys)
    (run_dir,) = list(out.iterdir())
    assert code == 2 and f"msopt optimize --resume {run_dir}" in err, err
    assert FAULTY not in {r["eval_id"] for r in _journal(run_dir)}
    code, _, err = _optimize(["--resume", str(run_dir)], capsys)
    assert code == 0, err
    ids = [r["eval_id"] for r in _journal(run_dir)]
    assert len(ids) == len(set(ids)) == TOTAL and FAULTY in ids
