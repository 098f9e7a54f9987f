"""Sweep the quick-start space with the simulator (noise off) and show where its optimum lies.

    PYTHONPATH=. python scripts/research/sweep_quickstart.py [--config configs/quickstart.toml] [--prompts N]

Evaluates a grid of tp x pp x max_num_seqs x max_num_batched_tokens (chunked prefill on,
gpu_memory_utilization at the top of its range) through the same Evaluator that
`msopt optimize` uses, every point with the same seed and noise 0, then a finer 2-D slice
max_num_seqs x max_num_batched_tokens at the best tp/pp, then gpu_memory_utilization and
enable_chunked_prefill at the best point. Prints the best rows, the slice (fitness, lower is
better, its minimum in bold) and, last, `best: ...`.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

from msopt.config import load_settings
from msopt.evaluate.evaluator import Evaluator
from msopt.evaluate.results import EvalRequest
from msopt.space import SearchSpace

REPO = Path(__file__).resolve().parents[2]
TP = (1, 2, 4, 8)
PP = (1, 2)
SEQS = (16, 32, 48, 64, 96, 128)
TOKENS = (128, 256, 512, 1024, 2048, 4096)
SLICE_SEQS = (16, 24, 32, 40, 48, 56, 64, 72, 80, 96, 128)
SLICE_TOKENS = (128, 160, 192, 224, 256, 320, 384, 512, 1024, 4096)


def noise_free(path: Path) -> Path:
    """A copy of the configuration with ``[simulator] noise = 0``."""
    lines = path.read_text().splitlines()
    out, table = [], ""
    for line in lines:
        s = line.strip()
        if s.startswith("["):
            table = s
        if table == "[simulator]" and s.startswith("noise"):
            line = "noise = 0.0"
        out.append(line)
    tmp = Path(tempfile.mkdtemp(prefix="sweep-quickstart-")) / path.name
    tmp.write_text("\n".join(out) + "\n")
    return tmp


class Sweep:
    def __init__(self, config: Path, prompts: int | None) -> None:
        self.settings = load_settings(noise_free(config))
        self.space = SearchSpace.from_settings(self.settings)
        self.ev = Evaluator(self.settings.config, simulate=True)
        self.prompts = prompts
        gmu = next(f for f in self.settings.fields if f.name == "gpu_memory_utilization")
        self.gmu_top = float(gmu.max)
        self.cache: dict[tuple, tuple] = {}

    def __call__(self, **values) -> tuple:
        """(fitness, metrics, values) of one point; eval_id 0 for all: the same seed everywhere."""
        values.setdefault("gpu_memory_utilization", self.gmu_top)
        values.setdefault("enable_chunked_prefill", True)
        key = tuple(sorted(values.items()))
        if key not in self.cache:
            pos = tuple(self.space.encode(values).tolist())
            r = self.ev.evaluate(EvalRequest(0, "search", None, 0, pos, num_prompts=self.prompts))
            self.cache[key] = (r.fitness, r.metrics or {}, r.values, r.error)
        return self.cache[key]


def row(fit: float, m: dict, v: dict) -> str:
    def g(k, scale=1.0, fmt="{:.2f}"):
        x = m.get(k)
        return fmt.format(x * scale) if isinstance(x, (int, float)) and math.isfinite(x) else "-"

    return (f"| {v['tp']} | {v['pp']} | {v['dp']} | {v['max_num_seqs']} | {v['max_num_batched_tokens']} | "
            f"{v['gpu_memory_utilization']:.2f} | {str(v['enable_chunked_prefill']).lower()} | "
            f"{g('generate_speed', fmt='{:.0f}')} | {g('time_to_first_token')} | "
            f"{g('time_per_output_token', 1e3, '{:.1f}')} | {fit:.3f} |")


HEAD = ("| tp | pp | dp | max_num_seqs | max_num_batched_tokens | gpu_mem | chunked | tok/s | TTFT s | "
        "TPOT ms | fitness |\n|---|---|---|---|---|---|---|---|---|---|---|")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "quickstart.toml"))
    ap.add_argument("--prompts", type=int, default=None, help="num_prompts (default: the configuration's)")
    args = ap.parse_args()
    t0 = time.time()
    sw = Sweep(Path(args.config), args.prompts)

    # 1. coarse grid over the parallel layout and the two scheduler limits
    for tp in TP:
        for pp in PP:
            for s in SEQS:
                for b in TOKENS:
                    sw(tp=tp, pp=pp, max_num_seqs=s, max_num_batched_tokens=b)
    coarse = sorted(sw.cache.values(), key=lambda r: r[0])
    best_tp, best_pp = coarse[0][2]["tp"], coarse[0][2]["pp"]

    # 2. finer 2-D slice at the best tp/pp
    grid = {(s, b): sw(tp=best_tp, pp=best_pp, max_num_seqs=s, max_num_batched_tokens=b)
            for s in SLICE_SEQS for b in SLICE_TOKENS}
    (s_best, b_best), best = min(grid.items(), key=lambda kv: kv[1][0])

    # 3. memory fraction and chunked prefill at that point
    gmu_field = next(f for f in sw.settings.fields if f.name == "gpu_memory_utilization")
    gmus = sorted({round(float(gmu_field.min) + i * (float(gmu_field.max) - float(gmu_field.min)) / 4, 3)
                   for i in range(5)})
    extra = [sw(tp=best_tp, pp=best_pp, max_num_seqs=s_best, max_num_batched_tokens=b_best,
                gpu_memory_utilization=g) for g in gmus]
    extra.append(sw(tp=best_tp, pp=best_pp, max_num_seqs=s_best, max_num_batched_tokens=b_best,
                    enable_chunked_prefill=False))
    # the grid proper: gpu_memory_utilization at its top, chunked prefill on
    every = sorted((r for r in sw.cache.values() if r[2]["enable_chunked_prefill"]
                    and abs(r[2]["gpu_memory_utilization"] - sw.gmu_top) < 1e-9), key=lambda r: r[0])
    best = every[0]

    print(f"{len(sw.cache)} evaluations, {time.time() - t0:.0f} s; noise 0, one seed; fitness: lower is better\n")
    print("Best configurations:\n")
    print(HEAD)
    for fit, m, v, _ in every[:8]:
        print(row(fit, m, v))
    print("\nBest of each tp (pp, max_num_seqs, max_num_batched_tokens free):\n")
    print(HEAD)
    for tp in TP:
        rows = [r for r in every if r[2]["tp"] == tp and math.isfinite(r[0])]
        if rows:
            print(row(rows[0][0], rows[0][1], rows[0][2]))
        else:
            print(f"| {tp} | - | - | - | - | - | - | - | - | - | inf |")
    print(f"\nFitness at tp={best_tp}, pp={best_pp} (gpu_memory_utilization {sw.gmu_top}, chunked prefill on); "
          "rows max_num_seqs, columns max_num_batched_tokens, minimum in bold:\n")
    print("| max_num_seqs \\ max_num_batched_tokens | " + " | ".join(map(str, SLICE_TOKENS)) + " |")
    print("|---" * (len(SLICE_TOKENS) + 1) + "|")
    for s in SLICE_SEQS:
        cells = []
        for b in SLICE_TOKENS:
            f = grid[(s, b)][0]
            cells.append((("**%.3f**" if (s, b) == (s_best, b_best) else "%.3f") % f) if math.isfinite(f) else "inf")
        print(f"| {s} | " + " | ".join(cells) + " |")
    print(f"\nThrough the optimum: max_num_seqs at max_num_batched_tokens={b_best}, then "
          f"max_num_batched_tokens at max_num_seqs={s_best}:\n")
    print(HEAD)
    for s in SLICE_SEQS:
        print(row(grid[(s, b_best)][0], grid[(s, b_best)][1], grid[(s, b_best)][2]))
    print("|  |  |  |  |  |  |  |  |  |  |  |")
    for b in SLICE_TOKENS:
        print(row(grid[(s_best, b)][0], grid[(s_best, b)][1], grid[(s_best, b)][2]))
    print(f"\ngpu_memory_utilization and chunked prefill at max_num_seqs={s_best}, "
          f"max_num_batched_tokens={b_best}:\n")
    print(HEAD)
    for fit, m, v, err in extra:
        print(row(fit, m, v) + (f" {err.splitlines()[-1][:80]}" if err else ""))
    v = best[2]
    print(f"\nbest: tp={v['tp']} pp={v['pp']} dp={v['dp']} max_num_seqs={v['max_num_seqs']} "
          f"max_num_batched_tokens={v['max_num_batched_tokens']} "
          f"gpu_memory_utilization={v['gpu_memory_utilization']:.2f} "
          f"enable_chunked_prefill={str(v['enable_chunked_prefill']).lower()} fitness={best[0]:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
