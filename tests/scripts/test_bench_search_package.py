"""scripts/benchmarks/bench_search/ as a package: the launcher keeps its command line, the report's prose
comes from the template files and every field of them is filled."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pkg():
    scripts = str(ROOT / "scripts" / "benchmarks")
    sys.path.insert(0, scripts)
    try:
        yield SimpleNamespace(render=importlib.import_module("bench_search.render"),
                              methods=importlib.import_module("bench_search.methods"),
                              score=importlib.import_module("bench_search.score"))
    finally:
        sys.path.remove(scripts)


def test_launcher_keeps_its_flags():
    out = subprocess.run([sys.executable, "-m", "scripts.benchmarks.bench_search", "--help"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for flag in ("--seeds", "--first-seed", "--budgets", "--problems", "--methods", "--noise", "--cache", "--jobs",
                 "--no-result-cache", "--out", "--ablation-seeds", "--section"):
        assert flag in out.stdout


def test_report_fills_every_field(pkg):
    problem = SimpleNamespace(input_len=1, output_len=2, concurrency=3, prompts=4, world=8, reality="self")
    opt = {"tp": 1, "pp": 1, "dp": 8, "max_num_seqs": 16, "max_num_batched_tokens": 2048,
           "gpu_memory_utilization": 0.9, "enable_chunked_prefill": True}
    table = SimpleNamespace(problem=problem, opt_values=opt, n_valid=10, n_feasible=9, f_opt=1.0, f_med=2.0,
                            fitness=np.array([1.0, 2.0]))
    methods = pkg.methods.METHODS[:2]
    results = {("p", m.name, 50): [pkg.score.score(table, [(0, 1.0)], 50)] for m in methods}
    args = argparse.Namespace(seeds=2, first_seed=0, noise=0.03, cache_note="note", ablation="| t |",
                              ablation_range=(100, 102))
    text = pkg.render.render({"p": table}, results, methods, [50], args, "python -m scripts.benchmarks.bench_search", 5.0)
    assert "$" not in text
    assert text.startswith("# Search quality: msopt vs peer optimizers\n")
    assert "## Method" in text and "### Ablation" in text and "| t |" in text and "Seeds 100–101" in text
    assert "- **50 launches**: msopt 0.000 (100%)" in text
    assert text.endswith(f"| {methods[-1].name} | {methods[-1].how} |\n")
