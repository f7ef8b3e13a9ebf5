"""What a GPU's name or compute capability tells: its NVLink generation, and so what ``NV#`` is worth.

``nvidia-smi topo -m`` prints ``NV12`` for "12 bonded NVLinks"; a link's speed depends on the generation.
Figures follow the convention of ``fabric.nvlink`` and the shipped cluster files: the vendor's headline
per-GPU figure, both directions together (an H100 SXM has 18 links = 900 GB/s, an A100 SXM 12 = 600 GB/s).
When the generation is unknown, :data:`ASSUMED_GBPS_PER_LINK` (NVLink 2-4) is used and the import says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Generation:
    name: str
    gbps_per_link: float  # GB/s per link, both directions
    links_per_gpu: int  # on the SXM / NVSwitch parts (the per-GPU total is their product)


GENERATIONS: dict[str, Generation] = {
    "pascal": Generation("NVLink 1 (Pascal P100, sm60)", 40.0, 4),
    "volta": Generation("NVLink 2 (Volta V100, sm70)", 50.0, 6),
    "ampere": Generation("NVLink 3 (Ampere A100/A30, sm80)", 50.0, 12),
    "ampere-bridge": Generation("NVLink 3 bridge (Ampere A40/RTX A6000, sm86)", 28.125, 4),
    "hopper": Generation("NVLink 4 (Hopper H100/H200/GH200, sm90)", 50.0, 18),
    "blackwell": Generation("NVLink 5 (Blackwell B200/GB200, sm100)", 100.0, 18),
}

ASSUMED_GBPS_PER_LINK = 50.0
"""NVLink 2, 3 and 4 all carry 50 GB/s per link (both directions); only NVLink 1 and 5 differ."""

_BY_SM: dict[int, str] = {60: "pascal", 70: "volta", 80: "ampere", 86: "ampere-bridge", 90: "hopper", 100: "blackwell"}

# GFD / nvidia-smi product names, spaces as '-': NVIDIA-A100-SXM4-80GB, NVIDIA-H100-80GB-HBM3, Tesla-V100-SXM2-16GB.
_BY_PRODUCT: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"P100", re.I), "pascal"),
    (re.compile(r"V100", re.I), "volta"),
    (re.compile(r"A100|A800|A30(?!\d)", re.I), "ampere"),
    (re.compile(r"A40(?!\d)|A6000|RTX-A\d", re.I), "ampere-bridge"),
    (re.compile(r"GH200|H100|H200|H800|H20(?!\d)", re.I), "hopper"),
    (re.compile(r"GB\d00|B\d00(?!\d)", re.I), "blackwell"),
)

PCI_DEVICES: dict[int, tuple[str, float, str]] = {
    0x20B0: ("NVIDIA-A100-SXM4-40GB", 40.0, "ampere"),
    0x20B2: ("NVIDIA-A100-SXM4-80GB", 80.0, "ampere"),
    0x20B5: ("NVIDIA-A100-80GB-PCIe", 80.0, "ampere"),
    0x2330: ("NVIDIA-H100-80GB-HBM3", 80.0, "hopper"),
    0x1DB1: ("Tesla-V100-SXM2-16GB", 16.0, "volta"),
    0x1DB5: ("Tesla-V100-SXM2-32GB", 32.0, "volta"),
}
"""NVIDIA PCI device ids (vendor 0x10de) that NCCL hint files carry instead of a name: product, GiB, generation."""


def generation_of_sm(sm: int | None) -> str | None:
    """Compute capability (80 for 8.0) -> generation key; GPUs without NVLink (Ada, sm89) give None."""
    return _BY_SM.get(sm) if sm is not None else None


def generation_of_product(product: str | None) -> str | None:
    if not product:
        return None
    return next((gen for pattern, gen in _BY_PRODUCT if pattern.search(product)), None)


def interconnect_of_product(product: str | None) -> str | None:
    """``pcie`` for PCIe cards; ``nvlink`` for boards whose GPUs are all NVLink-connected (A100 SXM4 and later
    SXM/HGX parts); None when the name does not say. V100 SXM2 boards are a hybrid cube mesh (not every pair)
    and NVL cards are bridged in pairs, so neither is assumed."""
    if not product:
        return None
    if re.search(r"pcie", product, re.I):
        return "pcie"
    if re.search(r"NVL(?!ink)", product, re.I):
        return None
    if re.search(r"SXM[4-9]|HBM3|GH200|GB\d00|B\d00(?!\d)|H200", product, re.I):
        return "nvlink"
    return None


def memory_of_product(product: str | None) -> float | None:
    """The nominal size in a product name (``NVIDIA-A100-SXM4-80GB`` -> 80), if it carries one."""
    match = re.search(r"(?<![0-9])(\d{1,4})GB(?![a-z])", product or "", re.I)
    return float(match.group(1)) if match else None


def nvlink_gbps(links: int, generation: str | None) -> float:
    """``NV<links>`` -> GB/s (both directions) for that generation, or at the assumed rate."""
    gen = GENERATIONS.get(generation) if generation else None
    return links * (gen.gbps_per_link if gen else ASSUMED_GBPS_PER_LINK)
