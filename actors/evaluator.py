"""EvaluatorActor: one concurrent evaluation slot, holding the devices its server needs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import ray

from actors.nodes import RayNodeLauncher, node_address, own_device_ips
from msopt.config import Config
from msopt.evaluate.evaluator import Evaluator, Parsed
from msopt.evaluate.results import EvalRequest, EvaluationResult
from msopt.launch.render import TrialNode


@ray.remote(num_cpus=0, max_restarts=0)
class EvaluatorActor:
    """Owns an :class:`Evaluator`; decodes with each request's DecodeContext and evaluates it.

    Ray writes the ids of the devices it assigned into ``ASCEND_RT_VISIBLE_DEVICES`` /
    ``CUDA_VISIBLE_DEVICES`` of this process; msopt never sets them by hand, and the servers
    this actor starts inherit them.
    """

    def __init__(self, config: Config, simulate: bool, run_dir: str | None, name: str,
                 followers: Sequence[Any] = (), parsed: Parsed | None = None) -> None:
        key = config.cluster.accelerator_key
        ids = ray.get_runtime_context().get_accelerator_ids()
        self.devices = [str(d) for d in ids.get(key, [])] if key else []
        self.name = name
        self.nodes: list[TrialNode] = []
        launcher = None
        if followers:
            infos = ray.get([f.info.remote() for f in followers])
            # a real trial's rank table carries each NPU's RoCE address, read on its own node
            no_ips: tuple[tuple[tuple[str, str], ...], str] = ((), "")
            ips = ([own_device_ips(key, self.devices), *ray.get([f.device_ips.remote() for f in followers])]
                   if not simulate else [no_ips] * (len(followers) + 1))
            self.nodes = [TrialNode(0, node_address(), tuple(self.devices), ray.get_runtime_context().get_node_id(),
                                    *ips[0])]
            self.nodes += [TrialNode(i + 1, str(info["address"]), tuple(info["devices"]), str(info["node"]),
                                     *ips[i + 1]) for i, info in enumerate(infos)]
            launcher = RayNodeLauncher(followers, infos)
        self.evaluator = Evaluator(config, simulate=simulate, run_dir=run_dir, devices=self.devices,
                                   actor=name, nodes=self.nodes, launcher=launcher, parsed=parsed)

    def info(self) -> dict[str, Any]:
        """Process id, node and assigned devices (for the table and the tests); ``nodes`` lists
        every node of a trial that spans nodes, this one first."""
        return {"pid": os.getpid(), "devices": self.devices, "name": self.name,
                "node": ray.get_runtime_context().get_node_id(),
                "nodes": [{"rank": n.rank, "address": n.address, "devices": list(n.devices), "node": n.node_id}
                          for n in self.nodes],
                "visible": {k: os.environ.get(k) for k in ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")}}

    def evaluate(self, req: EvalRequest) -> EvaluationResult:
        """Run one evaluation (on the server kept from the last one when it has its key)."""
        return self.evaluator.evaluate(req)

    def close(self) -> None:
        """Stop the server kept running (the pool calls it before it kills the actor)."""
        self.evaluator.close()
