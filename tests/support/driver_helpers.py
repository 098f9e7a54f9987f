"""A deterministic evaluator for driver tests: decodes like the real one, scores a formula."""

from __future__ import annotations

import math
import random
import time

from msopt.errors import DecodeError
from msopt.evaluate.results import METRICS, EvalRequest, EvaluationResult
from msopt.space import SearchSpace


class FormulaEvaluator:
    """Decodes with the request's context (as an actor does) and scores ``score(values)``."""

    def __init__(self, space: SearchSpace, score, *, jitter: float = 0.0, seed: int = 0, name: str = "w",
                 seen: list | None = None) -> None:
        self.space = space
        self.score = score
        self.jitter = jitter
        self.rng = random.Random(seed)
        self.devices = [name]
        self.name = name
        self.seen = seen if seen is not None else []

    def evaluate(self, req: EvalRequest) -> EvaluationResult:
        if self.jitter:
            time.sleep(self.rng.random() * self.jitter)
        base = dict(eval_id=req.eval_id, phase=req.phase, particle=req.particle, iteration=req.iteration,
                    position_in=list(req.position), metrics={m: None for m in METRICS},
                    devices=list(self.devices), actor=self.name, num_prompts=req.num_prompts)
        self.seen.append((req, self.name))
        try:
            d = self.space.decode(req.position, req.context)
        except DecodeError as exc:
            return EvaluationResult(position=list(req.position), values=exc.values, fitness=math.inf,
                                    error=str(exc), **base)
        f = float(self.score(d.values))
        metrics = {m: None for m in METRICS} | {"generate_speed": -f}
        return EvaluationResult(position=d.position.tolist(), values=d.values, fitness=f,
                                **(base | {"metrics": metrics}))
