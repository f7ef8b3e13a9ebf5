"""Pods of spanning instances on nodes whose CPU or memory could run out ("tight" nodes).

A spanning (pooled) instance draws GPUs from its domain's nodes through one integer per (selector, node)
shared by every spanning instance; its split into pods (one per node it draws from) is decided after
solving. The pods' CPU and memory are not linear in those draws: how many pods a node gets depends on how
the draws split between instances (3 + 3 GPUs on two nodes are two pods for two TP3 instances; 2 + 2 + 2
GPUs on three nodes for the same instances cannot be split at all). So on a tight node each instance's
share is explicit:

- a *slot* is one spanning instance at one candidate with pods on tight nodes: per tight node of the
  candidate's domain a literal "has a pod here" and the GPUs it takes there; a candidate holding x
  instances has at most x active slots, and an instance without a slot draws only from roomy nodes;
- a 1-GPU instance is one pod on one node, so per (candidate, tight node) one integer counts them;
- a tight node's spanning draw is exactly the sum of its slots' and 1-GPU instances' GPUs, and each pod's
  CPU and memory is charged to the node;
- the rest of each instance (its size less its tight GPUs) comes from the roomy nodes of its domain: per
  domain, the spanning GPUs of instances inside it less their tight GPUs fit the roomy draws inside it
  (laminar supply, as before, so the decoder's deepest-first split over roomy nodes always fits).

A node is *roomy* when it could hold a pod of the most demanding eligible pool on every free GPU plus every
router of every problem sharing the model: CPU and memory can never bind there, so it gets no new
variables and the model stays aggregated (every node of the benchmark clusters is roomy). This is exact:
every placement the checker accepts maps to values of these variables (an instance's tight pods become its
slot) and every solution decodes to pods whose count per tight node is the number the model charged.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from placer.solver.problem import Problem

InstanceKey = tuple[int, str, int]
SlotKey = tuple[InstanceKey, int]  # (counted key, candidate index)


@dataclass
class Slot:
    """One spanning instance at a candidate with pods on tight nodes."""

    active: cp_model.IntVar
    pods: dict[int, cp_model.IntVar]  # tight node -> has a pod here
    gpus: dict[int, cp_model.IntVar]  # tight node -> GPUs it takes here
    total: cp_model.IntVar  # its GPUs on tight nodes (one term where domains sum them: short linear rows)


@dataclass
class Span:
    tight: frozenset[int] = frozenset()
    slots: dict[SlotKey, list[Slot]] = field(default_factory=dict)
    singles: dict[SlotKey, dict[int, cp_model.IntVar]] = field(default_factory=dict)  # 1-GPU: node -> count

    def pieces(self, sk: SlotKey):
        """(node, GPU variable) of every tight piece at one candidate."""
        for slot in self.slots.get(sk, []):
            yield from slot.gpus.items()
        yield from self.singles.get(sk, {}).items()

    def totals(self, sk: SlotKey) -> list[cp_model.IntVar]:
        """The tight GPUs of the instances at one candidate, one term per slot (or per node for 1-GPU)."""
        return [s.total for s in self.slots.get(sk, [])] + list(self.singles.get(sk, {}).values())

    def all_vars(self) -> list[cp_model.IntVar]:
        out: list[cp_model.IntVar] = []
        for slots in self.slots.values():
            for s in slots:
                out += [s.active, s.total, *s.pods.values(), *s.gpus.values()]
        for counts in self.singles.values():
            out += list(counts.values())
        return out


def tight_nodes(problems: list[Problem]) -> frozenset[int]:
    """Nodes whose CPU or memory could run out under the pods and routers of ``problems`` (one model)."""
    topo = problems[0].topology
    plans = [plan for pb in problems for plan in pb.pools.values()]
    router_cpu = sum(pb.replicas * pb.router_cpu_m for pb in problems if pb.has_router)
    router_mem = sum(pb.replicas * pb.router_memory_bytes for pb in problems if pb.has_router)
    # Only a spanning instance's pods need the answer, and a spanning instance draws only from its pooled
    # candidate's domain (the laminar supply rule gives every other node no draw): look at those nodes only.
    # Per-domain models at 100k GPUs asked this of every node for each of their 44 models (2.3 s).
    domains = {c.domain for plan in plans if not plan.multi_node for c in plan.candidates if c.kind == "pooled"}
    if not domains:
        return frozenset()
    out = set()
    for index in sorted(set().union(*(topo.domains[d].nodes for d in domains))):
        node = topo.nodes[index]
        mine = [p for p in plans if node.index in p.eligible]
        pods = len(node.free_gpus)
        cpu = max((p.cpu_m for p in mine), default=0)
        mem = max((p.memory_bytes for p in mine), default=0)
        if node.cpu_free_m < pods * cpu + router_cpu or node.memory_free_bytes < pods * mem + router_mem:
            out.add(node.index)
    return frozenset(out)


def _pod_room(problem: Problem, plan, n: int) -> int:
    """How many of the pool's pods node ``n`` could hold on its own (GPUs, CPU, memory)."""
    node = problem.topology.nodes[n]
    room = len(node.free_gpus)
    if plan.cpu_m:
        room = min(room, node.cpu_free_m // plan.cpu_m)
    if plan.memory_bytes:
        room = min(room, node.memory_free_bytes // plan.memory_bytes)
    return max(room, 0)


def create_span(model: cp_model.CpModel, problem: Problem, choice: dict, tight: frozenset[int]) -> Span:
    """Slots (and 1-GPU counts) for every pooled candidate whose domain holds tight eligible nodes."""
    topo = problem.topology
    span = Span(tight)
    for key, lits in choice.items():
        plan = problem.pools[key[1]]
        if plan.multi_node:
            continue
        for ci in lits:
            cand = plan.candidates[ci]
            if cand.kind != "pooled":
                continue
            room = {n: _pod_room(problem, plan, n) for n in topo.domains[cand.domain].nodes}
            nodes = [n for n in topo.domains[cand.domain].nodes if n in tight and n in plan.eligible and room[n] > 0]
            if not nodes:
                continue
            ub = plan.instances  # the bound of the candidate's count (create_variables)
            tag = f"{key[0]},{key[1]},{cand.domain}"
            if plan.size == 1:
                span.singles[(key, ci)] = {n: model.new_int_var(0, min(ub, room[n]), f"s1[{tag},{n}]") for n in nodes}
                continue
            slots = []
            for j in range(min(ub, sum(room[n] for n in nodes))):
                slot = Slot(
                    model.new_bool_var(f"sa[{tag},{j}]"), {}, {}, model.new_int_var(0, plan.size, f"st[{tag},{j}]")
                )
                for n in nodes:
                    cap = min(plan.size, len(topo.nodes[n].free_gpus))
                    slot.pods[n] = model.new_bool_var(f"sz[{tag},{j},{n}]")
                    slot.gpus[n] = model.new_int_var(0, cap, f"sd[{tag},{j},{n}]")
                slots.append(slot)
            span.slots[(key, ci)] = slots
    return span


def post_span(pm, symmetry: bool) -> None:
    """Slots hold at most the candidate's instances, pods only where GPUs are taken (and GPUs only where
    pods are), at most an instance's size; the pods' CPU and memory go to the node's capacity."""
    model, span, problem = pm.model, pm.vars.span, pm.problem
    for (key, ci), slots in span.slots.items():
        plan = problem.pools[key[1]]
        x = pm.vars.choice[key][ci]
        model.add(sum(s.active for s in slots) <= x)
        for s in slots:
            for n, z in s.pods.items():
                g = s.gpus[n]
                model.add(z <= s.active)
                model.add(g <= min(plan.size, len(problem.topology.nodes[n].free_gpus)) * z)
                model.add(g >= z)
                pm.capacity.cpu[n].append(plan.cpu_m * z)
                pm.capacity.memory[n].append(plan.memory_bytes * z)
            model.add(s.total == sum(s.gpus.values()))
            model.add(s.total <= plan.size * s.active)
        if symmetry:  # slots of one candidate are interchangeable: active first, most tight GPUs first
            for a, b in zip(slots, slots[1:], strict=False):
                model.add(b.active <= a.active)
                model.add(b.total <= a.total)
    for (key, ci), counts in span.singles.items():
        plan = problem.pools[key[1]]
        model.add(sum(counts.values()) <= pm.vars.choice[key][ci])
        for n, w in counts.items():
            pm.capacity.cpu[n].append(plan.cpu_m * w)
            pm.capacity.memory[n].append(plan.memory_bytes * w)


def tight_draws(pm) -> dict[tuple, list]:
    """(selector, tight node) -> the GPU terms of every tight piece there."""
    out: dict[tuple, list] = defaultdict(list)
    for sk in [*pm.vars.span.slots, *pm.vars.span.singles]:
        sel = pm.problem.pools[sk[0][1]].selector
        for n, g in pm.vars.span.pieces(sk):
            out[(sel, n)].append(g)
    return out


def solved_pieces(span: Span, solver, sk: SlotKey) -> list[dict[int, int]]:
    """The tight pods of the instances at one candidate, one {node: GPUs} per instance that has any."""
    out = []
    for s in span.slots.get(sk, []):
        got = {n: solver.value(g) for n, g in s.gpus.items() if solver.value(g) > 0}
        if got:
            out.append(got)
    for n, w in sorted(span.singles.get(sk, {}).items()):
        out += [{n: 1} for _ in range(solver.value(w))]
    return out


def hint_pieces(span: Span, sk: SlotKey, instances: list[list[tuple[int, int]]], values: dict) -> None:
    """Hint one candidate's slots from a known placement: ``instances`` lists each instance's (node, GPUs)."""
    tight = [sorted((n, g) for n, g in pods if n in span.tight) for pods in instances]
    tight = sorted((t for t in tight if t), key=lambda t: -sum(g for _n, g in t))
    if sk in span.singles:
        for t in tight:
            for n, _g in t:
                var = span.singles[sk].get(n)
                if var is not None:
                    values[var] = values.get(var, 0) + 1
        return
    for slot, t in zip(span.slots.get(sk, []), tight, strict=False):
        values[slot.active] = 1
        values[slot.total] = sum(g for n, g in t if n in slot.gpus)
        for n, g in t:
            if n in slot.gpus:
                values[slot.gpus[n]] = g
                values[slot.pods[n]] = 1


def pin_pieces(model: cp_model.CpModel, span: Span, sk: SlotKey, kept: list[dict[int, int]]) -> bool:
    """Running spanning instances keep their pods on tight nodes: each takes a slot of its own (or its
    1-GPU count); False when the model has no room for them there."""
    kept = [k for k in kept if k]
    if sk in span.singles:
        counts: dict[int, int] = defaultdict(int)
        for k in kept:
            for n in k:
                counts[n] += 1
        for n, c in counts.items():
            if n not in span.singles[sk]:
                return False
            model.add(span.singles[sk][n] >= c)
        return True
    slots = span.slots.get(sk, [])
    if len(kept) > len(slots):
        return False
    for slot, k in zip(slots, kept, strict=False):
        if any(n not in slot.gpus for n in k):
            return False
        model.add(slot.active == 1)
        for n, g in slot.gpus.items():
            model.add(g == k.get(n, 0))
    return True
