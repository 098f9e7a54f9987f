"""Relative paths a launch hands to a program are resolved against the configuration file's directory.

Each server and benchmark runs in its evaluation's own work directory, so a path written relative to
the configuration file (``model = "./models/tiny"``) must reach the program absolute.
"""

from __future__ import annotations

import os
from pathlib import Path

from msopt.config import load_settings
from msopt.engines import get_engine
from msopt.launch.render import Candidate
from tests.support.fields_toml import TP_PP_DP


def _render(settings, workdir: Path) -> tuple[str, ...]:
    values = {d.name: d.value for d in settings.fields}
    values.update({"tp": 1, "pp": 1, "dp": 8})
    adapter = get_engine("vllm")
    return adapter.render(Candidate(values, settings.fields, settings.data["vllm"]), port=8000, workdir=workdir).argv


def test_relative_model_and_executable_resolved_against_the_config_file(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    (conf / "models" / "tiny").mkdir(parents=True)
    (conf / "checkpoints" / "small").mkdir(parents=True)
    (conf / "cfg.toml").write_text(
        '[vllm.command]\nexecutable = ["bin/vllm", "serve", "./extra.yaml", "--x"]\nmodel = "./models/tiny"\n'
        + TP_PP_DP, encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the command runs from another directory, as a run's server does
    s = load_settings(str(conf / "cfg.toml"), environ={})
    argv = _render(s, tmp_path / "work")
    assert argv[0] == str(conf / "bin" / "vllm")
    assert argv[1] == "serve" and argv[2] == str(conf / "extra.yaml") and argv[3] == "--x"
    assert str(conf / "models" / "tiny") in argv and "./models/tiny" not in argv
    # a relative model path without ./ that exists beside the file is a path too
    (conf / "cfg2.toml").write_text('[vllm.command]\nmodel = "checkpoints/small"\n' + TP_PP_DP, encoding="utf-8")
    assert load_settings(str(conf / "cfg2.toml"), environ={}).data["vllm"]["command"]["model"] == \
        str(conf / "checkpoints" / "small")
    # the run directory's config.toml names the same files wherever it is read from
    assert str(conf / "models" / "tiny") in s.to_toml()


def test_names_that_are_not_relative_paths_stay_as_written(write_toml):
    text = ('[vllm.command]\nexecutable = ["vllm", "serve"]\nmodel = "Qwen/Qwen3-8B"\n'
            '[vllm_benchmark.command]\nexecutable = ["~/venv/bin/vllm", "bench", "serve"]\n' + TP_PP_DP)
    s = load_settings(str(write_toml(text)), environ={})
    cmd = s.data["vllm"]["command"]
    assert list(cmd["executable"]) == ["vllm", "serve"]  # a program on PATH
    assert cmd["model"] == "Qwen/Qwen3-8B"                 # a Hugging Face id, not a file here
    assert s.data["vllm_benchmark"]["command"]["executable"][0] == "~/venv/bin/vllm"  # the home, expanded at launch
    absolute = write_toml('[vllm.command]\nmodel = "/models/x"\nexecutable = ["/opt/bin/vllm", "serve"]\n' + TP_PP_DP,
                          name="abs.toml")
    cmd = load_settings(str(absolute), environ={}).data["vllm"]["command"]
    assert cmd["model"] == "/models/x" and cmd["executable"][0] == "/opt/bin/vllm"


def test_mindie_config_path_and_placeholders(tmp_path):
    (tmp_path / "cfg.toml").write_text(
        '[mindie]\nconfig_path = "conf/config.json"\n[vllm.command]\nmodel = "./models/{tp}"\n' + TP_PP_DP,
        encoding="utf-8")
    s = load_settings(str(tmp_path / "cfg.toml"), environ={})
    assert s.data["mindie"]["config_path"] == os.path.join(str(tmp_path), "conf", "config.json")
    assert s.data["vllm"]["command"]["model"] == "./models/{tp}"  # known per launch: left to the adapter
