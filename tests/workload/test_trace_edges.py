"""Traces at the edges (issue 52): a window whose requests share one timestamp, a one-row file and a trace
longer than one run replays either work or are refused in one line naming the trace and the fix, never
blaming msopt's own defaults.toml."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from msopt.errors import ConfigError
from msopt.run.validate import load

ROOT = Path(__file__).resolve().parents[2]


def quick_on(tmp_path: Path, trace: str, extra: str = "") -> Path:
    """configs/quickstart.toml with its [simulator.workload] replaced by [workload] trace (the issue's set-up)."""
    text = (ROOT / "configs" / "quickstart.toml").read_text(encoding="utf-8")
    text = re.sub(r"\[simulator\.workload\].*?(?=\n\[vllm\.command\])", f'[workload]\ntrace = "{trace}"\n{extra}',
                  text, flags=re.S)
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    return path


def simulate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "msopt.cli", "simulate", "-c", str(path)],
                          capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize("rows, window", [
    ("0,100,20\n", ""),                                        # a one-row file
    ("5,100,20\n" * 5, ""),                                    # every request at one timestamp
    ("0,100,20\n" + "9,100,20\n" * 3 + "20,80,10\n", "window = [8, 10]\n"),  # a span-0 window
    ("0,100,20\n4,100,20\n", "window = [3, 10]\n"),            # a one-row window
])
def test_a_span_0_trace_is_sent_at_once(tmp_path, rows, window):
    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n" + rows, encoding="utf-8")
    checked = load(quick_on(tmp_path, "t.csv", window))
    assert checked.trace is not None and checked.trace.rate is None
    out = simulate(quick_on(tmp_path, "t.csv", window))
    assert out.returncode == 0, out.stderr
    assert "defaults.toml" not in out.stderr
    n = len(rows.splitlines()) if not window else checked.trace.requests
    assert f"sent_requests: {n}\n" in out.stdout and "sent_span_s: 0\n" in out.stdout


def test_a_trace_longer_than_a_run_is_refused_with_its_window(tmp_path, monkeypatch):
    monkeypatch.setattr("msopt.workload.trace.MAX_REQUESTS", 4)    # a 2,000,000-row file, in small
    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n"
                                    + "".join(f"{1.5 * i},100,20\n" for i in range(6)), encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load(quick_on(tmp_path, "t.csv"))
    msg = str(exc.value)
    assert "\n" not in msg and "defaults.toml" not in msg and "num_prompts" not in msg
    assert f"[workload] trace {tmp_path / 't.csv'}: 6 requests, more than the 4 one run replays" in msg
    assert "set [workload] window = [0, 4.5] (the first 4)" in msg
    monkeypatch.setattr("msopt.workload.trace.MAX_REQUESTS", 4)
    checked = load(quick_on(tmp_path, "t.csv", "window = [0, 4.5]\n"))   # the fix it names works
    assert checked.trace is not None and checked.trace.requests == 4
