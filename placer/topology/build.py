"""Cluster spec -> topology: nodes, the domain tree, and the GPU link graph.

Phase 1 resolves node classes into plain ``Node`` records (GPUs, busy set, CPU/memory left, telemetry).
Phase 2 builds the domain tree socket -> node -> nvlink-domain -> rack -> leaf -> spine; a domain with a
single child holds the same GPUs as that child and is merged away, so every domain left either is a node
(or socket) or has at least two children. Phase 3 gives the link graph its figures: every domain is a
switch vertex and each link child -> parent (``Domain.up``) carries the figures of crossing that parent; a
GPU's own link into its home (socket or node) carries the home's crossing figures. The effective bandwidth
between two GPUs is the bottleneck (and the latency the largest) along the path between them.
``Topology.graph`` gives the same graph as networkx, for analysis; nothing on the solve path needs it.

Domain ids follow Kueue's habit of readable ids: ``<level>/<name>``, e.g. ``rack/r07``, ``node/dgx-001``.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from placer.model import k8s
from placer.model.cluster import ClusterSpec, GpuGroup, GpuSpec, Link, NodeClass, NodeSpec, Override
from placer.model.errors import InputError
from placer.model.levels import LEVEL_RANK
from placer.topology.graph import Domain, Gpu, Node, Topology


def _node_class(spec: ClusterSpec, node: NodeSpec) -> NodeClass:
    return spec.node_classes[node.node_class] if node.node_class else NodeClass()


def _resolve_gpus(node: NodeSpec, cls: NodeClass, where: str) -> tuple[Gpu, ...]:
    gpus = node.gpus if node.gpus is not None else cls.gpus
    sockets = node.sockets or cls.sockets
    if gpus is None:
        return ()
    if isinstance(gpus, GpuGroup):
        return _group_gpus(gpus.count, gpus.product, gpus.memory_gib, sockets)
    listed: list[GpuSpec] = gpus
    indices = [g.index for g in listed]
    if len(set(indices)) != len(indices):
        raise InputError(f"{where}.gpus: a GPU index appears twice ({sorted(indices)})")
    return tuple(sorted((Gpu(g.index, g.product, g.memory_gib, g.socket) for g in listed), key=lambda g: g.index))


@functools.lru_cache(maxsize=256)
def _group_gpus(count: int, product: str, memory_gib: float, sockets: int) -> tuple[Gpu, ...]:
    """A class's GPUs, shared by every node of the class (Gpu is frozen): a 100k-GPU cluster built 100k."""
    per_socket = max(1, -(-count // sockets))
    return tuple(Gpu(i, product, memory_gib, i // per_socket) for i in range(count))


def _mean_metric(value: float | dict[int, float] | None, gpus: tuple[Gpu, ...], default: float, where: str) -> float:
    if value is None or not gpus:
        return default
    _check_indices(value, gpus, where)
    if isinstance(value, dict):
        return sum(value.get(g.index, default) for g in gpus) / len(gpus)
    return float(value)


def _check_indices(value: float | dict[int, float] | None, gpus: tuple[Gpu, ...], where: str) -> None:
    if isinstance(value, dict):
        unknown = sorted(set(value) - {g.index for g in gpus})
        if unknown:
            raise InputError(f"{where}: GPU index {unknown[0]} is not a GPU of this node")


def known_hits(value: float | dict[int, float] | None, gpus: tuple[Gpu, ...]) -> dict[int, float]:
    """The GPUs of a node whose KV-cache hit rate the file gives (a number covers every GPU)."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {g.index: value[g.index] for g in gpus if g.index in value}
    return {g.index: float(value) for g in gpus}


def neutral_hit(known: list[dict[int, float]]) -> float:
    """What an unknown KV-cache hit rate counts as: the mean of the known ones (per GPU), so that a node
    without telemetry is neither avoided (as a 100 % miss would be) nor preferred (as a 0 % miss would be)
    over the nodes measured; 1.0 when no GPU is measured, which makes the cache term zero instead of a
    constant that only inflates the objective. docs/DESIGN.md, "Unknown KV-cache hit rate"."""
    values = [v for node in known for v in node.values()]
    return sum(values) / len(values) if values else 1.0


def _with_ids(node: NodeSpec, gpus: tuple[Gpu, ...], where: str) -> tuple[Gpu, ...]:
    """The node's GPUs with the uuid and bus id its ``gpuIds`` give (what --target dra selects by)."""
    if not node.gpu_ids:
        return gpus  # the class's shared tuple (_group_gpus), as most nodes have it
    ids = {g.index: g for g in node.gpu_ids or []}
    if unknown := sorted(set(ids) - {g.index for g in gpus}):
        raise InputError(f"{where}.gpuIds: GPU index {unknown[0]} is not a GPU of node {node.name!r}")
    return tuple(
        replace(g, uuid=ids[g.index].uuid, pci_bus_id=ids[g.index].pci_bus_id) if g.index in ids else g for g in gpus
    )


def _resolve_node(spec: ClusterSpec, i: int, node: NodeSpec) -> dict:
    """The node's fields, checked, all but its KV-cache hit: that needs every node's (``_nodes_with_hits``)."""
    where = f"nodes[{i}]"
    cls = _node_class(spec, node)
    gpus = _resolve_gpus(node, cls, where)
    products = {g.product for g in gpus}
    if len(products) > 1:
        raise InputError(f"{where}.gpus: node {node.name!r} mixes GPU products {sorted(products)}; one per node")
    sizes = {g.memory_gib for g in gpus}
    if len(sizes) > 1:  # a GPU selector judges a node by its GPUs' one product and size (problem.node_matches)
        raise InputError(f"{where}.gpus: node {node.name!r} mixes GPU memory sizes {sorted(sizes)} GiB; one per node")
    indices = {g.index for g in gpus}
    gpus = _with_ids(node, gpus, where)
    for b in node.busy:
        if b not in indices:
            raise InputError(
                f"{where}.busy: GPU index {b} is not a GPU of node {node.name!r} (it has {sorted(indices)})"
            )
    cpu_total = k8s.millicores(node.cpu or cls.cpu)
    mem_total = k8s.bytes_of(node.memory or cls.memory)
    path = {"rack": node.rack, "leaf": node.leaf, "nvlink-domain": node.nvlink_domain}
    queue_depth = _mean_metric(node.metrics.queue_depth, gpus, 0.0, f"{where}.metrics.queueDepth")
    _check_indices(node.metrics.kv_cache_hit, gpus, f"{where}.metrics.kvCacheHit")
    return {
        "index": i,
        "name": node.name,
        "labels": dict(node.labels),
        "gpus": gpus,
        "busy": frozenset(node.busy),
        "interconnect": node.interconnect or cls.interconnect,
        "nvlink_gbps": node.nvlink_gbps or cls.nvlink_gbps,
        "cpu_free_m": max(0, cpu_total - k8s.millicores(node.used.cpu)),
        "memory_free_bytes": max(0, mem_total - k8s.bytes_of(node.used.memory)),
        "queue_depth": queue_depth,
        "schedulable": node.schedulable,
        "path": {k: v for k, v in path.items() if v is not None},
        "ttft_p90_ms": node.metrics.ttft_p90_ms,
    }


def _nodes_with_hits(spec: ClusterSpec, fields: list[dict]) -> list[Node]:
    """The nodes, each with its mean KV-cache hit over its GPUs, unknown GPUs counting as the cluster's
    neutral value (which needs every node's known ones first, hence the fields before the nodes)."""
    known = [known_hits(n.metrics.kv_cache_hit, f["gpus"]) for n, f in zip(spec.nodes, fields, strict=True)]
    neutral = neutral_hit(known)
    out = []
    for f, hits in zip(fields, known, strict=True):
        gpus = f["gpus"]
        unknown = frozenset(g.index for g in gpus if g.index not in hits)
        mean = sum(hits.get(g.index, neutral) for g in gpus) / len(gpus) if gpus else neutral
        out.append(Node(**f, kv_cache_hit=mean, kv_cache_unknown=unknown))
    return out


def _level_link(spec: ClusterSpec, level: str, node: Node | None) -> tuple[float, float]:
    """Figures for crossing between the children of a domain at ``level`` (per GPU lane)."""
    f = spec.fabric
    if level == "socket":
        return (f.pcie.bandwidth_gbps, f.pcie.latency_us)
    if level == "node":
        assert node is not None
        if node.interconnect == "nvlink":
            return (node.nvlink_gbps or f.nvlink.bandwidth_gbps, f.nvlink.latency_us)
        link: Link = f.cross_socket if len(node.sockets) > 1 else f.pcie
        return (link.bandwidth_gbps, link.latency_us)
    if level == "nvlink-domain":
        return (f.nvlink_domain.bandwidth_gbps, f.nvlink_domain.latency_us)
    if level in ("rack", "leaf"):
        return (f.network.rail_gbps, f.network.latency_us)
    return (f.network.rail_gbps / f.spine.oversubscription, f.spine.latency_us)


def build_topology(spec: ClusterSpec) -> Topology:
    """Resolve nodes, build and compress the domain tree, and give the links their figures."""
    nodes = _nodes_with_hits(spec, [_resolve_node(spec, i, n) for i, n in enumerate(spec.nodes)])
    raw: dict[str, Domain] = {"spine/cluster": Domain("spine/cluster", "spine")}
    # Phase 2a: the full tree, every level present; missing levels become single-child domains.
    node_domain: list[str] = []
    for node in nodes:
        chain = [f"node/{node.name}"]
        for level in ("nvlink-domain", "rack", "leaf"):
            name = node.path.get(level)
            # A node without a rack or NVLink domain is alone in it; nodes without a leaf share one.
            default = "default" if level == "leaf" else f"~{node.name}"
            chain.append(f"{level}/{name or default}")
        chain.append("spine/cluster")
        node_domain.append(chain[0])
        for child, parent in zip(chain, chain[1:], strict=False):
            level = child.split("/", 1)[0]
            dom = raw.setdefault(child, Domain(child, level))
            if dom.parent is not None and dom.parent != parent:
                raise InputError(
                    f"nodes[{node.index}]: {child} lies in both {dom.parent} and {parent}; "
                    "domains must nest (every NVLink domain inside one rack, every rack under one leaf)"
                )
            dom.parent = parent
            raw.setdefault(parent, Domain(parent, parent.split("/", 1)[0]))
        raw[chain[0]].nodes.append(node.index)
        if node.interconnect == "pcie" and len(node.sockets) > 1:
            for s in node.sockets:
                sid = f"socket/{node.name}/{s}"
                raw[sid] = Domain(sid, "socket", parent=chain[0], socket=s, nodes=[node.index])
    for dom in list(raw.values()):
        if dom.parent is not None:
            raw[dom.parent].children.append(dom.id)
    # Phase 2b: merge single-child domains above node level into their child (same GPUs).
    domains = _compress(raw, "spine/cluster")
    root = next(d.id for d in domains.values() if d.parent is None)
    _fill_nodes(domains, root)
    crossing = _crossing_figures(spec, domains, nodes)
    _link_up(domains, crossing)
    order = {d: i for i, d in enumerate(_preorder(domains, root))}
    for d in domains.values():
        d.children.sort(key=order.__getitem__)
    return Topology(
        name=spec.metadata.name,
        nodes=nodes,
        domains=domains,
        root=root,
        node_domain=node_domain,
        network_kind=spec.fabric.network.kind,
        rail_gbps=spec.fabric.network.rail_gbps,
        rails_per_node=spec.fabric.network.rails_per_node,
        rail_optimized=spec.fabric.network.rail_optimized,
        spine_oversubscription=spec.fabric.spine.oversubscription,
        order=order,
        crossing=crossing,
        measured={o.domain: o.source or "measured" for o in spec.overrides},
        level_labels={str(k): v for k, v in spec.topology_labels.items()},
    )


def _compress(raw: dict[str, Domain], root: str) -> dict[str, Domain]:
    """Replace every chain of single-child domains above node level by its lowest member."""
    out: dict[str, Domain] = {}

    def visit(dom_id: str, parent: str | None) -> None:
        dom = raw[dom_id]
        while LEVEL_RANK[dom.level] > LEVEL_RANK["node"] and len(dom.children) == 1:
            dom = raw[dom.children[0]]
        kept = Domain(dom.id, dom.level, parent=parent, socket=dom.socket, nodes=list(dom.nodes))
        kept.depth = 0 if parent is None else out[parent].depth + 1
        out[kept.id] = kept
        if parent is not None:
            out[parent].children.append(kept.id)
        for child in sorted(dom.children):
            visit(child, kept.id)

    visit(root, None)
    return out


def _fill_nodes(domains: dict[str, Domain], root: str) -> None:
    for dom_id in reversed(_preorder(domains, root)):
        dom = domains[dom_id]
        if dom.level not in ("node", "socket"):
            dom.nodes = sorted({n for c in dom.children for n in domains[c].nodes})


def _preorder(domains: dict[str, Domain], root: str) -> list[str]:
    out, stack = [], [root]
    while stack:
        d = stack.pop()
        out.append(d)
        stack += sorted(domains[d].children, reverse=True)
    return out


def _crossing_figures(
    spec: ClusterSpec, domains: dict[str, Domain], nodes: list[Node]
) -> dict[str, tuple[float, float]]:
    """(GB/s, us) for a GPU pair whose narrowest common domain is each domain: the fabric figure of its
    level, or the measured override given for it."""
    by_id: dict[str, tuple[int, Override]] = {}
    for i, o in enumerate(spec.overrides):
        if o.domain in by_id:  # which one is measured? the file must say (the first's source would be lost)
            raise InputError(
                f"overrides[{i}].domain: {o.domain!r} is also the domain of overrides[{by_id[o.domain][0]}]; "
                "give one entry per domain"
            )
        by_id[o.domain] = (i, o)
    for key, (i, _) in by_id.items():
        if key not in domains:
            raise InputError(
                f"overrides[{i}].domain: {key!r} is not a domain of this cluster "
                "(ids look like node/<name>, rack/<name>, leaf/<name>, nvlink-domain/<name>, spine/cluster; "
                "a level with a single child is merged into that child)"
            )
    out = {}
    for dom in domains.values():
        node = nodes[dom.nodes[0]] if dom.level == "node" else None
        bw, lat = _level_link(spec, dom.level, node)
        found = by_id.get(dom.id)
        if found is not None:
            bw = found[1].bandwidth_gbps or bw
            lat = found[1].latency_us if found[1].latency_us is not None else lat
        out[dom.id] = (bw, lat)
    return out


def _link_up(domains: dict[str, Domain], crossing: dict[str, tuple[float, float]]) -> None:
    """Every link child -> parent carries the figures of crossing the parent (``Domain.up``). A tree, so the
    path between two GPUs is unique and its bottleneck is their effective bandwidth; ``Topology.graph`` is
    the same tree as a networkx graph, built when asked for."""
    for dom in domains.values():
        if dom.parent is not None:
            dom.up = crossing[dom.parent]
