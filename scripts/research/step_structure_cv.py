"""Leave-one-group-out test of structural step-cost variants on the gap-analysis rows.

The question (issue 27 item 5, docs/simulator.md "TTFT on other models and hardware"): does a step
cost built from the model's structure transfer to models and hardware it was not fitted on better
than the catalog's fixed step overhead? The variant tested here splits the entry's step overhead
and per-sequence cost into a fixed part and a part per decoder layer (as kernel launches and
per-layer host work would be):

    step = (1 - share) x S + share x S x layers / 64,   S = scale x the entry's step overhead
    per sequence = the entry's cost, or that x layers / 64 (``per-layer sequences``)

(64 = Qwen3-32B's layers, the rows the catalog was fitted on, so ``scale`` 1 keeps that group as it
is). Every grid point simulates all rows once (each row on its own hardware entry with the
factors, 10 x c requests, the aiconfigurator launch rule); for each model/hardware group the point
with the lowest mean MAPE on the *other* groups predicts it. Printed: per group the catalog, the
variant at the catalog's values and the held-out prediction, then the pooled figures.

``--variant`` picks other one-off structures, scored without a fit:

* ``zero-overhead``: step and per-sequence overhead 0 (with ``--fp8-kv``: an fp8 KV cache for fp8 rows);
* ``comm-x2``: the per-token all-reduce at twice the link efficiency (NVLink SHARP / one-shot);
* ``moe-all-experts F``: every MoE step reads all of its device's expert weights, at F x the time
  the HBM roofline gives (F = 1: no fitted number), instead of the experts a uniform routing of the
  step's tokens touches;
* ``dp-as-tp``: only the rows launched with ``--data-parallel-size`` (``scripts/generators/silicon_rows.py``'s
  reading of ``tp_size`` < ``moe_tp_size x moe_ep_size``), simulated instead as one tensor-parallel
  group of all their devices (aiconfigurator 0.12.0's ``generator/rule_plugin/vllm.rule``).

Usage: python scripts/research/step_structure_cv.py [--engine vllm|sglang] [--variant per-layer|zero-overhead|
       comm-x2|moe-all-experts|dp-as-tp] [--factor F] [--fp8-kv]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from msopt.sim import load_hardware, load_model  # noqa: E402
from msopt.sim.calibrate import Measurement, load_measurements_csv, mape, simulate_measurements  # noqa: E402
from msopt.sim.catalog_types import Hardware  # noqa: E402
from msopt.sim.moe import MoeCost  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"
SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)
SCALES = (0.5, 0.75, 1.0, 1.25)
REF_LAYERS = 64.0


def _with_overheads(hw: Hardware, engine: str, step_ms: float, per_seq_us: float) -> Hardware:
    over = {e: dict(t) for e, t in hw.engine_overrides.items()}
    over.setdefault(engine, {}).update(step_overhead_ms=step_ms, per_seq_overhead_us=per_seq_us)
    return replace(hw, engine_overrides=over)


def simulate_per_layer(rows: Sequence[Measurement], hw: Hardware, share: float, scale: float,
                       seq_per_layer: bool) -> np.ndarray:
    """(n, 3) simulated rows with the step overhead split into a fixed and a per-layer part."""
    engine = rows[0].engine
    base = hw.for_engine(engine)
    out = np.full((len(rows), 3), np.nan)
    for model in sorted({m.model for m in rows}):
        idx = [j for j, m in enumerate(rows) if m.model == model]
        per = load_model(model).layers / REF_LAYERS
        step = scale * base.step_overhead_ms * ((1.0 - share) + share * per)
        seq = base.per_seq_overhead_us * (per if seq_per_layer else 1.0)
        out[idx] = simulate_measurements([rows[j] for j in idx], _with_overheads(hw, engine, step, seq),
                                         per_row_hardware=True)
    return out


@contextlib.contextmanager
def all_experts_read(factor: float) -> Iterator[None]:
    """Within the block, an MoE step reads every local expert's weights (``factor`` x the roofline).

    A scoped replacement of :meth:`MoeCost.time`, restored on exit: the variant is an experiment,
    not a model the simulator offers.
    """
    plain = MoeCost.time

    def time_all(self: MoeCost, n_tokens: float) -> float:
        if n_tokens <= 0:
            return 0.0
        g = n_tokens * self.layout.group
        return max(self.w_all * factor, self.flop_tok * g) + self.comm_fixed + self.comm_tok * g

    MoeCost.time = time_all  # type: ignore[method-assign]
    try:
        yield
    finally:
        MoeCost.time = plain  # type: ignore[method-assign]


def _fmt(err: dict) -> str:
    return f"{err['ttft']:.1%} | {err['tpot']:.1%} | {err['tokens_per_s']:.1%}"


def _groups(rows: Sequence[Measurement]) -> dict[tuple[str, str], np.ndarray]:
    keys = sorted({(m.model, m.hardware) for m in rows})
    return {g: np.array([j for j, m in enumerate(rows) if (m.model, m.hardware) == g]) for g in keys}


def per_layer_cv(rows: Sequence[Measurement], hw: Hardware) -> None:
    """Grid over (share, scale, per-layer sequences); leave one group out; print the table."""
    start = time.perf_counter()
    grid = list(itertools.product(SHARES, SCALES, (False, True)))
    sims = {point: simulate_per_layer(rows, hw, *point) for point in grid}
    catalog = sims[(0.0, 1.0, False)]
    groups = _groups(rows)
    held = np.full((len(rows), 3), np.nan)
    print("| group | rows | catalog: TTFT | TPOT | tok/s | held out: TTFT | TPOT | tok/s | "
          "picked (share per layer, scale, sequences per layer) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for g, idx in groups.items():
        fit = np.concatenate([i for h, i in groups.items() if h != g])
        fit_rows = [rows[j] for j in fit]

        def score(point: tuple, fit: np.ndarray = fit, fit_rows: list = fit_rows) -> float:
            e = mape(fit_rows, sims[point][fit])
            return (e["ttft"] + e["tpot"] + e["tokens_per_s"]) / 3.0

        best = min(grid, key=score)
        held[idx] = sims[best][idx]
        sub = [rows[j] for j in idx]
        print(f"| {g[0]} on {g[1]} | {len(sub)} | {_fmt(mape(sub, catalog[idx]))} | "
              f"{_fmt(mape(sub, held[idx]))} | {best} |")
    print(f"| all | {len(rows)} | {_fmt(mape(rows, catalog))} | {_fmt(mape(rows, held))} | |")
    print(f"<!-- {len(grid)} grid points, {time.perf_counter() - start:.0f} s -->")


def one_off(rows: Sequence[Measurement], hw: Hardware, variant: str, factor: float) -> None:
    """Score one structure without a fit, per group."""
    engine = rows[0].engine
    base = hw.for_engine(engine)
    if variant == "dp-as-tp":
        rows = [m for m in rows if m.knobs.dp > 1]
    catalog = simulate_measurements(rows, hw, per_row_hardware=True)
    if variant == "zero-overhead":
        sim = simulate_measurements(rows, _with_overheads(hw, engine, 0.0, 0.0), per_row_hardware=True)
    elif variant == "dp-as-tp":
        alone = [replace(m, knobs=replace(m.knobs, tp=m.knobs.tp * m.knobs.dp, dp=1)) for m in rows]
        sim = simulate_measurements(alone, hw, per_row_hardware=True)
    elif variant == "comm-x2":
        sim = simulate_measurements(rows, replace(hw, comm_eff=2.0 * base.comm_eff), per_row_hardware=True)
    else:
        with all_experts_read(factor):
            sim = simulate_measurements(rows, hw, per_row_hardware=True)
    print(f"| group | rows | catalog: TTFT | TPOT | tok/s | {variant}: TTFT | TPOT | tok/s |")
    print("|---|---|---|---|---|---|---|---|")
    for g, idx in _groups(rows).items():
        sub = [rows[j] for j in idx]
        print(f"| {g[0]} on {g[1]} | {len(sub)} | {_fmt(mape(sub, catalog[idx]))} | {_fmt(mape(sub, sim[idx]))} |")
    print(f"| all | {len(rows)} | {_fmt(mape(rows, catalog))} | {_fmt(mape(rows, sim))} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="vllm", choices=("vllm", "sglang"))
    parser.add_argument("--variant", default="per-layer",
                        choices=("per-layer", "zero-overhead", "comm-x2", "moe-all-experts", "dp-as-tp"))
    parser.add_argument("--factor", type=float, default=1.0,
                        help="moe-all-experts: the expert read's time over the roofline's (default: %(default)s)")
    parser.add_argument("--fp8-kv", action="store_true", help="simulate fp8 rows with an fp8 KV cache")
    parser.add_argument("--csv", type=Path, help="rows (default: tests/data/<engine>_measured_gap_analysis.csv)")
    args = parser.parse_args()
    rows = load_measurements_csv(args.csv or DATA / f"{args.engine}_measured_gap_analysis.csv", engine=args.engine)
    if args.fp8_kv:
        rows = [replace(m, kv_dtype="fp8") if m.weight_dtype == "fp8" else m for m in rows]
    hw = load_hardware("h100-sxm")
    if args.variant == "per-layer":
        per_layer_cv(rows, hw)
    else:
        one_off(rows, hw, args.variant, args.factor)


if __name__ == "__main__":
    main()
