"""A lower bound on the cost of a batch's placed replicas, placed all together however arranged: what the
batch's gap is measured against (placing one by one has a price; this says how large it can be)."""

from __future__ import annotations

from collections import defaultdict

from placer.model.errors import InfeasibleError
from placer.model.placement import Placement
from placer.model.spec import ServingTopology
from placer.solver.problem import Problem, build_problem
from placer.solver.search import _forced_misses
from placer.topology.graph import Topology


def fleet_bound(
    placed: list[tuple[ServingTopology, Placement]], topology: Topology, exact_first: int | None = None
) -> int | None:
    """A lower bound on the cost of placing the same replicas all together, however arranged.

    Cost is all-reduce per instance + KV transfer per replica + telemetry per GPU. The first two are at
    least each instance's cheapest candidate and each replica's cheapest container (on the cluster before
    any of them). Where a deployment has more preferred-level misses than it must, its instances are bounded
    by their cheapest candidate at any level (cost is minimised after misses, so a cheaper arrangement
    could have more). Telemetry: see _telemetry_bound. ``exact_first``: the first placement's proven
    optimum on this cluster, which then bounds its own share exactly (the better of the two is returned)."""
    terms = []
    for spec, placement in placed:
        term = _bound_terms(spec, placement, topology)
        if term is None:
            return None
        terms.append(term)
    bound = _combine(terms, topology)
    if exact_first is not None and terms:
        bound = max(bound, exact_first + _combine(terms[1:], topology))
    return bound


_Terms = tuple[int, list[tuple[tuple, int, int]], dict[tuple, list[int]]]  # structural, demand, telemetry


def _bound_terms(spec: ServingTopology, placement: Placement, topology: Topology) -> _Terms | None:
    """One deployment's share: its structural bound and the GPUs its pools draw, by (weights, eligible)."""
    try:
        problem = build_problem(spec, topology)
    except InfeasibleError:
        return None
    if problem.unlike_domains:
        return None  # candidates priced at their slowest node may cost more than the real GPUs
    n = len(placement.replicas)
    misses = 0
    for rep in placement.replicas:
        for inst in rep.instances:
            cand = next((c for c in problem.pools[inst.pool].candidates if c.domain == inst.domain), None)
            misses += bool(cand is None or cand.preferred_miss)
    # With the fewest misses possible, every instance of a pool that can meet its preferred level does.
    return problem_terms(problem, n, fewest=misses <= _forced_misses(problem, n))


def problem_terms(problem: Problem, n: int, fewest: bool) -> _Terms:
    """The share of ``n`` replicas of one problem, on the problem's own state; ``fewest``: they have the
    fewest preferred-level misses possible (so every pool that can meet its preferred level does)."""
    spec = problem.spec
    structural = 0
    demand: list[tuple[tuple, int, int]] = []  # (group, slot size, GPUs)
    tele: dict[tuple, list[int]] = {}
    for plan in problem.pools.values():
        meets = [c.units for c in plan.candidates if not c.preferred_miss]
        units = meets if fewest and meets else [c.units for c in plan.candidates]
        structural += n * plan.instances * min(units, default=0)
        group = (spec.objective.queue_depth, spec.objective.cache_miss, plan.eligible)
        demand.append((group, plan.slot, n * plan.instances * plan.size))
        tele[group] = problem.telemetry_units
    for coloc in problem.colocations:
        structural += n * min((c.units for c in coloc.containers), default=0)
    return structural, demand, tele


def problem_bound(problem: Problem, n: int) -> int:
    """A lower bound on the cost of ``n`` replicas of one problem at the fewest misses possible, on its state."""
    return _combine([problem_terms(problem, n, fewest=True)], problem.topology)


def _combine(terms: list[_Terms], topology: Topology) -> int:
    """Structural shares add up; telemetry is bounded per group over every deployment's GPUs at once."""
    slots: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    tele_of: dict[tuple, list[int]] = {}
    for _structural, demand, tele in terms:
        for group, slot, gpus in demand:
            slots[group].append((slot, gpus))
        tele_of |= tele
    telemetry = sum(_telemetry_bound(topology, g[2], tele_of[g], s) for g, s in slots.items())
    return sum(t[0] for t in terms) + telemetry


def _telemetry_bound(
    topology: Topology, eligible: frozenset[int], tele: list[int], slots: list[tuple[int, int]]
) -> int:
    """The better of two relaxations of the GPUs these pools draw: whole slots per node (_slot_flow) and
    GPUs from any node with a slot free (_nested_bound)."""
    return max(_slot_flow(topology, eligible, tele, slots), _nested_bound(topology, eligible, tele, slots))


def _slot_flow(topology: Topology, eligible: frozenset[int], tele: list[int], slots: list[tuple[int, int]]) -> int:
    """Least telemetry when instances with a slot of s take whole multiples of s on a node (an instance
    on one node takes all of its s GPUs there), all of them together at most what the node has free: a
    transportation problem (slot sizes -> nodes -> used), solved exactly as a min-cost flow. Its optimum
    is a lower bound because every real placement is such a flow. 0 when it has none (cannot happen for
    placed replicas; the other relaxation then decides)."""
    from ortools.graph.python import min_cost_flow

    need: dict[int, int] = defaultdict(int)
    for slot, gpus in slots:
        need[slot] += gpus
    if set(need) <= {1}:
        return 0  # no rounding: the nested bound is this flow's optimum
    nodes = sorted(n for n in eligible if topology.nodes[n].free_gpus)
    sizes = sorted(need)
    flow = min_cost_flow.SimpleMinCostFlow()
    sink = len(sizes) + len(nodes)
    for j, n in enumerate(nodes):
        free = len(topology.nodes[n].free_gpus)
        for i, slot in enumerate(sizes):
            whole = free // slot * slot
            if whole:
                flow.add_arc_with_capacity_and_unit_cost(i, len(sizes) + j, whole, 0)
        flow.add_arc_with_capacity_and_unit_cost(len(sizes) + j, sink, free, tele[n])
    for i, slot in enumerate(sizes):
        flow.set_node_supply(i, need[slot])
    flow.set_node_supply(sink, -sum(need.values()))
    return flow.optimal_cost() if flow.solve() == flow.OPTIMAL else 0


def _nested_bound(topology: Topology, eligible: frozenset[int], tele: list[int], slots: list[tuple[int, int]]) -> int:
    """Least telemetry for GPUs drawn by these pools, each from nodes with at least its slot free.

    A relaxation of the real assignment (GPUs may be split across nodes fractionally; groups with other
    selectors or weights are bounded apart, ignoring that they share nodes). The nodes a slot may use are
    nested (free >= 8 lies inside free >= 4 ...), so serving the largest slot first from its cheapest nodes
    is optimal for the relaxation: any GPU a smaller slot would rather have, it can also take elsewhere."""
    free = {n: len(topology.nodes[n].free_gpus) for n in eligible}
    left = dict(free)
    total = 0
    need_by_slot: dict[int, int] = defaultdict(int)
    for slot, gpus in slots:
        need_by_slot[slot] += gpus
    for slot in sorted(need_by_slot, reverse=True):
        need = need_by_slot[slot]
        for n in sorted((n for n in eligible if free[n] >= slot), key=lambda n: (tele[n], n)):
            if need == 0:
                break
            take = min(need, left[n])
            left[n] -= take
            need -= take
            total += take * tele[n]
    return total
