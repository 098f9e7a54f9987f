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

The two range variables are not always allowed (:func:`range_plan`, applied by :func:`plan_env` with
the node's :class:`NodeFacts`):

- CANN 9.0 hcclenvref_07_0020 (HCCL_HOST_SOCKET_PORT_RANGE) and hcclenvref_07_0021
  (HCCL_NPU_SOCKET_PORT_RANGE), "使用约束": on Atlas A2 training and inference products, where the network
  has MC² fused compute-communication operators (AllGatherMatmul, MatmulReduceScatter,
  AlltoAllAllGatherBatchMatMul, ...), they are not supported. CANN 8.1.RC1 to 8.5 (envref_07_0143,
  envref_07_0144) say the same of Atlas A2 training products; npu-smi names the same 910B chips in a
  training and an inference server (ascend-ai-coding/awesome-ascend-skills issue #18), so msopt reads
  both as Atlas A2. An MoE model's expert all-to-all is such an operator, so an MoE model on Atlas A2
  runs with HCCL_IF_BASE_PORT alone (the host block stays disjoint; the NPU side keeps its default
  16666 on each NPU's own address, and trials hold disjoint NPUs).
- Before CANN 8.1.RC1 neither range variable is documented (CANN 8.0.0 envref_07_0074 has
  HCCL_IF_BASE_PORT alone), so neither is set.

Where a trial must not have them, a value inherited from the user's shell would reach the server all the
same (a child inherits the environment), so such a trial also removes both from the environment it
inherits (:func:`plan_unset`, ``LaunchSpec.unset_env``); only ``[<engine>.env]`` or an env field keeps one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from msopt.checks import is_int
from msopt.errors import ConfigError
from msopt.launch.render import LaunchSpec
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
    port ``lease`` (:meth:`msopt.launch.ports.PortLease.hold`), so two trials can never run on one
    block: the host block must also be free here; NPU-side ports are bound on the NPUs' own network.

    Raises:
        EvaluationError: a port of a block is held by another trial, or a host port is in use.
    """
    for var, here in ((HOST_RANGE, True), (NPU_RANGE, False)):
        value = env.get(var, "")
        lo, sep, hi = value.partition("-")
        if sep and lo.isdigit() and hi.isdigit() and "," not in value:
            lease.hold(int(lo), int(hi), f"{var}={value}", bound_here=here)


def in_force(spec_env: Mapping[str, str], inherited: Mapping[str, str] | None = None,
             unset: Sequence[str] = ()) -> str:
    """One line for ``msopt preflight``: which HCCL port variables a launch has, and where from (``unset``:
    the ones it removes from the environment it inherits, :func:`plan_unset`)."""
    inherited = os.environ if inherited is None else inherited
    parts = []
    for var in VARIABLES:
        if var in unset and var not in spec_env:
            if var in inherited:
                parts.append(f"{var} unset (this environment has {inherited[var]!r}, which CANN does not allow here)")
        elif var in spec_env:
            was = inherited.get(var)
            parts.append(f"{var}={spec_env[var]}" + (f" (replaces {was!r} from this environment)"
                                                      if was is not None and was != spec_env[var] else ""))
        elif var in inherited:
            parts.append(f"{var}={inherited[var]} (from this environment)")
    return "; ".join(parts) if parts else "no HCCL port variable set (HCCL's defaults: 60000-60031, NPU 16666)"


@dataclass(frozen=True)
class NodeFacts:
    """What the HCCL port plan depends on (:func:`range_plan`); None: not known.

    Attributes:
        atlas: "A2" or "A3" (the Atlas generation of the node's NPUs), else None.
        cann: the CANN version found ("9.0.0", "8.1.RC1", ...), else None.
        mc2: the trial runs MC² fused operators (an MoE model), else False; None: not known.
    """

    atlas: str | None = None
    cann: str | None = None
    mc2: bool | None = None


def atlas_of(npu_smi: str) -> str | None:
    """The Atlas generation of ``npu-smi info``'s NPUs: 910B chips are Atlas A2, ``Ascend910`` dies under
    a ``Chip  Phy-ID`` header (vllm-ascend issues #2035, #2534) or Ascend910_93xx SoCs are Atlas A3."""
    if re.search(r"\|\s*\d+\s+(Ascend)?910B", npu_smi):
        return "A2"
    if re.search(r"910_93", npu_smi) or (re.search(r"\|\s*\d+\s+Ascend910\s", npu_smi)
                                          and re.search(r"Chip\s+Phy-ID", npu_smi)):
        return "A3"
    return None


def _version_key(version: str) -> tuple[int, int, int]:
    """``"8.1.RC1"`` -> (8, 1, 0); ``"9.0.0"`` -> (9, 0, 0): major, minor, and RC1 before a release."""
    parts = re.findall(r"\d+", version)
    major, minor = (int(parts[0]) if parts else 0), (int(parts[1]) if len(parts) > 1 else 0)
    return major, minor, 0 if re.search(r"(?i)rc|alpha|beta", version) else 1


def cann_version(environ: Mapping[str, str] | None = None) -> str | None:
    """The CANN toolkit's version: ``version=`` of ``ascend_toolkit_install.info`` under
    ``$ASCEND_TOOLKIT_HOME``, ``$ASCEND_HOME_PATH`` or /usr/local/Ascend/ascend-toolkit/latest (the
    toolkit's install record, ``<home>/<arch>-linux/ascend_toolkit_install.info``), else the ``cann-X.Y.Z``
    of the home path (CANN 9's /usr/local/Ascend/cann-9.0.0 layout); None when none is found."""
    environ = os.environ if environ is None else environ
    homes = [environ.get("ASCEND_TOOLKIT_HOME", ""), environ.get("ASCEND_HOME_PATH", ""),
             "/usr/local/Ascend/ascend-toolkit/latest"]
    for home in filter(None, homes):
        infos = [Path(home) / "ascend_toolkit_install.info", *sorted(Path(home).glob("*/ascend_toolkit_install.info"))]
        for info in infos:
            try:
                m = re.search(r"^version=(\S+)", info.read_text(encoding="utf-8", errors="replace"), re.M)
            except OSError:
                continue
            if m:
                return m.group(1)
        m = re.search(r"cann-(\d+\.\d+[.\w]*)", str(Path(home).resolve() if Path(home).exists() else home))
        if m:
            return m.group(1)
    return None


def model_has_experts(model: str) -> bool | None:
    """An MoE model by its ``config.json`` (``n_routed_experts``, ``num_experts`` or ``num_local_experts``
    above 1, also in a ``text_config``); None when ``model`` is no directory with a readable config.json."""
    try:
        doc = json.loads((Path(model).expanduser() / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    text = doc.get("text_config")
    for table in (doc, text if isinstance(text, dict) else {}):
        for key in ("n_routed_experts", "num_experts", "num_local_experts"):
            value = table.get(key)
            if isinstance(value, int) and value > 1:
                return True
    return False


def node_facts(model: str = "", *, npu_smi: str | None = None, environ: Mapping[str, str] | None = None,
               mc2: bool | None = None) -> NodeFacts:
    """This node's facts: ``npu-smi info`` (run here when ``npu_smi`` is None and the tool is on PATH),
    the CANN version (:func:`cann_version`), and MC² from ``mc2`` or else ``model``'s config.json."""
    if npu_smi is None:
        npu_smi = ""
        tool = shutil.which("npu-smi")
        if tool:
            try:
                npu_smi = subprocess.run([tool, "info"], capture_output=True, text=True, timeout=20,
                                         check=False).stdout
            except (OSError, subprocess.SubprocessError):
                npu_smi = ""
    return NodeFacts(atlas_of(npu_smi), cann_version(environ), model_has_experts(model) if mc2 is None else mc2)


#: CANN's pages, cited in the plan's reasons
_PAGES_9 = "CANN 9.0 hcclenvref_07_0020/0021"
_PAGES_8 = "CANN 8.1.RC1-8.5 envref_07_0143/0144"


def range_plan(facts: NodeFacts) -> tuple[bool, str]:
    """Whether msopt may set HCCL_HOST_SOCKET_PORT_RANGE and HCCL_NPU_SOCKET_PORT_RANGE on a node with
    ``facts``, and why (see the module docstring)."""
    if facts.cann is not None and _version_key(facts.cann) < (8, 1, 0):
        return False, (f"CANN {facts.cann} has no HCCL_HOST/NPU_SOCKET_PORT_RANGE (first in CANN 8.1.RC1 "
                       "envref_07_0143/0144): HCCL_IF_BASE_PORT alone")
    if facts.atlas == "A2" and facts.mc2:
        pages = _PAGES_8 if facts.cann is not None and _version_key(facts.cann) < (9, 0, 0) else _PAGES_9
        return False, (f"Atlas A2 with MC² fused operators (an MoE model): {pages} do not support "
                       "HCCL_HOST_SOCKET_PORT_RANGE / HCCL_NPU_SOCKET_PORT_RANGE there; HCCL_IF_BASE_PORT alone")
    where = f"Atlas {facts.atlas}" if facts.atlas else "NPUs of unknown generation"
    what = "an MoE model" if facts.mc2 else ("no MC² operators" if facts.mc2 is False else "MC² not known")
    return True, f"{where}, {what}, CANN {facts.cann or 'not found'}: both range variables per trial"


def plan_unset(section: Mapping[str, Any], fields: Sequence[FieldDecl], facts: NodeFacts) -> tuple[str, ...]:
    """The range variables a trial with ``facts`` removes from the environment it inherits: both where
    :func:`range_plan` forbids them (CANN 9.0 hcclenvref_07_0020/0021, "使用约束": "不支持配置此环境变量"),
    except one the user sets (``[<engine>.env]`` or an env field); none elsewhere."""
    if range_plan(facts)[0]:
        return ()
    mine = user_set(section, fields)
    return tuple(v for v in (HOST_RANGE, NPU_RANGE) if v not in mine)


def inherited_note(engine: str, inherited: Mapping[str, str] | None = None) -> str:
    """One line for ``msopt validate``: what becomes of the range variables this environment holds."""
    inherited = os.environ if inherited is None else inherited
    here = [f"{v}={inherited[v]}" for v in (HOST_RANGE, NPU_RANGE) if v in inherited]
    what = f"this environment has {', '.join(here)}" if here else "this environment has neither"
    return (f"HCCL port ranges: {what}; a trial replaces an inherited range with its own block (an inherited "
            "'auto' is kept), and unsets both where CANN does not allow them: Atlas A2 with MC² operators (an MoE "
            "model) or CANN before 8.1.RC1 (CANN 9.0 hcclenvref_07_0020/0021); "
            f"[{engine}.env] keeps the user's own; 'msopt preflight' says which rule a node follows")


def plan_env(env: Mapping[str, str], section: Mapping[str, Any], fields: Sequence[FieldDecl],
             facts: NodeFacts) -> dict[str, str]:
    """``env`` without the range variables msopt set (not the user's: ``[<engine>.env]`` or an env field)
    where :func:`range_plan` forbids them."""
    allowed, _ = range_plan(facts)
    if allowed:
        return dict(env)
    mine = user_set(section, fields)
    return {k: v for k, v in env.items() if k not in (HOST_RANGE, NPU_RANGE) or k in mine}


def plan_specs(specs: Sequence[LaunchSpec], section: Mapping[str, Any], fields: Sequence[FieldDecl],
               facts: NodeFacts) -> list[LaunchSpec]:
    """``specs`` as a trial with ``facts`` launches them: :func:`plan_env` and :func:`plan_unset` applied."""
    unset = plan_unset(section, fields, facts)
    return [replace(s, env=plan_env(s.env, section, fields, facts),
                    unset_env=tuple(dict.fromkeys((*s.unset_env, *unset)))) for s in specs]
