"""One deployment of a batch on the state the earlier ones left (placer.solver.fleet): placed by its greedy
when that meets its lower bound, else solved exactly; and which ones need no solve at all, because one of
the same shape asking less was already proven not to fit on more room."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace

from placer.model.errors import InfeasibleError
from placer.model.placement import Placement, SolveStats
from placer.solver.fleet_bound import problem_bound
from placer.solver.options import Budget, SolveOptions
from placer.solver.problem import Colocation, Container, Problem
from placer.solver.solve import solve

# A greedy placement this close to its own lower bound is kept without a solve (status feasible, its gap
# recorded): the solve would gain at most this share, and it is half of a batch's time (bench/NOTES.md).
NEAR_ENOUGH = 0.002


def place_one(problem: Problem, options: SolveOptions, budget: Budget) -> Placement:
    """One deployment on the state the earlier ones left: the greedy's placement when it meets (or comes
    within NEAR_ENOUGH of) the lower bound, so no model needs building; else the exact solve, or the
    greedy's placement where the solve, stopped at its share, found a costlier one."""
    from placer.solver.greedy import greedy_counted
    from placer.solver.search import _forced_misses, greedy_outcome

    out = None
    first = None  # the greedy as the solve would run it: handed on, so the solve does not run it again
    meta = problem.spec.metadata
    n = problem.replicas
    if problem.kept is None and not problem.pins and not problem.unlike_domains and n >= problem.min_replicas:
        t0 = time.perf_counter()
        bound = None
        # The greedy as the solve runs it, then with replica-level containers tried cheapest-telemetry first.
        for second in (False, True):
            start, work = greedy_counted(_by_telemetry(problem) if second else problem, budget.greedy_units())
            budget.spend_greedy(work)
            if not second:
                first = start
            if len(start) < n:
                continue
            found = greedy_outcome(problem, start)  # container order aside, the variant is the problem
            if found.misses <= _forced_misses(problem, n) and (out is None or found.cost < out.cost):
                out = found  # (another placement may have fewer misses: only the solve can say)
                bound = problem_bound(problem, n) if bound is None else bound
                if out.cost <= bound:
                    break
        if out is not None and bound is not None and out.cost <= bound + NEAR_ENOUGH * out.cost:
            proven = out.cost <= bound
            stats = SolveStats(
                "optimal" if proven else "feasible",
                objective=out.cost,
                bound=bound,
                gap=0.0 if proven else (out.cost - bound) / max(1, out.cost),
                solver="greedy",
                seconds={"greedy": time.perf_counter() - t0},
                notes=[
                    "the greedy placement meets the lower bound (every replica placed, fewest misses)"
                    if proven
                    else f"the greedy placement, within {NEAR_ENOUGH:.1%} of the lower bound"
                ],
            )
            return Placement(meta.name, meta.namespace, problem.topology.name, out.replicas, stats)
    try:
        placement = solve(problem, replace(options, explain=False), budget, first)
    except InfeasibleError as error:
        if out is None or error.proven:
            raise
        placement = None  # nothing found in the share, but the greedy placed every replica
    if placement is not None:
        cost, n_solved = placement.stats.objective, len(placement.replicas)
        # replicas first, then misses (the greedy's are the fewest possible), then cost
        if out is None or cost is None or n_solved > len(out.replicas):
            return placement
        if n_solved == len(out.replicas) and cost <= out.cost:
            return placement
    bound = None if placement is None else placement.stats.bound
    if placement is not None and len(placement.replicas) < len(out.replicas):
        bound = None  # the solve's bound is for fewer replicas
    note = (
        "the greedy placement: the solve found nothing within its share"
        if placement is None
        else "the greedy placement, better than what the solve found within its share"
    )
    stats = SolveStats(
        "feasible",
        objective=out.cost,
        bound=bound,
        gap=None if bound is None else (out.cost - bound) / max(1, out.cost),
        solver="greedy",
        seconds={} if placement is None else placement.stats.seconds,
        notes=[note],
    )
    return Placement(meta.name, meta.namespace, problem.topology.name, out.replicas, stats)


def _by_telemetry(problem: Problem) -> Problem:
    """The problem with each replica-level rule's containers ordered by ``replica_floor``, containers
    without room for a replica last (the greedy tries containers in that order; nothing else reads a
    container's order there). Why not the cheapest single GPU times the replica's GPUs, as before: a rack
    with one cheap GPU free and the rest dear then ranked with a rack of cheap nodes, and the greedy, which
    keeps the best of the first 12 containers that fit, paid for dear GPUs where the optimum had none
    (bench/NOTES.md, session of 2026-11-25)."""
    colocs = []
    for coloc in problem.colocations:
        floor = replica_floor(problem, coloc)
        ranked = sorted(coloc.containers, key=lambda c, floor=floor: (floor(c), c.order))
        rank = {c.domain: i for i, c in enumerate(ranked)}
        colocs.append(replace(coloc, containers=tuple(replace(c, order=rank[c.domain]) for c in coloc.containers)))
    return replace(problem, colocations=colocs)


def replica_floor(problem: Problem, coloc: Colocation) -> Callable[[Container], tuple[int, int]]:
    """Per container, (GPUs short, cost units at least) of one replica's members of ``coloc`` inside it:
    the container's KV units plus the telemetry of the cheapest eligible GPUs free in it, taken in whole
    slots per node (an instance that must sit on one node cannot use a node with fewer free). With none
    short, every placement of a replica there costs at least this much (all-reduce units only add)."""
    topo, tele = problem.topology, problem.telemetry_units
    plans = [problem.pools[p] for p in coloc.pools]
    eligible = frozenset().union(*(p.eligible for p in plans))
    slot = math.gcd(*(p.slot for p in plans))  # what any mix of the members' instances takes from a node
    gpus = sum(p.size * p.instances for p in plans)

    def floor(container: Container) -> tuple[int, int]:
        offers = []
        for n in topo.domains[container.domain].nodes:
            usable = len(topo.nodes[n].free_gpus) // slot * slot if n in eligible else 0
            if usable:
                offers.append((tele[n], usable))
        offers.sort()
        need, units = gpus, container.units
        for price, usable in offers:
            take = min(usable, need)
            units += take * price
            need -= take
            if not need:
                break
        return need, units

    return floor


class Refused:
    """Deployments proven not to fit (and those a repair could not place) while the free room only shrank.
    One of the same shape that asks at least as much (every pool's instances, minReplicas) cannot fit
    either: what fits now would have fitted then. Repairs re-arrange, so a successful one clears the record.
    (Used to skip solves whose answer is known; a repair skipped so is a heuristic's choice.)"""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, int], int, bool]] = []

    @staticmethod
    def _shape(d) -> tuple[str, dict[str, int], int] | None:
        if d.kept is not None:
            return None
        doc = d.spec.model_dump(mode="json", exclude={"metadata", "scheduling", "replicas", "min_replicas"})
        instances = {name: pool.pop("instances") for name, pool in doc["pools"].items()}
        return repr(sorted(doc.items())), instances, d.spec.replicas_floor

    def add(self, d, repaired: bool = False) -> None:
        shape = self._shape(d)
        if shape is not None:
            self.seen.append((*shape, repaired))

    def covers(self, d, repaired: bool) -> bool:
        shape = self._shape(d)
        if shape is None:
            return False
        key, instances, floor = shape
        return any(
            k == key and f <= floor and all(n <= instances[p] for p, n in inst.items())
            for k, inst, f, r in self.seen
            if r == repaired
        )

    def clear(self) -> None:
        self.seen.clear()
