"""The anchor search's per-assignment bounds (placer.solver.anchor_bound) never exceed the true optimum of
an assignment: the flow with per-instance transfer shares, the flow with each replica's transfer decided,
and the Lagrangian tables at any prices, each checked against an exact solve of the fixed-anchor model on
small random rack clusters; and the anchor search that uses them still finds the one model's optimum."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from test_anchor import anchored, by_anchor_and_one_model
from test_decompose import rack_cluster
from test_solver_properties import cluster_document

from placer.model.cluster import ClusterSpec
from placer.model.spec import ServingTopology
from placer.solver.anchor import (
    Cheapest,
    _pinned,
    anchor_of,
    anchored_bound,
    kv_term,
    linked,
    rest_bound,
    solve_by_anchor,
    tops,
)
from placer.solver.anchor_bound import AssignmentBound, applies
from placer.solver.greedy import greedy
from placer.solver.options import Budget, SolveOptions, Unplaceable
from placer.solver.problem import Problem, build_problem
from placer.solver.search import search
from placer.topology.build import build_topology

NO_LIMIT = 10**18


def node_spec(draw) -> dict:
    """Prefill and decode that each fit one node (the flow bound's case), the router in decode's rack."""

    def pool(role: str) -> dict:
        return {
            "role": role,
            "instances": draw(st.integers(1, 3)),
            "tensorParallel": draw(st.sampled_from([1, 2, 4, 8])),
            "placement": {"required": "node", **({"preferred": "node"} if draw(st.booleans()) else {})},
            "template": {"image": "example.com/engine:1", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}},
        }

    replicas = draw(st.integers(1, 3))
    spec = {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "ServingTopology",
        "metadata": {"name": "t"},
        "model": {"layers": 8, "hiddenSize": 2048, "kvHeads": 4, "headDim": 64},
        "pools": {"prefill": pool("prefill"), "decode": pool("decode")},
        "router": {"cpu": "2", "memory": "1Gi", "near": {"pool": "decode", "level": "rack"}},
        "replicas": replicas,
    }
    if replicas > 1 and draw(st.booleans()):
        spec["spread"] = {"level": draw(st.sampled_from(["node", "rack"]))}
    if draw(st.booleans()):  # the transfer priced per replica: inside the rack, or across racks
        spec["transfer"] = {"from": "prefill", "to": "decode", "maxLevel": "spine"}
    return spec


def flow_problem(spec_d: dict, cluster_d: dict) -> Problem:
    problem, _anchor = anchored((spec_d, cluster_d))
    assume(applies(problem))
    return problem


@st.composite
def assignments(draw):
    """A problem where the flow bound applies and one full assignment of its replicas to anchor domains."""
    problem = flow_problem(node_spec(draw), rack_cluster(draw))
    anchor = anchor_of(problem)
    assert anchor is not None
    counts = [0] * len(anchor.domains)
    for _ in range(problem.replicas):
        open_ = [i for i, c in enumerate(counts) if c < anchor.cap[i]]
        assume(open_)
        counts[draw(st.sampled_from(open_))] += 1
    return problem, tuple(counts)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(assignments(), st.lists(st.integers(0, 400_000), min_size=1, max_size=40))
def test_bounds_never_exceed_an_assignments_optimum(case, noise) -> None:
    problem, counts = case
    anchor = anchor_of(problem)
    assert anchor is not None
    flow = AssignmentBound(problem, anchor.domains, anchor.colocation, anchor.pools, linked(problem, anchor))
    try:
        exact = search(_pinned(problem, anchor, counts), SolveOptions(), Budget(60, 120))
    except Unplaceable as exc:
        assert exc.proven
        exact = None
    shared, _arcs, _split = flow.of(counts)
    decided, _arcs = flow.split(counts, NO_LIMIT)
    event(
        "no placement" if exact is None else "compared" + (" with a transfer" if len(problem.colocations) > 1 else "")
    )
    if exact is None:
        return  # a bound may be anything where nothing fits; one that says "nothing fits" must be right:
    assert exact.proven and exact.misses == 0
    assert shared is not None and decided is not None  # (checked here: a placement exists, so a flow does)
    assert shared <= decided <= exact.cost
    # The Lagrangian tables bound every assignment at any prices >= 0: the LP duals of this assignment, of
    # the unassigned relaxation, and arbitrary ones.
    prices = [flow.prices(counts, 0), flow.prices((), problem.replicas)]
    prices.append([noise[c % len(noise)] for c in range(len(flow.classes))])
    for p in prices:
        assert p is not None
        tables = flow.tables(p, anchor.cap, problem.replicas)
        assert tables is not None
        const, per = tables
        entries = [per[i][k] for i, k in enumerate(counts)]
        assert all(e is not None for e in entries)
        assert const + sum(e for e in entries if e is not None) <= exact.cost


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data())
def test_by_anchor_with_the_flow_bound_equals_one_model(data) -> None:
    problem = flow_problem(node_spec(data.draw), rack_cluster(data.draw))
    anchor = anchor_of(problem)
    assert anchor is not None
    pair = by_anchor_and_one_model(problem, anchor)
    if pair is None:
        return
    got, whole = pair
    event("compared")
    assert got.proven  # 60 s of work is far more than these need
    assert (got.misses, got.cost) == (whole.misses, whole.cost)


def _node(name: str, rack: str, queue: int) -> dict:
    return {
        "name": name,
        "rack": rack,
        "gpus": {"count": 8, "product": "H100", "memoryGiB": 80},
        "cpu": "64",
        "memory": "512Gi",
        "metrics": {"queueDepth": queue, "kvCacheHit": 0.4},
    }


def test_the_flow_bound_sees_two_pools_wanting_one_cheap_node() -> None:
    """Rack r0 has one idle node (a, queue 0) and one busy one (b, queue 4); r1 two busy ones. One replica
    of 2 TP8 decode instances (16 GPUs: only a whole rack holds them, so the router's domains are the
    racks) and 1 TP8 prefill. Anchored in r0, decode takes both of r0's nodes; the per-domain bound still
    prices prefill, anywhere, at the idle node a that decode holds: 8 GPUs x queue 4 x weight 100 = 3,200
    cost, 320,000 units (0.01 each) under.
    The flow sends prefill to a queue-4 node in r1 (and the transfer across racks): the optimum exactly."""
    nodes = [_node("a", "r0", 0), _node("b", "r0", 4), _node("c", "r1", 4), _node("d", "r1", 4)]
    spec = {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "ServingTopology",
        "metadata": {"name": "t"},
        "model": {"layers": 8, "hiddenSize": 2048, "kvHeads": 4, "headDim": 64},
        "pools": {
            role: {
                "role": role,
                "instances": n,
                "tensorParallel": 8,
                "placement": {"required": "node"},
                "template": {"image": "example.com/engine:1"},
            }
            for role, n in (("prefill", 1), ("decode", 2))
        },
        "router": {"near": {"pool": "decode", "level": "rack"}},
    }
    problem = build_problem(
        ServingTopology.model_validate(spec),
        build_topology(ClusterSpec.model_validate(cluster_document("c", nodes, 8))),
    )
    anchor = anchor_of(problem)
    assert anchor is not None and applies(problem) and anchor.domains == ("rack/r0", "rack/r1")
    link = linked(problem, anchor)
    tele = problem.telemetry_units
    assert tele[1] - tele[0] == 40_000  # queue 4 x weight 100 per GPU, in 0.01 units (same hit rate everywhere)
    flow = AssignmentBound(problem, anchor.domains, anchor.colocation, anchor.pools, link)
    exact = search(_pinned(problem, anchor, (1, 0)), SolveOptions(), Budget(30, 60))
    cheap = Cheapest(problem, anchor)
    kv = kv_term(problem, anchor, cheap, link, "rack/r0", tops(problem, anchor, cheap, link))
    old = rest_bound(problem, anchor, cheap)[1] + anchored_bound(problem, anchor, cheap, 0, 1, kv)[1]
    assert flow.of((1, 0))[0] == flow.split((1, 0), NO_LIMIT)[0] == exact.cost
    assert exact.cost - old >= 8 * 40_000


def test_a_flow_the_solver_cannot_price_bounds_nothing_and_drops_nothing() -> None:
    """Queue depths near their limit under the largest weight push the scaled unit costs past what the flow
    solver takes (BAD_COST_RANGE). That is no bound, not "no placement": every such assignment must then be
    solved exactly, or the walk would empty its heap and claim a proof it never made (found in review)."""
    nodes = [_node(f"n{r}-{i}", f"r{r}", int(1e6 * (1 - 0.03 * (4 * r + i)))) for r in range(3) for i in range(6)]
    template = {"image": "x.com/e:1"}
    spec = {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "ServingTopology",
        "metadata": {"name": "t"},
        "model": {"layers": 8, "hiddenSize": 2048, "kvHeads": 4, "headDim": 64},
        "pools": {
            "prefill": {"role": "prefill", "instances": 40, "tensorParallel": 1, "template": template},
            "decode": {"role": "decode", "instances": 2, "tensorParallel": 7, "template": template},
            "extra": {"role": "aggregated", "instances": 1, "tensorParallel": 5, "template": template},
        },
        "router": {"near": {"pool": "decode", "level": "rack"}},
        "transfer": {"from": "prefill", "to": "decode", "maxLevel": "spine"},
        "objective": {"queueDepth": 1e6},
        "replicas": 2,
    }
    for pool in spec["pools"].values():
        pool["placement"] = {"required": "node"}
    problem = build_problem(
        ServingTopology.model_validate(spec),
        build_topology(ClusterSpec.model_validate(cluster_document("c", nodes, 8))),
    )
    anchor = anchor_of(problem)
    assert anchor is not None and applies(problem)
    flow = AssignmentBound(problem, anchor.domains, anchor.colocation, anchor.pools, linked(problem, anchor))
    for counts in [(1, 1, 0), (0, 1, 1)]:
        exact = search(_pinned(problem, anchor, counts), SolveOptions(), Budget(30, 60))
        bound = flow.of(counts)[0]
        assert bound is not None and bound <= exact.cost  # a placement exists: never "cannot fit"
    logs: list[str] = []
    got = solve_by_anchor(problem, anchor, SolveOptions(log=logs.append), Budget(30, 60), greedy(problem))
    one = search(problem, SolveOptions(), Budget(30, 60))
    assert got is not None and got.proven and one.proven and got.cost == one.cost
    assert not any("0 fixed-router model(s)" in line for line in logs)  # the proof rests on exact solves
