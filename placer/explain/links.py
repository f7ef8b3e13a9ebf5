"""Links in a person's words: which kind of link a domain crosses (NVLink, PCIe, InfiniBand under a leaf,
the spine), and the slowest one a group of GPUs talks over. Shared by the explanation and the SVG."""

from __future__ import annotations

from dataclasses import dataclass

from placer.model.levels import LEVEL_RANK
from placer.topology.graph import Topology


@dataclass(frozen=True)
class LinkView:
    """The slowest link a set of GPUs crosses, named as an operator would."""

    kind: str  # nvlink | pcie | cross-socket | nvlink-domain | infiniband | roce | infiniband-spine | roce-spine
    label: str
    domain: str  # the domain whose crossing is the bottleneck
    bandwidth_gbps: float | None  # per GPU lane; None inside one GPU
    latency_us: float
    measured: str | None  # source of measured figures, when an override applies


def link_kind(topo: Topology, domain_id: str) -> tuple[str, str]:
    """(kind, words) for crossing between the children of a domain."""
    dom = topo.domains[domain_id]
    ib = topo.network_kind == "infiniband"
    if dom.level == "socket":
        return "pcie", "PCIe switch (one socket)"
    if dom.level == "node":
        node = topo.nodes[dom.nodes[0]]
        if node.interconnect == "nvlink":
            return "nvlink", "NVLink (NVSwitch) in node"
        if len(node.sockets) > 1:
            return "cross-socket", "PCIe across CPU sockets"
        return "pcie", "PCIe in node"
    if dom.level == "nvlink-domain":
        return "nvlink-domain", "NVLink across trays (NVSwitch)"
    if dom.level in ("rack", "leaf"):
        return ("infiniband", "InfiniBand leaf") if ib else ("roce", "RoCE Ethernet leaf")
    over = topo.spine_oversubscription
    ratio = f" ({over:g}:1)" if over > 1 else ""
    return (
        ("infiniband-spine", f"InfiniBand spine{ratio}")
        if ib
        else (
            "roce-spine",
            f"RoCE Ethernet spine{ratio}",
        )
    )


def crossed_domains(topo: Topology, gpus: list[tuple[int, int]], top: str | None = None) -> list[str]:
    """Every domain whose crossing figures a ring over these GPUs (or a route through ``top``) pays."""
    homes = sorted({topo.gpu_domain(n, g) for n, g in gpus})
    top = top or topo.lowest_common(homes)
    out: set[str] = set()
    for home in homes:
        for d in topo.ancestors(home):
            out.add(d)
            if d == top:
                break
    return sorted(out, key=topo.order.__getitem__)


def bottleneck_link(topo: Topology, gpus: list[tuple[int, int]], top: str | None = None) -> LinkView | None:
    """The slowest crossing on the way (ties: the broadest domain, where the traffic leaves the box)."""
    if len(gpus) <= 1 and top is None:
        return None
    doms = crossed_domains(topo, gpus, top)
    worst = min(doms, key=lambda d: (topo.crossing[d][0], -LEVEL_RANK[topo.domains[d].level]))
    bw, _ = topo.crossing[worst]
    lat = max(topo.crossing[d][1] for d in doms)
    kind, words = link_kind(topo, worst)
    return LinkView(kind, words, worst, bw, lat, topo.measured.get(worst))
