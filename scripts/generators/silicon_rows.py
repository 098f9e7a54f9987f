"""Rows of NVIDIA aiconfigurator's measured-silicon sample, in the reference CSV format, per engine.

Reads ``aiconfigurator_core/systems/silicon_sample.csv`` of the aiconfigurator-core 0.12.0 wheel
(``pip download --no-deps aiconfigurator-core==0.12.0 -d /tmp/aic``; Apache-2.0) and writes the
aggregated vLLM and SGLang rows of the pipeline the shipped reference CSVs come from (their
``silicon_data_source`` names ``aic-auto-gap-analysis``: deployed by aiconfigurator's generator,
measured by ``aiconfigurator eval`` with aiperf) whose model and hardware the catalog has. Models
and hardware are written as catalog names. ``server_args`` is written for MoE rows only: the
launch rule's flags plus the layout the row's columns give (``moe_tp_size x moe_ep_size`` devices
per MoE group; ``--data-parallel-size`` for the attention ranks beyond ``tp_size``;
``--enable-expert-parallel`` / ``--ep-size`` when ``moe_ep_size`` > 1). Dense rows leave it empty,
so the launch rule of the reader applies.

Usage: python scripts/generators/silicon_rows.py SILICON_SAMPLE_CSV --out tests/data
"""

from __future__ import annotations

import argparse
import csv
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from msopt.sim.launch_rules import LAUNCH_RULES  # noqa: E402

MODELS = {"Qwen/Qwen3-32B": "qwen3-32b", "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
          "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b"}
HARDWARE = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm"}
COLUMNS = ["model", "hardware", "engine", "engine_version", "weight_dtype", "input_len", "output_len",
           "concurrency", "tp", "pp", "ttft_ms", "tpot_ms", "server_args"]


def convert(row: dict[str, str]) -> dict[str, str] | None:
    """One silicon row as a reference row, or None when it is outside the selection."""
    if ("aic-auto-gap-analysis" not in row["silicon_data_source"] or row["mode"] != "agg"
            or row["backend"] not in ("vllm", "sglang") or row["model_path"] not in MODELS
            or row["system"] not in HARDWARE):
        return None
    engine, tp = row["backend"], int(row["tp_size"])
    isl, osl, c = int(row["isl"]), int(row["osl"]), int(row["batch_size"])
    args = ""
    if "235B" in row["model_path"]:
        moe_tp, ep = int(row["moe_tp_size"] or 1), int(row["moe_ep_size"] or 1)
        world = max(tp, moe_tp * ep)
        flags = LAUNCH_RULES.get("aiconfigurator")(engine, isl, osl, c)
        if engine == "vllm":
            flags += ["--data-parallel-size", str(world // tp)] if world > tp else []
            flags += ["--enable-expert-parallel"] if ep > 1 else []
        else:
            flags += ["--ep-size", str(ep)] if ep > 1 else []
        args = shlex.join(flags)
    return {"model": MODELS[row["model_path"]], "hardware": HARDWARE[row["system"]], "engine": engine,
            "engine_version": row["backend_version"], "weight_dtype": row["precision"] or "bf16",
            "input_len": str(isl), "output_len": str(osl), "concurrency": str(c), "tp": str(tp),
            "pp": row["pp_size"] or "1", "ttft_ms": row["silicon_ttft_ms"], "tpot_ms": row["silicon_tpot_ms"],
            "server_args": args}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sample", type=Path, help="silicon_sample.csv of the aiconfigurator-core wheel")
    parser.add_argument("--out", type=Path, required=True, help="folder of the written CSVs")
    args = parser.parse_args()
    with args.sample.open(newline="") as f:
        rows = [r for r in (convert(row) for row in csv.DictReader(f)) if r is not None]
    for engine in ("vllm", "sglang"):
        path = args.out / f"{engine}_measured_gap_analysis.csv"
        mine = [r for r in rows if r["engine"] == engine]
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(mine)
        groups = sorted({(r["model"], r["hardware"]) for r in mine})
        print(f"{path}: {len(mine)} rows; " + ", ".join(
            f"{m} on {h} ({sum(1 for r in mine if (r['model'], r['hardware']) == (m, h))})" for m, h in groups))
    return 0


if __name__ == "__main__":
    sys.exit(main())
