"""msopt optimize searches the simulator prior while Ray starts (msopt/run/session.py, _PriorSearch):
the same search the driver would run, and a Ray that fails to start is still one line naming --no-ray."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import actors.launcher as launcher_mod
import actors.pool as pool_mod
from msopt.cli.main import main
from msopt.run.pool import InProcessPool

ROOT = Path(__file__).resolve().parents[2]
QUICK = str(ROOT / "configs" / "quickstart.toml")
#: what varies from run to run (as /work's journal comparison ignores)
VARIES = {"run_id", "started", "finished", "devices", "actor", "timings", "server"}


def searching() -> bool:
    return any(t.name == "msopt-prior-search" for t in threading.enumerate())


def test_a_ray_that_fails_to_start_is_one_line_and_stops_the_prior_search(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[bool] = []

    def timed_out(*args: object, **kwargs: object) -> None:
        seen.append(searching())  # the prior's search runs meanwhile
        raise Exception("The current node timed out during startup.")  # what ray/_private/node.py raises

    monkeypatch.setattr(pool_mod.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(pool_mod.ray, "init", timed_out)
    monkeypatch.setattr(pool_mod.ray, "shutdown", lambda: None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "runs"
    assert main(["optimize", "-c", QUICK, "--seed", "0", "-o", str(out), "--plain"]) == 2
    std = capsys.readouterr()
    assert std.out.splitlines()[0].startswith("engine: vllm (the 'engine' key of ")  # what the run uses, and why
    assert std.out.splitlines()[2] == "starting Ray ..."
    errors = std.err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("msopt: error: Ray did not start on this machine: The current "
                                                     "node timed out") and "--no-ray" in errors[0]
    assert seen == [True] and not searching()
    assert not out.exists() or not any(out.iterdir())  # nothing half-written


def journal(out: Path) -> dict[int, dict[str, Any]]:
    """Each evaluation's row by its id (rows are journaled as they finish, in any order)."""
    (run,) = out.iterdir()
    rows = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
    return {r["eval_id"]: {k: v for k, v in r.items() if k not in VARIES} for r in rows}


@pytest.mark.slow
def test_the_prior_searched_while_ray_starts_gives_the_run_it_gives_without_ray(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["-c", QUICK, "--seed", "0", "--particles", "4", "--iters", "2", "--max-concurrent", "4", "--plain"]
    assert main(["optimize", *flags, "--no-ray", "-o", str(tmp_path / "plain")]) == 0
    seen: list[bool] = []

    def slow_start(*args: object, **kwargs: object) -> bool:
        time.sleep(1.0)
        seen.append(searching())
        return False

    def pool(config: Any, *, simulate: bool, run_dir: str, max_concurrent: int, parsed: Any) -> InProcessPool:
        return InProcessPool(config, size=max_concurrent, run_dir=run_dir, parsed=parsed)

    monkeypatch.setattr(launcher_mod, "init_ray", slow_start)
    monkeypatch.setattr(launcher_mod, "RayPool", pool)
    assert main(["optimize", *flags, "-o", str(tmp_path / "ray")]) == 0
    text = capsys.readouterr().out
    assert seen == [True] and not searching()
    assert text.count("simulator prior: searched in") == 2  # once a run: the driver did not search again
    assert journal(tmp_path / "ray") == journal(tmp_path / "plain")
