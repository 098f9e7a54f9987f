"""The measured schema (../shared/measured): rows read as the simulator's measurements, or listed with why not."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from msopt.cli.main import main
from msopt.errors import ConfigError
from msopt.sim.calibrate import group_errors, simulate_measurements, spearman
from msopt.sim.catalog_load import load_hardware
from msopt.sim.measured import SCHEMA_COLUMNS, load_measured_csv, spec_of, weight_dtype_of

MEASURED = Path(__file__).resolve().parents[2].parent / "shared" / "measured"
needs_measured = pytest.mark.skipif(not MEASURED.is_dir(), reason=f"{MEASURED} (the shared measurements) is absent")

BASE = {c: "" for c in SCHEMA_COLUMNS} | {"pp": "1", "dp": "1", "num_prompts": "40", "concurrency": "8",
                                         "input_len": "512", "output_len": "64", "request_rate": "inf"}


def _csv(tmp_path: Path, *rows: dict[str, str]) -> Path:
    path = tmp_path / "rows.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*SCHEMA_COLUMNS, "measurement_kind", "ttft_p50_ms"])
        w.writeheader()
        for r in rows:
            w.writerow(BASE | r)
    return path


def test_rows_become_engine_flags_and_unsimulatable_rows_are_listed_with_why(tmp_path: Path):
    path = _csv(
        tmp_path,
        {"engine": "SGLang (Ascend NPU backend)", "model": "Qwen/Qwen3-32B", "dtype": "w8a8 (modelslim)",
         "hardware": "Atlas 800I A2 (910B, 8 NPUs per node)", "tp": "4", "max_num_seqs": "78",
         "max_num_batched_tokens": "65536", "chunked_prefill": "off (-1)", "ttft_mean_ms": "5786.98",
         "tpot_mean_ms": "48.97", "output_tok_s": "1395.33"},
        {"engine": "vLLM", "model": "meta-llama/Llama-3.3-70B-Instruct", "dtype": "bfloat16",
         "hardware": "A100-SXM4-40GB (Azure), 1 node x 8 GPUs", "tp": "8", "concurrency": "", "request_rate": "4",
         "ttft_mean_ms": "50.3", "tpot_mean_ms": "27.1", "output_tok_s": "673.9",
         "notes": "server --max-model-len 4096"},
        {"engine": "TensorRT-LLM", "model": "meta-llama/Llama-3.1-8B", "hardware": "H100", "tp": "1",
         "output_tok_s": "100"},
        {"engine": "vLLM", "model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "1x A100 80G", "tp": "1",
         "ttft_p50_ms": "35.7"},
        {"engine": "vLLM", "model": "meta-llama/Llama-3.1-8B-Instruct", "hardware": "1x A100 80G", "tp": "1",
         "output_tok_s": "4132", "measurement_kind": "offline max-throughput"},
        {"engine": "vLLM", "model": "tencent/Hy3-preview", "hardware": "Atlas A3", "tp": "16", "output_tok_s": "30"},
        {"engine": "vLLM", "model": "Qwen/Qwen3-32B", "hardware": "AMD Instinct MI325X", "tp": "1", "output_tok_s": "30"},
        {"engine": "SGLang", "model": "Qwen/Qwen3-235B-A22B", "hardware": "Atlas 800I A3", "tp": "P:16 / D:32",
         "output_tok_s": "30"},
    )
    rows, skipped = load_measured_csv(path)
    assert [r.engine for r in rows] == ["sglang", "vllm"]
    sg, vl = rows
    assert (sg.model, sg.hardware, sg.weight_dtype, sg.knobs.tp) == ("qwen3-32b", "atlas-800i-a2", "int8", 4)
    assert sg.knobs.max_num_seqs == 78 and not sg.knobs.chunked_prefill and sg.knobs.max_prefill_tokens == 65536
    assert (sg.ttft_s, sg.tpot_s, sg.tokens_per_s) == pytest.approx((5.78698, 0.04897, 1395.33))
    assert (vl.model, vl.hardware, vl.knobs.tp, vl.knobs.max_model_len) == ("llama-3.1-70b", "a100-sxm-40gb", 8, 4096)
    assert vl.workload == {"input_len": 512, "output_len": 64, "num_prompts": 40, "request_rate": 4.0}
    assert "a100-sxm-40gb: efficiencies of h100-sxm" in vl.assumed
    reasons = [s.reason for s in skipped]
    assert len(reasons) == 6
    for needle in ("TensorRT-LLM", "medians only", "offline run", "'tencent/Hy3-preview': no catalog entry",
                   "'AMD Instinct MI325X': no catalog entry", "prefill/decode disaggregated"):
        assert sum(needle in r for r in reasons) == 1, needle
    assert load_measured_csv(path, engine="sglang")[0] == [sg]


def test_cells_as_the_sources_write_them():
    assert weight_dtype_of("w4a8 (modelslim)") == ("int4", "")
    assert weight_dtype_of("bf16 (original weights; no --quantization)") == ("bf16", "")
    assert weight_dtype_of("")[0] == "bf16" and weight_dtype_of("")[1]
    assert spec_of("speculative decoding: EAGLE3 4/5, accept length 2.15; x") == ("eagle", 4, 5, 2.15)
    assert spec_of("speculative decoding: NEXTN(MTP) 3 steps/4 draft, accept length 2.82") == ("mtp", 3, 4, 2.82)
    assert spec_of("BASELINE columns only (no speculative decoding)") is None


def test_a_file_of_another_schema_is_refused_with_its_header(tmp_path: Path):
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="not the measured schema"):
        load_measured_csv(bad)


def test_spearman_and_per_group_errors():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 2], [1, 2]))


@needs_measured
def test_every_measured_file_reads_and_the_cli_lists_what_it_cannot_simulate(capsys: pytest.CaptureFixture):
    counts = {}
    for path in sorted(MEASURED.glob("*.csv")):
        if path.name.endswith(".request_lengths.csv"):
            continue
        rows, skipped = load_measured_csv(path)
        counts[path.stem] = (len(rows), len(skipped))
        assert all(s.reason for s in skipped)
    assert counts["vllm_ascend_docs"][0] >= 18  # the Qwen3-32B bf16 sweep on 4 x 910B at least
    assert counts["surajssd_llm_k8s_llama33_70b_a100"] == (16, 0)
    replayed = load_measured_csv(MEASURED / "surajssd_llm_k8s_llama33_70b_a100.csv")[0][0]
    outs = replayed.workload["output_len"]["values"]  # the run's own 200 lengths (its sidecar)
    assert len(outs) == replayed.workload["num_prompts"] == 200 and max(outs) == 780
    assert sum(outs) / len(outs) == pytest.approx(replayed.output_len, abs=1)
    assert counts["argonne_llm_inference_bench"][0] == 0  # offline single-batch runs only
    assert main(["calibrate", str(MEASURED / "mlperf_inference_v5_0_server.csv")]) == 0
    out = capsys.readouterr().out
    assert "0 rows simulated" in out and "TensorRT-LLM is not modelled" in out
    assert main(["calibrate", str(MEASURED / "surajssd_llm_k8s_llama33_70b_a100.request_lengths.csv")]) == 2
    assert "give surajssd_llm_k8s_llama33_70b_a100.csv" in capsys.readouterr().err


@needs_measured
def test_vllm_ascend_qwen3_32b_rows_are_scored_per_group(capsys: pytest.CaptureFixture):
    rows, _ = load_measured_csv(MEASURED / "vllm_ascend_docs.csv")
    a2 = [r for r in rows if r.hardware == "atlas-800i-a2"]
    assert len(a2) == 18 and all(math.isnan(r.ttft_s) for r in a2)  # the source publishes no TTFT
    sim = simulate_measurements(a2, load_hardware("atlas-800i-a2"), prompts_per_slot=2)
    err = group_errors(a2, sim)["vllm-ascend qwen3-32b atlas-800i-a2"]
    assert err["rows"] == 18 and math.isnan(err["ttft"]) and err["refused"] == 0
    assert err["spearman"] > 0.5  # more concurrency, more tokens/s: the simulator gets the order
    assert main(["calibrate", str(MEASURED / "vllm_ascend_docs.csv"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "vllm-ascend qwen3-32b atlas-800i-a2" in doc["groups"]
    assert any("Hy3" in s["what"] for s in doc["skipped"])


def test_verify_reading_kv_per_token_makes_long_context_spec_steps_slower():
    from msopt.engines.sglang.knobs import knobs_sglang
    from msopt.sim import simulate

    knobs = replace(knobs_sglang(["--tp-size", "4", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps",
                                   "4", "--max-running-requests", "32"]), spec_accept_len=2.0)
    load = {"input_len": 4000, "output_len": 512, "num_prompts": 32, "concurrency": 32}
    hw = load_hardware("atlas-800i-a3")
    once = simulate(knobs, replace(hw, verify_kv_per_token=False), "qwen3-32b", load, weight_dtype="int8")
    per_token = simulate(knobs, hw, "qwen3-32b", load, weight_dtype="int8")
    assert hw.verify_kv_per_token and not load_hardware("h100-sxm").verify_kv_per_token
    assert per_token.time_per_output_token > 1.5 * once.time_per_output_token


@needs_measured
def test_the_declared_split_and_the_shipped_ascend_fit(capsys: pytest.CaptureFixture):
    """docs/simulator.md's table: the split holds (no held-out row in the fit set) and the shipped
    entries reproduce the fit group figures it quotes."""
    from tests.support.scripts_load import load_script

    split = load_script("research/sim_measured_split")
    rows = split.load(MEASURED)
    fit = [r for r in rows if split.is_fit_row(r)]
    assert {r.model for r in fit} == {"qwen3-32b", "qwen3-235b-a22b"} and len(fit) == 14
    assert all(r.engine == "sglang" and r.hardware.startswith("atlas") for r in fit)
    assert not any(split.is_fit_row(r) for r in rows if r.model in ("deepseek-v3", "qwen3-coder-480b-a35b"))
    assert split.main(["--measured", str(MEASURED)]) == 0
    out = capsys.readouterr().out
    assert "| fit | SGLang qwen3-32b atlas-800i-a3 | 5 | 50% | 21% | 12% | 0 | 0.90 |" in out
    assert "| held out | vLLM llama-3.1-70b a100-sxm-40gb | 16 | 91% | 29% | 25% | 0 | 0.97 | 3.6% / 0.8% / 0.4% |" in out
