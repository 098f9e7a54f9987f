"""The seam between an :class:`~msopt.evaluate.Evaluator` and what measures a configuration.

A runner turns decoded values into benchmark metrics: :class:`~msopt.evaluate.real.RealRunner`
launches the engine and runs the benchmark, :class:`~msopt.evaluate.simulated.SimRunner` asks the
embedded simulator. Both take the same :class:`RunnerContext`, so the evaluator never knows which.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from msopt.benchmarks import get_benchmark
from msopt.config import Config
from msopt.engines import EngineAdapter
from msopt.errors import EvaluationError
from msopt.evaluate.backup import write_backup
from msopt.evaluate.results import EvalRequest
from msopt.launch.hccl import HOST_RANGE, NPU_RANGE, VARIABLES, NodeFacts, plan_specs
from msopt.launch.process import ProcessRegistry
from msopt.launch.render import Candidate, LaunchSpec, TrialNode


class NodeLauncher(Protocol):
    """Starts and stops the servers of a multi-node trial on its other nodes (ranks >= 1).

    ``actors`` implements it with one Ray actor per follower node; a runner never knows how.
    """

    def start(self, specs: Sequence[LaunchSpec], log_paths: Sequence[str], workdir: str) -> None:
        """Start ``specs[i]`` on follower node ``i + 1`` (their files staged there), not waiting."""
        ...

    def failure(self) -> str | None:
        """Why a follower's server is gone (exited, node lost), None while all run."""
        ...

    def stop(self) -> None:
        """Stop every follower server started, restoring their staged files; never raises."""
        ...


@dataclass(frozen=True)
class RunnerContext:
    """What every runner of one evaluator shares: where logs go and which devices it holds.

    Attributes:
        run_dir: the run directory (logs in ``run_dir/logs``); None keeps no logs.
        devices: the accelerator ids the evaluator holds on its own node (as Ray assigned them).
        nodes: every node of a trial that spans nodes, the leader (this one) first; empty for a
            one-node trial.
        launcher: starts the servers on ``nodes[1:]`` (required with two or more nodes on the
            real path; the simulated path only renders them).
        processes: the registry of the pool the evaluator belongs to (in-process pools stop their
            servers through it when they close); None: nothing tracks them.
    """

    run_dir: Path | None = None
    devices: tuple[str, ...] = field(default_factory=tuple)
    nodes: tuple[TrialNode, ...] = field(default_factory=tuple)
    launcher: NodeLauncher | None = field(default=None, compare=False)
    processes: ProcessRegistry | None = field(default=None, compare=False)

    @property
    def placement(self) -> tuple[TrialNode, ...]:
        """The trial's nodes; one local node holding ``devices`` when it does not span nodes."""
        return self.nodes or (TrialNode(0, "127.0.0.1", self.devices),)

    def log_path(self, req: EvalRequest, attempt: int, kind: str) -> Path | None:
        """``run_dir/logs/eval-<id>-<kind>-a<attempt>.log`` (None without a run directory)."""
        if self.run_dir is None:
            return None
        path = self.run_dir / "logs" / f"eval-{req.eval_id:05d}-{kind}-a{attempt}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path


def server_key(config: Config, engine: EngineAdapter, values: Mapping[str, Any]) -> str | None:
    """The server key of ``values`` (:meth:`EngineAdapter.server_key`, without the fields the
    configured benchmark reads as its load); None with ``[cluster] reuse_servers = false``."""
    if not config.cluster.reuse_servers:
        return None
    bench = get_benchmark(config.run.benchmark)
    return engine.server_key(Candidate(values, config.engine.fields, config.engine.section.table),
                             load_fields=bench.load_fields(config.engine.fields))


class EngineRunner:
    """What both runners hold: the config, the engine adapter and its section, the context.

    Args:
        config: the effective config.
        engine: the engine adapter that renders the launch.
        ctx: the evaluator's run directory and devices.
    """

    def __init__(self, config: Config, engine: EngineAdapter, ctx: RunnerContext) -> None:
        self.config = config
        self.engine = engine
        self.engine_section: Mapping[str, Any] = config.engine.section.table
        self.ctx = ctx
        #: How the last measurement got its server (``EvaluationResult.server``), None: no launch.
        self.last_server: dict[str, Any] | None = None

    @property
    def kept_key(self) -> str | None:
        """The server key of the server kept running for the next evaluation, None: none kept."""
        return None

    def port_facts(self, spec: LaunchSpec) -> NodeFacts:
        """What the HCCL port plan of ``spec``'s trial depends on (:func:`msopt.launch.hccl.range_plan`);
        nothing known by default."""
        return NodeFacts()

    def plan_ports(self, specs: Sequence[LaunchSpec]) -> list[LaunchSpec]:
        """``specs`` without the HCCL range variables msopt set where CANN does not allow them on this
        trial's hardware, CANN version and model (:func:`msopt.launch.hccl.plan_env`), and there also
        unsetting the ones the server would inherit (:func:`msopt.launch.hccl.plan_unset`)."""
        if not any(v in s.env for s in specs for v in VARIABLES) and not any(v in os.environ
                                                                           for v in (HOST_RANGE, NPU_RANGE)):
            return list(specs)
        # an inherited range CANN forbids is removed, not kept
        return plan_specs(specs, self.engine_section, self.config.engine.fields, self.port_facts(specs[0]))

    def close(self) -> None:
        """Stop a server kept running (nothing by default); never raises."""

    def backup(self, req: EvalRequest, attempt: int, launches: Sequence[tuple[str, LaunchSpec]]) -> None:
        """With ``backup = true`` (``--backup``), record what this attempt launches in the run
        directory (:mod:`msopt.evaluate.backup`)."""
        if self.config.run.backup and self.ctx.run_dir is not None:
            try:
                write_backup(self.ctx.run_dir, req, attempt, launches)
            except OSError as exc:
                raise EvaluationError(f"backup = true: cannot write the launch record into "
                                      f"{self.ctx.run_dir / 'backup'}: {exc.strerror or exc}") from None


class Runner(Protocol):
    """Measures one configuration.

    ``measure`` returns the benchmark's metrics (the names of :data:`msopt.metrics.METRICS` and
    any extra ones); it raises :class:`~msopt.errors.RetryableError` when another attempt may
    succeed and :class:`~msopt.errors.EvaluationError` when the configuration failed.
    """

    last_server: dict[str, Any] | None

    @property
    def kept_key(self) -> str | None:
        """The key of the server kept running, None: none."""
        ...

    def measure(self, values: Mapping[str, Any], req: EvalRequest, attempt: int) -> dict[str, Any]:
        """Measure ``values`` for the request's workload; one call per attempt."""
        ...

    def close(self) -> None:
        """Stop whatever the runner keeps running between evaluations."""
        ...
