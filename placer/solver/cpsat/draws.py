"""Spanning instances broader than the spread level: where each replica's GPUs come from, per group.

A spanning (pooled) instance draws from its domain's nodes through the per-(selector, node) supply shared by
every spanning instance, and the split is decided after solving (cpsat.model). Under a spread rule that
split decides which spread-level domains the replica touches, so for a counted (replica, pool, candidate)
whose domain holds two or more groups (placer.solver.cells) there is one integer per group: the GPUs its
instances take there, tight pieces (cpsat.pods) included. Then

- the groups' GPUs sum to the candidate's (size x instances placed there);
- a group's GPUs are at least its tight pieces (and a kept instance's GPUs there), and at most its bound
  times the replica's "uses" literal of each cell the group marks (cpsat.model._replicas_spread);
- a group's GPUs less its tight pieces are demand inside the group and every domain up to the candidate's,
  in the laminar supply rule; above, the candidate's demand stands as before. Groups are domains, so the rule
  stays laminar and the decoder, drawing each group's GPUs there deepest domain first, always fits.

Exact: a placement the checker accepts sets them (each replica's GPUs per group), and a solution decodes
to instances that take GPUs only in groups whose cells the replica uses. Only such candidates get them:
without spread, or inside one spread-level domain, the model is as before.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from placer.solver.candidates import domain_free
from placer.solver.cells import candidate_groups, inside_one, node_group
from placer.solver.cpsat.pods import Span
from placer.solver.problem import Problem, kept_candidate

InstanceKey = tuple[int, str, int]
SlotKey = tuple[InstanceKey, int]  # (counted key, candidate index)


@dataclass
class Draws:
    """Per counted key and candidate broader than the spread level: group -> (GPUs taken there, bound)."""

    by: dict[SlotKey, dict[str, tuple[cp_model.IntVar, int]]] = field(default_factory=dict)
    groups: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)  # (pool, candidate) -> groups

    def all_vars(self) -> list[cp_model.IntVar]:
        return [w for groups in self.by.values() for w, _cap in groups.values()]


def create_draws(model: cp_model.CpModel, problem: Problem, choice: dict, room: dict) -> Draws:
    """Groups of every candidate broader than the spread level; one integer per group where there are two
    or more and the candidate pools GPUs over nodes. ``room``: (pool, candidate) -> instances it holds."""
    out = Draws()
    level = problem.spread_level
    if level is None:
        return out
    topo = problem.topology
    for key, lits in choice.items():
        plan = problem.pools[key[1]]
        if plan.multi_node:
            continue  # its node literals carry the spread
        free = domain_free(topo, plan.eligible)
        for ci in lits:
            cand = plan.candidates[ci]
            if inside_one(level, cand):
                continue
            groups = out.groups.get((plan.name, ci))
            if groups is None:
                groups = out.groups[(plan.name, ci)] = candidate_groups(topo, level, plan.eligible, cand)
            if cand.kind != "pooled" or len(groups) < 2:
                continue
            top = plan.size * room[(plan.name, ci)]
            tag = f"{key[0]},{key[1]},{cand.domain}"
            out.by[(key, ci)] = {
                g: (model.new_int_var(0, min(top, free.get(g, 0)), f"w[{tag},{g}]"), min(top, free.get(g, 0)))
                for g in groups
            }
    return out


def _tight_in(span: Span, sk: SlotKey, nodes: set[int]) -> list[cp_model.IntVar]:
    return [g for n, g in span.pieces(sk) if n in nodes]


def post_draws(pm) -> None:
    """The groups' GPUs sum to the candidate's, and hold at least the tight pieces inside them."""
    v, topo = pm.vars, pm.topo
    for (key, ci), groups in v.draws.by.items():
        plan = pm.problem.pools[key[1]]
        pm.model.add(sum(w for w, _cap in groups.values()) == plan.size * v.choice[key][ci])
        for g, (w, _cap) in groups.items():
            tight = _tight_in(v.span, (key, ci), set(topo.domains[g].nodes))
            if tight:
                pm.model.add(w >= sum(tight))


def group_demand(pm, sk: SlotKey) -> list[tuple[str, list]]:
    """(domain, terms) of the laminar supply rule for one candidate's groups: each group's roomy GPUs, in
    the group and every domain above it below the candidate's own."""
    v, topo = pm.vars, pm.topo
    plan = pm.problem.pools[sk[0][1]]
    top = plan.candidates[sk[1]].domain
    out = []
    for g, (w, _cap) in v.draws.by.get(sk, {}).items():
        terms = [w, *(-t for t in _tight_in(v.span, sk, set(topo.domains[g].nodes)))]
        for d in topo.ancestors(g):
            if d == top:
                break
            out.append((d, terms))
    return out


def pinned_below(pm) -> dict[tuple, dict[str, int]]:
    """selector -> domain -> GPUs that running (hard-kept) spanning instances hold on roomy nodes of a domain
    narrower than their candidate (or their group). The decoder gives them their own GPUs first, so they are
    demand there too, or a spanning instance placed in that domain could be promised those GPUs."""
    out: dict[tuple, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    kept, topo, v = pm.problem.kept, pm.topo, pm.vars
    if kept is None or not kept.hard:
        return out
    for (k, pool, _i), inst in sorted(kept.instances.items()):
        plan = pm.problem.pools[pool]
        ci = kept_candidate(pm.problem, inst)
        if plan.multi_node or ci is None or plan.candidates[ci].kind != "pooled":
            continue
        grouped = ((k, pool, 0), ci) in v.draws.by
        for pod in inst.pods:
            n = topo.node_by_name(pod.node).index
            if n in v.span.tight:
                continue  # its slot holds it (cpsat.pods)
            top = node_group(topo, pm.problem.spread_level, n) if grouped else plan.candidates[ci].domain
            for d in topo.ancestors(topo.node_domain[n]):
                if d == top:
                    break
                out[plan.selector][d] += len(pod.gpus)
    return out


def pin_draws(pm, sk: SlotKey, roomy: dict[int, int]) -> None:
    """Kept instances' GPUs on roomy nodes (node -> GPUs) stay in their groups: each group holds them on
    top of its tight pieces, so the decoder still has the rest to give."""
    v, topo = pm.vars, pm.topo
    groups = v.draws.by.get(sk)
    if not groups:
        return
    for g, (w, _cap) in groups.items():
        nodes = set(topo.domains[g].nodes)
        held = sum(c for n, c in roomy.items() if n in nodes)
        if held:
            pm.model.add(w >= sum(_tight_in(v.span, sk, nodes)) + held)


def solved_draws(pm, solver, sk: SlotKey, pinned_roomy: dict[int, int]) -> dict[str, int]:
    """Per group, the roomy GPUs still to draw for one candidate's new instances (less tight pieces and
    the GPUs pinned instances hold on roomy nodes)."""
    v, topo = pm.vars, pm.topo
    out = {}
    for g, (w, _cap) in v.draws.by.get(sk, {}).items():
        nodes = set(topo.domains[g].nodes)
        tight = sum(solver.value(t) for t in _tight_in(v.span, sk, nodes))
        held = sum(c for n, c in pinned_roomy.items() if n in nodes)
        left = solver.value(w) - tight - held
        assert left >= 0, "draws hold their tight pieces and kept GPUs"
        if left:
            out[g] = left
    return out


def hint_draws(pm, sk: SlotKey, instances: list[list[tuple[int, int]]], values: dict) -> None:
    """Hint one candidate's groups from a known placement: ``instances`` lists each instance's (node, GPUs)."""
    groups = pm.vars.draws.by.get(sk)
    if not groups:
        return
    level = pm.problem.spread_level
    per: dict[str, int] = defaultdict(int)
    for pods in instances:
        for n, g in pods:
            per[node_group(pm.topo, level, n)] += g
    for grp, (w, _cap) in groups.items():
        values[w] = per.get(grp, 0)
