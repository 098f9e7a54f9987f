"""The run directory: journal durability and tolerance, atomic documents, results.csv, resume."""

from __future__ import annotations

import csv
import errno
import json
import math
import os
import re
import stat
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from msopt.config import load_settings, tomllib
from msopt.errors import MsoptError
from msopt.evaluate.results import METRICS, EvaluationResult
from msopt.run.store import TAIL_COLUMNS, RunStore, StoreError, atomic_write, dumps, json_safe

CFG = """
n_particles = 4
seed = 7
[[vllm.target_field]]
name = "tp"
config_position = "--tensor-parallel-size"
min = 0
max = 1
dtype = "enum"
dtype_param = [1, 2, 4]

[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 8
max = 512
dtype = "int"
value = 256

[[vllm.target_field]]
name = "block_size"
config_position = "--block-size"
min = 16
max = 16
dtype = "int"
value = 16
"""


@pytest.fixture
def settings(write_toml):
    return load_settings(str(write_toml(CFG)), environ={})


@pytest.fixture
def run(tmp_path, settings):
    with RunStore.create(tmp_path / "out", settings.config, run_id="r1") as s:
        yield s


def result(eval_id: int, fitness: float = 0.5, **kw) -> EvaluationResult:
    base = dict(
        eval_id=eval_id, phase="search", particle=eval_id % 4, iteration=eval_id // 4,
        position_in=[0.1, 100.0], position=[0.2, 100.0],
        values={"tp": 2, "max_num_seqs": 100 + eval_id, "block_size": 16},
        metrics={"generate_speed": 3512.2, "time_to_first_token": 0.41, "time_per_output_token": 0.031,
                 "success_rate": 1.0, "throughput": 7.5},
        fitness=fitness, devices=["2", "3"],
    )
    base.update(kw)
    return EvaluationResult(**base)


def strict_lines(path: Path) -> list[dict]:
    def bad(name):
        raise AssertionError(f"non-finite {name} written")
    return [json.loads(ln, parse_constant=bad) for ln in path.read_text().splitlines()]


def read_csv(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


# -- create / open -----------------------------------------------------------------------------
def test_create_writes_config_meta_and_empty_tables(run, settings):
    d = run.run_dir
    assert d.name == "r1" and d.parent.name == "out"
    assert tomllib.loads((d / "config.toml").read_text()) == tomllib.loads(settings.to_toml())
    meta = json.loads((d / "run.json").read_text())
    assert meta["run_id"] == "r1" and meta["engine"] == "vllm" and meta["seed"] == 7
    assert meta["benchmark"] == "vllm_benchmark" and meta["mode"] == "sync"
    assert meta["fields"] == ["tp", "max_num_seqs", "block_size"]
    assert meta["dimensions"] == ["tp", "max_num_seqs"]
    assert meta["msopt_version"] and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["created"])
    assert isinstance(meta["argv"], list)
    assert (d / "journal.jsonl").read_bytes() == b""
    assert read_csv(d / "results.csv") == [run.columns]
    assert run.load_journal() == [] and run.read_json("state.json") is None


def test_files_are_not_world_writable(run):
    run.append(result(0))
    run.save_state({"x": 1})
    run.write_text("best_command.sh", "echo hi\n", executable=True)
    paths = [run.run_dir, *run.run_dir.rglob("*")]
    for p in paths:
        assert not p.stat().st_mode & stat.S_IWOTH, p
    assert os.access(run.run_dir / "best_command.sh", os.X_OK)


def test_meta_overrides_and_default_run_id(tmp_path, settings):
    a = RunStore.create(tmp_path, settings.config, meta={"mode": "async", "argv": ["msopt", "run"]})
    b = RunStore.create(tmp_path, settings.config)
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", a.run_id)
    assert a.run_id != b.run_id and a.run_dir.name == a.run_id
    assert a.meta["mode"] == "async" and a.meta["argv"] == ["msopt", "run"]
    assert json.loads((a.run_dir / "run.json").read_text())["mode"] == "async"


def test_existing_run_directory_is_an_error(run, settings):
    with pytest.raises(StoreError, match="exists already.*--resume") as exc:
        RunStore.create(run.run_dir.parent, settings.config, run_id="r1")
    assert isinstance(exc.value, MsoptError) and str(run.run_dir) in str(exc.value)
    assert run.config_path.exists()  # the existing run is untouched


@pytest.mark.parametrize("bad", ["", "..", ".hidden", "a/b", "-x", "x" * 200, "a b"])
def test_run_id_must_be_a_plain_name(tmp_path, settings, bad):
    with pytest.raises(StoreError, match="plain directory name"):
        RunStore.create(tmp_path, settings.config, run_id=bad)


def test_output_path_that_is_a_file(tmp_path, settings):
    (tmp_path / "f").write_text("x")
    with pytest.raises(StoreError) as info:
        RunStore.create(tmp_path / "f", settings.config, run_id="r")
    assert str(info.value) == f"{tmp_path / 'f'}: the output path is not a directory; choose another --output"
    assert (tmp_path / "f").read_text() == "x"


def test_open_reads_back_meta(run):
    run.append(result(0))
    run.close()
    again = RunStore.open(run.run_dir)
    assert again.run_id == "r1" and again.field_names == ["tp", "max_num_seqs", "block_size"]
    assert again.dimension_names == ["tp", "max_num_seqs"]
    assert again.columns == run.columns
    assert [r.eval_id for r in again.load_journal()] == [0]


def test_a_relative_output_and_resume_give_an_absolute_run_directory(tmp_path, settings, monkeypatch):
    """Every path under the run directory goes to processes with other working directories (a server's,
    a benchmark's, a Ray worker's): it is absolute however -o and --resume were written (issue 39)."""
    monkeypatch.chdir(tmp_path)
    store = RunStore.create("msopt_runs", settings.config, run_id="r1")
    assert store.run_dir == tmp_path / "msopt_runs" / "r1" and store.run_dir.is_absolute()
    store.close()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    again = RunStore.open("../msopt_runs/r1")
    assert again.run_dir == tmp_path / "msopt_runs" / "r1"


def test_an_evaluator_refuses_a_relative_run_directory(settings):
    """An evaluator may run in another working directory than the driver: a relative run directory would
    name another place there, so it is refused loudly rather than resolved."""
    from msopt.evaluate.evaluator import Evaluator

    with pytest.raises(ValueError, match="run_dir must be an absolute path, got 'msopt_runs/r1'"):
        Evaluator(settings.config, simulate=True, run_dir="msopt_runs/r1")


def test_open_validates_the_directory(tmp_path, run):
    with pytest.raises(StoreError, match="does not exist") as exc:
        RunStore.open(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(exc.value) and "run directory" in str(exc.value)
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="not a directory"):
        RunStore.open(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match=r"config\.toml is missing"):
        RunStore.open(tmp_path / "empty")
    (tmp_path / "empty" / "config.toml").write_text("")
    with pytest.raises(StoreError, match=r"run\.json is missing"):
        RunStore.open(tmp_path / "empty")
    (tmp_path / "empty" / "run.json").write_text("{not json")
    with pytest.raises(StoreError, match=r"run\.json"):
        RunStore.open(tmp_path / "empty")
    (tmp_path / "empty" / "run.json").write_text("[]")
    with pytest.raises(StoreError, match="fields"):
        RunStore.open(tmp_path / "empty")


def test_open_removes_leftover_temp_files(run):
    leftover = run.run_dir / ".state.json.deadbeef.tmp"
    leftover.write_text("{")
    RunStore.open(run.run_dir)
    assert not leftover.exists()


# -- journal -----------------------------------------------------------------------------------
def test_append_journals_then_tabulates(run):
    run.append(result(0))
    run.append(result(1, fitness=math.inf, error="server died\nexit 1", metrics={"generate_speed": math.nan}))
    lines = strict_lines(run.journal_path)
    assert [ln["eval_id"] for ln in lines] == [0, 1]
    assert lines[0]["run_id"] == "r1" and lines[1]["fitness"] is None
    assert lines[1]["metrics"]["generate_speed"] is None
    back = run.load_journal()
    assert back[0] == result(0)
    assert back[1].failed and back[1].error == "server died\nexit 1"
    rows = read_csv(run.results_path)
    assert len(rows) == 3
    row = dict(zip(rows[0], rows[2]))
    assert row["fitness"] == "inf" and row["generate_speed"] == "" and row["error"] == "server died | exit 1"
    row0 = dict(zip(rows[0], rows[1]))
    assert row0["generate_speed"] == "3512.2" and row0["tp"] == "2" and row0["max_num_seqs"] == "100"
    assert row0["phase"] == "search" and row0["particle"] == "0" and row0["reused"] == "False"


def test_csv_column_order(run):
    assert run.columns == [*METRICS, "tp", "max_num_seqs", "block_size", *TAIL_COLUMNS, "spec_accept_len"]
    assert run.columns[:5] == ["generate_speed", "time_to_first_token", "time_per_output_token",
                               "success_rate", "throughput"]
    assert run.columns[-12:-1] == ["error", "real_evaluation", "fitness", "num_prompts", "eval_id",
                                   "phase", "particle", "iteration", "reused", "attempts", "load"]


def test_the_acceptance_length_is_a_column(run):
    # speculative decoding's measured acceptance length (the server's counters): a cell where measured, else empty
    metrics = {**result(0).metrics, "spec_accept_len": 2.75, "prefix_cache_hit_rate": 0.5}
    run.append(result(0, metrics=metrics))
    run.append(result(1))
    rows = [dict(zip(*pair)) for pair in ((read_csv(run.run_dir / "results.csv")[0], r)
                                           for r in read_csv(run.run_dir / "results.csv")[1:])]
    assert [r["spec_accept_len"] for r in rows] == ["2.75", ""]
    before = (run.run_dir / "results.csv").read_text()
    run.rebuild_results_csv()  # the projection of the journal: the same table
    assert (run.run_dir / "results.csv").read_text() == before


def test_journal_is_fsynced_and_kept_open(run, monkeypatch):
    synced: list[int] = []
    opened: list[str] = []
    real_fsync, real_open = os.fsync, os.open
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    monkeypatch.setattr(os, "open",
                        lambda p, *a, **k: (opened.append(os.fspath(p)), real_open(p, *a, **k))[1])
    for i in range(3):
        run.append(result(i))
    assert len(synced) >= 3
    assert opened.count(str(run.journal_path)) == 1


def test_append_after_close_reopens(run):
    run.append(result(0))
    run.close()
    run.close()  # idempotent
    run.append(result(1))
    assert [r.eval_id for r in run.load_journal()] == [0, 1]


def test_duplicate_append_is_refused(run):
    run.append(result(0))
    with pytest.raises(ValueError, match="already"):
        run.append(result(0))
    assert len(strict_lines(run.journal_path)) == 1


def test_disk_full_leaves_the_journal_parseable(run, monkeypatch):
    run.append(result(0))
    before = run.journal_path.read_bytes()
    real_write = os.write

    def full(fd, data):
        real_write(fd, bytes(data)[:10])  # a partial line reaches the file, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(StoreError, match="No space left on device.*free space") as exc:
        run.append(result(1))
    assert str(run.journal_path) in str(exc.value)
    assert run.journal_path.read_bytes() == before
    monkeypatch.setattr(os, "write", real_write)
    run.append(result(1))
    assert [r.eval_id for r in run.load_journal()] == [0, 1]
    assert len(read_csv(run.results_path)) == 3


def test_short_write_is_undone(run, monkeypatch):
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data)[:5]))
    with pytest.raises(StoreError, match="short write"):
        run.append(result(0))
    assert run.journal_path.read_bytes() == b""


def test_fsync_failure_is_undone(run, monkeypatch):
    def fail(fd):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(StoreError, match="Input/output error"):
        run.append(result(0))
    assert run.journal_path.read_bytes() == b""


def test_csv_failure_keeps_the_journal_and_rebuilds_later(run, monkeypatch):
    run.append(result(0))
    real_open = open

    def no_csv(path, *a, **k):
        if Path(path) == run.results_path and a and a[0] == "a":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", no_csv)
    with pytest.raises(StoreError, match="safe in the journal"):
        run.append(result(1))
    monkeypatch.setattr("builtins.open", real_open)
    assert [r.eval_id for r in run.load_journal()] == [0, 1]
    run.append(result(2))  # the stale table is rebuilt from the journal
    assert [row[run.columns.index("eval_id")] for row in read_csv(run.results_path)[1:]] == ["0", "1", "2"]


def test_torn_last_line_is_ignored_then_truncated(run):
    run.append(result(0))
    run.append(result(1))
    run.close()
    good = run.journal_path.read_bytes()
    torn = dumps(result(2).to_json("r1"))[:40]
    run.journal_path.write_bytes(good + torn.encode())
    again = RunStore.open(run.run_dir)
    assert [r.eval_id for r in again.load_journal()] == [0, 1]
    assert any("incomplete" in w for w in again.warnings)
    again.append(result(2))
    assert [ln["eval_id"] for ln in strict_lines(again.journal_path)] == [0, 1, 2]
    assert again.journal_path.read_bytes().startswith(good)


def test_complete_last_line_without_newline_is_kept(run):
    run.append(result(0))
    run.close()
    run.journal_path.write_bytes(run.journal_path.read_bytes() + dumps(result(1).to_json("r1")).encode())
    again = RunStore.open(run.run_dir)
    assert [r.eval_id for r in again.load_journal()] == [0, 1]
    again.append(result(2))
    assert [ln["eval_id"] for ln in strict_lines(again.journal_path)] == [0, 1, 2]


def test_corruption_in_the_middle_is_an_error(run):
    run.append(result(0))
    run.append(result(1))
    run.close()
    lines = run.journal_path.read_bytes().split(b"\n")
    run.journal_path.write_bytes(lines[0][:30] + b"\n" + lines[1] + b"\n")
    again = RunStore.open(run.run_dir)
    with pytest.raises(StoreError, match="line 1 is corrupt") as exc:
        again.load_journal()
    assert str(again.journal_path) in str(exc.value)
    with pytest.raises(StoreError):
        again.append(result(2))


def test_duplicate_eval_ids_keep_the_first(run):
    run.append(result(0, fitness=0.1))
    run.append(result(1))
    run.close()
    extra = dumps(result(0, fitness=0.9).to_json("r1")) + "\n"
    with open(run.journal_path, "a") as fh:
        fh.write(extra)
    again = RunStore.open(run.run_dir)
    back = again.load_journal()
    assert [(r.eval_id, r.fitness) for r in back] == [(0, 0.1), (1, 0.5)]
    assert any("eval_id 0 appears again" in w for w in again.warnings)


def test_rebuild_results_csv_matches_incremental(run):
    for i in range(5):
        run.append(result(i, fitness=math.inf if i == 3 else i / 10, error="x" if i == 3 else None))
    incremental = run.results_path.read_bytes()
    run.results_path.write_text("garbage\n")
    run.rebuild_results_csv()
    assert run.results_path.read_bytes() == incremental


def test_undecodable_error_text_is_journaled(run):
    text = "log tail: caf\u00e9 \udcff bytes"  # a lone surrogate, as surrogateescape decoding leaves
    run.append(result(0, fitness=math.inf, error=text))
    assert run.load_journal()[0].error == text
    run.rebuild_results_csv()
    assert "caf\u00e9" in run.results_path.read_text(encoding="utf-8")
    run.write_text("note.txt", text)


def test_numpy_values_are_journaled(run):
    r = result(0, values={"tp": np.int64(2), "max_num_seqs": np.float64(1.5), "block_size": np.bool_(True)},
               position=list(np.array([0.5, np.inf])))
    run.append(r)
    line = strict_lines(run.journal_path)[0]
    assert line["values"] == {"tp": 2, "max_num_seqs": 1.5, "block_size": True}
    assert line["position"] == [0.5, None]


finite_or_not = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none())


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(metrics=st.dictionaries(st.sampled_from(METRICS), finite_or_not),
       fitness=st.floats(allow_nan=False), error=st.one_of(st.none(), st.text(max_size=30)))
def test_journal_round_trip_property(tmp_path_factory, settings, metrics, fitness, error):
    s = RunStore.create(tmp_path_factory.mktemp("p"), settings.config, run_id="p")
    with s:
        s.append(result(0, metrics=metrics, fitness=fitness, error=error))
        back = s.load_journal()[0]
    strict_lines(s.journal_path)
    want = {k: (v if v is not None and math.isfinite(v) else None) for k, v in metrics.items()}
    assert back.metrics == want
    assert back.fitness == (fitness if math.isfinite(fitness) else math.inf)
    assert back.error == error
    assert len(read_csv(s.results_path)) == 2


# -- documents ---------------------------------------------------------------------------------
def test_state_round_trip(run):
    state = {"iteration": 3, "positions": [[0.1, math.nan]], "best": math.inf, "rng": {"s": 1}}
    run.save_state(state)
    raw = json.loads(run.state_path.read_text(), parse_constant=lambda c: pytest.fail(c))
    assert raw["positions"] == [[0.1, None]] and raw["best"] is None
    assert run.read_json("state.json") == {"iteration": 3, "positions": [[0.1, None]], "best": None, "rng": {"s": 1}}
    run.save_state({"iteration": 4})
    assert run.read_json("state.json") == {"iteration": 4}
    assert not list(run.run_dir.glob(".*.tmp"))


def test_failed_state_write_keeps_the_previous_checkpoint(run, monkeypatch):
    run.save_state({"iteration": 1})

    def fail(a, b):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(StoreError, match="state.json"):
        run.save_state({"iteration": 2})
    assert run.read_json("state.json") == {"iteration": 1}
    assert not list(run.run_dir.glob(".*.tmp"))


def test_atomic_write_fsyncs_file_and_directory(tmp_path, monkeypatch):
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    atomic_write(tmp_path / "x.json", b"{}")
    assert len(synced) == 2 and (tmp_path / "x.json").read_bytes() == b"{}"


def test_corrupt_state_is_an_error(run):
    run.state_path.write_text("{")
    with pytest.raises(StoreError, match="state.json"):
        run.read_json("state.json")


def test_best_and_generic_documents(run):
    p = run.write_best({"fitness": 0.8, "values": {"tp": 2}, "metrics": {"x": math.inf}})
    assert p == run.run_dir / "best.json"
    assert json.loads(p.read_text()) == {"fitness": 0.8, "values": {"tp": 2}, "metrics": {"x": None}}
    q = run.write_text("report/launch.sh", "vllm serve --tp 2\n")
    assert q.read_text() == "vllm serve --tp 2\n"
    assert run.read_json("nope.json") is None
    run.write_json("top.json", [1, (2, 3)])
    assert run.read_json("top.json") == [1, [2, 3]]
    for bad in ("../x", "/etc/x", ""):
        with pytest.raises(ValueError):
            run.write_text(bad, "x")


def test_log_path(run):
    p = run.log_path("server", 7, 2)
    assert p == run.run_dir / "logs" / "eval-00007-server-a2.log"
    assert p.parent.is_dir()
    with pytest.raises(ValueError):
        run.log_path("../x", 1, 1)


def test_json_safe():
    assert json_safe({"a": (1, float("nan")), 2: np.array([1.0, np.inf]), "p": Path("/x")}) == \
        {"a": [1, None], "2": [1.0, None], "p": "/x"}
    with pytest.raises(TypeError):
        json_safe(object())


def test_results_csv_cells_a_spreadsheet_would_run_as_formulas_are_quoted():
    """Issue 51 item 14: error texts come from server logs, so a cell starting with "=", "+", "-", "@" (msmodeling
    optix's FORMULA_PREFIXES, Ascend/msmodeling optix/io_utils.py:25 and sanitize_csv_value at :75-79), a tab
    or a carriage return gets a leading "'"; numbers, negative ones too, stay numbers."""
    from msopt.run.store import csv_columns, csv_row

    res = EvaluationResult(eval_id=1, phase="swarm", particle=0, iteration=0, position_in=[0.0], position=[0.0],
                           values={"policy": "=HYPERLINK(\"http://x\")", "mode": "@SUM(A1)", "tp": 2,
                                   "ratio": -0.5},
                           metrics={m: None for m in METRICS}, fitness=-1.25,
                           error="=cmd|' /C calc'!A0\n-2+3 more lines")
    cols = csv_columns(["policy", "mode", "tp", "ratio"])
    row = dict(zip(cols, csv_row(res, cols)))
    assert row["error"] == "'=cmd|' /C calc'!A0 | -2+3 more lines"
    assert row["policy"] == "'=HYPERLINK(\"http://x\")" and row["mode"] == "'@SUM(A1)"
    assert row["tp"] == "2" and row["ratio"] == "-0.5" and row["fitness"] == "-1.25"
    from msopt.run.store._table import sanitize_csv_value

    assert sanitize_csv_value("\tx") == "'\tx" and sanitize_csv_value("\r=1") == "'\r=1"
    assert csv_row(replace_error(res, "ValueError: x"), cols)[cols.index("error")] == "ValueError: x"


def replace_error(res: EvaluationResult, error: str) -> EvaluationResult:
    from dataclasses import replace

    return replace(res, error=error)
