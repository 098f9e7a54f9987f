"""Inputs the CLI must refuse in one line with exit 2 (issue 19), and the ones it must accept."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from msopt.cli.main import main
from msopt.space import SearchSpace
from msopt.space.fields import parse_field

REPO = Path(__file__).resolve().parents[2]
QUICK_PATH = REPO / "configs" / "quickstart.toml"
QUICK = str(QUICK_PATH)


def refused(capsys, *argv: str) -> str:
    """Run the CLI, assert exit 2 and one line on stderr, return that line."""
    rc = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("item, valid", [
    ("max_num_seqs=abc", "an integer from 8 to 128"),
    ("enable_chunked_prefill=no", "true or false"),
    ("enable_chunked_prefill=maybe", "true or false"),
    ("enable_chunked_prefill=1", "true or false"),
    ("tp=3", "one of 1, 2, 4, 8"),
    ("tp=16", "one of 1, 2, 4, 8"),
    ("tp=true", "one of 1, 2, 4, 8"),
    ("max_num_seqs=100000", "an integer from 8 to 128"),
    ("max_num_seqs=12.5", "an integer from 8 to 128"),
    ("gpu_memory_utilization=0.5", "a number from 0.7 to 0.95"),
    ("gpu_memory_utilization=0.805", "a number from 0.7 to 0.95"),  # off the declared step 0.01
])
def test_set_refuses_what_the_dtype_would_round_or_clip(capsys, item, valid):
    err = refused(capsys, "simulate", "-c", QUICK, "--set", item)
    assert err.startswith(f"msopt: error: --set {item.split('=')[0]}=") and valid in err


def test_set_accepts_exact_values(capsys):
    rc = main(["simulate", "-c", QUICK, "--json", "--set", "tp=2", "--set", "max_num_seqs=64",
               "--set", "gpu_memory_utilization=0.85", "--set", "enable_chunked_prefill=true"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["error"] is None and out["generate_speed"] > 0


def test_unknown_benchmark_is_refused_in_a_simulated_run_too(capsys, tmp_path):
    err = refused(capsys, "optimize", "-c", QUICK, "-b", "foo", "--no-ray", "-o", str(tmp_path))
    assert "'benchmark'" in err and "foo" in err and "vllm_benchmark" in err
    assert not any(tmp_path.iterdir())


def test_engine_without_fields_in_the_users_file_is_refused(capsys):
    for command in ("validate", "optimize"):
        err = refused(capsys, command, "-c", QUICK, "-e", "sglang")
        assert "[[sglang.target_field]]" in err and "quickstart.toml" in err and "-e vllm" in err


def test_validate_refuses_what_optimize_refuses(capsys, write_toml):
    text = QUICK_PATH.read_text()
    for bad, needle in ((text.replace('"atlas-800i-a2"', '"atlas-800i-a3x"'), "unknown hardware 'atlas-800i-a3x'"),
                        (text.replace("[simulator.workload]", "[simulator.workloud]"), "did you mean 'workload'")):
        cfg = str(write_toml(bad))
        for command in ("validate", "optimize", "simulate"):
            assert needle in refused(capsys, command, "-c", cfg)


def test_empty_search_space_is_refused(capsys, write_toml):
    cfg = write_toml('engine = "vllm"\nsimulate = true\n[vllm]\ntarget_field = []\n')
    for command in ("validate", "optimize"):
        err = refused(capsys, command, "-c", str(cfg))
        assert "no searched field" in err and "msopt simulate" in err


def test_enum_without_bounds_is_searched_like_the_original():
    decl = parse_field({"name": "tp", "dtype": "enum", "dtype_param": [1, 2, 4]}, source="x.toml",
                       section="vllm", index=0)
    space = SearchSpace([decl])
    assert space.names == ("tp",)
    assert space.dimensions[0].low == 0 and space.dimensions[0].high == 100
    assert [space.decode([x]).values["tp"] for x in (1, 50, 99)] == [1, 2, 4]


def test_float_step_decodes_to_the_step():
    decl = parse_field({"name": "g", "dtype": "float", "min": 0.7, "max": 0.95, "step": 0.01},
                       source="x.toml", section="vllm", index=0)
    space = SearchSpace([decl])
    values = [space.decode([x]).values["g"] for x in (0.7963799099058896, 0.7, 0.95, 0.9449)]
    assert values == [0.8, 0.7, 0.95, 0.94]
    assert all(len(repr(v)) <= 4 for v in values)


@pytest.mark.parametrize("raw, needle", [
    ({"name": "n", "dtype": "int", "min": 1, "max": 9, "step": 2}, "applies to float fields"),
    ({"name": "g", "dtype": "float", "min": 0, "max": 1, "step": 0}, "'step' must be > 0"),
])
def test_step_errors_name_the_fix(raw, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        parse_field(raw, source="x.toml", section="vllm", index=0)


def test_unreachable_address_fails_fast_in_one_line(tmp_path):
    # in a process of its own: another test of this session may have initialised Ray already
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", QUICK, "--address",
                              f"127.0.0.1:{port}", "-o", str(tmp_path)], capture_output=True, text=True, timeout=300)
    err = out.stderr.strip()
    assert out.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in err and "ray start --head" in err
    assert not any(tmp_path.iterdir())
