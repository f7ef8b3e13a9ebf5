"""Decomposition on the domain choice (placer.solver.anchor): when the router rule ties the decode pool and
the router to one rack but the prefill pool may go anywhere, choosing each replica's rack outside the model
and solving the rest finds exactly the one-model optimum, and an unproven answer's bound is a true bound."""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_decompose import rack_cluster

from placer.check.verify import check
from placer.model.cluster import ClusterSpec
from placer.model.errors import InputError
from placer.model.placement import Placement, SolveStats
from placer.model.spec import ServingTopology
from placer.solver.anchor import anchor_of, solve_by_anchor
from placer.solver.greedy import greedy
from placer.solver.options import Budget, SolveOptions, Unplaceable
from placer.solver.problem import build_problem
from placer.solver.search import search
from placer.topology.build import build_topology


@st.composite
def cases(draw) -> tuple[dict, dict]:
    def pool(role: str) -> dict:
        return {
            "role": role,
            "instances": draw(st.integers(1, 3)),
            "tensorParallel": draw(st.sampled_from([1, 2, 4, 8])),
            "placement": {"required": draw(st.sampled_from(["node", "rack"])), "preferred": "node"},
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
        "minReplicas": draw(st.integers(0, replicas)),
    }
    if replicas > 1 and draw(st.booleans()):
        spec["spread"] = {"level": draw(st.sampled_from(["node", "rack"]))}
    if draw(st.booleans()):  # a KV transfer met under a rack or across racks: priced per anchor domain
        spec["transfer"] = {"from": "prefill", "to": "decode", "maxLevel": "spine"}
    return spec, rack_cluster(draw)


def anchored(case):
    """The drawn case's problem and its anchor; cases with an input error or no anchor are not drawn."""
    spec_d, cluster_d = case
    try:
        problem = build_problem(
            ServingTopology.model_validate(spec_d), build_topology(ClusterSpec.model_validate(cluster_d))
        )
    except InputError:
        assume(False)
        raise
    anchor = anchor_of(problem)
    assume(anchor is not None)
    return problem, anchor


def by_anchor_and_one_model(problem, anchor):
    """(the anchor search's answer, the one model's proven answer) with as many replicas each, or None when
    both prove that nothing fits; a case the anchor search hands back to the one model is not drawn."""
    try:
        whole = search(problem, SolveOptions(), Budget(60, 120))
    except Unplaceable as exc:
        assert exc.proven
        whole = None
    try:
        got = solve_by_anchor(problem, anchor, SolveOptions(), Budget(60, 120), greedy(problem))
    except Unplaceable as exc:
        assert exc.proven
        assert whole is None
        return None
    assume(got is not None)  # the greedy did not place every replica: one model answers instead
    assert got is not None and whole is not None and whole.proven
    assert len(got.replicas) == len(whole.replicas)
    for outcome in (got, whole):  # both answers keep every rule, and cost what the checker says they cost
        assert_checked(problem, outcome)
    return got, whole


def assert_checked(problem, outcome) -> None:
    """The independent checker on a search's answer: equal costs of two wrong placements prove nothing."""
    spec = problem.spec
    placement = Placement(
        spec.metadata.name, spec.metadata.namespace, problem.topology.name, outcome.replicas, SolveStats("feasible")
    )
    report = check(spec, problem.topology, placement)
    assert report.violations == []
    if not problem.unlike_domains:  # priced at their slowest node there, so the figures may differ
        assert report.total_units == outcome.cost


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases())
def test_by_anchor_equals_one_model(case) -> None:
    problem, anchor = anchored(case)
    pair = by_anchor_and_one_model(problem, anchor)
    if pair is None:
        return
    got, whole = pair
    if got.proven:
        assert (got.misses, got.cost) == (whole.misses, whole.cost)
    elif got.bound is not None:
        assert got.bound <= whole.cost <= got.cost


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases())
def test_the_walk_charges_work_for_every_entry_it_pushes(case) -> None:
    """The walk over domain assignments is bounded by the work budget, not only by the wall clock: every
    entry it pushes is charged (with each fixed-anchor model refused, the walk visits every assignment)."""
    import heapq

    import placer.solver.anchor as anchor_mod

    problem, anchor = anchored(case)
    pushed = []

    class CountingHeap:
        heappop = staticmethod(heapq.heappop)

        @staticmethod
        def heappush(heap, item):
            pushed.append(1)
            heapq.heappush(heap, item)

    def refused(*_args, **_kwargs):
        raise Unplaceable(proven=True)

    saved = anchor_mod.heapq, anchor_mod.search
    anchor_mod.heapq, anchor_mod.search = CountingHeap, refused
    try:
        budget = Budget(100, 120)
        with contextlib.suppress(Unplaceable):  # every assignment refused: nothing fits, as asked
            solve_by_anchor(problem, anchor, SolveOptions(), budget, greedy(problem))
    finally:
        anchor_mod.heapq, anchor_mod.search = saved
    assume(pushed)
    assert 100 - budget.work_left >= anchor_mod.PUSH_WORK_S * len(pushed) * 0.999  # float rounding
