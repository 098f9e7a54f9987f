"""``msopt init`` (msopt/cli/init.py): its choices for dense, GQA and MoE models, the file it writes for
every engine on the catalog models (it validates and ``msopt simulate`` runs it), the engines' flags in
their flag tables, traces, and bad inputs (one line, exit 2)."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest

from msopt.cli.init import build, read_trace
from msopt.cli.main import main
from msopt.errors import ConfigError
from msopt.run.validate import load

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "traces"
H100 = {"nvidia-smi": "\n".join(["NVIDIA H100 80GB HBM3, 81559 MiB"] * 8)}


def model_dir(tmp_path: Path, name: str, **config: object) -> Path:
    """A model directory with a config.json (no weights: the engine is given --load-format dummy)."""
    d = tmp_path / name
    d.mkdir()
    base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
            "intermediate_size": 5632, "vocab_size": 32000, "max_position_embeddings": 8192,
            "torch_dtype": "bfloat16"}
    (d / "config.json").write_text(json.dumps({**base, **config}), encoding="utf-8")
    return d


def loaded(text: str, tmp_path: Path, name: str = "init.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return load(path)


def fields(text: str, section: str) -> dict[str, dict]:
    return {f["name"]: f for f in tomllib.loads(text)[section]["target_field"]}


def test_dense_model(tmp_path):
    d = model_dir(tmp_path, "dense", num_hidden_layers=24, num_attention_heads=12, num_key_value_heads=12)
    choice = build("vllm", str(d), devices=8, probe={})
    assert choice.tp == [1, 2, 4]            # 8 does not divide 12 heads
    assert choice.pp == [1, 2, 4]            # divisors of 8 up to 4 dividing 24 layers
    f = fields(choice.text, "vllm")
    assert f["tp"]["dtype_param"] == [1, 2, 4] and f["pp"]["dtype_param"] == [1, 2, 4]
    assert f["dp"]["dtype_param"]["product"] == 8 and f["dp"]["dtype_param"]["target_names"] == ["tp", "pp"]
    assert "enable_expert_parallel" not in f
    assert {"max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "gpu_memory_utilization"} <= set(f)
    assert "enable_prefix_caching" in choice.left_out    # random prompts share no prefix
    doc = tomllib.loads(choice.text)
    assert "--load-format dummy" in doc["vllm"]["command"]["others"]    # no weight files in the directory
    assert doc["cluster"] == {"accelerator": "GPU", "devices_per_trial": 8}
    assert loaded(choice.text, tmp_path).space.names


def test_gqa_model_kv_heads_bound_tp(tmp_path):
    # 24 heads, 6 KV heads: tp 4 and 8 neither divide 6 nor are divided by it (vLLM's QKVParallelLinear)
    d = model_dir(tmp_path, "gqa", num_hidden_layers=30, num_attention_heads=24, num_key_value_heads=6)
    choice = build("vllm", str(d), devices=8, probe={})
    assert choice.tp == [1, 2] and choice.pp == [1, 2]
    # 32 heads and 8 KV heads on 16 devices: tp 16 replicates each KV head twice
    d2 = model_dir(tmp_path, "gqa2", num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8)
    assert build("sglang", str(d2), devices=16, probe={}).tp == [1, 2, 4, 8, 16]


def test_moe_model(tmp_path):
    d = model_dir(tmp_path, "moe", num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=4,
                  num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408)
    vllm = build("vllm", str(d), devices=8, probe={})
    assert fields(vllm.text, "vllm")["enable_expert_parallel"]["dtype"] == "bool"
    mindie = build("mindie", str(d), devices=8, probe={})
    f = fields(mindie.text, "mindie")
    assert mindie.expert_parallel == [1, 2, 4] == f["moe_ep"]["dtype_param"]   # 8 does not divide 60 experts
    assert f["moe_tp"]["dtype_param"] == {"target_name": "moe_ep", "product": 8, "dtype": "int"}
    assert f["world_size"]["constant"] == 8
    sglang = build("sglang", str(d), devices=8, probe={})
    assert "ep" in sglang.left_out and "--ep-size" not in json.dumps(fields(sglang.text, "sglang"))
    for c, name in ((vllm, "v.toml"), (mindie, "m.toml"), (sglang, "s.toml")):
        loaded(c.text, tmp_path, name)


def test_memory_sets_the_baseline_layout():
    # Llama-3.1-70B, bf16: 131 GiB of weights on 80 GB H100s (detected): the baseline takes tp 4
    big = build("vllm", "llama-3.1-70b", probe=H100)
    assert big.tp_value == 4 and "8 x NVIDIA H100 80GB HBM3" in big.text
    assert tomllib.loads(big.text)["simulator"]["hardware"] == "h100-sxm"
    assert build("vllm", "qwen3-8b", probe=H100).tp_value == 1
    with pytest.raises(ConfigError, match="need at least 18 devices of 79.6 GiB, more than the 8 a trial gets"):
        build("vllm", "deepseek-v3", probe=H100)


def test_cpu_machine_is_vllm_cpu_build(tmp_path):
    d = model_dir(tmp_path, "tiny", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                  hidden_size=128, intermediate_size=256, vocab_size=2048, max_position_embeddings=2048)
    choice = build("vllm", str(d), probe={})
    doc = tomllib.loads(choice.text)
    assert doc["cluster"] == {"accelerator": "none", "max_concurrent_trials": 1}
    assert {"tp, pp, dp", "gpu_memory_utilization"} <= set(choice.left_out)
    assert doc["vllm"]["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert "--enforce-eager" in doc["vllm"]["command"]["others"]
    assert doc["simulator"]["hardware"] == "cpu-x86"
    for engine in ("sglang", "mindie", "vllm-ascend"):  # an accelerator engine needs its devices
        with pytest.raises(ConfigError, match="give --devices N"):
            build(engine, str(d), probe={})


CATALOG = ["qwen3-8b", "qwen3-30b-a3b", "llama-3.1-8b"]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "mindie", "vllm-ascend"])
@pytest.mark.parametrize("model", CATALOG)
def test_every_engine_on_the_catalog_validates_and_simulates(engine, model, tmp_path, capsys):
    out = tmp_path / "config.toml"
    assert main(["init", "--engine", engine, "--model", model, "--devices", "8", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["validate", "-c", str(out)]) == 0
    assert "configuration OK" in capsys.readouterr().out
    assert main(["simulate", "-c", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["error"] is None and result["generate_speed"] > 0
    _flags_are_in_their_tables(engine, out.read_text())


def _flag_table(path: Path) -> set[str]:
    return {line.split()[0] for line in path.read_text().splitlines() if line.startswith("--")}


def _flags_are_in_their_tables(engine: str, text: str) -> None:
    doc = tomllib.loads(text)
    section = "mindie" if engine == "mindie" else "sglang" if engine == "sglang" else "vllm"
    if section == "mindie":  # every config_position is a key path of MindIE's config.json
        template = json.loads((ROOT / "msopt/engines/mindie/config.json").read_text())
        for f in doc["mindie"]["target_field"]:
            node = template
            *parents, last = f["config_position"].split(".")
            for part in parents:
                node = node[int(part)] if part.isdigit() else node[part]
            # moe_ep / moe_tp: not in the packaged template, read by MindIE for MoE models (MindIE-LLM 8b4871a
            # docs/zh/user_guide/optimization_and_tuning.md; configs/deepseek_v3_atlas_multinode.toml)
            assert last in node or last in ("moe_ep", "moe_tp"), f["config_position"]
        return
    table = {"vllm": ROOT / "msopt/engines/vllm/flags/vllm-0.33.0.txt",
             "vllm-ascend": ROOT / "msopt/engines/vllm/flags/vllm-0.23.0.txt",
             "sglang": ROOT / "tests/data/engines/sglang_flags.txt"}[engine]
    known = _flag_table(table)
    used = {f["config_position"] for f in doc[section]["target_field"]}
    used |= {a for a in shlex.split(doc[section]["command"].get("others", "")) if a.startswith("--")}
    assert used and used <= known, used - known


def test_deepseek_on_four_nodes_of_npus(tmp_path, capsys):
    out = tmp_path / "ds.toml"
    assert main(["init", "--engine", "mindie", "--model", "deepseek-v3", "--devices", "32", "-o", str(out)]) == 0
    f = fields(out.read_text(), "mindie")
    assert f["moe_ep"]["dtype_param"] == [1, 2, 4, 8, 16, 32] and f["world_size"]["constant"] == 32
    capsys.readouterr()
    assert main(["validate", "-c", str(out)]) == 0


def test_percentile_slo_with_mindie_uses_a_benchmark_that_reports_it(tmp_path):
    choice = build("mindie", "qwen3-8b", devices=8, slo="ttft:p99<2s", probe={})
    doc = tomllib.loads(choice.text)
    assert doc["benchmark"] == "builtin" and doc["slo"]["ttft"] == "p99<=2s"
    assert doc["slo"]["tpot"] == "mean<=0.05s"          # the packaged default for what --slo leaves out
    loaded(choice.text, tmp_path)
    assert tomllib.loads(build("mindie", "qwen3-8b", devices=8, probe={}).text)["benchmark"] == "ais_bench"


def test_every_default_key_is_there_commented_with_its_doc():
    text = build("vllm", "qwen3-8b", devices=8, probe={}).text
    assert "# mode = \"sync\"" in text and "# particles_time_out = 3600" in text
    assert "# [pso_options]  (docs/configuration.md#pso_options-and-pso_strategy)" in text
    assert "# ttft_slo" not in text    # [slo] sets them


def test_a_trace_sets_the_workload(tmp_path):
    trace = tmp_path / "t.jsonl"
    rows = [{"timestamp": 1000 * i, "input_length": 100 + i, "output_length": 10, "hash_ids": [0, i]}
            for i in range(11)]
    trace.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    wl = read_trace(trace)
    assert (wl.input_len, wl.output_len, wl.num_prompts, wl.request_rate) == (105, 10, 11, 1.0)
    assert wl.shared_prefixes     # block 0 repeats in every prompt
    choice = build("vllm", "qwen3-8b", devices=8, workload=str(trace), probe={})
    doc = tomllib.loads(choice.text)
    # the trace itself is the workload: the run replays its arrivals and lengths, not random prompts at its means
    assert doc["workload"] == {"trace": str(trace.absolute())}
    assert "workload" not in doc["simulator"]
    assert not {"dataset_name", "random_input_len", "request_rate", "num_prompts"} & set(doc["vllm_benchmark"]["command"])
    assert "# its means, for reference only" in choice.text and "mean 105 tokens in / 10 out" in choice.text
    assert "enable_prefix_caching" in fields(choice.text, "vllm")     # the replay repeats the trace's blocks
    v = loaded(choice.text, tmp_path)
    assert v.trace is not None and v.trace.requests == 11 and v.workload.full_prompts == 11
    # MindIE's AISBench cannot replay: the builtin benchmark does
    assert tomllib.loads(build("mindie", "qwen3-8b", devices=8, workload=str(trace), probe={}).text)["benchmark"] \
        == "builtin"


def test_a_trace_longer_than_an_evaluation_is_cut_to_the_part_it_allows(tmp_path):
    # a real run re-measures on the whole window within particles_time_out (the packaged 3600 s): a 2-hour
    # trace is cut to its first 1800 s, saying why; a simulated run replays it whole
    trace = tmp_path / "long.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{600 * i},100,10\n" for i in range(13)),
                     encoding="utf-8")
    doc = tomllib.loads(build("vllm", "qwen3-8b", devices=8, workload=str(trace), probe={}).text)
    assert doc["workload"]["window"] == [0, 1800]
    assert "window" not in tomllib.loads(build("vllm", "qwen3-8b", devices=8, workload=str(trace), probe={},
                                                simulate=True).text)["workload"]


def test_a_trace_without_shared_prefixes_leaves_prefix_caching_out(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{i},{100 + i},10\n" for i in range(5)),
                     encoding="utf-8")
    choice = build("vllm", "qwen3-8b", devices=8, workload=str(trace), probe={})
    assert tomllib.loads(choice.text)["workload"]["trace"] == str(trace.absolute())
    assert "enable_prefix_caching" in choice.left_out


@pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/traces (the public trace samples) is absent")
def test_public_traces():
    azure = read_trace(TRACES / "AzureLLMInferenceTrace_conv.sample.csv")
    assert (azure.input_len, azure.output_len) == (1155, 211) and azure.request_rate == pytest.approx(5.53, abs=0.01)
    assert not azure.shared_prefixes
    mooncake = read_trace(TRACES / "mooncake_synthetic_trace.sample.jsonl")
    assert mooncake.shared_prefixes and mooncake.num_prompts == 3993


@pytest.mark.parametrize("argv,why", [
    (["--engine", "vllm", "--model", "/nonexistent/model"], "no config.json there and no catalog model"),
    (["--engine", "vllm", "--model", "qwen3-8b", "--devices", "0"], "--devices 0 must be from 1 to 4096"),
    (["--engine", "vllm", "--model", "qwen3-8b", "--devices", "8", "--slo", "ttft:p98<1s"], "statistic 'p98'"),
    (["--engine", "vllm", "--model", "qwen3-8b", "--devices", "8", "--workload", "/nonexistent.csv"], "no such file"),
    (["--engine", "tgi", "--model", "qwen3-8b"], "invalid choice: 'tgi'"),
])
def test_bad_input_is_one_line_exit_2(argv, why, capsys):
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(["init", *argv]))
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1 and why in err


def test_existing_output_is_kept_without_force(tmp_path, capsys):
    out = tmp_path / "config.toml"
    out.write_text("mine\n")
    assert main(["init", "--engine", "vllm", "--model", "qwen3-8b", "--devices", "8", "-o", str(out)]) == 2
    assert "exists; choose another file or add --force" in capsys.readouterr().err
    assert out.read_text() == "mine\n"
    assert main(["init", "--engine", "vllm", "--model", "qwen3-8b", "--devices", "8", "-o", str(out), "--force"]) == 0
    assert tomllib.loads(out.read_text())["engine"] == "vllm"


def test_without_output_it_prints_the_file(capsys):
    assert main(["init", "--engine", "sglang", "--model", "qwen3-8b", "--devices", "4", "--simulate"]) == 0
    doc = tomllib.loads(capsys.readouterr().out)
    assert doc["engine"] == "sglang" and doc["simulate"] is True and doc["cluster"]["devices_per_trial"] == 4
    assert [f["name"] for f in doc["sglang"]["target_field"]][:3] == ["tp", "pp", "dp"]


def test_a_model_directory_named_as_a_catalog_model(tmp_path, monkeypatch, capsys):
    """Issue 51 item 9: `msopt init --model qwen3-32b/` (a directory named as the catalog model, in the current
    directory) matched the catalog by name, which read the directory again (read_config_model -> match_catalog
    -> load_model -> read_config_model): RecursionError. The catalog is now looked up by name only."""
    d = model_dir(tmp_path, "qwen3-32b", architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_size=5120,
                  intermediate_size=25600, vocab_size=151936, max_position_embeddings=40960, num_hidden_layers=64,
                  num_attention_heads=64, num_key_value_heads=8, head_dim=128)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "init.toml"
    assert main(["init", "--engine", "vllm", "--model", "qwen3-32b/", "--devices", "8", "-o", str(out)]) == 0
    assert f'model = "{d}"' in out.read_text()
    from msopt.sim.catalog_load import read_config_model
    assert read_config_model("qwen3-32b").catalog == "qwen3-32b"  # the directory, matched to the catalog model
    assert main(["simulate", "-c", str(out)]) == 0
