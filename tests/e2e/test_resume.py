"""kill -9 of the driver, then --resume: nothing finished runs again, the journal matches."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KILL_AT = Path(__file__).parents[1] / "support" / "kill_at.py"

CFG_EXTRA = """
n_particles = 4
iters = 3
sample_size = 16
mode = "{mode}"
[data_storage]
pso_top_k = 1
[simulator]
hardware = "atlas-800i-a2"
model = "qwen3-8b"
noise = 0.02
emulate_wall_time = true
eval_seconds = 0.25
[simulator.workload]
input_len = 256
output_len = 32
num_prompts = 16
concurrency = 8
"""


def config(tmp_path: Path, mode: str = "sync") -> Path:
    text = (REPO / "configs" / "quickstart.toml").read_text()
    keep = []
    skip = False
    for line in text.splitlines():
        if line.startswith("["):
            skip = line.strip() in ("[simulator]", "[simulator.workload]", "[data_storage]")
        if skip or line.startswith(("n_particles", "iters", "sample_size", "mode")):
            continue
        keep.append(line)
    path = tmp_path / f"cfg-{mode}.toml"
    body = "\n".join(keep)
    head, sep, tail = body.partition("[cluster]")
    path.write_text(head + CFG_EXTRA.format(mode=mode) + sep + tail)
    return path


def optimize(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "msopt.cli", "optimize", "--plain", "--no-ray",
                             "--max-concurrent", "2", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def journal(run_dir: Path) -> dict[int, tuple]:
    out = {}
    for line in (run_dir / "journal.jsonl").read_text().splitlines():
        d = json.loads(line)
        assert d["eval_id"] not in out, f"eval {d['eval_id']} journaled twice"
        out[d["eval_id"]] = (json.dumps(d["values"], sort_keys=True), d["fitness"], d["reused"])
    return out


def run_dir_of(output: Path) -> Path:
    (d,) = [p for p in output.iterdir() if p.is_dir()]
    return d


@pytest.mark.slow  # two runs and a kill
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_kill_9_then_resume_matches_uninterrupted(tmp_path, mode):
    cfg = config(tmp_path, mode)
    full = optimize("-c", str(cfg), "-o", str(tmp_path / "a"))
    out, err = full.communicate(timeout=300)
    assert full.returncode == 0, err
    expected = journal(run_dir_of(tmp_path / "a"))
    assert len(expected) == 1 + 4 * 3 + 1 + 1

    # the victim SIGKILLs itself right after its journal's 6th line: the same point on every run
    victim = subprocess.Popen([sys.executable, str(KILL_AT), "line:6", "--plain", "--no-ray", "--max-concurrent", "2",
                               "-c", str(cfg), "-o", str(tmp_path / "b")], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    _, err = victim.communicate(timeout=300)
    assert victim.returncode == -signal.SIGKILL, err
    run = run_dir_of(tmp_path / "b")
    partial = journal(run)
    assert len(partial) == 6
    assert len((run / "results.csv").read_text().splitlines()) == 1 + 5  # killed before the 6th row

    resumed = optimize("--resume", str(run))
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    got = journal(run)
    if mode == "sync":
        assert got == expected
    else:  # async order depends on timing; the resumed run is complete and consistent
        assert set(got) == set(expected)
    for eval_id, line in partial.items():
        assert got[eval_id] == line  # nothing finished was run again
    csv_rows = (run / "results.csv").read_text().splitlines()
    assert len(csv_rows) == 1 + len(got)
    assert (run / "best.json").exists()
