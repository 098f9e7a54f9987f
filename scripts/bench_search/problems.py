"""The benchmark's problems: a vLLM search space on a simulated model / hardware / workload, and
the table of every valid configuration's noise-free metrics and fitness (cached under ``--cache``)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np

from msopt.config import Settings, load_settings
from msopt.errors import DecodeError
from msopt.evaluate.objective import make_objective
from msopt.evaluate.results import METRICS, EvalRequest
from msopt.space import SearchSpace

#: The configuration of a problem, a str.format template (its text keys the table cache).
TEMPLATE = Path(__file__).with_name("problem.toml.in")


@dataclass(frozen=True)
class Problem:
    name: str
    hardware: str
    model: str
    world: int
    tp_default: int
    pp_values: tuple[int, ...]
    input_len: int
    output_len: int
    concurrency: int
    target: float       # generate_speed_target of the default objective
    prompts: int = 256

    def toml(self) -> str:
        return TEMPLATE.read_text(encoding="utf-8").format(
            target=self.target, prompts=self.prompts, hw=self.hardware, model=self.model,
            inp=self.input_len, out=self.output_len, conc=self.concurrency, tp0=self.tp_default,
            pps=list(self.pp_values), W=self.world)

    @property
    def key(self) -> str:
        return hashlib.sha256(self.toml().encode()).hexdigest()[:16]


PROBLEMS = (
    Problem("qwen3-8b/atlas-800i-a2/W8", "atlas-800i-a2", "qwen3-8b", 8, 1, (1, 2, 4), 1024, 256, 96, 4000),
    Problem("llama-3.1-70b/h100-sxm/W8", "h100-sxm", "llama-3.1-70b", 8, 4, (1, 2, 4), 2048, 256, 64, 1500),
    Problem("qwen3-32b/h200-sxm/W16", "h200-sxm", "qwen3-32b", 16, 2, (1, 2, 4, 8), 512, 512, 128, 4000),
    Problem("llama-3.1-8b/h100-sxm/W16", "h100-sxm", "llama-3.1-8b", 16, 1, (1, 2, 4, 8), 2048, 128, 256, 8000),
)


def table_key(space: SearchSpace, values: Mapping[str, Any]) -> tuple:
    """The table key of decoded values: the searched dimensions, in order."""
    return tuple(values[n] for n in space.names)


class Table:
    """Every valid configuration of a problem with its noise-free metrics and fitness."""

    def __init__(self, problem: Problem, cache_dir: Path, log: Callable[[str], None]) -> None:
        self.problem = problem
        cache_dir.mkdir(parents=True, exist_ok=True)
        cfg = cache_dir / f"{problem.key}.toml"
        text = problem.toml()
        if not cfg.exists() or cfg.read_text(encoding="utf-8") != text:
            # atomic: --jobs workers build the same table at once and must never read half a file
            tmp = cfg.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, cfg)
        self.settings: Settings = load_settings(str(cfg), environ={})
        self.space = SearchSpace.from_settings(self.settings)
        self.objective = make_objective("default", self.settings.data)
        path = cache_dir / f"{problem.key}.json"
        if path.exists():
            rows = json.loads(path.read_text(encoding="utf-8"))
        else:
            rows = self._enumerate(log)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(rows), encoding="utf-8")
            os.replace(tmp, path)
        self.rows = rows
        self.index = {tuple(r["key"]): i for i, r in enumerate(rows)}
        fit = np.array([math.inf if r["fitness"] is None else r["fitness"] for r in rows])
        self.fitness = fit
        feasible = fit[np.isfinite(fit)]
        self.f_opt = float(feasible.min())
        self.f_med = float(np.median(feasible))
        self.n_valid = len(rows)
        self.n_feasible = int(feasible.size)
        self.opt_values = rows[int(np.argmin(fit))]["values"]

    def _enumerate(self, log: Callable[[str], None]) -> list[dict[str, Any]]:
        from msopt.evaluate.evaluator import Evaluator

        space = self.space
        evaluator = Evaluator(self.settings, simulate=True)
        cands = [d.candidates for d in space.dimensions]
        rows: list[dict[str, Any]] = []
        seen: set[tuple] = set()
        t0 = time.time()
        for combo in product(*cands):
            values = dict(zip(space.names, combo))
            try:
                d = space.decode(space.encode(values), None)
            except DecodeError:
                continue
            key = table_key(space, d.values)
            if key != tuple(combo) or key in seen:
                continue  # tp·pp does not divide the world size: not a valid configuration
            seen.add(key)
            r = evaluator.evaluate(EvalRequest(len(rows), "search", None, 0, tuple(d.position.tolist())))
            rows.append({"key": list(key), "values": r.values,
                         "metrics": {m: r.metrics.get(m) for m in METRICS},
                         "fitness": r.fitness if math.isfinite(r.fitness) else None, "error": r.error})
        log(f"  enumerated {len(rows)} valid configurations of {self.problem.name} in {time.time() - t0:.0f} s")
        return rows
