"""A tighter bound for one anchor assignment (placer.solver.anchor): every pool of every replica on disjoint
capacity, as one min-cost flow.

Why: the per-(domain, replicas) bound prices the anchored pools inside their domain and the other pools at
the cheapest GPUs anywhere, each on its own. On the large spec at 10k DGX GPUs the cheapest nodes of a leaf
are counted twice, once for the decode pool anchored there and once for the prefill of every replica, so
the bound sat 0.2-0.4 % below each assignment's optimum and the walk had ~200 assignments to solve exactly
before it could prove anything (bench/ANCHOR.md). Here, per assignment, GPUs flow from each replica's pools
to node classes: the anchored pools only to the nodes of their replica's domain, the others anywhere, every
node's free GPUs shared by all of them.

What the flow relaxes, so that its optimum is a lower bound on the assignment's (0, cost):
- an instance is ``size`` GPU units that may split over nodes (each pool takes at most ``size x
  floor(free / size)`` of a node, all pools together at most its free GPUs); costs are per GPU, the
  candidate's all-reduce units spread over its GPUs;
- the KV transfer of a replica is charged per instance of the linked pools: ``min(inner, outer) / n`` for
  one inside the replica's anchor domain and ``outer / n`` for one outside it (``n`` linked instances per
  replica). A replica with every linked instance inside pays at least ``min(inner, outer)``; one with any
  outside needs a container strictly above the domain, so it pays ``outer``, which is at least the
  per-instance sum;
- CPU, memory, the router's node and the spread rule are left out; every other replica-level rule is
  charged its cheapest container.

It applies only where each candidate is one whole node (no sockets, no spanning or multi-node instance) and
no candidate misses its preferred level, so that the value is (0, cost) and nothing else is compared; other
problems keep the per-domain bound alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from math import lcm

from placer.solver.problem import Problem

# Work charged per flow arc (deterministic seconds): building the arcs in Python is most of a flow's cost;
# ~1.5 ms for ~2,000 arcs measured here.
ARC_WORK_S = 1e-6


@dataclass(frozen=True)
class _Class:
    """Nodes alike for the flow: same anchor domain, free GPUs and per-pool cost."""

    anchor: int  # index of the anchor domain holding them, -1 for none
    count: int
    free: int
    room: tuple[int, ...]  # per pool: GPU units one node offers it (0: not a candidate)
    cost: tuple[int, ...]  # per pool: scaled cost of one GPU unit


class AssignmentBound:
    """The flow bound for assignments of one problem; ``of(counts)`` is None when no flow holds them."""

    def __init__(self, problem: Problem, domains: tuple[str, ...], colocation: str, pools: tuple[str, ...], link):
        self.problem = problem
        self.pools = list(problem.pools)
        self.anchored = [p in pools for p in self.pools]
        self.linked = [link is not None and p in link.pools and p not in pools for p in self.pools]
        topo = problem.topology
        plans = [problem.pools[p] for p in self.pools]
        n_link = sum(plan.instances for plan, lk in zip(plans, self.linked, strict=True) if lk) or 1
        self.scale = lcm(*(plan.size for plan in plans)) * n_link
        owner: dict[int, int] = {}
        for i, d in enumerate(domains):
            for n in topo.domains[d].nodes:
                owner[n] = i
        per_node: dict[int, list[int | None]] = {}
        for j, plan in enumerate(plans):
            for cand in plan.candidates:
                n = topo.domains[cand.domain].nodes[0]
                per_node.setdefault(n, [None] * len(plans))[j] = cand.units
        tele = problem.telemetry_units
        classes: dict[tuple, int] = {}
        for n, units in per_node.items():
            free = len(topo.nodes[n].free_gpus)
            room = tuple(
                0 if u is None else plan.size * (free // plan.size) for u, plan in zip(units, plans, strict=True)
            )
            cost = tuple(
                0 if u is None else (u + plan.size * tele[n]) * (self.scale // plan.size)
                for u, plan in zip(units, plans, strict=True)
            )
            key = (owner.get(n, -1), free, room, cost)
            classes[key] = classes.get(key, 0) + 1
        self.classes = [_Class(a, c, f, r, k) for (a, f, r, k), c in sorted(classes.items())]
        # The KV transfer per anchor domain: the least container inside or above it, and strictly above it.
        self.inner: list[int | None] = [None] * len(domains)
        self.outer: list[int | None] = [None] * len(domains)
        if link is not None:
            for i, d in enumerate(domains):
                above = [c.units for c in link.containers if c.domain != d and topo.contains(c.domain, d)]
                below = [c.units for c in link.containers if topo.contains(d, c.domain)]
                self.outer[i] = min(above) if above else None
                self.inner[i] = min(above + below) if above or below else None
        self.n_link = n_link
        self.fixed = problem.replicas * sum(
            min((c.units for c in coloc.containers), default=0) for coloc in problem.colocations if coloc is not link
        )

    def _arcs(self, counts: tuple[int, ...], left: int, inner: tuple[int, ...] | None = None):
        """The transportation problem of an assignment: (supplies per group, arcs (group, class, room, cost))
        or None when some replica has no transfer container. With ``inner``, inner[i] of domain i's replicas
        keep their linked pools inside it (paying the least container there or above) and the others pay the
        least container strictly above it, wherever their linked pools go; without, each linked instance
        pays its share of the one or the other by where it goes."""
        plans = [self.problem.pools[p] for p in self.pools]
        first = len(counts)  # the undecided replicas' domains: first and after
        groups = [(i, k) for i, k in enumerate(counts) if k] + ([(-2, left)] if left else [])
        supplies: list[int] = []
        arcs: list[tuple[int, int, int, int]] = []
        for j, plan in enumerate(plans):
            tied = self.anchored[j] or self.linked[j]
            runs: list[tuple[int, int, str]] = []  # (domain, replicas, mode)
            for i, k in groups if tied else [(-1, sum(counts) + left)]:
                if self.linked[j] and inner is not None and i >= 0:
                    runs += [(i, inner[i], "in"), (i, k - inner[i], "out")]
                else:
                    runs.append((i, k, "mixed"))
            for i, k, mode in runs:
                if not k:
                    continue
                shares = self._shares(i, first, plan.size) if self.linked[j] else None
                if self.linked[j] and shares is None:
                    return None
                g = len(supplies)
                supplies.append(k * plan.size * plan.instances)
                for c, cls in enumerate(self.classes):
                    if not cls.room[j]:
                        continue
                    here = cls.anchor == i if i >= 0 else cls.anchor >= first
                    if (self.anchored[j] or mode == "in") and not here:
                        continue
                    cost = cls.cost[j]
                    if shares is not None:
                        if mode == "mixed":
                            extra = shares[1] if not here else shares[0] if i >= 0 else shares[2][cls.anchor]
                        else:
                            extra = shares[0] if mode == "in" else shares[1]
                        if extra is None:
                            continue
                        cost += extra
                    arcs.append((g, c, cls.count * cls.room[j], cost))
        return supplies, arcs

    def split(self, counts: tuple[int, ...]) -> tuple[int | None, int]:
        """(the bound, the arcs built) of a full assignment with each replica's transfer decided: the least
        flow over how many replicas of each domain keep their linked pools inside it. Every placement is one
        of these cases, so the least is a bound; it is tighter than ``of``, whose shares let a replica pay
        part of each."""
        ways = [range(k + 1) for k in counts]
        best: int | None = None
        arcs = 0
        for inner in product(*ways):
            got, n = self.of(counts, 0, tuple(inner))
            arcs += n
            if got is not None and (best is None or got < best):
                best = got
        return best, arcs

    def of(
        self, counts: tuple[int, ...], left: int = 0, inner: tuple[int, ...] | None = None
    ) -> tuple[int | None, int]:
        """(the bound on the cost, the arcs built) for ``counts[i]`` replicas anchored in domain i and
        ``left`` more anchored in some domain after those ``counts`` covers (the partial assignments of the
        walk); the bound is None when the replicas cannot fit so."""
        from ortools.graph.python import min_cost_flow

        built = self._arcs(counts, left, inner)
        if built is None:
            return None, 0
        supplies, arcs = built
        flow = min_cost_flow.SimpleMinCostFlow()
        n_cls = len(self.classes)
        base = 1 + n_cls  # node 0 is the sink, then the classes, then the groups
        tails = [1 + c for c in range(n_cls)] + [base + g for g, _c, _r, _k in arcs]
        heads = [0] * n_cls + [1 + c for _g, c, _r, _k in arcs]
        caps = [cls.count * cls.free for cls in self.classes] + [r for _g, _c, r, _k in arcs]
        costs = [0] * n_cls + [k for _g, _c, _r, k in arcs]
        for g, amount in enumerate(supplies):
            flow.set_node_supply(base + g, amount)
        flow.set_node_supply(0, -sum(supplies))
        flow.add_arcs_with_capacity_and_unit_cost(tails, heads, caps, costs)
        if flow.solve() != flow.OPTIMAL:
            return None, len(tails)
        return -(-flow.optimal_cost() // self.scale) + self.fixed, len(tails)

    def prices(self, counts: tuple[int, ...], left: int = 0) -> list[int] | None:
        """Per class, the price of one GPU unit of its capacity (scaled, >= 0): the LP duals of the class
        capacities in the assignment's relaxation. Any prices >= 0 give a valid bound (``tables``); these
        make it equal to that relaxation's value there, and close to it for assignments alike."""
        from ortools.linear_solver import pywraplp

        built = self._arcs(counts, left)
        if built is None:
            return None
        supplies, arcs = built
        lp = pywraplp.Solver.CreateSolver("GLOP")
        xs = [lp.NumVar(0, r, "") for _g, _c, r, _k in arcs]
        rows = [lp.Constraint(float(a), float(a)) for a in supplies]
        caps = [lp.Constraint(-lp.infinity(), float(cls.count * cls.free)) for cls in self.classes]
        for x, (g, c, _r, _k) in zip(xs, arcs, strict=True):
            rows[g].SetCoefficient(x, 1)
            caps[c].SetCoefficient(x, 1)
        objective = lp.Objective()
        for x, (_g, _c, _r, k) in zip(xs, arcs, strict=True):
            objective.SetCoefficient(x, float(k))
        objective.SetMinimization()
        if lp.Solve() != pywraplp.Solver.OPTIMAL:
            return None
        return [max(0, int(-row.dual_value())) for row in caps]

    def tables(self, prices: list[int], cap: tuple[int, ...], replicas: int):
        """The Lagrangian bound with the class capacities priced at ``prices``, which separates by anchor
        domain: (a constant, per domain i and k <= cap[i] the bound of k replicas anchored there, None where
        they do not fit). For any assignment, the constant plus its domains' entries is a lower bound."""
        plans = [self.problem.pools[p] for p in self.pools]
        const = -sum(p * cls.count * cls.free for p, cls in zip(prices, self.classes, strict=True))
        for j, plan in enumerate(plans):
            if not (self.anchored[j] or self.linked[j]):
                got = self._fill(j, replicas * plan.size * plan.instances, prices, lambda cls: 0)
                if got is None:
                    return None
                const += got
        per: list[list[int | None]] = []
        for i in range(len(cap)):
            row: list[int | None] = [0]
            for k in range(1, cap[i] + 1):
                total: int | None = 0
                for j, plan in enumerate(plans):
                    if not (self.anchored[j] or self.linked[j]):
                        continue
                    shares = self._shares(i, len(cap), plan.size) if self.linked[j] else None
                    if self.linked[j] and shares is None:
                        total = None
                        break
                    got = self._fill(j, k * plan.size * plan.instances, prices, self._extra(i, j, shares))
                    if got is None:
                        total = None
                        break
                    total = (total or 0) + got
                row.append(None if total is None else total // self.scale)
            per.append(row)
        return const // self.scale + self.fixed, per

    def _extra(self, i: int, j: int, shares):
        """The per-unit extra (or None: not allowed) of class ``cls`` for pool j of a replica in domain i."""

        def extra(cls: _Class) -> int | None:
            here = cls.anchor == i
            if self.anchored[j] and not here:
                return None
            if shares is None:
                return 0
            return shares[0] if here else shares[1]

        return extra

    def _fill(self, j: int, units: int, prices: list[int], extra) -> int | None:
        """The cheapest ``units`` GPU units of pool j at priced classes (scaled), None if they do not fit."""
        offers = []
        for c, cls in enumerate(self.classes):
            if not cls.room[j]:
                continue
            e = extra(cls)
            if e is not None:
                offers.append((cls.cost[j] + prices[c] + e, cls.count * cls.room[j]))
        total = 0
        for cost, room in sorted(offers):
            take = min(units, room)
            total += take * cost
            units -= take
            if not units:
                return total
        return None if units else total

    def _shares(self, i: int, first: int, size: int):
        """Scaled KV per GPU unit of a linked instance: (inside the anchor domain, outside it, per domain for
        an undecided replica), or None when no transfer container holds the replica."""
        per = self.scale // (self.n_link * size)
        if i >= 0:
            inner, outer = self.inner[i], self.outer[i]
            if inner is None and outer is None:
                return None
            return (None if inner is None else inner * per), (None if outer is None else outer * per), None
        # An undecided replica's domain is one of first..: an instance outside it pays at least the least
        # "strictly above" of those; one inside domain a pays at least min(inner[a], that).
        outs = [o for o in self.outer[first:] if o is not None]
        out = min(outs) if outs else None
        inside: dict[int, int | None] = {}
        for a in range(first, len(self.inner)):
            both = [x for x in (self.inner[a], out) if x is not None]
            inside[a] = min(both) * per if both else None
        return None, (None if out is None else out * per), inside


def applies(problem: Problem) -> bool:
    """Every candidate one whole node without sockets, none missing its preferred level."""
    topo = problem.topology
    for plan in problem.pools.values():
        if plan.multi_node:
            return False
        for cand in plan.candidates:
            if cand.kind != "unit" or cand.level != "node" or cand.preferred_miss:
                return False
            if topo.domains[cand.domain].children:
                return False
    return True
