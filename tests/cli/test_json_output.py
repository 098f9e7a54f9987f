"""A script gets at least what a person reads (issue 52 item 10): ``msopt simulate --json`` carries every
metric the text shows (prefix_cache_hit_rate, sent_requests, sent_span_s), ``msopt validate --json`` every
note, and no text prints a fitness such as 2e+298."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from msopt.metrics import fitness_text

ROOT = Path(__file__).resolve().parents[2]


def msopt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "msopt.cli", *args], capture_output=True, text=True, cwd=ROOT)


def on_trace(tmp_path: Path) -> Path:
    """The quick start on a Mooncake-format trace with shared prefixes (the issue's set-up)."""
    rows = [{"timestamp": 250 * i, "input_length": 600, "output_length": 20, "hash_ids": [0, i % 3 + 1]}
            for i in range(12)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    text = (ROOT / "configs" / "quickstart.toml").read_text(encoding="utf-8")
    text = re.sub(r"\[simulator\.workload\].*?(?=\n\[vllm\.command\])", '[workload]\ntrace = "t.jsonl"\n', text,
                  flags=re.S)
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_simulate_json_carries_every_line_of_the_text(tmp_path):
    path = on_trace(tmp_path)
    text = msopt("simulate", "-c", str(path))
    assert text.returncode == 0, text.stderr
    data = json.loads(msopt("simulate", "-c", str(path), "--json").stdout)
    for key in ("prefix_cache_hit_rate", "sent_requests", "sent_span_s"):
        assert key in data and f"{key}: " in text.stdout
    for line in text.stdout.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key not in ("error", "assumed"):
            assert key in data, line
            assert float(value) == pytest.approx(data[key], rel=1e-5)
        elif " = " in line:
            name, _, value = line.partition(" = ")
            assert name in data["values"], line
    assert data["sent_requests"] == 12 and data["sent_span_s"] == pytest.approx(2.75)


def test_validate_json_carries_every_note(tmp_path):
    path = on_trace(tmp_path)
    text = msopt("validate", "-c", str(path))
    assert text.returncode == 0, text.stderr
    data = json.loads(msopt("validate", "-c", str(path), "--json").stdout)
    assert data["lines"] == text.stdout.splitlines()
    shown = text.stdout
    for note in data["workload"]["notes"]:
        assert f"  {note}\n" in shown
    assert any("prefix reuse ceiling" in n for n in data["workload"]["notes"])
    for note in data["engine_notes"]:
        assert f"vllm: {note}" in shown
    assert data["engine_notes"]        # vLLM's note on its unchecked flags
    assert data["slos"] and all(s in shown for s in data["slos"])


def test_original_keys_read_are_in_validate_json(tmp_path):
    path = on_trace(tmp_path)
    path.write_text("wait_start_time = 600\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    text = msopt("validate", "-c", str(path))
    data = json.loads(msopt("validate", "-c", str(path), "--json").stdout)
    assert data["lines"] == text.stdout.splitlines()
    assert data["original_tool"] and "wait_start_time" in data["original_tool"][0]
    for note in data["original_tool"]:
        assert f"original tool: {note}" in text.stdout


@pytest.mark.parametrize("value, shown", [
    (2e298, ">1e6 (far outside the SLOs)"), (1e6, ">1e6 (far outside the SLOs)"), (12.97, "12.97"),
    (math.inf, "inf"), (None, "-"), (float("nan"), "-"),
])
def test_fitness_text(value, shown):
    assert fitness_text(value) == shown


def test_no_text_prints_a_raw_huge_fitness(tmp_path):
    path = on_trace(tmp_path)
    path.write_text(path.read_text(encoding="utf-8").replace("tpot_slo = 0.02 ", "tpot_slo = 0.0001"),
                    encoding="utf-8")       # TPOT ~100x its SLO: the penalty term at its cap, 3e+298
    out = msopt("simulate", "-c", str(path))
    data = json.loads(msopt("simulate", "-c", str(path), "--json").stdout)
    assert data["fitness"] > 1e298          # JSON keeps the number
    assert "e+" not in out.stdout and "fitness: >1e6 (far outside the SLOs)" in out.stdout
