"""msopt init --workload: the server's context holds the trace's longest request (issue 52 item 1): the mean
alone gave a --max-model-len its long requests exceeded, and the run failed them (0.92 on Mooncake)."""

from __future__ import annotations

import argparse
import shlex
import tomllib

from msopt.cli.init import build, cmd_init, read_trace
from msopt.run.validate import load


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


def test_a_trace_longer_than_the_models_context_is_clipped_to_it_and_said(tmp_path, capsys):
    # issue 52 item 1: init wrote --max-model-len at the model's 40,960 and the trace's longer requests failed
    trace = tmp_path / "long.csv"
    rows = [(i, 300, 50) for i in range(18)] + [(18, 45000, 600), (19, 50000, 600)]   # qwen3-8b: 40,960 tokens
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{a},{i},{o}\n" for a, i, o in rows),
                     encoding="utf-8")
    choice = build("vllm", "qwen3-8b", devices=8, workload=str(trace), probe={}, simulate=True)
    doc = tomllib.loads(choice.text)
    others = shlex.split(doc["vllm"]["command"]["others"])
    assert int(others[others.index("--max-model-len") + 1]) == 40960
    assert doc["workload"]["trace"] == str(trace) and doc["workload"]["max_model_len"] == 40960
    assert doc["workload"]["length_policy"] == "clip"
    assert choice.notes == ["2 of the trace's 20 requests are longer than the model's context (40,960 tokens; the "
                            "longest 50,600): [workload] max_model_len = 40960 with length_policy = \"clip\" cuts "
                            "their prompts to it; \"drop\" leaves them out"]
    assert "2 requests longer than the model's 40,960 tokens" in choice.text          # the file says it too
    out = tmp_path / "c.toml"
    out.write_text(choice.text, encoding="utf-8")
    checked = load(out)                       # before: refused, 2 requests longer than the launch's context
    assert checked.trace is not None and checked.trace.longest() == 40960
    assert cmd_init(argparse.Namespace(engine="vllm", model="qwen3-8b", devices=8, slo=None, workload=str(trace),
                                       simulate=True, output=str(tmp_path / "d.toml"), force=False)) == 0
    assert choice.notes[0] in capsys.readouterr().err
