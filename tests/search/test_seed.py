"""``--seed`` reaches the simulator: different seeds, different measurements; same seed, same run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CFG = """
simulate = true
engine = "vllm"
benchmark = "vllm_benchmark"
n_particles = 2
iters = 1
sample_size = 16
[search]
prior = "none"
[data_storage]
pso_top_k = 0
[cluster]
devices_per_trial = 8
[simulator]
hardware = "atlas-800i-a2"
model = "qwen3-8b"
noise = 0.03
[simulator.workload]
input_len = 256
output_len = 32
num_prompts = 16
concurrency = 8
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 0
max = 1
dtype = "enum"
dtype_param = [16, 32, 64]
value = 32
"""


def _run(tmp_path: Path, seed: int, tag: str) -> list[tuple]:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CFG)
    out = tmp_path / tag
    subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "-o", str(out), "--plain",
                    "--no-ray", "--seed", str(seed)], check=True, capture_output=True, text=True, cwd=REPO)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    return [(r["eval_id"], json.dumps(r["values"], sort_keys=True), r["metrics"]["generate_speed"]) for r in rows]


@pytest.mark.slow
def test_seed_reaches_the_simulator(tmp_path):
    one, two, again = _run(tmp_path, 1, "a"), _run(tmp_path, 2, "b"), _run(tmp_path, 1, "c")
    assert one == again
    # the baseline is the same configuration in both runs; its measurement differs with the seed
    assert one[0][1] == two[0][1]
    assert one[0][2] != two[0][2]


def test_max_launches_from_the_command_line_with_the_prior(tmp_path):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CFG.replace('prior = "none"', "prior_evaluations = 20").replace("iters = 1", "iters = 50"))
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "-o", str(out), "--plain",
                    "--no-ray", "--max-launches", "5"], check=True, capture_output=True, text=True, cwd=REPO)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    rows = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    launched = [r for r in rows if not r["reused"] and not r["refused"]]
    assert len(launched) <= 5
    assert all(r["predicted"] is not None for r in launched)
    prior = json.loads((run_dir / "prior.json").read_text())
    assert prior["picks"] and prior["evaluations"] <= 20
