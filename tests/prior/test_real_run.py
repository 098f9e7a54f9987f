"""A real run's simulator prior from what is on disk and on the node (issue 27): a model directory
holding only a config.json, no [simulator] table, `msopt sim-serve` as the engine."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.support.procs import recorded, started, survivors
from tests.support.sim_serve_run import SIM_SERVE, run_optimize, sim_serve_config

#: a Llama-architecture config.json of no catalog model (4 layers, hidden 256)
MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
         "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
         "vocab_size": 4096, "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}


@pytest.mark.slow  # a whole run through sim-serve
@pytest.mark.skipif(shutil.which("lscpu") is None, reason="lscpu (util-linux) is not installed")
def test_a_real_run_takes_its_prior_from_config_json_and_lscpu(tmp_path):
    pids = tmp_path / "pids"
    model = tmp_path / "my-llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(MODEL))
    config = sim_serve_config(recorded(SIM_SERVE, pids), model, pso_top_k=0, top="[search]\nprior_evaluations = 30\n")
    done = run_optimize(tmp_path, config, "--no-ray")
    out, run = done.out, done.run_dir
    lines = out.stdout.splitlines()
    said = [x for x in lines if x.startswith("prior: ")]
    assert said[0].startswith(f"prior: model from {model / 'config.json'} (llama ")
    assert "4 layers, hidden 256, 8/2 heads, bf16" in said[0]
    assert said[1].startswith("prior: hardware detected-") and "from lscpu on this node" in said[1]
    assert any("simulator prior:" in x and "simulated evaluations" in x for x in lines)
    prior = json.loads((run / "prior.json").read_text())
    assert prior["evaluations"] > 0
    assert (run / "prior_hardware.toml").is_file()
    rows = done.journal
    assert rows and all(r["error"] is None and r["real_evaluation"] for r in rows if not r["reused"])
    assert started(pids) and survivors(pids) == []
