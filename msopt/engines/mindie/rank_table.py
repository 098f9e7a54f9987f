"""The rank table of a MindIE trial that spans nodes, and the table of each node's RoCE device addresses it
is built from (``[mindie] device_ips``)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from msopt.errors import ConfigError, EvaluationError
from msopt.launch.render import TrialNode


def device_ip_table(device_ips: Any, where: str = "[mindie] device_ips") -> dict[str, dict[str, str]]:
    """``[mindie.device_ips]`` as ``{node address: {physical device id: RoCE address}}``.

    Each node's entry is a list indexed by physical device id (``hccn_tool -i N``: entry N is NPU
    N's address, so a trial on NPUs 4-7 takes entries 4-7) or a table ``"N" = "address"``.

    Raises:
        ConfigError: not a table of node address = list or table of IP addresses.
    """
    if device_ips is None:
        return {}
    fix = ('write [mindie.device_ips] "<node address>" = ["<NPU 0 address>", "<NPU 1 address>", ...] '
           "(entry N is hccn_tool -i N -ip -g of that node), or leave it out to have each node read them")
    if not isinstance(device_ips, Mapping):
        raise ConfigError(f"{where} must be a table of node address = [RoCE addresses], got {device_ips!r}; {fix}")
    out: dict[str, dict[str, str]] = {}
    for node, ips in device_ips.items():
        if isinstance(ips, (list, tuple)):
            pairs = [(str(i), ip) for i, ip in enumerate(ips)]
        elif isinstance(ips, Mapping):
            pairs = [(str(k), ip) for k, ip in ips.items()]
        else:
            raise ConfigError(f"{where}.{node!r} must be a list (indexed by device id) or a table of device id = "
                              f"address, got {ips!r}; {fix}")
        table: dict[str, str] = {}
        for dev, ip in pairs:
            try:
                ipaddress.ip_address(str(ip))
            except ValueError:
                raise ConfigError(f"{where}.{node!r}: device {dev} has {ip!r}, not an IP address; {fix}") from None
            if not dev.isdigit():
                raise ConfigError(f"{where}.{node!r}: key {dev!r} is not a physical device id; {fix}")
            table[dev] = str(ip)
        out[str(node)] = table
    return out


def rank_table(nodes: Sequence[TrialNode], device_ips: Any = None) -> dict[str, Any]:
    """MindIE/HCCL's rank table for ``nodes`` (ranks numbered node by node, device by device).

    ``device_id`` numbers the devices as the server sees them (0..n-1 on each node, as Ray remaps
    them); ``device_ip`` is the RoCE address of the *physical* device behind it (``node.devices[i]``),
    from ``[mindie.device_ips]`` where it names the node, else what the node read itself
    (``node.device_ips``). A node that tried and failed to read them (``node.ip_error``) without a
    table entry fails the trial before any launch: MindIE refuses a rank table without
    ``device_ip`` (MindIE-LLM 8b4871a ranktable_config.cpp:189, 293-297). Nodes nobody read (the
    simulator, an export) get no ``device_ip``.

    Raises:
        EvaluationError: a device's address is unknown on a node that was read, or the table
            lacks one of the trial's devices.
    """
    try:
        given = device_ip_table(device_ips)
    except ConfigError as exc:
        raise EvaluationError(str(exc)) from None
    servers = []
    rank = 0
    for node in nodes:
        ips: Mapping[str, str] | None = given.get(node.address)
        source = f"[mindie.device_ips] {node.address!r}"
        if ips is None and (node.device_ips or node.ip_error):
            ips, source = dict(node.device_ips), f"hccn_tool on {node.address}"
            if node.ip_error:
                raise EvaluationError(f"node {node.address}: {node.ip_error}; MindIE's rank table needs every "
                                      "device_ip (ranktable_config.cpp:293-297): make hccn_tool work there or set "
                                      f"[mindie.device_ips] {node.address!r}")
        devices = []
        for i, dev in enumerate(node.devices):
            entry = {"device_id": str(i), "rank_id": str(rank)}
            if ips is not None:
                ip = ips.get(str(dev).strip())
                if ip is None:
                    raise EvaluationError(f"{source} has no address for NPU {dev} (this trial holds NPUs "
                                          f"{', '.join(node.devices)} there); list one address per physical "
                                          "device id, entry N for hccn_tool -i N -ip -g")
                entry["device_ip"] = ip
            devices.append(entry)
            rank += 1
        servers.append({"server_id": node.address, "container_ip": node.address, "device": devices})
    return {"version": "1.0", "server_count": str(len(nodes)), "server_list": servers, "status": "completed"}
