"""The cluster as placer sees it: nodes with their GPUs and what is free, the domain tree (socket -> node ->
nvlink-domain -> rack -> leaf -> spine) and the GPU link graph, with the queries every stage asks of them.
``build.py`` makes a ``Topology`` from the cluster document.

Domain ids follow Kueue's habit of readable ids: ``<level>/<name>``, e.g. ``rack/r07``, ``node/dgx-001``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

from placer.model.levels import LEVEL_RANK

if TYPE_CHECKING:
    import networkx as nx


@dataclass(frozen=True)
class Gpu:
    index: int
    product: str
    memory_gib: float
    socket: int
    uuid: str | None = None  # identifiers from the cluster file's gpuIds (what --target dra selects by)
    pci_bus_id: str | None = None


@dataclass(frozen=True)
class Node:
    """One Kubernetes node after its class is resolved; indices are positions in ``Topology.nodes``."""

    index: int
    name: str
    labels: dict[str, str]
    gpus: tuple[Gpu, ...]
    busy: frozenset[int]
    interconnect: str  # "nvlink" | "pcie"
    nvlink_gbps: float | None
    cpu_free_m: int  # millicores left for new pods
    memory_free_bytes: int
    queue_depth: float  # mean over the node's GPUs
    kv_cache_hit: float  # mean over the node's GPUs; unknown GPUs count as the cluster's neutral value
    schedulable: bool
    path: dict[str, str]  # level -> domain name given in the file (rack, leaf, nvlink-domain)
    ttft_p90_ms: float | None = None  # p90 time to first token of the engines here (telemetry; None: unknown)
    kv_cache_unknown: frozenset[int] = frozenset()  # GPUs whose hit rate is not measured (counted as neutral)

    @cached_property
    def free_gpus(self) -> tuple[int, ...]:
        return tuple(g.index for g in self.gpus if g.index not in self.busy) if self.schedulable else ()

    @cached_property
    def sockets(self) -> tuple[int, ...]:
        return tuple(sorted({g.socket for g in self.gpus}))

    def gpu(self, index: int) -> Gpu:
        return next(g for g in self.gpus if g.index == index)


@dataclass
class Domain:
    """A set of GPUs at one level: a socket, a node, an NVLink domain, a rack, a leaf, or the whole cluster."""

    id: str
    level: str
    parent: str | None = None
    children: list[str] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)  # node indices, ascending
    socket: int | None = None  # for socket domains
    up: tuple[float, float] = (0.0, 0.0)  # (GB/s, us) of the edge to the parent
    depth: int = 0


@dataclass
class Topology:
    name: str
    nodes: list[Node]
    domains: dict[str, Domain]
    root: str
    node_domain: list[str]  # node index -> id of its node domain
    network_kind: str
    rail_gbps: float
    rails_per_node: int
    spine_oversubscription: float
    order: dict[str, int]  # domain id -> position in a canonical pre-order (for tie-breaks)
    crossing: dict[str, tuple[float, float]]  # domain id -> (GB/s, us) between GPUs in different children
    measured: dict[str, str] = field(default_factory=dict)  # domain id -> source of its override figures
    level_labels: dict[str, str] = field(default_factory=dict)  # level -> node label key (file's topologyLabels)
    rail_optimized: bool = True  # NIC i of every node on leaf switch i (fabric.network.railOptimized)
    # Facts no change of usage alters (node names, which nodes a GPU selector matches, a pool's candidate
    # domains and their costs; see ``cached``), worked out once per cluster: with_usage's
    # states share this dict, and a batch builds a problem on hundreds of them.
    static: dict = field(default_factory=dict, repr=False, compare=False)

    def node_by_name(self, name: str) -> Node:
        idx = self._by_name.get(name)
        if idx is None:
            raise KeyError(name)
        return self.nodes[idx]

    def cached(self, key, make):
        """``make()`` once per cluster and key, in ``static`` (every state of the cluster shares it): only for
        facts that no change of usage alters."""
        found = self.static.get(key)
        if found is None:
            found = self.static[key] = make()
        return found

    @property
    def graph(self) -> nx.Graph:
        """The link graph as networkx: every domain a vertex (``level``), every link child -> parent an edge
        with its ``bandwidth_gbps`` and ``latency_us`` (``Domain.up``). Built on first use and shared by every
        state: the solver and checker walk ``Domain.up`` themselves, and importing networkx alone costs a
        small solve's process 0.17 s (bench/NOTES.md, sixth session of 2026-11-28)."""
        return self.cached("link-graph", lambda: _link_graph(self.domains))

    @property
    def node_ranks(self) -> list[int]:
        """Per node index, the pre-order position of its domain: sorting nodes by it walks the tree."""
        return self.cached("node-ranks", lambda: [self.order[self.node_domain[n.index]] for n in self.nodes])

    @property
    def _by_name(self) -> dict[str, int]:
        return self.cached("names", lambda: {n.name: n.index for n in self.nodes})

    @cached_property
    def _subtree_end(self) -> dict[str, int]:
        """Pre-order position just past each domain's last descendant: a subtree is one interval."""
        end: dict[str, int] = {}
        for dom_id in sorted(self.order, key=self.order.__getitem__, reverse=True):
            kids = self.domains[dom_id].children
            end[dom_id] = end[kids[-1]] if kids else self.order[dom_id] + 1
        return end

    def subtree_interval(self, domain_id: str) -> tuple[int, int]:
        """[start, end) in pre-order (``order``) of the domain and everything below it."""
        return self.order[domain_id], self._subtree_end[domain_id]

    @cached_property
    def _free_counts(self) -> dict[str, int]:
        return {}

    def free_in_domain(self, domain_id: str) -> int:
        """Free GPUs on the domain's nodes, counted once per domain and state: each leaf model of a
        decomposition bounds the whole cluster's, which at 100k GPUs is 25k nodes summed per model."""
        found = self._free_counts.get(domain_id)
        if found is None:
            found = self._free_counts[domain_id] = sum(
                len(self.nodes[n].free_gpus) for n in self.domains[domain_id].nodes
            )
        return found

    def contains(self, outer: str, inner: str) -> bool:
        """Whether ``inner`` is ``outer`` or lies below it, in O(1) (the greedy asks this millions of times)."""
        return self.order[outer] <= self.order[inner] < self._subtree_end[outer]

    def ancestors(self, domain_id: str) -> list[str]:
        """The domain and every domain above it, narrowest first."""
        out = []
        current: str | None = domain_id
        while current is not None:
            out.append(current)
            current = self.domains[current].parent
        return out

    def domain_at(self, domain_id: str, level: str) -> str | None:
        """The broadest domain at ``level`` or narrower that contains ``domain_id``; None when the domain is
        itself broader. With merged domains a DGX node is its own NVLink domain, so it answers for both."""
        found = None
        for d in self.ancestors(domain_id):
            if LEVEL_RANK[self.domains[d].level] > LEVEL_RANK[level]:
                break
            found = d
        return found

    def with_usage(
        self,
        gpus: Mapping[int, Collection[int]],
        cpu_m: Mapping[int, int] | None = None,
        memory_bytes: Mapping[int, int] | None = None,
    ) -> Topology:
        """The same cluster with more GPUs busy and less CPU / memory free on the given nodes (by index).

        Why: incremental placement (``--keep``), fleet batches and the churn replay place new work on the
        state that earlier placements left; the domain tree and link graph do not change, so they are shared.
        """
        cpu_m, memory_bytes = cpu_m or {}, memory_bytes or {}
        touched = set(gpus) | set(cpu_m) | set(memory_bytes)
        nodes = [
            replace(
                n,
                busy=n.busy | frozenset(gpus.get(n.index, ())),
                cpu_free_m=n.cpu_free_m - cpu_m.get(n.index, 0),
                memory_free_bytes=n.memory_free_bytes - memory_bytes.get(n.index, 0),
            )
            if n.index in touched
            else n
            for n in self.nodes
        ]
        return replace(self, nodes=nodes)

    def with_released(
        self,
        gpus: Mapping[int, Collection[int]],
        cpu_m: Mapping[int, int] | None = None,
        memory_bytes: Mapping[int, int] | None = None,
    ) -> Topology:
        """The inverse of with_usage: these GPUs free again and this CPU / memory given back. Why: a running
        deployment re-solved with --keep sees its own pods' resources as its own, everyone else as taken."""
        cpu_m, memory_bytes = cpu_m or {}, memory_bytes or {}
        return self.with_usage(
            {},
            {n: -v for n, v in cpu_m.items()},
            {n: -v for n, v in memory_bytes.items()},
        )._without_busy(gpus)

    def _without_busy(self, gpus: Mapping[int, Collection[int]]) -> Topology:
        nodes = [replace(n, busy=n.busy - frozenset(gpus[n.index])) if n.index in gpus else n for n in self.nodes]
        return replace(self, nodes=nodes)

    def gpu_domain(self, node: int, gpu: int) -> str:
        """Narrowest domain of a GPU, its home: its socket when the node has sockets as domains, else its node.
        The GPU's own link into its home carries the home's ``crossing`` figures."""
        home = self.node_domain[node]
        if not self.domains[home].children:
            return home
        return f"socket/{self.nodes[node].name}/{self.nodes[node].gpu(gpu).socket}"

    def lowest_common(self, domain_ids: list[str]) -> str:
        """Narrowest domain containing all the given domains."""
        paths = [self.ancestors(d) for d in domain_ids]
        common = set(paths[0]).intersection(*map(set, paths[1:]))
        return next(d for d in paths[0] if d in common)


def _link_graph(domains: Mapping[str, Domain]) -> nx.Graph:
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from((dom.id, {"level": dom.level}) for dom in domains.values())
    graph.add_edges_from(
        (dom.id, dom.parent, {"bandwidth_gbps": dom.up[0], "latency_us": dom.up[1]})
        for dom in domains.values()
        if dom.parent is not None
    )
    return graph
