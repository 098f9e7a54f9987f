"""scripts/benchmarks/bench_trace_ranking.py at a tiny size: both searches run on a trace the test
writes, and both bests are simulated on the trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.scripts_load import load_script


def _trace(path: Path) -> Path:
    # 20 requests 0.2 s apart sharing two 512-token blocks: the trace's prefix cache hits, the
    # synthetic prompts of the same mean lengths share nothing
    rows = [{"timestamp": 200 * i, "input_length": 1500 + 40 * (i % 5), "output_length": 30 + i % 4,
             "hash_ids": [0, 1, 100 + i]} for i in range(20)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_the_synthetic_twin_has_the_windows_means_and_rate(tmp_path: Path) -> None:
    bench = load_script("benchmarks/bench_trace_ranking")
    args = bench.parse_args(["--trace", "x", "--window", "0", "2", "--time-scale", "2"])
    twin = bench.synthetic_table(bench.trace_table(_trace(tmp_path / "t.jsonl"), args))
    # the window [0, 2] s holds 11 requests (0 ... 2.0 s), replayed at twice the speed: 10 gaps in 1 s
    assert twin == {"input_len": round(sum(1500 + 40 * (i % 5) for i in range(11)) / 11),
                    "output_len": round(sum(30 + i % 4 for i in range(11)) / 11), "num_prompts": 11,
                    "request_rate": 10.0}


@pytest.mark.slow
def test_both_bests_are_judged_on_the_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("benchmarks/bench_trace_ranking")
    out = tmp_path / "ranking.md"
    assert bench.main(["--trace", str(_trace(tmp_path / "t.jsonl")), "--window", "0", "4", "--particles", "2",
                       "--iters", "1", "--top-k", "1", "--out", str(out)]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert capsys.readouterr().out.splitlines() == lines
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]
    assert [r[1].split(" ")[0] for r in rows] == ["the", "synthetic"] and all(r[0] == "t.jsonl" for r in rows)
    for r in rows:
        assert "max_num_seqs" in r[2] and "max_num_batched_tokens" in r[2]
        assert r[3].endswith((", met", ", missed"))
        speed, met, good = float(r[4]), r[7], float(r[8])
        assert speed > 0 and good == (speed if met == "yes" else 0.0)
        # the capacity: the largest time_scale within the SLOs, at or above the run's 4 exactly where they held there
        scale = float(r[9].split(",")[0]) if r[9] != "–" else 0.0
        assert (scale >= 4.0) == (met == "yes")
    assert bench.main(["--trace", str(tmp_path / "missing.jsonl")]) == 2
