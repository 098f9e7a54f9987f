"""scripts/research/prior_agreement.py: the first generation's agreement between the prior and the measurements
(docs/benchmarks.md, "What stops msopt on the independent reality, per problem")."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tests.support.scripts_load import load_script


@pytest.fixture(scope="module")
def agreement():
    return load_script("research/prior_agreement")


def test_spearman_is_the_rank_correlation(agreement) -> None:
    a = np.array([1.0, 2.0, 3.0, 4.0])
    assert agreement.spearman(a, a * 10) == pytest.approx(1.0)
    assert agreement.spearman(a, -a) == pytest.approx(-1.0)
    assert agreement.spearman(a, np.array([1.0, 1.0, 2.0, 2.0])) == pytest.approx(0.894, abs=1e-3)  # ties averaged
    assert math.isnan(agreement.spearman(a[:2], a[:2]))
    assert math.isnan(agreement.spearman(a, np.ones(4)))


@pytest.mark.slow  # enumerates a problem's 3456 configurations on the simulator (~15 s)
def test_one_seed_of_a_self_referential_problem(agreement, tmp_path: Path) -> None:
    """The first generation is the driver's (the default and nine picks), so on the simulator with its hidden
    gap the prior agrees with the measurements and its top pick is feasible."""
    run = agreement.first_generation(0, 0, str(tmp_path))
    assert 0.0 < run["rho"] <= 1.0
    assert run["best"] >= 0.0 and math.isfinite(run["top"])
    assert run["lost"] in (0.0, 1.0)
