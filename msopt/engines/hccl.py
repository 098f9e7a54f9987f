"""HCCL's ports per trial: disjoint host and NPU ranges for every trial on a node.

HCCL binds ports a second server on the node would collide with:

- host side, ``HCCL_IF_BASE_PORT`` (default 60000): CANN 8.2 and later reserve 32 ports from it (16
  before; CANN environment-variable reference, HCCL_IF_BASE_PORT, envref_07_0074), 1024..65520;
- host side, ``HCCL_HOST_SOCKET_PORT_RANGE`` (a port, ``a-b`` ranges, comma-separated, or ``auto``),
  which takes precedence over HCCL_IF_BASE_PORT (CANN 8.5.0 envref_07_0143, "Restrictions"), so
  one inherited from the user's shell would silently put every trial on the same ports;
- NPU side, ``HCCL_NPU_SOCKET_PORT_RANGE`` (same syntax), default port 16666: two servers sharing
  an NPU network fail with "listen on ip[...] and specific port[16666] fail" (vllm-ascend issues
  #11968 and #4725, hccl_socket.cc:106).

Each trial gets ``base + 32 × (its first physical device id)`` on both sides: trials on one node hold
disjoint devices, so their blocks never overlap, and every node of a multi-node trial takes its
own devices' block. The variables go into the server's environment, so they replace what the
user's environment holds; ``[<engine>.env]`` or an env field of the same name wins over msopt,
and an inherited ``auto`` (the OS picks, never a collision) is kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from msopt.checks import is_int
from msopt.errors import ConfigError
from msopt.space.fields import FieldDecl

#: Ports one trial's block spans (CANN >= 8.2: HCCL_IF_BASE_PORT reserves 32).
PORTS_PER_TRIAL = 32
HOST_DEFAULT_BASE = 60000
#: HCCL's NPU-side default port (vllm-ascend issue #11968).
NPU_DEFAULT_BASE = 16666
#: CANN: HCCL_IF_BASE_PORT is 1024..65520.
MAX_BASE = 65520
IF_BASE = "HCCL_IF_BASE_PORT"
HOST_RANGE = "HCCL_HOST_SOCKET_PORT_RANGE"
NPU_RANGE = "HCCL_NPU_SOCKET_PORT_RANGE"
VARIABLES = (IF_BASE, HOST_RANGE, NPU_RANGE)


def first_device(devices: Sequence[str]) -> int | None:
    """The lowest physical device id of ``devices``, None unless all are integers."""
    ids = [int(d) for d in devices if str(d).strip().isdigit()]
    return min(ids) if ids and len(ids) == len(devices) else None


def block(devices: Sequence[str], start: int) -> tuple[int, int] | None:
    """``(first, last)`` port of the trial's block from ``start``; None without integer ids or past 65535."""
    first = first_device(devices)
    if first is None:
        return None
    lo = start + PORTS_PER_TRIAL * first
    return (lo, lo + PORTS_PER_TRIAL - 1) if lo + PORTS_PER_TRIAL - 1 <= 65535 else None


def _start(section: Mapping[str, Any], key: str, default: int, engine: str) -> int | None:
    raw = section.get(key, default)
    if raw is False:
        return None
    if not is_int(raw) or not 1024 <= raw <= MAX_BASE:
        raise ConfigError(f"[{engine}] '{key}' must be a port from 1024 to {MAX_BASE} (or false), got {raw!r}")
    return int(raw)


def check_section(section: Mapping[str, Any], engine: str) -> None:
    """``hccl_base_port`` and ``hccl_npu_base_port`` of ``[<engine>]`` are ports or false."""
    _start(section, "hccl_base_port", HOST_DEFAULT_BASE, engine)
    _start(section, "hccl_npu_base_port", NPU_DEFAULT_BASE, engine)


def user_set(section: Mapping[str, Any], fields: Sequence[FieldDecl]) -> set[str]:
    """The HCCL variables ``[<engine>.env]`` or an env field sets (the user's choice wins)."""
    extra = section.get("env", {})
    out = {v for v in VARIABLES if isinstance(extra, Mapping) and v in extra}
    return out | {d.name for d in fields if d.config_position == "env" and d.name in VARIABLES}


def hccl_env(env: Mapping[str, str], section: Mapping[str, Any], devices: Sequence[str],
             fields: Sequence[FieldDecl], engine: str, inherited: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` with this trial's HCCL host and NPU port blocks (see the module docstring).

    Args:
        env: the rendered environment.
        section: ``[<engine>]``: ``hccl_base_port`` (default 60000) and ``hccl_npu_base_port``
            (default 16666), each a port or false.
        devices: the trial's physical device ids on this node.
        fields: the fields (an env field of a variable's name keeps it).
        engine: the section's name, for messages.
        inherited: the environment the server inherits (default: this process's).

    Raises:
        ConfigError: a start that is neither false nor a port from 1024 to 65520.
    """
    out = dict(env)
    inherited = os.environ if inherited is None else inherited
    mine = user_set(section, fields)
    host = _start(section, "hccl_base_port", HOST_DEFAULT_BASE, engine)
    npu = _start(section, "hccl_npu_base_port", NPU_DEFAULT_BASE, engine)
    if host is not None and IF_BASE not in mine:
        span = block(devices, host)
        if span is not None:
            out[IF_BASE] = str(span[0])
            if HOST_RANGE not in mine and inherited.get(HOST_RANGE, "").strip().lower() != "auto":
                out[HOST_RANGE] = f"{span[0]}-{span[1]}"
    if npu is not None and NPU_RANGE not in mine and inherited.get(NPU_RANGE, "").strip().lower() != "auto":
        span = block(devices, npu)
        if span is not None:
            out[NPU_RANGE] = f"{span[0]}-{span[1]}"
    return out


def lease_blocks(env: Mapping[str, str], lease: Any) -> None:
    """Hold the host and NPU blocks ``env`` names (``a-b`` ranges msopt rendered) in the trial's
    port ``lease`` (:meth:`msopt.engines.process.PortLease.hold`), so two trials can never run on one
    block: the host block must also be free here; NPU-side ports are bound on the NPUs' own network.

    Raises:
        EvaluationError: a port of a block is held by another trial, or a host port is in use.
    """
    for var, here in ((HOST_RANGE, True), (NPU_RANGE, False)):
        value = env.get(var, "")
        lo, sep, hi = value.partition("-")
        if sep and lo.isdigit() and hi.isdigit() and "," not in value:
            lease.hold(int(lo), int(hi), f"{var}={value}", bound_here=here)


def in_force(spec_env: Mapping[str, str], inherited: Mapping[str, str] | None = None) -> str:
    """One line for ``msopt preflight``: which HCCL port variables a launch has, and where from."""
    inherited = os.environ if inherited is None else inherited
    parts = []
    for var in VARIABLES:
        if var in spec_env:
            was = inherited.get(var)
            parts.append(f"{var}={spec_env[var]}" + (f" (replaces {was!r} from this environment)"
                                                      if was is not None and was != spec_env[var] else ""))
        elif var in inherited:
            parts.append(f"{var}={inherited[var]} (from this environment)")
    return "; ".join(parts) if parts else "no HCCL port variable set (HCCL's defaults: 60000-60031, NPU 16666)"
