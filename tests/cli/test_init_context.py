"""msopt init --workload: the server's context holds the trace's longest request (issue 52 item 1): the mean
alone gave a --max-model-len its long requests exceeded, and the run failed them (0.92 on Mooncake)."""

from __future__ import annotations

import shlex
import tomllib

from msopt.cli.init import build, read_trace


def test_the_context_holds_the_longest_request_of_the_trace(tmp_path):
    trace = tmp_path / "t.csv"
    rows = [(i, 300, 50) for i in range(19)] + [(19, 9000, 600)]    # mean 725 tokens, the longest 9,600
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{a},{i},{o}\n" for a, i, o in rows),
                     encoding="utf-8")
    wl = read_trace(trace)
    assert wl.longest == 9600 and wl.input_len + wl.output_len < 1000
    choice = build("vllm", "qwen3-8b", devices=8, workload=str(trace), probe={})
    others = shlex.split(tomllib.loads(choice.text)["vllm"]["command"]["others"])
    assert int(others[others.index("--max-model-len") + 1]) == 16384       # 2 x the mean gave 4096
