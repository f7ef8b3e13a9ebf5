"""Tighter bounds for the anchor search (placer.solver.anchor): every pool of every replica on shared
capacity, as one min-cost flow per assignment, and a Lagrangian bound that orders the walk.

Why: the per-(domain, replicas) bound (placer.solver.anchor_cheap) prices the anchored pools inside their
domain and the other pools at the cheapest GPUs anywhere, each on its own. On the large spec at 10k DGX GPUs
the cheapest nodes of a leaf are counted twice, once for the decode pool anchored there and once for the
prefill of every replica, and a replica's transfer is priced apart from where its prefill goes: the bound
sat 0.25-1.7 % under the optimum, and 198 to ~98,000 assignments lay below it (bench/NOTES.md). Here, per
assignment, GPUs flow from each replica's pools to node classes: the anchored pools only to the nodes of
their replica's domain, the others anywhere, every node's free GPUs shared by all of them.

What the flow relaxes, so that its optimum is a lower bound on the assignment's (0, cost):
- an instance is ``size`` GPU units that may split over nodes of a class (each pool takes at most ``size x
  floor(free / size)`` of a node, all pools together at most its free GPUs); costs are per GPU, the
  candidate's all-reduce units spread over its GPUs;
- the KV transfer: in a case where a replica keeps its linked pools inside its anchor domain, they may only
  go there and it pays the least container there or above; otherwise it pays the least container strictly
  above the domain (its linked pools are outside, so its container is). Every placement is in one case per
  replica, so the least flow over the cases is a bound (``split``, or case by case in the walk). A case
  left open ("mixed") charges each linked instance its share of the one or the other by where it goes,
  which is below both (``of``), and tells which domain's replicas its flow splits;
- CPU, memory, the router's node and the spread rule are left out; every other replica-level rule is
  charged its cheapest container.

The Lagrangian bound (``prices``, ``tables``) prices each class's capacity (any prices >= 0), which lets the
groups of the flow fill their cheapest classes each on its own: the bound separates by anchor domain, as
the walk's suffix bound needs. The prices are the LP duals of one assignment's flow.

It applies only where each candidate is one whole node (no sockets, no spanning or multi-node instance) and
no candidate misses its preferred level, so that the value is (0, cost) and nothing else is compared; other
problems keep the per-domain bound alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import lcm

import numpy as np

from placer.solver.problem import Problem

# Work charged per flow arc (deterministic seconds): a flow of ~900 arcs took ~0.25-0.3 ms here, building
# included (one deterministic second is about 0.8-0.9 wall seconds of CP-SAT on an idle core).
ARC_WORK_S = 3.5e-7
# Work charged per set of prices: one LP and its tables (~40 ms measured here).
PRICE_WORK_S = 0.05


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
            # No pool mix uses more of a node than the sum of what each pool may take there: nodes that
            # differ only in GPUs none can use are one class.
            key = (owner.get(n, -1), min(free, sum(room)), room, cost)
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
        self._offer_memo: dict[tuple, tuple | None] = {}
        self._sorted_memo: dict[int, list[tuple[int, int]]] = {}
        self._by_anchor: dict[int, list[int]] = {}
        for c, cls in enumerate(self.classes):
            self._by_anchor.setdefault(cls.anchor, []).append(c)
        self._class_tails = np.arange(1, 1 + len(self.classes), dtype=np.int32)
        self._class_heads = np.zeros(len(self.classes), dtype=np.int32)
        self._class_caps = np.array([cls.count * cls.free for cls in self.classes], dtype=np.int64)
        self._class_costs = np.zeros(len(self.classes), dtype=np.int64)
        self.fixed = problem.replicas * sum(
            min((c.units for c in coloc.containers), default=0) for coloc in problem.colocations if coloc is not link
        )

    def _arcs(self, counts: tuple[int, ...], left: int, inner: tuple[int | None, ...] | None = None):
        """The transportation problem of an assignment: (groups, offers per group) with groups as (pool,
        domain, replicas, mode, supply) and offers as ``_offers`` gives them, or None when some replica has
        no transfer container. With ``inner[i]`` set, that many of domain i's replicas keep their linked pools
        inside it (mode "in": paying the least container there or above) and the others pay the least
        container strictly above it (mode "out"), wherever their linked pools go; without, each linked
        instance pays its share of the one or the other by where it goes (mode "mixed")."""
        plans = [self.problem.pools[p] for p in self.pools]
        first = len(counts)  # the undecided replicas' domains: first and after
        decided = [(i, k) for i, k in enumerate(counts) if k] + ([(-2, left)] if left else [])
        groups: list[tuple[int, int, int, str, int]] = []
        offers: list[tuple] = []
        for j, plan in enumerate(plans):
            tied = self.anchored[j] or self.linked[j]
            for i, k in decided if tied else [(-1, sum(counts) + left)]:
                if self.linked[j] and inner is not None and i >= 0 and inner[i] is not None:
                    runs = [(inner[i], "in"), (k - inner[i], "out")]
                else:
                    runs = [(k, "mixed")]
                for n, mode in runs:
                    if not n:
                        continue
                    got = self._offers(j, i, mode, first)
                    if got is None:
                        return None
                    supply = n * plan.size * plan.instances
                    same = next((g for g, o in enumerate(offers) if o is got and groups[g][3] == "out"), None)
                    if same is not None:  # replicas paying the same outer container go as one group
                        groups[same] = (j, -1, groups[same][2] + n, "out", groups[same][4] + supply)
                        continue
                    groups.append((j, i, n, mode, supply))
                    offers.append(got)
        return groups, offers

    def _offers(self, j: int, i: int, mode: str, first: int):
        """(classes, rooms, scaled costs per GPU unit, inside domain i?) as arrays, open to pool j of a
        replica group in domain i (-1: any replica, not tied; -2: undecided, in domain ``first`` or after);
        None: no transfer container."""
        # Outside offers depend on the domain only through its outer container's price.
        key = (j, "out", self.outer[i]) if mode == "out" else (j, i, mode, first if i == -2 else 0)
        if key in self._offer_memo:
            return self._offer_memo[key]
        plan = self.problem.pools[self.pools[j]]
        shares = self._shares(i, first, plan.size) if self.linked[j] else None
        out = None
        if not (self.linked[j] and shares is None):
            rows = []
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
                rows.append((c, cls.count * cls.room[j], cost, here))
            out = (
                np.array([r[0] for r in rows], dtype=np.int32),
                np.array([r[1] for r in rows], dtype=np.int64),
                np.array([r[2] for r in rows], dtype=np.int64),
                np.array([r[3] for r in rows], dtype=bool),
            )
        self._offer_memo[key] = out
        return out

    def split(self, counts: tuple[int, ...], threshold: int) -> tuple[int | None, int]:
        """(a bound, the arcs built) of a full assignment with each replica's transfer decided: the least flow
        over how many replicas of each domain keep their linked pools inside it, by branch and bound on the
        domains whose replicas the flow splits. Every placement is one of these cases, so the least is a
        bound, tighter than ``of``'s, whose shares let a replica pay part of each. A case whose flow reaches
        ``threshold`` is not split further: the answer is exact below ``threshold`` and at least it above."""
        arcs = 0

        def least(inner: tuple[int | None, ...]) -> int | None:
            nonlocal arcs
            got, n, impure = self.of(counts, 0, inner)
            arcs += n
            if got is None or got >= threshold or impure is None:
                return got
            found = [least(inner[:impure] + (b,) + inner[impure + 1 :]) for b in range(counts[impure] + 1)]
            known = [f for f in found if f is not None]
            return min(known) if known else None

        return least((None,) * len(counts)), arcs

    def of(
        self, counts: tuple[int, ...], left: int = 0, inner: tuple[int | None, ...] | None = None
    ) -> tuple[int | None, int, int | None]:
        """(the bound on the cost, the arcs built, a domain whose replicas it splits) for ``counts[i]`` replicas
        anchored in domain i and ``left`` more anchored in some domain after those ``counts`` covers (the
        partial assignments of the walk); the bound is None when the replicas cannot fit so (the flow is
        infeasible), and only the fixed part when the flow solver gives no answer.

        When the optimal flow keeps whole replicas' linked pools inside or outside their domain (the same
        number for every linked pool; no split domain), it is a flow of one of ``split``'s cases too."""
        from ortools.graph.python import min_cost_flow

        built = self._arcs(counts, left, inner)
        if built is None:
            return None, 0, None
        groups, offers = built
        n_cls = len(self.classes)
        base = 1 + n_cls  # node 0 is the sink, then the classes, then the groups
        tails = [self._class_tails] + [np.full(len(o[0]), base + g, dtype=np.int32) for g, o in enumerate(offers)]
        heads = [self._class_heads] + [o[0] + 1 for o in offers]
        caps = [self._class_caps] + [o[1] for o in offers]
        costs = [self._class_costs] + [o[2] for o in offers]
        flow = min_cost_flow.SimpleMinCostFlow()
        flow.add_arcs_with_capacity_and_unit_cost(
            np.concatenate(tails), np.concatenate(heads), np.concatenate(caps), np.concatenate(costs)
        )
        supplies = [group[4] for group in groups]
        nodes = np.arange(base, base + len(groups) + 1, dtype=np.int32)
        nodes[-1] = 0
        flow.set_nodes_supplies(nodes, np.array([*supplies, -sum(supplies)], dtype=np.int64))
        arcs = n_cls + sum(len(o[0]) for o in offers)
        status = flow.solve()
        if status == flow.INFEASIBLE:
            return None, arcs, None
        if status != flow.OPTIMAL:
            # e.g. BAD_COST_RANGE, scaled costs too large for the flow solver (extreme telemetry weights):
            # no bound, not "no placement" - the flow part is never negative, so ``fixed`` still bounds it,
            # and no split is given, so the walk solves the assignment exactly
            return self.fixed, arcs, None
        bound = -(-flow.optimal_cost() // self.scale) + self.fixed
        return bound, arcs, self._pure(flow, groups, offers, n_cls)

    def _pure(self, flow, groups, offers, n_cls: int) -> int | None:
        """The first domain one of whose mixed groups of linked pools sent part of a replica inside it, or
        not the same number of replicas for each linked pool; None if there is none."""
        whole: dict[int, set[int]] = {}
        start = n_cls
        for (j, i, _n, mode, _supply), o in zip(groups, offers, strict=True):
            if mode == "mixed" and i >= 0 and self.linked[j]:
                sent = flow.flows(np.arange(start, start + len(o[0]), dtype=np.int32))
                got = int(sent[o[3]].sum())
                plan = self.problem.pools[self.pools[j]]
                per = plan.size * plan.instances
                if got % per:
                    return i
                whole.setdefault(i, set()).add(got // per)
            start += len(o[0])
        return next((i for i, v in sorted(whole.items()) if len(v) > 1), None)

    def prices(self, counts: tuple[int, ...], left: int = 0) -> list[int] | None:
        """Per class, the price of one GPU unit of its capacity (scaled, >= 0): the LP duals of the class
        capacities in the assignment's relaxation. Any prices >= 0 give a valid bound (``tables``); these
        make it equal to that relaxation's value there, and close to it for assignments alike."""
        from ortools.linear_solver import pywraplp

        built = self._arcs(counts, left)
        if built is None:
            return None
        groups, offers = built
        supplies = [group[4] for group in groups]
        arcs = [
            (g, int(c), int(r), int(k)) for g, o in enumerate(offers) for c, r, k in zip(o[0], o[1], o[2], strict=True)
        ]
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
        self._sorted_memo = {}
        const = -sum(p * cls.count * cls.free for p, cls in zip(prices, self.classes, strict=True))
        for j, plan in enumerate(plans):
            if not (self.anchored[j] or self.linked[j]):
                got = self._fill(j, replicas * plan.size * plan.instances, prices, None, 0)
                if got is None:
                    return None
                const += got
        per: list[list[int | None]] = []
        for i in range(len(cap)):
            row: list[int | None] = [0]
            for k in range(1, cap[i] + 1):
                total = self._entry(i, k, prices, len(cap))
                row.append(None if total is None else total // self.scale)
            per.append(row)
        return const // self.scale + self.fixed, per

    def _entry(self, i: int, k: int, prices: list[int], n_domains: int) -> int | None:
        """k replicas anchored in domain i, scaled: their anchored pools inside it, and their linked pools at
        the better of each split into replicas that keep them inside (paying the least container there or
        above) and replicas that do not (paying the least strictly above), as ``split`` does."""
        plans = [self.problem.pools[p] for p in self.pools]
        total = 0
        for j, plan in enumerate(plans):
            if self.anchored[j] and not self.linked[j]:
                got = self._fill(j, k * plan.size * plan.instances, prices, i, 0)
                if got is None:
                    return None
                total += got
        linked = [j for j in range(len(plans)) if self.linked[j]]
        if not linked:
            return total
        best: int | None = None
        for inside in range(k + 1):
            part: int | None = 0
            for j in linked:
                shares = self._shares(i, n_domains, plans[j].size)
                if shares is None:
                    return None
                units = plans[j].size * plans[j].instances
                a = self._fill(j, inside * units, prices, i, shares[0])
                b = self._fill(j, (k - inside) * units, prices, None, shares[1])
                if a is None or b is None or part is None:
                    part = None
                    break
                part += a + b
            if part is not None and (best is None or part < best):
                best = part
        return None if best is None else total + best

    def _fill(self, j: int, units: int, prices: list[int], inside: int | None, share: int | None) -> int | None:
        """The cheapest ``units`` GPU units of pool j at priced classes (scaled), each paying ``share`` more,
        inside anchor domain ``inside`` only (None: anywhere); None if they do not fit (or share is None)."""
        if not units:
            return 0
        if share is None:
            return None
        if inside is None:  # one order of every class serves all domains: the share is the same everywhere
            if j not in self._sorted_memo:  # (tables() empties it for each set of prices)
                offers = sorted(
                    (cls.cost[j] + prices[c], cls.count * cls.room[j])
                    for c, cls in enumerate(self.classes)
                    if cls.room[j]
                )
                self._sorted_memo[j] = offers
            offers = self._sorted_memo[j]
        else:
            offers = sorted(
                (self.classes[c].cost[j] + prices[c], self.classes[c].count * self.classes[c].room[j])
                for c in self._by_anchor.get(inside, [])
                if self.classes[c].room[j]
            )
        total = share * units
        for cost, room in offers:
            take = min(units, room)
            total += take * cost
            units -= take
            if not units:
                return total
        return None

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
