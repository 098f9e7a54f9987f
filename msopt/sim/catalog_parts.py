"""Which catalog entry a device name means, as nvidia-smi, npu-smi or a serving write-up gives it;
read by the catalog (:mod:`msopt.sim.catalog_load`: a hardware name that is not an entry's own) and by the
detection of a node's devices (:mod:`msopt.sim.detect`)."""

from __future__ import annotations

import re

#: Catalog entries of known parts: (pattern on the reported name, memory kind, catalog entry).
#: "NVIDIA H100 80GB HBM3" is how nvidia-smi names the SXM part (the PCIe card says "PCIe", the
#: NVL card "NVL"); Atlas 800I A2 nodes carry Ascend 910B chips (npu-smi "910B1".."910B4").
#: nvidia-smi names the A100 SXM parts "NVIDIA A100-SXM4-40GB" / "-80GB" (the PCIe cards say
#: "PCIE"). Atlas A3 nodes carry 910C packages of two dies, each one NPU of 64 GiB whose SoC name is
#: Ascend910_93xx (9391, 9392, 9381, 9382, 9372, 9362: the A3 SoC list of CANN's runtime and of
#: the Ascend device plugins).
CATALOG_PARTS: tuple[tuple[str, str, str], ...] = (
    (r"\bH200\b(?!.*NVL)", "CUDA", "h200-sxm"),
    (r"\bH100\b(?!.*(PCIe|NVL))", "CUDA", "h100-sxm"),
    (r"\bA100\b(?!.*(?i:PCIe)).*\b40\s*GB?\b", "CUDA", "a100-sxm-40gb"),
    (r"\bA100\b(?!.*(?i:PCIe)).*\b80\s*GB?\b", "CUDA", "a100-sxm-80gb"),
    (r"^(Ascend)?910B", "NPU", "atlas-800i-a2"),
    (r"^(Ascend)?910_93", "NPU", "atlas-800i-a3"),
    # npu-smi info on A3 names each die "Ascend910" under a "Chip  Phy-ID" header (msopt.sim.detect.parse_npu_smi)
    (r"^Ascend910 \(Atlas A3\)$", "NPU", "atlas-800i-a3"),
)

#: Device names as serving write-ups give them (free text, matched without case): the Atlas
#: server (800I / 800T / 900 A2 or A3) or the chip (910B, 910C), a GPU's name as above.
_NAMED_PARTS: tuple[tuple[str, str], ...] = (
    (r"\b(910C|910_93\d\d)\b|\bA3\b", "atlas-800i-a3"),
    (r"\b910B\d?\b|\bA2\b", "atlas-800i-a2"),
)


def catalog_part(name: str) -> str | None:
    """The catalog entry of a device name as nvidia-smi, npu-smi or a write-up gives it, or None.

    ``"NVIDIA A100-SXM4-40GB"`` and ``"1x A100 80G"`` are the A100 SXM entries, ``"910B3"`` and
    ``"Atlas 800T A2"`` the 910B node's, ``"Ascend910_9392"`` and ``"Atlas 800I A3 (910C)"`` the
    A3's; a PCIe or NVL card, or a part not in the catalog, is None.
    """
    text = " ".join(name.split())
    for pattern, _, entry in CATALOG_PARTS:
        if re.search(pattern, text, re.IGNORECASE):
            return entry
    if re.search(r"\b(Atlas|Ascend|910)", text, re.IGNORECASE):
        for pattern, entry in _NAMED_PARTS:
            if re.search(pattern, text, re.IGNORECASE):
                return entry
    return None
