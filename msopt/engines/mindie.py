"""MindIE: edit ``conf/config.json`` (dotted paths) and start ``mindieservice_daemon``.

The edited configuration travels in ``LaunchSpec.files`` as ``{config_path: json object}``; the
process layer writes it (backing up the original) just before the launch. Field values only
ever become JSON values at fixed keys of that one file: no value is used as a path.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from msopt.checks import is_int
from msopt.engines.base import (
    ENGINES,
    UNPLACED,
    EngineAdapter,
    LaunchSpec,
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
from msopt.errors import ConfigError
from msopt.space.fields import FieldDecl

#: The built-in minimal config.json, used when ``[mindie] config_path`` is not set (simulation).
TEMPLATE_PATH = Path(__file__).with_name("mindie_config.json")

PORT_PATH = ("ServerConfig", "port")
HOST_PATH = ("ServerConfig", "ipAddress")
MODEL_CONFIG = ("BackendConfig", "ModelDeployConfig", "ModelConfig", 0)


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


def _coerce(value: Any, old: Any) -> Any:
    """The value as the JSON type already at that key, where the conversion loses nothing."""
    if isinstance(old, bool) and not isinstance(value, bool) and value in (0, 1):
        return bool(value)
    if is_int(old) and isinstance(value, float) \
            and value.is_integer():
        return int(value)
    if isinstance(old, float) and is_int(value):
        return float(value)
    return value


def set_path(doc: Any, path: Sequence[str | int], value: Any, decl: FieldDecl | None = None) -> None:
    """Set ``doc[path] = value``; walking into a non-container or past a list's end is an error.

    The last key of an object may be new; every key before it must exist.
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
            if key not in node and not last:
                raise fail(f"{here} has no key {key!r}")
        else:
            raise fail(f"{here} is a {type(node).__name__} ({node!r}), not an object or a list")
        if last:
            old = node[key] if isinstance(node, list) or key in node else None  # type: ignore[index]
            node[key] = _coerce(value, old)
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


def load_config(section: Mapping[str, Any], *, missing_ok: bool = False) -> tuple[dict[str, Any], str | None]:
    """The original config.json (or the built-in template) and its path (None: template).

    ``missing_ok``: a config_path that does not exist on this machine gives the template (the
    configuration is checked here and launched elsewhere; ``msopt preflight`` checks the file).
    """
    raw = section.get("config_path")
    if raw in (None, ""):
        return json.loads(TEMPLATE_PATH.read_text(encoding="utf-8")), None
    if not isinstance(raw, str):
        raise ConfigError(f"[mindie] 'config_path' must be a path string, got {raw!r}")
    path = Path(raw).expanduser()
    from msopt.engines.process import BACKUP_SUFFIX

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


class MindieAdapter(EngineAdapter):
    """MindIE Service: values go into config.json; env fields into the environment."""

    name = "mindie"
    health_path = "/v1/models"
    default_executable = ("mindieservice_daemon",)
    default_port = 1025

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

    def check(self, fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> None:
        """Check paths against the original config.json (or the template) without rendering."""
        doc, _ = load_config(section, missing_ok=True)
        command_table(section, self.name)
        wait_start_time(section, self.name)
        for decl in fields:
            if is_json_path(decl.config_position):
                set_path(copy.deepcopy(doc), parse_path(decl.config_position, decl), 0, decl)

    def render(
        self,
        values: Mapping[str, Any],
        fields: Sequence[FieldDecl],
        section: Mapping[str, Any],
        *,
        port: int,
        devices: Sequence[str] = (),
        workdir: Path | None = None,
    ) -> LaunchSpec:
        """Edit config.json with every dotted field, set the port, build the daemon's argv."""
        cmd = command_table(section, self.name)
        doc, path = load_config(section)
        if devices:
            # Ray remaps the visible NPUs, so the server addresses them as 0..n-1.
            set_path(doc, ("BackendConfig", "npuDeviceIds"), [list(range(len(devices)))])
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

        env = env_fields(values, fields, section, self.name)
        config_env = section.get("config_env")
        if config_env and workdir is not None:
            # The server reads a private copy named by this variable; the original stays as it is.
            target = str(Path(workdir) / "config.json")
            env[str(config_env)] = target
        elif path is not None:
            target = path
        else:
            target = str(Path(workdir) / "config.json") if workdir is not None else "config.json"
        argv = executable(cmd, self.default_executable, self.name, values)
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
        )


ENGINES.register("mindie", MindieAdapter)
