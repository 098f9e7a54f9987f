"""Every simulated example in configs/ ends with a configuration that meets its SLOs, and the simulator prior
agrees with the simulation it comes from (issue 39): in a simulated run the prior and the evaluations are one
simulator, apart from the configured noise and each evaluation's own workload draw."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SIMULATED = sorted(p.name for p in (REPO / "configs").glob("*.toml")
                   if tomllib.loads(p.read_text(encoding="utf-8")).get("simulate") is True)
FITTED = ("generate_speed", "time_to_first_token", "time_per_output_token")
#: a prediction further off than this on any metric is another model, not noise (the PD example's prior erred by
#: 790 % at the median before it simulated both pools)
WORST = 0.15


def test_the_examples_are_found():
    assert {"quickstart.toml", "pd_h200_sglang.toml", "deepseek_v3_atlas_multinode.toml"} <= set(SIMULATED)


@pytest.mark.slow
@pytest.mark.parametrize("name", SIMULATED)
def test_a_simulated_example_meets_its_slos_with_the_prior_within_the_noise(name: str, tmp_path: Path) -> None:
    cfg = REPO / "configs" / name
    noise = float(tomllib.loads(cfg.read_text(encoding="utf-8")).get("simulator", {}).get("noise", 0.0))
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "--no-ray", "--plain",
                          "-o", str(tmp_path)], capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    log = out.stdout[-3000:] + out.stderr[-3000:]
    assert out.returncode == 0, log
    assert "verdict: the recommended configuration meets every SLO" in out.stdout.splitlines(), log
    (journal,) = tmp_path.glob("*/journal.jsonl")
    errors = []
    for line in journal.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        pred, got = rec.get("predicted"), rec.get("metrics") or {}
        if not pred or rec.get("error") or rec.get("refused"):
            continue
        errors.append(max(abs(pred[k] - got[k]) / got[k] for k in FITTED if got.get(k)))
    assert errors, log
    assert statistics.median(errors) <= max(3 * noise, 0.03) and max(errors) <= WORST, (name, sorted(errors))
