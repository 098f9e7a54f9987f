"""MindIE: edit ``conf/config.json`` (dotted paths) and start ``mindieservice_daemon``.

The edited configuration travels in ``LaunchSpec.files`` as ``{config_path: json object}``; the
process layer writes it (backing up the original) just before the launch. Field values only
ever become JSON values at fixed keys of that one file: no value is used as a path.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import socket
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msopt.checks import is_int
from msopt.engines.base import EngineAdapter
from msopt.engines.init_doc import InitContext
from msopt.engines.mindie.config_doc import (
    CLEARED_ENV,
    DEVICE_IDS,
    HOST_PATH,
    HTTPS_PATH,
    INFER_MODE,
    INSTANCES,
    INTEGER_TYPES,
    INTER_NODE_TLS,
    MANAGEMENT_HOST,
    MANAGEMENT_PORT,
    METRICS_PORT,
    MODEL_CONFIG,
    MULTI_NODE,
    MULTI_NODE_PORT,
    PORT_PATH,
    RANK_TABLE,
    TEMPLATE_PATH,
    config_env,
    consistent_devices,
    get_path,
    is_json_path,
    key_type,
    load_config,
    parse_path,
    set_path,
)
from msopt.engines.mindie.health import MINDIE_SOURCES
from msopt.engines.mindie.install import (
    DEFAULT_INSTALL_PATH,
    PIP_WRAPPER,
    MindieInstall,
    find_install,
    installed_config,
)
from msopt.engines.mindie.original import refuse_mindie_pd
from msopt.engines.mindie.pd import REAL_LAUNCH_REFUSED, check_pd, pd_notes
from msopt.engines.mindie.pd import render_pd as render_mindie_pd
from msopt.engines.mindie.rank_table import device_ip_table, rank_table
from msopt.engines.mindie.rules import RULES as MINDIE_RULES
from msopt.engines.mindie.template import write_init as write_mindie_init
from msopt.engines.pd import ROLES, PdLaunch, check_fields, role_fields, without_pd
from msopt.errors import ConfigError
from msopt.launch.hccl import check_section as check_hccl
from msopt.launch.hccl import hccl_env, inherited_note
from msopt.launch.render import (
    Candidate,
    LaunchSpec,
    TrialNode,
    command_str,
    command_table,
    env_fields,
    executable,
    split_others,
    substitute,
    valid_port,
    value_of,
    wait_start_time,
)
from msopt.space.fields import FieldDecl

if TYPE_CHECKING:
    from msopt.config import Config

class MindieAdapter(EngineAdapter):
    """MindIE Service: values go into config.json; env fields into the environment."""

    name = "mindie"
    health_path = "/v1/models"
    #: Used when neither ``[mindie.command] executable`` nor an installation (:func:`find_install`) is found.
    default_executable = ("mindieservice_daemon",)
    startup_rules = MINDIE_RULES
    sim_personality = "mindie"
    health_sources = MINDIE_SOURCES
    model_path_hint = "MindIE: ModelConfig[0].modelWeightPath"
    default_port = 1025
    #: On SIGTERM the daemon waits 5 s for its endpoint (EP_STOP_WAIT_TIME, llm_daemon.cpp:41, 209), then
    #: SIGTERMs its process group and waits up to 15 s for it (SUB_PROCESS_WAIT_TIME, llm_daemon.cpp:45,
    #: 174) before SIGKILL and abort() (llm_daemon.cpp:177-184), MindIE-LLM 8b4871a: 20 s and a margin.
    stop_grace = 30.0
    #: Free ports a multi-node launch needs on the leader besides ``port`` and ``rendezvous_port``:
    #: ``BackendConfig.multiNodesInferPort``, the master's gRPC port (src/executor/grpc_communicator.cpp:152-199).
    leader_ports = 1
    #: Its rank table needs every device's ``device_ip`` (ranktable_config.cpp:189, 293-297).
    needs_device_ips = True
    #: MindIE-MS's prefill/decode deployment, rendered and simulated (msopt/engines/mindie/pd.py).
    supports_pd = True

    #: The chat route, as msopt init has written for MindIE since its first version.
    init_endpoint = "/v1/chat/completions"

    def write_init(self, ctx: InitContext) -> None:
        write_mindie_init(ctx)

    def launch_port(self, section: Mapping[str, Any]) -> int:
        """``[mindie.command] port``, else ``ServerConfig.port`` of the config.json, else 1025."""
        cmd = section.get("command", {})
        port = cmd.get("port") if isinstance(cmd, Mapping) else None
        if port is None:
            port = get_path(load_config(section)[0], PORT_PATH)
        return valid_port(port, self.default_port)

    def export_target(self, section: Mapping[str, Any], target: str) -> str:
        """The user's config.json, or (without ``config_path``) where MindIE keeps it."""
        if not section.get("config_path"):
            return "its conf/config.json (set [mindie] config_path to have msopt edit yours)"
        return target

    def check_config(self, config: Config) -> None:
        """The original tool's MindIE PD inputs are refused (:func:`msopt.engines.mindie.original.refuse_mindie_pd`);
        ``config_env = false`` (one config.json edited in place) with room for two trials on a node is refused."""
        refuse_mindie_pd(config)
        section = config.engine.section.table
        if self.is_disaggregated(section) and not config.run.simulate:
            raise ConfigError(f"{config.engine.section.where('pd')}: {REAL_LAUNCH_REFUSED}")
        if config_env(section) is not None or config.run.simulate:
            return
        cluster = config.cluster
        per_trial = max(1, cluster.trial.devices)
        per_node = cluster.devices_per_node
        if cluster.max_concurrent_trials == 1 or (per_node and per_node < 2 * per_trial):
            return
        room = (f"devices_per_node = {per_node} holds {per_node // per_trial} trials of {per_trial}" if per_node
                else "devices_per_node is not set, so trials may share a node")
        where = config.engine.section.where("config_env")
        raise ConfigError(f"{where}: [mindie] config_env = false has every trial of a node edit "
                          f"the one config_path, and {room}; MindIE re-reads that file every 10 s "
                          "(config_manager_impl.cpp:351-372, MindIE-LLM 8b4871a). Drop config_env = false (each "
                          "trial then reads its own copy through $MIES_CONFIG_JSON_PATH), or set [cluster] "
                          "max_concurrent_trials = 1")

    def check(self, fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> None:
        """Check paths against the original config.json (or the template) without rendering:
        known keys only, and no field that can give a fraction where MindIE wants an integer."""
        pd = check_pd(section)
        if pd is not None:  # each role's fields against the same config.json (msopt/engines/mindie/pd.py)
            check_fields(fields, pd, self.name)
            for role in ROLES:
                self._check(role_fields(fields, role), without_pd(section), disaggregated=True)
            return
        self._check(fields, section, disaggregated=False)

    def _check(self, fields: Sequence[FieldDecl], section: Mapping[str, Any], *, disaggregated: bool) -> None:
        """:meth:`check` of one server's fields (one PD role's: its file may have inferMode "dmi")."""
        device_ip_table(section.get("device_ips"))
        config_env(section)
        check_hccl(section, self.name)
        doc, src = load_config(section, missing_ok=True)
        if not disaggregated and str(get_path(doc, INFER_MODE, "standard")).lower() == "dmi":
            raise ConfigError(f"[mindie] config_path {src}: ServerConfig.inferMode is \"dmi\", MindIE's "
                              "prefill/decode role (it binds the fixed interCommPort, endpoint.cpp:91-92), which "
                              "msopt does not launch; point config_path at a config.json with inferMode "
                              "\"standard\"")
        cmd = command_table(section, self.name)
        wait_start_time(section, self.name)
        split_others(cmd.get("others", ""), {}, f"[{self.name}.command]")
        for decl in fields:
            if not is_json_path(decl.config_position):
                continue
            path = parse_path(decl.config_position, decl)
            set_path(copy.deepcopy(doc), path, 0, decl)
            kind = key_type(path)
            old = get_path(doc, path)
            integral = kind in INTEGER_TYPES or (kind is None and isinstance(old, int) and not isinstance(old, bool))
            if integral and _fractional(decl):
                raise decl.error(f"config_position {decl.config_position!r}: MindIE reads it as an integer "
                                 f"({kind or 'int'}) but dtype {decl.dtype!r} can give fractions",
                                 "use dtype int, range or ratio (or integral enum values)")

    def notes(self, section: Mapping[str, Any]) -> list[str]:
        """What msopt will change in MindIE's config.json besides the fields (``msopt validate``)."""
        doc, path = load_config(section, missing_ok=True)
        configured = section.get("config_path")
        src = path or (f"the built-in template {TEMPLATE_PATH.name}" if not configured else
                       f"the built-in template (config_path {configured} is not on this machine; "
                       "'msopt preflight' checks it where the trials run)")
        https = get_path(doc, HTTPS_PATH)
        out = [f"config.json: {src}"]
        if https is True:
            out.append(f"ServerConfig.httpsEnabled: true in {path or 'the template'}; msopt sets it to false "
                       "in the edited copy (readiness checks and benchmarks speak plain HTTP on the trial's "
                       "own port)")
        else:
            out.append("ServerConfig.httpsEnabled: false (plain HTTP)")
        out.append("BackendConfig.npuDeviceIds and ModelConfig[0].worldSize: set from the trial's devices "
                   "(worldSize from a field when one sets it)")
        pd = check_pd(section)
        if pd is not None:
            out += pd_notes(pd)
        else:
            out.append("ServerConfig.port, managementPort and metricsPort: the trial's own port, managementIpAddress = "
                       "ipAddress (MindIE's single-port mode: trials on one node share no port)")
        given = section.get("env", {})
        given = given if isinstance(given, Mapping) else {}
        cleared = [n for n in CLEARED_ENV if n not in given]
        here = [f"{n}={os.environ[n]}" for n in cleared if os.environ.get(n)]
        if cleared:
            out.append(f"{', '.join(cleared)}: set empty (MindIE reads it as unset) for a trial on one node, so an "
                       "inherited value moves no address and loads no rank table (server_config.cpp:618-636, "
                       "atb_llm/utils/env.py:74); a trial over nodes sets them per node"
                       + (f"; this environment has {', '.join(here)}" if here else ""))
        out.append(inherited_note(self.name))
        found = find_install()
        out.append(f"MindIE here: {found.layout} layout, {found.executable}" if found is not None else
                   "MindIE here: none found ('msopt preflight' checks the nodes)")
        return out

    def preflight(self, section: Mapping[str, Any]) -> list[tuple[str, bool, str]]:
        """The installation and its layout; config.json: set, present, valid, writable (or readable
        with ``config_env``); what happens to HTTPS; the addresses MindIE will listen on."""
        found = find_install(probe=True)
        out: list[tuple[str, bool, str]] = [self._install_check(section, found)]
        raw, private = section.get("config_path") or installed_config(), bool(config_env(section))
        if not raw:
            if "config_env" in section and private:
                return [*out, ("config.json", True, "no config_path: every trial writes the built-in template "
                               f"into its work directory and points ${section.get('config_env')} at it")]
            where = found.config if found is not None and found.config else "<mindie-service>/conf/config.json"
            return [*out, ("config.json", False, "[mindie] config_path is not set, so msopt cannot edit the "
                           f"config.json MindIE reads; set config_path = \"{where}\"")]
        path = Path(str(raw)).expanduser()
        if not path.exists():
            return [*out, ("config.json", False, f"{path} does not exist on this node; install MindIE here "
                           "or fix [mindie] config_path")]
        try:
            doc, _ = load_config(section)
        except ConfigError as exc:
            return [*out, ("config.json", False, str(exc))]
        if private:
            ok = os.access(path, os.R_OK)
            out.append(("config.json", ok, f"{path} is " + ("readable (trials edit private copies)" if ok else
                                                              "not readable by this user")))
        else:
            ok = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
            detail = f"{path} " + (
                "is writable (msopt edits it per trial and keeps config.json.msopt-backup)" if ok else
                "or its directory is not writable by this user: msopt edits it per trial and writes a "
                "backup beside it; fix the permissions or set [mindie] config_env")
            if ok and found is not None and found.config and Path(found.config).resolve() != path.resolve():
                ok = False
                detail = (f"{path} is not the config.json the {found.layout} installation here reads "
                          f"({found.config}), so its edits would tune nothing; set config_path to that file, or "
                          "set [mindie] config_env = \"MIES_CONFIG_JSON_PATH\" to have each trial read its own copy")
            out.append(("config.json", ok, detail))
        https = get_path(doc, HTTPS_PATH)
        out.append(("https", True, "ServerConfig.httpsEnabled is true: msopt sets it to false in the edited "
                    "config (plain HTTP on the trial's port)" if https is True else
                    "ServerConfig.httpsEnabled is false (plain HTTP)"))
        cmd = section.get("command", {})
        host = str(cmd.get("host") if isinstance(cmd, Mapping) and cmd.get("host") else
                   get_path(doc, HOST_PATH, "127.0.0.1"))
        # A trial serves on ipAddress, and management and metrics on managementIpAddress, which msopt sets
        # equal (single-port mode); MindIE listens on both (http_server.cpp:251, 267, 284).
        file_mgmt = get_path(doc, MANAGEMENT_HOST)
        for key, addr in (("ipAddress", host), ("managementIpAddress", host)):
            ok, why = _bindable(addr)
            moved = (f" (the file has {file_mgmt}; msopt serves management and metrics on the trial's own port "
                     "at ipAddress, MindIE's single-port mode)" if key == "managementIpAddress" and file_mgmt
                     not in (None, host) else "")
            out.append(("address", ok, f"ServerConfig.{key} {addr} " + (
                "can be bound on this node" if ok else f"cannot be bound on this node ({why}); use an address of "
                "this node") + moved))
        return out

    def _install_check(self, section: Mapping[str, Any], found: MindieInstall | None) -> tuple[str, bool, str]:
        """Which installation layout is here (``found``), and where it reads its config.json."""
        cmd = section.get("command", {})
        given = cmd.get("executable") if isinstance(cmd, Mapping) else None
        if found is None:
            text = ("no MindIE installation found ($MIES_INSTALL_PATH/bin/mindieservice_daemon, "
                    f"{DEFAULT_INSTALL_PATH}/bin/mindieservice_daemon, or {PIP_WRAPPER} on PATH)")
            if given:
                return ("install", True, text + "; using [mindie.command] executable")
            on_path = shutil.which(self.default_executable[0])
            if on_path:
                return ("install", True, text + f"; using {on_path} from PATH")
            return ("install", False, text + "; install MindIE here, set $MIES_INSTALL_PATH, or set "
                    "[mindie.command] executable")
        conf = found.config or "<site-packages>/mindie_llm/conf/config.json (package directory not found)"
        text = f"{found.layout} layout, found by {found.how}: {found.executable}; it reads {conf}"
        if found.layout == "pip":
            text += (" unless $MIES_CONFIG_JSON_PATH names another (src/utils/common_util.cpp:264-282); "
                     f"{PIP_WRAPPER} sets MINDIE_LLM_HOME_PATH and LD_LIBRARY_PATH and execs the daemon")
        if given:
            text += f"; [mindie.command] executable {given!r} is used instead"
        return ("install", True, text)

    def render(self, candidate: Candidate, *, port: int, devices: Sequence[str] = (),
               workdir: Path | None = None) -> LaunchSpec:
        """Edit config.json with every dotted field, set the port, build the daemon's argv."""
        values, fields, section = candidate.values, candidate.fields, candidate.section
        cmd = command_table(section, self.name)
        doc, path = load_config(section)
        if devices and isinstance(doc.get("BackendConfig"), dict):
            # Ray remaps the visible NPUs, so the server addresses them as 0..n-1 (a field may
            # still set single ids; consistent_devices below settles the rest).
            set_path(doc, DEVICE_IDS, [list(range(len(devices)))])
        if "model" in cmd:
            set_path(doc, (*MODEL_CONFIG, "modelWeightPath"),
                     substitute(command_str(cmd, "model", "", self.name), values))
        if "served_model_name" in cmd:
            set_path(doc, (*MODEL_CONFIG, "modelName"),
                     substitute(command_str(cmd, "served_model_name", "", self.name), values))
        if "host" in cmd:
            set_path(doc, HOST_PATH, command_str(cmd, "host", "127.0.0.1", self.name))
        for decl in fields:
            if is_json_path(decl.config_position):
                value = value_of(values, decl)
                if value is not None:  # an undetermined derived value keeps the file's own
                    set_path(doc, parse_path(decl.config_position, decl), value, decl)
        set_path(doc, PORT_PATH, int(port))
        single_port(doc, int(port))
        if get_path(doc, HTTPS_PATH) is True:
            # Readiness and the benchmarks speak plain HTTP (docs/engines.md, "MindIE and HTTPS").
            set_path(doc, HTTPS_PATH, False)
        fields_set = {parse_path(d.config_position) for d in fields if is_json_path(d.config_position)
                      and value_of(values, d) is not None}
        consistent_devices(doc, len(devices) or None, (*MODEL_CONFIG, "worldSize") in fields_set,
                           ids_from_field=any(p[:2] == DEVICE_IDS for p in fields_set))

        env = env_fields(candidate, self.name)
        for name in CLEARED_ENV:  # an inherited value would move ipAddress or load a rank table (CLEARED_ENV)
            env.setdefault(name, "")
        if devices:  # HCCL's host and NPU port blocks of this trial's devices (msopt/launch/hccl.py)
            env = hccl_env(env, section, devices, fields, self.name)
        private = config_env(section)
        if private and workdir is not None:
            # The server reads a private copy named by this variable; the original stays as it is.
            target = str(Path(workdir) / "config.json")
            env[private] = target
        elif path is not None:
            target = path
        else:
            target = str(Path(workdir) / "config.json") if workdir is not None else "config.json"
        argv = executable(cmd, self.installed_executable(), self.name, values)
        argv += split_others(cmd.get("others", ""), values, f"[{self.name}.command]")
        return LaunchSpec(
            engine=self.name,
            argv=tuple(argv),
            env=env,
            files={target: doc},
            port=int(port),
            health_path=str(section.get("health_path", self.health_path)),
            host=str(get_path(doc, HOST_PATH, "127.0.0.1")),
            served_model_name=str(get_path(doc, (*MODEL_CONFIG, "modelName"), "")),
            model=str(get_path(doc, (*MODEL_CONFIG, "modelWeightPath"), "")),
            ready_timeout=wait_start_time(section, self.name),
            stop_grace=self.stop_grace,
        )

    def render_pd(self, candidate: Candidate, *, ports: Sequence[int], devices: Sequence[str] = (),
                  workdir: Path | None = None, nodes: Sequence[TrialNode] = ()) -> PdLaunch:
        """MindIE-MS's PD deployment of one trial (:func:`msopt.engines.mindie.pd.render_pd`)."""
        return render_mindie_pd(self, candidate, ports=ports, devices=devices, workdir=workdir, nodes=nodes)

    def installed_values(self, fields: Sequence[FieldDecl], section: Mapping[str, Any],
                         environ: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
        """As every engine, plus each dotted field's value in the config.json ``config_path`` names,
        as the original took it (optimizer.py ``prepare_plugin``: ``get_required_field_from_json``)."""
        out = super().installed_values(fields, section, environ)
        doc, path = load_config(section, missing_ok=True)
        if path is None:
            return out
        for decl in fields:
            if is_json_path(decl.config_position) and decl.name not in out:
                value = get_path(doc, parse_path(decl.config_position, decl))
                if value is not None and not isinstance(value, (dict, list)):
                    out[decl.name] = (value, f"{decl.config_position} of {path}")
        return out

    def installed_constraints(self, fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> dict[str, tuple[Any,
                                                                                                             str]]:
        """``ScheduleConfig.maxPreemptCount`` is 0 while a ModelConfig of the installed config.json has
        ``cpuMemSize`` 0 and no field sets it: MindIE refuses any other ("modelParam.cpuMemSize can not be 0
        when maxPreemptCount is not 0", MindIE-LLM 8b4871a config_manager_impl.cpp:325-328)."""
        doc, path = load_config(section, missing_ok=True)
        if path is None:
            return {}
        positions = {d.config_position for d in fields if is_json_path(d.config_position)}
        if any(p.startswith("BackendConfig.ModelDeployConfig.ModelConfig.") and p.endswith(".cpuMemSize")
               for p in positions):
            return {}
        models = get_path(doc, MODEL_CONFIG[:-1])
        zero = [i for i, m in enumerate(models if isinstance(models, list) else [])
                if isinstance(m, Mapping) and m.get("cpuMemSize") == 0]
        if not zero:
            return {}
        why = (f"ModelConfig[{zero[0]}].cpuMemSize is 0 in {path} and no field sets it, so MindIE accepts only "
               "maxPreemptCount 0 (config_manager_impl.cpp:325-328, MindIE-LLM 8b4871a)")
        return {d.name: (0, why) for d in fields
                if d.config_position == "BackendConfig.ScheduleConfig.maxPreemptCount"}

    def simulation_section(self, section: Mapping[str, Any]) -> Mapping[str, Any]:
        """Without ``config_path`` where that file (and its backup) is not on this machine: a simulation
        renders the built-in template then, as ``msopt validate`` says ("config_path ... is not on this
        machine"), and needs no installed MindIE."""
        _, path = load_config(section, missing_ok=True)
        if path is not None or not section.get("config_path"):
            return section
        return {k: v for k, v in section.items() if k != "config_path"}

    def installed_devices(self, section: Mapping[str, Any]) -> tuple[int, str] | None:
        """``ModelConfig[0].worldSize`` x ``modelInstanceNumber`` of the installed config.json (the NPUs
        ``npuDeviceIds`` lists, one subset of worldSize ids per instance: backend_config.cpp), one node's."""
        doc, path = load_config(section, missing_ok=True)
        world = get_path(doc, (*MODEL_CONFIG, "worldSize"))
        if path is None or not is_int(world) or world < 1 or self.is_disaggregated(section):
            return None
        instances = get_path(doc, INSTANCES, 1)
        instances = instances if is_int(instances) and instances > 0 else 1
        ids = get_path(doc, DEVICE_IDS)
        return world * instances, (f"ModelConfig[0].worldSize {world} x modelInstanceNumber {instances} "
                                   f"(npuDeviceIds {json.dumps(ids)}) of {path}")

    def installed_absent(self, decl: FieldDecl) -> str | None:
        if decl.config_position.startswith("BackendConfig"):
            return "not in the installed config.json (or no [mindie] config_path here)"
        return None

    def model_path(self, section: Mapping[str, Any]) -> str:
        """``[mindie.command] model``, else ModelConfig[0].modelWeightPath of the config.json template."""
        given = super().model_path(section)
        if given:
            return given
        try:
            doc, _ = load_config(section)
        except ConfigError:
            return ""
        return str(get_path(doc, (*MODEL_CONFIG, "modelWeightPath"), "") or "")

    def installed_executable(self) -> tuple[str, ...]:
        """What starts MindIE here when ``[mindie.command] executable`` is not set: the installation
        :func:`find_install` finds, else :attr:`default_executable` (looked up on PATH)."""
        found = find_install()
        return (found.executable,) if found is not None else tuple(self.default_executable)

    def render_nodes(self, candidate: Candidate, *, port: int, nodes: Sequence[TrialNode], rendezvous_port: int,
                     workdir: Path | None = None, leader_ports: Sequence[int] = ()) -> list[LaunchSpec]:
        """One config.json per node (its own npuDeviceIds, ``multiNodesInferEnabled``) and one rank table.

        MindIE-LLM (commit 8b4871a) docs/zh/user_guide/models/deepseek/deepseek_v3.2.md and
        docs/zh/user_guide/user_manual/rank_table_file_configuration.md: the same config.json on
        every node with ``multiNodesInferEnabled: true``; ``RANK_TABLE_FILE`` names a rank table of
        ``server_count`` and ``server_list`` (``server_id``, ``container_ip``, ``device`` with
        ``device_id``, ``device_ip``, ``rank_id``; the first server is the master); ``MASTER_IP``,
        ``MIES_CONTAINER_IP`` (this node) and ``MASTER_PORT`` in the environment. The NPUs' RoCE
        addresses (``hccn_tool -i N -ip -g``) are what each node read (:class:`TrialNode`
        ``device_ips``), or ``[mindie] device_ips`` (node address -> list indexed by physical
        device id) where it names the node (:func:`rank_table`).

        ``MIES_CONTAINER_IP`` replaces ``ipAddress`` and ``MIES_CONTAINER_MANAGEMENT_IP`` replaces
        ``managementIpAddress`` (server_config.cpp:618-636), so each node's config.json names its own
        address for both (single-port mode needs them equal, http_server.cpp:411-413) and the leader's
        launch has that address as its host: readiness and the benchmark go where the server listens.
        ``multiNodesInferPort`` (the master's gRPC server, grpc_communicator.cpp:152-199) is
        ``leader_ports[0]`` when given, so trials whose leaders share a node do not collide.
        """
        if len(nodes) == 1:
            spec = self.render(candidate, port=port, devices=list(nodes[0].devices), workdir=workdir)
            if torch_backend(spec) and "MASTER_PORT" not in spec.env:
                # the torch backend starts torch.distributed on MASTER_PORT even on one node
                # (mindie_llm/runtime/utils/distributed/__init__.py:59-61): each trial its own, from its lease
                spec = replace(spec, env={**spec.env, "MASTER_PORT": str(rendezvous_port)})
            elif pipeline_parallel(spec) and "MASTER_PORT" not in spec.env:
                # ATB with pp > 1 starts gloo over tcp://MASTER_IP:MASTER_PORT (atb_llm/utils/mapping.py:263-276,
                # Mapping.update_pp): each trial its own port, from its lease; its ranks are all on this node
                spec = replace(spec, env={"MASTER_IP": "127.0.0.1", **spec.env, "MASTER_PORT": str(rendezvous_port)})
            return [spec]
        table = rank_table(nodes, candidate.section.get("device_ips"))
        table_path = str(Path(workdir) / RANK_TABLE) if workdir is not None else RANK_TABLE
        out = []
        for node in nodes:
            spec = self.render(candidate, port=port, devices=list(node.devices), workdir=workdir)
            files = {}
            for target, doc in spec.files.items():
                doc = copy.deepcopy(doc)
                set_path(doc, MULTI_NODE, True)
                set_path(doc, INTER_NODE_TLS, False)
                set_path(doc, HOST_PATH, node.address)
                set_path(doc, MANAGEMENT_HOST, node.address)
                if leader_ports and int(leader_ports[0]) != int(port):  # equal: single_port moved it aside
                    set_path(doc, MULTI_NODE_PORT, int(leader_ports[0]))
                files[target] = doc
            files[table_path] = table
            env = {**spec.env, "RANK_TABLE_FILE": table_path, "MASTER_IP": nodes[0].address,
                   "MASTER_PORT": str(rendezvous_port), "MIES_CONTAINER_IP": node.address,
                   "MIES_CONTAINER_MANAGEMENT_IP": node.address}
            out.append(replace(spec, env=env, files=files, host=node.address))
        return out


def torch_backend(spec: LaunchSpec) -> bool:
    """Whether a ModelConfig of the rendered config.json has ``backendType`` "torch"."""
    for doc in spec.files.values():
        models = get_path(doc, (*MODEL_CONFIG[:-1],)) if isinstance(doc, Mapping) else None
        if isinstance(models, list) and any(isinstance(m, Mapping) and str(m.get("backendType", "")).lower()
                                            == "torch" for m in models):
            return True
    return False


def pipeline_parallel(spec: LaunchSpec) -> bool:
    """Whether a ModelConfig of the rendered config.json has ``pp`` above 1 (atb_llm's Mapping.has_pp)."""
    for doc in spec.files.values():
        models = get_path(doc, (*MODEL_CONFIG[:-1],)) if isinstance(doc, Mapping) else None
        if isinstance(models, list) and any(isinstance(m, Mapping) and is_int(m.get("pp")) and m["pp"] > 1
                                            for m in models):
            return True
    return False


def single_port(doc: dict[str, Any], port: int) -> None:
    """Serve business, management and metrics on ``port`` (MindIE's single-port mode).

    MindIE-LLM 8b4871a http_server.cpp:400-405 refuses to start when any of ``port``,
    ``managementPort``, ``metricsPort`` is taken, and a shipped config.json fixes the latter two
    (1026, 1027), so a second trial on a node would fail. With ``managementIpAddress == ipAddress``
    and ``port == managementPort == metricsPort`` MindIE runs one HTTP server with every resource
    on it (http_server.cpp:411-414, ALL_SAME; no management certificates checked,
    server_config.cpp:353-359), so a trial needs only the one port msopt gives it.
    ``interCommPort`` is bound only with ``inferMode`` "dmi" (endpoint.cpp:91-92,
    grpc_handler.cpp:176-177), which :meth:`MindieAdapter.check` refuses, and
    ``multiNodesInferPort`` only by the master of a multi-node launch (grpc_communicator.cpp:152-199,
    set per trial in :meth:`MindieAdapter.render_nodes`); MindIE refuses ``port ==
    multiNodesInferPort`` (config_manager_impl.cpp:312-315), so that one moves aside when equal.
    """
    server = doc.get("ServerConfig")
    if not isinstance(server, dict):
        return
    set_path(doc, MANAGEMENT_PORT, port)
    set_path(doc, METRICS_PORT, port)
    set_path(doc, MANAGEMENT_HOST, str(server.get("ipAddress", "127.0.0.1")))
    if isinstance(doc.get("BackendConfig"), dict) and get_path(doc, MULTI_NODE_PORT) == port:
        set_path(doc, MULTI_NODE_PORT, port + 1 if port < 65535 else port - 1)


def _bindable(host: str) -> tuple[bool, str]:
    """Whether a listener could bind ``host`` (any free port) on this node, and why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, 0))
        except OSError as exc:
            return False, exc.strerror or str(exc)
    return True, ""


def _fractional(decl: FieldDecl) -> bool:
    """True when the field's dtype can decode to a non-integral number."""
    if decl.dtype == "float":
        return True
    if decl.dtype == "enum" and isinstance(decl.dtype_param, (list, tuple)):
        return any(isinstance(v, float) and not v.is_integer() for v in decl.dtype_param)
    return False
