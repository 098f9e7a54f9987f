"""The real evaluation path: start the engine, wait until ready, benchmark it, stop everything.

The server runs in its own process group with the actor's environment (so it inherits the
device ids Ray assigned) plus the rendered ``env``; a parent-death guard kills it with the
actor. Logs go to the run directory; a failure is classified by the ``[health_check]``
patterns: fatal ends the evaluation, retryable raises :class:`RetryableError` so the
evaluator tries again (up to its attempt limit).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msopt.benchmarks import get_benchmark
from msopt.benchmarks.builtin import REQUESTS_FILE
from msopt.benchmarks.engine_metrics import CacheCounters, read_counters, spec_report, summed
from msopt.config import Config
from msopt.engines import EngineAdapter, LaunchSpec
from msopt.engines.crash import LOG_TAIL_BYTES, EngineCrash
from msopt.engines.pd import without_pd
from msopt.engines.rules import check_rules
from msopt.engines.vllm.cpu import CpuFacts, check_cpu_trial
from msopt.errors import EngineCrashError, EvaluationError, RetryableError
from msopt.evaluate.health import HealthCheck
from msopt.evaluate.results import EvalRequest
from msopt.evaluate.runner import EngineRunner, NodeLauncher, RunnerContext, server_key
from msopt.evaluate.workload import benchmark_table, resolved_workload
from msopt.launch.hccl import NodeFacts, lease_blocks, node_facts
from msopt.launch.logs import tail_text
from msopt.launch.ports import PortLease
from msopt.launch.process import ManagedProcess, launched, wait_ready
from msopt.launch.render import Candidate
from msopt.metrics import SPEC_ACCEPT_LEN
from msopt.workload.resolved import ResolvedWorkload


@dataclass
class _Kept:
    """A server kept running after its benchmark, for the next evaluation with its key."""

    key: str
    spec: LaunchSpec
    proc: ManagedProcess
    stack: contextlib.ExitStack  # its port lease, launched() (stop, restore files) and workdir
    workdir: Path
    server_log: Path
    started_by: int  # the evaluation that started it
    served: int = 1  # measurements on it so far: the next one's seed offset


def _healthy(kept: _Kept) -> bool:
    """The kept server still runs and answers its health path (within 10 s)."""
    if kept.proc.poll() is not None:
        return False
    try:
        wait_ready(kept.spec.host, kept.spec.port, kept.spec.health_path, 10.0, kept.proc)
    except EvaluationError:
        return False
    return True


class RealRunner(EngineRunner):
    """Launches the engine for each attempt and runs the configured benchmark against it.

    Args:
        config: the effective config (``benchmark``, ``particles_time_out``, ``[health_check]``).
        engine: the engine adapter that renders the launch.
        ctx: the evaluator's run directory and devices.
        health: ``[health_check]`` as the run parsed it once (None: parsed here, from ``config``).
        workload: ``[workload]`` as the run resolved it once (None: resolved here, a trace read); a benchmark
            that replays a trace takes it.
    """

    def __init__(self, config: Config, engine: EngineAdapter, ctx: RunnerContext,
                 health: HealthCheck | None = None, workload: ResolvedWorkload | None = None) -> None:
        super().__init__(config, engine, ctx)
        self.benchmark_name = config.run.benchmark
        self.benchmark = get_benchmark(self.benchmark_name)
        workload = workload if workload is not None else resolved_workload(config)
        #: what the benchmark takes besides its section: the trace it replays (a benchmark that replays none
        #: is not handed one)
        self.replay: dict[str, Any] = ({"workload": workload} if workload.is_trace and self.benchmark.replays_trace
                                       else {})
        #: the benchmark's section as it reads it: [workload]'s load over the section as written, from the resolved
        #: workload (no key of it is copied into the section)
        self.bench_table = benchmark_table(config, workload)
        self.health = health if health is not None else HealthCheck.from_config(config.health_check,
                                                                                 config.engine.name)
        self.kept: _Kept | None = None
        self._port_facts: NodeFacts | None = None

    def _classify(self, server_log: Path, bench_log: Path, exc: EvaluationError) -> EvaluationError:
        for path, kind in ((server_log, "service"), (bench_log, "benchmark")):
            if not path.exists():
                continue
            verdict = self.health.check_file(path, kind)
            if verdict.kind == "ok":
                continue
            text = f"{kind} log: {verdict.error_type}: {(verdict.line or '').strip()} ({path})"
            return RetryableError(text) if verdict.kind == "retryable" else EvaluationError(text)
        return exc

    @property
    def kept_key(self) -> str | None:
        return self.kept.key if self.kept is not None else None

    def port_facts(self, spec: LaunchSpec) -> NodeFacts:
        """This node's Atlas generation (``npu-smi info``) and CANN version, and whether the model runs
        MC² operators (an MoE model by its config.json), read once (:func:`msopt.launch.hccl.node_facts`)."""
        if self._port_facts is None:
            self._port_facts = node_facts(spec.model)
        return self._port_facts

    def close(self) -> None:
        """Stop the server kept running (with its grace), restore its files, free its ports."""
        kept, self.kept = self.kept, None
        if kept is not None:
            with contextlib.suppress(Exception):
                kept.stack.close()

    def measure(self, values: Mapping[str, Any], req: EvalRequest, attempt: int) -> dict[str, Any]:
        """Benchmark ``values`` on a server: the one kept running when it has this evaluation's
        server key and still answers its health path, else a fresh one; return the metrics.

        With ``[cluster] reuse_servers`` (default) a one-node server is kept running after a
        successful benchmark for the next evaluation with its key; any other key, a failure,
        :meth:`close` or the actor's end stops it.

        Raises:
            RefusedError: the candidate breaks one of the engine's start-up rules; nothing was
                launched.
            RetryableError: a retryable health-check pattern matched a log.
            EvaluationError: the server or the benchmark failed (fatal pattern, crash, timeout).
        """
        self.last_server = None
        key = (server_key(self.config, self.engine, values)
               if len(self.ctx.placement) == 1 and "pd" not in self.engine_section else None)
        kept = self.kept
        if kept is not None and (key != kept.key or not _healthy(kept)):
            self.close()
        elif kept is not None:
            return self._measure_kept(kept, values, req, attempt)
        stack = contextlib.ExitStack()
        try:
            # [cluster] ports: every port of the trial from the range, held until its server stops
            lease = stack.enter_context(PortLease(self.config.cluster.ports))
            return self._measure(values, req, attempt, lease, stack, key)
        finally:
            if self.kept is None or self.kept.stack is not stack:
                stack.close()

    def _measure_kept(self, kept: _Kept, values: Mapping[str, Any], req: EvalRequest,
                      attempt: int) -> dict[str, Any]:
        """Benchmark the kept server again; its prompts are seeded apart from every earlier
        measurement on it, so its prefix cache cannot flatter a repeat."""
        workdir = Path(tempfile.mkdtemp(prefix=f"eval-{req.eval_id:05d}-a{attempt}-", dir=kept.workdir.parent))
        bench_log = self.ctx.log_path(req, attempt, "benchmark") or workdir / "benchmark.log"
        section = self.benchmark.with_seed(self.bench_table, kept.served)
        self.last_server = {"start": "reused", "start_s": 0.0, "key": kept.key, "kept": True,
                            "started_by": kept.started_by, "seed_offset": kept.served}
        try:
            try:
                metrics = self.benchmark.run(
                    kept.spec, Candidate(values, self.config.engine.fields, section), num_prompts=req.num_prompts,
                    load=req.load, result_dir=workdir / "result", log_path=bench_log,
                    timeout=self.config.run.particles_time_out, **self.replay)
            finally:
                self._raise_crash(kept.proc, kept.server_log, workdir / "result")
            self._check_alive(kept.spec, kept.proc, metrics, kept.server_log)
        except EngineCrashError:
            self.close()
            self.last_server["kept"] = False
            raise
        except EvaluationError as exc:
            self.close()
            self.last_server["kept"] = False
            raise self._classify(kept.server_log, bench_log, exc) from None
        finally:
            if self.ctx.run_dir is None:
                shutil.rmtree(workdir, ignore_errors=True)
        kept.served += 1
        return metrics

    def _raise_crash(self, proc: Any, server_log: Path, result_dir: Path) -> None:
        """Raise :class:`EngineCrashError` when the server died while the benchmark ran: its log says
        so (the adapter's :attr:`~msopt.engines.base.EngineAdapter.crash_reader`) or its process ended
        with a non-zero code. The request in flight is the one the engine's dump names, else the
        first request the benchmark saw fail."""
        reader = self.engine.crash_reader
        crash = reader.read(tail_text(server_log, LOG_TAIL_BYTES), str(server_log)) if reader is not None else None
        if crash is None:
            code = proc.poll()
            if code is None or code == 0:
                return
            crash = EngineCrash(reader.engine if reader is not None else self.engine.name,
                                f"server exited with code {code}", "", str(server_log))
        if crash.prompt_tokens is None:
            tokens = failed_prompt_tokens(result_dir)
            if tokens is not None:
                crash = dataclasses.replace(crash, prompt_tokens=tokens, source="the benchmark")
        raise EngineCrashError(crash.message(), crash.to_json())

    @staticmethod
    def _check_alive(spec: Any, proc: Any, metrics: Mapping[str, Any], server_log: Path) -> None:
        if proc.poll() is not None or (_some_failed(metrics) and not _listening(spec.host, spec.port)):
            # a crash closes the listener before the benchmark's next request is refused, but
            # the process may not have been reaped yet: the closed port is the proof
            raise EvaluationError(f"the server exited (code {proc.wait(5)}) during the benchmark; "
                                  f"see {server_log}")

    def _measure(self, values: Mapping[str, Any], req: EvalRequest, attempt: int,
                 lease: PortLease, stack: contextlib.ExitStack, key: str | None) -> dict[str, Any]:
        config = self.config
        run_dir = self.ctx.run_dir
        base = run_dir / "work" if run_dir is not None else None
        if base is not None:
            base.mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix=f"eval-{req.eval_id:05d}-a{attempt}-", dir=base))
        if run_dir is None:
            stack.callback(shutil.rmtree, workdir, ignore_errors=True)
        server_log = self.ctx.log_path(req, attempt, "server") or workdir / "server.log"
        bench_log = self.ctx.log_path(req, attempt, "benchmark") or workdir / "benchmark.log"
        if self.engine.is_disaggregated(self.engine_section):
            return self._measure_pd(values, req, attempt, workdir, server_log, bench_log, lease)
        nodes = self.ctx.placement
        timeout = config.run.particles_time_out
        more = self.engine.leader_ports if len(nodes) > 1 else 0
        extra = {"leader_ports": [lease.take() for _ in range(more)]} if more else {}
        specs = self.engine.render_nodes(Candidate(values, config.engine.fields, self.engine_section),
                                         port=lease.take(), nodes=nodes, rendezvous_port=lease.take(), workdir=workdir,
                                         **extra)
        specs = self.plan_ports(specs)
        spec = specs[0]
        check_rules(spec, values, self.engine_section, rules=self.engine.startup_rules)
        lease_blocks(spec.env, lease)  # this node's HCCL blocks, held as the trial's other ports
        self._check_cpu(spec)
        if len(specs) > 1 and self.ctx.launcher is None:
            raise EvaluationError(f"a trial of {len(specs)} nodes needs the Ray pool (no --no-ray) to start "
                                  "its other nodes")
        self.backup(req, attempt, [("server" if i == 0 else f"node{i}", s) for i, s in enumerate(specs)])
        launcher = self.ctx.launcher if len(specs) > 1 else None
        follower_logs = [str(self.ctx.log_path(req, attempt, f"server-node{i}") or workdir / f"server-node{i}.log")
                         for i in range(1, len(specs))]
        keep = False
        try:
            if launcher is not None:
                # every node starts at once, as the engines' own multi-node launches expect
                launcher.start(specs[1:], follower_logs, str(workdir))
            t0 = time.monotonic()
            proc = stack.enter_context(launched(spec, server_log, cwd=workdir, registry=self.ctx.processes))
            self.last_server = {"start": "started", "start_s": round(time.monotonic() - t0, 3), "key": key,
                                "kept": False}
            self._followers_ok(launcher)
            try:
                metrics = self.benchmark.run(
                    spec, Candidate(values, config.engine.fields, self.bench_table),
                    num_prompts=req.num_prompts, load=req.load, result_dir=workdir / "result",
                    log_path=bench_log, timeout=timeout, **self.replay)
            finally:
                self._raise_crash(proc, server_log, workdir / "result")
            self._check_alive(spec, proc, metrics, server_log)
            self._followers_ok(launcher)
            keep = key is not None and launcher is None
        except EvaluationError as exc:
            why = launcher.failure() if launcher is not None else None
            if isinstance(exc, EngineCrashError) and not why:
                raise
            if why:  # a follower's end explains the leader's failure (its exit too: no request killed it) better
                exc = EvaluationError(f"{why} (leader: {exc})")
            raise self._classify(server_log, bench_log, exc) from None
        finally:
            if launcher is not None:
                launcher.stop()
        if keep and key is not None:
            self.kept = _Kept(key, spec, proc, stack, workdir, server_log, req.eval_id)
            assert self.last_server is not None
            self.last_server["kept"] = True
        return metrics

    def _measure_pd(self, values: Mapping[str, Any], req: EvalRequest, attempt: int, workdir: Path,
                    server_log: Path, bench_log: Path, lease: PortLease) -> dict[str, Any]:
        """A prefill/decode-disaggregated trial: every instance (each ready), then the router, then the
        benchmark against the router; any process that ends fails the trial, and all are stopped."""
        config = self.config
        if len(self.ctx.nodes) > 1:
            raise EvaluationError("a disaggregated trial over several nodes runs simulated only in msopt today; "
                                  "keep [cluster] devices_per_trial within one node for a real PD run")
        launch = self.engine.render_pd(Candidate(values, config.engine.fields, self.engine_section),
                                       ports=_pd_ports(lease), devices=list(self.ctx.devices),
                                       workdir=workdir)
        launch = launch.with_instances(self.plan_ports(launch.instances))
        for spec in launch.instances:
            lease_blocks(spec.env, lease)  # each instance's HCCL blocks, held as the trial's other ports
        inner = without_pd(self.engine_section)
        timeout = config.run.particles_time_out
        try:
            for spec in launch.instances:
                check_rules(spec, values, inner, rules=self.engine.startup_rules)
        except EvaluationError:
            if self.ctx.run_dir is None:
                shutil.rmtree(workdir, ignore_errors=True)
            raise
        roles = launch.named()
        self.backup(req, attempt, [*roles, ("router", launch.router)])
        logs = {name: self.ctx.log_path(req, attempt, f"server-{name}") or workdir / f"server-{name}.log"
                for name, _ in roles}
        try:
            with contextlib.ExitStack() as stack:
                reg = self.ctx.processes
                procs = [(name, stack.enter_context(launched(spec, logs[name], cwd=workdir, registry=reg)))
                         for name, spec in roles]
                router = stack.enter_context(launched(launch.router, server_log, cwd=workdir, registry=reg))
                before = decode_counters(launch.decode)
                metrics = self.benchmark.run(
                    launch.router, Candidate(values, config.engine.fields, self.bench_table),
                    num_prompts=req.num_prompts, load=req.load, result_dir=workdir / "result",
                    log_path=bench_log, timeout=timeout, **self.replay)
                # the benchmark read the router's /metrics, which has no draft counters: the decode servers do
                accept = spec_report(before, decode_counters(launch.decode))
                if accept is not None and metrics.get(SPEC_ACCEPT_LEN) is None:
                    metrics[SPEC_ACCEPT_LEN] = accept
                for name, proc in [*procs, ("router", router)]:
                    if proc.poll() is not None:
                        where = logs.get(name, server_log)
                        raise EvaluationError(f"the {name} server exited (code {proc.returncode}) during the "
                                              f"benchmark; see {where}")
        except EvaluationError as exc:
            raise self._classify(server_log, bench_log, exc) from None
        finally:
            if self.ctx.run_dir is None:
                shutil.rmtree(workdir, ignore_errors=True)
        return metrics

    def _check_cpu(self, spec: LaunchSpec) -> None:
        """``[cluster] accelerator = "cpu"``: the trial's cores and this node's NUMA nodes hold the launch
        (:mod:`msopt.engines.vllm.cpu`); ``devices_per_trial`` is cores (the default as for devices: the
        ternary_factories product, else 1; the Ray pool reserves as many)."""
        cluster = self.config.cluster
        if not cluster.cpu:
            return
        check_cpu_trial(spec, cluster.trial.devices, CpuFacts.here(), {**os.environ, **spec.env})

    @staticmethod
    def _followers_ok(launcher: NodeLauncher | None) -> None:
        """Fail the whole trial when a server on another node is gone."""
        why = launcher.failure() if launcher is not None else None
        if why:
            raise EvaluationError(why)


def decode_counters(decode: Sequence[LaunchSpec]) -> CacheCounters | None:
    """The draft (and prefix-cache) counters of a disaggregated trial's decode servers, summed
    (:mod:`msopt.benchmarks.engine_metrics`); None where one has none."""
    return summed([read_counters(spec.base_url, engine=spec.engine) for spec in decode])


def _pd_ports(lease: PortLease, most: int = 64) -> list[int]:
    """Ports for a disaggregated trial (the adapter uses 2 x instances + 1 of them): up to ``most``,
    fewer when a ``[cluster] ports`` range has fewer left (at least 3)."""
    out = [lease.take() for _ in range(3)]
    try:
        out += [lease.take() for _ in range(most - 3)]
    except EvaluationError:
        if lease.ports is None:
            raise
    return out


def failed_prompt_tokens(result_dir: Path) -> int | None:
    """The prompt length of the first request (by start) that failed, from a benchmark's per-request
    records (the builtin benchmark's ``requests.jsonl``); None when none is recorded with one."""
    path = result_dir / REQUESTS_FILE
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError):
        return None
    failed = [r for r in rows if isinstance(r, dict) and not r.get("success") and r.get("input_tokens") is not None]
    if not failed:
        return None
    return int(min(failed, key=lambda r: float(r.get("start") or 0.0))["input_tokens"])


def _some_failed(metrics: Mapping[str, Any]) -> bool:
    rate = metrics.get("success_rate")
    return isinstance(rate, (int, float)) and rate < 1


def _listening(host: str, port: int) -> bool:
    """True when something accepts connections at host:port."""
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError:
        return False
    return True
