"""Trials that span nodes: a follower actor per extra node and the launcher the leader drives.

The pool reserves one bundle per node (a STRICT_SPREAD placement group: the trial's nodes are
distinct and its devices are its own), starts a :class:`NodeAgent` on bundles 1..n-1 and the
leader :class:`~actors.evaluator.EvaluatorActor` on bundle 0. The leader renders every node's
launch and starts the followers' servers through :class:`RayNodeLauncher`; its own server is the
one the benchmark talks to. A server that ends on any node fails the trial, and the leader stops
the servers on every node before the evaluation returns.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError

from msopt.errors import EvaluationError
from msopt.launch.files import staged_files
from msopt.launch.hccn import read_device_ips
from msopt.launch.process import ManagedProcess, start_process
from msopt.launch.render import LaunchSpec

#: Seconds a follower gets to answer a start, poll or stop.
CALL_TIMEOUT = 120.0


def node_address() -> str:
    """This node's IP address as the Ray cluster knows it."""
    return str(ray.util.get_node_ip_address())


def own_device_ips(key: str | None, devices: Sequence[str]) -> tuple[tuple[tuple[str, str], ...], str]:
    """The RoCE addresses of this node's ``devices`` (physical ids) and why some are missing, read
    with ``hccn_tool`` as ``msopt preflight`` reads them (:func:`msopt.launch.hccn.read_device_ips`);
    nothing is asked off NPUs."""
    if key != "NPU" or not devices:
        return (), ""
    ips, error = read_device_ips(devices)
    return tuple(ips.items()), error


@ray.remote(num_cpus=0, max_restarts=0)
class NodeAgent:
    """Holds the devices of one follower node of a trial and runs its server there."""

    def __init__(self, key: str | None, name: str) -> None:
        """``key``: the Ray accelerator resource ("NPU", "GPU"), None for none."""
        ids = ray.get_runtime_context().get_accelerator_ids()
        self.devices = [str(d) for d in ids.get(key, [])] if key else []
        self.key = key
        self.name = name
        self._proc: ManagedProcess | None = None
        self._files: contextlib.ExitStack | None = None
        self._grace = 10.0  # the started spec's stop_grace

    def info(self) -> dict[str, Any]:
        """Process id, node, address and devices."""
        return {"pid": os.getpid(), "devices": self.devices, "name": self.name, "address": node_address(),
                "node": ray.get_runtime_context().get_node_id(),
                "visible": {k: os.environ.get(k) for k in ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")}}

    def device_ips(self) -> tuple[tuple[tuple[str, str], ...], str]:
        """This node's devices' RoCE addresses and why some are missing (:func:`own_device_ips`)."""
        return own_device_ips(self.key, self.devices)

    def start(self, spec: LaunchSpec, log_path: str, workdir: str) -> None:
        """Stage the spec's files and start its server (not waiting: followers serve no HTTP)."""
        self.stop()
        Path(workdir).mkdir(parents=True, exist_ok=True)
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        stack = contextlib.ExitStack()
        try:
            stack.enter_context(staged_files(spec.files))
            self._proc = start_process(spec.argv, dict(spec.env), log_path, cwd=workdir, unset=spec.unset_env)
            self._grace = spec.stop_grace
        except BaseException:
            stack.close()
            raise
        self._files = stack

    def poll(self) -> int | None:
        """The server's exit code, None while it runs (or when none was started)."""
        return self._proc.poll() if self._proc is not None else None

    def stop(self) -> None:
        """Stop the server and restore the staged files."""
        proc, self._proc = self._proc, None
        files, self._files = self._files, None
        try:
            if proc is not None:
                proc.stop(self._grace)
        finally:
            if files is not None:
                files.close()


class RayNodeLauncher:
    """:class:`msopt.evaluate.runner.NodeLauncher` over the follower actors of one trial.

    Args:
        agents: the :class:`NodeAgent` handles, node 1 first.
        infos: their :meth:`NodeAgent.info`.
    """

    def __init__(self, agents: Sequence[Any], infos: Sequence[dict[str, Any]]) -> None:
        self.agents = list(agents)
        self.infos = list(infos)
        self.logs: list[str] = []
        self.started = False

    def _where(self, i: int) -> str:
        info = self.infos[i]
        return f"node {i + 1} ({info.get('address')}, {info.get('name')})"

    def start(self, specs: Sequence[LaunchSpec], log_paths: Sequence[str], workdir: str) -> None:
        """Start ``specs[i]`` on follower ``i``; a follower that cannot start fails the trial."""
        self.logs = list(log_paths)
        self.started = True
        refs = [a.start.remote(s, log, workdir) for a, s, log in zip(self.agents, specs, log_paths, strict=True)]
        for i, ref in enumerate(refs):
            try:
                ray.get(ref, timeout=CALL_TIMEOUT)
            except (RayError, GetTimeoutError) as exc:
                raise EvaluationError(f"the server on {self._where(i)} did not start: {exc}") from None

    def failure(self) -> str | None:
        """The first follower whose server exited or whose node is lost, None while all run."""
        if not self.started:
            return None
        refs = [a.poll.remote() for a in self.agents]
        for i, ref in enumerate(refs):
            try:
                code = ray.get(ref, timeout=CALL_TIMEOUT)
            except (RayError, GetTimeoutError) as exc:
                return f"{self._where(i)} is lost: {type(exc).__name__}"
            if code is not None:
                log = f"; see {self.logs[i]}" if i < len(self.logs) else ""
                return f"the server on {self._where(i)} exited (code {code}){log}"
        return None

    def stop(self) -> None:
        """Stop every follower's server; a lost follower has nothing left to stop."""
        if not self.started:
            return
        self.started = False
        refs = [a.stop.remote() for a in self.agents]
        for ref in refs:
            with contextlib.suppress(RayError, GetTimeoutError):
                ray.get(ref, timeout=CALL_TIMEOUT)
