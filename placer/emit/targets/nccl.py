"""NCCL settings chosen from the links each instance actually got, each with a one-line reason.

Phase 1 classifies the instance: one GPU (no collectives), one node (NVSwitch or PCIe), several trays of one
NVLink domain (multi-node NVLink), or several nodes over the network (InfiniBand or RoCE, under one leaf or
through the spine). Phase 2 picks values for that class. Phase 3 applies the user's word: ``nccl.env`` in the
spec replaces placer's value, and a variable the pool's template sets is left to the template (it is in the
container's env already, and wins). ``nccl.auto: false`` keeps only the user's values.

Values follow NCCL's environment documentation: ``NCCL_P2P_LEVEL``, ``NCCL_NVLS_ENABLE`` (NVLink SHARP on
NVSwitch gen 3 and later: H100-class and newer), ``NCCL_MNNVL_ENABLE``, ``NCCL_IB_HCA`` (a prefix), ``NCCL_NET_
GDR_LEVEL``, ``NCCL_CROSS_NIC``, ``NCCL_MIN_NCHANNELS``, ``NCCL_IB_GID_INDEX`` (RoCE v2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from placer.model.placement import InstancePlacement
from placer.model.spec import ServingTopology
from placer.topology.graph import Node, Topology

# NVSwitch generation 3+ (Hopper and later) carries NVLink SHARP; A100's NVSwitch does not.
_NVLS_PRODUCTS = re.compile(r"(H100|H200|H800|H20|GH200|B100|B200|B300|GB200|GB300)", re.IGNORECASE)


@dataclass(frozen=True)
class Setting:
    name: str
    value: str
    reason: str


def _nvls_capable(node: Node) -> bool:
    product = node.gpus[0].product if node.gpus else ""
    return node.interconnect == "nvlink" and bool(_NVLS_PRODUCTS.search(product))


def _nvls(node: Node, gpus: int) -> Setting:
    product = node.gpus[0].product if node.gpus else "unknown GPU"
    if _nvls_capable(node):
        return Setting("NCCL_NVLS_ENABLE", "1", f"{product} NVSwitch (gen 3+): NVLink SHARP reduces in the switch")
    return Setting("NCCL_NVLS_ENABLE", "0", f"{product}: no NVLink SHARP on this NVSwitch")


def placer_settings(spec: ServingTopology, topo: Topology, inst: InstancePlacement) -> list[Setting]:
    """Placer's own choices for one instance (before the user's overrides)."""
    gpus = sum(len(p.gpus) for p in inst.pods)
    if gpus <= 1:
        return []
    nodes = [topo.node_by_name(p.node) for p in inst.pods]
    first = nodes[0]
    out = [Setting("CUDA_DEVICE_ORDER", "PCI_BUS_ID", "CUDA ordinals follow PCI bus order, as NCCL's topology does")]
    if len(inst.pods) == 1:
        if first.interconnect == "nvlink":
            out.append(Setting("NCCL_P2P_LEVEL", "NVL", f"all {gpus} GPUs on one NVSwitch node: P2P over NVLink"))
            out.append(_nvls(first, gpus))
        else:
            sockets = {first.gpu(g).socket for g in inst.pods[0].gpus}
            if len(sockets) == 1:
                out.append(Setting("NCCL_P2P_LEVEL", "PXB", "GPUs under one CPU socket's PCIe tree: P2P over PCIe"))
        return out
    domains = [topo.node_domain[n.index] for n in nodes]
    common = topo.domains[topo.lowest_common(sorted(set(domains)))]
    nvl = {n.path.get("nvlink-domain") for n in nodes}
    if len(nvl) == 1 and None not in nvl:
        out.append(
            Setting(
                "NCCL_MNNVL_ENABLE", "1", f"{len(nodes)} trays of one NVLink domain ({common.id}): multi-node NVLink"
            )
        )
        out.append(_nvls(first, gpus))
        return out
    per_node = len(first.gpus)
    fabric = "InfiniBand" if topo.network_kind == "infiniband" else "RoCE"
    rails = topo.rails_per_node
    out.append(Setting("NCCL_IB_HCA", "mlx5", f"{len(nodes)} nodes over {fabric}: use the ConnectX (mlx5) rail NICs"))
    if rails >= per_node:
        out.append(
            Setting(
                "NCCL_NET_GDR_LEVEL", "PIX", f"{rails} rails for {per_node} GPUs: each GPU's NIC shares its PCIe switch"
            )
        )
    else:
        out.append(
            Setting("NCCL_NET_GDR_LEVEL", "PXB", f"{rails} rails for {per_node} GPUs: NICs sit beyond the GPU's switch")
        )
    if common.level in ("rack", "leaf"):
        out.append(Setting("NCCL_CROSS_NIC", "0", f"all nodes under {common.id}: keep each ring on its own rail"))
    else:
        out.append(Setting("NCCL_CROSS_NIC", "1", "the group crosses the spine: rings may change rails"))
    out.append(
        Setting("NCCL_MIN_NCHANNELS", str(rails), f"one channel per rail: all {rails} NICs carry each all-reduce")
    )
    if fabric == "RoCE":
        out.append(Setting("NCCL_IB_GID_INDEX", "3", "RoCE v2: GID index 3 is the RoCEv2 IPv4 entry on ConnectX"))
    if _nvls_capable(first) and len(inst.pods[0].gpus) > 1:
        out.append(_nvls(first, gpus))
    return out


def instance_settings(spec: ServingTopology, topo: Topology, inst: InstancePlacement) -> list[Setting]:
    """What goes into the engine's env: placer's choices, the spec's overrides, minus what the template sets."""
    chosen = {s.name: s for s in placer_settings(spec, topo, inst)} if spec.nccl.auto else {}
    for name, value in sorted(spec.nccl.env.items()):
        chosen[name] = Setting(name, value, "set by the spec (nccl.env)")
    template = {e.name for e in spec.pools[inst.pool].template.env}
    return [s for name, s in sorted(chosen.items()) if name not in template]


def runtime_notes(topo: Topology, inst: InstancePlacement, exact_gpus: bool) -> list[str]:
    """Hints no pod field can carry: which GPUs, which NUMA node, what multi-node NVLink needs."""
    notes = []
    for pod in inst.pods:
        node = topo.node_by_name(pod.node)
        gpus = ",".join(map(str, pod.gpus))
        how = "the DRA claim selects exactly" if exact_gpus else "the device plugin picks; placer planned"
        notes.append(f"{pod.node}: {how} GPUs {gpus}")
        sockets = sorted({node.gpu(g).socket for g in pod.gpus})
        if len(node.sockets) > 1 and len(sockets) == 1:
            notes.append(
                f"{pod.node}: GPUs {gpus} hang off NUMA node {sockets[0]}; pin CPUs there with the kubelet's "
                "Topology Manager (single-numa-node)"
            )
    if len(inst.pods) > 1 and all("nvlink-domain" in topo.node_by_name(p.node).path for p in inst.pods):
        one = len({topo.node_by_name(p.node).path["nvlink-domain"] for p in inst.pods}) == 1
        emitted = "the instance's ComputeDomain provides it" if exact_gpus and one else "not emitted"
        notes.append(f"multi-node NVLink needs an IMEX channel (NVIDIA DRA driver ComputeDomain); {emitted}")
    return notes
