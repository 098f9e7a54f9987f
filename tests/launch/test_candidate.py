"""The candidate an adapter renders (:class:`msopt.launch.render.Candidate`): the built-in engines' and benchmarks'
rendering methods take it in place of the ``(values, fields, section)`` triple (issue 50 item 3), and the helpers
read it whole."""

from __future__ import annotations

import inspect

import pytest

from msopt.benchmarks import get_benchmark
from msopt.engines import get_engine
from msopt.launch.render import Candidate, env_fields
from msopt.space.fields import parse_field

ENGINES = ("vllm", "sglang", "mindie")
BENCHMARKS = ("vllm_benchmark", "ais_bench", "builtin")
TRIPLE = {"values", "fields", "section"}


def params(obj: object, method: str) -> list[str]:
    return list(inspect.signature(getattr(type(obj), method)).parameters)


@pytest.mark.parametrize("name", ENGINES)
def test_every_engine_method_that_renders_takes_one_candidate(name: str) -> None:
    engine = get_engine(name)
    for method in ("render", "render_nodes", "render_pd", "server_key"):
        got = params(engine, method)
        assert got[:2] == ["self", "candidate"] and not TRIPLE & set(got), (name, method, got)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_every_benchmark_renders_and_runs_one_candidate(name: str) -> None:
    bench = get_benchmark(name)
    render, run = params(bench, "render"), params(bench, "run")
    assert render[:2] == ["self", "candidate"] and not TRIPLE & set(render), (name, render)
    assert run[:3] == ["self", "server", "candidate"] and not TRIPLE & set(run), (name, run)


def test_env_fields_reads_the_section_and_the_env_fields_of_the_candidate() -> None:
    fields = [parse_field({"name": "X", "config_position": "env", "min": 1, "max": 4, "dtype": "int"},
                          source="t.toml", section="vllm", index=0),
              parse_field({"name": "Y", "config_position": "--y", "min": 1, "max": 4, "dtype": "int"},
                          source="t.toml", section="vllm", index=1)]
    env = env_fields(Candidate({"X": 3, "Y": 2}, fields, {"env": {"A": "a$X"}}), "vllm")
    assert env == {"A": "a3", "X": "3"}


def test_the_values_and_the_section_of_a_candidate_decide_its_launch() -> None:
    """Equal candidates give one server key; the same values under another section give another launch."""
    vllm = get_engine("vllm")
    fields = [parse_field({"name": "max-num-seqs", "config_position": "--max-num-seqs", "min": 1, "max": 512,
                           "dtype": "int"}, source="t.toml", section="vllm", index=0)]
    one = Candidate({"max-num-seqs": 64}, fields, {})
    assert vllm.server_key(one) == vllm.server_key(Candidate({"max-num-seqs": 64}, list(fields), {}))
    argv = vllm.render(one, port=9000).argv
    assert argv[argv.index("--max-num-seqs") + 1] == "64"
    other = vllm.render(Candidate(one.values, one.fields, {"command": {"others": "--seed 1"}}), port=9000).argv
    assert other[-2:] == ("--seed", "1") and "--seed" not in argv
