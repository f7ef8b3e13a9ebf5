"""What a domain's links cost: the bandwidth and latency figures every candidate is priced with, and how
many GPUs a domain has free. Memoised per cluster (Topology.cached): a batch builds hundreds of problems."""

from __future__ import annotations

from placer.topology import cost
from placer.topology.graph import Topology


def _walk_up(topo: Topology, node: int) -> dict[str, cost.PathFigures]:
    """Ring figures from ``node``'s GPUs up to every domain above them, in one walk: a GPU's link into its
    home carries the home's crossing figure, each hop up the parent's. One walk per node, kept per cluster, shared
    by unlike_anywhere (which walks every node) and the pricing, whose (node, domain) pairs are then lookups."""
    chains = topo.cached("figures", dict)
    chain = chains.get(node)
    if chain is None:
        n = topo.nodes[node]
        gpu = n.gpus[0].index
        current: str | None = topo.gpu_domain(node, gpu)
        bw, lat = topo.crossing[current]  # the GPU's own link into its home
        chain = chains[node] = {}
        while current is not None:
            dom = topo.domains[current]
            chain[current] = cost.PathFigures(bw, lat, dom.level)
            bw, lat = min(bw, dom.up[0]), max(lat, dom.up[1])
            current = dom.parent
    return chain


def unlike_anywhere(topo: Topology) -> frozenset[str]:
    """Domains whose nodes do not all reach them with the same figures, over every node of the cluster: only
    these can ever be unlike in one problem (Problem.unlike_domains), so a cluster without any, the usual
    case, needs no problem's pairs looked at."""

    def make() -> frozenset[str]:
        seen: dict[str, set[tuple[float, float]]] = {}
        for n in topo.nodes:
            if n.gpus:
                for dom_id, f in _walk_up(topo, n.index).items():
                    seen.setdefault(dom_id, set()).add((f.bandwidth_gbps, f.latency_us))
        return frozenset(d for d, f in seen.items() if len(f) > 1)

    return topo.cached("unlike anywhere", make)


def worst_figures(topo: Topology, domain: str, nodes: list[int], memo: dict) -> cost.PathFigures:
    """Worst-case ring figures for GPUs spread over ``nodes`` inside ``domain``. ``memo`` records the pairs
    this problem priced (Problem.unlike_domains reads it)."""
    bw, lat = float("inf"), 0.0
    for n in nodes:
        key = (n, domain)
        f = memo.get(key)
        if f is None:
            f = memo[key] = _walk_up(topo, n)[domain]
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
    """Ring figures for an instance inside one node or socket: the GPUs' own links, plus the node crossing when
    the node has socket domains (an instance at node level then spans sockets)."""
    dom = topo.domains[dom_id]
    if dom.level == "node" and dom.children:
        return worst_figures(topo, dom_id, [node], memo)
    bw, lat = topo.crossing[dom_id]  # the node or socket is its GPUs' home: their own links
    return cost.PathFigures(bw, lat, dom.level)


def free_in(topo: Topology, node: int, dom) -> int:
    """Free GPUs of ``node`` that lie in ``dom`` (a socket domain holds only its own GPUs)."""
    n = topo.nodes[node]
    if dom.level == "socket":
        return sum(1 for g in n.free_gpus if n.gpu(g).socket == dom.socket)
    return len(n.free_gpus)
