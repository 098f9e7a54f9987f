"""Items 1-2 of issue 36: each NPU's RoCE address read with hccn_tool, keyed by physical device id,
into MindIE's rank table; a node that cannot read them fails the trial before its launch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from msopt.config import load_settings, split
from msopt.engines import get_engine
from msopt.engines.mindie.rank_table import rank_table
from msopt.errors import ConfigError, EvaluationError
from msopt.launch.hccn import parse_ip, read_device_ips
from msopt.launch.render import Candidate, TrialNode
from msopt.run.validate import validate

#: hccn_tool as Ascend documents its output (``ipaddr:`` and ``netmask:`` lines); NPU 9 is down.
FAKE_HCCN = """#!{python}
import sys
args = sys.argv[1:]
assert args[0] == "-i" and args[2:] == ["-ip", "-g"], args
dev = int(args[1])
if dev == 9:
    print("Command execute failed!", file=sys.stderr)
    sys.exit(1)
print(f"ipaddr:192.168.{{dev // 8}}.{{dev % 8 + 10}}")
print("netmask:255.255.255.0")
"""


@pytest.fixture
def hccn(tmp_path: Path) -> dict[str, str]:
    tool = tmp_path / "hccn_tool"
    tool.write_text(FAKE_HCCN.format(python=sys.executable))
    tool.chmod(0o755)
    return {"HCCN_TOOL_PATH": str(tool), "PATH": "/nonexistent"}


def test_parse_ip_reads_the_ipaddr_line() -> None:
    assert parse_ip("ipaddr:29.1.2.3\nnetmask:255.255.0.0\n") == "29.1.2.3"
    assert parse_ip("netmask:255.255.0.0\n") is None
    assert parse_ip("ipaddr:not-an-ip\n") is None


def test_read_device_ips_by_physical_id(hccn: dict[str, str]) -> None:
    ips, error = read_device_ips(["4", "5", "6", "7"], hccn)
    assert error == ""
    assert ips == {"4": "192.168.0.14", "5": "192.168.0.15", "6": "192.168.0.16", "7": "192.168.0.17"}
    ips, error = read_device_ips(["8", "9"], hccn)
    assert ips == {"8": "192.168.1.10"} and "-i 9 -ip -g gave no address (exit 1: Command execute failed!)" in error
    ips, error = read_device_ips(["0"], {"PATH": "/nonexistent", "HCCN_TOOL_PATH": "/nonexistent/hccn_tool"})
    assert ips == {} and "hccn_tool is not found" in error


def _nodes(hccn: dict[str, str], devices: tuple[str, ...]) -> tuple[TrialNode, ...]:
    out = []
    for rank, address in enumerate(("10.0.0.1", "10.0.0.2")):
        ips, error = read_device_ips(devices, hccn)
        out.append(TrialNode(rank, address, devices, device_ips=tuple(ips.items()), ip_error=error))
    return tuple(out)


def test_rank_table_carries_the_addresses_each_node_read(hccn: dict[str, str], tmp_path: Path) -> None:
    nodes = _nodes(hccn, ("4", "5", "6", "7"))
    specs = get_engine("mindie").render_nodes(Candidate({}, [], {}), port=1025, nodes=nodes, rendezvous_port=29555,
                                              workdir=tmp_path)
    table = specs[0].files[str(tmp_path / "rank_table_file.json")]
    for server in table["server_list"]:
        # the server sees NPUs 4-7 as 0-3; their addresses are NPUs 4-7's, not 0-3's
        assert [d["device_id"] for d in server["device"]] == ["0", "1", "2", "3"]
        assert [d["device_ip"] for d in server["device"]] == [f"192.168.0.{i}" for i in (14, 15, 16, 17)]
    assert [d["rank_id"] for s in table["server_list"] for d in s["device"]] == [str(i) for i in range(8)]


def test_configured_device_ips_are_indexed_by_physical_id() -> None:
    nodes = (TrialNode(0, "10.0.0.1", ("4", "5")), TrialNode(1, "10.0.0.2", ("4", "5")))
    ips = {"10.0.0.1": [f"192.168.1.{i}" for i in range(8)], "10.0.0.2": {"4": "192.168.2.4", "5": "192.168.2.5"}}
    table = rank_table(nodes, ips)
    assert [d["device_ip"] for d in table["server_list"][0]["device"]] == ["192.168.1.4", "192.168.1.5"]
    assert [d["device_ip"] for d in table["server_list"][1]["device"]] == ["192.168.2.4", "192.168.2.5"]
    with pytest.raises(EvaluationError, match="has no address for NPU 4"):
        rank_table(nodes, {"10.0.0.1": ["192.168.1.0", "192.168.1.1"]})


def test_a_node_that_could_not_read_fails_before_the_launch(hccn: dict[str, str]) -> None:
    nodes = _nodes(hccn, ("8", "9"))
    with pytest.raises(EvaluationError, match=r"node 10\.0\.0\.1: .*-i 9 -ip -g gave no address.*device_ips"):
        rank_table(nodes)
    # the table wins for the nodes it names
    ips = {a: {"8": "10.9.0.8", "9": "10.9.0.9"} for a in ("10.0.0.1", "10.0.0.2")}
    assert rank_table(nodes, ips)["server_list"][1]["device"][1]["device_ip"] == "10.9.0.9"


def test_simulated_nodes_get_no_device_ip() -> None:
    nodes = (TrialNode(0, "127.0.0.1", ("0",)), TrialNode(1, "127.0.0.1", ("0",)))
    assert all("device_ip" not in d for s in rank_table(nodes)["server_list"] for d in s["device"])


@pytest.mark.parametrize(("ips", "needle"), [
    ("[\"192.168.1.0\"]", "must be a table of node address"),
    ("{\"10.0.0.1\" = \"192.168.1.0\"}", "must be a list (indexed by device id)"),
    ("{\"10.0.0.1\" = [\"192.168.1.300\"]}", "not an IP address"),
    ("{\"10.0.0.1\" = {x = \"192.168.1.3\"}}", "is not a physical device id"),
])
def test_bad_device_ips_refused_at_load_time(tmp_path: Path, ips: str, needle: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'engine = "mindie"\nbenchmark = "builtin"\n[mindie]\ndevice_ips = {ips}\n'
                    '[[mindie.target_field]]\nname = "mbs"\n'
                    'config_position = "BackendConfig.ScheduleConfig.maxBatchSize"\nmin = 8\nmax = 64\n'
                    'dtype = "int"\n')
    with pytest.raises(ConfigError) as err:
        validate(*split(load_settings(path)))
    assert str(err.value).startswith(str(path)) and "[mindie] device_ips" in str(err.value)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_preflight_reads_every_npu_where_trials_span_nodes(hccn: dict[str, str], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from msopt.run.preflight import _device_ips

    path = tmp_path / "c.toml"
    base = ('engine = "mindie"\nbenchmark = "builtin"\n[cluster]\naccelerator = "NPU"\n'
            'devices_per_trial = 16\ndevices_per_node = 8\n[[mindie.target_field]]\nname = "mbs"\n'
            'config_position = "BackendConfig.ScheduleConfig.maxBatchSize"\nmin = 8\nmax = 64\ndtype = "int"\n')
    path.write_text(base)
    settings = load_settings(path)
    for k, v in hccn.items():
        monkeypatch.setenv(k, v)
    check = _device_ips(settings.config, 8)
    assert check is not None and check.ok and "NPU 7 192.168.0.17" in check.detail
    check = _device_ips(settings.config, 10)  # NPU 9 is down
    assert check is not None and not check.ok and "-i 9 -ip -g" in check.detail and "device_ips" in check.detail
    path.write_text(base.replace("devices_per_trial = 16", "devices_per_trial = 8"))
    assert _device_ips(load_settings(path).config, 8) is None  # one node: no rank table
