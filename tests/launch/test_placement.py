"""How a trial splits over nodes (msopt/launch/placement.py): from device counts alone, no configuration and no
simulator catalog involved."""

from __future__ import annotations

import subprocess
import sys

import pytest

from msopt.errors import ConfigError
from msopt.launch.placement import planned_nodes, split_trial, virtual_nodes


def test_a_trial_that_fits_one_node_takes_one() -> None:
    assert split_trial(4, 8) == (1, 4)
    assert split_trial(8, 8) == (1, 8)
    assert split_trial(16, None) == (1, 16)  # no node size known: one node


def test_a_bigger_trial_splits_evenly_over_the_fewest_nodes() -> None:
    assert split_trial(16, 8) == (2, 8)
    assert split_trial(12, 8) == (2, 6)
    assert split_trial(32, 16) == (2, 16)


def test_a_trial_that_cannot_split_evenly_is_refused() -> None:
    with pytest.raises(ConfigError, match="does not split evenly over 2 nodes of 8"):
        split_trial(9, 8)


def test_virtual_nodes_from_a_device_count() -> None:
    nodes = virtual_nodes(16, 8)
    assert [(n.rank, n.address, n.devices, n.node_id) for n in nodes] == [
        (0, "127.0.0.1", tuple(str(d) for d in range(8)), "simnode0"),
        (1, "127.0.0.1", tuple(str(d) for d in range(8)), "simnode1")]
    assert virtual_nodes(8, 8) == ()  # one node
    assert virtual_nodes(0, 8) == ()  # devices_per_trial unset: never spans nodes
    assert virtual_nodes(16, None) == ()


def test_planned_nodes_name_the_addresses_given_one_per_node() -> None:
    assert [n.address for n in planned_nodes(16, 8)] == ["NODE0_IP", "NODE1_IP"]
    assert [n.address for n in planned_nodes(16, 8, ["10.0.0.1", "10.0.0.2"])] == ["10.0.0.1", "10.0.0.2"]
    assert [n.address for n in planned_nodes(16, 8, ["10.0.0.1"])] == ["NODE0_IP", "NODE1_IP"]
    assert [n.devices for n in planned_nodes(12, 8)] == [tuple(str(d) for d in range(6))] * 2
    assert planned_nodes(16, None) == ()
    assert planned_nodes(0, 8) == ()


def test_placement_loads_no_simulator() -> None:
    """Placing a trial loads nothing of the simulator, its catalog included (a fresh interpreter)."""
    code = ("import sys; from msopt.launch.placement import virtual_nodes; virtual_nodes(16, 8); "
            "print(sorted(m for m in sys.modules if m == 'msopt.sim' or m.startswith('msopt.sim.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
