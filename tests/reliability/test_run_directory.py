"""Every run directory that optimize leaves behind can be resumed and reported (issue 18, item 2).

config.toml is written by a maintained TOML writer and read back before the first evaluation:
non-ASCII table keys, control characters in strings and TOML datetimes survive the round trip.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from msopt.cli.main import main
from msopt.config import dump_toml, load_settings
from msopt.config.layers import same_toml

SMALL = """
simulate = true
n_particles = 2
iters = 1
seed = 3
sample_size = 8
[data_storage]
pso_top_k = 0
[simulator]
hardware = "h100-sxm"
model = "llama-3.1-8b"
[simulator.workload]
input_len = 32
output_len = 4
num_prompts = 8
concurrency = 2
[vllm.command]
executable = ["vllm", "serve"]
model = "x"
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 4
max = 64
dtype = "int"
value = 16
"""

HOSTILE = {
    "non-ASCII env key": '[vllm.env]\n"CAFÉ_Ü" = "1"\n',
    "DEL in a string": '[vllm.env]\nNOTE = "a\\u007fb"\n',
    "control characters": '[vllm.env]\nNOTE = "tab\\there\\u0001\\u001f"\n',
    "datetime": '[kubectl]\nwhen = 1979-05-27T07:32:00Z\nday = 1979-05-27\nclock = 07:32:00\n',
    "quoted table key": '[kubectl."a b.c"]\nx = 1\n',
}


@pytest.mark.parametrize("extra", list(HOSTILE.values()), ids=list(HOSTILE))
def test_the_run_directory_resumes_and_reports(extra: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(SMALL + extra, encoding="utf-8")
    code = main(["optimize", "-c", str(cfg), "--no-ray", "--plain", "-o", str(tmp_path / "runs")])
    out = capsys.readouterr()
    assert code == 0, out.err
    run_dir = Path(out.out.strip().splitlines()[-1])
    saved = load_settings(run_dir / "config.toml", environ={}).replace(output="msopt_runs")
    assert same_toml(saved.data, load_settings(cfg, environ={}).data)
    n = len((run_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines())
    code = main(["optimize", "--resume", str(run_dir), "--no-ray", "--plain"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert len((run_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()) == n  # nothing re-ran
    code = main(["report", str(run_dir)])
    out = capsys.readouterr()
    assert code == 0, out.err


def test_dump_toml_round_trips_what_the_old_writer_broke() -> None:
    import datetime
    import tomllib

    data = {"k\u00e9y": {"\u00fc": "\x7f\x00\x1b"}, "t": datetime.datetime(2020, 1, 2, 3, 4, 5),
            "d": datetime.date(2020, 1, 2), "arr": [{"k": 1}, {"k": [1, 2]}], "nan": float("nan")}
    assert same_toml(tomllib.loads(dump_toml(data)), data)
    assert not same_toml({"a": 1}, {"a": 1.0}) and not same_toml({"a": [1]}, {"a": [1, 2]})


def test_run_json_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(SMALL + HOSTILE["non-ASCII env key"], encoding="utf-8")
    assert main(["optimize", "-c", str(cfg), "--no-ray", "--plain", "-o", str(tmp_path / "runs")]) == 0
    run_dir = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["engine"] == "vllm"
