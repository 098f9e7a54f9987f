"""msopt simulate: one simulated evaluation from the command line, without Ray."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
QUICK = str(REPO / "configs" / "quickstart.toml")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "msopt.cli", "simulate", *args], capture_output=True, text=True)


def test_quickstart_json_is_sensible():
    out = run("-c", QUICK, "--json")
    assert out.returncode == 0, out.stderr
    m = json.loads(out.stdout)
    assert {"generate_speed", "time_to_first_token", "time_per_output_token", "success_rate",
            "throughput", "error", "refused", "assumed", "fitness", "values"} <= set(m)
    assert m["assumed"] == []  # atlas-800i-a2's efficiencies are its own
    assert m["error"] is None and m["refused"] is False and m["success_rate"] == 1.0
    assert 100 < m["generate_speed"] < 100_000 and 0 < m["time_per_output_token"] < 1
    assert 0 < m["time_to_first_token"] < 60 and m["throughput"] > 0


def test_a_candidate_vllm_refuses_is_refused_before_launch():
    out = run("-c", QUICK, "--json", "--set", "enable_chunked_prefill=false", "--set", "max_num_batched_tokens=2048")
    assert out.returncode == 1
    m = json.loads(out.stdout)
    assert m["refused"] is True and m["generate_speed"] is None
    assert "max_num_batched_tokens (2048) is smaller than max_model_len (4096)" in m["error"]


def test_set_changes_the_result():
    a = json.loads(run("-c", QUICK, "--json", "--set", "max_num_seqs=8").stdout)
    b = json.loads(run("-c", QUICK, "--json", "--set", "max_num_seqs=128").stdout)
    assert b["generate_speed"] > a["generate_speed"]


def test_oom_configuration_exits_1(write_toml):
    cfg = write_toml(Path(QUICK).read_text().replace('model = "qwen3-8b"', 'model = "llama-3.1-70b"'))
    out = run("-c", str(cfg), "--json", "--set", "tp=1", "--set", "pp=1")
    assert out.returncode == 1
    assert "out of memory" in json.loads(out.stdout)["error"].lower()


def test_set_errors_are_one_line():
    for args, needle in ((["--set", "nope=3"], "no such field"), (["--set", "dp=3"], "derived or constant"),
                         (["--set", "x"], "NAME=VALUE")):
        out = run("-c", QUICK, *args)
        assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr


def test_simulate_does_not_import_ray():
    code = ("import sys; from msopt.cli.main import main; rc = main(['simulate', '-c', %r, '--json']); "
            "assert 'ray' not in sys.modules; sys.exit(rc)" % QUICK)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_json_says_which_inputs_were_assumed(tmp_path: Path):
    text = Path(QUICK).read_text().replace('hardware = "atlas-800i-a2"', 'hardware = "NVIDIA A100-SXM4-80GB"')
    conf = tmp_path / "a100.toml"
    conf.write_text(text)
    m = json.loads(run("-c", str(conf), "--json").stdout)
    assert m["error"] is None
    assert m["assumed"] == ["efficiencies of h100-sxm (a100-sxm-80gb has no fit of its own)"]


def test_a_bad_spec_accept_len_is_one_line_at_load(tmp_path: Path):
    text = Path(QUICK).read_text().replace('weight_dtype = "bf16"', 'weight_dtype = "bf16"\nspec_accept_len = 0.5')
    conf = tmp_path / "bad.toml"
    conf.write_text(text)
    out = run("-c", str(conf), "--json")
    assert out.returncode == 2 and "spec_accept_len must be a number from 1 to 64" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
