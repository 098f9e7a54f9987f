"""SGLang's prefix-cache counters on /metrics (sglang 0.5.23 with --enable-metrics) read as the
measurement's hits and queries, and the one warning line when a real SGLang run replaying shared
prefixes lacks --enable-metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msopt.benchmarks.engine_metrics import cache_report, missing_metrics_warning, parse_counters

#: what sglang 0.5.23's TokenizerMetricsCollector exposes (metrics_collector.py:1855-1859 and :1934-1938;
#: prometheus_client writes a counter's value with _total and its creation time with _created)
SGLANG_METRICS = """\
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="qwen",is_streaming="true"} 3000.0
sglang:prompt_tokens_total{model_name="qwen",is_streaming="false"} 1000.0
sglang:prompt_tokens_created{model_name="qwen",is_streaming="true"} 1.75e9
# HELP sglang:cached_tokens_total Number of cached prompt tokens by source (device/host/storage).
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="qwen",cache_source="device"} 1200.0
sglang:cached_tokens_total{model_name="qwen",cache_source="host"} 300.0
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="qwen"} 0.9
sglang:generation_tokens_total{model_name="qwen",is_streaming="true"} 555.0
"""


def test_sglang_counters_are_hits_and_queries() -> None:
    before = parse_counters(SGLANG_METRICS, "sglang")
    assert before is not None and (before.hits, before.queries) == (1500.0, 4000.0)   # summed over the labels
    after = parse_counters(SGLANG_METRICS.replace("3000.0", "3800.0").replace("1200.0", "1800.0"), "sglang")
    # the measurement's own: 600 of 800 prompt tokens cached; the gauge's 0.9 is not read
    assert cache_report(before, after) == {"prefix_cache_hit_rate": 0.75, "prefix_cache_hits": 600.0,
                                           "prefix_cache_queries": 800.0}
    assert parse_counters(SGLANG_METRICS, "vllm") is None          # vLLM's names only for a vLLM server
    # no cached token yet: SGLang writes no cached_tokens line until one hits; the queries still count
    first = parse_counters("\n".join(ln for ln in SGLANG_METRICS.splitlines() if "cached_tokens" not in ln), "sglang")
    assert first is not None and (first.hits, first.queries) == (0.0, 4000.0)


def test_the_warning_names_the_flag_only_where_it_matters() -> None:
    line = missing_metrics_warning("sglang", {"--tp-size"}, hash_ids=True)
    assert line is not None and "--enable-metrics" in line and "\n" not in line
    assert missing_metrics_warning("sglang", {"--enable-metrics"}, hash_ids=True) is None
    assert missing_metrics_warning("sglang", set(), hash_ids=False) is None    # nothing to hit: nothing to miss
    assert missing_metrics_warning("vllm", set(), hash_ids=True) is None       # vLLM exports them always


@pytest.mark.parametrize("others, warned", [("", True), ("--enable-metrics", False)])
def test_validate_warns_of_a_real_sglang_replay_without_metrics(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 others: str, warned: bool) -> None:
    from msopt.cli.main import main

    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 600,
                                                          "output_length": 4, "hash_ids": [1, 2 + i]}) + "\n"
                                              for i in range(3)), encoding="utf-8")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'engine = "sglang"\nbenchmark = "builtin"\n[workload]\ntrace = "t.jsonl"\n'
                   f'[sglang.command]\nothers = "{others}"\n', encoding="utf-8")
    assert main(["validate", "-c", str(cfg)]) == 0
    out = [ln for ln in capsys.readouterr().out.splitlines() if "--enable-metrics" in ln]
    assert len(out) == int(warned) and all(ln.startswith("warning: sglang exports") for ln in out)
