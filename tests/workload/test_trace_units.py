"""Units and columns of a trace (issue 52 item 5): ``time_unit``, a column mapping for a CSV or JSON lines file
of any layout, warnings for a rate or span that looks like a unit error and for a block_size the hash ids
disagree with, a header with spaces after the commas, gzip input, the row number on every decoding error, and
columns msopt does not read never decoded."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from msopt.errors import ConfigError
from msopt.run.validate import load
from msopt.workload import Trace, trace_summary

ROOT = Path(__file__).resolve().parents[2]


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def seconds_mooncake(tmp_path: Path, n: int = 150) -> Path:
    """A Mooncake-format file whose timestamps are in seconds (Mooncake's own are ms): one request every 0.5 s."""
    return jsonl(tmp_path / "m.jsonl", [{"timestamp": 0.5 * i, "input_length": 1000, "output_length": 20,
                                        "hash_ids": [0, i + 1]} for i in range(n)])


def test_a_unit_error_is_warned_and_time_unit_fixes_it(tmp_path):
    p = seconds_mooncake(tmp_path)
    s = trace_summary(Trace(p))
    assert s.rate == pytest.approx(2000.0)
    assert ("warning: 2,000 req/s looks like timestamps read in ms that are in another unit; set [workload] "
            "time_unit (s, ms or us)") in s.lines()
    fixed = trace_summary(Trace(p, time_unit="s"))
    assert fixed.rate == pytest.approx(2.0) and fixed.warnings() == []
    us = Trace(jsonl(tmp_path / "u.jsonl", [{"timestamp": 250_000 * i, "input_length": 10, "output_length": 2}
                                            for i in range(5)]), time_unit="us")
    assert [r.arrival_s for r in us] == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_a_short_span_of_many_requests_is_warned(tmp_path):
    p = tmp_path / "g.csv"
    p.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{i * 0.001:.3f},10,2\n" for i in range(120))
                 + "0.5,10,2\n", encoding="utf-8")
    assert any("121 requests within 0.5 s looks like timestamps read in s" in w
               for w in trace_summary(Trace(p)).warnings())


def test_azure_has_no_time_unit(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.98,10,2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="wall-clock timestamps.*remove time_unit"):
        Trace(p, time_unit="ms")


def test_a_csv_of_any_layout_is_read_through_its_column_mapping(tmp_path):
    p = tmp_path / "log.csv"
    p.write_text("req,ts_ms,user,prompt,completion,blocks\n"
                 "a,1000,u1,40,5,\"[1, 2, 3]\"\n"
                 "b,3000,u2,33,6,1 2 4\n", encoding="utf-8")
    t = Trace(p, time_unit="ms", columns={"arrival_s": "ts_ms", "input_tokens": "prompt",
                                          "output_tokens": "completion", "hash_ids": "blocks", "session_id": "user"})
    rs = list(t)
    assert t.format == "generic"
    assert [(r.arrival_s, r.input_tokens, r.output_tokens, r.hash_ids, r.session_id) for r in rs] == [
        (0.0, 40, 5, (1, 2, 3), "u1"), (2.0, 33, 6, (1, 2, 4), "u2")]
    with pytest.raises(ConfigError) as exc:
        Trace(p, columns={"arrival_s": "time", "input_tokens": "prompt", "output_tokens": "completion"})
    assert "row 1 has no column 'time', which columns maps to" in str(exc.value) and "ts_ms" in str(exc.value)


def test_a_json_lines_file_of_any_layout_is_read_through_its_column_mapping(tmp_path):
    p = jsonl(tmp_path / "log.jsonl", [{"t": 10, "in": 600, "out": 7, "blk": [5, 6]},
                                       {"t": 12, "in": 520, "out": 8, "blk": [5, 7]}])
    t = Trace(p, block_size=512, columns={"arrival_s": "t", "input_tokens": "in", "output_tokens": "out",
                                           "hash_ids": "blk"})
    assert [(r.arrival_s, r.input_tokens, r.hash_ids) for r in t] == [(0.0, 600, (5, 6)), (2.0, 520, (5, 7))]
    assert trace_summary(t).prefix_ceiling == 0.25


def test_a_block_size_the_hash_ids_disagree_with_is_warned(tmp_path):
    p = jsonl(tmp_path / "m.jsonl", [{"timestamp": 1000 * i, "input_length": 160, "output_length": 5,
                                      "hash_ids": list(range(10 * i, 10 * i + 10))} for i in range(5)])
    s = trace_summary(Trace(p))      # Mooncake's 512-token blocks: these are 16
    assert ("warning: block_size 512 disagrees with the hash ids: 5 of 5 prompts carry other than input/512 ids "
            "(rounded up), about 16 tokens per id; set [workload] block_size") in s.lines()
    assert trace_summary(Trace(p, block_size=16)).warnings() == []


def test_a_header_with_spaces_after_the_commas(tmp_path):
    p = tmp_path / "g.csv"
    p.write_text("arrival_s, input_tokens, output_tokens\n0, 10, 2\n1.5, 20, 3\n", encoding="utf-8")
    t = Trace(p)
    assert t.format == "generic" and [(r.arrival_s, r.input_tokens) for r in t] == [(0.0, 10), (1.5, 20)]


def test_gzip_input(tmp_path):
    plain = seconds_mooncake(tmp_path, 5)
    gz = tmp_path / "m.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert list(Trace(gz)) == list(Trace(plain))
    csv = tmp_path / "a.csv.gz"
    csv.write_bytes(gzip.compress(b"TIMESTAMP,ContextTokens,GeneratedTokens\n2024-10-15T12:00:00.269Z,10,2\n"
                                  b"2024-10-15T12:00:01.269Z,20,3\n"))
    assert [r.arrival_s for r in Trace(csv)] == [0.0, 1.0]
    cut = tmp_path / "cut.jsonl.gz"
    long = gzip.compress(seconds_mooncake(tmp_path, 3000).read_bytes())
    cut.write_bytes(long[:len(long) // 2])
    with pytest.raises(ConfigError, match=r"cut.jsonl.gz: after row \d+: cannot be read"):
        list(Trace(cut))


def test_a_bad_byte_is_named_by_its_row_and_column_and_unread_columns_are_not_decoded(tmp_path):
    p = tmp_path / "b.csv"
    rows = [b"arrival_s,input_tokens,output_tokens,note\n"] + [f"{i},10,2,ok\n".encode() for i in range(6)]
    rows[3] = b"2,10,2,caf\xe9\n"                # latin-1 in a column msopt never reads: fine
    p.write_bytes(b"".join(rows))
    assert len(list(Trace(p))) == 6
    rows[5] = b"4,1\xff0,2,ok\n"                   # in a column it reads: the row and the column
    p.write_bytes(b"".join(rows))
    with pytest.raises(ConfigError) as exc:
        list(Trace(p))
    assert "row 6, column 'input_tokens': holds a byte that is not UTF-8 text" in str(exc.value)


def test_time_unit_and_columns_reach_the_simulator(tmp_path):
    p = tmp_path / "log.csv"
    p.write_text("ts,prompt,completion\n" + "".join(f"{500 * i},100,10\n" for i in range(9)), encoding="utf-8")
    text = (ROOT / "configs" / "quickstart.toml").read_text(encoding="utf-8")
    text = re.sub(r"\[simulator\.workload\].*?(?=\n\[vllm\.command\])",
                  '[workload]\ntrace = "log.csv"\ntime_unit = "ms"\n'
                  'columns = { arrival_s = "ts", input_tokens = "prompt", output_tokens = "completion" }\n',
                  text, flags=re.S)
    (tmp_path / "c.toml").write_text(text, encoding="utf-8")
    checked = load(tmp_path / "c.toml")
    assert checked.trace is not None and checked.trace.span_s == 4.0 and checked.trace.rate == 2.0
    table = checked.resolved.replay_table() if checked.resolved is not None else {}
    assert table["time_unit"] == "ms" and table["columns"]["arrival_s"] == "ts"
    from msopt.sim.workload import workload_from_mapping
    assert checked.simulator is not None    # the setup reads the trace's load from the resolved workload
    wl = workload_from_mapping(checked.simulator.table["workload"]).replaying(checked.resolved.window)
    assert wl.sample_arrivals(None)[-1] == pytest.approx(4.0)   # type: ignore[arg-type]
