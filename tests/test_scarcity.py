"""Scarcity prices on wholly free nodes (placer.solver.scarcity): what they are on hand-made clusters,
that a tier placed at them keeps a whole node for its later TP8 instead of sending it to a costlier
one, and that the cost reported after the prices are taken off is the checker's."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fleet import _spec_doc, leaf_cluster
from test_solver_properties import clusters, specs

import placer.solver.fleet as fleet_module
import placer.solver.fleet_one as fleet_one_module
from placer.check.verify import check
from placer.model.cluster import ClusterSpec
from placer.model.errors import InfeasibleError, InputError
from placer.model.load import load_cluster
from placer.model.spec import ServingTopology
from placer.pipeline import verify_fleet
from placer.solver.fleet import Deployment, solve_fleet
from placer.solver.fleet_one import place_one, replica_floor
from placer.solver.greedy import greedy
from placer.solver.options import Budget
from placer.solver.problem import build_problem
from placer.solver.scarcity import at_prices, scarcity_prices, true_cost, whole_node_demand
from placer.solver.solve import SolveOptions
from placer.topology.build import build_topology

OPTS = SolveOptions(time_limit_s=20, explain=False)


def _spec(name: str, tp: int, instances: int, **extra) -> ServingTopology:
    return ServingTopology.model_validate({**_spec_doc(name, tp, instances), **extra})


def _topology(tmp_path, rows):
    return build_topology(load_cluster(leaf_cluster(tmp_path, rows)))


# n1 wholly free and cheap, n2 and n3 partly free at a middling cost, n4 wholly free and dear.
ROWS = [("n1", [], 0.9), ("n2", [0, 1], 0.5), ("n3", [0, 1, 2, 3], 0.5), ("n4", [], 0.1)]


def test_whole_node_demand_counts_the_nodes_an_instance_fills():
    tp8 = _spec("a", 8, 2)  # 2 instances x 1 node
    tp16 = _spec("b", 16, 1, replicas=3)  # 3 replicas x 2 nodes
    tp4 = _spec("c", 4, 5)  # fills none
    anyone = (None, None)  # no GPU selector
    assert whole_node_demand([tp8, tp16, tp4], {8}) == {(8, anyone): 2 + 6}
    assert whole_node_demand([tp8], {4, 8}) == {(8, anyone): 2, (4, anyone): 4}
    doc = _spec_doc("d", 8, 1)
    doc["pools"]["aggregated"].update({"nodeCount": 2, "gpusPerNode": 4, "placement": {"required": "leaf"}})
    doc["pools"]["aggregated"]["gpu"] = {"product": "H100", "minMemoryGiB": 80}
    assert whole_node_demand([ServingTopology.model_validate(doc)], {4, 8}) == {(4, ("H100", 80)): 2}


def test_the_price_is_the_first_unwanted_node_s_cost_less_this_node_s(tmp_path):
    topo = _topology(tmp_path, ROWS)
    problem = build_problem(_spec("small", 2, 5), topo)
    units = problem.telemetry_units
    n1, n4 = topo.node_by_name("n1").index, topo.node_by_name("n4").index
    assert units[n1] < units[n4]  # the cheap whole node and the dear one
    prices = scarcity_prices(problem, [_spec("big", 8, 1)])  # one whole node wanted, two free
    assert prices is not None
    assert prices[n1] == units[n4] - units[n1]
    assert [p for i, p in enumerate(prices) if i != n1] == [0] * (len(prices) - 1)  # partly used: no price


def test_no_price_without_demand_or_where_whole_nodes_are_plentiful(tmp_path):
    topo = _topology(tmp_path, ROWS)
    problem = build_problem(_spec("small", 2, 5), topo)
    assert scarcity_prices(problem, []) is None
    assert scarcity_prices(problem, [_spec("tp4", 4, 3)]) is None  # nobody fills a node
    even = _topology(tmp_path, [("n1", [], None), ("n2", [], None), ("n3", [0], None)])
    assert scarcity_prices(build_problem(_spec("small", 2, 5), even), [_spec("big", 8, 1)]) is None


def test_when_every_whole_node_is_wanted_breaking_one_costs_more_than_any_free_gpu(tmp_path):
    topo = _topology(tmp_path, ROWS)
    problem = build_problem(_spec("small", 2, 5), topo)
    prices = scarcity_prices(problem, [_spec("big", 8, 2)])  # two wanted, two free
    assert prices is not None
    units, dearest = problem.telemetry_units, max(problem.telemetry_units[n.index] for n in topo.nodes)
    for name in ("n1", "n4"):
        i = topo.node_by_name(name).index
        assert units[i] + prices[i] == dearest + 1


def test_a_node_of_another_gpu_product_is_not_priced_for_a_tp8_that_cannot_use_it(tmp_path):
    rows = [("h1", [], 0.9), ("h2", [], 0.1), ("a1", [], 0.9), ("a2", [], 0.1)]
    path = leaf_cluster(tmp_path, rows)
    doc = yaml.safe_load(path.read_text())
    for node in doc["nodes"]:
        if node["name"].startswith("a"):
            node["gpus"]["product"] = "A100"
    path.write_text(yaml.safe_dump(doc))
    topo = build_topology(load_cluster(path))
    big = _spec_doc("big", 8, 1)
    big["pools"]["aggregated"]["gpu"] = {"product": "H100"}
    problem = build_problem(_spec("small", 2, 5), topo)
    prices = scarcity_prices(problem, [ServingTopology.model_validate(big)])
    assert prices is not None
    h1, h2 = topo.node_by_name("h1").index, topo.node_by_name("h2").index
    units = problem.telemetry_units
    assert prices[h1] == units[h2] - units[h1]  # the cheap H100 node is kept for the H100 TP8
    assert [p for i, p in enumerate(prices) if i != h1] == [0] * (len(prices) - 1)  # A100 nodes: no price


def _batch(tmp_path):
    topo = _topology(tmp_path, ROWS)
    # Same priority: the 10-GPU TP2 deployment goes first (more GPUs), the TP8 after it.
    return topo, [Deployment(_spec("small", 2, 5), "small.yaml"), Deployment(_spec("big", 8, 1), "big.yaml")]


def _nodes(result, key):
    placed = next(p for p in result.placed if p.deployment.key == key)
    return {pod.node for r in placed.placement.replicas for i in r.instances for pod in i.pods}


def _pairs(result):
    return [(p.deployment.spec, p.placement) for p in result.placed]


def test_a_tier_at_prices_keeps_the_cheap_whole_node_for_its_tp8(tmp_path, monkeypatch):
    topo, deployments = _batch(tmp_path)
    priced = solve_fleet(deployments, topo, OPTS)
    assert _nodes(priced, "default/small") == {"n2", "n3"} and _nodes(priced, "default/big") == {"n1"}
    monkeypatch.setattr(fleet_module, "scarcity_prices", lambda _problem, _later: None)
    plain = solve_fleet(deployments, topo, OPTS)
    assert "n1" in _nodes(plain, "default/small") and _nodes(plain, "default/big") == {"n4"}
    checked = [sum(r.total_units for r in verify_fleet(topo, _pairs(res))) for res in (priced, plain)]
    assert checked[0] < checked[1]


def test_a_placement_at_prices_reports_its_true_cost_and_no_optimum(tmp_path):
    topo, deployments = _batch(tmp_path)
    result = solve_fleet(deployments, topo, OPTS)
    small = next(p for p in result.placed if p.deployment.key == "default/small").placement
    assert small.stats.status == "feasible" and small.stats.bound is None
    assert any("scarcity prices" in n for n in small.stats.notes)
    big = next(p for p in result.placed if p.deployment.key == "default/big").placement
    assert big.stats.status == "optimal"  # the last of its tier: nobody after it, no prices


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    clusters(max_nodes=4, max_gpus=8), specs(tps=(1, 2, 4, 8)), st.lists(st.integers(0, 5_000), min_size=4, max_size=4)
)
def test_the_cost_with_prices_taken_off_is_the_checker_s(cluster_d, doc, raw):
    topo = build_topology(ClusterSpec.model_validate(cluster_d))
    spec = ServingTopology.model_validate(doc)
    prices = tuple(raw[i % len(raw)] for i in range(len(topo.nodes)))
    try:
        problem = build_problem(spec, topo)
        placement = place_one(at_prices(problem, prices), OPTS, Budget.of(OPTS))
    except (InfeasibleError, InputError):  # no placement, or a TP size no node of the draw holds
        return
    on_priced = any(
        prices[topo.node_by_name(pod.node).index]
        for rep in placement.replicas
        for inst in rep.instances
        for pod in inst.pods
    )
    placement = true_cost(placement, topo, prices)
    if not problem.unlike_domains:  # there the solver prices a domain at its worst case, by design
        assert placement.stats.objective == check(spec, topo, placement).total_units
    note = placement.stats.notes[-1]
    assert ("uses none of the priced nodes" in note) == (not on_priced), note


def test_the_batch_table_says_which_deployments_were_placed_at_prices(tmp_path):
    from io import StringIO

    from rich.console import Console
    from test_fleet import _write_specs

    from placer.explain.fleet_view import fleet_table
    from placer.pipeline import run_fleet

    cluster = leaf_cluster(tmp_path, ROWS)
    specs = _write_specs(tmp_path, [_spec_doc("small", 2, 5), _spec_doc("big", 8, 1)])
    out = StringIO()
    Console(file=out, width=200).print(fleet_table(run_fleet([specs], cluster, OPTS), 0.0))
    rows = {line.split()[0]: line for line in out.getvalue().splitlines() if line.startswith("default/")}
    assert "feasible, at scarcity prices" in rows["default/small"]
    assert "scarcity" not in rows["default/big"] and "optimal" in rows["default/big"]


# ---- the greedy's second container order (fleet_one._by_telemetry, replica_floor) ----------------------


def _two_racks(tmp_path):
    """Rack r1: a cheap node with one TP2 slot free and a dear node wholly free; rack r2: two cheap nodes
    wholly free. The cheapest single GPU is the same in both racks."""
    rows = [("a1", [0, 1, 2, 3, 4, 5], 0.9, "r1"), ("a2", [], 0.1, "r1"), ("b1", [], 0.9, "r2"), ("b2", [], 0.9, "r2")]
    nodes = []
    for name, busy, hit, rack in rows:
        node = {"name": name, "rack": rack, "leaf": "l1", "gpus": {"count": 8, "product": "H100", "memoryGiB": 80}}
        node["metrics"] = {"queueDepth": 0, "kvCacheHit": hit}
        if busy:
            node["busy"] = list(busy)
        nodes.append(node)
    doc = {"apiVersion": "placer.dev/v1alpha1", "kind": "Cluster", "metadata": {"name": "two"}, "nodes": nodes}
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(doc))
    return build_topology(load_cluster(path))


def test_containers_are_tried_by_what_a_replica_pays_in_them_not_by_their_cheapest_gpu(tmp_path):
    topo = _two_racks(tmp_path)
    spec = _spec("small", 2, 4, router={"cpu": "1", "memory": "1Gi", "near": {"pool": "aggregated", "level": "rack"}})
    problem = build_problem(spec, topo)
    (coloc,) = problem.colocations
    racks = [c for c in coloc.containers if c.domain.startswith("rack/")]
    assert [c.domain for c in sorted(racks, key=lambda c: c.order)] == ["rack/r1", "rack/r2"]  # the tree's order
    floor = replica_floor(problem, coloc)
    units = problem.telemetry_units
    cheap, dear = units[topo.node_by_name("b1").index], units[topo.node_by_name("a2").index]
    assert floor(racks[0]) == (0, racks[0].units + 2 * cheap + 6 * dear)  # a1's one slot, then the dear node
    assert floor(racks[1]) == (0, racks[1].units + 8 * cheap)
    ranked = fleet_one_module._by_telemetry(problem).colocations[0].containers
    order = {c.domain: c.order for c in ranked}
    assert order["rack/r2"] < order["rack/r1"]
    # a node with 2 GPUs free cannot hold a TP4 instance: no slot there counts
    tp4 = build_problem(
        _spec("four", 4, 2, router={"cpu": "1", "memory": "1Gi", "near": {"pool": "aggregated", "level": "rack"}}), topo
    )
    r1 = next(c for c in tp4.colocations[0].containers if c.domain == "rack/r1")
    assert replica_floor(tp4, tp4.colocations[0])(r1) == (0, r1.units + 8 * dear)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(max_nodes=5, max_gpus=8), specs(tps=(1, 2, 4)))
def test_a_replica_never_pays_less_than_its_containers_floor(cluster_d, spec_d):
    """replica_floor is a lower bound: every replica the greedy places in a container pays at least its
    floor there (KV units, its members' all-reduce units and the telemetry of their GPUs), and the floor
    says no GPUs are short."""
    topo = build_topology(ClusterSpec.model_validate(cluster_d))
    try:
        problem = build_problem(ServingTopology.model_validate(spec_d), topo)
    except (InfeasibleError, InputError):
        return
    ranked = fleet_one_module._by_telemetry(problem)
    for replica in greedy(ranked):
        for coloc in problem.colocations:
            container = coloc.containers[replica.containers[coloc.name]]
            paid = container.units
            for inst in replica.instances:
                if inst.pool in coloc.pools:
                    paid += problem.pools[inst.pool].candidates[inst.candidate].units
                    paid += sum(len(gpus) * problem.telemetry_units[n] for n, gpus in inst.pods)
            short, floor = replica_floor(problem, coloc)(container)
            assert short == 0 and floor <= paid
