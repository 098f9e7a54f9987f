"""Simulator vs the 90 measured vLLM runs (Qwen3-32B, H100 SXM): shared by the test and the docs.

Run ``python -m tests.sim.fidelity [SPREAD [RULE]]`` from the repository root to print the
per-row table and the MAPE figures quoted in docs/simulator.md (defaults: fixed lengths, the
aiconfigurator launch rule).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from msopt.sim import Hardware, ModelSpec, load_hardware, load_model, simulate
from msopt.sim.launch_rules import LAUNCH_RULES, row_knobs

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_measured_qwen3_32b_h100.csv"
#: requests per row = PROMPTS_PER_SLOT x concurrency, as msopt.sim.calibrate simulates a row
#: (the TTFT figure depends on it: docs/simulator.md, "Run length")
PROMPTS_PER_SLOT = 10
#: relative spread of output lengths (uniform +-); 0: exactly the fixed lengths that were
#: measured. The runs were launched with the flags aiconfigurator's generator sets
#: (msopt.sim.launch_rules.LAUNCH_RULES["aiconfigurator"]), and with those flags fixed lengths
#: need no spread; a spread can still be given to see its effect.
OUTPUT_SPREAD = 0.0
#: how the rows' servers were launched (a msopt.sim.launch_rules.LAUNCH_RULES name)
LAUNCH_RULE = "aiconfigurator"


@dataclass(frozen=True)
class Row:
    input_len: int
    output_len: int
    concurrency: int
    tp: int
    ttft_s: float
    tpot_s: float

    @property
    def tokens_per_s(self) -> float:
        return tokens_per_s(self.concurrency, self.output_len, self.ttft_s, self.tpot_s)


def tokens_per_s(concurrency: int, output_len: int, ttft_s: float, tpot_s: float) -> float:
    """The reference README's derived closed-loop output throughput."""
    return concurrency * output_len / (ttft_s + tpot_s * (output_len - 1))


def load_rows(path: Path = DATA) -> list[Row]:
    with path.open(newline="") as f:
        return [
            Row(int(r["input_len"]), int(r["output_len"]), int(r["concurrency"]), int(r["tp"]),
                float(r["ttft_ms"]) / 1e3, float(r["tpot_ms"]) / 1e3)
            for r in csv.DictReader(f)
            if int(r["pp"]) == 1
        ]


def simulate_rows(rows: list[Row], hw: Hardware | None = None, model: ModelSpec | None = None,
                  prompts_per_slot: int = PROMPTS_PER_SLOT, spread: float = OUTPUT_SPREAD,
                  launch_rule: str = LAUNCH_RULE) -> np.ndarray:
    """(n, 3) array of simulated (ttft_s, tpot_s, output tokens/s) per row, launched by ``launch_rule``."""
    hw = hw or load_hardware("h100-sxm")
    model = model or load_model("qwen3-32b")
    out = np.empty((len(rows), 3))
    for j, row in enumerate(rows):
        out_len: int | dict = row.output_len
        if spread > 0:
            out_len = {"dist": "uniform", "low": max(2, round(row.output_len * (1 - spread))),
                       "high": round(row.output_len * (1 + spread))}
        argv = LAUNCH_RULES.get(launch_rule)("vllm", row.input_len, row.output_len, row.concurrency)
        res = simulate(
            row_knobs("vllm", row.tp, 1, argv), hw, model,
            {"input_len": row.input_len, "output_len": out_len,
             "num_prompts": prompts_per_slot * row.concurrency, "concurrency": row.concurrency},
        )
        assert res.error is None, res.error
        out[j] = res.time_to_first_token, res.time_per_output_token, res.generate_speed
    return out


def mape(rows: list[Row], sim: np.ndarray) -> dict[str, float]:
    """Mean absolute percentage error of TTFT, TPOT and output tokens/s."""
    meas = np.array([[r.ttft_s, r.tpot_s, r.tokens_per_s] for r in rows])
    err = np.abs(sim - meas) / meas
    return {"ttft": float(err[:, 0].mean()), "tpot": float(err[:, 1].mean()),
            "tokens_per_s": float(err[:, 2].mean())}


def main() -> None:
    import sys

    spread = float(sys.argv[1]) if len(sys.argv) > 1 else OUTPUT_SPREAD
    rule = sys.argv[2] if len(sys.argv) > 2 else LAUNCH_RULE
    rows = load_rows()
    sim = simulate_rows(rows, spread=spread, launch_rule=rule)
    print(f"{'in':>5} {'out':>5} {'c':>4} {'tp':>3} | {'ttft ms':>17} | {'tpot ms':>13} | {'tok/s':>13}")
    for r, s in zip(rows, sim):
        print(f"{r.input_len:5d} {r.output_len:5d} {r.concurrency:4d} {r.tp:3d} | "
              f"{r.ttft_s*1e3:8.1f} {s[0]*1e3:8.1f} | {r.tpot_s*1e3:6.1f} {s[1]*1e3:6.1f} | "
              f"{r.tokens_per_s:6.0f} {s[2]:6.0f}")
    m = mape(rows, sim)
    print(f"launch rule {rule}, output spread +-{spread:.0%}, {PROMPTS_PER_SLOT} x concurrency prompts per row")
    print(f"MAPE over {len(rows)} rows: TTFT {m['ttft']:.1%}  TPOT {m['tpot']:.1%}  "
          f"tokens/s {m['tokens_per_s']:.1%}")


if __name__ == "__main__":
    main()
