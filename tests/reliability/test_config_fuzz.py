"""A property-based fuzzer of configurations (issue 18): configurations written from the
documented schema, then mutated, go through ``msopt validate`` and a short simulated ``msopt
optimize``. Never a traceback; never exit 0 (or 1) with a run directory that cannot be resumed
and reported.

Bounded and derandomized for CI (20 examples); ``MSOPT_FUZZ_EXAMPLES`` runs that many random ones, e.g.
``MSOPT_FUZZ_EXAMPLES=500 python -m pytest tests/reliability/test_config_fuzz.py``.
"""

from __future__ import annotations

import datetime
import math
import os
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from msopt.cli.main import main

EXAMPLES = int(os.environ.get("MSOPT_FUZZ_EXAMPLES", "20"))

BASE: dict[str, Any] = {
    "simulate": True, "n_particles": 2, "iters": 1, "seed": 3, "sample_size": 8,
    "data_storage": {"pso_top_k": 1},
    "simulator": {"hardware": "h100-sxm", "model": "llama-3.1-8b",
                  "workload": {"input_len": 32, "output_len": 4, "num_prompts": 8, "concurrency": 2}},
    "vllm": {"command": {"executable": ["vllm", "serve"], "model": "x"},
             "target_field": [
                 {"name": "max_num_seqs", "config_position": "--max-num-seqs", "min": 4, "max": 64,
                  "dtype": "int", "value": 16},
                 {"name": "gpu_memory_utilization", "config_position": "--gpu-memory-utilization", "min": 0.7,
                  "max": 0.95, "dtype": "float", "value": 0.9},
                 {"name": "block_size", "config_position": "--block-size", "min": 0, "max": 2, "dtype": "enum",
                  "dtype_param": [8, 16, 32], "value": 16},
             ]},
}

#: Documented keys (docs/configuration.md, docs/engines.md) a mutation may set, as paths.
PATHS: list[tuple[Any, ...]] = [
    ("n_particles",), ("iters",), ("seed",), ("sample_size",), ("mode",), ("duplicate_policy",), ("objective",),
    ("ttft_slo",), ("tpot_slo",), ("success_rate_slo",), ("generate_speed_target",), ("ttft_penalty",),
    ("engine",), ("benchmark",), ("simulate",), ("service",),
    ("pso_options", "c1"), ("pso_options", "c2"), ("pso_options", "w"), ("pso_strategy", "w_end"),
    ("data_storage", "pso_top_k"), ("cluster", "accelerator"), ("cluster", "devices_per_trial"),
    ("simulator", "hardware"), ("simulator", "model"), ("simulator", "noise"), ("simulator", "seed"),
    ("simulator", "weight_dtype"), ("simulator", "kv_dtype"),
    ("simulator", "workload", "num_prompts"), ("simulator", "workload", "input_len"),
    ("simulator", "workload", "output_len"), ("simulator", "workload", "concurrency"),
    ("simulator", "workload", "request_rate"),
    ("vllm", "command", "executable"), ("vllm", "command", "others"), ("vllm", "command", "model"),
    ("vllm", "command", "served_model_name"), ("vllm", "env", "VAR"), ("vllm", "wait_start_time"),
    ("health_check", "service", "fatal", "oom"), ("health_check", "log_snippet_length"),
    ("kubectl", "note"), ("capacity", "enabled"),
    *[("vllm", "target_field", i, k) for i in range(3)
      for k in ("name", "config_position", "min", "max", "dtype", "dtype_param", "value", "constant")],
]

ATOMS = st.one_of(
    st.sampled_from([-1, 0, 1, 2, 3, 16, 64, 1_000_001, 2**63 - 1, -(2**63)]),
    st.integers(min_value=-1000, max_value=1000),
    st.sampled_from([0.0, -0.5, 0.5, 1e-300, 1e300, math.inf, -math.inf, math.nan]),
    st.booleans(),
    st.sampled_from(["", "vllm", "sync", "async", "reuse", "default", "goodput", "int", "float", "enum", "ratio",
                     "range", "share", "--max-num-seqs", "--x=1;touch", "env", "none", "A=B", "a\x00b", "\x7f",
                     "caf\u00e9", "'unclosed", "$(id)", "h100-sxm", "NPU", "bf16", "max_num_seqs"]),
    st.text(max_size=12),
    st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 1, 1)),
)
VALUES = st.one_of(ATOMS, st.lists(ATOMS, max_size=4), st.dictionaries(st.text(max_size=6), ATOMS, max_size=3))


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    node: Any = doc
    for key in path[:-1]:
        if isinstance(node, list):
            if not isinstance(key, int) or key >= len(node):
                return
            node = node[key]
        else:
            node = node.setdefault(key, {})
        if not isinstance(node, (dict, list)):
            return
    if isinstance(node, dict):
        node[path[-1]] = value
    elif isinstance(node, list) and isinstance(path[-1], int) and path[-1] < len(node):
        node[path[-1]] = value


def _delete(doc: dict[str, Any], path: tuple[Any, ...]) -> None:
    node: Any = doc
    for key in path[:-1]:
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            return
    if isinstance(node, dict):
        node.pop(path[-1], None)


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    import copy

    doc = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        kind = draw(st.sampled_from(["set", "set", "set", "delete", "unknown"]))
        if kind == "unknown":
            table = draw(st.sampled_from([(), ("simulator",), ("vllm",), ("cluster",), ("vllm", "command")]))
            _set(doc, (*table, draw(st.text(min_size=1, max_size=8))), draw(VALUES))
        elif kind == "delete":
            _delete(doc, draw(st.sampled_from(PATHS)))
        else:
            _set(doc, draw(st.sampled_from(PATHS)), draw(VALUES))
    return doc


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)  # anything but an MsoptError escapes main with its traceback: the test fails
    out = capsys.readouterr()
    return code, out.out, out.err


@hsettings(max_examples=EXAMPLES, deadline=None, derandomize="MSOPT_FUZZ_EXAMPLES" not in os.environ,
           suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(doc=configs())
@pytest.mark.slow
def test_mutated_configs_never_trace_back_nor_leave_a_broken_run(doc: dict[str, Any], tmp_path_factory,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    tmp = tmp_path_factory.mktemp("fuzz")
    cfg = tmp / "cfg.toml"
    try:
        cfg.write_text(tomli_w.dumps(doc), encoding="utf-8")
    except (TypeError, ValueError, UnicodeEncodeError):
        return  # not expressible as TOML (e.g. a surrogate): nothing a user could write
    code, _, err = _run(["validate", "-c", str(cfg)], capsys)
    assert code in (0, 2), err
    assert code == 0 or len(err.strip().splitlines()) == 1, err
    out = tmp / "runs"
    code, stdout, err = _run(["optimize", "-c", str(cfg), "--no-ray", "--plain", "-o", str(out),
                              "--particles", "2", "--iters", "1"], capsys)
    assert code in (0, 1, 2), err
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
        return
    run_dir = Path(stdout.strip().splitlines()[-1])
    journal = (run_dir / "journal.jsonl").read_bytes()
    code, _, err = _run(["optimize", "--resume", str(run_dir), "--no-ray", "--plain"], capsys)
    assert code in (0, 1), err
    assert (run_dir / "journal.jsonl").read_bytes() == journal  # a finished run: nothing runs again
    code, _, err = _run(["report", str(run_dir)], capsys)
    assert code == 0, err
