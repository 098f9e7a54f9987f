"""The simulator against public measurements (../shared/measured) on a declared split.

Fit set (the shipped Ascend entries were fitted on it): the SGLang Ascend rows of Qwen3-32B and
Qwen3-235B-A22B (``sglang_ascend_best_practice.csv``); the H100 entry stays fitted on the reference
CSVs (tests/data). Held out (never fitted): the vllm-ascend rows, the SGLang Ascend DeepSeek and
Qwen3-Coder/Next rows (and Qwen3-30B-A3B, in neither list), the A100 rows (llm-k8s), the H200
DeepSeek-V3 rows. Each row is simulated on the catalog entry its hardware names.

Without options it scores the shipped catalog and prints one markdown table row per group: rows,
TTFT / TPOT / output tok/s MAPE, refused rows and the Spearman correlation of tok/s within the group,
and the repeat noise where the source repeated a configuration (llm-k8s ran its InfiniBand layout
twice). ``--fit DIR`` refits first, as the shipped entries were: atlas-800i-a3 (shared factors and
``[engines.sglang]``) on the fit rows of both Ascend entries (each row on its own datasheet), and
atlas-800i-a2's ``[engines.sglang]`` alone on its own fit rows (its shared factors, which vLLM's
quick start uses, are kept); the fitted TOMLs are written to DIR and scored.

Usage: python scripts/research/sim_measured_split.py [--measured ../shared/measured] [--fit DIR] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from msopt.sim.calibrate import Measurement, fit_hardware, group_errors, simulate_measurements  # noqa: E402
from msopt.sim.catalog_load import hardware_toml, load_hardware  # noqa: E402
from msopt.sim.catalog_types import Hardware  # noqa: E402
from msopt.sim.measured import load_measured_csv  # noqa: E402

FILES = ("sglang_ascend_best_practice", "vllm_ascend_docs", "surajssd_llm_k8s_llama33_70b_a100",
         "sglang_benchmark_dsv3_h200")
FIT_MODELS = ("qwen3-32b", "qwen3-235b-a22b")


def is_fit_row(m: Measurement) -> bool:
    """The declared fit set: SGLang on Ascend, Qwen3-32B and Qwen3-235B-A22B."""
    return m.source.split(":")[0].endswith("sglang_ascend_best_practice.csv") and m.model in FIT_MODELS


def load(measured: Path) -> list[Measurement]:
    """Every simulated row of the split's files."""
    rows: list[Measurement] = []
    for name in FILES:
        rows += load_measured_csv(measured / f"{name}.csv")[0]
    return rows


def score(rows: Sequence[Measurement], entries: dict[str, Hardware]) -> np.ndarray:
    """(n, 3) simulated (ttft_s, tpot_s, tok/s), each row on its hardware's entry."""
    sim = np.full((len(rows), 3), np.nan)
    for name in sorted({r.hardware for r in rows}):
        idx = [i for i, r in enumerate(rows) if r.hardware == name]
        sim[idx] = simulate_measurements([rows[i] for i in idx], entries.get(name) or load_hardware(name))
    return sim


def repeat_noise(rows: Sequence[Measurement]) -> dict[str, tuple[float, float, float]]:
    """Per group: mean |a - b| / mean(a, b) of TTFT, TPOT and tok/s over the configurations a source
    measured twice (the same hardware cell, knobs, load and prompt count, the lengths within 1 %)."""
    import csv

    cells: dict[str, dict[int, str]] = {}
    key_rows: dict[tuple, list[Measurement]] = {}
    for r in rows:
        path, line = r.source.rsplit(":", 1)
        if path not in cells:
            with open(path, newline="") as f:
                cells[path] = {i: row["hardware"] for i, row in enumerate(csv.DictReader(f), start=2)}
        load = {k: v for k, v in (r.workload or {}).items() if k not in ("input_len", "output_len")}
        key = (r.group, cells[path][int(line)], repr(r.knobs), repr(sorted(load.items())))
        key_rows.setdefault(key, []).append(r)
    out: dict[str, list[np.ndarray]] = {}
    for (group, *_), same in key_rows.items():
        for a, b in zip(same, same[1:]):
            if abs(a.output_len - b.output_len) <= 0.01 * a.output_len and a.input_len == b.input_len:
                x, y = a.measured(), b.measured()
                out.setdefault(group, []).append(np.abs(x - y) / ((x + y) / 2))
    return {g: (float(m[0]), float(m[1]), float(m[2])) for g, x in out.items()
            for m in [np.nanmean(np.array(x), axis=0)]}


def fit(rows: Sequence[Measurement], out: Path, rounds: int) -> dict[str, Hardware]:
    """Refit the Ascend entries on the fit rows (see the module docstring); write them to ``out``."""
    fit_rows = [r for r in rows if is_fit_row(r)]
    a3 = fit_hardware(fit_rows, load_hardware("atlas-800i-a3"), per_row_hardware=True, rounds=rounds, folds=0,
                      progress=print).hardware
    a2_rows = [r for r in fit_rows if r.hardware == "atlas-800i-a2"]
    a2 = fit_hardware(a2_rows, load_hardware("atlas-800i-a2"), fit_shared=False, rounds=rounds, folds=0,
                      progress=print).hardware
    out.mkdir(parents=True, exist_ok=True)
    for hw in (a2, a3):
        fitted = "fitted by scripts/research/sim_measured_split.py --fit"
        (out / f"{hw.name}.toml").write_text(hardware_toml(hw, fitted))
        print(f"wrote {out / (hw.name + '.toml')}")
    return {"atlas-800i-a2": a2, "atlas-800i-a3": a3}


def pct(v: float) -> str:
    """A MAPE cell."""
    return "n/a" if v != v else f"{v:.0%}"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the per-group table (and refit first with --fit)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", type=Path, default=ROOT.parent / "shared" / "measured")
    ap.add_argument("--fit", type=Path, metavar="DIR", help="refit the Ascend entries first; write them to DIR")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    if not args.measured.is_dir():
        print(f"{args.measured}: no measurements there; give --measured DIR", file=sys.stderr)
        return 2
    rows = load(args.measured)
    entries = fit(rows, args.fit, args.rounds) if args.fit else {}
    sim = score(rows, entries)
    noise = repeat_noise(rows)
    print("| set | group | rows | TTFT | TPOT | tok/s | refused | Spearman tok/s | repeat noise TTFT / TPOT / tok/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind, keep in (("fit", is_fit_row), ("held out", lambda r: not is_fit_row(r))):
        idx = [i for i, r in enumerate(rows) if keep(r)]
        part = [rows[i] for i in idx]
        for g, e in group_errors(part, sim[idx]).items():
            rho = e["spearman"]
            n = noise.get(g)
            cell = " / ".join(f"{v:.1%}" for v in n) if n else "none in the source"
            rank = "n/a" if rho != rho else f"{rho:.2f}"
            print(f"| {kind} | {g} | {int(e['rows'])} | {pct(e['ttft'])} | {pct(e['tpot'])} | "
                  f"{pct(e['tokens_per_s'])} | {int(e['refused'])} | {rank} | {cell} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
