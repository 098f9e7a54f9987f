"""RayPool: sizes the pool from the cluster, pins devices with placement groups, dispatches
evaluations, replaces dead actors and fails evaluations that run past their time limit.

Bookkeeping lives on the instance (as Ray's ``ActorPool``); a dead actor is never reused.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from actors.evaluator import EvaluatorActor
from actors.guard import start_guard
from actors.nodes import NodeAgent
from msopt.config import Config
from msopt.errors import ConfigError, MsoptError
from msopt.evaluate.evaluator import MAX_ATTEMPTS, Parsed
from msopt.evaluate.results import RETRY, EvalRequest, EvaluationResult, describe_fault, failed_result, fault_result
from msopt.evaluate.simulated import simulated_devices_per_node
from msopt.launch.placement import split_trial
from msopt.run.pool import LaunchCosts, route, unneeded

log = logging.getLogger("msopt.pool")


class ClusterError(MsoptError):
    """The Ray cluster cannot host the pool (missing resources, unreachable address)."""


def trial_nodes(config: Config, per_node: int | None) -> tuple[int, int]:
    """(nodes per trial, devices per node of a trial) for ``devices_per_trial`` on nodes of
    ``per_node`` devices (``[cluster] devices_per_node`` wins over the cluster's own count).

    Raises:
        ClusterError: the devices cannot be split evenly over whole nodes.
    """
    configured = config.cluster.devices_per_node
    try:
        return split_trial(config.cluster.trial.devices, configured or per_node)
    except ConfigError as exc:
        raise ClusterError(str(exc)) from None


class LocalCluster:
    """A local multi-node Ray test cluster (``ray.cluster_utils.Cluster``) on this machine, for a
    simulated run whose trials span nodes; :meth:`shutdown` stops its raylets."""

    def __init__(self, nodes: int, resources: dict[str, float], num_gpus: int | None) -> None:
        from ray.cluster_utils import Cluster

        args: dict[str, Any] = {"num_cpus": 2, "resources": resources or None, "num_gpus": num_gpus,
                                "include_dashboard": False}
        self.cluster = Cluster(initialize_head=True, head_node_args=args)
        try:
            for _ in range(nodes - 1):
                self.cluster.add_node(**args)
            self.cluster.wait_for_nodes()
            ray.init(address=self.cluster.address, logging_level=logging.ERROR, log_to_driver=False)
        except BaseException:
            self.cluster.shutdown()
            raise

    def shutdown(self) -> None:
        """Disconnect and stop every node of the cluster."""
        ray.shutdown()
        self.cluster.shutdown()


#: Most nodes of the local test cluster a simulated multi-node run starts (each is a raylet).
MAX_LOCAL_NODES = 4


def shutdown_ray(started: object) -> None:
    """Stop what :func:`init_ray` started (its return value when truthy)."""
    if isinstance(started, LocalCluster):
        started.shutdown()
    elif started:
        ray.shutdown()


def quiet_ray_logs() -> None:
    """Keep Ray's harmless "Failed to detect NPU type" traceback away from users."""
    logging.getLogger("ray._private.accelerators.npu").setLevel(logging.CRITICAL)
    logging.getLogger("ray._private.accelerators").setLevel(logging.CRITICAL)


def _check_reachable(address: str, timeout: float = 10.0) -> None:
    """Fail in seconds, in one line, when nothing listens at a ``HOST:PORT`` address: Ray itself
    retries for minutes, printing warnings."""
    if address in ("auto", "local") or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ClusterError(f"--address {address!r} is not HOST:PORT (e.g. 10.0.0.1:6379), 'auto' or ray://HOST:PORT")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ClusterError(f"no Ray cluster answers at {address} ({exc.strerror or type(exc).__name__}); start its "
                           "head with 'ray start --head' (it prints the address to give) or drop --address") from None


def init_ray(config: Config, address: str | None, *, simulate: bool, slots: int) -> bool | LocalCluster:
    """Connect to Ray; return what this call started (truthy: stop it with :func:`shutdown_ray`).

    Without an address (and no RAY_ADDRESS) a local instance sized to this machine starts; for a
    simulated run it declares ``slots × devices_per_trial`` virtual accelerators, so the same
    configuration that pins NPUs on a cluster runs here. When a simulated trial spans nodes
    (``devices_per_trial`` above ``devices_per_node``), a local multi-node test cluster starts
    instead: whole trials' worth of nodes of ``devices_per_node`` devices each, at most
    :data:`MAX_LOCAL_NODES` nodes (or one trial's, if more).
    """
    quiet_ray_logs()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    kw: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
    if address:
        _check_reachable(address)
        try:
            ray.init(address=address, **kw)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ClusterError(f"cannot join the Ray cluster at {address!r}: {exc}; start it with "
                               "'ray start --head' or drop --address") from None
        return False
    key = config.cluster.accelerator_key
    k = config.cluster.trial.devices
    resources: dict[str, float] = {}
    num_gpus = None
    if key == "CPU":  # cores are Ray's own CPU resource: nothing virtual to declare
        key = None
    if simulate and key and k:
        n, per = trial_nodes(config, simulated_devices_per_node(config))
        if n > 1:
            trials = max(1, min(slots, MAX_LOCAL_NODES // n))
            node_res = {} if key == "GPU" else {key: float(per)}
            return LocalCluster(trials * n, node_res, per if key == "GPU" else None)
    if simulate and key and k:
        if key == "GPU":
            num_gpus = slots * k
        else:
            resources[key] = float(slots * k)
    try:
        ray.init(address="local", num_cpus=os.cpu_count() or 1, num_gpus=num_gpus, resources=resources or None,
                 include_dashboard=False, **kw)
    except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception when its node times out starting
        ray.shutdown()  # what it started of its processes goes with it
        raise ClusterError(f"Ray did not start on this machine: {exc}; run again (a loaded machine can be too "
                           "slow for Ray's start-up timeout), or run without Ray: --no-ray") from None
    start_guard()  # Ray's processes would outlive a driver killed by SIGKILL by a minute or more
    return True


@dataclass
class _Slot:
    index: int
    pg: PlacementGroup | None
    actor: Any = None
    info: dict[str, Any] | None = None
    generation: int = 0
    followers: list[Any] = field(default_factory=list)
    kept: str | None = None  # the server key of the server its actor keeps running


def spread_groups(bundles: list[int], n: int) -> int:
    """How many groups of ``n`` bundles on ``n`` distinct nodes fit, given bundles free per node."""
    if n <= 1:
        return sum(bundles)
    left = sorted((b for b in bundles if b > 0), reverse=True)
    groups = 0
    while len(left) >= n:
        for i in range(n):
            left[i] -= 1
        groups += 1
        left = sorted((b for b in left if b > 0), reverse=True)
    return groups


class RayPool:
    """An evaluator pool of Ray actors, one per concurrent evaluation.

    Args:
        config: the effective config.
        simulate: actors simulate instead of launching engines.
        run_dir: the run directory (actors write logs there).
        max_concurrent: cap on concurrent evaluations (``--max-concurrent``), 0 for none.
        pg_timeout: seconds to wait for the placement groups before saying what is missing.
        parsed: the sections the run parsed once, pickled to every actor (None: each parses its own).
    """

    def __init__(self, config: Config, *, simulate: bool, run_dir: str | None = None,
                 max_concurrent: int = 0, pg_timeout: float = 60.0, parsed: Parsed | None = None) -> None:
        self.config = config
        self.parsed = parsed
        self.simulate = simulate
        self.run_dir = run_dir
        self.key = config.cluster.accelerator_key
        self.k = config.cluster.trial.devices if self.key else 0
        self.nodes_per_trial, self.per_node = (trial_nodes(config, self._cluster_per_node()) if self.k
                                               else (1, 0))
        self.time_limit = config.run.particles_time_out
        self._queue: deque[EvalRequest] = deque()
        self._inflight: dict[Any, tuple[_Slot, EvalRequest, float]] = {}
        self._free: deque[_Slot] = deque()
        self._started: list[tuple[int, list[str]]] = []
        self._done: list[EvaluationResult] = []
        self._stopping: dict[Any, _Slot] = {}  # actor.close() refs of kept servers no longer needed
        self.replaced = 0
        self.costs = LaunchCosts()
        self.stopped = 0  # kept servers told to stop because the run no longer needed them (retain)
        t0 = time.monotonic()
        size = self.plan_size(config, max_concurrent)
        self.slots = [_Slot(i, None) for i in range(size)]
        self._reserve(pg_timeout)
        for slot in self.slots:
            self._spawn(slot)
        refs = [s.actor.info.remote() for s in self.slots]
        for slot, ref in zip(self.slots, refs):
            slot.info = self._started_info(slot, ref)
            self._free.append(slot)
        self.startup_seconds = time.monotonic() - t0

    def _started_info(self, slot: _Slot, ref: Any) -> dict[str, Any]:
        """The info of a slot's new actor; an actor that dies while it starts is replaced
        (up to MAX_ATTEMPTS times), not a traceback."""
        for _ in range(MAX_ATTEMPTS):
            try:
                return ray.get(ref)
            except RayActorError:
                self._replace(slot)
                ref = slot.actor.info.remote()
        raise ClusterError(f"actor {self._name(slot)} died {MAX_ATTEMPTS} times while starting; see Ray's logs "
                           "(/tmp/ray/session_latest/logs) for why")

    # -- sizing ---------------------------------------------------------------------------
    def plan_size(self, config: Config, max_concurrent: int = 0) -> int:
        """Concurrent slots: whole trials that fit on each node, capped by n_particles and
        ``[cluster] max_concurrent_trials`` / ``--max-concurrent``."""
        cap = config.run.n_particles
        for c in (max_concurrent, config.cluster.max_concurrent_trials):
            if c and c > 0:
                cap = min(cap, c)
        if not self.key or self.k == 0:
            return max(1, cap)
        bundles = [int(n.get("Resources", {}).get(self.key, 0) // self.per_node)
                   for n in ray.nodes() if n.get("Alive")]
        fit = spread_groups(bundles, self.nodes_per_trial)
        if fit == 0:
            have = {n.get("NodeManagerAddress"): n.get("Resources", {}).get(self.key, 0)
                    for n in ray.nodes() if n.get("Alive")}
            what = (f"no node of the Ray cluster has {self.k} {self.key} for one trial" if self.nodes_per_trial == 1
                    else f"the Ray cluster has no room for one trial of {self.k} {self.key} "
                         f"({self.nodes_per_trial} nodes of {self.per_node} each)")
            raise ClusterError(f"{what} (per node: {have}); lower [cluster] devices_per_trial, set [cluster] "
                               f"accelerator, or use --simulate")
        return max(1, min(cap, fit))

    def _cluster_per_node(self) -> int | None:
        """The most accelerators of one alive node of the cluster (None when none has any)."""
        counts = [int(n.get("Resources", {}).get(self.key, 0)) for n in ray.nodes() if n.get("Alive")]
        return max(counts) if counts and max(counts) > 0 else None

    @property
    def size(self) -> int:
        return len(self.slots)

    def _bundle(self) -> dict[str, float]:
        if self.key == "GPU":
            return {"GPU": float(self.per_node)}
        return {self.key: float(self.per_node)} if self.key else {}

    def _reserve(self, timeout: float) -> None:
        if not self.key or self.k == 0:
            return
        n = self.nodes_per_trial
        for slot in self.slots:
            # one trial's nodes are distinct (STRICT_SPREAD) and each bundle is a whole share of a node
            slot.pg = placement_group([self._bundle()] * n, strategy="STRICT_SPREAD" if n > 1 else "STRICT_PACK")
        ready, _ = ray.wait([s.pg.ready() for s in self.slots if s.pg is not None], num_returns=len(self.slots),
                            timeout=timeout)
        if len(ready) < len(self.slots):
            avail = ray.available_resources().get(self.key, 0)
            for s in self.slots:
                remove_placement_group(s.pg)
            raise ClusterError(f"only {len(ready)} of {len(self.slots)} trials of {self.k} {self.key} could be "
                               f"placed within {timeout:.0f}s ({avail:g} {self.key} available); free devices "
                               f"or lower --max-concurrent")

    def _options(self, slot: _Slot, bundle: int) -> dict[str, Any]:
        opts: dict[str, Any] = {"num_cpus": 0}
        if self.key == "GPU":
            opts["num_gpus"] = self.per_node
        elif self.key == "CPU":  # the CPU build: the trial's cores, reserved as Ray's own CPU resource
            opts["num_cpus"] = self.per_node
        elif self.key and self.k:
            opts["resources"] = {self.key: self.per_node}
        if slot.pg is not None:
            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=slot.pg, placement_group_bundle_index=bundle)
        return opts

    def _spawn(self, slot: _Slot) -> None:
        slot.generation += 1
        name = f"actor-{slot.index}" + (f".{slot.generation - 1}" if slot.generation > 1 else "")
        slot.followers = []
        if self.nodes_per_trial > 1:
            slot.followers = [NodeAgent.options(**self._options(slot, b)).remote(  # type: ignore[attr-defined]
                self.key, f"{name}/node{b}") for b in range(1, self.nodes_per_trial)]
        slot.actor = EvaluatorActor.options(**self._options(slot, 0)).remote(  # type: ignore[attr-defined]
            self.config, self.simulate, self.run_dir, name, slot.followers, self.parsed)
        slot.info = None

    def _kill_followers(self, slot: _Slot) -> None:
        for agent in slot.followers:
            try:
                ray.kill(agent, no_restart=True)
            except RayError:
                pass
        slot.followers = []

    def _followers_alive(self, slot: _Slot) -> bool:
        """True when every follower of a multi-node slot still answers."""
        if not slot.followers:
            return True
        try:
            ray.get([a.poll.remote() for a in slot.followers], timeout=30)
        except (RayError, GetTimeoutError):
            return False
        return True

    def _replace(self, slot: _Slot) -> None:
        try:
            ray.kill(slot.actor, no_restart=True)
        except RayError:
            pass
        self._kill_followers(slot)
        self.replaced += 1
        slot.kept = None  # its server died with the actor (actors.guard)
        self._spawn(slot)

    # -- protocol -------------------------------------------------------------------------
    def submit(self, req: EvalRequest) -> None:
        # sent when the driver waits, so that a batch is routed as a whole (see msopt.run.pool.route)
        self._queue.append(req)

    def kept_keys(self) -> set[str]:
        """The server keys the free actors keep."""
        return {s.kept for s in self._free if s.kept is not None}

    def retain(self, keys: Collection[str]) -> None:
        """Stop the servers free actors keep that neither ``keys`` (what the run may still measure) nor
        a queued request needs; the actor is not sent anything until its server has stopped."""
        free = list(self._free)
        for w in unneeded([s.kept for s in free], keys, list(self._queue)):
            slot = free[w]
            self._free.remove(slot)
            self._stopping[slot.actor.close.remote()] = slot
            self.stopped += 1

    def _stopped(self, ref: Any) -> None:
        """A kept server stopped (:meth:`retain`): its actor is free again (replaced if it died)."""
        slot = self._stopping.pop(ref)
        try:
            ray.get(ref, timeout=30)
        except (RayError, GetTimeoutError):
            self._replace(slot)  # its server went with the actor (actors.guard)
        slot.kept = None
        self._free.append(slot)

    def _dispatch(self) -> None:
        """Send queued requests to free actors, the one keeping a request's server first (:func:`route`)."""
        if not (self._queue and self._free):
            return
        pending, free = list(self._queue), list(self._free)
        busy = {q.server_key for _, q, _ in self._inflight.values() if q.server_key is not None}
        pairs = route(pending, [s.kept for s in free], busy, self.costs)
        for i, w in pairs:
            slot, req = free[w], pending[i]
            ref = slot.actor.evaluate.remote(req)
            self._inflight[ref] = (slot, req, time.monotonic())
            self._started.append((req.eval_id, self._devices(slot)))
        sent = {i for i, _ in pairs}
        used = {w for _, w in pairs}
        self._queue = deque(r for i, r in enumerate(pending) if i not in sent)
        self._free = deque(s for w, s in enumerate(free) if w not in used)

    @staticmethod
    def _devices(slot: _Slot) -> list[str]:
        """The slot's devices as the journal lists them (``<node>:<device>`` when it spans nodes)."""
        info = slot.info or {}
        nodes = info.get("nodes") or []
        if len(nodes) > 1:
            return [f"{str(n.get('node', ''))[:8] or n.get('address')}:{d}"
                    for n in nodes for d in n.get("devices", [])]
        return list(info.get("devices", []))

    def running(self) -> list[tuple[int, list[str]]]:
        out, self._started = self._started, []
        return out

    def wait(self, timeout: float | None = None) -> list[EvaluationResult]:
        self._dispatch()
        if self._inflight or self._stopping:
            refs = [*self._inflight, *self._stopping]
            wait_for = timeout if timeout is not None else None
            ready, _ = ray.wait(refs, num_returns=1, timeout=wait_for)
            if ready:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in ready:
                if ref in self._stopping:
                    self._stopped(ref)
                else:
                    self._take(ref)
        elif timeout:
            time.sleep(min(timeout, 0.05))
        self._expire()
        if not self._done:  # else sent at the next wait: what the results make the driver submit comes first
            self._dispatch()
        out, self._done = self._done, []
        return out

    def _take(self, ref: Any) -> None:
        slot, req, t0 = self._inflight.pop(ref)
        try:
            result: EvaluationResult = ray.get(ref, timeout=30)
        except (RayActorError, GetTimeoutError) as exc:
            self._actor_died(slot, req, f"actor {self._name(slot)} died: {type(exc).__name__}")
            return
        except RayError as exc:  # the evaluation raised: a fault of the machinery, never a result
            result = self._failed(req, f"evaluation raised: {describe_fault(exc)}", slot, fault=True)
        if result.error and not self._followers_alive(slot):
            # a node of the trial is lost: a fault of the cluster, as when the leader dies; the slot
            # starts again on live nodes and the evaluation is submitted again
            self._actor_died(slot, req, f"a follower node of {self._name(slot)} was lost ({result.error})")
            return
        server = result.server or {}
        slot.kept = str(server["key"]) if server.get("kept") and server.get("key") else None
        self.costs.add(result)
        self._done.append(result)
        self._free.append(slot)

    def _actor_died(self, slot: _Slot, req: EvalRequest, why: str) -> None:
        self._replace(slot)
        n = req.attempts_used + 1  # the launch the actor died in counts (RETRY: one budget for all layers)
        log.warning("%s; %s", why, "resubmitting" if RETRY.again(n) else "giving up")
        if RETRY.again(n):
            self._queue.appendleft(replace(req, attempts_used=n))
        else:
            r = self._failed(req, f"{why} ({n} attempts)", slot, fault=True)  # Ray's failure, not the config's
            r.attempts = n
            self._done.append(r)
        self._free.append(slot)

    def _expire(self) -> None:
        now = time.monotonic()
        for ref, (slot, req, t0) in list(self._inflight.items()):
            if now - t0 > self.time_limit:
                del self._inflight[ref]
                self._replace(slot)  # killing the actor stops the processes it started
                r = self._failed(req, f"timed out after {self.time_limit:g}s (particles_time_out)", slot)
                self._done.append(r)
                self._free.append(slot)

    def _name(self, slot: _Slot) -> str:
        return f"actor-{slot.index}"

    def _failed(self, req: EvalRequest, error: str, slot: _Slot, *, fault: bool = False) -> EvaluationResult:
        if fault:
            return fault_result(req, error, devices=self._devices(slot),
                                actor=self._name(slot), real_evaluation=not self.simulate)
        return failed_result(req, error, devices=self._devices(slot), actor=self._name(slot),
                             real_evaluation=not self.simulate)

    def actor_infos(self) -> list[dict[str, Any]]:
        """Info of every live actor (pid, devices, node)."""
        return ray.get([s.actor.info.remote() for s in self.slots])

    def close(self) -> None:
        # the servers idle actors keep stop with their grace and their files restored; killing the
        # actor afterwards (and its guard) stops whatever is left
        busy = {id(s) for s, _, _ in self._inflight.values()} | {id(s) for s in self._stopping.values()}
        closing = [s.actor.close.remote() for s in self.slots if s.kept is not None and id(s) not in busy]
        closing += list(self._stopping)  # already stopping (retain)
        if closing:
            try:
                ray.wait(closing, num_returns=len(closing), timeout=60)
            except RayError:
                pass
        for slot in self.slots:
            slot.kept = None
            try:
                ray.kill(slot.actor, no_restart=True)
            except RayError:
                pass
            self._kill_followers(slot)
            if slot.pg is not None:
                try:
                    remove_placement_group(slot.pg)
                except RayError:
                    pass
        self._inflight.clear()
        self._stopping.clear()
