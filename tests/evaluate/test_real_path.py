"""The real process path end to end, without Ray and without accelerators.

vLLM adapter (its executable pointed at ``msopt sim-serve``) -> start_process -> wait_ready ->
builtin benchmark -> metrics -> stop -> the server saw the decoded values -> nothing left.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from msopt.benchmarks import get_benchmark
from msopt.config import load_settings
from msopt.engines import get_engine
from msopt.evaluate.results import METRICS
from msopt.launch.ports import free_port
from msopt.launch.process import _alive, group_members, start_process, wait_ready
from msopt.launch.render import Candidate
from msopt.metrics import PERCENTILES, SENT
from msopt.sim.serve import ARGV_FILE_ENV
from msopt.space import DecodeContext, SearchSpace


def sim_serve_executable() -> list[str]:
    """``msopt sim-serve`` through msopt.cli.main once it registers msopt.cli.serve, else the module."""
    from msopt.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    if "sim-serve" in sub.choices:
        return [sys.executable, "-m", "msopt.cli", "sim-serve"]
    return [sys.executable, "-m", "msopt.cli.serve"]


CONFIG = """
engine = "vllm"
benchmark = "builtin"

[vllm]
wait_start_time = 60

[vllm.command]
executable = {exe}
model = "/models/Qwen3-8B"
served_model_name = "qwen3-8b"
host = "127.0.0.1"
others = "--time-scale 0.01 --startup-delay 0.3 --seed $SEED"

[[vllm.target_field]]
name = "tp"
config_position = "--tensor-parallel-size"
min = 0
max = 1
dtype = "enum"
dtype_param = [1, 2, 4]
value = 2

[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 4
max = 64
dtype = "int"
value = 4

[[vllm.target_field]]
name = "enable_chunked_prefill"
config_position = "--enable-chunked-prefill"
min = 0
max = 1
dtype = "bool"
value = false

[[vllm.target_field]]
name = "SEED"
config_position = "env"
min = 0
max = 0
dtype = "int"
constant = 7

[builtin]
endpoint = "/v1/completions"
input_len = 128
output_len = 16
concurrency = 8
"""


@pytest.mark.slow  # real server and benchmark processes
def test_real_path_end_to_end(tmp_path: Path, write_toml) -> None:
    settings = load_settings(write_toml(CONFIG.format(exe=json.dumps(sim_serve_executable()))))
    space = SearchSpace.from_settings(settings)
    position = list(space.default_position())
    position[space.names.index("max_num_seqs")] = 6
    decoded = space.decode(position, DecodeContext(0, 4, 0))
    assert decoded.values["max_num_seqs"] == 6

    spec = get_engine("vllm").render(Candidate(decoded.values, settings.fields, settings.section("vllm")),
                                     port=free_port(), workdir=tmp_path)
    argv_file = tmp_path / "argv.json"
    with start_process(spec.argv, {**spec.env, ARGV_FILE_ENV: str(argv_file)},
                       tmp_path / "server.log") as server:
        wait_ready(spec.host, spec.port, spec.health_path, spec.ready_timeout, server, interval=0.1)
        metrics = get_benchmark("builtin").run(
            spec, Candidate(decoded.values, settings.fields, settings.section("builtin")), num_prompts=32,
            load={}, result_dir=tmp_path / "bench", log_path=tmp_path / "bench.log", timeout=120)
        assert server.running
    # builtin reports percentiles too (issue 40), and what it sent (no prompt lengths: synthetic)
    assert set(METRICS) <= set(metrics) <= {*METRICS, *PERCENTILES, *SENT, "duration"}
    assert metrics["sent_requests"] == 32 and "sent_input_mean" not in metrics
    assert all(metrics[k] is not None and metrics[k] > 0 for k in METRICS), metrics
    assert metrics["success_rate"] == 1.0

    seen = json.loads(argv_file.read_text())
    assert seen[seen.index("--max-num-seqs") + 1] == "6"
    assert seen[seen.index("--tensor-parallel-size") + 1] == "2"
    assert "--no-enable-chunked-prefill" in seen
    assert seen[-2:] == ["--seed", "7"] and spec.env["SEED"] == "7"
    assert "ignoring" in (tmp_path / "server.log").read_text()

    assert not _alive(server.pid) and group_members(server.pgid) == []
