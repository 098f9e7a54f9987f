"""One run session (msopt/run/session.py): ``msopt optimize`` and a Python caller get the same run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msopt.cli.main import main
from msopt.run.session import RunSession, Threads
from msopt.run.validate import load

ROOT = Path(__file__).resolve().parents[2]
#: what varies from run to run
VARIES = {"run_id", "started", "finished", "devices", "actor", "timings", "server"}


def small_quickstart(tmp_path: Path) -> Path:
    """The quick start with a smaller workload and prior search (the same kind of run, in seconds)."""
    text = (ROOT / "configs" / "quickstart.toml").read_text()
    for old, new in (("num_prompts = 640", "num_prompts = 64"), ("max_concurrency = 320", "max_concurrency = 32"),
                     ("\nconcurrency = 320", "\nconcurrency = 32"), ("sample_size = 640", "sample_size = 64")):
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "small.toml"
    path.write_text(text + "\n[search]\nprior_evaluations = 40\n")
    return path


def journal(out: Path) -> list[dict[str, Any]]:
    (run,) = out.iterdir()
    rows = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
    return sorted(({k: v for k, v in r.items() if k not in VARIES} for r in rows), key=lambda r: r["eval_id"])


@pytest.mark.slow  # two small runs with their prior searches
def test_the_cli_and_a_python_caller_get_the_same_journal_and_verdict(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = small_quickstart(tmp_path)
    flags = ["--seed", "3", "--particles", "3", "--iters", "2"]
    assert main(["optimize", "-c", str(cfg), *flags, "--no-ray", "--plain", "-o", str(tmp_path / "cli")]) == 0
    printed = " ".join(capsys.readouterr().out.split())

    checked = load(str(cfg), None, overrides={"seed": 3, "n_particles": 3, "iters": 2,
                                              "output": str(tmp_path / "api")})
    result = RunSession(checked, pools=Threads()).run()
    assert result.stopped is None and result.outcome is not None and result.verdict is not None
    assert result.run_dir.parent == tmp_path / "api"

    rows = journal(tmp_path / "cli")
    assert len(rows) == result.outcome.evaluations == 3 * 2 + 1 + 2 + 1  # baseline, search, refine + baseline
    assert any(r["predicted"] for r in rows)  # the prior ran in both
    assert rows == journal(tmp_path / "api")
    for line in result.verdict.lines():  # the CLI printed the verdict the session returned
        assert " ".join(line.split()) in printed
    assert (json.loads((result.run_dir / "prior.json").read_text())
            == json.loads(next((tmp_path / "cli").glob("*/prior.json")).read_text()))
