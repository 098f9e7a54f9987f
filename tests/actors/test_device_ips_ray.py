"""Issue 36 items 1-2 on Ray: each node's actor reads its own NPUs' RoCE addresses with hccn_tool, by the
physical ids Ray gave it, and the rank table of a two-node trial carries them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from msopt.launch.render import Candidate
from tests.launch.test_device_ips import FAKE_HCCN

pytestmark = pytest.mark.slow


def test_node_agents_read_their_own_physical_npus(ray_session, tmp_path: Path) -> None:
    from actors.nodes import NodeAgent
    from msopt.engines import get_engine
    from msopt.launch.render import TrialNode

    tool = tmp_path / "hccn_tool"
    tool.write_text(FAKE_HCCN.format(python=sys.executable))
    tool.chmod(0o755)
    env = {"env_vars": {"HCCN_TOOL_PATH": str(tool)}}
    agents = [NodeAgent.options(resources={"NPU": 4}, runtime_env=env).remote("NPU", f"n{i}")  # type: ignore[attr-defined]
              for i in range(2)]
    try:
        infos = ray_session.get([a.info.remote() for a in agents])
        read = ray_session.get([a.device_ips.remote() for a in agents])
        assert sorted(d for i in infos for d in i["devices"]) == [str(d) for d in range(8)]
        nodes = []
        for rank, (info, (ips, error)) in enumerate(zip(infos, read)):
            assert error == ""
            # keyed by the physical ids Ray gave this actor: hccn_tool -i N for N in its devices
            assert dict(ips) == {d: f"192.168.0.{int(d) + 10}" for d in info["devices"]}
            nodes.append(TrialNode(rank, f"10.0.0.{rank + 1}", tuple(info["devices"]), device_ips=ips, ip_error=error))
        specs = get_engine("mindie").render_nodes(Candidate({}, [], {}), port=1025, nodes=nodes, rendezvous_port=29555,
                                                  workdir=tmp_path)
        table = specs[0].files[str(tmp_path / "rank_table_file.json")]
        for node, server in zip(nodes, table["server_list"]):
            assert [d["device_ip"] for d in server["device"]] == [dict(node.device_ips)[d] for d in node.devices]
    finally:
        for a in agents:
            ray_session.kill(a)
