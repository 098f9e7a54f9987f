"""Issue 25, bug 10: the CPU build as a target: cores and NUMA nodes per trial (msopt/engines/vllm/cpu.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from msopt.engines.vllm.cpu import CpuFacts, check_cpu_trial, parse_ids, workers
from msopt.errors import RefusedError
from msopt.launch.render import LaunchSpec


def spec(*flags: str) -> LaunchSpec:
    return LaunchSpec(engine="vllm", argv=("vllm", "serve", "/m", *flags), port=8000)


TWO_CORES = CpuFacts(cores=2, numa_nodes=(0,))


def test_parse_ids_reads_the_kernel_list_format() -> None:
    assert parse_ids("0-2,4,7-8\n") == [0, 1, 2, 4, 7, 8] and parse_ids("0") == [0]


def test_data_parallel_8_on_a_trial_of_two_cores_is_refused() -> None:
    s = spec("--data-parallel-size", "8")
    assert workers(s) == (8, 1)
    with pytest.raises(RefusedError, match=r"8 CPU workers .* need 8 cores, a trial holds \[cluster\] "
                                           r"devices_per_trial = 2") as err:
        check_cpu_trial(s, 2, TWO_CORES, {})
    assert err.value.rule == "cpu.cores"


def test_tensor_parallel_2_on_one_numa_node_is_refused_with_vllms_message() -> None:
    s = spec("--tensor-parallel-size", "2")
    with pytest.raises(RefusedError) as err:
        check_cpu_trial(s, 2, TWO_CORES, {})
    assert err.value.rule == "vllm_cpu.numa_nodes"
    assert ("Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers. Allowed NUMA nodes are [0]. "
            "Please try to bind threads manually or decrease DP/TP/PP.") in str(err.value)
    check_cpu_trial(s, 2, CpuFacts(2, (0, 1)), {})  # two nodes: one each
    check_cpu_trial(s, 2, TWO_CORES, {"VLLM_CPU_OMP_THREADS_BIND": "nobind"})  # vLLM binds nothing
    check_cpu_trial(s, 2, TWO_CORES, {"VLLM_CPU_OMP_THREADS_BIND": "0|1"})  # the user's own lists
    with pytest.raises(RefusedError, match=r"Allowed NUMA nodes are \[1\]"):
        check_cpu_trial(s, 2, CpuFacts(2, (0, 1)), {"CPU_VISIBLE_MEMORY_NODES": "1"})


def test_one_worker_per_core_passes() -> None:
    check_cpu_trial(spec("-tp", "1", "--data-parallel-size", "2"), 2, TWO_CORES, {})


def test_the_facts_of_this_node() -> None:
    facts = CpuFacts.here()
    assert facts.cores >= 1 and facts.numa_nodes and all(n >= 0 for n in facts.numa_nodes)


def test_accelerator_cpu_loads_and_preflight_checks_cores_and_numa(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"""
engine = "vllm"
benchmark = "builtin"
[cluster]
accelerator = "cpu"
devices_per_trial = 4096
[vllm.command]
executable = ["{sys.executable}", "-m", "msopt.cli", "sim-serve"]
model = "{tmp_path / 'model'}"
[[vllm.target_field]]
name = "tp"
config_position = "--tensor-parallel-size"
min = 0
max = 1
dtype = "enum"
dtype_param = [1, 2]
value = 1
""")
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "preflight", "-c", str(cfg)], capture_output=True,
                         text=True, timeout=300)
    lines = out.stdout.splitlines()
    (devices,) = [ln for ln in lines if " devices:" in ln]
    assert devices.startswith("FAIL devices: ") and "CPU(s) on this node, a trial needs" in devices and "4096" in devices
    cfg.write_text(cfg.read_text().replace("devices_per_trial = 4096", "devices_per_trial = 2").replace(
        "value = 1", "value = 2"))  # the baseline: tensor-parallel 2
    out = subprocess.run([sys.executable, "-m", "msopt.cli", "preflight", "-c", str(cfg)], capture_output=True,
                         text=True, timeout=300)
    (numa,) = [ln for ln in out.stdout.splitlines() if " numa:" in ln]
    if len(CpuFacts.here().numa_nodes) < 2:
        assert numa.startswith("FAIL numa: the baseline would be refused: vllm refuses this configuration at "
                               "start-up: Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers"), numa
    else:
        assert numa.startswith("ok   numa: ") and "binds 2 local CPU worker(s) of 2" in numa, numa
