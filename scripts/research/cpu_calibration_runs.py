"""Measure the real vLLM CPU build for the cpu-x86 calibration: one ``msopt optimize`` run per configuration.

Each run is ``msopt optimize -c <config> --no-ray --max-launches 1``: configs/vllm_cpu.toml with the
three knobs' baseline values set to one configuration, the benchmark's prompt count and warm-up set
(``vllm bench serve --num-prompts N --num-warmups W``), ``[simulator]`` naming cpu-x86 and
llama-tiny-2l-128 (so that ``msopt calibrate`` can simulate the run) and the prior off (it would only
delay the one launch). The runs go one after another, never in parallel; ``uptime`` is logged before
each into ``<out>/load.log``.

``--start FILE`` measures nothing either: it scores a coarse grid of the four factors the fit cannot
move far from a zero start (``frontend_ms_per_req``, ``frontend_us_per_output_token``,
``step_overhead_ms``, ``per_seq_overhead_us``) on the runs ``--only`` names (the fitted half) and
writes the best, on the catalog's cpu-x86 without its ``[engines.vllm]`` table, as the hardware TOML
``msopt calibrate --hardware`` starts from.

``--summary`` measures nothing: it prints each run's measured figures (from its journal) and the
load logged before it, and the noise between the repeats of c04 (c04, c04r2, ...) and of c09: the
mean absolute deviation from their mean, as a share of the mean (what a MAPE of a perfect
simulator against one repeat would be).

Usage: python scripts/research/cpu_calibration_runs.py --out DIR [--only NAME ...] [--list] [--summary] [--start FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "vllm_cpu.toml"
C = 16  # the benchmark's --max-concurrency in configs/vllm_cpu.toml

#: name -> (max_num_seqs, max_num_batched_tokens, enable_chunked_prefill, num_prompts, num_warmups)
RUNS: dict[str, tuple[int, int, bool, int, int]] = {
    # the 12 configurations; odd numbers fit, even numbers are held out (docs/simulator.md)
    "c01": (2, 512, True, 5 * C, 0),
    "c02": (4, 1024, True, 5 * C, 0),
    "c03": (4, 256, True, 5 * C, 0),
    "c04": (8, 1024, True, 5 * C, 0),
    "c05": (8, 2048, False, 5 * C, 0),
    "c06": (8, 256, True, 5 * C, 0),
    "c07": (16, 512, True, 5 * C, 0),
    "c08": (16, 1024, False, 5 * C, 0),
    "c09": (16, 2048, True, 5 * C, 0),
    "c10": (32, 1024, True, 5 * C, 0),
    "c11": (32, 256, True, 5 * C, 0),
    "c12": (2, 1024, False, 5 * C, 0),
    # repeats of c04 (the noise between repeats of one configuration)
    "c04r2": (8, 1024, True, 5 * C, 0),
    "c04r3": (8, 1024, True, 5 * C, 0),
    "c04r4": (8, 1024, True, 5 * C, 0),
    # repeats of c09: the noise at 16 sequences, where the streamed tokens of 16 clients meet on one core
    "c09r2": (16, 2048, True, 5 * C, 0),
    "c09r3": (16, 2048, True, 5 * C, 0),
    # the measurement protocol (issue 27 item 5): c04 at 5 x c and 20 x c requests, 0 and 2 x c warm-up
    "c04w32": (8, 1024, True, 5 * C, 2 * C),
    "c04n320": (8, 1024, True, 20 * C, 0),
    "c04n320w32": (8, 1024, True, 20 * C, 2 * C),
}


def _set_field(text: str, name: str, value: str) -> str:
    pattern = re.compile(rf'(name = "{name}"\n(?:(?!\[\[).*\n)*?)value = [^\n#]*', re.M)
    new, n = pattern.subn(lambda m: f"{m.group(1)}value = {value} ", text, count=1)
    if n != 1:
        raise SystemExit(f"{BASE}: no target_field {name!r} with a value line")
    return new


def config_text(mns: int, mnbt: int, chunked: bool, prompts: int, warmups: int) -> str:
    """configs/vllm_cpu.toml with one configuration as the baseline and the given load."""
    text = BASE.read_text()
    text = _set_field(text, "max_num_seqs", str(mns))
    text = _set_field(text, "max_num_batched_tokens", str(mnbt))
    text = _set_field(text, "enable_chunked_prefill", "true" if chunked else "false")
    text = re.sub(r"^sample_size = \d+", f"sample_size = {prompts}", text, flags=re.M)
    text = re.sub(r"^num_prompts = \d+(?=\s+# the full)", f"num_prompts = {prompts}", text, flags=re.M)
    text = text.replace('others = "--ignore-eos"', f'others = "--ignore-eos --num-warmups {warmups}"')
    text = text.replace("[data_storage]\npso_top_k = 1", "[data_storage]\npso_top_k = 0")
    head = ('[search]\nprior = "none"\n\n[simulator]\nhardware = "cpu-x86"\nmodel = "llama-tiny-2l-128"\n'
            'weight_dtype = "bf16"\n\n')
    return text.replace("[data_storage]", head + "[data_storage]", 1)


def measured(run_parent: Path) -> tuple[float, float, float] | None:
    """(TTFT s, TPOT s, output tokens/s) of the one evaluation under ``run_parent``, or None."""
    for journal in sorted([*run_parent.glob("journal.jsonl"), *run_parent.glob("*/journal.jsonl")]):
        for line in journal.read_text().splitlines():
            rec = json.loads(line)
            m = rec.get("metrics") or {}
            if rec.get("real_evaluation") and not rec.get("error"):
                return m["time_to_first_token"], m["time_per_output_token"], m["generate_speed"]
    return None


def summary(out: Path, names: list[str]) -> None:
    """Print the measured table and the noise between the repeats of c04."""
    loads = {}
    if (out / "load.log").is_file():
        for line in (out / "load.log").read_text().splitlines():
            loads[line.split()[0]] = line.split("load average:")[-1].strip()
    print("| run | max_num_seqs | max_num_batched_tokens | chunked | prompts | warm-ups | TTFT ms | TPOT ms | "
          "tokens/s | load before (1, 5, 15 min) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    repeats: dict[str, list[tuple[float, float, float]]] = {}
    for name in names:
        got = measured(out / name)
        if got is None:
            continue
        mns, mnbt, chunked, prompts, warm = RUNS[name]
        print(f"| {name} | {mns} | {mnbt} | {'yes' if chunked else 'no'} | {prompts} | {warm} | {got[0] * 1e3:.0f} | "
              f"{got[1] * 1e3:.2f} | {got[2]:.1f} | {loads.get(name, '?')} |")
        for base in ("c04", "c09"):
            if name == base or name.startswith(f"{base}r"):
                repeats.setdefault(base, []).append(got)
    for base, rows in repeats.items():
        if len(rows) > 1:
            noise = []
            for i in range(3):
                vals = [r[i] for r in rows]
                mean = sum(vals) / len(vals)
                noise.append(sum(abs(v - mean) for v in vals) / len(vals) / mean)
            print(f"noise between {len(rows)} repeats of {base} (mean |x - mean| / mean): TTFT {noise[0]:.1%}, "
                  f"TPOT {noise[1]:.1%}, tokens/s {noise[2]:.1%}")


#: the start grid of ``--start``: factor -> values
GRID: dict[str, tuple[float, ...]] = {
    "frontend_ms_per_req": (10.0, 20.0, 30.0, 40.0, 50.0),
    "frontend_us_per_output_token": (0.0, 1000.0, 2000.0, 2500.0, 3000.0, 4000.0),
    "step_overhead_ms": (6.0, 8.0, 10.0, 12.0, 14.0),
    "per_seq_overhead_us": (100.0, 300.0, 500.0, 700.0),
}


def start_entry(out: Path, names: list[str], dest: Path) -> None:
    """Write the best point of :data:`GRID` on the runs ``names`` under ``out`` as a hardware TOML."""
    import dataclasses
    import itertools

    sys.path.insert(0, str(ROOT))
    from msopt.cli.calibrate import measurements_from_run
    from msopt.sim import load_hardware
    from msopt.sim.calibrate import mape, simulate_measurements
    from msopt.sim.catalog_load import hardware_toml

    rows = [m for name in names for m in measurements_from_run(out / name, "vllm")[0]]
    base = dataclasses.replace(load_hardware("cpu-x86"), engine_overrides={})
    best: tuple[float, dict[str, float]] | None = None
    for values in itertools.product(*GRID.values()):
        kw = dict(zip(GRID, values))
        err = mape(rows, simulate_measurements(rows, dataclasses.replace(base, **kw)))  # type: ignore[arg-type]
        score = (err["ttft"] + err["tpot"] + err["tokens_per_s"]) / 3.0
        if best is None or score < best[0]:
            best = (score, kw)
    assert best is not None
    hw = dataclasses.replace(base, **best[1])  # type: ignore[arg-type]
    header = (f"start of the cpu-x86 fit: the best of a {' x '.join(str(len(v)) for v in GRID.values())} grid "
              f"over {', '.join(GRID)} on {', '.join(names)} (mean MAPE {best[0]:.1%})")
    dest.write_text(hardware_toml(hw, header))
    print(header)
    print(", ".join(f"{k} = {v:g}" for k, v in best[1].items()), "->", dest)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="parent of the run directories")
    parser.add_argument("--only", nargs="+", choices=list(RUNS), help="these runs only (default: all)")
    parser.add_argument("--list", action="store_true", help="print the runs and exit")
    parser.add_argument("--summary", action="store_true", help="print the measured figures and the noise")
    parser.add_argument("--start", type=Path, metavar="FILE",
                        help="write the best start of the grid on the --only runs to FILE (measures nothing)")
    args = parser.parse_args()
    names = args.only or list(RUNS)
    if args.start:
        start_entry(args.out, names, args.start)
        return 0
    if args.summary:
        summary(args.out, names)
        return 0
    if args.list:
        for name in names:
            print(name, *RUNS[name])
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "load.log"
    for name in names:
        cfg = args.out / f"{name}.toml"
        cfg.write_text(config_text(*RUNS[name]))
        up = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
        start = time.time()
        proc = subprocess.run([sys.executable, "-m", "msopt.cli.main", "optimize", "-c", str(cfg), "--no-ray",
                               "--plain", "--max-launches", "1", "-o", str(args.out / name)],
                              capture_output=True, text=True, check=False)
        (args.out / f"{name}.log").write_text(proc.stdout + proc.stderr)
        with log.open("a") as f:
            f.write(f"{name} {RUNS[name]} rc={proc.returncode} {time.time() - start:.0f}s | before: {up}\n")
        print(name, "rc", proc.returncode, f"{time.time() - start:.0f}s", up, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
