"""Where an instance, or a replica's members, may go: the candidate and container lists of a problem, built
once per cluster and filtered per state.

A batch builds hundreds of problems on the states its earlier placements leave (placer.solver.fleet), and the
state changes only in the GPUs, CPU and memory in use. Phase 1 (per link graph, once per pool shape) lists
every domain an instance of the pool could ever use; a domain's price depends on its eligible nodes and
links, never on what is free, so it is worked out the first time a state has room there and kept for every
later state (at 100k GPUs most node domains never have room for a replica, and pricing them all was most
of a problem's build). Phase 2 (per state) keeps the domains with enough free eligible GPUs, read from one
table of free GPUs per domain. The result is the same tuple, in the same order, as enumerating the state
from scratch (tests/test_fleet_joint.py compares them); the pairs the prices were computed from reach
``memo`` as before, so Problem.unlike_domains is unchanged too.
Multi-node containers choose their nodes by what is free, so they are enumerated per state as before.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from placer.model.levels import LEVEL_RANK
from placer.model.spec import Pool, ServingTopology
from placer.solver.figures import domain_figures, free_in, network_gbps, worst_figures
from placer.solver.layout import Layout
from placer.topology import cost
from placer.topology.graph import Topology

# id(state) -> (weak reference to it, {eligible nodes: free GPUs per domain})
_FREE: dict[int, tuple[weakref.ref, dict[frozenset[int], dict[str, int]]]] = {}


@dataclass(frozen=True)
class Candidate:
    """One place an instance of a pool may go. ``kind`` is unit (one node/socket), pooled or container."""

    domain: str
    kind: str
    level: str
    allreduce_us: float
    units: int  # weighted all-reduce cost units
    preferred_miss: bool
    order: int  # canonical position of the domain, for tie-breaks and symmetry breaking


@dataclass(frozen=True)
class Container:
    domain: str
    order: int
    kv_us: float
    units: int


def domains_in_order(topo: Topology) -> list[str]:
    return topo.cached(("order",), lambda: sorted(topo.domains, key=topo.order.__getitem__))


def domain_free(topo: Topology, eligible: frozenset[int]) -> dict[str, int]:
    """Free GPUs of the eligible nodes per domain on this state (what figures.free_in sums per domain)."""
    entry = _FREE.get(id(topo))
    if entry is None or entry[0]() is not topo:
        if len(_FREE) > 64:  # forget states that are gone
            for k in [k for k, (ref, _) in _FREE.items() if ref() is None]:
                del _FREE[k]
        entry = _FREE[id(topo)] = (weakref.ref(topo), {})
    tables = entry[1]
    table = tables.get(eligible)
    if table is None:
        table = tables[eligible] = _count_free(topo, eligible)
    return table


def _count_free(topo: Topology, eligible: frozenset[int]) -> dict[str, int]:
    up = topo.cached(("ancestors",), lambda: [tuple(topo.ancestors(topo.node_domain[n.index])) for n in topo.nodes])
    sockets = topo.cached(("sockets",), lambda: _socket_domains(topo))
    free: dict[str, int] = defaultdict(int)
    for n in eligible:
        f = len(topo.nodes[n].free_gpus)
        if not f:
            continue
        for d in up[n]:
            free[d] += f
        for s in sockets.get(n, ()):
            free[s] += free_in(topo, n, topo.domains[s])
    return free


def _socket_domains(topo: Topology) -> dict[int, list[str]]:
    out: dict[int, list[str]] = defaultdict(list)
    for dom in topo.domains.values():
        if dom.level == "socket":
            out[dom.nodes[0]].append(dom.id)
    return out


def pool_candidates(
    topo: Topology, spec: ServingTopology, name: str, pool: Pool, eligible: frozenset[int], memo: dict, shape: Layout
) -> tuple[Candidate, ...]:
    """Every place an instance of the pool may go on this state, cheapest-first order aside: canonical."""
    if shape[0] is not None:
        return _multi_node_candidates(topo, spec, name, pool, eligible, memo, shape)
    msg = cost.activation_bytes(spec.model.hidden_size, spec.tokens_in_flight(name), spec.model.bytes_per_element)
    key = (
        "pool",
        eligible,
        shape,
        pool.tensor_parallel,
        pool.pipeline_parallel,
        pool.placement.required,
        pool.placement.preferred,
        spec.model.layers,
        msg,
        spec.objective.all_reduce,
    )
    domains, priced = topo.cached(key, lambda: (_pool_domains(topo, pool, eligible, shape), {}))
    size = pool.gpus_per_instance
    free = domain_free(topo, eligible)
    out = []
    for dom_id in domains:
        if free.get(dom_id, 0) >= size:
            entry = priced.get(dom_id)
            if entry is None:
                entry = priced[dom_id] = _price_pool(topo, spec, pool, eligible, dom_id, msg)
            cand, pairs = entry
            memo.update(pairs)
            out.append(cand)
    return tuple(out)


def _pool_domains(topo: Topology, pool: Pool, eligible: frozenset[int], shape: Layout) -> list[str]:
    """Every domain an instance of a single-node or spanning pool could use, whatever is free."""
    one_node = shape[2]
    required_rank = LEVEL_RANK[pool.placement.required]
    out = []
    for dom_id in domains_in_order(topo):
        dom = topo.domains[dom_id]
        if LEVEL_RANK[dom.level] > required_rank or (one_node and dom.level not in ("node", "socket")):
            continue
        if not eligible.isdisjoint(dom.nodes):
            out.append(dom_id)
    return out


def _price_pool(
    topo: Topology, spec: ServingTopology, pool: Pool, eligible: frozenset[int], dom_id: str, msg: float
) -> tuple[Candidate, dict]:
    """One domain's candidate for the pool and the (node, domain) pairs its price was read from."""
    dom = topo.domains[dom_id]
    pairs: dict = {}
    ring = domain_figures(topo, dom_id, [n for n in dom.nodes if n in eligible], pairs)
    kind = "unit" if dom.level in ("node", "socket") else "pooled"
    return _candidate(topo, spec, pool, dom, ring, ring, msg, kind), pairs


def _candidate(topo, spec, pool, dom, ring, span, msg: float, kind: str, group_level: str | None = None) -> Candidate:
    """``group_level``: the level each TP group spans, where it is narrower than the domain (multi-node PP with
    a whole TP group per node): the placement rules hold per TP group."""
    us = cost.forward_pass_allreduce_us(
        spec.model.layers, pool.tensor_parallel, [ring] * pool.pipeline_parallel, msg, span
    )
    level = group_level or dom.level
    miss = pool.placement.preferred is not None and LEVEL_RANK[level] > LEVEL_RANK[pool.placement.preferred]
    units = cost.to_units(spec.objective.all_reduce * us)
    return Candidate(dom.id, kind, dom.level, us, units, miss, topo.order[dom.id])


def _multi_node_candidates(
    topo: Topology, spec: ServingTopology, name: str, pool: Pool, eligible: frozenset[int], memo: dict, shape: Layout
) -> tuple[Candidate, ...]:
    """Containers for a multi-node instance: nodeCount eligible nodes with gpusPerNode free GPUs each, priced
    over the nodes that fit (so per state)."""
    node_count, gpus_per_node, _ = shape
    required_rank = LEVEL_RANK[pool.placement.required]
    msg = cost.activation_bytes(spec.model.hidden_size, spec.tokens_in_flight(name), spec.model.bytes_per_element)
    g = gpus_per_node or 0
    # Pipeline stages whose TP groups each sit on one node (layout gives a node whole groups): the placement
    # rules are per TP group, so the instance's nodes may lie in any domain (as the checker checks each stage).
    group_level = "node" if 0 < pool.tensor_parallel <= g else None
    out = []
    for dom_id in domains_in_order(topo):
        dom = topo.domains[dom_id]
        if LEVEL_RANK[group_level or dom.level] > required_rank or dom.level in ("node", "socket"):
            continue
        fit = [n for n in dom.nodes if n in eligible and free_in(topo, n, dom) >= g]
        if len(fit) < (node_count or 0):
            continue
        node_figs = [worst_figures(topo, topo.node_domain[n], [n], memo) for n in fit]
        stage_ring = cost.PathFigures(
            min(f.bandwidth_gbps for f in node_figs), max(f.latency_us for f in node_figs), "node"
        )
        span = worst_figures(topo, dom_id, fit, memo)
        if pool.tensor_parallel <= g:
            ring = stage_ring
        else:
            lanes = cost.ring_lanes(g, topo.rails_per_node)
            ring = cost.ring_over_rails(span, lanes, network_gbps(topo, dom_id, fit), stage_ring.bandwidth_gbps)
        out.append(_candidate(topo, spec, pool, dom, ring, span, msg, "container", group_level))
    return tuple(out)


def kv_containers(
    topo: Topology,
    eligible: frozenset[int],
    need: int,
    key: tuple,
    kv: Callable[[str, list[int], dict], tuple[float, int, float]],
    allowed: Callable,
    memo: dict,
) -> tuple[Container, ...]:
    """Domains that can hold one replica's prefill and decode, with the KV transfer's price: ``kv`` prices a
    domain (us, units, GB/s) over its eligible nodes, ``allowed`` judges it, ``key`` names both for the cache."""

    free = domain_free(topo, eligible)
    priced: dict[str, tuple[Container | None, dict]] = topo.cached(("kv", eligible, *key), dict)
    out = []
    for dom_id in domains_in_order(topo):
        if free.get(dom_id, 0) < need:  # only eligible nodes' GPUs are counted: none there, no entry
            continue
        entry = priced.get(dom_id)
        if entry is None:
            dom = topo.domains[dom_id]
            pairs: dict = {}
            us, units, bw = kv(dom_id, [n for n in dom.nodes if n in eligible], pairs)
            cont = Container(dom_id, topo.order[dom_id], us, units) if allowed(dom, bw) else None
            entry = priced[dom_id] = (cont, pairs)
        memo.update(entry[1])
        if entry[0] is not None:
            out.append(entry[0])
    return tuple(out)


def router_containers(
    topo: Topology, eligible: frozenset[int], need: int, level: str, router_nodes: tuple[int, ...]
) -> tuple[Container, ...]:
    """Domains at ``level`` or narrower with room for one replica's pool and a node the router may use."""

    def make() -> list:
        rank = LEVEL_RANK[level]
        return [
            d
            for d in domains_in_order(topo)
            if LEVEL_RANK[topo.domains[d].level] <= rank and not eligible.isdisjoint(topo.domains[d].nodes)
        ]

    free = domain_free(topo, eligible)
    routers = set(router_nodes)
    return tuple(
        Container(d, topo.order[d], 0.0, 0)
        for d in topo.cached(("router", eligible, level), make)
        if free.get(d, 0) >= need and not routers.isdisjoint(topo.domains[d].nodes)
    )
