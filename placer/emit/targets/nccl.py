"""NCCL settings chosen from the links each instance actually got, each with a one-line reason that cites
its source.

Phase 1 classifies the instance: one GPU (no collectives), one node (NVSwitch or PCIe), several trays of one
NVLink domain (multi-node NVLink), or several nodes over the network (InfiniBand or RoCE, under one leaf or
through the spine). Phase 2 picks values for that class and for the spec's ``nccl.profile`` (serving or
training). Phase 3 applies the user's word: ``nccl.env`` in the spec replaces placer's value, and a variable
the pool's template sets is left to the template (it is in the container's env already, and wins).
``nccl.auto: false`` keeps only the user's values.

Sources (docs/TARGETS.md has the table): NVIDIA's NCCL environment-variable documentation, release 2.30
("NCCL 2.30 docs" in reasons), and ../shared/sources/003 ("source 003", an NCCL / InfiniBand tuning guide
for inference). Where they disagree placer follows NCCL's documentation, which describes the library the
pods run; 003's values it does not take are listed in docs/TARGETS.md with the reason.
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
    if _nvls_capable(node):  # 1 would skip NCCL's multicast check, and a failed bind then aborts the job
        return Setting(
            "NCCL_NVLS_ENABLE",
            "2",
            f"NCCL 2.30 docs, src/transport/nvls.cc: {product} NVSwitch (gen 3+) can reduce in the switch "
            "(NVLink SHARP); 2 uses it where the driver reports multicast support",
        )
    return Setting("NCCL_NVLS_ENABLE", "0", f"NCCL 2.30 docs: {product}, no NVLink SHARP before NVSwitch gen 3")


# Channel counts per profile, source 003: "For inference, 2-4 channels are sufficient. Training uses 8-16."
_CHANNELS = {"serving": (2, 4), "training": (8, 16)}
_MAX_CHANNELS = 32  # NCCL 2.30 docs: NCCL_MIN_NCHANNELS takes values up to 32 (2.5 and later)


def channel_settings(profile: str, rails: int) -> list[Setting]:
    """Source 003's channel range for the profile, the cap raised to the rail count so that every rail
    carries a ring (NCCL keeps a ring or tree on one NIC: 'the same NIC for the same ring/tree')."""
    low, high = _CHANNELS[profile]
    cap = min(max(high, rails), _MAX_CHANNELS)
    why = "2-4 for serving" if profile == "serving" else "8-16 for training"
    raised = f", raised to {rails} so each of the {rails} rails carries a ring" if cap > high else ""
    return [
        Setting("NCCL_MIN_NCHANNELS", str(low), f"source 003: {why} ({profile} profile)"),
        Setting(
            "NCCL_MAX_NCHANNELS",
            str(cap),
            f"source 003: {why}, fewer channels leave SMs to the model{raised} (NCCL_MAX_CTAS since 2.17)",
        ),
    ]


def cross_nic(rails: int, rail_optimized: bool, one_leaf: bool, where: str) -> Setting | None:
    """NCCL 2.30 docs tie NCCL_CROSS_NIC to the fabric: 0 for rail switches, 1 when a node's NICs share a
    switch, 2 (default) lets NCCL choose. Source 003 says 1 everywhere; it assumes no rails."""
    if rails <= 1:
        return None  # NCCL 2.30 docs: no effect with one NIC
    if not rail_optimized:
        return Setting(
            "NCCL_CROSS_NIC", "1", "NCCL 2.30 docs and source 003: a node's NICs share one switch, rails do not matter"
        )
    if one_leaf:
        return Setting(
            "NCCL_CROSS_NIC",
            "0",
            f"NCCL 2.30 docs: rail-optimised fabric, all nodes under {where}: each ring stays on its rail "
            "(one switch hop; source 003's 1 assumes no rails)",
        )
    return Setting(
        "NCCL_CROSS_NIC",
        "2",
        "NCCL 2.30 docs default: the group crosses the spine, where rails meet; NCCL keeps a ring on its "
        "rail unless changing is faster",
    )


def gdr_level(rails: int, per_node: int) -> Setting:
    """GPUDirect RDMA only as far as the NIC really is; source 003's '5' is SYS (always), which NCCL 2.30
    docs read as 'even across the SMP interconnect' and advise against as an integer."""
    if rails >= per_node:
        return Setting(
            "NCCL_NET_GDR_LEVEL",
            "PIX",
            f"NCCL 2.30 docs: {rails} rails for {per_node} GPUs, each GPU's NIC on its PCIe switch (PIX)",
        )
    return Setting(
        "NCCL_NET_GDR_LEVEL",
        "PXB",
        f"NCCL 2.30 docs: {rails} rails for {per_node} GPUs, NICs beyond the GPU's switch (PXB)",
    )


def network_settings(
    spec: ServingTopology, topo: Topology, nodes: list[Node], common_id: str, one_leaf: bool
) -> list[Setting]:
    """Several nodes over InfiniBand or RoCE: NIC choice, GPUDirect RDMA, rails, channels."""
    fabric = "InfiniBand" if topo.network_kind == "infiniband" else "RoCE"
    rails = topo.rails_per_node
    out = [
        Setting(
            "NCCL_IB_HCA",
            "mlx5",
            f"NCCL 2.30 docs and source 003: {len(nodes)} nodes over {fabric}, every ConnectX (mlx5) rail NIC",
        ),
        gdr_level(rails, len(nodes[0].gpus)),
    ]
    crossing = cross_nic(rails, topo.rail_optimized, one_leaf, common_id)
    if crossing is not None:
        out.append(crossing)
    out += channel_settings(spec.nccl.profile, rails)
    return out


def placer_settings(
    spec: ServingTopology, topo: Topology, inst: InstancePlacement, imex: bool = False
) -> list[Setting]:
    """Placer's own choices for one instance (before the user's overrides). ``imex``: the pods get an IMEX
    channel (the dra target's ComputeDomain). Multi-node NVLink needs one, and NCCL_MNNVL_ENABLE=1 makes
    NCCL fail where it is missing (NCCL src/init.cc: an explicit request is an error), so without it trays
    of one NVLink domain are set up as nodes on the network, which NCCL then uses."""
    gpus = sum(len(p.gpus) for p in inst.pods)
    if gpus <= 1:
        return []
    nodes = [topo.node_by_name(p.node) for p in inst.pods]
    first = nodes[0]
    out = [
        Setting(
            "CUDA_DEVICE_ORDER",
            "PCI_BUS_ID",
            "CUDA docs: ordinals follow PCI bus order, as NCCL's topology and nvidia-smi do",
        )
    ]
    if len(inst.pods) == 1:
        if first.interconnect == "nvlink":
            out.append(
                Setting(
                    "NCCL_P2P_LEVEL", "NVL", f"NCCL 2.30 docs: all {gpus} GPUs on one NVSwitch node, P2P over NVLink"
                )
            )
            out.append(_nvls(first, gpus))
        else:
            sockets = {first.gpu(g).socket for g in inst.pods[0].gpus}
            if len(sockets) == 1:
                out.append(
                    Setting("NCCL_P2P_LEVEL", "PXB", "NCCL 2.30 docs: GPUs under one CPU socket's PCIe tree (PXB)")
                )
        return out
    domains = [topo.node_domain[n.index] for n in nodes]
    common = topo.domains[topo.lowest_common(sorted(set(domains)))]
    nvl = {n.path.get("nvlink-domain") for n in nodes}
    if imex and len(nvl) == 1 and None not in nvl:
        out.append(
            Setting(
                "NCCL_MNNVL_ENABLE",
                "1",
                f"NCCL 2.30 docs: {len(nodes)} trays of one NVLink domain ({common.id}), multi-node NVLink",
            )
        )
        out.append(_nvls(first, gpus))
        return out
    out += network_settings(spec, topo, nodes, common.id, common.level in ("nvlink-domain", "rack", "leaf"))
    if _nvls_capable(first) and len(inst.pods[0].gpus) > 1:
        out.append(_nvls(first, gpus))
    return out


def instance_settings(
    spec: ServingTopology, topo: Topology, inst: InstancePlacement, imex: bool = False
) -> list[Setting]:
    """What goes into the engine's env: placer's choices, the spec's overrides, minus what the template sets."""
    chosen = {s.name: s for s in placer_settings(spec, topo, inst, imex)} if spec.nccl.auto else {}
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
