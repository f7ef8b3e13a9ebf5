"""The greedy warm start stays inside its share of the work budget, and what it returns when the share runs
out is still a set of complete, valid replicas."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placer.check.verify import check
from placer.model.load import load_cluster, load_spec
from placer.model.placement import Placement, SolveStats
from placer.solver.greedy import _reachable, greedy_counted
from placer.solver.problem import build_problem
from placer.solver.search import greedy_outcome
from placer.topology.build import build_topology

FIX = Path(__file__).resolve().parents[1] / "fixtures"
TOPO = build_topology(load_cluster(FIX / "clusters" / "dgx-h100-1024.yaml"))
CASES = {}
for name in ("llama-70b-disagg", "aggregated-tp8", "tp16-multinode"):
    spec = load_spec(FIX / "specs" / f"{name}.yaml")
    spec = spec.model_copy(update={"replicas": 3, "min_replicas": 1})  # several replicas: a limit can cut between
    CASES[name] = (spec, build_problem(spec, TOPO))


def _overshoot(problem) -> int:
    """The most one step of the walk can add past the limit: ranking a pool's whole scope (each candidate's
    nodes looked up once), then one candidate's nodes visited twice."""
    topo = problem.topology
    ranking = max(
        2 * len(p.candidates) + sum(len(topo.domains[c.domain].nodes) for c in p.candidates)
        for p in problem.pools.values()
    )
    return ranking + 2 * len(topo.nodes) + 2


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_limit_and_a_generous_limit_give_the_same_walk(name: str) -> None:
    _spec, problem = CASES[name]
    full, work = greedy_counted(problem)
    assert full, "the fixture cluster fits at least one replica"
    again, work_again = greedy_counted(problem, work)
    assert again == full and work_again == work
    # Half the work places fewer replicas (the initial charge is 4 units per node the walk may read).
    initial = 4 * _reachable(problem)
    cut, _ = greedy_counted(problem, initial + (work - initial) // 2)
    assert len(cut) < len(full)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(CASES)), fraction=st.floats(0.0, 1.0))
def test_a_limit_cuts_between_complete_replicas_and_is_kept(name: str, fraction: float) -> None:
    spec, problem = CASES[name]
    full, full_work = greedy_counted(problem)
    limit = int(fraction * full_work)
    got, work = greedy_counted(problem, limit)
    initial = 4 * _reachable(problem)  # charged before any check: 4 units per node the walk may read
    assert work <= max(limit, initial) + _overshoot(problem)
    # A prefix of the unlimited walk: the same replicas, in the same order, just fewer of them.
    assert got == full[: len(got)]
    if got:
        outcome = greedy_outcome(replace(problem, replicas=len(got), min_replicas=1), got)
        placement = Placement(
            spec.metadata.name, spec.metadata.namespace, TOPO.name, outcome.replicas, SolveStats("feasible")
        )
        one_by_one = spec.model_copy(update={"replicas": len(got), "min_replicas": 1})
        report = check(one_by_one, TOPO, placement)
        assert report.ok, report.violations


def test_router_nodes_under_a_container_are_those_the_tree_puts_there():
    """The walk finds a container's router nodes by bisection on their pre-order positions: for every domain
    of the cluster (and a busier copy, where fewer nodes qualify) the same nodes, in the same order, as asking
    the tree node by node."""
    from placer.solver.greedy import _Scopes

    spec, problem = CASES["llama-70b-disagg"]
    busy = TOPO.with_usage({n.index: n.free_gpus[:5] for n in TOPO.nodes if n.index % 3 == 0})
    for p in (problem, build_problem(spec, busy)):
        topo, scopes = p.topology, _Scopes(p)
        assert scopes.router_keys is not None and p.router_nodes
        for dom in topo.domains:
            expected = [n for n in p.router_nodes if topo.contains(dom, topo.node_domain[n])]
            assert list(scopes.router_nodes(dom)) == expected, dom
        assert list(scopes.router_nodes(None)) == list(p.router_nodes)
