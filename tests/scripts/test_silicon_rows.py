"""scripts/generators/silicon_rows.py: aiconfigurator's silicon rows in the reference CSV format."""

from __future__ import annotations

import csv
import shlex
from pathlib import Path

from tests.support.scripts_load import load_script

ROOT = Path(__file__).resolve().parents[2]


def _script():
    return load_script("generators/silicon_rows")


def _row(**kw: str) -> dict[str, str]:
    base = {"silicon_data_source": "source_file=/x/aic-auto-gap-analysis/data/h200_sxm/vllm/0.12.0/m.csv",
            "mode": "agg", "backend": "vllm", "backend_version": "0.12.0", "model_path": "Qwen/Qwen3-32B",
            "system": "h200_sxm", "precision": "", "isl": "1000", "osl": "100", "batch_size": "16",
            "tp_size": "2", "pp_size": "1", "moe_tp_size": "", "moe_ep_size": "",
            "silicon_ttft_ms": "100.5", "silicon_tpot_ms": "9.5"}
    return {**base, **kw}


def test_dense_rows_keep_the_launch_rule_and_take_catalog_names():
    out = _script().convert(_row())
    assert out is not None
    assert (out["model"], out["hardware"], out["weight_dtype"], out["server_args"]) == (
        "qwen3-32b", "h200-sxm", "bf16", "")
    assert (out["concurrency"], out["tp"], out["ttft_ms"]) == ("16", "2", "100.5")


def test_moe_rows_carry_their_layout_as_server_args():
    out = _script().convert(_row(model_path="Qwen/Qwen3-235B-A22B-FP8", precision="fp8", tp_size="1",
                                 moe_tp_size="1", moe_ep_size="4"))
    assert out is not None
    argv = shlex.split(out["server_args"])
    assert argv[:2] == ["--max-num-seqs", "16"]
    assert argv[-3:] == ["--data-parallel-size", "4", "--enable-expert-parallel"]


def test_rows_of_other_pipelines_models_or_modes_are_left_out():
    mod = _script()
    assert mod.convert(_row(silicon_data_source="db-dump/2026-04-27")) is None
    assert mod.convert(_row(mode="disagg")) is None
    assert mod.convert(_row(model_path="openai/gpt-oss-120b")) is None
    assert mod.convert(_row(backend="trtllm")) is None


def test_the_committed_csvs_load():
    from msopt.sim.calibrate import load_measurements_csv

    for engine in ("vllm", "sglang"):
        path = ROOT / "tests" / "data" / f"{engine}_measured_gap_analysis.csv"
        with path.open(newline="") as f:
            assert next(csv.reader(f)) == _script().COLUMNS
        assert len(load_measurements_csv(path, engine=engine)) > 100
