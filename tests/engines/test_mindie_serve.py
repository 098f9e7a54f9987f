"""MindIE's stand-in daemon (msopt/engines/mindie/serve.py, ``msopt sim-serve --mindie``): its HTTP servers
grouped and its port refusal as MindIE's own (MindIE-LLM 8b4871a)."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

from msopt.engines.mindie.serve import config_path, listeners
from msopt.launch.ports import free_port
from msopt.launch.process import start_process


def test_mindie_stand_in_groups_its_http_servers_as_mindie_does() -> None:
    # MindIE-LLM 8b4871a http_server.cpp:411-443, server_config.cpp:298-305 and 618-636
    one = {"ipAddress": "127.0.0.1", "managementIpAddress": "127.0.0.1", "port": 5, "managementPort": 5,
           "metricsPort": 5}
    assert listeners(one, {}) == [("127.0.0.1", 5, ("business", "management", "metrics"))]
    shipped = {"ipAddress": "127.0.0.1", "managementIpAddress": "127.0.0.2", "port": 1025, "managementPort": 1026,
               "metricsPort": 1027}
    assert [(h, p) for h, p, _ in listeners(shipped, {})] == [("127.0.0.1", 1025), ("127.0.0.2", 1026),
                                                               ("127.0.0.2", 1027)]
    no_mgmt = {"ipAddress": "127.0.0.1", "port": 7, "metricsPort": 8}  # managementPort defaults to port
    assert listeners(no_mgmt, {}) == [("127.0.0.1", 7, ("business", "management")),
                                      ("127.0.0.1", 8, ("metrics",))]
    env = {"MIES_CONTAINER_IP": "127.0.0.5", "MIES_CONTAINER_MANAGEMENT_IP": "127.0.0.5"}
    assert listeners(one, env) == [("127.0.0.5", 5, ("business", "management", "metrics"))]
    assert listeners(one, {"MIES_CONTAINER_IP": "127.0.0.5"})[0][:2] == ("127.0.0.5", 5)  # mgmt stays .1
    assert config_path("/x/c.json", {"MIES_CONFIG_JSON_PATH": "/y"}) == Path("/x/c.json")
    assert config_path(None, {"MIES_CONFIG_JSON_PATH": "/y", "MIES_INSTALL_PATH": "/z"}) == Path("/y")
    assert config_path(None, {"MIES_INSTALL_PATH": "/z"}) == Path("/z/conf/config.json")


def test_mindie_stand_in_refuses_a_busy_port_with_mindies_message(tmp_path: Path) -> None:
    doc = json.loads((Path(__file__).parents[2] / "msopt/engines/mindie/config.json").read_text())
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        doc["ServerConfig"].update(ipAddress="127.0.0.1", managementIpAddress="127.0.0.1", port=free_port(),
                                   managementPort=free_port(), metricsPort=taken)
        conf = tmp_path / "config.json"
        conf.write_text(json.dumps(doc))
        proc = start_process([sys.executable, "-m", "msopt.cli.serve", "--mindie", "--config-file", str(conf)],
                             {}, tmp_path / "m.log")
        try:
            assert proc.wait(60) == 1
        finally:
            proc.stop()
    log = (tmp_path / "m.log").read_text()
    assert "Management or Business or Metrics Http server listen port is occupied" in log
