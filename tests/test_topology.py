"""The topology's queries against plain recomputation from the cluster: GPU homes, free GPUs per domain in
every usage state, and the checker's subtree figures against pairwise paths in the networkx link graph."""

from __future__ import annotations

import itertools

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st
from test_solver_properties import cluster_document

from placer.check.verify import steiner_figures
from placer.model.cluster import ClusterSpec
from placer.topology.build import build_topology


@st.composite
def clusters(draw) -> dict:
    """Small clusters over every level: multi-socket PCIe nodes, NVLink domains, racks and leaves."""
    nodes = []
    for i in range(draw(st.integers(1, 6))):
        pcie = draw(st.booleans())
        count = draw(st.sampled_from([2, 4]))
        node = {
            "name": f"n{i}",
            "gpus": {"count": count, "product": "A100-PCIE" if pcie else "H100", "memoryGiB": 80},
            "interconnect": "pcie" if pcie else "nvlink",
            "sockets": draw(st.sampled_from([1, 2])) if pcie else 1,
            "busy": sorted(draw(st.sets(st.integers(0, count - 1), max_size=count))),
            "rack": f"r{i // 2}",  # an NVLink domain lies inside one rack, a rack under one leaf
            "leaf": f"l{i // 4}",
        }
        if draw(st.booleans()):
            node["nvlinkDomain"] = f"nv{i // 2}"
        nodes.append(node)
    return cluster_document("random", nodes, 8)


def _topology(doc: dict):
    return build_topology(ClusterSpec.model_validate(doc))


@settings(max_examples=60, deadline=None)
@given(clusters())
def test_a_gpu_s_home_is_its_socket_where_the_node_has_socket_domains(doc):
    topo = _topology(doc)
    for node in topo.nodes:
        for gpu in node.gpus:
            home = topo.gpu_domain(node.index, gpu.index)
            sockets = node.interconnect == "pcie" and len(node.sockets) > 1
            assert home == (f"socket/{node.name}/{gpu.socket}" if sockets else f"node/{node.name}")
            assert node.index in topo.domains[home].nodes and not topo.domains[home].children


@settings(max_examples=60, deadline=None)
@given(clusters(), st.data())
def test_free_gpus_per_domain_follow_each_usage_state(doc, data):
    topo = _topology(doc)

    def plain(t, d):
        return sum(len(t.nodes[n].free_gpus) for n in t.domains[d].nodes)

    assert all(topo.free_in_domain(d) == plain(topo, d) for d in topo.domains)
    taken = {n.index: data.draw(st.sets(st.sampled_from([g.index for g in n.gpus])), label=n.name) for n in topo.nodes}
    later = topo.with_usage(taken)  # counted after the first state's counts are cached: none may carry over
    assert all(later.free_in_domain(d) == plain(later, d) for d in topo.domains)
    assert all(topo.free_in_domain(d) == plain(topo, d) for d in topo.domains)


def _path_figures(topo, a: tuple[int, int], b: tuple[int, int]) -> tuple[float, float]:
    """Bottleneck and largest latency between two GPUs: each one's link into its home, and the networkx
    path between the homes."""
    homes = [topo.gpu_domain(*a), topo.gpu_domain(*b)]
    figures = [topo.crossing[h] for h in homes]
    path = nx.shortest_path(topo.graph, *homes)
    figures += [
        (topo.graph.edges[u, v]["bandwidth_gbps"], topo.graph.edges[u, v]["latency_us"])
        for u, v in itertools.pairwise(path)
    ]
    return min(f[0] for f in figures), max(f[1] for f in figures)


@settings(max_examples=100, deadline=None)
@given(clusters(), st.data())
def test_subtree_figures_are_the_worst_pairwise_path(doc, data):
    """A ring over GPUs crosses every edge of the subtree joining them, which is the union of the paths
    between every two of them: its slowest edge is the slowest path's."""
    topo = _topology(doc)
    every = [(n.index, g.index) for n in topo.nodes for g in n.gpus]
    gpus = data.draw(st.lists(st.sampled_from(every), min_size=2, max_size=6, unique=True))
    figures = steiner_figures(topo, gpus)
    pairs = [_path_figures(topo, a, b) for a, b in itertools.combinations(gpus, 2)]
    assert figures.bandwidth_gbps == min(p[0] for p in pairs)
    assert figures.latency_us == max(p[1] for p in pairs)
    assert figures.level == topo.domains[topo.lowest_common([topo.gpu_domain(*g) for g in gpus])].level
