"""``msopt simulate`` says why requests failed (issue 52 item 1): before, the quick start at a context its requests
exceed printed a success rate of 0.53 and nothing else; now the count refused for length and the limit, in the
text and in --json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_simulate_names_the_requests_longer_than_the_context(tmp_path):
    # the quick start's prompts are up to 384 tokens and its outputs up to 192; at --max-model-len 300 vLLM refuses
    # the prompts of 300 tokens or more and cuts the output of a shorter prompt the context cannot hold
    # (vllm 0.32.0 entrypoints/serve/utils/api_utils.py:169-205)
    text = (ROOT / "configs" / "quickstart.toml").read_text(encoding="utf-8")
    path = tmp_path / "c.toml"
    path.write_text(text.replace('others = "--max-model-len 4096"', 'others = "--max-model-len 300"'), encoding="utf-8")
    run = [sys.executable, "-m", "msopt.cli", "simulate", "-c", str(path)]
    out = json.loads(subprocess.run([*run, "--json"], capture_output=True, text=True, cwd=ROOT, check=False).stdout)
    failed = round((1 - out["success_rate"]) * out["sent_requests"])
    assert failed > 0 and out["failed_too_long"] == failed and out["context_limit"] == 300 and out["outputs_cut"] > 0
    lines = subprocess.run(run, capture_output=True, text=True, cwd=ROOT, check=False).stdout.splitlines()
    assert f"failed_too_long: {failed}" in lines and "context_limit: 300" in lines
