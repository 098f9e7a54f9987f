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
    problem, budget, found, picked = script._one((0, 6, 0, str(tmp_path), 0))
    assert (problem, budget) == (0, 6) and (found or not picked)
    assert script.main(["--problems", "0", "--budgets", "6", "--seeds", "1", "--cache", str(tmp_path),
                        "--jobs", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "problem | picked / found @6" and len(out) == 2 and out[1].endswith("%")


def test_seed_offset_draws_msopt_anew_against_the_same_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--seed-offset``: the oracle keeps the bench's seed (the same measurement noise), msopt runs with the
    seed plus the offset, and the run's found and picked are reported as they came."""
    script = load_script("research/found_picked")
    seen: dict[str, int] = {}

    class _Table:
        rows = [{"fitness": 1.0}, {"fitness": 2.0}]

    def oracle(t: object, seed: int, noise: float) -> str:
        seen["oracle"] = seed
        return "oracle"

    def run(t: object, o: str, budget: int, seed: int, variant: object) -> tuple[list[tuple[int, float]], int]:
        seen["msopt"] = seed
        return [(1, 2.0), (0, 1.0)], 1

    monkeypatch.setattr(script, "table", lambda problem, cache: _Table())
    monkeypatch.setattr(script, "Oracle", oracle)
    monkeypatch.setattr(script, "run_msopt", run)
    assert script._one((3, 20, 7, "unused", 1000)) == (3, 20, True, False)
    assert seen == {"oracle": 7, "msopt": 1007}


def test_pick_floor_races_the_optimum_against_its_nearest_rivals() -> None:
    """scripts/research/pick_floor.py: the contestants are the optimum and its nearest rivals outside 1 %;
    noiseless measurements let the race pick the optimum, and a lucky rival that stays lucky wins."""
    script = load_script("research/pick_floor")
    fitness = [1.05, None, 1.0, 1.005, 1.02, 1.3]
    assert script.contestants(fitness, 2) == [2, 4, 0]
    assert script.picks_the_optimum([2, 4, 0], lambda i: fitness[i], 50)
    counts: dict[int, int] = {}

    def luck(i: int) -> float:
        counts[i] = counts.get(i, 0) + 1
        return fitness[i] * (0.95 if i == 4 else 1.0 + 0.01 * (-1) ** counts[i])

    assert not script.picks_the_optimum([2, 4, 0], luck, 50)
    assert sum(counts.values()) <= 50
