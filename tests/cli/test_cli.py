"""The msopt command line, run as a real process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.fields_toml import TP_PP_DP

CFG = """
n_particles = 4
""" + TP_PP_DP + """
[[vllm.target_field]]
name = "big"
config_position = "--big"
min = 1
max = 1000
dtype = "int"
[[vllm.target_field]]
name = "q"
config_position = "--q"
min = 0
max = 0
dtype = "ternary_factories"
dtype_param = { target_names = ["big", "pp"], product = 12 }
"""


def msopt(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "msopt.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ""} | _pythonpath())


def _pythonpath() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "HOME")}


def test_validate_json(write_toml):
    out = msopt("validate", "-c", str(write_toml(CFG)), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [d["name"] for d in data["dimensions"]] == ["tp", "pp", "big"]
    assert data["dimensions"][2] == {"name": "big", "dtype": "int", "low": 0.5, "high": 1000.5, "candidates": None}
    assert data["derived"] == ["dp", "q"]
    assert data["settings"]["n_particles"] == 4 and data["settings"]["iters"] == 5


def test_validate_text_lists_candidates(write_toml):
    out = msopt("validate", "-c", str(write_toml(CFG)))
    assert out.returncode == 0 and "candidates [1, 2, 4, 8]" in out.stdout and "dp" in out.stdout


def test_decode_with_context(write_toml):
    path = str(write_toml(CFG))
    a = json.loads(msopt("decode", "-c", path, "--position", "0.9,0.9,3", "--json").stdout)
    assert a["values"]["tp"] == 8 and a["values"]["pp"] == 1 and a["repaired"] and a["error"] is None
    out = msopt("decode", "-c", path, "--position", "0.9,0.9,3", "--particle", "3", "--particles", "4",
                "--iteration", "0", "--json")
    b = json.loads(out.stdout)
    assert out.returncode == 0 and b["values"]["pp"] == 4 and b["values"]["tp"] == 2
    assert b["values"]["tp"] * b["values"]["pp"] * b["values"]["dp"] == 8


def test_decode_unrepairable_exits_1(write_toml):
    out = msopt("decode", "-c", str(write_toml(CFG)), "--position", "0.1,0.1,5", "--json")
    assert out.returncode == 1
    data = json.loads(out.stdout)
    assert data["error"] and data["values"]["big"] == 5


@pytest.mark.parametrize("args, needle", [
    (["validate", "-c", "/nonexistent.toml"], "not found"),
    (["decode", "--position", "a,b"], "not a comma-separated list"),
    (["decode", "--position", "1"], "position has 1 values"),
    (["decode", "--position", "1,2", "--particle", "5", "--particles", "2"], "--particle 5"),
    (["validate", "-e", "nope"], "engine 'nope'"),
    (["frobnicate"], "invalid choice"),
])
def test_errors_are_one_line_exit_2(args, needle):
    out = msopt(*args)
    assert out.returncode == 2
    assert needle in out.stderr and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_bare_name_in_cwd(write_toml, tmp_path):
    write_toml(CFG, "mine.toml")
    out = msopt("validate", "-c", "mine.toml", "--json", cwd=tmp_path)
    assert out.returncode == 0 and json.loads(out.stdout)["settings"]["n_particles"] == 4


def test_cli_does_not_import_ray(write_toml):
    code = ("import sys; from msopt.cli.main import main; main(['validate', '-c', %r]); "
            "assert 'ray' not in sys.modules, 'ray imported'" % str(write_toml(CFG)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
