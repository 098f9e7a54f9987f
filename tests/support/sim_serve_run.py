"""A sim-serve run for tests: write an ``msopt optimize`` configuration whose engine is ``msopt
sim-serve`` (or a stand-in), run optimize on it as a command, and read back its run directory.

The configuration is a real one (the builtin benchmark against a real server process); only the
engine's executable is the simulator's HTTP server, so no accelerator is needed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: ``msopt sim-serve`` as an engine executable (wrap it with tests.support.procs.recorded to see its pids)
SIM_SERVE = [sys.executable, "-m", "msopt.cli", "sim-serve"]

#: one tunable field, max_num_seqs in [4, 64], as [[vllm.target_field]]
MAX_NUM_SEQS = """[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 4
max = 64
dtype = "int"
value = 8
"""

_TEMPLATE = """engine = "{engine}"
benchmark = "builtin"
n_particles = {n_particles}
iters = 1
sample_size = 16
particles_time_out = 120
{top}[data_storage]
pso_top_k = {pso_top_k}
[cluster]
accelerator = "none"
{cluster}[{engine}]
wait_start_time = 60
{section}[{engine}.command]
executable = {exe}
model = "{model}"
served_model_name = "{served}"
{command}{fields}[builtin]
endpoint = "/v1/completions"
input_len = 64
output_len = 8
concurrency = 4
num_prompts = 16
"""


def sim_serve_config(exe: Sequence[str], model: str | Path, *, engine: str = "vllm", served: str = "tiny",
                     fields: str = MAX_NUM_SEQS, n_particles: int = 2, pso_top_k: int = 1, top: str = "",
                     cluster: str = "", section: str = "", command: str | None = None) -> str:
    """The TOML text of a one-iteration run of the builtin benchmark against ``exe``.

    Args:
        exe: the engine's executable (argv list).
        model: the model path (optimize's preflight checks it exists).
        engine: the engine name; its ``[<engine>]`` and ``[<engine>.command]`` tables are written.
        served: ``served_model_name``.
        fields: the ``[[<engine>.target_field]]`` tables.
        top, cluster, section: extra lines at the top level, in ``[cluster]``, in ``[<engine>]``.
        command: extra lines of ``[<engine>.command]``; default for vLLM: the loopback host and a
            fast sim-serve (``--time-scale 0.01 --startup-delay 0.2``).
    """
    if command is None:
        command = ('host = "127.0.0.1"\nothers = "--time-scale 0.01 --startup-delay 0.2"\n'
                   if engine == "vllm" else "")
    return _TEMPLATE.format(engine=engine, n_particles=n_particles, top=top, pso_top_k=pso_top_k, cluster=cluster,
                            section=section, exe=json.dumps(list(exe)), model=model, served=served,
                            command=command, fields=fields)


@dataclass
class OptimizeRun:
    """What one ``msopt optimize`` command left: its output, its run directory and journal."""

    out: subprocess.CompletedProcess[str]
    run_dir: Path
    journal: list[dict[str, Any]]


def run_optimize(tmp_path: Path, config: str, *args: str, env: Mapping[str, str] | None = None,
                 timeout: float = 400) -> OptimizeRun:
    """Write ``config`` to ``tmp_path/cfg.toml``, run ``msopt optimize`` on it with ``args`` (``--plain``
    and ``-o tmp_path/runs`` added), check it succeeded, and return the run."""
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(config, encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), *args, "--plain",
                          "-o", str(tmp_path / "runs")], env=None if env is None else dict(env),
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (run,) = list((tmp_path / "runs").iterdir())
    journal = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
    return OptimizeRun(out, run, journal)
