"""MindIE prefill/decode disaggregation as MindIE-MS deploys it, rendered per trial.

Every reference is to MindIE-Motor (MindIE-MS) 5dfb024e, ``mindie_motor/src/``:

- the deployment's own inputs, ``example/deploy_scripts/user_config.json``: ``p_instances_num`` and
  ``d_instances_num`` (lines 4-5) are ``[mindie.pd] prefill_instances`` and ``decode_instances``; each
  role has a config.json of its own (``mindie_server_prefill_config``, 118-184, and
  ``mindie_server_decode_config``, 185-257) with ``ServerConfig.inferMode`` "dmi" (121, 189) and its own
  parallelism (``worldSize``, ``tp``, ``dp``, ``moe_ep``, ...): a field at ``prefill:<dotted path>`` or
  ``decode:<dotted path>`` sets one role's (:func:`msopt.engines.pd.role_fields`);
- the controller, ``config/ms_controller.json``: ``deploy_mode`` "pd_separate" (3), the global rank
  table's path (25), ``default_p_rate`` / ``default_d_rate`` (30-31), the ports every server instance
  shares (``mindie_server_port`` 1025, ``mindie_server_control_port`` 1026, ``mindie_server_metric_port``
  1027, 38-40) and the coordinator's (42); it reads the file named by
  ``MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH`` and the table by ``GLOBAL_RANK_TABLE_FILE_PATH``
  (controller/constant/ControllerConstant.cpp:78-79); the two rates are both 0 or both above 0, and sum
  to at most 768 (controller/constant/ControllerConfig.cpp:30-33, 65-80);
- the coordinator, ``config/ms_coordinator.json``: ``http_config.predict_ip`` / ``predict_port`` (the
  port clients send requests to) and ``manage_port`` (4-7), ``digs_scheduler_config.deploy_mode``
  "pd_separate" (48); it reads the file named by ``MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH``
  (coordinator/configure/Configure.cpp:25);
- the global rank table, ``example/deploy_scripts/gen_ranktable_helper/gen_global_ranktable.py``:
  ``server_group_list`` with the server instances in group "2" and on (131-149, 246-249), the controller's
  group "1" and the coordinator's group "0" (184-188, 252-255), ``status`` "completed" (256); the shape of
  ``tests/ms/common/.mindie_ms/global_rank_table.json``;
- the processes, ``example/deploy_scripts/boot_helper/boot.sh``: ``mindie_motor_controller`` (197) and
  ``mindie_motor_coordinator "$POD_IP" "$POD_IP"`` (225), each in a pod of its own beside one pod per
  server instance (``deployment/mindie_server.yaml``, ``mindie_ms_controller.yaml``,
  ``mindie_ms_coordinator.yaml``).

msopt renders all of it per trial (every instance's config.json, ms_controller.json, ms_coordinator.json
and the global rank table), checks each instance against MindIE's start-up rules, and simulates the
two pools (:mod:`msopt.sim.pd`, through MindIE's simulator personality). It does not launch it: every
server instance listens on the one ``mindie_server_port`` of ms_controller.json at an address of its
own, so MindIE-MS runs each in a Kubernetes pod (:data:`REAL_LAUNCH_REFUSED`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from msopt.checks import is_int
from msopt.engines.base import EngineAdapter
from msopt.engines.mindie.config_doc import (
    DEVICE_IDS,
    HOST_PATH,
    INFER_MODE,
    MANAGEMENT_HOST,
    MANAGEMENT_PORT,
    METRICS_PORT,
    MODEL_CONFIG,
    PORT_PATH,
    get_path,
    set_path,
)
from msopt.engines.mindie.rank_table import device_ip_table
from msopt.engines.pd import PdLaunch, count, pd_table, role_fields, without_pd
from msopt.errors import ConfigError, EvaluationError
from msopt.launch.render import Candidate, LaunchSpec, TrialNode, command_str, executable

#: The one line a real MindIE PD run gets (the launch that needs hardware msopt cannot drive).
REAL_LAUNCH_REFUSED = (
    "a real MindIE prefill/decode trial runs on Kubernetes, one pod per server instance (they all share "
    "ms_controller.json's mindie_server_port, MindIE-Motor config/ms_controller.json:38-40), which msopt does "
    "not launch; set simulate = true (or run msopt simulate) to tune it on the simulator")
#: What the exported best_command.sh of a MindIE PD configuration says first.
EXPORT_NOTE = ("MindIE-MS runs each server instance, the controller and the coordinator in a Kubernetes pod of "
               "its own (every instance listens on port 1025): run each line below in its pod with the files "
               "beside this script, or give the files' values to MindIE-MS's deploy_scripts/user_config.json "
               "(p_instances_num, d_instances_num, mindie_server_prefill_config, mindie_server_decode_config); "
               "this script does not run on one host")
#: The keys of ``[mindie.pd]`` (SGLang's transfer_backend and bootstrap_port have no MindIE meaning).
MINDIE_PD_KEYS = frozenset({"prefill_instances", "decode_instances", "visible_devices_env", "router", "controller"})
#: MindIE-MS's executables (boot.sh:197, 225).
CONTROLLER_EXEC = ("mindie_motor_controller",)
COORDINATOR_EXEC = ("mindie_motor_coordinator",)
#: The environment variables the two read their files from (ControllerConstant.cpp:78-79, Configure.cpp:25).
CONTROLLER_ENV = "MINDIE_MS_CONTROLLER_CONFIG_FILE_PATH"
RANK_TABLE_ENV = "GLOBAL_RANK_TABLE_FILE_PATH"
COORDINATOR_ENV = "MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH"
#: ms_controller.json's server ports as MindIE-MS ships them (ms_controller.json:38-40) and the coordinator's (42).
SERVER_PORTS = {"mindie_server_port": 1025, "mindie_server_control_port": 1026, "mindie_server_metric_port": 1027}
COORDINATOR_MANAGE_PORT = 1026
#: default_p_rate + default_d_rate at most (ControllerConfig.cpp:33, g_maxRateSum).
MAX_RATE_SUM = 768


def check_pd(section: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``[mindie.pd]`` checked (None: not disaggregated).

    Raises:
        ConfigError: a key MindIE's PD deployment has no use for, or a malformed table.
    """
    pd = pd_table(section, "mindie", MINDIE_PD_KEYS | {"transfer_backend", "bootstrap_port"})
    if pd is None:
        return None
    other = sorted(set(pd) - MINDIE_PD_KEYS)
    if other:
        raise ConfigError(f"[mindie.pd]: {other} are SGLang's; MindIE-MS moves the KV cache itself (ms_controller.json "
                          f"transfer_type); drop them (valid keys: {sorted(MINDIE_PD_KEYS)})")
    for key in ("router", "controller"):
        table = pd.get(key, {})
        if not isinstance(table, Mapping):
            raise ConfigError(f"[mindie.pd] '{key}' must be a table; write [mindie.pd.{key}]")
        unknown = sorted(set(table) - {"executable", "host"})
        if unknown:
            raise ConfigError(f"[mindie.pd.{key}]: unknown key(s) {unknown}; valid keys: ['executable', 'host']")
    return pd


def pd_notes(pd: Mapping[str, Any]) -> list[str]:
    """What ``msopt validate`` says of a MindIE PD deployment."""
    counts = ", ".join(f"{k} {pd.get(k, 1)}" for k in ("prefill_instances", "decode_instances"))
    return [f"PD (MindIE-MS): {counts}; each instance has its own config.json: inferMode \"dmi\", "
            "its role's prefill:/decode: fields, worldSize NPUs of its own, and the ports every instance shares "
            "(port 1025, managementPort 1026, metricsPort 1027: ms_controller.json mindie_server_port, "
            "mindie_server_control_port, mindie_server_metric_port)",
            "PD (MindIE-MS): ms_controller.json (deploy_mode pd_separate, default_p_rate and default_d_rate = the "
            "instance counts), ms_coordinator.json (predict_port: what the benchmark talks to) and the global rank "
            "table (coordinator group 0, controller group 1, instances group 2) rendered per trial, as MindIE-Motor's "
            "deploy scripts do",
            f"PD (MindIE-MS): simulated only; {REAL_LAUNCH_REFUSED}"]


def rate_problem(n_p: int, n_d: int) -> str | None:
    """MindIE-MS's refusal of ``default_p_rate`` / ``default_d_rate`` (ControllerConfig.cpp:65-80), None: accepted."""
    if n_p + n_d > MAX_RATE_SUM:
        return (f"[ControllerConfig] The sum of 'default_p_rate' {n_p} and default_d_rate' {n_d} should be less "
                f"than {MAX_RATE_SUM}.")
    return None


def _world(adapter: EngineAdapter, candidate: Candidate) -> int:
    """The NPUs one instance of a role takes: its config.json's ``ModelConfig[0].worldSize`` (a field's or
    the file's) x ``modelInstanceNumber``, rendered without devices."""
    doc = next(iter(adapter.render(candidate, port=SERVER_PORTS["mindie_server_port"]).files.values()))
    world = get_path(doc, (*MODEL_CONFIG, "worldSize"), 1)
    if not is_int(world) or world < 1:
        raise EvaluationError(f"ModelConfig[0].worldSize is {world!r}; a PD role's instance needs an integer >= 1")
    return int(world)


def _place(needs: Sequence[int], devices: Sequence[str], nodes: Sequence[TrialNode]) -> list[tuple[int, list[str]]]:
    """Each instance's node and devices, consecutive and first-fit, never across nodes."""
    pools = [list(n.devices) for n in nodes] if len(nodes) > 1 else [list(devices)]
    total = sum(len(p) for p in pools)
    if sum(needs) > total:
        raise EvaluationError(f"the MindIE PD deployment needs {sum(needs)} NPUs ({' + '.join(map(str, needs))}: "
                              f"each instance's worldSize), the trial holds {total}; raise [cluster] "
                              "devices_per_trial or search fewer instances")
    out = []
    for k in needs:
        r = next((i for i, p in enumerate(pools) if len(p) >= k), None)
        if r is None:
            raise EvaluationError(f"an instance of worldSize {k} fits on none of the trial's nodes "
                                  f"({', '.join(str(len(p)) for p in pools)} NPUs left)")
        out.append((r, pools[r][:k]))
        pools[r] = pools[r][k:]
    return out


def global_rank_table(instances: Sequence[tuple[str, Sequence[str]]], ms_host: str,
                      device_ips: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """MindIE-MS's global rank table: the coordinator (group "0"), the controller (group "1") and every server
    instance in group "2" (gen_global_ranktable.py:131-149, 184-188, 246-256), each instance one server entry
    with its physical devices (``device_ip`` where ``device_ips`` names the node's)."""
    servers = []
    for address, devs in instances:
        ips = device_ips.get(address, {})
        device = []
        for i, dev in enumerate(devs):
            entry = {"device_id": str(dev), "device_logical_id": str(i), "rank_id": str(i)}
            if str(dev) in ips:
                entry["device_ip"] = ips[str(dev)]
            device.append(entry)
        servers.append({"server_id": address, "server_ip": address, "device": device})
    return {"version": "1.0", "status": "completed", "server_group_list": [
        {"group_id": "0", "server_count": "1", "server_list": [{"server_id": "coordinator", "server_ip": ms_host}]},
        {"group_id": "1", "server_count": "1", "server_list": [{"server_id": "controller", "server_ip": ms_host}]},
        {"group_id": "2", "server_count": str(len(servers)), "server_list": servers}]}


def controller_config(n_p: int, n_d: int, table_path: str) -> dict[str, Any]:
    """The keys msopt sets in ms_controller.json for a trial (ms_controller.json:3, 25, 30-31, 38-42, 54-55;
    TLS off: the benchmark and msopt speak plain HTTP, 86-142)."""
    doc: dict[str, Any] = {"deploy_mode": "pd_separate", "global_rank_table_file_path": table_path,
                           "default_p_rate": n_p, "default_d_rate": n_d, **SERVER_PORTS,
                           "mindie_ms_coordinator_port": COORDINATOR_MANAGE_PORT,
                           "multi_node_infer_config": {"multi_node_infer_enable": False}}
    doc["tls_config"] = {f"{k}_tls_enable": False for k in (
        "request_coordinator", "request_server", "http_server", "cluster", "etcd_server", "ccae", "alarm",
        "external_coordinator")}
    return doc


def coordinator_config(host: str, port: int) -> dict[str, Any]:
    """The keys msopt sets in ms_coordinator.json: where clients send requests (``predict_ip`` /
    ``predict_port``, strings as the shipped file has them, ms_coordinator.json:4-7), PD scheduling (48), TLS
    off (64-120)."""
    tls = {f"{k}_tls_enable": False for k in (
        "controller_server", "request_server", "mindie_client", "mindie_mangment", "external", "status",
        "etcd_server", "alarm_client")}
    return {"http_config": {"predict_ip": host, "predict_port": str(port), "manage_ip": host,
                            "manage_port": str(COORDINATOR_MANAGE_PORT)},
            "digs_scheduler_config": {"deploy_mode": "pd_separate"}, "tls_config": tls}


def render_pd(adapter: EngineAdapter, candidate: Candidate, *, ports: Sequence[int], devices: Sequence[str] = (),
              workdir: Path | None = None, nodes: Sequence[TrialNode] = ()) -> PdLaunch:
    """Every process of a MindIE PD trial: each instance's config.json (its role's fields, ``inferMode``
    "dmi", its own NPUs and HCCL blocks, the ports ms_controller.json gives every server), the coordinator
    (what the benchmark talks to, on ``ports[-1]``) and the controller with the global rank table.

    Raises:
        EvaluationError: no ``[mindie.pd]``, the instances need more NPUs than the trial holds, or
            MindIE-MS refuses the instance counts.
    """
    values, section = candidate.values, candidate.section
    pd = check_pd(section)
    if pd is None:
        raise EvaluationError("render_pd needs a [mindie.pd] table")
    n_p, n_d = count(pd, "prefill_instances", values), count(pd, "decode_instances", values)
    problem = rate_problem(n_p, n_d)
    if problem:
        raise EvaluationError(problem)
    inner = dict(without_pd(section))
    if inner.get("config_env", True) is False:
        inner.pop("config_env")  # each instance reads its own copy (MIES_CONFIG_JSON_PATH)
    roles = [(role, Candidate(values, role_fields(candidate.fields, role), inner))
             for role, n in (("prefill", n_p), ("decode", n_d)) for _ in range(n)]
    worlds = {role: _world(adapter, role_c) for role, role_c in roles[:1] + roles[n_p:n_p + 1]}
    where = _place([worlds[role] for role, _ in roles], devices, nodes)
    env_name = str(pd.get("visible_devices_env", "ASCEND_RT_VISIBLE_DEVICES"))
    base = Path(workdir) if workdir is not None else None
    specs, placed = [], []
    counters = {"prefill": 0, "decode": 0}
    for (role, role_c), (rank, ids) in zip(roles, where, strict=True):
        i = counters[role]
        counters[role] += 1
        spec = adapter.render(role_c, port=SERVER_PORTS["mindie_server_port"], devices=ids,
                              workdir=base / f"{role}{i}" if base is not None else None)
        address = nodes[rank].address if len(nodes) > 1 else spec.host
        target, doc = next(iter(spec.files.items()))
        set_path(doc, INFER_MODE, "dmi")  # user_config.json:121, 189: MindIE-MS's PD roles
        set_path(doc, HOST_PATH, address)
        set_path(doc, MANAGEMENT_HOST, address)
        set_path(doc, PORT_PATH, SERVER_PORTS["mindie_server_port"])
        set_path(doc, MANAGEMENT_PORT, SERVER_PORTS["mindie_server_control_port"])
        set_path(doc, METRICS_PORT, SERVER_PORTS["mindie_server_metric_port"])
        if not get_path(doc, DEVICE_IDS):
            set_path(doc, DEVICE_IDS, [list(range(len(ids)))])
        specs.append(replace(spec, env={**spec.env, env_name: ",".join(ids)}, files={target: doc}, host=address))
        placed.append((address, ids))
    router = pd.get("router", {})
    host = command_str(router, "host", specs[0].host, "mindie.pd.router")
    coord_path = str(base / "ms_coordinator.json") if base is not None else "ms_coordinator.json"
    ctl_path = str(base / "ms_controller.json") if base is not None else "ms_controller.json"
    table_path = str(base / "global_ranktable.json") if base is not None else "global_ranktable.json"
    port = int(ports[-1]) if ports else 0  # the last: the export gives the launch port there (instances need none)
    coordinator = LaunchSpec(
        engine=adapter.name, argv=(*executable(router, COORDINATOR_EXEC, "mindie.pd.router", values), host, host),
        env={COORDINATOR_ENV: coord_path}, files={coord_path: coordinator_config(host, port)}, port=port,
        health_path=specs[0].health_path, host=host, served_model_name=specs[0].served_model_name,
        model=specs[0].model, ready_timeout=specs[0].ready_timeout, stop_grace=specs[0].stop_grace)
    ips = device_ip_table(section.get("device_ips"))
    for node in nodes:
        ips.setdefault(node.address, dict(node.device_ips))
    ctl = pd.get("controller", {})
    controller = LaunchSpec(
        engine=adapter.name, argv=tuple(executable(ctl, CONTROLLER_EXEC, "mindie.pd.controller", values)),
        env={CONTROLLER_ENV: ctl_path, RANK_TABLE_ENV: table_path},
        files={ctl_path: controller_config(n_p, n_d, table_path), table_path: global_rank_table(placed, host, ips)},
        port=COORDINATOR_MANAGE_PORT, host=host, ready_timeout=specs[0].ready_timeout)
    return PdLaunch(tuple(specs[:n_p]), tuple(specs[n_p:]), coordinator, tuple(r for r, _ in where),
                    controller=controller, note=EXPORT_NOTE)
