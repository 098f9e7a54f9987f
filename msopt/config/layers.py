"""The configuration files as data: reading one TOML file safely, merging the layers key by key (with
the file that set each key), resolving the relative paths a launch hands to a program, and writing the
effective configuration back as TOML. :mod:`msopt.config.settings` puts the layers together.
"""

from __future__ import annotations

import math
import os
import stat
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import tomli_w

from msopt.errors import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "MAX_DEPTH", "dump_toml", "freeze", "merge", "read_toml", "resolve_config_path",
           "resolve_launch_paths", "same_toml", "thaw"]

#: The largest configuration file read (a FIFO, a device or anything larger is refused).
MAX_CONFIG_BYTES = 1024 * 1024
#: How deep tables and arrays may nest in a configuration.
MAX_DEPTH = 16


def freeze(value: Any) -> Any:
    """Nested mappings and lists as read-only mappings and tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Deep-copy frozen settings data into plain dicts and lists."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def resolve_config_path(path: str | os.PathLike[str], cwd: str | os.PathLike[str] | None = None) -> Path:
    """Resolve ``-c``: absolute, relative to ``cwd``, or a bare name looked up in ``cwd``."""
    p = Path(os.path.expanduser(os.fspath(path)))
    if not p.is_absolute():
        p = Path(cwd) if cwd is not None else Path.cwd()
        p = p / os.path.expanduser(os.fspath(path))
    return p


def read_toml(path: Path, label: str = "config file") -> dict[str, Any]:
    """Read and parse one TOML file, every failure a one-line ConfigError naming the file."""
    denied = (f"{path}: cannot read the {label}: Permission denied; "
              "fix its permissions (chmod u+r) or run as its owner")
    try:
        is_dir = path.is_dir()
    except PermissionError:
        raise ConfigError(denied) from None
    except OSError:
        is_dir = False
    if not is_dir and not os.path.lexists(path):
        raise ConfigError(f"{path}: {label} not found; check the path (Custom config file not found)")
    if is_dir:
        raise ConfigError(f"{path}: is a directory, not a {label}; give the path of a .toml file")
    try:
        raw = _read_regular(path, label)
    except PermissionError:
        raise ConfigError(denied) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {label}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                          "save the file as UTF-8") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}; fix the syntax there") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None
    deepest = _depth(doc)
    if deepest > MAX_DEPTH:
        raise ConfigError(f"{path}: tables or arrays nested more than {MAX_DEPTH} levels deep, the most "
                          "accepted; flatten the configuration")
    return doc


def _read_regular(path: Path, label: str) -> bytes:
    """The bytes of a regular file of at most :data:`MAX_CONFIG_BYTES` (never a FIFO or a device,
    which could block or never end)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: not a regular file (a FIFO, a device or a socket); give the path of "
                              f"a .toml file as the {label}")
        data = os.read(fd, MAX_CONFIG_BYTES + 1)
        chunks = [data]
        while data and sum(map(len, chunks)) <= MAX_CONFIG_BYTES:
            data = os.read(fd, MAX_CONFIG_BYTES + 1)
            chunks.append(data)
        raw = b"".join(chunks)
    finally:
        os.close(fd)
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES // 1024} KiB, the most a {label} may hold; "
                          "give the configuration file itself")
    return raw


def _depth(doc: Any) -> int:
    """How deep tables and arrays nest in a parsed document (iterative: any depth is safe)."""
    deepest, stack = 0, [(doc, 0)]
    while stack:
        value, d = stack.pop()
        if isinstance(value, Mapping):
            children: Iterable[Any] = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            return d
        stack.extend((c, d + 1) for c in children)
    return deepest


def merge(base: dict[str, Any], top: Mapping[str, Any], source: str, origin: dict[str, str],
          prefix: str = "") -> None:
    """Merge the layer ``top`` (the file ``source``) into ``base``: tables key by key, anything else (an array
    of tables included) replaced whole; ``origin`` records the file that set each dotted key."""
    for key, value in top.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            origin.setdefault(dotted, source)
            merge(base[key], value, source, origin, dotted + ".")
        else:
            base[key] = thaw(value) if isinstance(value, (Mapping, list)) else value
            origin[dotted] = source
            _mark(value, source, origin, dotted + ".")


def _mark(value: Any, source: str, origin: dict[str, str], prefix: str) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            origin[f"{prefix}{k}"] = source
            _mark(v, source, origin, f"{prefix}{k}.")


def _relative(value: Any) -> bool:
    """A path a server would read against its own working directory: relative, no ``~`` (the
    home, expanded where it is launched), no ``{FIELD}`` placeholder (a value known per launch)."""
    return (isinstance(value, str) and value != "" and not os.path.isabs(value) and not value.startswith("~")
            and "{" not in value)


def _explicit(value: Any) -> bool:
    return _relative(value) and (value.startswith(("./", "../")) or value in (".", ".."))


def resolve_launch_paths(layer: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """``layer`` with the relative paths a launch hands to a program resolved against ``base``
    (the directory of the file that sets them), as ``[workload] trace`` is: each server and
    benchmark runs in its evaluation's own work directory, where a path written relative to the
    configuration file would name nothing.

    In every table's ``command`` table: ``executable``'s first item when it holds a ``/`` (a shell
    reads such a name as a path, any other as a program on ``PATH``) and any later item starting
    with ``./`` or ``../``; ``model`` when it starts with ``./`` or ``../``, or when it names a
    directory or file that exists under ``base`` (otherwise, such as ``Qwen/Qwen3-8B``, it is a
    Hugging Face id and stays as written). In every table: ``config_path`` (MindIE's config.json).
    """
    def resolve(value: str) -> str:
        return os.path.normpath(base / value)

    out: dict[str, Any] = dict(layer)
    for name, table in layer.items():
        if not isinstance(table, Mapping):
            continue
        new = dict(table)
        if _relative(table.get("config_path")):
            new["config_path"] = resolve(table["config_path"])
        cmd = table.get("command")
        if isinstance(cmd, Mapping):
            cmd = dict(cmd)
            exe = cmd.get("executable")
            if isinstance(exe, str):
                exe = [exe]
                if _relative(exe[0]) and "/" in exe[0]:
                    cmd["executable"] = resolve(exe[0])
            elif isinstance(exe, list) and exe:
                cmd["executable"] = [resolve(x) if _explicit(x) or (i == 0 and _relative(x) and "/" in x) else x
                                     for i, x in enumerate(exe)]
            model = cmd.get("model")
            if isinstance(model, str) and (_explicit(model) or (_relative(model) and (base / model).exists())):
                cmd["model"] = resolve(model)
            new["command"] = cmd
        if new != table:
            out[name] = new
    return out


def dump_toml(data: Mapping[str, Any]) -> str:
    """TOML text of nested mappings, written by tomli-w (any key, any string, datetimes).

    Raises:
        ConfigError: a value TOML cannot hold (None, an object), naming it.
    """
    try:
        return tomli_w.dumps(thaw(data))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"cannot write the effective configuration as TOML: {exc}") from None


def same_toml(a: Any, b: Any) -> bool:
    """Whether two parsed TOML documents are equal (NaN equal to NaN, int 1 unequal to float 1.0)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_toml(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_toml(x, y) for x, y in zip(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)
