"""A real run's simulator prior from what is on disk and on the node (issue 27): a model directory
holding only a config.json, no [simulator] table, `msopt sim-serve` as the engine."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.procs import recorded, started, survivors

CONFIG = """
engine = "vllm"
benchmark = "builtin"
n_particles = 2
iters = 1
sample_size = 16
particles_time_out = 120
[search]
prior_evaluations = 30
[data_storage]
pso_top_k = 0
[cluster]
accelerator = "none"
[vllm]
wait_start_time = 60
[vllm.command]
executable = {exe}
model = "{model}"
served_model_name = "tiny"
host = "127.0.0.1"
others = "--time-scale 0.01 --startup-delay 0.2"
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 4
max = 64
dtype = "int"
value = 8
[builtin]
endpoint = "/v1/completions"
input_len = 64
output_len = 8
concurrency = 4
num_prompts = 16
"""

#: a Llama-architecture config.json of no catalog model (4 layers, hidden 256)
MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
         "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
         "vocab_size": 4096, "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}


@pytest.mark.slow  # a whole run through sim-serve
@pytest.mark.skipif(shutil.which("lscpu") is None, reason="lscpu (util-linux) is not installed")
def test_a_real_run_takes_its_prior_from_config_json_and_lscpu(tmp_path):
    pids = tmp_path / "pids"
    exe = json.dumps(recorded([sys.executable, "-m", "msopt.cli", "sim-serve"], pids))
    model = tmp_path / "my-llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(MODEL))
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CONFIG.format(exe=exe, model=model))
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "optimize", "-c", str(cfg), "--no-ray", "--plain",
                          "-o", str(tmp_path / "runs")], capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    said = [x for x in lines if x.startswith("prior: ")]
    assert said[0].startswith(f"prior: model from {model / 'config.json'} (llama ")
    assert "4 layers, hidden 256, 8/2 heads, bf16" in said[0]
    assert said[1].startswith("prior: hardware detected-") and "from lscpu on this node" in said[1]
    assert any("simulator prior:" in x and "simulated evaluations" in x for x in lines)
    (run,) = list((tmp_path / "runs").iterdir())
    prior = json.loads((run / "prior.json").read_text())
    assert prior["evaluations"] > 0
    assert (run / "prior_hardware.toml").is_file()
    rows = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
    assert rows and all(r["error"] is None and r["real_evaluation"] for r in rows if not r["reused"])
    assert started(pids) and survivors(pids) == []
