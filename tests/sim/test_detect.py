"""Hardware detection: the tools' captured outputs (tests/data/hardware, sources in tests/data/README.md)
parsed and mapped to a catalog entry or a roofline entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from msopt.sim.catalog_load import hardware_toml, load_hardware
from msopt.sim.detect import (
    Detected,
    detect_devices,
    hardware_for,
    parse_lscpu,
    parse_meminfo,
    parse_npu_smi,
    parse_nvidia_smi,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "hardware"


def _read(name: str) -> str:
    return (DATA / name).read_text()


def test_nvidia_smi_csv_is_one_row_per_gpu_in_gib():
    rows = parse_nvidia_smi(_read("nvidia_smi_h100_sxm.csv"))
    assert len(rows) == 8 and rows[0][0] == "NVIDIA H100 80GB HBM3"
    assert rows[0][1] == pytest.approx(81559 / 1024)
    assert parse_nvidia_smi("NVIDIA H200, 143771 MiB\n") == [("NVIDIA H200", pytest.approx(140.4, abs=0.1))]
    assert parse_nvidia_smi("No devices were found\n") == []


def test_npu_smi_info_reads_the_name_row_and_the_hbm_total_of_the_chip_row():
    rows = parse_npu_smi(_read("npu_smi_910b3.txt"))
    assert rows == [("910B3", 64.0), ("910B3", 64.0)]  # the process table after it adds nothing
    assert parse_npu_smi(_read("npu_smi_910b4.txt")) == [("910B4", 32.0)]
    assert parse_npu_smi("") == []


def test_lscpu_cores_clock_and_vector_width():
    cpu = parse_lscpu(_read("lscpu_epyc_2core_kvm.txt"))
    # no "CPU max MHz" line in a KVM guest: half the BogoMIPS (4890.86) is the clock
    assert cpu["name"] == "AMD EPYC" and cpu["cores"] == 2
    assert cpu["ghz"] == pytest.approx(2.445, abs=1e-3) and cpu["flops_per_cycle"] == 32  # AVX2 + FMA
    assert parse_lscpu("Model name: X\nCPU(s): 4\nCPU max MHz: 3000.0\nFlags: avx512f avx2 fma\n") == {
        "name": "X", "cores": 4, "ghz": 3.0, "flops_per_cycle": 64, "arch": ""}
    assert parse_meminfo("MemTotal:       24683652 kB\n") == pytest.approx(23.54, abs=0.01)


def test_catalog_parts_map_to_their_entries():
    h100 = detect_devices({"nvidia-smi": _read("nvidia_smi_h100_sxm.csv")}, "GPU")
    assert h100 == Detected("CUDA", "NVIDIA H100 80GB HBM3", pytest.approx(79.65, abs=0.01), 8, "nvidia-smi")
    assert hardware_for(h100).catalog == "h100-sxm"
    h200 = detect_devices({"nvidia-smi": _read("nvidia_smi_h200.csv")})
    assert hardware_for(h200).catalog == "h200-sxm"
    npu = detect_devices({"npu-smi": _read("npu_smi_910b3.txt"), "lscpu": "CPU(s): 2"}, "NPU")
    assert npu is not None and npu.kind == "NPU" and hardware_for(npu).catalog == "atlas-800i-a2"


def test_a_part_outside_the_catalog_gets_a_roofline_entry_that_round_trips(tmp_path):
    l40s = detect_devices({"nvidia-smi": _read("nvidia_smi_l40s.csv")}, "GPU")
    choice = hardware_for(l40s)
    hw = choice.hardware
    assert choice.catalog == "" and hw.name == "detected-nvidia-l40s"
    assert hw.tflops["bf16"] == 362.0 and hw.hbm_tb_s == 0.864 and hw.devices_per_node == 2  # datasheet
    assert hw.hbm_gib == pytest.approx(44.99, abs=0.01)
    base = load_hardware(choice.basis)
    assert base.memory_kind == "CUDA" and hw.compute_eff == base.compute_eff  # the nearest kind's factors
    # a 32 GiB 910B4 is not the 64 GiB Atlas entry: the Atlas figures with its own memory
    b4 = hardware_for(detect_devices({"npu-smi": _read("npu_smi_910b4.txt")}))
    assert b4.catalog == "" and b4.basis == "atlas-800i-a2" and b4.hardware.hbm_gib == 32.0
    path = tmp_path / "hw.toml"
    path.write_text(hardware_toml(hw))
    assert load_hardware(str(path)) == hw


def test_a_cpu_is_a_roofline_of_its_cores():
    cpu = detect_devices({"lscpu": _read("lscpu_epyc_2core_kvm.txt"), "meminfo": "MemTotal: 8388608 kB\n"}, "none")
    assert cpu is not None and cpu.kind == "CPU" and cpu.memory_gib == 8.0
    hw = hardware_for(cpu).hardware
    assert hw.memory_kind == "CPU" and hw.tflops["bf16"] == pytest.approx(2 * 2.445 * 32 / 1e3, abs=1e-4)
    assert "lscpu" in hw.description
    assert detect_devices({"lscpu": _read("lscpu_epyc_2core_kvm.txt")}, "GPU") is None


def test_a_roofline_entry_names_the_entry_whose_efficiencies_it_took():
    l40s = detect_devices({"nvidia-smi": _read("nvidia_smi_l40s.csv")}, "GPU")
    choice = hardware_for(l40s)
    # the nearest CUDA entry by memory is a100-sxm-40gb, whose own efficiencies are h100-sxm's
    assert choice.basis == "a100-sxm-40gb" and choice.hardware.efficiency_from == "h100-sxm"


@pytest.mark.parametrize(("name", "expected", "catalog"), [
    # vllm-ascend issue #2035 (npu-smi 24.1.rc3.7, Atlas A3): chip rows "| 0     0 |" (Chip, Phy-ID)
    ("npu_smi_a3_vllm_ascend_2035.txt", [("Ascend910 (Atlas A3)", 64.0)] * 2, "atlas-800i-a3"),
    # vllm-ascend issue #2082 (the same A3 table as #2534's, four dies of two NPUs)
    ("npu_smi_a3_vllm_ascend_2082.txt", [("Ascend910 (Atlas A3)", 64.0)] * 4, "atlas-800i-a3"),
    # vllm-ascend issue #1903 (Atlas A2, 910B3): chip rows "| 0 |"
    ("npu_smi_910b3_vllm_ascend_1903.txt", [("910B3", 64.0)] * 4, "atlas-800i-a2"),
    # Syllo/nvtop issue #421 (npu-smi 25.2.0, Atlas 300I Duo): chip rows "| 0       0 |" (Chip, Device), DDR only
    ("npu_smi_300i_duo_nvtop_421.txt", [("310P3", pytest.approx(44280 / 1024)), ("310P3", pytest.approx(43693 / 1024))],
     None),
])
def test_npu_smi_of_a2_a3_and_300i_duo_count_every_chip(name, expected, catalog):
    """Issue 51 item 8: A3's chip rows carry two ids ("Chip  Phy-ID", vllm-ascend #2035, #2534), which
    msopt/sim/detect.py's parse_npu_smi read as no NPU at all; real outputs of A2, A3 and 300I Duo, cited."""
    rows = parse_npu_smi(_read(name))
    assert rows == expected
    found = detect_devices({"npu-smi": _read(name)}, "NPU")
    assert found is not None and found.count == len(expected)
    assert hardware_for(found).catalog == (catalog or "")
