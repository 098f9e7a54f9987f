"""scripts/research/found_picked.py: found against picked per problem and budget (docs/searchers.md, "The
simulator corrected by the measurements (issue 49, third session)")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.scripts_load import load_script


@pytest.mark.slow  # enumerates a problem's 3456 configurations on the simulator (~15 s)
def test_one_seed_of_a_self_referential_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run that picked a configuration within 1 % launched one; the table has a row per problem."""
    script = load_script("research/found_picked")
    problem, budget, found, picked = script._one((0, 6, 0, str(tmp_path)))
    assert (problem, budget) == (0, 6) and (found or not picked)
    assert script.main(["--problems", "0", "--budgets", "6", "--seeds", "1", "--cache", str(tmp_path),
                        "--jobs", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "problem | picked / found @6" and len(out) == 2 and out[1].endswith("%")
