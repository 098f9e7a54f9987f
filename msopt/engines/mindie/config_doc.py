"""MindIE's config.json as a document: its keys and their types, dotted paths into it, and where the file is
found (``[mindie] config_path``, ``$MIES_CONFIG_JSON_PATH``, the installation)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from msopt.checks import is_int, is_number
from msopt.engines.mindie.install import (
    installed_config,
)
from msopt.errors import ConfigError, EvaluationError
from msopt.launch.files import BACKUP_SUFFIX
from msopt.launch.render import UNPLACED
from msopt.registry import close_matches
from msopt.space.fields import FieldDecl

#: The built-in minimal config.json, used when ``[mindie] config_path`` is not set (simulation).
TEMPLATE_PATH = Path(__file__).with_name("config.json")

PORT_PATH = ("ServerConfig", "port")
HOST_PATH = ("ServerConfig", "ipAddress")
MANAGEMENT_PORT = ("ServerConfig", "managementPort")
METRICS_PORT = ("ServerConfig", "metricsPort")
MANAGEMENT_HOST = ("ServerConfig", "managementIpAddress")
INFER_MODE = ("ServerConfig", "inferMode")
MULTI_NODE_PORT = ("BackendConfig", "multiNodesInferPort")
MODEL_CONFIG = ("BackendConfig", "ModelDeployConfig", "ModelConfig", 0)
HTTPS_PATH = ("ServerConfig", "httpsEnabled")
DEVICE_IDS = ("BackendConfig", "npuDeviceIds")
INSTANCES = ("BackendConfig", "modelInstanceNumber")
MULTI_NODE = ("BackendConfig", "multiNodesInferEnabled")
INTER_NODE_TLS = ("BackendConfig", "interNodeTLSEnabled")
#: The variable naming the config.json MindIE reads, which each trial points at its own copy by default:
#: the daemon reads ``--config-file``, else ``$MIES_CONFIG_JSON_PATH``, else ``<home>/conf/config.json``
#: (MindIE-LLM 8b4871a src/utils/common_util.cpp:264-282), and re-reads that file whenever its mtime
#: changes, every 10 s (config_manager_impl.cpp:351-372), so trials sharing one file change each other.
DEFAULT_CONFIG_ENV = "MIES_CONFIG_JSON_PATH"
#: Variables a one-node trial sets empty, which MindIE reads as unset, so that values inherited from the shell do
#: not reach it: ``MIES_CONTAINER_IP`` / ``MIES_CONTAINER_MANAGEMENT_IP`` replace ``ipAddress`` /
#: ``managementIpAddress`` when not empty (MindIE-LLM 8b4871a server_config.cpp:618-636; src/utils/env_util.cpp:58-62
#: reads an unset variable as ""), while msopt polls the file's address; ``RANK_TABLE_FILE`` is read by ATB even on
#: one node (atb_llm/utils/env.py:74, default ""; models/base/flash_causal_lm.py:344-370), and MindIE's manual says
#: to unset it there ("单机推理建议取消该环境变量", prefill_decode_mixed_deployment.md:337). A trial over nodes sets
#: all three per node (:meth:`MindieAdapter.render_nodes`); ``[mindie.env]`` or an env field wins.
CLEARED_ENV = ("MIES_CONTAINER_IP", "MIES_CONTAINER_MANAGEMENT_IP", "RANK_TABLE_FILE")
#: the rank table file name msopt writes next to the config of a trial that spans nodes
RANK_TABLE = "rank_table_file.json"

#: Keys MindIE reads, by the object that holds them ("*": every element of a list), with the
#: JSON type it checks. MindIE-LLM 8b4871a (master, 2026-04-23): the ParamSpec tables of
#: src/config_manager/server_config.cpp, backend_config.cpp, schedule_config.cpp and
#: model_deploy_config.cpp; ModelConfig's parallel keys are read by atb_models
#: (examples/atb_models/atb_llm/utils/mapping.py), which MindIE passes them to as integers. A key
#: that is in the user's own config.json is known too. Any other key is refused: MindIE ignores it
#: silently, so a typo would tune nothing.
KNOWN_KEYS: Mapping[tuple[str, ...], Mapping[str, str]] = MappingProxyType({
    ("ServerConfig",): MappingProxyType({
        "ipAddress": "string", "managementIpAddress": "string", "port": "int32_t", "managementPort": "int32_t",
        "maxLinkNum": "uint32_t", "httpsEnabled": "bool", "tlsCert": "string", "tlsCrlPath": "string",
        "tlsCrlFiles": "array", "tlsCaPath": "string", "tlsCaFile": "array", "tlsPk": "string",
        "managementTlsCert": "string", "managementTlsCrlPath": "string", "managementTlsCrlFiles": "array",
        "managementTlsCaFile": "array", "managementTlsPk": "string", "metricsTlsCert": "string",
        "metricsTlsCrlPath": "string", "metricsTlsCrlFiles": "array", "metricsTlsCaFile": "array",
        "metricsTlsPk": "string", "fullTextEnabled": "bool", "HealthCheckConfig": "object",
        "interCommTLSEnabled": "bool", "interCommPort": "int32_t", "inferMode": "string",
        "allowAllZeroIpListening": "bool", "openAiSupport": "string",
        "metricsPort": "int32_t", "tokenTimeout": "int32_t", "e2eTimeout": "int32_t",
        "maxRequestLength": "uint32_t", "distDPServerEnabled": "bool", "maxJsonDepth": "uint32_t",
        "layerwiseDisaggregated": "bool", "layerwiseDisaggregatedRoleType": "string",
        "layerwiseDisaggregatedMasterIpAddress": "string", "layerwiseDisaggregatedSlaveIpAddress": "array",
        "layerwiseDisaggregatedDataPort": "int32_t", "layerwiseDisaggregatedCrtlPort": "array"}),
    # ServerConfig's interCommTLSEnabled and interCommPort are read by LoadOptionalParameters
    # (server_config.cpp:342-349), outside the ParamSpec table.
    # server_config.cpp:332-338 reads npuUsageThreshold from here only; the top-level
    # ServerConfig.npuUsageThreshold of its ParamSpec table (line 50) is type-checked and never read.
    ("ServerConfig", "HealthCheckConfig"): MappingProxyType({"npuUsageThreshold": "uint32_t"}),
    ("BackendConfig",): MappingProxyType({
        "backendName": "string", "tokenizerProcessNumber": "uint32_t", "multiNodesInferEnabled": "bool",
        "multiNodesInferPort": "int32_t", "interNodeTLSEnabled": "bool", "interNodeTlsCaPath": "string",
        "interNodeTlsCert": "string", "interNodeTlsPk": "string", "modelInstanceNumber": "uint32_t",
        "npuDeviceIds": "array", "ScheduleConfig": "object", "ModelDeployConfig": "object",
        "interNodeTlsCaFiles": "array", "interNodeTlsCrlFiles": "array", "interNodeTlsCrlPath": "string",
        "kvPoolConfig": "object", "layerwiseDisaggregated": "object"}),
    ("BackendConfig", "ModelDeployConfig"): MappingProxyType({
        "maxSeqLen": "uint32_t", "maxInputTokenLen": "uint32_t", "maxLoras": "uint32_t",
        "maxLoraRank": "uint32_t", "ModelConfig": "array"}),
    ("BackendConfig", "ModelDeployConfig", "ModelConfig", "*"): MappingProxyType({
        "cpuMemSize": "uint32_t", "modelWeightPath": "string", "modelName": "string", "npuMemSize": "int32_t",
        "worldSize": "uint32_t", "backendType": "string", "modelInstanceType": "string",
        "pluginParams": "string", "trustRemoteCode": "bool",
        "tp": "int32_t", "dp": "int32_t", "pp": "int32_t", "sp": "int32_t", "cp": "int32_t",
        "moe_tp": "int32_t", "moe_ep": "int32_t", "plugin_params": "string", "models": "object"}),
    ("BackendConfig", "ScheduleConfig"): MappingProxyType({
        "templateName": "string", "templateType": "string", "cacheBlockSize": "uint32_t",
        "decodePolicyType": "uint32_t", "decodeTimeMsPerReq": "uint32_t", "maxBatchSize": "uint32_t",
        "maxPreemptCount": "uint32_t", "maxPrefillTokens": "uint32_t", "maxIterTimes": "uint32_t",
        "maxPrefillBatchSize": "uint32_t", "maxQueueDelayMicroseconds": "uint32_t",
        "prefillPolicyType": "uint32_t", "prefillTimeMsPerReq": "uint32_t", "supportSelectBatch": "bool",
        "stageSelectPolicy": "uint32_t", "dynamicBatchSizeEnable": "bool", "enablePrefixCache": "bool",
        "enableSplit": "bool", "enablChunkedPrefill": "bool", "policyType": "uint32_t", "splitType": "bool",
        "splitStartType": "bool", "splitChunkTokens": "uint32_t", "splitStartBatchSize": "uint32_t",
        "prefillExpectedTime": "uint32_t", "decodeExpectedTime": "uint32_t", "bufferResponseEnabled": "bool",
        "distributedEnable": "bool", "maxFirstTokenWaitTime": "uint32_t", "maxN": "uint32_t",
        "layerwiseDisaggregated": "object"}),
})
INTEGER_TYPES = ("uint32_t", "int32_t")
#: Keys MindIE accepts in one place but reads in another: ``path -> where it is read``.
MOVED_KEYS: Mapping[tuple[str, ...], str] = MappingProxyType({
    ("ServerConfig", "npuUsageThreshold"): "ServerConfig.HealthCheckConfig.npuUsageThreshold",
})


def key_table(path: Sequence[str | int]) -> Mapping[str, str] | None:
    """The known keys of the object at ``path`` (list indices match "*"), None when not tabled."""
    pattern = tuple("*" if isinstance(p, int) else str(p) for p in path)
    return KNOWN_KEYS.get(pattern)


def key_type(path: Sequence[str | int]) -> str | None:
    """The JSON type MindIE checks at ``path`` (a full path, last item the key), None: not tabled."""
    table = key_table(path[:-1])
    return table.get(str(path[-1])) if table is not None else None


def is_json_path(position: str) -> bool:
    """True for a dotted config.json path (not ``env``, not a flag, not unplaced)."""
    return position != "env" and position not in UNPLACED and not position.startswith("-")


def parse_path(position: str, decl: FieldDecl | None = None) -> tuple[str | int, ...]:
    """``A.B.0.c`` -> ("A", "B", 0, "c"); an all-digit component is a list index."""
    parts = position.split(".")
    if any(p == "" for p in parts):
        msg = f"config_position {position!r} has an empty component"
        fix = "write a dotted path such as \"BackendConfig.ScheduleConfig.maxBatchSize\""
        if decl is not None:
            raise decl.error(msg, fix)
        raise ConfigError(f"{msg}; {fix}")
    return tuple(int(p) if p.isdigit() else p for p in parts)


def _coerce(value: Any, old: Any, kind: str | None) -> Any:
    """The value as the JSON type MindIE checks at that key (or the one already there), where the
    conversion loses nothing; raises ValueError (the rule broken) where it would."""
    is_num = is_number(value)
    if kind == "bool" or (kind is None and isinstance(old, bool)):
        if is_num and value in (0, 1):
            return bool(value)
        return value
    if kind in INTEGER_TYPES or (kind is None and isinstance(old, int) and not isinstance(old, bool)):
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError(f"MindIE reads it as an integer ({kind or 'int'}), got {value!r}")
            value = int(value)
        if kind == "uint32_t" and is_num and value < 0:
            raise ValueError(f"MindIE reads it as an unsigned integer (uint32_t), got {value!r}")
        return value
    if isinstance(old, float) and is_num:
        return float(value)
    return value


def set_path(doc: Any, path: Sequence[str | int], value: Any, decl: FieldDecl | None = None) -> None:
    """Set ``doc[path] = value``; walking into a non-container or past a list's end is an error.

    Every key before the last must exist; the last may be new only where MindIE reads it
    (:data:`KNOWN_KEYS`): an unknown key is an error with the close matches. A number goes in as
    the JSON type MindIE checks there (an integral float becomes an int where MindIE wants an
    integer; a fractional one is an error).
    """
    dotted = ".".join(str(p) for p in path)

    def fail(rule: str) -> ConfigError:
        fix = "fix the field's config_position to match MindIE's config.json"
        if decl is not None:
            return decl.error(f"config_position {dotted!r}: {rule}", fix)
        return ConfigError(f"config.json path {dotted!r}: {rule}; {fix}")

    node = doc
    for i, key in enumerate(path):
        last = i == len(path) - 1
        here = ".".join(str(p) for p in path[:i]) or "the top level"
        if isinstance(node, list):
            if not isinstance(key, int):
                raise fail(f"{here} is a list; index it with a number, not {key!r}")
            if key >= len(node):
                raise fail(f"index {key} is out of range at {here} (length {len(node)})")
        elif isinstance(node, dict):
            key = str(key)
            table = key_table(path[:i])
            moved = MOVED_KEYS.get(tuple(str(p) for p in path[:i + 1]))
            if moved is not None and last:
                raise fail(f"MindIE does not read {key!r} at {here} (MindIE-LLM 8b4871a server_config.cpp:332-338); "
                           f"use {moved!r}")
            if key not in node and (not last or table is None or key not in table):
                known = sorted(set(node) | set(table or ()))
                hint = close_matches(key, known)
                did = f"did you mean {hint[0]!r}?" if hint else f"known keys: {', '.join(known)}"
                raise fail(f"{here} has no key {key!r} (MindIE ignores unknown keys); {did}")
        else:
            raise fail(f"{here} is a {type(node).__name__} ({node!r}), not an object or a list")
        if last:
            old = node[key] if isinstance(node, list) or key in node else None  # type: ignore[index]
            try:
                node[key] = _coerce(value, old, key_type(path))
            except ValueError as exc:
                raise fail(str(exc)) from None
        else:
            node = node[key]


def get_path(doc: Any, path: Sequence[str | int], default: Any = None) -> Any:
    """``doc[path]``, or ``default`` when any step is missing."""
    node = doc
    for key in path:
        try:
            node = node[key if isinstance(node, list) else str(key)]
        except (KeyError, IndexError, TypeError):
            return default
    return node


def config_env(section: Mapping[str, Any]) -> str | None:
    """The variable that points each trial's server at its private config.json (``[mindie] config_env``,
    default :data:`DEFAULT_CONFIG_ENV`); None: ``config_env = false``, trials edit ``config_path`` in place.

    Raises:
        ConfigError: neither false nor an environment variable name.
    """
    raw = section.get("config_env", DEFAULT_CONFIG_ENV)
    if raw is False or raw == "":
        return None
    if not isinstance(raw, str) or not raw.replace("_", "a").isalnum() or raw[0].isdigit():
        raise ConfigError(f"[mindie] 'config_env' must be an environment variable name (default "
                          f"\"{DEFAULT_CONFIG_ENV}\") or false, got {raw!r}")
    return raw


def load_config(section: Mapping[str, Any], *, missing_ok: bool = False) -> tuple[dict[str, Any], str | None]:
    """The original config.json (or the built-in template) and its path (None: template).

    ``missing_ok``: a config_path that does not exist on this machine gives the template (the
    configuration is checked here and launched elsewhere; ``msopt preflight`` checks the file).
    """
    raw = section.get("config_path")
    if raw in (None, ""):
        raw = installed_config()  # the installed MindIE's, as the original found it without config_path
    if raw in (None, ""):
        return json.loads(TEMPLATE_PATH.read_text(encoding="utf-8")), None
    if not isinstance(raw, str):
        raise ConfigError(f"[mindie] 'config_path' must be a path string, got {raw!r}")
    path = Path(raw).expanduser()
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    source = backup if backup.exists() else path  # a run that died left its edit; start from the original
    if missing_ok and not source.exists():
        return json.loads(TEMPLATE_PATH.read_text(encoding="utf-8")), None
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"[mindie] config_path {str(path)!r}: cannot read it ({exc.strerror or exc}); "
                          "point config_path at MindIE's conf/config.json") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"[mindie] config_path {str(path)!r}: invalid JSON ({exc}); "
                          "restore the file from its backup") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"[mindie] config_path {str(path)!r}: not a JSON object")
    return doc, str(path)


def consistent_devices(doc: dict[str, Any], n_devices: int | None, world_from_field: bool, *,
                       ids_from_field: bool = False) -> None:
    """Make ``npuDeviceIds`` and ``worldSize`` agree, as MindIE requires (backend_config.cpp:
    "The size of npuDeviceIds (subset) does not equal to worldSize").

    With devices (a trial's actor): the server sees them renumbered 0..n-1 (Ray sets
    ASCEND_RT_VISIBLE_DEVICES), so the ids are 0..worldSize-1 and worldSize is n unless a field
    sets it. Without (the exported best configuration, the simulator): the file's ids are kept
    when every subset already has worldSize entries, else 0..worldSize-1 per model instance.
    Ids a field sets are kept (the start-up rules refuse them when they disagree).
    """
    model = get_path(doc, MODEL_CONFIG)
    if not isinstance(model, dict):  # a partial file: nothing to agree with but the devices
        if n_devices and not ids_from_field and isinstance(doc.get("BackendConfig"), dict):
            set_path(doc, DEVICE_IDS, [list(range(n_devices))])
        return
    world = model.get("worldSize")
    instances = get_path(doc, INSTANCES, 1)
    instances = instances if isinstance(instances, int) and not isinstance(instances, bool) and instances > 0 else 1
    if n_devices and not world_from_field:
        # the trial's devices hold every instance (MindIEAdapter.installed_devices: worldSize x instances)
        world = n_devices // instances if n_devices % instances == 0 else n_devices
    if isinstance(world, float) and world.is_integer():
        world = int(world)
    if not is_int(world) or world < 1:
        raise EvaluationError(f"MindIE ModelConfig[0].worldSize must be a positive integer, got {world!r}")
    model["worldSize"] = world
    ids = get_path(doc, DEVICE_IDS)
    keep = ids_from_field or (not n_devices and isinstance(ids, list) and len(ids) == instances
            and all(isinstance(s, list) and len(s) == world for s in ids))
    if not keep:
        set_path(doc, DEVICE_IDS, [list(range(i * world, (i + 1) * world)) for i in range(instances)])
