"""The CP-SAT model: variables, every constraint family in order, and the objective terms.

``add_constraints`` is the table of contents. Capacity is laminar (every domain's demand within its free
GPUs), so the per-node split of spanning instances can be decided after solving and stays exact.
"""

from __future__ import annotations

from collections import defaultdict

from ortools.sat.python import cp_model

from placer.cpsat.variables import Variables, create_variables
from placer.levels import LEVEL_RANK
from placer.problem import Problem, free_in


class PlacementModel:
    def __init__(self, problem: Problem):
        self.problem = problem
        self.topo = problem.topology
        self.model = cp_model.CpModel()
        self.vars: Variables = create_variables(self.model, problem)
        # Demand by domain: (literal, GPUs) of every choice whose domain lies inside it, built once.
        self._inside: dict[str, list[tuple[cp_model.IntVar, int]]] = defaultdict(list)
        for (_k, pool, _i), lits in self.vars.choice.items():
            plan = problem.pools[pool]
            for ci, lit in lits.items():
                for d in self.topo.ancestors(plan.candidates[ci].domain):
                    self._inside[d].append((lit, plan.size))
        self.add_constraints()

    def add_constraints(self) -> None:
        self._replica_all_or_nothing()
        self._replicas_between_min_and_max()
        self._multi_node_instance_nodes()
        self._unit_capacity()
        self._pooled_supply()
        self._domain_capacity_redundant()
        self._node_cpu_memory()
        self._colocation_inside_container()
        self._router_inside_container()
        self._replicas_spread()
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
        for dom_id, terms in sorted(per_unit.items()):
            dom = self.topo.domains[dom_id]
            self.model.add(sum(terms) <= free_in(self.topo, dom.nodes[0], dom))

    def _pooled_supply(self) -> None:
        """Spanning instances placed inside a domain draw their GPUs from that domain's nodes (per selector)."""
        by_sel: dict[tuple, dict[int, cp_model.IntVar]] = defaultdict(dict)
        for (sel, n), p in self.vars.pooled.items():
            by_sel[sel][n] = p
        for sel, supply in by_sel.items():
            demand: dict[str, list] = defaultdict(list)
            total = []
            for (_k, pool, _i), lits in self.vars.choice.items():
                plan = self.problem.pools[pool]
                if plan.selector != sel:
                    continue
                for ci, lit in lits.items():
                    cand = plan.candidates[ci]
                    if cand.kind == "pooled":
                        total.append(plan.size * lit)
                        for d in self.topo.ancestors(cand.domain):
                            demand[d].append(plan.size * lit)
            self.model.add(sum(supply.values()) == sum(total))
            for d, terms in demand.items():
                nodes = [supply[n] for n in self.topo.domains[d].nodes if n in supply]
                self.model.add(sum(terms) <= sum(nodes))

    def _domain_capacity_redundant(self) -> None:
        """Redundant: all instances placed inside a domain need at most its free GPUs (tightens the bound)."""
        for d, terms in self._inside.items():
            dom = self.topo.domains[d]
            if dom.level in ("node", "socket"):
                continue
            free = sum(len(self.topo.nodes[n].free_gpus) for n in dom.nodes)
            self.model.add(sum(size * lit for lit, size in terms) <= free)

    def _node_cpu_memory(self) -> None:
        """Pods pinned to a node by the model (whole-node instances, multi-node pods, routers) fit its CPU and
        memory. Spanning instances' pods are placed by the decoder, which checks the same rule."""
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
        for n in sorted(set(cpu)):
            node = self.topo.nodes[n]
            self.model.add(sum(cpu[n]) <= node.cpu_free_m)
            self.model.add(sum(mem[n]) <= node.memory_free_bytes)

    # --- replica-level rules --------------------------------------------------------------------------
    def _colocation_inside_container(self) -> None:
        """Each member instance of a replica lies inside the replica's chosen container (transfer floor,
        maximum level, router proximity): the floor holds for every prefill/decode pair at once."""
        for coloc in self.problem.colocations:
            for k in range(self.problem.replicas):
                conts = self.vars.container[(k, coloc.name)]
                for pool in coloc.pools:
                    plan = self.problem.pools[pool]
                    for i in range(plan.instances if plan.multi_node else 1):
                        for ci, lit in self.vars.choice[(k, pool, i)].items():
                            ups = set(self.topo.ancestors(plan.candidates[ci].domain))
                            holders = [t for j, t in conts.items() if coloc.containers[j].domain in ups]
                            self.model.add(lit <= self.vars.copies[(k, pool, i)] * sum(holders))

    def _router_inside_container(self) -> None:
        for coloc in self.problem.colocations:
            if not coloc.router:
                continue
            for k, lits in self.vars.router.items():
                conts = self.vars.container[(k, coloc.name)]
                for n, r in lits.items():
                    ups = set(self.topo.ancestors(self.topo.node_domain[n]))
                    holders = [t for j, t in conts.items() if coloc.containers[j].domain in ups]
                    self.model.add(r <= sum(holders))

    def _replicas_spread(self) -> None:
        """No two replicas touch the same spread-level domain."""
        level = self.problem.spread_level
        if level is None:
            return
        rank = LEVEL_RANK[level]
        uses: dict[tuple[int, str], list] = defaultdict(list)
        for key, lits in self.vars.choice.items():
            plan = self.problem.pools[key[1]]
            for ci, lit in lits.items():
                uses[(key[0], self.spread_of(plan.candidates[ci].domain, rank))].append((lit, self.vars.copies[key]))
        for (k, _pool, _i), nodes in self.vars.node_of.items():
            for n, y in nodes.items():
                uses[(k, self.spread_of(self.topo.node_domain[n], rank))].append((y, 1))
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

    # --- symmetry -------------------------------------------------------------------------------------
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
                    self.model.add(self._instance_key((k, pool, i)) <= self._instance_key((k, pool, i + 1)))

    def _identical_replicas_ordered(self) -> None:
        """Replicas are interchangeable: order placed replicas by a key of the first pool's placement (its
        first instance's domain position, or for counted instances the sum of their positions)."""
        first = min(self.problem.pools)
        for k in range(self.problem.replicas - 1):
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
