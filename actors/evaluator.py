"""EvaluatorActor: one concurrent evaluation slot, holding the devices its server needs."""

from __future__ import annotations

import os
from typing import Any

import ray

from msopt.config import Settings
from msopt.evaluate.evaluator import Evaluator
from msopt.evaluate.results import EvalRequest, EvaluationResult


def accelerator_key(settings: Settings) -> str | None:
    """The Ray resource name of ``[cluster] accelerator`` ("NPU", "GPU"), None for "none"."""
    acc = str(settings.section("cluster").get("accelerator", "NPU"))
    return None if acc.lower() == "none" else acc.upper()


@ray.remote(num_cpus=0, max_restarts=0)
class EvaluatorActor:
    """Owns an :class:`Evaluator`; decodes with each request's DecodeContext and evaluates it.

    Ray writes the ids of the devices it assigned into ``ASCEND_RT_VISIBLE_DEVICES`` /
    ``CUDA_VISIBLE_DEVICES`` of this process; msopt never sets them by hand, and the servers
    this actor starts inherit them.
    """

    def __init__(self, settings: Settings, simulate: bool, run_dir: str | None, name: str) -> None:
        key = accelerator_key(settings)
        ids = ray.get_runtime_context().get_accelerator_ids()
        self.devices = [str(d) for d in ids.get(key, [])] if key else []
        self.name = name
        self.evaluator = Evaluator(settings, simulate=simulate, run_dir=run_dir, devices=self.devices,
                                   actor=name)

    def info(self) -> dict[str, Any]:
        """Process id, node and assigned devices (for the table and the tests)."""
        return {"pid": os.getpid(), "devices": self.devices, "name": self.name,
                "node": ray.get_runtime_context().get_node_id(),
                "visible": {k: os.environ.get(k) for k in ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")}}

    def evaluate(self, req: EvalRequest) -> EvaluationResult:
        """Run one evaluation."""
        return self.evaluator.evaluate(req)
