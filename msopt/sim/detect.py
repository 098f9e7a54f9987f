"""The hardware of a node from what its tools print: nvidia-smi, npu-smi, lscpu.

:func:`parse_nvidia_smi`, :func:`parse_npu_smi` and :func:`parse_lscpu` read the tools' text
(the probe that runs them is :func:`msopt.run.preflight.hardware_probe`); :func:`detect_devices`
picks what a node offers; :func:`hardware_for` maps it to a catalog entry, or else to a roofline
entry built from the detected figures (and datasheet figures of known parts) with the
efficiencies of the catalog's nearest entry of the same kind, which the in-run refit
(``[search] refit``) then fits to the run's own measurements.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from msopt.sim.catalog_load import list_hardware, load_hardware
from msopt.sim.catalog_parts import CATALOG_PARTS
from msopt.sim.catalog_types import Hardware

__all__ = ["DATASHEETS", "Detected", "HardwareChoice", "detect_devices", "hardware_for", "parse_lscpu",
           "parse_meminfo", "parse_npu_smi", "parse_nvidia_smi"]

#: Datasheet figures of parts outside the catalog (dense TFLOPS per dtype, HBM TB/s, scale-up
#: GB/s per direction): NVIDIA's product datasheets of each part (A100, H100 PCIe / NVL, H20,
#: L40S, L4, A10, B200). Only the efficiencies then come from the catalog.
DATASHEETS: tuple[tuple[str, dict[str, float], float, float], ...] = (
    (r"\bH100\b.*PCIe", {"bf16": 756.0, "fp8": 1513.0, "int8": 1513.0}, 2.0, 64.0),
    (r"\bH100\b.*NVL", {"bf16": 835.0, "fp8": 1671.0, "int8": 1671.0}, 3.9, 300.0),
    (r"\bH20\b", {"bf16": 148.0, "fp8": 296.0, "int8": 296.0}, 4.0, 450.0),
    (r"\bA100\b.*(80GB|PCIe.*80)", {"bf16": 312.0, "fp8": 0.0, "int8": 624.0}, 2.039, 300.0),
    (r"\bA100\b", {"bf16": 312.0, "fp8": 0.0, "int8": 624.0}, 1.555, 300.0),
    (r"\bL40S\b", {"bf16": 362.0, "fp8": 733.0, "int8": 733.0}, 0.864, 32.0),
    (r"\bL4\b", {"bf16": 121.0, "fp8": 242.0, "int8": 242.0}, 0.3, 32.0),
    (r"\bA10\b", {"bf16": 125.0, "fp8": 0.0, "int8": 250.0}, 0.6, 32.0),
    (r"\bB200\b", {"bf16": 2250.0, "fp8": 4500.0, "int8": 4500.0}, 8.0, 900.0),
)


@dataclass(frozen=True)
class Detected:
    """The accelerators (or CPU) of one node.

    Attributes:
        kind: "CUDA", "NPU" or "CPU" (a hardware entry's ``memory_kind``).
        name: the part's name as the tool reports it ("NVIDIA H100 80GB HBM3", "910B3", "AMD EPYC").
        memory_gib: memory per device (GPU/NPU) or of the host (CPU), GiB.
        count: devices on the node (CPU: 1, the whole host).
        source: the tool ("nvidia-smi", "npu-smi", "lscpu").
        cores: CPU cores (CPU only).
        ghz: CPU clock (CPU only; lscpu's max MHz, else half its BogoMIPS).
        flops_per_cycle: fp32 FLOP per core and cycle from the vector flags (CPU only).
    """

    kind: str
    name: str
    memory_gib: float
    count: int
    source: str
    cores: int = 0
    ghz: float = 0.0
    flops_per_cycle: int = 0

    def line(self) -> str:
        """``8 x NVIDIA H100 80GB HBM3 (79.6 GiB) from nvidia-smi``."""
        return f"{self.what()} from {self.source}"

    def what(self) -> str:
        """``8 x NVIDIA H100 80GB HBM3 (79.6 GiB)``."""
        if self.kind == "CPU":
            return f"{self.name}, {self.cores} core(s) at {self.ghz:.2f} GHz, {self.memory_gib:.1f} GiB"
        return f"{self.count} x {self.name} ({self.memory_gib:.1f} GiB)"


def parse_nvidia_smi(text: str) -> list[tuple[str, float]]:
    """``nvidia-smi --query-gpu=name,memory.total --format=csv,noheader``: one ``(name, GiB)`` per GPU.

    Lines look like ``NVIDIA H100 80GB HBM3, 81559 MiB`` (nvidia-smi's CSV format, NVIDIA's
    nvidia-smi documentation, "--format=csv": values with units unless ``nounits``).
    """
    out: list[tuple[str, float]] = []
    for line in text.splitlines():
        if "," not in line:
            continue
        name, _, mem = line.rpartition(",")
        m = re.fullmatch(r"\s*([\d.]+)\s*(MiB|GiB|MB)?\s*", mem)
        if not name.strip() or m is None:
            continue
        value = float(m.group(1))
        out.append((name.strip(), value if m.group(2) == "GiB" else value / 1024.0))
    return out


def parse_npu_smi(text: str) -> list[tuple[str, float]]:
    """``npu-smi info``: one ``(name, GiB of HBM)`` per NPU chip.

    The table has two rows per chip: ``| 0     910B3   | OK  | 101.8  43  0 / 0 |`` then
    ``| 0     | 0000:C1:00.0 | 0  0 / 0  3318 / 65536 |`` whose last ``used / total`` pair is the
    chip's memory in MB (HBM; DDR on a 300I Duo, which has no HBM column) (npu-smi 23.x-26.x, Huawei's
    npu-smi manual, "info"); the process table after it is ignored. The chip row's first cell is the
    chip id alone on Atlas A2 (header ``Chip``), or the chip id and a second id on Atlas A3 (header
    ``Chip  Phy-ID``: ``| 0     0 |``, vllm-ascend issues #2035 and #2534) and on the 300I Duo (header
    ``Chip    Device``, Syllo/nvtop issue #421). A3 names its dies ``Ascend910``, a name the first-generation
    910 never printed (it says ``910ProB``, vllm-ascend issue #1047): that name under a ``Phy-ID`` header
    is reported as ``Ascend910 (Atlas A3)``.
    """
    out: list[tuple[str, float]] = []
    name: str | None = None
    a3 = re.search(r"\|\s*Chip\s+Phy-ID\s*\|", text) is not None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        if not cells or not cells[0]:
            continue
        if "Process" in line:
            break  # the process table: no more devices
        first = cells[0].split()
        if len(first) == 2 and first[0].isdigit() and not first[1].isdigit():
            name = f"{first[1]} (Atlas A3)" if a3 and first[1] == "Ascend910" else first[1]
            continue
        if name is not None and len(first) in (1, 2) and all(t.isdigit() for t in first):
            pairs = re.findall(r"(\d+)\s*/\s*(\d+)", cells[-1])
            if pairs:
                out.append((name, float(pairs[-1][1]) / 1024.0))
            name = None
    return out


def parse_lscpu(text: str) -> dict[str, Any]:
    """``lscpu``: model name, cores, GHz and fp32 FLOP per core and cycle (util-linux lscpu's
    ``Key: value`` lines: ``Model name``, ``Core(s) per socket``, ``Socket(s)``, ``CPU max MHz``,
    ``BogoMIPS``, ``Flags``)."""
    kv: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in kv:
            kv[key.strip()] = value.strip()

    def num(key: str) -> float:
        try:
            return float(kv.get(key, "").replace(",", "."))
        except ValueError:
            return 0.0

    cores = int(num("Core(s) per socket") * max(1.0, num("Socket(s)"))) or int(num("CPU(s)"))
    mhz = num("CPU max MHz") or num("CPU MHz") or num("BogoMIPS") / 2.0
    flags = set(kv.get("Flags", "").split())
    # fp32 FLOP per cycle and core: two FMA pipes of the widest vector (AVX-512: 16 lanes, AVX2: 8)
    fpc = 64 if "avx512f" in flags else 32 if {"avx2", "fma"} <= flags else 16 if "avx" in flags else 8
    return {"name": kv.get("Model name", "CPU"), "cores": cores, "ghz": mhz / 1000.0, "flops_per_cycle": fpc,
            "arch": kv.get("Architecture", "")}


def parse_meminfo(text: str) -> float:
    """``/proc/meminfo``'s MemTotal in GiB (0 when absent)."""
    m = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, re.M)
    return int(m.group(1)) / 1024.0 ** 2 if m else 0.0


def detect_devices(probe: Mapping[str, str], accelerator: str | None = None) -> Detected | None:
    """What one node offers, from a probe's outputs (keys ``nvidia-smi``, ``npu-smi``, ``lscpu``,
    ``meminfo``; missing or empty when the tool is absent): the accelerator ``[cluster]
    accelerator`` names ("GPU", "NPU"; None: whichever is there), the CPU when there is none."""
    want = (accelerator or "").upper()
    if want in ("", "GPU"):
        gpus = parse_nvidia_smi(probe.get("nvidia-smi", ""))
        if gpus:
            return Detected("CUDA", gpus[0][0], gpus[0][1], len(gpus), "nvidia-smi")
    if want in ("", "NPU"):
        npus = parse_npu_smi(probe.get("npu-smi", ""))
        if npus:
            return Detected("NPU", npus[0][0], npus[0][1], len(npus), "npu-smi")
    if want in ("", "NONE", "CPU") and probe.get("lscpu"):
        cpu = parse_lscpu(probe["lscpu"])
        return Detected("CPU", str(cpu["name"]), parse_meminfo(probe.get("meminfo", "")), 1, "lscpu",
                        int(cpu["cores"]), float(cpu["ghz"]), int(cpu["flops_per_cycle"]))
    return None


@dataclass(frozen=True)
class HardwareChoice:
    """The hardware the prior uses for a detected node.

    Attributes:
        hardware: the entry (a catalog entry's, or a roofline entry built here).
        catalog: the catalog entry's name when the part is one, else "".
        basis: for a roofline entry, the catalog entry whose efficiencies (and, without datasheet
            figures, peak figures) it took.
        how: one line: what was taken from where.
        figures: for a roofline entry, where its figures came from.
    """

    hardware: Any
    catalog: str
    basis: str
    how: str
    figures: str = ""


def _nearest(kind: str, memory_gib: float, extra_dirs: Iterable[str | Path]) -> Any | None:
    best = None
    for name in list_hardware(extra_dirs):
        hw = load_hardware(name, extra_dirs)
        if hw.memory_kind.upper() != kind:
            continue
        if best is None or abs(hw.hbm_gib - memory_gib) < abs(best.hbm_gib - memory_gib):
            best = hw
    return best


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def hardware_for(found: Detected, extra_dirs: Sequence[str | Path] = ()) -> HardwareChoice:
    """The catalog entry of a detected part, or a roofline entry built from its figures.

    A part of :data:`CATALOG_PARTS` whose memory is within 10 % of the entry's is that entry.
    Otherwise the entry is the nearest catalog entry of the same kind (by memory) with the
    detected memory and device count, the datasheet's peak figures where :data:`DATASHEETS`
    knows the part, and for a CPU the peak its cores, clock and vector width give.
    """
    for pattern, kind, entry in CATALOG_PARTS:
        if kind == found.kind and re.search(pattern, found.name):
            hw = load_hardware(entry, extra_dirs)
            if abs(hw.hbm_gib - found.memory_gib) <= 0.1 * hw.hbm_gib:
                return HardwareChoice(hw, entry, "", f"{entry} (catalog) for {found.line()}")
    base = _nearest(found.kind, found.memory_gib, extra_dirs)
    name = f"detected-{_slug(found.name)}"
    if base is None:  # no catalog entry of this kind (a CPU before any CPU entry): generic factors
        base = Hardware(name=name, description="", memory_kind=found.kind, tflops={"bf16": 1.0}, hbm_gib=1.0,
                        hbm_tb_s=0.05, reserve_gib=0.5, intra_node_gb_s=10.0, inter_node_gb_s=1.0,
                        devices_per_node=1, compute_eff=0.3, memory_eff=0.5, comm_eff=0.5,
                        allreduce_latency_us=50.0, step_overhead_ms=10.0, per_seq_overhead_us=500.0,
                        api_overhead_ms=5.0)
        basis = "generic factors"
    else:
        basis = base.name
    hw = replace(base, name=name, hbm_gib=round(found.memory_gib, 2), devices_per_node=max(1, found.count),
                 engine_overrides=dict(base.engine_overrides),
                 efficiency_from=getattr(base, "efficiency_from", "") or basis)
    figures = "peak figures and efficiencies of " + basis
    if found.kind == "CPU":
        tflops = found.cores * found.ghz * found.flops_per_cycle / 1e3
        # vLLM's CPU build keeps its KV cache in VLLM_CPU_KVCACHE_SPACE; the host's memory bounds it
        hw = replace(hw, tflops={"bf16": round(tflops, 4), "fp32": round(tflops, 4)}, devices_per_node=1)
        figures = (f"{found.cores} x {found.ghz:.2f} GHz x {found.flops_per_cycle} FLOP/cycle = {tflops:.3f} "
                   f"TFLOPS; memory bandwidth and efficiencies of {basis}")
    else:
        for pattern, tflops_d, tb_s, link in DATASHEETS:
            if re.search(pattern, found.name):
                hw = replace(hw, tflops=dict(tflops_d), hbm_tb_s=tb_s, intra_node_gb_s=link)
                figures = f"datasheet peak figures, efficiencies of {basis}"
                break
    hw = replace(hw, description=f"{found.name} as detected ({found.source}); {figures}")
    return HardwareChoice(hw, "", basis, f"roofline entry {name} for {found.line()} ({figures}; the in-run "
                          "refit fits it to the run's measurements)", figures)
