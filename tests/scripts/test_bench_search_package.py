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
                              score=importlib.import_module("bench_search.score"),
                              problems=importlib.import_module("bench_search.problems"))
    finally:
        sys.path.remove(scripts)


def test_launcher_keeps_its_flags():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "benchmarks" / "bench_search.py"), "--help"],
                         capture_output=True, text=True, timeout=120)
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
    text = pkg.render.render({"p": table}, results, methods, [50], args, "python scripts/benchmarks/bench_search.py", 5.0)
    assert "$" not in text
    assert text.startswith("# Search quality: msopt vs peer optimizers\n")
    assert "## Method" in text and "### Ablation" in text and "| t |" in text and "Seeds 100–101" in text
    assert "- **50 launches**: msopt 0.000 (100%)" in text
    assert text.endswith(f"| {methods[-1].name} | {methods[-1].how} |\n")


def test_held_out_problems_stay_out_unless_asked(pkg):
    """Issue 49 item 5: the held-out problems are declared but left out of 'all', and naming one is refused
    without --held-out, so that no run looks at them before the end."""
    problems = pkg.problems.PROBLEMS
    held = {i for i, p in enumerate(problems) if p.held_out}
    assert len(held) >= 3 and all(problems[i].reality == "aic" for i in held)
    everything = set(range(len(problems)))
    assert set(pkg.problems.selected("all")) == everything - held
    assert set(pkg.problems.selected("all", held_out=True)) == everything
    one = min(held)
    with pytest.raises(ValueError, match="held-out"):
        pkg.problems.selected(f"0,{one}")
    assert pkg.problems.selected(f"0,{one}", held_out=True) == (0, one)
    with pytest.raises(ValueError, match="no problem"):
        pkg.problems.selected(str(len(problems)))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "benchmarks" / "bench_search.py"), "--problems",
                          str(one), "--out", "-"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--held-out" in out.stderr


def test_the_declared_problems_cover_moe_long_prompts_and_another_gpu(pkg):
    """Issue 49 item 5: among the independent problems, declared and held out alike, a mixture-of-experts
    model, a long-prompt workload (its max_model_len in the space) and a GPU beyond the H100 / H200."""
    for held in (False, True):
        aic = [p for p in pkg.problems.PROBLEMS if p.reality == "aic" and p.held_out == held
               and (held or p.name not in {"aic: qwen3-32b/h100-sxm/vllm/W8", "aic: llama-3.1-8b/h200-sxm/vllm/W8",
                                           "aic: qwen3-8b/h100-sxm/sglang/W8"})]
        assert len(aic) >= 3
        assert any("-a3b" in p.model for p in aic)  # MoE
        assert any(p.input_len >= 4096 and p.max_model_len >= p.input_len + p.output_len for p in aic)
        assert any(p.aic_system not in ("h100_sxm", "h200_sxm") for p in aic)
    long = next(p for p in pkg.problems.PROBLEMS if p.max_model_len != 4096)
    assert f"value = {long.max_model_len}" in long.toml()
    # the problems of before keep their configuration's text, so their cached tables stay valid
    assert "min = 4096\nmax = 4096\ndtype = \"int\"\nvalue = 4096" in pkg.problems.PROBLEMS[0].toml()
