"""The oracle: a problem's table plus seeded multiplicative noise on the metrics; it records every
launch (the record a method is scored by)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from msopt.errors import DecodeError
from msopt.evaluate.results import METRICS, EvalRequest, EvaluationResult

from .problems import Table, table_key


class Oracle:
    def __init__(self, table: Table, seed: int, noise: float) -> None:
        self.table = table
        self.seed = seed
        self.noise = noise
        self.launches: list[tuple[int, float]] = []   # (table row or -1 when undecodable, observed fitness)
        self.stages: list[tuple[str, int]] = []       # msopt's launches: (phase, iteration) of each, in order
        self.eval_ids: list[int] = []                 # msopt's launches: the eval id of each, in order
        self.batch_of: dict[int, int] = {}            # msopt's eval id -> its dispatch batch (methods._Batches)
        self._count: dict[int, int] = {}

    def launch(self, values: Mapping[str, Any] | None) -> tuple[float, dict[str, Any], str | None]:
        """One launch of decoded values (None: not decodable); returns (fitness, metrics, error)."""
        row = -1 if values is None else self.table.index.get(table_key(self.table.space, values), -1)
        if row < 0:
            self.launches.append((-1, math.inf))
            return math.inf, {m: None for m in METRICS}, "not a valid configuration"
        k = self._count.get(row, 0)
        self._count[row] = k + 1
        rec = self.table.rows[row]
        metrics = dict(rec["metrics"])
        if rec["fitness"] is None:
            self.launches.append((row, math.inf))
            return math.inf, metrics, rec["error"] or "failed"
        z = np.random.default_rng([self.seed, row, k]).standard_normal(3)
        for m, zi in zip(("generate_speed", "time_to_first_token", "time_per_output_token"), z):
            if metrics.get(m) is not None:
                metrics[m] = metrics[m] * max(0.05, 1.0 + self.noise * zi)
        f = float(self.table.objective(metrics))
        self.launches.append((row, f))
        return f, metrics, None


def batches(oracle: Oracle) -> list[int]:
    """Each of msopt's launches' dispatch batch, in order (:class:`.methods._Batches`): the launches that
    ran together on a pool of as many workers."""
    return [oracle.batch_of[e] for e in oracle.eval_ids]


class OracleEvaluator:
    """Decodes like the real Evaluator (with the request's context) and asks the oracle."""

    def __init__(self, oracle: Oracle) -> None:
        self.oracle = oracle
        self.space = oracle.table.space
        self.devices: list[str] = []

    def evaluate(self, req: EvalRequest) -> EvaluationResult:
        base = dict(eval_id=req.eval_id, phase=req.phase, particle=req.particle, iteration=req.iteration,
                    position_in=list(req.position), devices=[], actor="oracle",
                    num_prompts=req.num_prompts, real_evaluation=False)
        self.oracle.stages.append((req.phase, req.iteration))
        self.oracle.eval_ids.append(req.eval_id)
        try:
            d = self.space.decode(req.position, req.context)
        except DecodeError as exc:
            self.oracle.launch(None)
            return EvaluationResult(position=list(req.position), values=dict(exc.values),
                                    metrics={m: None for m in METRICS}, fitness=math.inf, error=str(exc), **base)
        f, metrics, err = self.oracle.launch(d.values)
        return EvaluationResult(position=d.position.tolist(), values=d.values, metrics=metrics,
                                fitness=f, error=err, **base)
