"""Many deployments on one cluster: priority tiers first, then cost; every replica still all-or-nothing.

Deployments are placed one after another on the state the earlier ones left, highest priority first, and
inside a priority the running ones (``--keep``) first, then the largest. Each one is solved for itself
(placer.solver.solve, the same staged model as a single spec), so a higher-priority deployment is never
left out or made worse to make room for a lower one: it is placed before the lower one is looked at.

The price of placing one by one is that a deployment may take a place an equal-priority one placed later
needed, or a cheap node another would have used better. Scarcity prices on the wholly free nodes that the
tier's later deployments need (placer.solver.scarcity) steer it away from the commonest case; a joint
repair (_repair) handles a deployment still left out. The result therefore carries a lower bound on the
cost of the placed set, computed for all of them together (fleet_bound), and the gap to it.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import groupby

from placer.model.errors import InfeasibleError, InputError
from placer.model.placement import Placement, SolveStats
from placer.model.spec import ServingTopology
from placer.solver.fleet_bound import fleet_bound
from placer.solver.fleet_one import Refused, place_one
from placer.solver.keep import kept_usage
from placer.solver.options import CLOCK_NOTE, Budget
from placer.solver.problem import Kept, Problem, build_problem, with_kept
from placer.solver.scarcity import at_prices, scarcity_prices, true_cost
from placer.solver.solve import SolveOptions
from placer.topology.graph import Topology
from placer.topology.usage import merge_usage, usage

EXPLAIN_S = 3.0  # most time spent naming the conflict of one deployment left out
SEQUENTIAL_SHARE = 0.7  # of the time left per deployment, the rest kept for repairs and explanations
REPAIR_NEIGHBOURS = 6  # deployments re-arranged with one left out (a joint model of ~7 stays small)
REPAIR_S = 3.0  # most time one repair may take
MIN_REPAIR_S = 0.5


@dataclass(frozen=True)
class Deployment:
    """One spec of a batch; ``source`` names its file for messages, ``kept`` what of it already runs."""

    spec: ServingTopology
    source: str
    kept: Kept | None = None

    @property
    def key(self) -> str:
        return f"{self.spec.metadata.namespace}/{self.spec.metadata.name}"

    @property
    def priority(self) -> int:
        return self.spec.scheduling.priority

    @property
    def gpus(self) -> int:
        return self.spec.replicas_floor * sum(p.gpus_per_instance * p.instances for p in self.spec.pools.values())


@dataclass
class Placed:
    deployment: Deployment
    placement: Placement
    topology: Topology  # the state it was placed on: the cluster less what was placed before it


@dataclass
class Unplaced:
    deployment: Deployment
    reasons: list[str]
    proven: bool  # False: not found in time, impossibility not shown


@dataclass
class FleetResult:
    placed: list[Placed]  # in placement order
    unplaced: list[Unplaced]
    cost: int
    bound: int | None
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def gap(self) -> float | None:
        if self.bound is None:
            return None
        return max(0.0, (self.cost - self.bound) / self.cost) if self.cost else 0.0


def placement_order(deployments: list[Deployment]) -> list[Deployment]:
    """Highest priority first; inside a priority, what already runs, then the most GPUs, then by name."""
    return sorted(deployments, key=lambda d: (-d.priority, d.kept is None, -d.gpus, d.key))


def check_unique(deployments: list[Deployment]) -> None:
    check_unique_keys([(d.key, d.source) for d in deployments])


def check_unique_keys(keys: list[tuple[str, str]]) -> None:
    """(namespace/name, where it was given) pairs: a name given twice is bad input (objects would collide)."""
    seen: dict[str, str] = {}
    for key, source in keys:
        if key in seen:
            where = "given twice (the same file twice?)" if seen[key] == source else f"also given in {seen[key]}"
            raise InputError(f"{source}: deployment {key} is {where}: names must be unique per namespace")
        seen[key] = source


def solve_fleet(
    deployments: list[Deployment],
    topology: Topology,
    options: SolveOptions,
    progress: Callable[[str], None] = lambda _m: None,
) -> FleetResult:
    """Place every deployment that fits: priority tier by tier, each deployment on what the earlier ones
    left, then a joint repair for the ones of the tier left out (_repair), before the next tier is looked at."""
    check_unique(deployments)
    t0 = time.perf_counter()
    budget = Budget.of(options)  # work, not wall time: the same batch gives the same answer on any machine
    order = placement_order(deployments)
    # What runs is taken for everyone but its owner (_own_state gives the owner its pods back).
    running = [kept_usage(d.spec, d.kept, topology) for d in deployments if d.kept is not None]
    state = topology.with_usage(*merge_usage(running)) if running else topology
    placed: list[Placed] = []
    failed: list[tuple[Deployment, InfeasibleError, Topology]] = []
    notes: list[str] = []
    looked = 0
    refused = Refused()
    for _priority, group in groupby(order, key=lambda d: d.priority):
        tier, tier_start = list(group), state
        tier_placed: list[Placed] = []
        tier_failed: list[tuple[Deployment, InfeasibleError]] = []
        for i, d in enumerate(tier):
            # Keep a share of the time for repairs and explanations.
            share = max(0.1, SEQUENTIAL_SHARE * budget.work_left / (len(order) - looked))
            mine = _own_state(d, state)
            try:
                if refused.covers(d, repaired=False):  # a smaller one of its shape did not fit on more room
                    raise InfeasibleError("no placement satisfies every hard constraint", proven=True)
                placement = _place(d, mine, [x.spec for x in tier[i + 1 :]], options, budget.child(share))
            except InfeasibleError as error:
                tier_failed.append((d, error))
                if error.proven:
                    refused.add(d)
            else:
                tier_placed.append(Placed(d, placement, mine))
                state = mine.with_usage(*usage(d.spec, mine, placement))
            looked += 1
            if looked % 10 == 0 or looked == len(order):
                progress(f"  {looked}/{len(order)} deployments looked at, {len(placed) + len(tier_placed)} placed")
        for d, why in list(tier_failed):
            seconds = min(REPAIR_S, budget.work_left / 2)
            if seconds < MIN_REPAIR_S or not why.proven or refused.covers(d, repaired=True):
                continue
            repaired = _repair(d, tier_placed, tier_start, state, options, budget.child(seconds))
            if repaired is None:
                refused.add(d, repaired=True)
            else:
                refused.clear()  # the tier was re-arranged: room is no longer only shrinking
                moved = len(repaired) - 1
                notes.append(f"{d.key}: placed by re-arranging {moved} deployment(s) of its priority with it")
                tier_placed = [p for p in tier_placed if p.deployment.key not in {r.deployment.key for r in repaired}]
                tier_placed += repaired
                tier_failed.remove((d, why))
                state = _state_after(tier_start, tier_placed)  # the repaired group moved
        placed += tier_placed
        failed += [(d, why, state) for d, why in tier_failed]
    unplaced = []
    for i, (d, why, at) in enumerate(failed):
        seconds = min(EXPLAIN_S, max(0.2, budget.work_left / (len(failed) - i)))
        holders = [p for p in placed if p.deployment.priority >= d.priority]
        share = Budget(seconds, budget.wall_left(), parent=budget)  # at least 0.2 s, even past the budget
        unplaced.append(Unplaced(d, _reasons(d, at, why, holders, topology, share), why.proven))
    if budget.clock_cut:
        notes.append(CLOCK_NOTE)
    first = placed[0] if placed else None
    # The first one placed saw the whole cluster, so its proven optimum bounds its own share exactly (not a
    # kept one's: that optimum is with its pins, not "however arranged").
    exact = (
        first.placement.stats.objective
        if first is not None
        and first.deployment.kept is None
        and first.topology is topology
        and first.placement.stats.status == "optimal"
        else None
    )
    bound = fleet_bound([(p.deployment.spec, p.placement) for p in placed], topology, exact_first=exact)
    if len(placed) == 1 and bound is not None and placed[0].placement.stats.bound is not None:
        # One deployment (a --keep re-solve, a scale-out): its own solve's bound holds for its own problem,
        # pins included, and is tighter than fleet_bound's, which frees what runs.
        bound = max(bound, placed[0].placement.stats.bound)
    cost = sum(p.placement.stats.objective or 0 for p in placed)
    return FleetResult(placed, unplaced, cost, bound, time.perf_counter() - t0, notes)


def _repair(
    d: Deployment,
    tier_placed: list[Placed],
    tier_start: Topology,
    now: Topology,
    options: SolveOptions,
    budget: Budget,
) -> list[Placed] | None:
    """Place ``d`` together with the deployments of its own priority in its way (_blockers), all
    re-arranged in one joint model on what the rest left; they keep their replica counts. The tier's placed
    count comes before its cost, so a higher cost for them is the right trade. The new placements of the
    group, or None."""
    from ortools.sat.python import cp_model

    from placer.solver.cpsat.model import PlacementModel, post_capacity
    from placer.solver.decode import Part, decode_joint
    from placer.solver.options import run_stage

    group = _blockers(d, tier_placed, tier_start, now)
    if not group:
        return None
    residual = _state_after(tier_start, [p for p in tier_placed if p not in group])
    if not _fits_alone(d, residual, options, budget.child(budget.work_left / 3)):
        return None  # it does not fit even with the whole group gone: no re-arrangement of it can help
    members = [*[p.deployment for p in group], d]
    # The group's own running pods are theirs to keep (pinned in their models), so free for the joint model.
    running = [kept_usage(m.spec, m.kept, residual) for m in members if m.kept is not None]
    topo = residual.with_released(*merge_usage(running)) if running else residual
    try:
        problems = [_fixed_replicas(_problem(p.deployment, topo), len(p.placement.replicas)) for p in group]
        problems.append(_problem(d, topo))
        model = cp_model.CpModel()
        pms = [PlacementModel(pb, model=model, joint=True, peers=problems) for pb in problems]
    except InfeasibleError:
        return None
    post_capacity(model, topo, [pm.capacity for pm in pms])
    # As for one spec: as many of d's replicas as fit, then fewest misses, then least cost.
    stages = [
        (-1, cp_model.LinearExpr.sum(list(pms[-1].vars.placed))),
        (1, cp_model.LinearExpr.sum([pm.misses_expr() for pm in pms])),
        (1, cp_model.LinearExpr.sum([pm.cost_expr() for pm in pms])),
    ]
    solver = None
    for sign, expr in stages:
        model.clear_objective()
        model.minimize(sign * expr)
        found, _ = run_stage(model, options, budget)
        if found is None:
            break
        solver = found
        value = int(round(solver.value(expr)))
        model.add(expr >= value) if sign < 0 else model.add(expr <= value)
        model.clear_hints()
        for pm in pms:
            for var in pm.all_vars():
                model.add_hint(var, solver.value(var))
    if solver is None:
        return None
    parts = [
        Part(pb, pm, sum(int(solver.value(x)) for x in pm.vars.placed), pb.kept.instances if pb.kept else {})
        for pb, pm in zip(problems, pms, strict=True)
    ]
    out = []
    for part, replicas, dep in zip(parts, decode_joint(parts, solver), members, strict=True):
        spec = dep.spec
        stats = SolveStats(
            "feasible",
            objective=int(solver.value(part.pm.cost_expr())),  # type: ignore[attr-defined]
            notes=["placed jointly with others of its priority"],
        )
        pl = Placement(spec.metadata.name, spec.metadata.namespace, tier_start.name, replicas, stats)
        out.append(Placed(dep, pl, topo))
    return out


def _fits_alone(d: Deployment, room: Topology, options: SolveOptions, budget: Budget) -> bool:
    """False only when ``d`` is proven not to fit on ``room`` by itself: a joint model that must also
    place others there cannot place it either. The greedy answers most cases at once; else one model with
    no objective, which stops at the first placement of minReplicas (nothing is optimised here)."""
    from ortools.sat.python import cp_model

    from placer.solver.cpsat.model import PlacementModel
    from placer.solver.greedy import greedy_counted
    from placer.solver.options import run_stage

    try:
        problem = _problem(d, _own_state(d, room))
    except InfeasibleError:
        return False
    if problem.kept is None:  # the greedy knows nothing of running instances
        start, work = greedy_counted(problem, budget.greedy_units())
        budget.spend_greedy(work)
        if len(start) >= problem.min_replicas:
            return True
    try:
        pm = PlacementModel(problem)
    except InfeasibleError as error:  # a running instance that cannot stay where it is
        return not error.proven
    budget.spend_build(pm.model)
    found, status = run_stage(pm.model, replace(options, explain=False), budget)
    return found is not None or status != cp_model.INFEASIBLE


def _blockers(d: Deployment, tier_placed: list[Placed], tier_start: Topology, now: Topology) -> list[Placed]:
    """The fewest deployments of the tier whose GPUs, if they moved, would leave one of ``d``'s possible
    homes with room: a container of its widest replica-level rule with room for those pools of a replica,
    else a candidate of its largest pool with room for one instance. The home with the smallest such set
    wins, ties to fewer GPUs moved, then canonical order."""
    try:
        problem = _problem(d, tier_start)
    except InfeasibleError:
        return []
    widest = max(problem.colocations, key=lambda c: len(c.pools), default=None)
    if widest is not None:  # a replica's members share one container
        need = sum(problem.pools[p].size * problem.pools[p].instances for p in widest.pools)
        homes = [c.domain for c in widest.containers]
    else:  # no shared container: make room for one instance of the largest pool
        pool = max(problem.pools.values(), key=lambda p: (p.size, p.name))
        need = pool.size
        homes = [c.domain for c in pool.candidates]
    by_node: dict[int, list[tuple[int, Placed]]] = defaultdict(list)
    for p in tier_placed:
        for r in p.placement.replicas:
            for i in r.instances:
                for pod in i.pods:
                    by_node[now.node_by_name(pod.node).index].append((len(pod.gpus), p))
    best: tuple | None = None
    for home in homes:
        nodes = now.domains[home].nodes
        deficit = need - sum(len(now.nodes[n].free_gpus) for n in nodes)
        if deficit <= 0:
            continue  # room already; the rules, not the GPUs, are what fail here
        held: dict[str, tuple[int, Placed]] = {}
        for n in nodes:
            for gpus, p in by_node.get(n, []):
                held[p.deployment.key] = (held.get(p.deployment.key, (0, p))[0] + gpus, p)
        chosen: list[Placed] = []
        freed = 0
        for gpus, p in sorted(held.values(), key=lambda x: (-x[0], x[1].deployment.key)):
            if freed >= deficit or len(chosen) == REPAIR_NEIGHBOURS:
                break
            chosen.append(p)
            freed += gpus
        if freed < deficit:
            continue
        score = (len(chosen), freed, now.order[home])
        if best is None or score < best[0]:
            best = (score, chosen)
    return [] if best is None else best[1]


def _state_after(start: Topology, placed: list[Placed]) -> Topology:
    state = start
    for p in placed:
        mine = _own_state(p.deployment, state)
        state = mine.with_usage(*usage(p.deployment.spec, mine, p.placement))
    return state


def _place(
    d: Deployment, state: Topology, later: list[ServingTopology], options: SolveOptions, budget: Budget
) -> Placement:
    """One deployment of a tier, at scarcity prices on the wholly free nodes its tier's later deployments
    will need (placer.solver.scarcity); what already runs is placed at its true cost."""
    problem = _problem(d, state)
    prices = scarcity_prices(problem, later) if d.kept is None else None
    if prices is None:
        return place_one(problem, options, budget)
    return true_cost(place_one(at_prices(problem, prices), options, budget), state, prices)


def _own_state(d: Deployment, state: Topology) -> Topology:
    """The state as ``d`` sees it: its own running pods' GPUs, CPU and memory given back to it."""
    return state if d.kept is None else state.with_released(*kept_usage(d.spec, d.kept, state))


def _fixed_replicas(problem: Problem, n: int) -> Problem:
    return replace(problem, replicas=n, min_replicas=n)


def _problem(d: Deployment, state: Topology) -> Problem:
    problem = build_problem(d.spec, state)
    return problem if d.kept is None else with_kept(problem, d.kept)


def _reasons(
    d: Deployment, state: Topology, exc: InfeasibleError, holders: list[Placed], topology: Topology, share: Budget
) -> list[str]:
    """Why a deployment was left out: the rules that cannot all hold on what is free once the deployments
    of its priority or higher hold their GPUs (placer.solver.conflicts, within ``share`` of the batch's
    budget: its work is charged there, and the batch's wall-clock guard ends it), and what those hold."""
    from placer.solver.conflicts import explain_infeasible

    if not exc.proven:
        return [f"{exc} (within its share of the time limit)"]
    try:
        problem = _problem(d, _own_state(d, state))
    except InfeasibleError as inner:
        return [str(inner), *inner.reasons]
    if d.kept is not None and "cannot be kept" in str(exc):
        reasons = [str(exc)]
    else:
        reasons = [str(c) for c in explain_infeasible(problem, seconds=share.work_left, within=share)]
        if d.kept is not None:
            n = len(d.kept.instances)
            asked = d.spec.replicas_floor * sum(p.instances for p in d.spec.pools.values())
            reasons.insert(
                0,
                f"its {n} running instance(s) stay where they are; what it adds does not fit"
                if n < asked
                else f"its {n} running instance(s) are all it asks for, and where they run they no longer keep the "
                "spec as it is now (its requests or rules changed)",
            )
    if holders:
        mine = _own_state(d, state)
        held = sum(len(n.free_gpus) for n in topology.nodes) - sum(len(n.free_gpus) for n in mine.nodes)
        reasons.append(
            f"on what is left beside the {len(holders)} deployment(s) of its priority or higher, which hold {held} GPUs"
        )
    return reasons or [str(exc)]
