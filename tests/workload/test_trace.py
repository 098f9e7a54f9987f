"""Request traces: every format from small files the tests write, the shared public samples, the
window, time scale and length policies, streaming, and bad input (one line naming file, row, column)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msopt.errors import ConfigError
from msopt.workload import FORMATS, Trace, TraceCounts, read_requests, trace_summary

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def text(path: Path, body: str) -> Path:
    path.write_text(body, encoding="utf-8")
    return path


def one_line(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


# -- formats ------------------------------------------------------------------------------------
def test_mooncake(tmp_path):
    p = jsonl(tmp_path / "m.jsonl", [
        {"timestamp": 1500, "input_length": 600, "output_length": 20, "hash_ids": [0, 1]},
        {"timestamp": 3500, "input_length": 700, "output_length": 30, "hash_ids": [0, 2]},
        {"timestamp": 3500, "input_length": 10, "output_length": 5},
    ])
    t = Trace(p)
    assert (t.format, t.block_size) == ("mooncake", 512)
    rs = list(t)
    assert [r.arrival_s for r in rs] == [0.0, 2.0, 2.0]      # ms, relative to the first row
    assert [(r.input_tokens, r.output_tokens, r.hash_ids) for r in rs] == [(600, 20, (0, 1)), (700, 30, (0, 2)),
                                                                           (10, 5, ())]
    assert [r.row for r in rs] == [1, 2, 3]
    s = trace_summary(t)
    # 1 of the 4 hashed blocks repeats; the 10-token prompt without hash ids is one more block, unshared
    assert (s.requests, s.span_s, s.rate, s.prefix_ceiling, s.block_size) == (3, 2.0, 1.0, 0.2, 512)


def test_bailian(tmp_path):
    p = jsonl(tmp_path / "b.jsonl", [
        {"chat_id": 7, "parent_chat_id": -1, "timestamp": 10.5, "input_length": 40, "output_length": 8,
         "type": "text", "turn": 1, "hash_ids": [1, 2, 3]},
        {"chat_id": 9, "parent_chat_id": 7, "timestamp": 12.0, "input_length": 70, "output_length": 9,
         "type": "text", "turn": 2, "hash_ids": [1, 2, 3, 4, 5]},
    ])
    t = Trace(p)
    assert (t.format, t.block_size) == ("bailian", 16)
    a, b = t
    assert (a.arrival_s, a.session_id, a.parent_id) == (0.0, "7", None)
    assert (b.arrival_s, b.session_id, b.parent_id, b.hash_ids) == (1.5, "9", "7", (1, 2, 3, 4, 5))
    assert trace_summary(t).prefix_ceiling == pytest.approx(3 / 8)


@pytest.mark.parametrize("stamps", [
    ["2023-11-16 18:17:03.9799600", "2023-11-16 18:17:04.0319600", "2023-11-16 18:17:05.9799600"],
    ["2024-05-10 00:00:00+00:00", "2024-05-10 00:00:00.052000+00:00", "2024-05-10 00:00:02+00:00"],
    ["2024-10-15T12:00:00.000Z", "2024-10-15T12:00:00.052Z", "2024-10-15T12:00:02Z"],
], ids=["2023", "2024", "2025"])
def test_azure_timestamp_forms(tmp_path, stamps):
    extra = ",NumImages" if "T" in stamps[0] else ""
    body = f"TIMESTAMP,ContextTokens,GeneratedTokens{extra}\n" + "".join(
        f"{s},{100 + i},{10 + i}{',1' if extra else ''}\n" for i, s in enumerate(stamps))
    t = Trace(text(tmp_path / "a.csv", body))
    assert t.format == "azure"
    rs = list(t)
    assert [round(r.arrival_s, 6) for r in rs] == [0.0, 0.052, 2.0]
    assert [(r.input_tokens, r.output_tokens, r.hash_ids) for r in rs] == [(100, 10, ()), (101, 11, ()), (102, 12, ())]
    assert trace_summary(t).prefix_ceiling is None      # no hash ids: never credited with hits


def test_azure_zone_offset_is_honoured(tmp_path):
    body = "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 02:00:00+02:00,5,5\n2024-05-10 00:00:01+00:00,5,5\n"
    assert [r.arrival_s for r in Trace(text(tmp_path / "a.csv", body))] == [0.0, 1.0]


@pytest.mark.parametrize("header,row", [
    ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
     "{t},ChatGPT,{i},{o},{s},Conversation log"),
    ("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type",
     "{t},s1,0.5,GPT-4,{i},{o},{s},API log"),
], ids=["v1", "v3"])
def test_burstgpt_by_column_name_and_failures(tmp_path, header, row):
    rows = [(5.0, 300, 40), (6.0, 200, 0), (9.0, 100, 20)]
    body = header + "\n" + "".join(row.format(t=t, i=i, o=o, s=i + o) + "\n" for t, i, o in rows)
    t = Trace(text(tmp_path / "g.csv", body))
    assert t.format == "burstgpt"
    counts = TraceCounts()
    rs = list(t.requests(counts))
    assert [(r.arrival_s, r.input_tokens, r.output_tokens) for r in rs] == [(0.0, 300, 40), (4.0, 100, 20)]
    assert (counts.rows, counts.failed) == (3, 1)
    assert trace_summary(t).lines()[-1] == "1 failed (zero tokens) skipped"


def test_generic(tmp_path):
    body = ("arrival_s,input_tokens,output_tokens,session_id,prefix_group\n"
            "100.0,50,5,u1,sys-a\n100.25,60,6,,sys-a\n101,70,7,u2,\n")
    rs = read_requests(text(tmp_path / "mine.csv", body))
    assert [(r.arrival_s, r.session_id, r.prefix_group) for r in rs] == [(0.0, "u1", "sys-a"), (0.25, None, "sys-a"),
                                                                        (1.0, "u2", None)]
    # a spreadsheet export starts with a byte-order mark
    minimal = read_requests(text(tmp_path / "min.csv", "\ufeffarrival_s,input_tokens,output_tokens\n0,1,1\n"))
    assert (minimal[0].session_id, minimal[0].prefix_group) == (None, None)


def test_format_given_explicitly_checks_its_columns(tmp_path):
    p = jsonl(tmp_path / "m.jsonl", [{"timestamp": 0, "input_length": 1, "output_length": 1}])
    assert Trace(p, format="mooncake").format == "mooncake"
    with pytest.raises(ConfigError) as exc:
        Trace(p, format="bailian")
    assert "no column 'chat_id'" in one_line(exc)
    with pytest.raises(ConfigError) as exc:
        Trace(p, format="azure")
    assert "format 'azure' is CSV, the file is JSON lines" in one_line(exc)
    with pytest.raises(ConfigError) as exc:
        Trace(p, format="sharegpt")
    assert "use one of mooncake, bailian, azure, burstgpt, generic" in one_line(exc)


# -- window, time scale, block size, length policy ------------------------------------------------
def _ramp(tmp_path: Path, n: int = 10) -> Path:
    return text(tmp_path / "r.csv", "arrival_s,input_tokens,output_tokens\n"
                + "".join(f"{i},{100 * (i + 1)},{10 * (i + 1)}\n" for i in range(n)))


def test_window_and_time_scale(tmp_path):
    rs = list(Trace(_ramp(tmp_path), window=(2, 5), time_scale=2.0))
    assert [r.arrival_s for r in rs] == [0.0, 0.5, 1.0, 1.5]     # rows 2..5 s, from the window's start, 2x faster
    assert [r.input_tokens for r in rs] == [300, 400, 500, 600]
    s = trace_summary(Trace(_ramp(tmp_path), window=(2, 5), time_scale=2.0))
    assert (s.requests, s.span_s, s.rate) == (4, 1.5, 2.0)


def test_window_stops_reading_at_its_end(tmp_path):
    # rows past the window are never parsed: a bad one there is not reached
    p = text(tmp_path / "big.csv", "arrival_s,input_tokens,output_tokens\n0,5,5\n1,5,5\n2,5,5\n9,oops,5\n")
    assert len(list(Trace(p, window=(0, 5)))) == 3
    with pytest.raises(ConfigError):
        list(Trace(p))


def test_block_size_override(tmp_path):
    p = jsonl(tmp_path / "m.jsonl", [{"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [1, 2, 3]}])
    assert Trace(p, block_size=16).block_size == 16


@pytest.mark.parametrize("policy,sent,over,dropped", [("clip", 10, 4, 0), ("drop", 6, 4, 4), ("scale", 10, 4, 0)])
def test_length_policy(tmp_path, policy, sent, over, dropped):
    # request i: (i + 1) * 110 tokens; the limit 700 holds rows 0..5
    counts = TraceCounts()
    rs = list(Trace(_ramp(tmp_path), max_model_len=700, length_policy=policy).requests(counts))
    assert (len(rs), counts.over_limit, counts.dropped) == (sent, over, dropped)
    assert all(r.input_tokens + r.output_tokens <= 700 for r in rs)
    if policy == "clip":
        assert (rs[-1].input_tokens, rs[-1].output_tokens) == (600, 100)     # the input is cut
        assert (rs[0].input_tokens, rs[0].output_tokens) == (100, 10)        # short ones untouched
    if policy == "scale":   # one factor for all: 700 / 1100
        assert counts.scale == pytest.approx(700 / 1100)
        assert (rs[0].input_tokens, rs[-1].input_tokens) == (63, 636)
        assert "every length scaled by 0.636" in trace_summary(Trace(_ramp(tmp_path), max_model_len=700,
                                                                     length_policy=policy)).lines()[-1]


def test_clip_keeps_the_blocks_the_prompt_still_covers(tmp_path):
    p = jsonl(tmp_path / "m.jsonl", [{"timestamp": 0, "input_length": 2000, "output_length": 100,
                                      "hash_ids": [1, 2, 3, 4]}])
    (r,) = Trace(p, max_model_len=1124, length_policy="clip")
    assert (r.input_tokens, r.hash_ids) == (1024, (1, 2))


# -- the shared public samples -----------------------------------------------------------------------
def _sample(name: str) -> Path:
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{path} is absent: ../shared/traces/ beside the repository holds the public trace samples, "
                    "which the project does not carry")
    return path


@pytest.mark.parametrize("name,fmt,n,rate,cv,inp,out,ceiling", [
    ("AzureLLMInferenceTrace_code.sample.csv", "azure", 8819, 2.57, 13.15, (2048, 1469, 7436), (28, 13, 251), None),
    ("AzureLLMInferenceTrace_conv.sample.csv", "azure", 19366, 5.53, 1.09, (1155, 1020, 4142), (211, 129, 601), None),
    ("mooncake_conversation_trace.sample.jsonl", "mooncake", 5719, 3.18, 2.92, (12870, 7640, 91207),
     (346, 356, 1105), 0.341),
    ("mooncake_synthetic_trace.sample.jsonl", "mooncake", 3993, 3.91, 1.01, (15325, 11587, 66456),
     (149, 69, 768), 0.640),
])
def test_shared_samples_match_their_readme(name, fmt, n, rate, cv, inp, out, ceiling):
    t = Trace(_sample(name))
    s = trace_summary(t)
    assert t.format == fmt and s.requests == n
    assert s.rate == pytest.approx(rate, abs=0.005) and s.gap_cv == pytest.approx(cv, abs=0.005)
    assert (round(s.input_pct["mean"]), round(s.input_pct["50"]), round(s.input_pct["99"])) == inp
    assert (round(s.output_pct["mean"]), round(s.output_pct["50"]), round(s.output_pct["99"])) == out
    assert s.prefix_ceiling == (None if ceiling is None else pytest.approx(ceiling, abs=0.0005))


def test_shared_sample_window_reads_only_its_part():
    t = Trace(_sample("mooncake_conversation_trace.sample.jsonl"), window=(0, 60))
    counts = TraceCounts()
    rs = list(t.requests(counts))
    assert rs and rs[-1].arrival_s <= 60
    assert counts.rows < 5719 // 10     # stopped at the first row past 60 s


# -- bad input: one line naming the file, the row and the column -------------------------------------
@pytest.mark.parametrize("name,body,needle", [
    ("neg.csv", "arrival_s,input_tokens,output_tokens\n0,5,5\n1,-3,5\n", "row 3, column 'input_tokens': '-3' must be"),
    ("nan.csv", "arrival_s,input_tokens,output_tokens\n0,5,five\n", "row 2, column 'output_tokens': 'five' is not a number"),
    ("frac.csv", "arrival_s,input_tokens,output_tokens\n0,5.5,5\n", "row 2, column 'input_tokens': '5.5' is not a whole"),
    ("order.csv", "arrival_s,input_tokens,output_tokens\n5,5,5\n4,5,5\n", "row 3, column 'arrival_s': '4' is earlier"),
    ("short.csv", "arrival_s,input_tokens,output_tokens\n0,5\n", "row 2, column 'output_tokens': missing"),
    ("ts.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,5\n", "row 2, column 'TIMESTAMP': 'yesterday' is not"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 5}\n{"timestamp": 1, "input_length": 5}\n',
     "row 2, column 'output_length': missing"),
    ("j.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 5}\n{"timestamp": 1, \n',
     "row 2: not JSON"),
    ("h.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": "abc"}\n',
     "row 1, column 'hash_ids': must be a list"),
])
def test_bad_rows(tmp_path, name, body, needle):
    p = text(tmp_path / name, body)
    with pytest.raises(ConfigError) as exc:
        list(Trace(p))
    msg = one_line(exc)
    assert str(p) in msg and needle in msg


def test_unrecognised_format_lists_the_formats(tmp_path):
    p = text(tmp_path / "x.csv", "when,prompt,completion\n0,1,1\n")
    with pytest.raises(ConfigError) as exc:
        Trace(p)
    msg = one_line(exc)
    assert "format not recognised from its columns (completion, prompt, when)" in msg
    assert all(f in msg for f in FORMATS) and "arrival_s, input_tokens, output_tokens" in msg


@pytest.mark.parametrize("make,needle", [
    (lambda d: d / "absent.csv", "no such file"),
    (lambda d: d, "cannot be read"),
    (lambda d: text(d / "empty.csv", ""), "empty or not text"),
])
def test_missing_or_unreadable(tmp_path, make, needle):
    with pytest.raises(ConfigError) as exc:
        Trace(make(tmp_path))
    assert needle in one_line(exc)


def test_empty_window(tmp_path):
    with pytest.raises(ConfigError) as exc:
        list(Trace(_ramp(tmp_path), window=(50, 60)))
    assert "window [50, 60] s holds no request (10 rows read, 0 in the window" in one_line(exc)


@pytest.mark.parametrize("options,needle", [
    ({"window": (5, 2)}, "0 <= start_s < end_s"),
    ({"time_scale": 0}, "time_scale 0 must be a number above 0"),
    ({"length_policy": "truncate"}, "'truncate' is not one of clip, scale, drop"),
    ({"block_size": 0}, "block_size 0"),
])
def test_bad_options(tmp_path, options, needle):
    with pytest.raises(ConfigError) as exc:
        Trace(_ramp(tmp_path), **options)
    assert needle in one_line(exc)


def test_generic_prefix_ceiling_counts_rows_without_a_group(tmp_path):
    # 4 rows of 32 tokens (2 blocks of 16): two share group g (2 of their 4 blocks repeat), two have no group.
    # The rule: repeated blocks over all prompt blocks, 2 / 8, not 2 / 4 (rows without a group left out).
    body = "arrival_s,input_tokens,output_tokens,prefix_group\n0,32,4,g\n1,32,4,g\n2,32,4,\n3,32,4,\n"
    assert trace_summary(Trace(text(tmp_path / "g.csv", body))).prefix_ceiling == pytest.approx(2 / 8)
