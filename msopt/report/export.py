"""The best configuration, ready to use: ``best_command.sh``/``.json`` and the engine's files.

:func:`export_best` renders the recommended configuration with the engine adapter, exactly as a
real launch would be rendered; the adapter says which port a user's server listens on and where
its configuration files go (:meth:`msopt.engines.EngineAdapter.launch_port`,
:meth:`~msopt.engines.EngineAdapter.export_notes`), so this module knows no engine by name.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from msopt.benchmarks.base import CONCURRENCY_FIELD, REQUEST_RATE_FIELD
from msopt.config import Config
from msopt.engines import get_engine
from msopt.evaluate.runner import RunnerContext
from msopt.evaluate.simulated import SimRunner, explicit_devices, simulated_devices_per_node
from msopt.launch.hccl import VARIABLES, node_facts, plan_specs
from msopt.launch.placement import planned_nodes
from msopt.launch.render import Candidate, LaunchSpec
from msopt.metrics import fitness_text
from msopt.report.data import BEST_COMMAND_JSON, BEST_COMMAND_SH, BEST_CONFIG_JSON, RunData
from msopt.run.store import atomic_write, dumps

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def server_env(env: Mapping[Any, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` split into the server's variables and the benchmark's load (the CONCURRENCY and
    REQUESTRATE fields of the original tool, ``config_position = "env"``): a load is the client's
    setting, never the server's, so the exported launch does not export it (issue 25)."""
    load = (CONCURRENCY_FIELD, REQUEST_RATE_FIELD)
    items = {str(k): str(v) for k, v in env.items()}
    return ({k: v for k, v in items.items() if k not in load}, {k: v for k, v in items.items() if k in load})


def _load_note(load: Mapping[str, str]) -> list[str]:
    return [f"benchmark load, not the server's: {', '.join(f'{k}={v}' for k, v in load.items())} (give it to "
            "the client, e.g. vllm bench serve --max-concurrency / --request-rate)"] if load else []


def planned(config: Config, specs: Sequence[LaunchSpec]) -> list[LaunchSpec]:
    """``specs`` with the HCCL port plan a trial of this run applies (msopt/launch/hccl.py): the simulated
    hardware and model's facts, else this node's (npu-smi, the CANN toolkit, the model's config.json)."""
    if not any(v in s.env for s in specs for v in VARIABLES):
        return list(specs)
    engine = get_engine(config.engine.name)
    facts = (SimRunner(config, engine, RunnerContext()).port_facts(specs[0]) if config.run.simulate
             else node_facts(specs[0].model))
    return plan_specs(specs, config.engine.section.table, config.engine.fields, facts)


def launch_port(config: Config) -> int:
    """The port a user's server should listen on, as the engine adapter reads it from its section."""
    return get_engine(config.engine.name).launch_port(config.engine.section.table)


def _comment(text: str) -> str:
    """One shell comment line: control characters (newlines above all) become spaces."""
    return "# " + "".join(c if c.isprintable() else " " for c in text)


def shell_script(argv: Sequence[str], env: Mapping[str, str], *, notes: Sequence[str] = (),
                 unset: Sequence[str] = ()) -> str:
    """A ``#!/bin/sh`` script that exports ``env`` and execs ``argv``, every item shell-quoted.

    Variables whose names a shell cannot export are left out (they are in best_command.json).
    """
    lines = ["#!/bin/sh", *(_comment(n) for n in notes)]
    skipped = [k for k in env if not _ENV_NAME.fullmatch(k)]
    if skipped:
        lines.append(_comment(f"{len(skipped)} environment variable(s) whose names sh cannot export "
                              f"are listed in {BEST_COMMAND_JSON}"))
    lines += [f"unset {v}" for v in unset if _ENV_NAME.fullmatch(v)]
    for k, v in env.items():
        if _ENV_NAME.fullmatch(k):
            lines.append(f"export {k}={shlex.quote(str(v))}")
    lines.append("exec " + " ".join(shlex.quote(str(a)) for a in argv))
    return "\n".join(lines) + "\n"


#: The rendezvous port an exported multi-node launch uses (vLLM's --master-port default).
EXPORT_RENDEZVOUS_PORT = 29501


def _node_script(argv: Sequence[str], env: Mapping[str, str], names: Sequence[str], notes: Sequence[str],
                 unset: Sequence[str] = ()) -> str:
    """:func:`shell_script` where the node addresses ``names`` become ``$NODE<r>_IP`` variables the
    user sets (the script refuses to run without them)."""
    used = [n for n in names if any(n in str(a) for a in [*argv, *env.values()])]
    lines = ["#!/bin/sh", *(_comment(n) for n in notes)]
    lines += [f': "${{{n}:?set {n} to the IP address of node {n[4:-3]}}}"' for n in used]
    lines += [f"unset {v}" for v in unset if _ENV_NAME.fullmatch(v)]
    lines += [f"export {k}={_quote(str(v), names)}" for k, v in env.items() if _ENV_NAME.fullmatch(k)]
    lines.append("exec " + " ".join(_quote(str(a), names) for a in argv))
    return "\n".join(lines) + "\n"


def _devices_per_node(config: Config) -> int | None:
    """The node size an exported trial is split by: ``[cluster] devices_per_node`` (a simulated run: else
    its hardware's)."""
    return simulated_devices_per_node(config) if config.run.simulate else config.cluster.devices_per_node


def _export_nodes(config: Config, values: Mapping[str, Any], out: Path, port: int, head: list[str]) -> list[Path]:
    """Per-node launch files of a configuration whose trials span nodes (none for one node)."""
    engine = config.engine.name
    section = config.engine.section.table
    ips = section.get("device_ips")
    nodes = planned_nodes(explicit_devices(config), _devices_per_node(config),
                          [str(k) for k in ips] if isinstance(ips, Mapping) else None)
    if not nodes:
        return []
    adapter = get_engine(engine)
    specs = planned(config, adapter.render_nodes(Candidate(values, config.engine.fields, section), port=port,
                                                 nodes=nodes, rendezvous_port=EXPORT_RENDEZVOUS_PORT,
                                                 workdir=Path(".")))
    names = [n.address for n in nodes if n.address.startswith("NODE")]
    written: list[Path] = []
    record_nodes = []
    for node, spec in zip(nodes, specs, strict=True):
        files: dict[str, str] = {}
        for target, doc in spec.files.items():
            name = Path(target).name
            if isinstance(doc, Mapping) and "BackendConfig" in doc:
                name = BEST_CONFIG_JSON if node.rank == 0 else f"best_config_node{node.rank}.json"
            path = out / name
            atomic_write(path, (dumps(doc, indent=2) + "\n").encode("utf-8"))
            if path not in written:
                written.append(path)
            files[str(target)] = name
        sh = out / (BEST_COMMAND_SH if node.rank == 0 else f"best_command_node{node.rank}.sh")
        notes = [*head, f"node {node.rank} of {len(nodes)}" + (" (the leader: clients and the benchmark talk to it)"
                                                                if node.rank == 0 else "")]
        if files:
            notes.append("files: " + ", ".join(f"{v} -> {k}" for k, v in files.items()))
            marked = [v for k, v in files.items() if any(n in dumps(spec.files[k]) for n in names)]
            if marked:
                notes.append(f"in {', '.join(marked)} replace {', '.join(names)} by the nodes' IP addresses "
                             "(and add each NPU's device_ip, hccn_tool -i N -ip -g, or set [mindie] device_ips)")
        env, load = server_env(spec.env)
        notes += _load_note(load)
        atomic_write(sh, _node_script([str(a) for a in spec.argv], env, names, notes, spec.unset_env).encode("utf-8"),
                     mode=0o755)
        written.append(sh)
        record_nodes.append({"rank": node.rank, "address": node.address, "devices": list(node.devices),
                             "argv": [str(a) for a in spec.argv], "env": env, "files": files, "script": sh.name,
                             **({"unset": list(spec.unset_env)} if spec.unset_env else {})})
    record = {"engine": engine, "port": port, "values": dict(values), "nodes": record_nodes,
              "rendezvous_port": EXPORT_RENDEZVOUS_PORT, "argv": record_nodes[0]["argv"],
              "env": record_nodes[0]["env"], "files": record_nodes[0]["files"]}
    atomic_write(out / BEST_COMMAND_JSON, (dumps(record, indent=2) + "\n").encode("utf-8"))
    return [out / BEST_COMMAND_SH, out / BEST_COMMAND_JSON, *(p for p in written if p.name != BEST_COMMAND_SH)]


def _quote(text: str, names: Sequence[str]) -> str:
    """Shell-quote ``text``; node-address placeholders in it become ``${NODE<r>_IP}``."""
    if not any(n in text for n in names):
        return shlex.quote(text)
    escaped = "".join("\\" + c if c in '\\"$`' else c for c in text)
    for n in names:
        escaped = escaped.replace(n, "${" + n + "}")
    return '"' + escaped + '"'


def pd_script(launch: Any, notes: Sequence[str], node: int = 0, names: Sequence[str] = ()) -> str:
    """A ``#!/bin/sh`` script that starts the prefill and decode instances placed on ``node`` in the
    background and, on node 0, the router in the foreground (else it waits); leaving it stops them all.
    Node addresses named in ``names`` are read from ``$NODE<r>_IP``."""
    lines = ["#!/bin/sh", *(_comment(n) for n in notes)]
    used = [n for n in names if n in " ".join(str(a) for s in (*launch.instances, launch.router)
                                             for a in s.argv)]
    lines += [f': "${{{n}:?set {n} to the IP address of node {n[4:-3]}}}"' for n in used]
    if launch.note:  # the engine's deployment cannot run on one host: say so, and stop before any launch
        lines += [_comment(launch.note), 'echo "see the comment at the top of $0" >&2', "exit 2"]
    lines.append("trap 'kill 0' EXIT INT TERM")
    where = launch.nodes or tuple(0 for _ in launch.instances)
    roles = [("prefill", i, s) for i, s in enumerate(launch.prefill)]
    roles += [("decode", i, s) for i, s in enumerate(launch.decode)]
    for (role, i, spec), r in zip(roles, where, strict=True):
        if r != node:
            continue
        env = " ".join([*(f"-u {v}" for v in spec.unset_env if _ENV_NAME.fullmatch(v)),
                        *(f"{k}={_quote(str(v), names)}" for k, v in server_env(spec.env)[0].items()
                          if _ENV_NAME.fullmatch(k))])
        lines.append(_comment(f"{role} instance {i}"))
        lines.append((f"env {env} " if env else "") + " ".join(_quote(str(a), names) for a in spec.argv) + " &")
    if node == 0:
        extra = [("the controller: assigns the instances their roles", launch.controller, " &")] \
            if launch.controller is not None else []
        for what, spec, tail in (*extra, ("the router: clients and benchmarks talk to it", launch.router, "")):
            env = " ".join(f"{k}={_quote(str(v), names)}" for k, v in spec.env.items() if _ENV_NAME.fullmatch(k))
            lines.append(_comment(what))
            lines.append((f"env {env} " if env else "") + " ".join(_quote(str(a), names) for a in spec.argv) + tail)
    else:
        lines.append("wait")
    return "\n".join(lines) + "\n"


def _export_pd(config: Config, values: Mapping[str, Any], out: Path, port: int, head: list[str]) -> list[Path]:
    """best_command.sh/.json of a prefill/decode-disaggregated configuration (none otherwise)."""
    engine = config.engine.name
    section = config.engine.section.table
    if "pd" not in section:
        return []
    devices = config.cluster.trial.device_ids()
    nodes = planned_nodes(explicit_devices(config), _devices_per_node(config))
    names = [n.address for n in nodes]
    # the router on the launch port, instances on the ports after it, bootstrap ports after those
    ports = [port + 1 + i for i in range(256)]
    candidate = Candidate(values, config.engine.fields, section)
    launch = get_engine(engine).render_pd(candidate, ports=[*ports[:-1], port], devices=devices, workdir=Path("."),
                                          nodes=nodes)
    n = len(launch.prefill) + len(launch.decode)
    if launch.router.port != port:  # the router takes the first port left: give it the launch port
        ports = [port + 1 + i for i in range(n + len(launch.prefill))] + [port]
        launch = get_engine(engine).render_pd(candidate, ports=ports, devices=devices, workdir=Path("."), nodes=nodes)
    launch = launch.with_instances(planned(config, launch.instances))  # the HCCL port plan, as a trial's
    notes = [*head, f"prefill/decode disaggregated: {len(launch.prefill)} prefill + {len(launch.decode)} decode "
             f"instance(s) and the router on port {launch.router.port}"]
    record = {"engine": engine, "deployment": "pd", "port": launch.router.port, "values": dict(values),
              **{role: [{"argv": [str(a) for a in s.argv], "env": server_env(s.env)[0],
                         "port": s.port, **({"unset": list(s.unset_env)} if s.unset_env else {})} for s in specs]
                 for role, specs in (("prefill", launch.prefill), ("decode", launch.decode))},
              "router": {"argv": [str(a) for a in launch.router.argv], "port": launch.router.port,
                         **({"env": server_env(launch.router.env)[0]} if launch.router.env else {})},
              "argv": [str(a) for a in launch.router.argv], "env": {}, "files": {}}
    record["nodes"] = list(launch.nodes)
    written = [out / BEST_COMMAND_SH, out / BEST_COMMAND_JSON]
    roles = [*(("prefill", s) for s in launch.prefill), *(("decode", s) for s in launch.decode),
             ("router", launch.router), *([("controller", launch.controller)] if launch.controller else [])]
    files: dict[str, str] = {}
    for role, spec in roles:  # each process's own files (MindIE's config.json per instance, ...), as rendered
        for target, doc in spec.files.items():
            rel = Path(target) if not Path(target).is_absolute() else Path(role) / Path(target).name
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            atomic_write(out / rel, (dumps(doc, indent=2) + "\n").encode("utf-8"))
            files[str(target)] = str(rel)
            written.append(out / rel)
    record["files"] = files
    if launch.controller is not None:
        record["controller"] = {"argv": [str(a) for a in launch.controller.argv],
                                "env": server_env(launch.controller.env)[0]}
    if launch.note:
        record["note"] = launch.note
    for r in range(max(1, len(nodes))):
        sh = out / (BEST_COMMAND_SH if r == 0 else f"best_command_node{r}.sh")
        node_notes = notes + ([f"node {r} of {len(nodes)}"] if len(nodes) > 1 else [])
        atomic_write(sh, pd_script(launch, node_notes, r, names).encode("utf-8"), mode=0o755)
        if r:
            written.append(sh)
    atomic_write(out / BEST_COMMAND_JSON, (dumps(record, indent=2) + "\n").encode("utf-8"))
    return written


def export_best(config: Config, values: Mapping[str, Any], run_dir: str | Path, *,
                eval_id: Any = None, fitness: Any = None) -> list[Path]:
    """Render ``values`` with the engine adapter and write the ready-to-use files into ``run_dir``.

    Returns the paths written: best_command.sh, best_command.json and, for an engine configured
    through a file (MindIE), best_config.json. When a trial spans nodes (``[cluster]
    devices_per_trial`` over ``devices_per_node``), best_command.sh is node 0's launch and
    best_command_node<r>.sh node r's, each reading the nodes' addresses from ``$NODE<r>_IP``;
    MindIE adds best_config_node<r>.json and the rank table; best_command.json lists every node.

    Raises:
        MsoptError: the values cannot be rendered (the configuration changed since the run, ...).
        StoreError: a file cannot be written.
    """
    out = Path(run_dir)
    engine = config.engine.name
    port = launch_port(config)
    adapter = get_engine(engine)
    head = [f"msopt: the best configuration of run {out.name} ({engine}"
            + (f", eval {eval_id}" if eval_id is not None else "")
            + (f", fitness {fitness_text(fitness, '.6g')}" if isinstance(fitness, (int, float)) else "") + ")"]
    multi = _export_pd(config, values, out, port, head) or _export_nodes(config, values, out, port, head)
    if multi:  # a trial spans nodes: one script (and config) per node, node 0's under the usual names
        return multi
    candidate = Candidate(values, config.engine.fields, config.engine.section.table)
    (spec,) = planned(config, [adapter.render(candidate, port=port)])
    argv = [str(a) for a in spec.argv]
    env, load = server_env(spec.env)
    written: list[Path] = []
    files = {str(k): v for k, v in spec.files.items()}
    notes = list(head)
    if files:
        target, doc = next(iter(files.items()))
        atomic_write(out / BEST_CONFIG_JSON, (dumps(doc, indent=2) + "\n").encode("utf-8"))
        written.append(out / BEST_CONFIG_JSON)
        where = adapter.export_target(config.engine.section.table, target)
        notes.append(f"{engine} reads its configuration from {where}: install {BEST_CONFIG_JSON} "
                     "there (back up the original) before running this script")
    notes += _load_note(load)
    record = {"engine": engine, "argv": argv, "env": env, "benchmark_load": load, "port": port, "values": dict(values),
              **({"unset": list(spec.unset_env)} if spec.unset_env else {}),
              "files": {t: BEST_CONFIG_JSON for t in list(files)[:1]}, "eval_id": eval_id,
              "fitness": fitness}
    atomic_write(out / BEST_COMMAND_SH, shell_script(argv, env, notes=notes, unset=spec.unset_env).encode("utf-8"),
                 mode=0o755)
    atomic_write(out / BEST_COMMAND_JSON, (dumps(record, indent=2) + "\n").encode("utf-8"))
    written[:0] = [out / BEST_COMMAND_SH, out / BEST_COMMAND_JSON]
    return written


def export_run_best(data: RunData) -> list[Path]:
    """:func:`export_best` for the run's best.json (nothing when the run has no best)."""
    if not data.best or not isinstance(data.best.get("values"), dict):
        return []
    return export_best(data.config, data.best["values"], data.run_dir,
                       eval_id=data.best.get("eval_id"), fitness=data.best.get("fitness"))
