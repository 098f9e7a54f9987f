"""One evaluation end to end, without Ray: decode, render, run (real or simulated), score.

The :class:`Evaluator` is what an actor owns. Its decode, with the particle's DecodeContext,
is the authoritative one: the repaired position it returns is written back into the swarm.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msopt.config import Config
from msopt.engines import get_engine
from msopt.errors import DecodeError, EngineCrashError, EvaluationError, RefusedError, RetryableError
from msopt.evaluate.health import HealthCheck
from msopt.evaluate.objective import Objective, run_objective
from msopt.evaluate.real import RealRunner
from msopt.evaluate.results import (
    METRICS,
    RETRY,
    EvalRequest,
    EvaluationResult,
    describe_fault,
    failed_result,
    fault_result,
)
from msopt.evaluate.runner import NodeLauncher, Runner, RunnerContext
from msopt.evaluate.simulated import SimRunner, SimulatorSetup
from msopt.evaluate.workload import configured_num_prompts, search_num_prompts  # noqa: F401  (re-exported)
from msopt.launch.process import ProcessRegistry
from msopt.launch.render import TrialNode
from msopt.space import SearchSpace
from msopt.workload.resolved import ResolvedWorkload

#: Launches of one evaluation, every retrying layer together (:data:`RETRY`).
MAX_ATTEMPTS = RETRY.attempts


@dataclass(frozen=True)
class Parsed:
    """The sections an evaluator reads, parsed once per run (:func:`msopt.run.validate.validate`) and handed
    to every evaluator of the run, the Ray actors' included (it pickles), as Ray Tune hands each trial its
    built config.

    Attributes:
        simulator: ``[simulator]`` (None: a real run, which does not read it).
        health: ``[health_check]``, with the engine's own patterns.
        workload: ``[workload]`` resolved, a trace's window read once (None: resolved by whoever needs it).
    """

    simulator: SimulatorSetup | None
    health: HealthCheck
    workload: ResolvedWorkload | None = None


class Evaluator:
    """Runs evaluations for one actor (or one in-process worker).

    Args:
        config: the effective config.
        simulate: use the embedded simulator instead of launching the engine.
        run_dir: the run directory (logs go to ``run_dir/logs``); None keeps no logs.
        devices: the accelerator ids this evaluator holds (as Ray assigned them).
        actor: a name for the journal.
        nodes: every node of a trial that spans nodes (this one first); the journal then lists
            each device as ``<node id>:<device>``.
        launcher: starts the servers of the other nodes (see :class:`NodeLauncher`).
        processes: the pool's registry of started servers (see :class:`ProcessRegistry`).
        parsed: the run's parsed sections (None: parsed here, from ``config``).
    """

    def __init__(
        self,
        config: Config,
        *,
        simulate: bool | None = None,
        run_dir: str | os.PathLike[str] | None = None,
        devices: Sequence[str] = (),
        actor: str | None = None,
        nodes: Sequence[TrialNode] = (),
        launcher: NodeLauncher | None = None,
        processes: ProcessRegistry | None = None,
        parsed: Parsed | None = None,
    ) -> None:
        if run_dir is not None and not os.path.isabs(run_dir):
            # an evaluator runs in another working directory than the driver (a Ray worker's), and hands
            # paths under run_dir to servers and benchmarks that run in their own: a relative one means
            # something else in each (RunStore makes the run directory absolute where it is created)
            raise ValueError(f"Evaluator: run_dir must be an absolute path, got {os.fspath(run_dir)!r}")
        self.config = config
        self.simulate = config.run.simulate if simulate is None else simulate
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.devices = [str(d) for d in devices]
        if len(nodes) > 1:
            self.devices = [f"{n.node_id[:8] or n.address}:{d}" for n in nodes for d in n.devices]
        self.actor = actor
        self.space = SearchSpace(config.engine.fields)
        self.objective: Objective = run_objective(config)
        self.engine = get_engine(config.engine.name)
        self.runner_context = RunnerContext(self.run_dir, tuple(str(d) for d in devices),
                                            tuple(nodes) if len(nodes) > 1 else (), launcher,
                                            processes)
        self.runner: Runner = (
            SimRunner(config, self.engine, self.runner_context, parsed.simulator if parsed else None,
                      parsed.workload if parsed else None) if self.simulate
            else RealRunner(config, self.engine, self.runner_context, parsed.health if parsed else None,
                            parsed.workload if parsed else None))

    # ------------------------------------------------------------------------------------
    def evaluate(self, req: EvalRequest) -> EvaluationResult:
        """Run one evaluation; never raises.

        A failed candidate (the engine refused or crashed on it, the benchmark failed, the decode
        could not be repaired) gets fitness = inf and its error: a measurement. Anything else (an
        ``OSError`` of a full disk, a bad environment, a bug, a :class:`ConfigError` found late)
        is a fault of the machinery: the result carries it in ``fault`` and the driver never
        journals it as the configuration's fitness.
        """
        try:
            return self._evaluate(req)
        except Exception as exc:  # noqa: BLE001  every non-measurement is a fault, reported, not raised
            return fault_result(req, describe_fault(exc), devices=self.devices, actor=self.actor,
                                real_evaluation=not self.simulate)

    def _evaluate(self, req: EvalRequest) -> EvaluationResult:
        result = failed_result(req, None, devices=self.devices, actor=self.actor, real_evaluation=not self.simulate)
        try:
            decoded = self.space.decode(req.position, req.context)
        except DecodeError as exc:
            result.values = dict(exc.values)
            result.error = str(exc)
            result.finished = time.time()
            return result
        result.values = decoded.values
        result.position = decoded.position.tolist()
        result.warnings = list(decoded.warnings)
        for attempt in range(req.attempts_used + 1, max(RETRY.attempts, req.attempts_used + 1) + 1):
            result.attempts = attempt
            try:
                metrics = self._measure(decoded.values, req, attempt)
            except RetryableError as exc:
                result.error = str(exc)
                result.server = self._server()
                continue
            except RefusedError as exc:  # a start-up rule: not launched, no retry
                result.error = str(exc)
                result.refused = True
                break
            except EvaluationError as exc:
                result.error = str(exc)
                result.server = self._server()
                if isinstance(exc, EngineCrashError):  # a fault with its cause: no metrics, no retry
                    result.crash = exc.crash
                break
            except Exception as exc:  # noqa: BLE001  not the configuration's doing: see evaluate()
                result.fault = describe_fault(exc)
                result.error = result.fault
                break
            result.metrics = {m: metrics.get(m) for m in METRICS} | {
                k: v for k, v in metrics.items() if k not in METRICS}
            result.server = self._server()
            result.fitness = float(self.objective(metrics))
            result.error = None if math.isfinite(result.fitness) else (
                "no finite fitness: a required metric is missing or zero")
            break
        result.finished = time.time()
        return result

    def _server(self) -> dict[str, Any] | None:
        last = getattr(self.runner, "last_server", None)
        return dict(last) if last is not None else None

    @property
    def kept_key(self) -> str | None:
        """The server key of the server this evaluator keeps running (None: none)."""
        return getattr(self.runner, "kept_key", None)

    def close(self) -> None:
        """Stop the server kept running, if any; never raises."""
        close = getattr(self.runner, "close", None)
        if close is not None:
            close()

    # ------------------------------------------------------------------------------------
    def log_path(self, req: EvalRequest, attempt: int, kind: str) -> Path | None:
        """``run_dir/logs/eval-<id>-<kind>-a<attempt>.log`` (None without a run directory)."""
        return self.runner_context.log_path(req, attempt, kind)

    def _measure(self, values: Mapping[str, Any], req: EvalRequest, attempt: int) -> dict[str, Any]:
        return self.runner.measure(values, req, attempt)
