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
from placer.solver.problem import Problem
from placer.topology.graph import Topology

SCARCITY_NOTE = "placed at scarcity prices on wholly free nodes"


def whole_node_demand(later: Sequence[ServingTopology], sizes: set[int]) -> Counter[int]:
    """Wholly free nodes of each GPU count (in ``sizes``) that the later deployments' instances would fill:
    an instance of s GPUs fills s // g nodes of g GPUs (given gpusPerNode: nodeCount nodes of that size).
    An overestimate on clusters of mixed node sizes, where an instance lands on one size only."""
    demand: Counter[int] = Counter()
    for spec in later:
        for pool in spec.pools.values():
            n = pool.instances * spec.replicas
            for g in sizes:
                if pool.gpus_per_node is not None:
                    filled = pool.node_count if pool.gpus_per_node == g else 0
                else:
                    filled = pool.gpus_per_instance // g
                demand[g] += n * (filled or 0)
    return demand


def scarcity_prices(problem: Problem, later: Sequence[ServingTopology]) -> tuple[int, ...] | None:
    """A price per GPU on each wholly free node of ``problem``'s state, in its own telemetry units; None
    when every price is zero. With W nodes of a size wanted and more wholly free, the clearing price is set
    by the (W+1)-th cheapest (by telemetry per GPU); with W or fewer free, every one is wanted, and the
    price puts each just above the dearest GPU still free anywhere, so that a small instance breaks one only
    where nothing else will do (or where its other costs outweigh telemetry)."""
    topo, units = problem.topology, problem.telemetry_units
    whole: dict[int, list[tuple[int, int]]] = {}
    for node in topo.nodes:
        if node.free_gpus and len(node.free_gpus) == len(node.gpus):
            whole.setdefault(len(node.gpus), []).append((units[node.index], node.index))
    demand = whole_node_demand(later, set(whole))
    prices = [0] * len(topo.nodes)
    dearest = max((units[n.index] for n in topo.nodes if n.free_gpus), default=0)
    for g, nodes in whole.items():
        wanted = demand[g]
        if not wanted:
            continue
        nodes.sort()
        clearing = nodes[wanted][0] if wanted < len(nodes) else dearest + 1
        for cost, index in nodes:
            prices[index] = max(0, clearing - cost)
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
    note = f"{SCARCITY_NOTE} ({paid} units of prices taken off its cost)"
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
