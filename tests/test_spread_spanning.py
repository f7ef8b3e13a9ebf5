"""A known limit removed: with ``spread``, an instance that spans nodes (no ``nodeCount``) may draw its GPUs
from several spread-level domains, as the checker allows (no two *replicas* share one); the model used to
keep every such instance inside one spread-level domain, and placed fewer replicas than fit.

Toy: one leaf of four racks with two H100 nodes of two free GPUs each, TP8 instances that may span the
leaf (a custom engine, so the split is free), two replicas spread over racks. Each replica must take two
racks: 2 x 2 = 4 racks, each used by one replica. Before the fix placer found no placement at all.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_solver_properties import _solve, cluster_document, solved_with_brute_force, specs

from placer.check.verify import check
from placer.model.cluster import ClusterSpec
from placer.model.levels import LEVEL_RANK
from placer.model.placement import InstancePlacement, Pod
from placer.model.spec import ServingTopology
from placer.pipeline import place
from placer.solver.anchor import anchor_of
from placer.solver.decompose import split_of
from placer.solver.problem import Colocation, Container, Kept, build_problem, with_kept
from placer.solver.solve import SolveOptions, solve
from placer.topology.build import build_topology


def _cluster(free: dict[str, tuple[int, ...]]) -> dict:
    """Racks in one leaf; ``free`` maps rack -> the free GPUs of each of its 4- or 8-GPU nodes (a rack of
    one node is that node, merged)."""
    nodes = []
    for rack, counts in free.items():
        for j, n in enumerate(counts):
            count = 8 if n > 4 else 4
            nodes.append(
                {
                    "name": f"n-{rack}" + (f"-{j}" if len(counts) > 1 else ""),
                    "rack": rack,
                    "leaf": "su1",
                    "gpus": {"count": count, "product": "H100", "memoryGiB": 80},
                    "busy": list(range(count - n)),
                    "cpu": "64",
                    "memory": "512Gi",
                }
            )
    return cluster_document("racks", nodes, 8)


def _spec(tp: int, replicas: int, min_replicas: int | None = None, instances: int = 1) -> dict:
    return {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "ServingTopology",
        "metadata": {"name": "span"},
        "model": {"layers": 4, "hiddenSize": 1024, "kvHeads": 2, "headDim": 64},
        "pools": {
            "aggregated": {
                "instances": instances,
                "tensorParallel": tp,
                "placement": {"required": "spine"},
                "template": {"image": "example.com/engine:1", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            }
        },
        "replicas": replicas,
        "minReplicas": replicas if min_replicas is None else min_replicas,
        "spread": {"level": "rack"},
    }


def _racks(topo, rep) -> set[str]:
    return {topo.node_by_name(p.node).path["rack"] for inst in rep.instances for p in inst.pods}


def test_spanning_instances_of_two_replicas_take_two_racks_each() -> None:
    spec = ServingTopology.model_validate(_spec(8, 2))
    free = {"r0": (2, 2), "r1": (2, 2), "r2": (2, 2), "r3": (2, 2)}
    topo = build_topology(ClusterSpec.model_validate(_cluster(free)))
    placement = place(spec, topo)
    assert len(placement.replicas) == 2
    racks = [_racks(topo, rep) for rep in placement.replicas]
    assert [len(r) for r in racks] == [2, 2] and not racks[0] & racks[1]
    assert check(spec, topo, placement).violations == []


def test_uneven_racks_are_drawn_as_the_model_split_them() -> None:
    # TP6 over racks of 4, 1 + 1, 2 and 3 + 1 free GPUs (two nodes in r1 and r3): r1 + r2 hold only 4, so
    # one replica takes r0 with r1 or r2 and the other the rest. Drawing the fullest nodes first (r0 and r3
    # for one replica), as the decoder does without the model's split per rack, breaks spread.
    spec = ServingTopology.model_validate(_spec(6, 2))
    topo = build_topology(ClusterSpec.model_validate(_cluster({"r0": (4,), "r1": (1, 1), "r2": (2,), "r3": (3, 1)})))
    placement = place(spec, topo)
    assert len(placement.replicas) == 2
    racks = [_racks(topo, rep) for rep in placement.replicas]
    assert not racks[0] & racks[1]
    assert check(spec, topo, placement).violations == []


def test_a_lone_replica_spans_racks_when_the_second_does_not_fit() -> None:
    # Two racks of two nodes with two free GPUs each, TP8: one replica spans both; the second has nowhere
    # to go (minReplicas 1).
    spec = ServingTopology.model_validate(_spec(8, 2, min_replicas=1))
    topo = build_topology(ClusterSpec.model_validate(_cluster({"r0": (2, 2), "r1": (2, 2)})))
    placement = place(spec, topo)
    assert len(placement.replicas) == 1
    assert _racks(topo, placement.replicas[0]) == {"r0", "r1"}
    assert check(spec, topo, placement).violations == []


def test_whole_rack_replica_beside_a_spanning_one() -> None:
    # Two TP4 instances per replica. An 8-GPU rack holds one replica whole (inside one spread domain); the
    # other has racks of 3 and 5 free GPUs: one instance inside r2, the other 3 + 1 over r1 and r2.
    spec = ServingTopology.model_validate(_spec(4, 2, instances=2))
    topo = build_topology(ClusterSpec.model_validate(_cluster({"r0": (8,), "r1": (3,), "r2": (5,)})))
    placement = place(spec, topo)
    assert len(placement.replicas) == 2
    racks = sorted(sorted(_racks(topo, rep)) for rep in placement.replicas)
    assert racks == [["r0"], ["r1", "r2"]]
    assert check(spec, topo, placement).violations == []


# --- properties ---------------------------------------------------------------------------------------
SPREAD_LEVELS = ["socket", "node", "nvlink-domain", "rack", "spine"]


@st.composite
def rack_clusters(draw, max_nodes: int = 4) -> dict:
    """Small nodes over three racks, mostly NVLink, some CPU-tight: where spanning instances must cross
    racks (or nodes) and the spread rule decides how many replicas fit."""
    nodes = []
    for i in range(draw(st.integers(2, max_nodes))):
        pcie = draw(st.integers(0, 3)) == 0
        count = draw(st.sampled_from([2, 4]))
        nodes.append(
            {
                "name": f"n{i}",
                "rack": f"r{draw(st.integers(0, 2))}",
                "gpus": {"count": count, "product": "A100-PCIE" if pcie else "H100", "memoryGiB": 80},
                "interconnect": "pcie" if pcie else "nvlink",
                "sockets": 2 if pcie else 1,
                "busy": sorted(draw(st.sets(st.integers(0, count - 1), max_size=count // 2))),
                "cpu": draw(st.sampled_from(["2", "3", "16"])),
                "memory": "64Gi",
            }
        )
    return cluster_document("racks", nodes, draw(st.sampled_from([1, 8])))


@st.composite
def spanning_specs(draw) -> dict:
    """The property tests' specs with pools that may span racks (TP 2-4, required rack or spine), some
    multi-node (two nodes of one or two GPUs)."""
    spec = draw(specs(tps=(2, 3, 4)))
    for pool in spec["pools"].values():
        pool["placement"] = {"required": draw(st.sampled_from(["rack", "spine"]))}
        # One GPU product per pool, as in the other property tests: a pool free to mix NVLink and PCIe nodes
        # meets the model's worst-case pricing of mixed domains (docs/DESIGN.md, Exactness), not spread.
        pool["gpu"] = {"product": "H100" if draw(st.integers(0, 3)) else "A100-PCIE"}
        if draw(st.integers(0, 4)) == 0:
            per_node = draw(st.sampled_from([1, 2]))
            pool |= {"tensorParallel": 2 * per_node, "nodeCount": 2, "gpusPerNode": per_node}
    return spec


def _socketed(cluster_d: dict) -> bool:
    return any(n.get("sockets", 1) > 1 for n in cluster_d["nodes"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rack_clusters(), spanning_specs(), st.sampled_from(SPREAD_LEVELS), st.integers(0, 2))
def test_spread_places_as_many_replicas_as_brute_force(cluster_d, spec_d, level, floor):
    # Two replicas, any spread level, spanning pools, some CPU-tight nodes: placer finds as many replicas
    # and misses as the checker-only brute force, at no lower cost, and the checker accepts its placement.
    # Over the sockets of PCIe nodes the model is conservative (placer.solver.cells): there only soundness
    # and "never more than fit" are asked.
    spec_d = {**spec_d, "replicas": 2, "minReplicas": floor, "spread": {"level": level}}
    spec, topo, placement, expected = solved_with_brute_force(spec_d, cluster_d)
    if placement is not None:
        report = check(spec, topo, placement)
        assert report.ok, report.violations
        assert expected is not None and len(placement.replicas) <= expected[0]
    if level == "socket" and _socketed(cluster_d):
        return
    if placement is None:
        assert expected is None, f"solver found nothing, brute force found {expected}"
        return
    got = (len(placement.replicas), _misses(spec, topo, report))
    assert got == expected[:2]
    assert report.total_units >= expected[2]
    if placement.stats.status == "optimal":
        assert report.total_units == expected[2]


def _misses(spec, topo, report) -> int:
    return sum(
        1
        for ic in report.instances
        if spec.pools[ic.pool].placement.preferred
        and LEVEL_RANK[topo.domains[ic.domain].level] > LEVEL_RANK[spec.pools[ic.pool].placement.preferred]
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rack_clusters(max_nodes=8), spanning_specs(), st.sampled_from(SPREAD_LEVELS))
def test_spread_placements_pass_the_checker(cluster_d, spec_d, level):
    # Larger clusters, past the brute force: every placement under any spread level passes the checker.
    spec_d = {**spec_d, "replicas": 3, "minReplicas": 0, "spread": {"level": level}}
    spec, topo, placement = _solve(spec_d, cluster_d)
    if placement is not None:
        report = check(spec, topo, placement)
        assert report.ok, report.violations


def test_a_running_spanning_replica_is_kept_and_the_next_takes_the_other_racks() -> None:
    # Replica 0 runs TP6 over r0 (4) and one node of r1 (2), pinned; replica 1 must take r2 and r3 (2 + 4), never the
    # GPUs left in r0 or r1.
    topo = build_topology(ClusterSpec.model_validate(_cluster({"r0": (8,), "r1": (2, 2), "r2": (2,), "r3": (4,)})))
    running = InstancePlacement("aggregated", 0, (Pod("n-r0", (0, 1, 2, 3)), Pod("n-r1-0", (2, 3))), "leaf/su1")
    spec = ServingTopology.model_validate(_spec(6, 2))
    problem = with_kept(build_problem(spec, topo), Kept({(0, "aggregated", 0): running}, {}))
    placement = solve(problem, SolveOptions(time_limit_s=10))
    assert len(placement.replicas) == 2
    assert placement.replicas[0].instances[0].pods == running.pods
    assert _racks(topo, placement.replicas[1]) == {"r2", "r3"}
    assert check(spec, topo, placement).violations == []


# --- the decompositions' assumptions about spread -----------------------------------------------------
def _pcie_node(name: str, rack: str, leaf: str) -> dict:
    return {
        "name": name,
        "rack": rack,
        "leaf": leaf,
        "gpus": {"count": 4, "product": "A100-PCIE", "memoryGiB": 80},
        "interconnect": "pcie",
        "sockets": 2,
        "cpu": "64",
        "memory": "512Gi",
    }


def test_the_anchor_cap_counts_sockets_under_socket_spread() -> None:
    # Two leaves of two 2-socket PCIe nodes; the decode pool (two TP4) and router tie each replica to a leaf. Under
    # spread over sockets a leaf holds four spread-level domains, so both replicas may share one (the cap
    # counted the nodes' missing socket-level ancestors as one domain, and said 1).
    nodes = [_pcie_node(f"{leaf}-{j}", f"r-{leaf}", leaf) for leaf in ("l0", "l1") for j in range(2)]
    topo = build_topology(ClusterSpec.model_validate(cluster_document("pcie", nodes, 8)))
    doc = _spec(1, 2)
    pool = doc["pools"].pop("aggregated")
    decode = {**pool, "role": "decode", "instances": 2, "tensorParallel": 4}  # 8 GPUs: no node holds them
    doc["pools"] = {"prefill": {**pool, "role": "prefill"}, "decode": decode}
    doc["router"] = {"cpu": "1", "memory": "1Gi", "near": {"pool": "decode", "level": "leaf"}}
    doc["spread"] = {"level": "socket"}
    anchor = anchor_of(build_problem(ServingTopology.model_validate(doc), topo))
    assert anchor is not None and anchor.cap == (2, 2)


def _enveloped(domains: tuple[str, ...], spread: str | None = "nvlink-domain", r0_busy: tuple[int, ...] = ()):
    """Two replicas whose envelope lists ``domains`` on a toy: rack r0 of two nodes (``r0_busy`` GPUs busy on
    each), rack r1 of two nodes in NVLink domain nvl1 (b0, b1); spread over NVLink domains unless ``spread``
    says otherwise."""
    gpus = {"count": 4, "product": "H100", "memoryGiB": 80}
    nodes = [{"name": f"a{j}", "rack": "r0", "gpus": gpus, "busy": list(r0_busy)} for j in range(2)]
    nodes += [{"name": f"b{j}", "rack": "r1", "nvlinkDomain": "nvl1", "gpus": gpus} for j in range(2)]
    topo = build_topology(ClusterSpec.model_validate(cluster_document("split", nodes, 8)))
    doc = {**_spec(2, 2), "spread": {"level": "nvlink-domain"}}
    problem = build_problem(ServingTopology.model_validate(doc), topo)
    containers = tuple(Container(d, topo.order[d], 0.0, 0) for d in domains)
    envelope = Colocation("transfer", ("aggregated",), False, containers, "test")
    return replace(problem, colocations=[envelope], spread_level=spread)


def _split_over(domains: tuple[str, ...], spread: str | None = "nvlink-domain"):
    """split_of for the toy of _enveloped."""
    return split_of(_enveloped(domains, spread))


def test_a_split_whose_domains_straddle_the_spread_level_is_one_model() -> None:
    # The envelope's domains: rack r0 (broader than the spread level, nvlink-domain) and two nodes of one
    # NVLink domain in r1. The nodes share a spread-level domain, the rack holds several: no one grouping
    # of the split says both, so the problem is solved as one model (it had no groups: two replicas could
    # take the two nodes of one NVLink domain).
    assert _split_over(("rack/r0", "node/b0", "node/b1")) is None
    assert _split_over(("rack/r0", "node/b0", "node/b1"), spread=None) is not None


def test_a_split_whose_domains_share_no_spread_domain_is_kept() -> None:
    # Rack r0 (broader than the spread level) and one node of NVLink domain nvl1 in r1: no two domains share
    # a spread-level domain, so each per-domain model enforces the spread and the split stands (one model
    # instead was 40x larger and left unproven on a 10k-GPU batch: spread over racks, router near a leaf,
    # and one rack listed alone beside 39 leaves).
    split = _split_over(("rack/r0", "node/b0"))
    assert split is not None and split.groups == ((0,), (1,)) and not split.one_per_group


def test_the_greedy_places_multi_node_instances_broader_than_the_spread_level() -> None:
    # Four nodes of four H100 in one rack; TP8 over two nodes (4 GPUs each) anywhere in the rack, two replicas
    # spread over nodes. Each replica takes two whole nodes. The warm start used to skip a multi-node
    # instance whose container is broader than the spread level (no hint, and the anchor search, which needs
    # the greedy's placement, gave up); it now places both replicas, as the model does.
    from placer.solver.greedy import greedy

    gpus = {"count": 4, "product": "H100", "memoryGiB": 80}
    nodes = [{"name": f"n{j}", "rack": "r0", "gpus": gpus} for j in range(4)]
    topo = build_topology(ClusterSpec.model_validate(cluster_document("mn", nodes, 8)))
    doc = _spec(8, 2)
    doc["pools"]["aggregated"] |= {"nodeCount": 2, "gpusPerNode": 4, "placement": {"required": "rack"}}
    doc["spread"] = {"level": "node"}
    problem = build_problem(ServingTopology.model_validate(doc), topo)
    start = greedy(problem)
    assert len(start) == 2
    nodes_of = [{n for g in rep.instances for n, _gpus in g.pods} for rep in start]
    assert all(len(s) == 2 for s in nodes_of) and not nodes_of[0] & nodes_of[1]


def test_a_spread_rule_on_one_replica_adds_nothing_to_the_model() -> None:
    """With one replica there is no second one to share a domain with (the checker finds nothing to
    compare), so spread must not cost variables: it used to build every spanning instance's draws."""
    from placer.solver.cpsat.model import PlacementModel

    topo = build_topology(ClusterSpec.model_validate(_cluster({"r0": (2, 2), "r1": (2, 2), "r2": (2, 2)})))
    lone = _spec(8, 1)
    free_of_it = {k: v for k, v in lone.items() if k != "spread"}
    sizes = [
        len(PlacementModel(build_problem(ServingTopology.model_validate(doc), topo)).model.proto.variables)
        for doc in (lone, free_of_it)
    ]
    assert sizes[0] == sizes[1]
    spec = ServingTopology.model_validate(lone)
    placement = place(spec, topo)
    assert len(placement.replicas) == 1 and len(_racks(topo, placement.replicas[0])) >= 2
    assert check(spec, topo, placement).violations == []


def test_a_domain_inside_one_spread_domain_is_never_solved_for_two_replicas() -> None:
    # Rack r0 (two nodes, 2 GPUs free each; broader than the spread level) and node b0 alone inside NVLink
    # domain nvl1: the split stands, and b0 can host one replica at most. Its entry for two replicas was
    # solved all the same (and found infeasible): wasted work on every such split.
    from placer.solver.decompose import solve_by_domain
    from placer.solver.options import Budget

    problem = _enveloped(("rack/r0", "node/b0"), r0_busy=(0, 1))
    topo = problem.topology
    split = split_of(problem)
    assert split is not None and not split.one_per_group
    lines: list[str] = []
    options = SolveOptions(time_limit_s=10, log=lines.append)
    out = solve_by_domain(problem, split, options, Budget.of(options))
    entries = {line.split("]")[0].lstrip("[") for line in lines if " x" in line.split("]")[0]}
    assert "node/b0 x2" not in entries and entries
    assert len(out.replicas) == 2 and out.proven
    placement = place(problem.spec, topo)
    assert len(placement.replicas) == 2 and check(problem.spec, topo, placement).violations == []
