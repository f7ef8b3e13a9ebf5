"""Many deployments on one cluster: priority tiers first, then cost; every replica still all-or-nothing.

Deployments are placed one after another on the state the earlier ones left, highest priority first, and
inside a priority the running ones (``--keep``) first, then the largest. Each one is solved exactly for
itself (placer.solve, the same staged model as a single spec), so a higher-priority deployment is never
left out or made worse to make room for a lower one: it is placed before the lower one is looked at.

The price of placing one by one is that a deployment may take a place an equal-priority one placed later
needed, or a cheap node another would have used better. The result therefore carries a lower bound on the
cost of the placed set, computed for all of them together (fleet_bound), and the gap to it.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from placer.errors import InfeasibleError, InputError
from placer.placement import Placement
from placer.problem import Kept, Problem, build_problem, with_kept
from placer.solve import SolveOptions, solve
from placer.spec import ServingTopology
from placer.topology import Topology


EXPLAIN_S = 3.0  # most time spent naming the conflict of one deployment left out


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
    seen: dict[str, str] = {}
    for d in deployments:
        if d.key in seen:
            raise InputError(
                f"{d.source}: deployment {d.key} is also given in {seen[d.key]}: names must be unique per namespace"
            )
        seen[d.key] = d.source


def solve_fleet(
    deployments: list[Deployment],
    topology: Topology,
    options: SolveOptions,
    progress: Callable[[str], None] = lambda _m: None,
) -> FleetResult:
    """Place every deployment that fits, in placement_order, each on what the earlier ones left."""
    check_unique(deployments)
    t0 = time.perf_counter()
    deadline = t0 + options.time_limit_s
    state = topology
    placed: list[Placed] = []
    unplaced: list[Unplaced] = []
    order = placement_order(deployments)
    for i, d in enumerate(order):
        left = len(order) - i
        share = max(0.1, (deadline - time.perf_counter()) / left)
        try:
            problem = _problem(d, state)
            placement = solve(problem, replace(options, time_limit_s=share, explain=False))
        except InfeasibleError as exc:
            budget = min(EXPLAIN_S, max(0.2, (deadline - time.perf_counter()) / (2 * left)))
            unplaced.append(Unplaced(d, _reasons(d, state, exc, placed, budget), exc.proven))
        else:
            placed.append(Placed(d, placement, state))
            state = state.with_usage(*usage(d.spec, state, placement))
        if (i + 1) % 10 == 0 or i + 1 == len(order):
            progress(f"  {i + 1}/{len(order)} deployments looked at, {len(placed)} placed")
    pairs = [(p.deployment.spec, p.placement) for p in placed]
    bound = fleet_bound(pairs, topology)
    first = placed[0] if placed else None
    if first is not None and first.topology is topology and first.placement.stats.status == "optimal":
        # The first one placed saw the whole cluster, so its proven optimum bounds its own share exactly.
        rest = fleet_bound(pairs[1:], topology)
        if rest is not None:
            bound = max(bound or 0, (first.placement.stats.objective or 0) + rest)
    return FleetResult(placed, unplaced, sum(p.placement.stats.objective or 0 for p in placed), bound,
                       time.perf_counter() - t0)


def _problem(d: Deployment, state: Topology) -> Problem:
    problem = build_problem(d.spec, state)
    return problem if d.kept is None else with_kept(problem, d.kept)


def usage(
    spec: ServingTopology, topo: Topology, placement: Placement
) -> tuple[dict[int, list[int]], dict[int, int], dict[int, int]]:
    """GPUs, CPU and memory a placement takes, by node index: what the next deployment must leave alone."""
    from placer import k8s

    gpus: dict[int, list[int]] = defaultdict(list)
    cpu: dict[int, int] = defaultdict(int)
    mem: dict[int, int] = defaultdict(int)
    for rep in placement.replicas:
        for inst in rep.instances:
            reqs = spec.pools[inst.pool].template.resources.requests
            for pod in inst.pods:
                n = topo.node_by_name(pod.node).index
                gpus[n] += pod.gpus
                cpu[n] += k8s.millicores(reqs.get("cpu", "0"))
                mem[n] += k8s.bytes_of(reqs.get("memory", "0"))
        if rep.router is not None and spec.router is not None:
            n = topo.node_by_name(rep.router).index
            cpu[n] += k8s.millicores(spec.router.cpu)
            mem[n] += k8s.bytes_of(spec.router.memory)
    return gpus, cpu, mem


def _reasons(d: Deployment, state: Topology, exc: InfeasibleError, placed: list[Placed], seconds: float) -> list[str]:
    """Why a deployment was left out: the rules that cannot all hold on what is free once the deployments
    placed before it hold their GPUs (placer.conflicts, within ``seconds``), and what those hold."""
    from placer.conflicts import explain_infeasible

    if not exc.proven:
        return [f"{exc} (within its share of the time limit)"]
    try:
        problem = _problem(d, state)
    except InfeasibleError as inner:
        return [str(inner), *inner.reasons]
    reasons = [str(c) for c in explain_infeasible(problem, seconds=seconds)] if d.kept is None else [str(exc)]
    if placed:
        held = sum(len(n.free_gpus) for n in placed[0].topology.nodes) - sum(len(n.free_gpus) for n in state.nodes)
        reasons.append(
            f"on the GPUs left by the {len(placed)} deployment(s) placed before it (higher priority, or larger at "
            f"equal priority), which hold {held} GPUs"
        )
    return reasons or [str(exc)]


def fleet_bound(placed: list[tuple[ServingTopology, Placement]], topology: Topology) -> int | None:
    """A lower bound on the cost of placing the same replicas all together, however arranged.

    Cost is all-reduce per instance + KV transfer per replica + telemetry per GPU. The first two are at
    least each instance's cheapest candidate and each replica's cheapest container (on the cluster before
    any of them). Where a deployment has more preferred-level misses than it must, its instances are bounded
    by their cheapest candidate at any level (cost is minimised after misses, so a cheaper arrangement
    could have more). Telemetry: see _telemetry_bound."""
    from placer.solve import _forced_misses

    structural = 0
    demand: dict[tuple, list[tuple[int, int]]] = defaultdict(list)  # group -> (slot size, GPUs)
    tele_of: dict[tuple, list[int]] = {}
    for spec, placement in placed:
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
        fewest = misses <= _forced_misses(problem, n)
        for plan in problem.pools.values():
            meets = [c.units for c in plan.candidates if not c.preferred_miss]
            units = meets if fewest and meets else [c.units for c in plan.candidates]
            structural += n * plan.instances * min(units, default=0)
            group = (spec.objective.queue_depth, spec.objective.cache_miss, plan.eligible)
            demand[group].append((_slot(plan), n * plan.instances * plan.size))
            tele_of[group] = problem.telemetry_units
        for coloc in problem.colocations:
            structural += n * min((c.units for c in coloc.containers), default=0)
    telemetry = sum(_telemetry_bound(topology, group[2], tele_of[group], slots) for group, slots in demand.items())
    return structural + telemetry


def _slot(plan) -> int:
    """The fewest GPUs one node must have free to hold part of an instance of this pool: the whole
    instance when it may only sit on one node, gpusPerNode for multi-node, 1 when it may span."""
    if plan.multi_node:
        return plan.gpus_per_node or 1
    if all(c.kind == "unit" for c in plan.candidates):
        return plan.size
    return 1


def _telemetry_bound(topology: Topology, eligible: frozenset[int], tele: list[int], slots: list[tuple[int, int]]) -> int:
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
