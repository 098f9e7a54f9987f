"""The NPUs' RoCE addresses, read the way Ascend documents it: ``hccn_tool -i N -ip -g``.

A multi-node MindIE launch names every device's address in its rank table (``device_ip``;
MindIE-LLM 8b4871a src/config_manager/ranktable_config.cpp:189 reads it, :293-297 refuses an
empty one through check_utils.cpp:119-122). MindIE's manual has the user run
``for i in {0..15}; do hccn_tool -i $i -ip -g; done`` on each node
(docs/zh/user_guide/user_manual/rank_table_file_configuration.md:90, "步骤二"), which prints
``ipaddr:192.168.1.8`` and ``netmask:...``; vllm-ascend's rank-table generator reads the same line
from ``$HCCN_TOOL_PATH`` (default ``/usr/local/Ascend/driver/tools/hccn_tool``;
vllm-ascend 182b75e examples/disaggregated_prefill_v1/gen_ranktable.py). ``N`` is the physical
device id, which is what Ray hands a trial (``ASCEND_RT_VISIBLE_DEVICES`` renumbers them only
inside the server), so the addresses are keyed by physical id.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

#: Where CANN's driver installs the tool (vllm-ascend gen_ranktable.py's default).
DEFAULT_HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
#: Seconds one query may take.
HCCN_TIMEOUT = 20.0
_IPADDR = re.compile(r"^\s*ipaddr\s*:\s*(\S+)\s*$", re.MULTILINE)


def hccn_tool(env: Mapping[str, str] | None = None) -> str | None:
    """The hccn_tool executable: ``$HCCN_TOOL_PATH``, the driver's default path, or PATH; None: absent."""
    env = os.environ if env is None else env
    for candidate in (env.get("HCCN_TOOL_PATH"), DEFAULT_HCCN_TOOL):
        if candidate and os.access(candidate, os.X_OK) and Path(candidate).is_file():
            return candidate
    return shutil.which("hccn_tool", path=env.get("PATH"))


def parse_ip(text: str) -> str | None:
    """The address in ``hccn_tool -i N -ip -g``'s output (``ipaddr:x.x.x.x``), None when absent or not an IP."""
    m = _IPADDR.search(text)
    if m is None:
        return None
    try:
        return str(ipaddress.ip_address(m.group(1)))
    except ValueError:
        return None


def read_device_ips(devices: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[dict[str, str], str]:
    """``{physical device id: RoCE address}`` for ``devices`` on this node, and why it is incomplete.

    Returns:
        The addresses read, and "" when every device has one, else one line saying which device
        failed and how (no tool, a non-zero exit, no ``ipaddr`` line).
    """
    exe = hccn_tool(env)
    if exe is None:
        return {}, (f"hccn_tool is not found ($HCCN_TOOL_PATH, {DEFAULT_HCCN_TOOL}, PATH), so the NPUs' RoCE "
                    "addresses cannot be read here")
    out: dict[str, str] = {}
    for dev in devices:
        dev = str(dev).strip()
        if not dev.isdigit():
            return out, f"device id {dev!r} is not a physical NPU number"
        try:
            done = subprocess.run([exe, "-i", dev, "-ip", "-g"], capture_output=True, text=True, check=False,
                                  timeout=HCCN_TIMEOUT, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return out, f"{exe} -i {dev} -ip -g failed: {exc}"
        ip = parse_ip(done.stdout) if done.returncode == 0 else None
        if ip is None:
            said = " ".join((done.stdout + done.stderr).split())[:200] or "no output"
            return out, f"{exe} -i {dev} -ip -g gave no address (exit {done.returncode}: {said})"
        out[dev] = ip
    return out, ""
