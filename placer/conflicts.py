"""Why nothing fits: name the smallest set of rules that cannot hold together, in operators' words.

Phase 1 checks each rule on its own against the cluster (a pool's packing level, its GPU count, the
transfer floor, the router rule); a rule that fails alone is a conflict by itself and is reported with the
numbers (subject -> count -> limit). Phase 2, when every rule fits alone, runs a deletion filter over the
relaxable rules (transfer floor, router proximity, spread, minReplicas): drop a rule, re-solve; if still
infeasible the rule was not needed for the conflict. What remains is a minimal conflicting set.
"""

from __future__ import annotations

from placer.levels import LEVEL_WORDS
from placer.problem import Problem


def _largest_block(problem: Problem, pool: str, level: str) -> tuple[int, str]:
    """Most free matching GPUs inside any one domain of ``level`` (or narrower, after merging)."""
    from placer.levels import LEVEL_RANK

    topo = problem.topology
    plan = problem.pools[pool]
    best, where = 0, "-"
    for dom in topo.domains.values():
        if LEVEL_RANK[dom.level] > LEVEL_RANK[level]:
            continue
        if dom.level == "socket":
            continue
        free = sum(len(topo.nodes[n].free_gpus) for n in dom.nodes if n in plan.eligible)
        if free > best:
            best, where = free, dom.id
    return best, where


def single_rule_conflicts(problem: Problem) -> list[str]:
    topo = problem.topology
    reasons = []
    total_need = 0
    for name, plan in sorted(problem.pools.items()):
        free = sum(len(topo.nodes[n].free_gpus) for n in plan.eligible)
        total_need += plan.size * plan.instances * problem.min_replicas
        if not plan.eligible:
            product, memory = plan.selector
            reasons.append(
                f"{name}: no schedulable node has GPUs matching product={product!r}, "
                f"minMemoryGiB={memory}. Relax: change pools.{name}.gpu."
            )
            continue
        if not plan.candidates:
            block, where = _largest_block(problem, name, plan.required)
            shape = (
                f"{plan.node_count} nodes with {plan.gpus_per_node} free GPUs each"
                if plan.multi_node
                else f"{plan.size} GPUs"
            )
            reasons.append(
                f"{name} needs {shape} inside {LEVEL_WORDS[plan.required]} per instance; "
                f"the largest free block in any such domain is {block} GPUs ({where}). "
                f"Relax: allow a broader placement.required level, or free GPUs in {where}."
            )
        need = plan.size * plan.instances * problem.min_replicas
        if need > free:
            reasons.append(
                f"{name} needs {need} GPUs for {problem.min_replicas} replica(s); only {free} matching GPUs are free "
                f"in the whole cluster. Relax: lower minReplicas or instances, or free {need - free} GPUs."
            )
    union = frozenset().union(*(plan.eligible for plan in problem.pools.values()))
    free_any = sum(len(topo.nodes[n].free_gpus) for n in union)
    if len(problem.pools) > 1 and total_need > free_any:
        reasons.append(
            f"{problem.min_replicas} replica(s) need {total_need} GPUs across all pools; only {free_any} matching "
            f"GPUs are free. Relax: lower minReplicas or instances, or free {total_need - free_any} GPUs."
        )
    for coloc in problem.colocations:
        if not coloc.containers:
            need = sum(problem.pools[p].size * problem.pools[p].instances for p in coloc.pools)
            reasons.append(
                f"{coloc.rule}: no single domain has the {need} free GPUs that requires. "
                + _relax_hint(problem, coloc.name)
            )
    if problem.has_router and not problem.router_nodes:
        reasons.append(
            f"the router needs {problem.router_cpu_m}m CPU and {problem.router_memory_bytes} bytes of "
            "memory on one node; no node has that much free"
        )
    return reasons


def _relax_hint(problem: Problem, name: str) -> str:
    if name == "transfer":
        t = problem.spec.transfer
        if t is not None and t.min_bandwidth_gbps:
            best = _best_bandwidth_anywhere(problem)
            if best <= 0:
                return "Relax: free GPUs so that one domain can hold a whole replica's pools."
            return (
                f"Relax: lower transfer.minBandwidthGBps to {best:g} (what the best domain with room offers), "
                "or free GPUs in one domain."
            )
        return "Relax: allow a broader transfer.maxLevel."
    return "Relax: a broader router.near.level."


def _best_bandwidth_anywhere(problem: Problem) -> float:
    """KV bandwidth of the narrowest domain that could hold a whole replica's prefill and decode."""
    from placer import cost
    from placer.problem import worst_figures

    topo = problem.topology
    pair = problem.transfer_pair
    assert pair is not None
    src, dst = problem.pools[pair[0]], problem.pools[pair[1]]
    need = src.size * src.instances + dst.size * dst.instances
    best = 0.0
    memo: dict = {}
    for dom in topo.domains.values():
        nodes = [n for n in dom.nodes if n in src.eligible | dst.eligible]
        if dom.level in ("node", "socket") or sum(len(topo.nodes[n].free_gpus) for n in nodes) < need:
            continue
        routes = [worst_figures(topo, a, nodes, memo) for a in topo.ancestors(dom.id)]
        route = cost.best_kv_route(routes, src.size, dst.size, topo.rails_per_node)
        best = max(best, cost.kv_bandwidth_gbps(route, src.size, dst.size, topo.rails_per_node))
    return best


def explain_infeasible(problem: Problem) -> list[str]:
    reasons = single_rule_conflicts(problem)
    if reasons:
        return reasons
    return deletion_filter(problem)


def _relaxed(problem: Problem, drop: set[str]) -> Problem:
    from placer.problem import build_problem

    spec = problem.spec
    update: dict = {}
    if "transfer floor" in drop and spec.transfer is not None:
        update["transfer"] = spec.transfer.model_copy(update={"min_bandwidth_gbps": None, "max_level": None})
    if "router proximity" in drop and spec.router is not None:
        update["router"] = spec.router.model_copy(update={"near": None})
    if "replica spread" in drop:
        update["spread"] = None
    if "minReplicas" in drop:
        update["min_replicas"] = min(1, spec.replicas_floor)
    return build_problem(spec.model_copy(update=update), problem.topology)


def _feasible(problem: Problem) -> bool:
    from ortools.sat.python import cp_model

    from placer.cpsat.model import PlacementModel

    pm = PlacementModel(problem)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 10
    solver.parameters.num_workers = 2
    solver.parameters.cp_model_probing_level = 0
    return solver.solve(pm.model) in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def _present(problem: Problem) -> list[str]:
    spec = problem.spec
    out = []
    if spec.transfer is not None and (spec.transfer.min_bandwidth_gbps or spec.transfer.max_level):
        out.append("transfer floor")
    if spec.router is not None and spec.router.near is not None:
        out.append("router proximity")
    if spec.spread is not None:
        out.append("replica spread")
    if spec.replicas_floor > 1:
        out.append("minReplicas")
    return out


def deletion_filter(problem: Problem) -> list[str]:
    """Keep only the relaxable rules needed for infeasibility (a deletion filter: drop each rule in turn and
    keep it dropped when the rest is still infeasible)."""
    present = _present(problem)
    if _feasible(_relaxed(problem, set(present))) is False:
        return [
            "the pools' GPU needs cannot be packed together on the free GPUs at their required levels "
            "(each pool fits on its own, but not all of them at once)"
        ]
    needed = list(present)
    for rule in present:
        keep = [r for r in needed if r != rule]
        if not _feasible(_relaxed(problem, set(present) - set(keep))):
            needed = keep
    return [_describe(problem, rule) for rule in needed] + [
        "these rules cannot all hold together; dropping any one of them makes a placement possible"
    ]


def _describe(problem: Problem, rule: str) -> str:
    spec = problem.spec
    if rule == "transfer floor":
        return next(c.rule for c in problem.colocations if c.name == "transfer")
    if rule == "router proximity":
        return next(c.rule for c in problem.colocations if c.name == "router")
    if rule == "replica spread":
        assert spec.spread is not None
        return f"{spec.replicas_floor} replicas each in a different {spec.spread.level}"
    return f"minReplicas {spec.replicas_floor}"
