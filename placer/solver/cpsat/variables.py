"""The decision variables, created only where the cost or feasibility changes.

No boolean per (GPU, instance): GPUs of a node are interchangeable, so an instance that fits on one node
gets one variable per candidate node (or socket); an instance that may span nodes gets one per candidate
domain and draws from that domain's pool, through one integer per (GPU selector, node) shared by all
spanning instances. Instances of one pool in one replica are interchangeable too, so they are counted,
not told apart: one integer per (replica, pool, candidate) — how many of the pool's instances go there —
under the key (replica, pool, 0). Only multi-node instances with a fixed GPUs-per-node are kept one by one
(their per-node booleans say which nodes each one takes). Under a spread rule, a spanning candidate broader
than the spread level also counts its GPUs per spread-level group (cpsat.draws).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from placer.solver.cpsat.draws import Draws, create_draws
from placer.solver.cpsat.pods import Span, create_span
from placer.solver.figures import free_in
from placer.solver.problem import Problem

InstanceKey = tuple[int, str, int]  # (replica, pool, instance)


@dataclass
class Variables:
    placed: list[cp_model.IntVar]
    choice: dict[InstanceKey, dict[int, cp_model.IntVar]]  # candidate index -> instances placed there
    copies: dict[InstanceKey, int]  # instances a key stands for: the pool's count, or 1 (multi-node)
    node_of: dict[InstanceKey, dict[int, cp_model.IntVar]]  # multi-node: node index -> literal
    pooled: dict[tuple[tuple, int], cp_model.IntVar]  # (selector, node) -> GPUs drawn by spanning instances
    container: dict[tuple[int, str], dict[int, cp_model.IntVar]]  # (replica, colocation) -> container -> lit
    router: dict[int, dict[int, cp_model.IntVar]]  # replica -> node -> literal
    spread: dict[tuple[int, str], cp_model.IntVar] = field(default_factory=dict)
    span: Span = field(default_factory=Span)  # spanning instances' pods on tight nodes (cpsat.pods)
    draws: Draws = field(default_factory=Draws)  # spanning GPUs per spread-level group (cpsat.draws)


def allowed_candidates(problem: Problem, pool: str) -> list[int]:
    """Candidates inside some container of every colocation the pool belongs to. (Spread does not narrow
    them: a candidate broader than the spread level carries the rule through its node literals or groups.)"""
    plan = problem.pools[pool]
    anc = problem.topology.ancestors
    out = []
    for ci, cand in enumerate(plan.candidates):
        ups = set(anc(cand.domain))
        if any(pool in c.pools and not any(k.domain in ups for k in c.containers) for c in problem.colocations):
            continue
        out.append(ci)
    return out


def create_variables(model: cp_model.CpModel, problem: Problem, tight: frozenset[int] = frozenset()) -> Variables:
    topo = problem.topology
    placed = [model.new_bool_var(f"placed[{k}]") for k in range(problem.replicas)]
    choice: dict = {}
    copies: dict = {}
    node_of: dict = {}
    rooms: dict = {}
    for name, plan in problem.pools.items():
        allowed = allowed_candidates(problem, name)
        keys = range(plan.instances) if plan.multi_node else range(1)
        m = 1 if plan.multi_node else plan.instances
        room = {ci: min(m, _room(problem, plan, ci)) for ci in allowed}
        rooms.update({(name, ci): r for ci, r in room.items()})
        for k in range(problem.replicas):
            for i in keys:
                key = (k, name, i)
                copies[key] = m
                choice[key] = {
                    ci: model.new_int_var(0, room[ci], f"x[{k},{name},{i},{plan.candidates[ci].domain}]")
                    for ci in allowed
                    if room[ci] > 0
                }
                if plan.multi_node:
                    g = plan.gpus_per_node or 0
                    nodes = sorted(
                        {
                            n
                            for ci in allowed
                            for n in topo.domains[plan.candidates[ci].domain].nodes
                            if n in plan.eligible and len(topo.nodes[n].free_gpus) >= g
                        }
                    )
                    node_of[key] = {n: model.new_bool_var(f"y[{k},{name},{i},{n}]") for n in nodes}
    pooled: dict = {}
    for plan in problem.pools.values():
        if any(
            plan.candidates[ci].kind == "pooled" for key, cands in choice.items() if key[1] == plan.name for ci in cands
        ):
            for n in sorted(plan.eligible):
                if (plan.selector, n) not in pooled:
                    free = len(topo.nodes[n].free_gpus)
                    pooled[(plan.selector, n)] = model.new_int_var(0, free, f"p[{plan.selector},{n}]")
    container = {
        (k, c.name): {j: model.new_bool_var(f"t[{k},{c.name},{cont.domain}]") for j, cont in enumerate(c.containers)}
        for k in range(problem.replicas)
        for c in problem.colocations
    }
    router = {}
    if problem.has_router:
        for k in range(problem.replicas):
            router[k] = {n: model.new_bool_var(f"r[{k},{n}]") for n in problem.router_nodes}
    span = create_span(model, problem, choice, tight)
    draws = create_draws(model, problem, choice, rooms)
    return Variables(placed, choice, copies, node_of, pooled, container, router, span=span, draws=draws)


def _room(problem: Problem, plan, ci: int) -> int:
    """How many of the pool's instances a candidate can hold at once: a unit by its free GPUs."""
    cand = plan.candidates[ci]
    if cand.kind != "unit":
        return plan.instances
    dom = problem.topology.domains[cand.domain]
    return free_in(problem.topology, dom.nodes[0], dom) // plan.size
