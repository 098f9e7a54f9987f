"""Requests longer than the server's context (issue 52 item 1): validate counts them against the launch's
--max-model-len (or the engine's default for the model), a run refuses to start while the server would fail
them, and says what [workload] length_policy did with them once it is told. vLLM fails only a prompt that fills
its context and cuts the output of a shorter one (vllm 0.32.0 entrypoints/serve/utils/api_utils.py:169-205;
tests/real_engine/test_context_rule.py checks it on the real build): validate refuses the first and names the
second."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from msopt.errors import ConfigError
from msopt.run.validate import load

ROOT = Path(__file__).resolve().parents[2]


def quick_on(tmp_path: Path, rows: str, extra: str = "", others: str | None = None) -> Path:
    """configs/quickstart.toml (``--max-model-len 4096``) on a generic trace (the issue's set-up)."""
    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n" + rows, encoding="utf-8")
    text = (ROOT / "configs" / "quickstart.toml").read_text(encoding="utf-8")
    text = re.sub(r"\[simulator\.workload\].*?(?=\n\[vllm\.command\])", f'[workload]\ntrace = "t.csv"\n{extra}',
                  text, flags=re.S)
    if others is not None:
        text = text.replace('others = "--max-model-len 4096"', f'others = "{others}"')
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    return path


ROWS = "".join(f"{0.5 * i},{5000 if i % 3 == 0 else 100},20\n" for i in range(30))    # 10 of 30 over 4096


def msopt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "msopt.cli", *args], capture_output=True, text=True, cwd=ROOT)


def test_requests_over_the_launchs_max_model_len_refuse_the_run(tmp_path):
    path = quick_on(tmp_path, ROWS)
    with pytest.raises(ConfigError) as exc:
        load(path)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"{path}: [workload] trace {tmp_path / 't.csv'}: ")
    assert "10 of 30 requests have prompts of at least the launch's --max-model-len 4096" in msg
    assert "the longest request 5,020 tokens" in msg
    assert 'set [workload] max_model_len = 4096 with length_policy = "clip"' in msg
    for command in ("validate", "simulate"):
        out = msopt(command, "-c", str(path))
        assert out.returncode == 2 and "10 of 30 requests have prompts of at least" in out.stderr, out.stdout
    out = msopt("optimize", "-c", str(path), "--no-ray", "--max-launches", "2", "-o", str(tmp_path / "runs"))
    assert out.returncode == 2 and "10 of 30 requests have prompts of at least" in out.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())    # nothing launched


@pytest.mark.parametrize("policy, said, sent", [
    ("drop", "10 request(s) longer than [workload] max_model_len 4096: dropped", 20),
    ("clip", "10 request(s) longer than [workload] max_model_len 4096: clipped to it", 30),
])
def test_a_length_policy_says_what_to_do_and_validate_says_it(tmp_path, policy, said, sent):
    path = quick_on(tmp_path, ROWS, f'max_model_len = 4096\nlength_policy = "{policy}"\n')
    checked = load(path)
    assert checked.notes == (f"context: the launch's --max-model-len 4096; {said} "
                             f"([workload] length_policy = \"{policy}\")",)
    out = msopt("validate", "-c", str(path))
    assert out.returncode == 0 and f"  {checked.notes[0]}\n" in out.stdout
    sim = msopt("simulate", "-c", str(path))
    assert sim.returncode == 0 and "success_rate: 1\n" in sim.stdout and f"sent_requests: {sent}\n" in sim.stdout


def test_a_simulated_launch_without_the_flag_is_held_to_the_models_length(tmp_path):
    path = quick_on(tmp_path, "0,100,20\n1,41000,2000\n", others="")
    with pytest.raises(ConfigError) as exc:
        load(path)
    assert ("1 of 2 requests have prompts of at least vllm's default for qwen3-8b (no --max-model-len set) 40960"
            in str(exc.value))


def test_requests_that_fit_are_said_to(tmp_path):
    checked = load(quick_on(tmp_path, "0,100,20\n1,3000,1000\n"))
    assert checked.notes == ("context: the launch's --max-model-len 4096; every request fits",)


def test_a_prompt_that_fits_with_an_output_that_does_not_is_named_not_refused(tmp_path):
    """4,000 prompt tokens and 200 output tokens: vLLM serves the request with 96 output tokens."""
    checked = load(quick_on(tmp_path, "0,100,20\n1,4000,200\n"))
    assert checked.notes == ("context: the launch's --max-model-len 4096; 1 request(s) fit only with their output "
                             "cut to the context left: the server answers them with fewer output tokens than the "
                             "trace asks",)
    sim = msopt("simulate", "-c", str(tmp_path / "c.toml"))
    assert sim.returncode == 0 and "success_rate: 1\n" in sim.stdout
