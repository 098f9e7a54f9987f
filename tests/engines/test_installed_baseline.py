"""Issue 36 item 5: the baseline as the original took it (installed config.json, environment), the run's
first lines saying where each baseline value and the engine and benchmark came from, and `msopt optimizer`
taking the original's defaults (-e mindie -b ais_bench)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import msopt.engines.mindie as mindie_mod
from msopt.cli.main import build_parser
from msopt.cli.optimize import _load
from msopt.config import load_settings
from msopt.engines.installed import installed_baseline

TEMPLATE = Path(mindie_mod.__file__).with_name("config.json")

MINDIE = """
engine = "mindie"
benchmark = "builtin"
[cluster]
accelerator = "none"
[mindie]
config_path = "{conf}"
[[mindie.target_field]]
name = "max_batch_size"
config_position = "BackendConfig.ScheduleConfig.maxBatchSize"
min = 10
max = 400
dtype = "int"
value = 50
[[mindie.target_field]]
name = "max_prefill_batch_size"
config_position = "BackendConfig.ScheduleConfig.maxPrefillBatchSize"
min = 1
max = 4
dtype = "int"
[[mindie.target_field]]
name = "CONCURRENCY"
config_position = "env"
min = 1
max = 100
dtype = "int"
value = 10
[[mindie.target_field]]
name = "REQUESTRATE"
config_position = "env"
min = 1
max = 100
dtype = "int"
"""


def _config(tmp_path: Path) -> Path:
    doc = json.loads(TEMPLATE.read_text())
    doc["BackendConfig"]["ScheduleConfig"]["maxBatchSize"] = 200
    doc["BackendConfig"]["ScheduleConfig"]["maxPrefillBatchSize"] = 50  # outside the field's 1-4
    conf = tmp_path / "config.json"
    conf.write_text(json.dumps(doc))
    path = tmp_path / "c.toml"
    path.write_text(MINDIE.format(conf=conf))
    return path


def test_the_baseline_is_what_the_installation_runs(tmp_path: Path) -> None:
    settings = load_settings(_config(tmp_path))
    values, lines = installed_baseline(settings.config.engine, {"CONCURRENCY": "64"})
    assert values == {"max_batch_size": 200, "CONCURRENCY": 64}
    conf = tmp_path / "config.json"
    assert lines[0] == (f"baseline max_batch_size = 200: BackendConfig.ScheduleConfig.maxBatchSize of {conf} "
                        "(as the original tool took it)")
    assert lines[1].startswith("baseline max_prefill_batch_size = the middle of its range: ") and "outside [1, 4]" in lines[1]
    assert lines[2] == "baseline CONCURRENCY = 64: $CONCURRENCY in this environment (as the original tool took it)"
    assert lines[3] == "baseline REQUESTRATE = the middle of its range: $REQUESTRATE is not set here"
    updated = settings.with_field_values(values)
    assert {d.name: d.value for d in updated.fields}["max_batch_size"] == 200
    assert 'value = 200' in updated.to_toml()  # the run directory's config.toml keeps it (resume)


def test_the_first_lines_say_what_was_chosen_and_why(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONCURRENCY", raising=False)
    monkeypatch.delenv("REQUESTRATE", raising=False)
    path = _config(tmp_path)
    checked, _ = _load(build_parser().parse_args(["optimize", "-c", str(path)]))
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [f"engine: mindie (the 'engine' key of {path})", f"benchmark: builtin (the 'benchmark' key of {path})"]
    assert out[2].startswith("baseline max_batch_size = 200: ")
    assert {d.name: d.value for d in checked.config.engine.fields}["max_batch_size"] == 200
    _load(build_parser().parse_args(["optimize", "-c", str(path), "-b", "ais_bench"]))
    assert capsys.readouterr().out.splitlines()[1] == "benchmark: ais_bench (-b)"


def test_optimizer_takes_the_originals_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    text = MINDIE.format(conf=tmp_path / "none.json").replace('engine = "mindie"\nbenchmark = "builtin"\n', "")
    path.write_text(text.replace('config_path = "' + str(tmp_path / "none.json") + '"\n', ""))
    checked, _ = _load(build_parser().parse_args(["optimizer", "-c", str(path), "--simulate"]))
    assert (checked.config.engine.name, checked.config.run.benchmark) == ("mindie", "ais_bench")
    out = capsys.readouterr().out.splitlines()
    # issue 51 item 11: the file declares only MindIE's search space, so every command reads it as MindIE's
    assert out[:2] == [f"engine: mindie (the only engine whose [[mindie.target_field]] {path} declares)",
                       "benchmark: ais_bench (msopt optimizer takes the original tool's default)"]
    checked, _ = _load(build_parser().parse_args(["optimize", "-c", str(path), "-e", "mindie", "--simulate"]))
    assert checked.config.run.benchmark == "vllm_benchmark"
    assert capsys.readouterr().out.splitlines()[1] == ("benchmark: vllm_benchmark (msopt's default "
                                                       "(msopt/config/defaults.toml))")
