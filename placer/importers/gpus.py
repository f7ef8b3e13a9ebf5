"""What a GPU's name or compute capability tells: its NVLink generation, and so what ``NV#`` is worth.

``nvidia-smi topo -m`` prints ``NV12`` for "12 bonded NVLinks"; a link's speed depends on the generation.
Figures follow the convention of ``fabric.nvlink`` and the shipped cluster files: the vendor's headline
per-GPU figure, both directions together (an H100 SXM has 18 links = 900 GB/s, an A100 SXM 12 = 600 GB/s).
When the generation is unknown, :data:`ASSUMED_GBPS_PER_LINK` (NVLink 2-4) is used and the import says so.

Where no source shows the links (GPU Feature Discovery labels, NCCL hint files), :data:`BOARDS` says what a
product's boards do: only NVSwitch boards are ``nvlink``; PCIe cards, partial meshes and unknown products are
``pcie``, the conservative choice, and the report says so. A product has one memory figure whatever the source
(:func:`memory_figure`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache


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


@dataclass(frozen=True)
class Board:
    """What a product name says about how a node links its GPUs, when no source shows the links."""

    pattern: re.Pattern[str]
    what: str  # the family, in the provenance and the report
    why: str  # what its boards do, in the report
    nvswitch: bool = False  # a whole board (or part of one) links every GPU pair at the per-GPU figure
    generation: str = ""  # an NVSwitch product's NVLink generation (its per-link figure and links per GPU)
    board_gpus: int = 8  # GPUs of the largest such board: more in one node is not one board
    links_per_gpu: int = 0  # where the part has fewer links than its generation (export parts); 0: the generation's
    direct_pair_links: int = 0  # links between each pair on the part's 4-GPU boards without NVSwitch (0: none made)


def _board(pattern: str, what: str, why: str) -> Board:
    """A family whose boards give no NVLink domain of the node."""
    return Board(re.compile(pattern, re.I), what, why)


def _nvswitch(pattern: str, what: str, generation: str, links_per_gpu: int = 0, **kw: int) -> Board:
    """A family of NVSwitch boards: every GPU pair at the per-GPU figure."""
    why = "NVSwitches link every GPU pair at the per-GPU figure"
    if links_per_gpu:
        why += f" ({links_per_gpu} links per GPU)"
    return Board(re.compile(pattern, re.I), what, why, True, generation, links_per_gpu=links_per_gpu, **kw)


_MIG = re.compile(r"(?<![A-Z])MIG(?![A-Z])", re.I)
_CARDS = r"(?<![A-Z0-9])(A10G?|A16|A2|A30|A40|T4|L4|L40S?|L20|P40|P4|K80|K40M?|M60|M40)(?![0-9])"
BOARDS: tuple[Board, ...] = (
    Board(_MIG, "MIG slices", "MIG has no peer-to-peer between slices"),
    _board(r"PCIe|NVL(?!ink)", "PCIe card", "an NVLink bridge joins two or four cards, not the node"),
    _board(_CARDS + r"|RTX|A[456]000|Quadro|GeForce|TITAN", "PCIe card", "an NVLink bridge, if any, joins a pair"),
    _board(r"SXM2", "SXM2 board", "a hybrid cube mesh: not every GPU pair is NVLinked"),
    _board(r"GH200", "GH200 superchips", "one GPU each; several in a node link directly, fewer links per pair"),
    _nvswitch(r"V100-SXM3", "HGX-2", "volta", board_gpus=16),
    _nvswitch(r"A800", "HGX A800", "ampere", links_per_gpu=8),
    _nvswitch(r"A100", "HGX A100", "ampere", board_gpus=16, direct_pair_links=4),
    _nvswitch(r"H800", "HGX H800", "hopper", links_per_gpu=8),
    _nvswitch(r"H100|H200|H20(?![0-9])", "HGX H100/H200/H20", "hopper", direct_pair_links=6),
    _nvswitch(r"GB[23]00", "GB200/GB300 compute tray", "blackwell", board_gpus=4),
    _nvswitch(r"(?<![A-Z])B[123]00(?![0-9])", "HGX B200/B300", "blackwell"),
)
"""Product families, first match wins: MIG, PCIe and NVL names before the SXM families they share a number
with. NVSwitch boards hold 8 GPUs (16 on HGX-2 and HGX A100 16-GPU, 4 on a GB200 tray); the 4-GPU HGX A100
and H100 boards have no NVSwitch and link each pair with 4 (A100) or 6 (H100) of a GPU's links."""


@dataclass(frozen=True)
class LinkGuess:
    """A node's interconnect from its product alone, and why (said in the report)."""

    interconnect: str  # "nvlink" or "pcie"
    nvlink_gbps: float | None
    origin: str  # the provenance: which table row
    note: str  # what was assumed, and how to override it


_OVERRIDE = "give nvidia-smi topo -m (--topo) for the node, or set interconnect and nvlinkGBps in its node class"


def board_of_product(product: str | None) -> Board | None:
    return next((b for b in BOARDS if b.pattern.search(product or "")), None)


@lru_cache(maxsize=1024)  # once per kind of node, not per node
def links_of_product(product: str, gpus: int) -> LinkGuess:
    """The interconnect a product's boards give a node of ``gpus`` GPUs, when no source shows the links.

    Only an NVSwitch product is ``nvlink``: a whole board (or part of one) at the per-GPU figure; up to 4 GPUs
    of a part also sold on 4-GPU boards without NVSwitch, at that board's narrower pair figure (the lower of
    the two). The figure is the product's own generation's: the table speaks for the product, whatever a
    compute-capability label says. Everything else is ``pcie``: PCIe cards (a bridge joins a pair, not the
    node), partial meshes, and products the table does not know (conservative; the note says how to override)."""
    board = board_of_product(product)
    head = f"{product} x{gpus}"
    if board is None:
        return LinkGuess(
            "pcie",
            None,
            "conservative default (product not in the table)",
            f"{head}: not in the product table and no source shows its NVLinks: interconnect taken as pcie "
            f"(conservative); give --gpu-product, or {_OVERRIDE.removeprefix('give ')}",
        )
    if not board.nvswitch or gpus > board.board_gpus:
        why = f"more GPUs than one {board.what} board holds" if board.nvswitch else board.why
        return LinkGuess(
            "pcie",
            None,
            f"product table ({board.what})",
            f"{head}: {board.what} ({why}): interconnect taken as pcie from the product table; {_OVERRIDE}",
        )
    gen = GENERATIONS[board.generation]
    rate = gen.gbps_per_link
    per_gpu = (board.links_per_gpu or gen.links_per_gpu) * rate
    if gpus <= 4 and board.direct_pair_links:
        figure = board.direct_pair_links * rate
        return LinkGuess(
            "nvlink",
            figure,
            f"product table ({board.what}, 4-GPU board)",
            f"{head}: every GPU pair is NVLinked, NV{board.direct_pair_links} ({figure:g} GB/s) on a 4-GPU board "
            f"without NVSwitch, {per_gpu:g} GB/s on part of an NVSwitch board: the lower figure is assumed from "
            f"the product table; {_OVERRIDE}",
        )
    return LinkGuess(
        "nvlink",
        per_gpu,
        f"product table ({board.what})",
        f"{head}: no source shows its NVLinks; nvlink at {per_gpu:g} GB/s assumed from the product table "
        f"({board.what}: {board.why}); {_OVERRIDE}",
    )


NOMINAL_TOLERANCE = 0.05
"""A driver reports a little less memory than the board's nominal size (its reserve: an H100 80GB shows 81559
MiB = 79.65 GiB); within this fraction of the nominal size the two are one figure."""


def memory_of_product(product: str | None) -> float | None:
    """The nominal size in a product name (``NVIDIA-A100-SXM4-80GB`` -> 80), if it carries one. A MIG product
    (``...-40GB-MIG-1g.5gb``) has none: the 40GB is the board's, not the slice's; nor has a GH200 (its 480GB
    is the superchip's CPU and GPU memory together)."""
    if _MIG.search(product or "") or "GH200" in (product or "").upper():
        return None
    match = re.search(r"(?<![0-9])(\d{1,4})GB(?![a-z])", product or "", re.I)
    return float(match.group(1)) if match else None


@lru_cache(maxsize=1024)
def memory_figure(product: str | None, reported_gib: float) -> tuple[float, str | None]:
    """One memory figure per product whatever the source: the product name's nominal size when the reported
    figure is within :data:`NOMINAL_TOLERANCE` of it (the product table and PCI ids give the nominal size),
    else the reported one. The second value says what was done, for the report (None: nothing to say)."""
    nominal = memory_of_product(product)
    if nominal is None or reported_gib == nominal:
        return reported_gib, None
    if abs(reported_gib - nominal) <= NOMINAL_TOLERANCE * nominal:
        return nominal, (
            f"{product}: {reported_gib:g} GiB reported, the nominal {nominal:g} GiB of the product name used (the "
            "driver keeps a reserve; the product table and PCI ids give the nominal size)"
        )
    return reported_gib, (
        f"{product}: {reported_gib:g} GiB reported but the product name says {nominal:g}GB; the reported figure "
        "is kept (a different board, or a mislabelled node?)"
    )


def nvlink_gbps(links: int, generation: str | None) -> float:
    """``NV<links>`` -> GB/s (both directions) for that generation, or at the assumed rate."""
    gen = GENERATIONS.get(generation) if generation else None
    return links * (gen.gbps_per_link if gen else ASSUMED_GBPS_PER_LINK)
