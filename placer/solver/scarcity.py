"""Scarcity prices on wholly free nodes, for a batch placed one deployment after another.

Why: a batch places the deployments of a priority tier one after another (placer.solver.fleet). A small
instance (TP2, TP4) then takes a wholly free node as readily as a partly used one of the same cost, and
the TP8 and TP16 instances of the tier's later deployments, which need whole nodes, find only costlier
ones, or none, and are left out (bench/NOTES.md, "Fleet"). Each wholly free node that the rest of the
tier will need gets a price per GPU: the market-clearing price of a good in short supply, what the first
node they will *not* need costs per GPU, less what this node costs. Breaking such a node then costs a
deployment what it will cost the tier later; where wholly free nodes are plentiful every price is zero
and nothing changes. The prices steer only the solve: the placement's reported cost is its true cost
(``true_cost``), and the solver's "optimal" becomes "feasible" (it is optimal at the prices, not alone).

Only the same tier's later deployments count: a deployment never pays for a lower priority's room.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from placer.model.placement import Placement
from placer.model.spec import ServingTopology
from placer.solver.problem import Problem, node_matches
from placer.topology.graph import Topology

SCARCITY_NOTE = "placed at scarcity prices on wholly free nodes"


Selector = tuple[str | None, float | None]  # a pool's GPU selector: (product, minMemoryGiB)


def whole_node_demand(later: Sequence[ServingTopology], sizes: set[int]) -> Counter[tuple[int, Selector]]:
    """Wholly free nodes of each GPU count (in ``sizes``) that the later deployments' instances would fill,
    per GPU selector (a TP8 that asks for H100s does not want a whole A100 node): an instance of s GPUs
    fills s // g nodes of g GPUs (given gpusPerNode: nodeCount nodes of that size). An overestimate where
    an instance could take one of several node sizes, or split across nodes (placement.required above node)."""
    demand: Counter[tuple[int, Selector]] = Counter()
    for spec in later:
        for pool in spec.pools.values():
            n = pool.instances * spec.replicas
            for g in sizes:
                if pool.gpus_per_node is not None:
                    filled = pool.node_count if pool.gpus_per_node == g else 0
                else:
                    filled = pool.gpus_per_instance // g
                if filled:
                    demand[g, (pool.gpu.product, pool.gpu.min_memory_gib)] += n * filled
    return demand


def scarcity_prices(problem: Problem, later: Sequence[ServingTopology]) -> tuple[int, ...] | None:
    """A price per GPU on each wholly free node of ``problem``'s state, in its own telemetry units; None
    when every price is zero. For each node size and GPU selector the later deployments ask for: with W
    nodes wanted and more wholly free that match, the clearing price is set by the (W+1)-th cheapest (by
    telemetry per GPU); with W or fewer, every one is wanted, and the price puts each just above the
    dearest GPU still free anywhere, so that a small instance breaks one only where nothing else will do
    (or where its other costs outweigh telemetry). Selectors that match the same nodes add up their demand;
    a node wanted under selectors that match different sets of nodes takes the highest price."""
    topo, units = problem.topology, problem.telemetry_units
    whole = [n for n in topo.nodes if n.free_gpus and len(n.free_gpus) == len(n.gpus)]
    demand = whole_node_demand(later, {len(n.gpus) for n in whole})
    prices = [0] * len(topo.nodes)
    dearest = max((units[n.index] for n in topo.nodes if n.free_gpus), default=0)
    wanted_of: Counter[tuple[tuple[int, int], ...]] = Counter()
    for (g, (product, memory)), wanted in demand.items():
        matching = [n for n in whole if len(n.gpus) == g and node_matches(n, product, memory)]
        wanted_of[tuple(sorted((units[n.index], n.index) for n in matching))] += wanted
    for nodes, wanted in sorted(wanted_of.items()):
        clearing = nodes[wanted][0] if wanted < len(nodes) else dearest + 1
        for cost, index in nodes:
            prices[index] = max(prices[index], clearing - cost)
    return tuple(prices) if any(prices) else None


def at_prices(problem: Problem, prices: tuple[int, ...]) -> Problem:
    """The problem with each node's telemetry per GPU raised by its price."""
    raised = tuple(u + p for u, p in zip(problem.telemetry_units, prices, strict=True))
    return replace(problem, telemetry_units=raised)


def true_cost(placement: Placement, topo: Topology, prices: tuple[int, ...]) -> Placement:
    """A placement solved at prices, with the prices taken off its cost. Its bound was at the prices too,
    so it is dropped, and 'optimal' (at the prices) becomes 'feasible'."""
    paid = sum(
        prices[topo.node_by_name(pod.node).index] * len(pod.gpus)
        for rep in placement.replicas
        for inst in rep.instances
        for pod in inst.pods
    )
    stats = placement.stats
    # 'feasible' either way: optimal at the prices, but a placement on priced nodes may truly cost less
    taken = f"{paid} units of prices taken off its cost" if paid else "it uses none of the priced nodes"
    note = f"{SCARCITY_NOTE} ({taken})"
    return replace(
        placement,
        stats=replace(
            stats,
            status="feasible" if stats.status == "optimal" else stats.status,
            objective=None if stats.objective is None else stats.objective - paid,
            bound=None,
            gap=None,
            notes=[*stats.notes, note],
        ),
    )
