"""A real run's prior: the model from config.json and the hardware from the nodes' probes, unless
[simulator] sets them (issue 27 item 1)."""

from __future__ import annotations

import json
from pathlib import Path

from msopt.config import load_settings
from msopt.prior import PRIOR_HARDWARE_FILE, make_prior, prior_source
from tests.sim.test_hf_config import DEEPSEEK_V3, LLAMA_70B

DATA = Path(__file__).resolve().parents[1] / "data" / "hardware"
H100 = ("10.0.0.5", {"nvidia-smi": (DATA / "nvidia_smi_h100_sxm.csv").read_text()})
NPU = ("", {"npu-smi": (DATA / "npu_smi_910b3.txt").read_text()})
L40S = ("", {"nvidia-smi": (DATA / "nvidia_smi_l40s.csv").read_text()})


def _settings(tmp_path: Path, doc: dict, extra: str = "", accelerator: str = "GPU"):
    model = tmp_path / "weights"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(doc))
    path = tmp_path / "run.toml"
    path.write_text(f"""
engine = "vllm"
[cluster]
accelerator = "{accelerator}"
devices_per_trial = 8
[vllm.command]
model = "{model}"
[[vllm.target_field]]
name = "max_num_seqs"
config_position = "--max-num-seqs"
min = 8
max = 64
dtype = "int"
value = 16
{extra}
""")
    return load_settings(str(path)), model


def test_model_from_config_json_and_hardware_from_nvidia_smi(tmp_path):
    settings, model = _settings(tmp_path, LLAMA_70B)
    src = prior_source(settings.config, [H100, H100], tmp_path)
    assert src.table is not None
    assert src.table["model"] == str(model) and src.table["hardware"] == "h100-sxm"
    assert src.table["weight_dtype"] == "bf16"
    assert src.lines[0] == (f"prior: model from {model / 'config.json'} (llama-3.1-70b (catalog entry, same "
                            "architecture), 80 layers, hidden 8192, 64/8 heads, bf16)")
    assert src.lines[1] == ("prior: hardware h100-sxm (catalog entry) for 8 x NVIDIA H100 80GB HBM3 (79.6 GiB) "
                            "from nvidia-smi on 2 nodes")
    prior = make_prior(settings.config, simulator=src.table)
    assert prior is not None and prior.model_spec.name == "llama-3.1-70b" and prior.hardware.name == "h100-sxm"


def test_fp8_weights_on_an_npu_and_a_roofline_entry_in_the_run_directory(tmp_path):
    settings, _ = _settings(tmp_path, DEEPSEEK_V3, accelerator="NPU")
    src = prior_source(settings.config, [NPU], tmp_path)
    assert src.table is not None and src.table["weight_dtype"] == "int8"
    assert "fp8 weights simulated as int8 (atlas-800i-a2 has no fp8 compute)" in src.lines[1]
    settings, _ = _settings(tmp_path, LLAMA_70B)
    src = prior_source(settings.config, [L40S], tmp_path)
    assert src.table is not None and src.table["hardware"] == str(tmp_path / PRIOR_HARDWARE_FILE)
    assert src.lines[1].startswith("prior: hardware detected-nvidia-l40s (a roofline entry: datasheet peak figures")
    assert make_prior(settings.config, simulator=src.table).hardware.name == "detected-nvidia-l40s"


def test_simulator_keys_win_and_a_missing_model_says_why(tmp_path):
    settings, _ = _settings(tmp_path, LLAMA_70B, '[simulator]\nhardware = "h200-sxm"\nmodel = "qwen3-32b"\n')
    src = prior_source(settings.config, None, tmp_path)
    assert src.table is not None and (src.table["hardware"], src.table["model"]) == ("h200-sxm", "qwen3-32b")
    assert src.lines[0].startswith("prior: model qwen3-32b from [simulator] model (")
    settings, model = _settings(tmp_path, LLAMA_70B)
    (model / "config.json").unlink()
    src = prior_source(settings.config, [H100], tmp_path)
    assert src.table is None and src.lines[0].startswith("prior: none: the model ") and "config.json" in src.lines[0]
    settings, _ = _settings(tmp_path, LLAMA_70B)
    src = prior_source(settings.config, [("", {})], tmp_path)
    assert src.table is None and "no GPU found by nvidia-smi, npu-smi or lscpu on 1 node(s)" in src.lines[0]
