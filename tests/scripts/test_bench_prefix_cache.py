"""scripts/benchmarks/bench_prefix_cache.py without the real engine: the trace's ceiling, the simulated
side of the table and the report (the real replays run only on the lead's quiet machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.scripts_load import load_script


def _trace(path: Path) -> Path:
    # 512-token blocks; every prompt starts with block 7, the odd ones with 7, 8; 900-1400 tokens
    rows = [{"timestamp": 100 * i, "input_length": 900 + 50 * i, "output_length": 200,
             "hash_ids": [7, 8, 100 + i] if i % 2 else [7, 50 + i, 60 + i]} for i in range(11)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_the_ceiling_and_the_simulated_side(tmp_path: Path) -> None:
    bench = load_script("benchmarks/bench_prefix_cache")
    args = bench.parse_args(["--trace", str(_trace(tmp_path / "t.jsonl")), "--requests", "6", "--window", "0", "1"])
    table = bench.trace_table(args, 1024)
    assert table["length_policy"] == "clip" and table["max_model_len"] == 1024
    ceil, held, block = bench.ceiling(table, 6)
    # clipped to 1024 with the 200 output tokens: 824-token prompts, blocks 7 (and 8 for the odd ones) kept;
    # five of six find block 7 cached (512 tokens), the two later odd ones block 8 too (capped at 823, 768
    # in 128-token KV blocks)
    assert (held, block) == (11, 512)
    assert ceil == pytest.approx((3 * 512 + 2 * 768) / (6 * 824))
    argv = ["vllm", "serve", "m", "--max-model-len", "1024", "--block-size", "128"]
    on = bench.sim_run(argv, {"VLLM_CPU_KVCACHE_SPACE": "1"}, table, 6)
    off = bench.sim_run([*argv, "--no-enable-prefix-caching"], {"VLLM_CPU_KVCACHE_SPACE": "1"}, table, 6)
    assert on["hit_rate"] == pytest.approx(ceil) and off["hit_rate"] is None and on["success"] == 1.0
    text = bench.report(args, table, 6, ceil, [("on", "simulated", on), ("off", "simulated", off)],
                        ((1.0, 2.0, 3.0), (1.5, 2.0, 3.0)))
    lines = text.splitlines()
    assert lines[0].startswith("Trace t.jsonl, window [0.0, 1.0] s") and f"{ceil:.1%}" in lines[0]
    assert lines[4].startswith("| on | simulated | ") and lines[5].startswith("| off | simulated | – | – / – |")
    assert "before / after: 1.00, 2.00, 3.00 / 1.50, 2.00, 3.00" in text


def test_a_missing_trace_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("benchmarks/bench_prefix_cache")
    assert bench.main(["--trace", str(tmp_path / "none.jsonl"), "--requests", "2"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
