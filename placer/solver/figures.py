"""What a domain's links cost: the bandwidth and latency figures every candidate is priced with, and how
many GPUs a domain has free. Memoised per cluster (Topology.cached): a batch builds hundreds of problems."""

from __future__ import annotations

from placer.topology import cost
from placer.topology.graph import Topology


def _up_figures(topo: Topology, node: int, domain: str) -> cost.PathFigures:
    n = topo.nodes[node]
    gpu = n.gpus[0].index
    current = topo.gpu_domain(node, gpu)
    edge = topo.graph.edges[topo.gpu_vertex(node, gpu), current]
    bw, lat = edge["bandwidth_gbps"], edge["latency_us"]
    while current != domain:
        dom = topo.domains[current]
        if dom.parent is None:
            raise ValueError(f"{domain} is not above node {n.name}")
        # The GPU->home edge already carries the home's crossing figure; each hop up carries the parent's.
        bw, lat = min(bw, dom.up[0]), max(lat, dom.up[1])
        current = dom.parent
    return cost.PathFigures(bw, lat, topo.domains[domain].level)


def unlike_anywhere(topo: Topology) -> frozenset[str]:
    """Domains whose nodes do not all reach them with the same figures, over every node of the cluster: only
    these can ever be unlike in one problem (Problem.unlike_domains), so a cluster without any, the usual
    case, needs no problem's pairs looked at."""

    def make() -> frozenset[str]:
        seen: dict[str, set[tuple[float, float]]] = {}
        for n in topo.nodes:
            if not n.gpus:
                continue
            # _up_figures for every domain above the node at once: one walk up, not one per domain
            gpu = n.gpus[0].index
            current: str | None = topo.gpu_domain(n.index, gpu)
            edge = topo.graph.edges[topo.gpu_vertex(n.index, gpu), current]
            bw, lat = edge["bandwidth_gbps"], edge["latency_us"]
            while current is not None:
                seen.setdefault(current, set()).add((bw, lat))
                dom = topo.domains[current]
                bw, lat = min(bw, dom.up[0]), max(lat, dom.up[1])
                current = dom.parent
        return frozenset(d for d, f in seen.items() if len(f) > 1)

    return topo.cached("unlike anywhere", make)


def worst_figures(topo: Topology, domain: str, nodes: list[int], memo: dict) -> cost.PathFigures:
    """Worst-case ring figures for GPUs spread over ``nodes`` inside ``domain``. ``memo`` records the pairs
    this problem priced (Problem.unlike_domains reads it)."""
    # (node, domain) -> figures, per cluster: they depend only on the domain tree and the links, so a batch
    # that builds hundreds of problems on the states its placements leave computes each once (it was most of
    # a 100-deployment batch's time; bench/NOTES.md).
    shared = topo.cached("figures", dict)
    bw, lat = float("inf"), 0.0
    for n in nodes:
        key = (n, domain)
        f = memo.get(key)
        if f is None:
            f = shared.get(key)
            if f is None:
                f = shared[key] = _up_figures(topo, n, domain)
            memo[key] = f
        bw, lat = min(bw, f.bandwidth_gbps), max(lat, f.latency_us)
    return cost.PathFigures(bw, lat, topo.domains[domain].level)


def network_gbps(topo: Topology, domain: str, nodes: list[int]) -> float:
    """The slowest link between these nodes and ``domain``, above the nodes themselves: what rings across
    them take per rail (cost.ring_over_rails)."""
    shared = topo.cached("network figures", dict)
    bw = float("inf")
    for n in nodes:
        key = (n, domain)
        if key not in shared:
            current, slowest = topo.node_domain[n], float("inf")
            while current != domain:
                dom = topo.domains[current]
                slowest = min(slowest, dom.up[0])
                current = dom.parent  # type: ignore[assignment]
            shared[key] = slowest
        bw = min(bw, shared[key])
    return bw


def domain_figures(topo: Topology, dom_id: str, nodes: list[int], memo: dict) -> cost.PathFigures:
    """Ring figures inside a domain over these nodes: the unit's own links for a node or socket, the worst
    path up to the domain for anything broader."""
    if topo.domains[dom_id].level in ("node", "socket"):
        return _unit_figures(topo, dom_id, nodes[0], memo)
    return worst_figures(topo, dom_id, nodes, memo)


def _unit_figures(topo: Topology, dom_id: str, node: int, memo: dict) -> cost.PathFigures:
    """Ring figures for an instance inside one node or socket: the GPU edges, plus the node crossing when
    the node has socket domains (an instance at node level then spans sockets)."""
    dom = topo.domains[dom_id]
    if dom.level == "node" and dom.children:
        return worst_figures(topo, dom_id, [node], memo)
    n = topo.nodes[node]
    e = (
        topo.graph.edges[topo.gpu_vertex(node, n.gpus[0].index), dom_id]
        if dom.level == "node"
        else topo.graph.edges[topo.gpu_vertex(node, next(g.index for g in n.gpus if g.socket == dom.socket)), dom_id]
    )
    return cost.PathFigures(e["bandwidth_gbps"], e["latency_us"], dom.level)


def free_in(topo: Topology, node: int, dom) -> int:
    """Free GPUs of ``node`` that lie in ``dom`` (a socket domain holds only its own GPUs)."""
    n = topo.nodes[node]
    if dom.level == "socket":
        return sum(1 for g in n.free_gpus if n.gpu(g).socket == dom.socket)
    return len(n.free_gpus)
