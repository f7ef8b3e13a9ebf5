"""The CP-SAT model: variables, every constraint family in order, and the objective terms.

``add_constraints`` is the table of contents. Capacity is laminar (every domain's demand within its free
GPUs), so the per-node split of spanning instances over roomy nodes can be decided after solving and stays
exact; on nodes whose CPU or memory could run out each instance's pods are variables (cpsat.pods).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from placer.model.errors import InfeasibleError
from placer.model.levels import LEVEL_RANK
from placer.solver.cells import group_marks, inside_one, node_marks
from placer.solver.cpsat.draws import group_demand, pin_draws, pinned_below, post_draws
from placer.solver.cpsat.pods import pin_pieces, post_span, tight_draws, tight_nodes
from placer.solver.cpsat.variables import Variables, create_variables
from placer.solver.figures import free_in
from placer.solver.problem import Problem, kept_candidate


@dataclass
class Capacity:
    """What one problem's choices demand of the shared hardware: GPU terms per unit (node or socket) and per
    domain, CPU and memory terms per node. Kept apart from the model so several problems placed jointly
    (placer.solver.fleet) share one set of capacity constraints."""

    unit: dict[str, list] = field(default_factory=lambda: defaultdict(list))
    inside: dict[str, list] = field(default_factory=lambda: defaultdict(list))
    cpu: dict[int, list] = field(default_factory=lambda: defaultdict(list))
    memory: dict[int, list] = field(default_factory=lambda: defaultdict(list))


class PlacementModel:
    """One problem's variables and constraints. ``model`` and ``joint`` let placer.solver.fleet and placer.solver.plan
    put several problems in one CpModel: the capacity terms are then posted once for all of them
    (post_capacity); ``peers`` are then every problem of that model, whose pods and routers decide which
    nodes' CPU or memory could run out (cpsat.pods.tight_nodes)."""

    def __init__(
        self, problem: Problem, model: cp_model.CpModel | None = None, joint: bool = False, peers: list | None = None
    ):
        self.problem = problem
        self.topo = problem.topology
        self.model = model if model is not None else cp_model.CpModel()
        if joint and not peers:
            raise ValueError("a joint PlacementModel needs peers: every problem sharing its capacity")
        tight = tight_nodes(list(peers) if joint and peers else [problem])
        self.vars: Variables = create_variables(self.model, problem, tight)
        # Soft-kept instances still where they run (placer.solver.plan maximises them): ("n", key, candidate) ->
        # how many counted instances stay there, ("m", key) -> a multi-node instance stays, ("r", replica).
        self.stays: dict[tuple, cp_model.IntVar] = {}
        self.kept_count = 0
        self.capacity = Capacity()
        self.add_constraints()
        if not joint:
            post_capacity(self.model, self.topo, [self.capacity])

    def add_constraints(self) -> None:
        self._replica_all_or_nothing()
        self._replicas_between_min_and_max()
        self._multi_node_instance_nodes()
        self._unit_capacity()
        self._pooled_supply()
        self._domain_capacity_redundant()
        self._node_cpu_memory()
        self._spanning_pods_on_tight_nodes()
        self._spanning_draws_per_group()
        self._colocation_inside_container()
        self._router_inside_container()
        self._replicas_spread()
        self._kept_instances()
        self._pinned_containers()
        self._identical_instances_ordered()
        self._identical_replicas_ordered()

    # --- gang -----------------------------------------------------------------------------------------
    def _replica_all_or_nothing(self) -> None:
        """Every instance of a placed replica has exactly one place; none of an unplaced one has any."""
        v = self.vars
        for key, lits in v.choice.items():
            self.model.add(sum(lits.values()) == v.copies[key] * v.placed[key[0]])
        for (k, _c), lits in v.container.items():
            self.model.add(sum(lits.values()) == v.placed[k])
        for k, lits in v.router.items():
            self.model.add(sum(lits.values()) == v.placed[k])

    def _replicas_between_min_and_max(self) -> None:
        placed = self.vars.placed
        self.model.add(sum(placed) >= self.problem.min_replicas)
        for a, b in zip(placed, placed[1:], strict=False):
            self.model.add_implication(b, a)  # replicas are identical: fill them in order

    def _multi_node_instance_nodes(self) -> None:
        """A multi-node instance takes exactly nodeCount nodes, all inside its chosen container."""
        for key, nodes in self.vars.node_of.items():
            plan = self.problem.pools[key[1]]
            lits = self.vars.choice[key]
            self.model.add(sum(nodes.values()) == (plan.node_count or 0) * self.vars.placed[key[0]])
            for n, y in nodes.items():
                ups = set(self.topo.ancestors(self.topo.node_domain[n]))
                holders = [lit for ci, lit in lits.items() if plan.candidates[ci].domain in ups]
                self.model.add(y <= sum(holders))

    # --- capacity -------------------------------------------------------------------------------------
    def _unit_capacity(self) -> None:
        """GPUs taken on a node (or socket) by whole-node instances, multi-node pods and spanning draws fit."""
        per_unit: dict[str, list] = defaultdict(list)
        for (_k, pool, _i), lits in self.vars.choice.items():
            plan = self.problem.pools[pool]
            for ci, lit in lits.items():
                cand = plan.candidates[ci]
                if cand.kind == "unit":
                    per_unit[cand.domain].append(plan.size * lit)
                    parent = self.topo.domains[cand.domain].parent
                    if cand.level == "socket" and parent is not None:
                        per_unit[parent].append(plan.size * lit)
        for key, nodes in self.vars.node_of.items():
            g = self.problem.pools[key[1]].gpus_per_node or 0
            for n, y in nodes.items():
                per_unit[self.topo.node_domain[n]].append(g * y)
        for (_sel, n), p in self.vars.pooled.items():
            per_unit[self.topo.node_domain[n]].append(p)
        for dom_id, terms in per_unit.items():
            self.capacity.unit[dom_id] += terms

    def _pooled_supply(self) -> None:
        """Spanning instances placed inside a domain draw their GPUs from that domain's nodes (per selector)."""
        by_sel: dict[tuple, dict[int, cp_model.IntVar]] = defaultdict(dict)
        for (sel, n), p in self.vars.pooled.items():
            by_sel[sel][n] = p
        span, tight = self.vars.span, self.vars.span.tight
        pieces = tight_draws(self)
        pinned = pinned_below(self)
        for sel, supply in by_sel.items():
            demand: dict[str, list] = defaultdict(list)
            total = []
            for key, lits in self.vars.choice.items():
                plan = self.problem.pools[key[1]]
                if plan.selector != sel:
                    continue
                for ci, lit in lits.items():
                    cand = plan.candidates[ci]
                    if cand.kind == "pooled":
                        total.append(plan.size * lit)
                        # what the instances take on tight nodes is theirs already (cpsat.pods)
                        mine = [-t for t in span.totals((key, ci))]
                        for d in self.topo.ancestors(cand.domain):
                            demand[d] += [plan.size * lit, *mine]
                        for d, terms in group_demand(self, (key, ci)):  # spread: per group below it
                            demand[d] += terms
            for d, held in pinned.get(sel, {}).items():  # running instances' GPUs below their candidate
                demand[d].append(held)
            self.model.add(sum(supply.values()) == sum(total))
            for n, p in supply.items():
                if n in tight:
                    self.model.add(p == sum(pieces.get((sel, n), [])))
            for d, terms in demand.items():
                nodes = [supply[n] for n in self.topo.domains[d].nodes if n in supply and n not in tight]
                self.model.add(sum(terms) <= sum(nodes))

    def _domain_capacity_redundant(self) -> None:
        """Redundant: all instances placed inside a domain need at most its free GPUs (tightens the bound)."""
        inside: dict[str, list] = defaultdict(list)
        for (_k, pool, _i), lits in self.vars.choice.items():
            plan = self.problem.pools[pool]
            for ci, lit in lits.items():
                for d in self.topo.ancestors(plan.candidates[ci].domain):
                    if self.topo.domains[d].level not in ("node", "socket"):
                        inside[d].append(plan.size * lit)
        for d, terms in inside.items():
            self.capacity.inside[d] += terms

    def _node_cpu_memory(self) -> None:
        """Pods pinned to a node by the model (whole-node instances, multi-node pods, routers) fit its CPU and
        memory. (Spanning instances' pods: _spanning_pods_on_tight_nodes.)"""
        cpu: dict[int, list] = defaultdict(list)
        mem: dict[int, list] = defaultdict(list)
        for (_k, pool, _i), lits in self.vars.choice.items():
            plan = self.problem.pools[pool]
            for ci, lit in lits.items():
                cand = plan.candidates[ci]
                if cand.kind == "unit" and (plan.cpu_m or plan.memory_bytes):
                    n = self.topo.domains[cand.domain].nodes[0]
                    cpu[n].append(plan.cpu_m * lit)
                    mem[n].append(plan.memory_bytes * lit)
        for key, nodes in self.vars.node_of.items():
            plan = self.problem.pools[key[1]]
            for n, y in nodes.items():
                cpu[n].append(plan.cpu_m * y)
                mem[n].append(plan.memory_bytes * y)
        for lits in self.vars.router.values():
            for n, r in lits.items():
                cpu[n].append(self.problem.router_cpu_m * r)
                mem[n].append(self.problem.router_memory_bytes * r)
        for n in cpu:
            self.capacity.cpu[n] += cpu[n]
            self.capacity.memory[n] += mem[n]

    def _spanning_pods_on_tight_nodes(self) -> None:
        """Spanning instances' pods on nodes whose CPU or memory could run out are explicit, per instance
        (cpsat.pods), and charged to the node; on roomy nodes they can never exceed it."""
        post_span(self, symmetry=self.problem.kept is None)

    def _spanning_draws_per_group(self) -> None:
        """Under spread, a spanning candidate broader than the spread level counts its GPUs per group
        (cpsat.draws); _replicas_spread ties each group to the replica's cells."""
        post_draws(self)

    # --- replica-level rules --------------------------------------------------------------------------
    def _colocation_inside_container(self) -> None:
        """Each member instance of a replica lies inside the replica's chosen container (transfer floor,
        maximum level, router proximity): the floor holds for every prefill/decode pair at once."""
        for coloc in self.problem.colocations:
            inside = self._containers_above(coloc)
            for k in range(self.problem.replicas):
                conts = self.vars.container[(k, coloc.name)]
                for pool in coloc.pools:
                    plan = self.problem.pools[pool]
                    for i in range(plan.instances if plan.multi_node else 1):
                        for ci, lit in self.vars.choice[(k, pool, i)].items():
                            holders = [conts[j] for j in inside(plan.candidates[ci].domain) if j in conts]
                            self.model.add(lit <= self.vars.copies[(k, pool, i)] * sum(holders))

    def _containers_above(self, coloc):
        """domain -> the indices (ascending, as the container literals are ordered) of the colocation's
        containers holding it: found through the domain's ancestors, not by scanning every container."""
        at: dict[str, list[int]] = defaultdict(list)
        for j, c in enumerate(coloc.containers):
            at[c.domain].append(j)
        memo: dict[str, list[int]] = {}

        def inside(domain: str) -> list[int]:
            if domain not in memo:
                memo[domain] = sorted(j for a in self.topo.ancestors(domain) for j in at.get(a, ()))
            return memo[domain]

        return inside

    def _router_inside_container(self) -> None:
        for coloc in self.problem.colocations:
            if not coloc.router:
                continue
            inside = self._containers_above(coloc)
            for k, lits in self.vars.router.items():
                conts = self.vars.container[(k, coloc.name)]
                for n, r in lits.items():
                    holders = [conts[j] for j in inside(self.topo.node_domain[n]) if j in conts]
                    self.model.add(r <= sum(holders))

    def _replicas_spread(self) -> None:
        """No two replicas touch the same spread-level domain. A candidate inside one marks it; a broader
        one marks its groups' domains: by its GPUs per group (cpsat.draws), or, with one group, whenever used."""
        level = self.problem.spread_level
        if level is None:
            return
        rank = LEVEL_RANK[level]
        v = self.vars
        uses: dict[tuple[int, str], list] = defaultdict(list)
        for key, lits in v.choice.items():
            plan = self.problem.pools[key[1]]
            if plan.multi_node:
                continue  # its node literals below say which spread domains it touches
            for ci, lit in lits.items():
                cand = plan.candidates[ci]
                if inside_one(level, cand):
                    uses[(key[0], self.spread_of(cand.domain, rank))].append((lit, v.copies[key]))
                elif (key, ci) in v.draws.by:
                    for g, (w, cap) in v.draws.by[(key, ci)].items():
                        for d in group_marks(self.topo, level, g):
                            uses[(key[0], d)].append((w, cap))
                else:
                    for g in v.draws.groups[(plan.name, ci)]:
                        for d in group_marks(self.topo, level, g):
                            uses[(key[0], d)].append((lit, v.copies[key]))
        for (k, _pool, _i), nodes in v.node_of.items():
            for n, y in nodes.items():
                for d in node_marks(self.topo, level, n):
                    uses[(k, d)].append((y, 1))
        by_domain: dict[str, list] = defaultdict(list)
        for (k, d), members in sorted(uses.items()):
            u = self.model.new_bool_var(f"spread[{k},{d}]")
            for var, m in members:
                self.model.add(var <= m * u)
            self.vars.spread[(k, d)] = u
            by_domain[d].append(u)
        for us in by_domain.values():
            self.model.add_at_most_one(us)

    def spread_of(self, domain: str, rank: int) -> str:
        best = domain
        for d in self.topo.ancestors(domain):
            if LEVEL_RANK[self.topo.domains[d].level] <= rank:
                best = d
        return best

    # --- what already runs ---------------------------------------------------------------------------
    def _crowded(self, pool: str, ci: int) -> str:
        """Why a running instance's own place is not among its replica's choices: the replica-level rules
        whose domains around it have no room for the whole replica (its new instances among them)."""
        ups = set(self.topo.ancestors(self.problem.pools[pool].candidates[ci].domain))
        rules = [
            c.rule
            for c in self.problem.colocations
            if pool in c.pools and not any(k.domain in ups for k in c.containers)
        ]
        if not rules:
            return "has no GPUs left for it where it is"
        return f"has no room around it for the rest of its replica as scaled ({'; '.join(rules)})"

    def _kept_instances(self) -> None:
        """Running instances (problem.kept) keep their replica placed. Hard: each stays on its candidate
        and nodes, its GPUs charged to the sockets they sit in too (the decoder gives it back exactly
        those); one that cannot stay where it runs makes the problem infeasible, with that reason. Soft:
        ``stays`` counts those still in place; one that cannot stay (or could not get its own GPUs back,
        being spread over sockets or nodes after solving) simply counts as moved."""
        kept = self.problem.kept
        if kept is None:
            return
        v, hard, topo = self.vars, kept.hard, self.topo
        for k in sorted(kept.replicas):
            self.model.add(v.placed[k] == 1)
        counted: dict[tuple, int] = defaultdict(int)
        drawn: dict[tuple, int] = defaultdict(int)
        on_tight: dict[tuple, list] = defaultdict(list)  # kept spanning instances' pods on tight nodes
        on_roomy: dict[tuple, dict[int, int]] = defaultdict(lambda: defaultdict(int))  # ... and on roomy ones
        for (k, pool, i), inst in sorted(kept.instances.items()):
            plan = self.problem.pools[pool]
            ci = kept_candidate(self.problem, inst)
            key = (k, pool, i) if plan.multi_node else (k, pool, 0)
            lits = v.choice[key]
            what = f"running {pool}-{i} of replica {k} ({_pods_text(inst)})"
            nodes = [topo.node_by_name(p.node).index for p in inst.pods]
            if ci is None:
                self._cannot_stay(f"{what} breaks the spec's placement rules where it is")
                continue
            if ci not in lits:  # a rule it keeps, but no domain around it has room for the rest of its replica
                self._cannot_stay(f"{what} {self._crowded(pool, ci)}")
                continue
            cand = plan.candidates[ci]
            if plan.multi_node:
                ys = [v.node_of[key].get(n) for n in nodes]
                if any(y is None for y in ys):
                    self._cannot_stay(f"{what} is on a node it may no longer use")
                    continue
                if hard:
                    self.model.add(lits[ci] == 1)
                    for y in ys:
                        self.model.add(y == 1)
                else:
                    stay = self.model.new_bool_var(f"stay[{k},{pool},{i}]")
                    for lit in [lits[ci], *ys]:
                        self.model.add_implication(stay, lit)  # type: ignore[arg-type]
                    self.stays[("m", key)] = stay
                continue
            if cand.kind == "pooled" and any((plan.selector, n) not in v.pooled for n in nodes):
                self._cannot_stay(f"{what} is on a node it may no longer use")
                continue
            if not hard and (cand.kind != "unit" or self._spans_sockets(cand.domain)):
                continue  # its GPUs are chosen after solving: it cannot be promised the same ones
            counted[(key, ci)] += 1
            if hard:
                for pod, n in zip(inst.pods, nodes, strict=True):
                    if cand.kind == "pooled":
                        drawn[(plan.selector, n)] += len(pod.gpus)
                    self._charge_sockets(n, pod.gpus, cand.domain)
                if cand.kind == "pooled":
                    on_tight[(key, ci)].append(
                        {n: len(p.gpus) for p, n in zip(inst.pods, nodes, strict=True) if n in v.span.tight}
                    )
                    for p, n in zip(inst.pods, nodes, strict=True):
                        if n not in v.span.tight:
                            on_roomy[(key, ci)][n] += len(p.gpus)
        for (key, ci), count in sorted(counted.items()):
            if hard:
                self.model.add(v.choice[key][ci] >= count)
            else:
                stay_count = self.model.new_int_var(0, count, f"stay[{key},{ci}]")
                self.model.add(stay_count <= v.choice[key][ci])
                self.stays[("n", key, ci)] = stay_count
        for sel_node, gpus in sorted(drawn.items()):
            self.model.add(v.pooled[sel_node] >= gpus)
        for (key, ci), pods in sorted(on_tight.items()):
            if not pin_pieces(self.model, v.span, (key, ci), pods):
                self._cannot_stay(f"running {key[1]} instances of replica {key[0]} have pods where no pod fits")
        for (key, ci), roomy in sorted(on_roomy.items()):
            pin_draws(self, (key, ci), roomy)
        for k, name in sorted(kept.routers.items()):
            r = v.router.get(k, {}).get(topo.node_by_name(name).index)
            if r is None:
                self._cannot_stay(f"the running router of replica {k} is on {name}, which it may no longer use")
            elif hard:
                self.model.add(r == 1)
            else:
                self.stays[("r", k)] = r
        self.kept_count = len(kept.instances) + len(kept.routers)

    def _cannot_stay(self, why: str) -> None:
        if self.problem.kept is not None and self.problem.kept.hard:
            raise InfeasibleError(f"{why}: it cannot be kept", proven=True)

    def _spans_sockets(self, domain: str) -> bool:
        """A node-level place on a node whose sockets are domains: which socket's GPUs it holds is not
        a variable."""
        dom = self.topo.domains[domain]
        return dom.level == "node" and bool(dom.children)

    def _charge_sockets(self, node: int, gpus, candidate: str) -> None:
        """A kept instance placed at node level (or spanning) still holds GPUs of particular sockets: charge
        them there, so nothing else is promised those sockets' GPUs."""
        topo = self.topo
        for g in gpus:
            home = topo.gpu_domain(node, g)
            if topo.domains[home].level == "socket" and home != candidate:
                self.capacity.unit[home].append(1)

    def all_vars(self) -> list[cp_model.IntVar]:
        """Every decision variable once, for hinting a stage with the previous stage's answer. Once: one
        literal can serve two roles (a router's place and a container, say), and CP-SAT refuses a hint that
        names a variable twice as an invalid model, which a later stage would take for "nothing found"."""
        v = self.vars
        out = [
            lit
            for lits in (*v.choice.values(), *v.node_of.values(), *v.container.values(), *v.router.values())
            for lit in lits.values()
        ]
        out += [
            *v.pooled.values(),
            *v.placed,
            *v.spread.values(),
            *self.stays.values(),
            *v.span.all_vars(),
            *v.draws.all_vars(),
        ]
        return list({var.index: var for var in out}.values())

    def moves_expr(self) -> cp_model.LinearExpr:
        """Soft-kept instances and routers that would leave where they run."""
        return self.kept_count - cp_model.LinearExpr.sum(list(self.stays.values()))

    # --- symmetry -------------------------------------------------------------------------------------
    def _kept(self, key) -> bool:
        return self.problem.kept is not None and key in self.problem.kept.instances

    def _instance_key(self, key) -> cp_model.LinearExpr:
        plan = self.problem.pools[key[1]]
        lits = self.vars.choice[key]
        return cp_model.LinearExpr.weighted_sum(list(lits.values()), [plan.candidates[ci].order + 1 for ci in lits])

    def _identical_instances_ordered(self) -> None:
        """Multi-node instances of one pool in one replica are interchangeable: order them by domain position.
        (Other pools' instances are counted per candidate, so there is nothing to order.)"""
        for k in range(self.problem.replicas):
            for pool, plan in self.problem.pools.items():
                if not plan.multi_node:
                    continue  # counted, not told apart
                for i in range(plan.instances - 1):
                    if self._kept((k, pool, i)) or self._kept((k, pool, i + 1)):
                        continue
                    self.model.add(self._instance_key((k, pool, i)) <= self._instance_key((k, pool, i + 1)))

    def _pinned_containers(self) -> None:
        """A replica whose container is fixed (placer.solver.anchor) uses that one."""
        for (k, name), domain in sorted(self.problem.pins.items()):
            coloc = next(c for c in self.problem.colocations if c.name == name)
            j = next(j for j, c in enumerate(coloc.containers) if c.domain == domain)
            self.model.add(self.vars.container[(k, name)][j] == 1)

    def _identical_replicas_ordered(self) -> None:
        """Replicas are interchangeable: order placed replicas by a key of the first pool's placement (its
        first instance's domain position, or for counted instances the sum of their positions). Replicas
        pinned to different containers are not interchangeable, so pins switch this off."""
        if self.problem.pins:
            return
        first = min(self.problem.pools)
        kept = self.problem.kept.replicas if self.problem.kept else set()
        for k in range(self.problem.replicas - 1):
            if k in kept or k + 1 in kept:
                continue
            self.model.add(self._instance_key((k, first, 0)) <= self._instance_key((k + 1, first, 0))).only_enforce_if(
                self.vars.placed[k + 1]
            )

    # --- objective terms ------------------------------------------------------------------------------
    def cost_expr(self) -> cp_model.LinearExpr:
        """Weighted cost in units: all-reduce per instance, KV transfer per replica, telemetry per GPU."""
        terms = []
        tele = self.problem.telemetry_units
        for (_k, pool, _i), lits in self.vars.choice.items():
            plan = self.problem.pools[pool]
            for ci, lit in lits.items():
                cand = plan.candidates[ci]
                coef = cand.units
                if cand.kind == "unit":
                    coef += plan.size * tele[self.topo.domains[cand.domain].nodes[0]]
                if coef:
                    terms.append(coef * lit)
        for key, nodes in self.vars.node_of.items():
            g = self.problem.pools[key[1]].gpus_per_node or 0
            terms += [g * tele[n] * y for n, y in nodes.items() if tele[n]]
        terms += [tele[n] * p for (_s, n), p in self.vars.pooled.items() if tele[n]]
        for coloc in self.problem.colocations:
            for k in range(self.problem.replicas):
                for j, t in self.vars.container[(k, coloc.name)].items():
                    if coloc.containers[j].units:
                        terms.append(coloc.containers[j].units * t)
        return cp_model.LinearExpr.sum(terms)

    def misses_expr(self) -> cp_model.LinearExpr:
        """Instances placed broader than their pool's preferred level."""
        terms = []
        for (_k, pool, _i), lits in self.vars.choice.items():
            plan = self.problem.pools[pool]
            terms += [lit for ci, lit in lits.items() if plan.candidates[ci].preferred_miss]
        return cp_model.LinearExpr.sum(terms)


def post_capacity(model: cp_model.CpModel, topo, demands: list[Capacity]) -> None:
    """Every unit's and domain's GPUs, and every node's CPU and memory, hold what all problems put there."""
    unit: dict[str, list] = defaultdict(list)
    inside: dict[str, list] = defaultdict(list)
    cpu: dict[int, list] = defaultdict(list)
    memory: dict[int, list] = defaultdict(list)
    for c in demands:
        for dom_id, terms in c.unit.items():
            unit[dom_id] += terms
        for dom_id, terms in c.inside.items():
            inside[dom_id] += terms
        for n, terms in c.cpu.items():
            cpu[n] += terms
        for n, terms in c.memory.items():
            memory[n] += terms
    for dom_id in sorted(unit):
        dom = topo.domains[dom_id]
        model.add(sum(unit[dom_id]) <= free_in(topo, dom.nodes[0], dom))
    for d in sorted(inside):
        model.add(sum(inside[d]) <= topo.free_in_domain(d))
    for n in sorted(cpu):
        node = topo.nodes[n]
        model.add(sum(cpu[n]) <= node.cpu_free_m)
        model.add(sum(memory[n]) <= node.memory_free_bytes)


def _pods_text(inst) -> str:
    return "; ".join(f"{p.node}:{','.join(map(str, p.gpus))}" for p in inst.pods)
