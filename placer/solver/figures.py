"""What a domain's links cost: the bandwidth and latency figures every candidate is priced with, and how
many GPUs a domain has free. Memoised per link graph, because a batch builds hundreds of problems on it."""

from __future__ import annotations

import weakref

from placer.topology import cost
from placer.topology.graph import Topology

# (node, domain) -> figures, per link graph: the figures depend only on the domain tree and the links,
# which Topology.with_usage shares, so a batch that builds hundreds of problems on the states its earlier
# placements leave computes each one once (it was most of a 100-deployment batch's time; bench/NOTES.md).
_FIGURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


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


def worst_figures(topo: Topology, domain: str, nodes: list[int], memo: dict) -> cost.PathFigures:
    """Worst-case ring figures for GPUs spread over ``nodes`` inside ``domain``. ``memo`` records the pairs
    this problem priced (Problem.unlike_domains reads it)."""
    shared = _FIGURES.setdefault(topo.graph, {})
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
