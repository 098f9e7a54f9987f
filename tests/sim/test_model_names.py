"""`msopt calibrate`'s model column (issue 27 item 4): hf_id, declared aliases, or any model with a
config.json (a model directory, or a hub id in the local Hugging Face cache)."""

from __future__ import annotations

import json

import pytest

from msopt.errors import ConfigError
from msopt.sim.calibrate import load_measurements_csv
from msopt.sim.catalog_load import load_model
from tests.sim.test_hf_config import LLAMA_70B

HEADER = "model,hardware,engine,weight_dtype,input_len,output_len,concurrency,tp,pp,ttft_ms,tpot_ms\n"


def _csv(tmp_path, model):
    path = tmp_path / "m.csv"
    path.write_text(HEADER + f"{model},h100-sxm,vllm,bf16,1024,128,8,4,1,150.0,20.0\n")
    return path


@pytest.mark.parametrize("name", ["meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-70B-Instruct",
                                  "META-LLAMA/LLAMA-3.1-70B", "llama-3.1-70b"])
def test_the_base_model_and_the_instruct_model_are_the_catalog_entry(tmp_path, name):
    (m,) = load_measurements_csv(_csv(tmp_path, name))
    assert m.model == "llama-3.1-70b"
    assert "meta-llama/Llama-3.1-70B" in load_model("llama-3.1-70b").aliases


def test_a_model_directory_or_a_cached_hub_id_with_a_config_json(tmp_path, monkeypatch):
    d = tmp_path / "weights"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**LLAMA_70B, "num_hidden_layers": 40}))  # no catalog model
    (m,) = load_measurements_csv(_csv(tmp_path, d))
    assert m.model == str(d) and load_model(m.model).layers == 40
    snap = tmp_path / "hub" / "models--acme--Llama-Half" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(LLAMA_70B))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    (m,) = load_measurements_csv(_csv(tmp_path, "acme/Llama-Half"))
    assert load_model(m.model) == load_model("llama-3.1-70b")  # the same architecture: the catalog entry
    with pytest.raises(ConfigError, match=r"m.csv:2: model 'acme/unknown' is neither .* config.json"):
        load_measurements_csv(_csv(tmp_path, "acme/unknown"))
