"""The first bound of the anchor search (placer.solver.anchor), per anchor domain and replica count: each
instance at its cheapest candidate inside the domain (the anchored pools) or anywhere (the others), with
the room each candidate has, and the KV transfer priced per domain. Cheap and general (spanning, multi-node,
preferred-level misses), but each pool is bounded on its own, so two pools may count the same cheap nodes:
where every candidate is one whole node, placer.solver.anchor_bound's flow and Lagrangian bounds replace it.
"""

from __future__ import annotations

from dataclasses import dataclass

from placer.solver.figures import free_in
from placer.solver.problem import PoolPlan, Problem

Value = tuple[int, int]  # (preferred-level misses, cost units), compared lexicographically
UNLIMITED = 1 << 40  # a spanning candidate's room: as many as asked


@dataclass(frozen=True)
class Anchor:
    """Each replica's ``pools`` and router lie inside one of ``domains`` (disjoint, canonical order); a
    domain hosts at most ``cap[i]`` replicas (the spread rule's domains inside it)."""

    colocation: str
    pools: tuple[str, ...]
    domains: tuple[str, ...]
    cap: tuple[int, ...]


def _add(a: Value, b: Value) -> Value:
    return a[0] + b[0], a[1] + b[1]


class Cheapest:
    """Each pool's candidates as (miss, cost, room), sorted, anywhere and per anchor domain: built once, so a
    bound per (domain, k) does not walk every candidate of the cluster (at 100k GPUs it did, 391 x 25k)."""

    def __init__(self, problem: Problem, anchor: Anchor):
        topo = problem.topology
        tele = problem.telemetry_units
        index = {d: i for i, d in enumerate(anchor.domains)}
        self.anywhere: dict[str, list[tuple[int, int, int]]] = {}
        self.inside: dict[tuple[str, str], list[tuple[int, int, int]]] = {}
        for name, plan in problem.pools.items():
            every = []
            for cand in plan.candidates:
                dom = topo.domains[cand.domain]
                usable = [n for n in dom.nodes if n in plan.eligible and topo.nodes[n].free_gpus]
                if not usable:
                    continue
                if cand.kind == "unit":
                    room = free_in(topo, dom.nodes[0], dom) // plan.size
                    option = (int(cand.preferred_miss), cand.units + plan.size * tele[dom.nodes[0]], room)
                else:  # no room limit: as many as asked
                    option = (
                        int(cand.preferred_miss),
                        cand.units + plan.size * min(tele[n] for n in usable),
                        UNLIMITED,
                    )
                every.append(option)
                owner = next((a for a in topo.ancestors(cand.domain) if a in index), None)
                if owner is not None:
                    self.inside.setdefault((name, owner), []).append(option)
            self.anywhere[name] = sorted(every)
        for key in self.inside:
            self.inside[key].sort()
        self.with_router = {a for n in problem.router_nodes for a in topo.ancestors(topo.node_domain[n]) if a in index}

    def of(self, plan: PoolPlan, inside: str | None, count: int) -> Value | None:
        """``count`` instances of a pool at their cheapest candidates (all-reduce and telemetry), as many per
        candidate as its free GPUs allow, inside anchor domain ``inside`` (None: anywhere); None if they do
        not fit."""
        options = self.anywhere[plan.name] if inside is None else self.inside.get((plan.name, inside), [])
        misses = cost = 0
        for miss, units, room in options:
            take = min(count, room)
            misses, cost, count = misses + miss * take, cost + units * take, count - take
            if count == 0:
                return misses, cost
        return None if count else (misses, cost)


def anchored_bound(problem: Problem, anchor: Anchor, cheap: Cheapest, i: int, k: int, kv: int | None) -> Value | None:
    """The anchored pools of ``k`` replicas inside domain ``i``, a router node there for each, and each
    replica's transfer term ``kv`` (None: no transfer container can hold them there)."""
    if k == 0:
        return 0, 0
    if k > anchor.cap[i] or kv is None:
        return None
    d = anchor.domains[i]
    if problem.has_router and d not in cheap.with_router:
        return None
    total: Value = (0, 0)
    for name in anchor.pools:
        plan = problem.pools[name]
        got = cheap.of(plan, d, k * plan.instances)
        if got is None:
            return None
        total = _add(total, got)
    return _add(total, (0, k * kv))


def linked(problem: Problem, anchor: Anchor):
    """The one other replica-level rule (the KV transfer) that ties the anchored pools to further pools, if
    its bound can be taken per anchor domain; None otherwise (then its cheapest container is in the rest)."""
    others = [c for c in problem.colocations if c.name != anchor.colocation]
    if len(others) != 1 or not set(anchor.pools) < set(others[0].pools):
        return None
    return others[0]


def tops(problem: Problem, anchor: Anchor, cheap: Cheapest, link) -> dict[str, int | None]:
    """Per linked pool, what the dearest replica's share of the rest bound costs (None: they do not fit)."""
    out: dict[str, int | None] = {}
    for name in [] if link is None else link.pools:
        if name in anchor.pools:
            continue
        plan = problem.pools[name]
        whole = cheap.of(plan, None, problem.replicas * plan.instances)
        fewer = cheap.of(plan, None, (problem.replicas - 1) * plan.instances)
        out[name] = None if whole is None or fewer is None else whole[1] - fewer[1]
    return out


def kv_term(problem: Problem, anchor: Anchor, cheap: Cheapest, link, d: str, tops: dict[str, int | None]) -> int | None:
    """One replica's transfer cost with its anchored pools in ``d``, plus what keeping the linked pools in
    ``d`` costs above their share of the rest bound.

    The transfer container holds the anchored pools, so it lies inside ``d`` (then so do the linked pools:
    they pay at least their cheapest inside ``d``) or contains ``d`` (the linked pools may go anywhere). The
    rest bound already counts the linked pools of all replicas at their cheapest together; a replica whose
    linked pools sit inside ``d`` pays, beyond that, at least ``inside - top``, where ``top`` is what the
    dearest replica's share of that joint bound costs. So each replica pays at least
    min(inner container + inside - top, outer container)."""
    topo = problem.topology
    inner = [c.units for c in link.containers if topo.contains(d, c.domain)]
    outer = [c.units for c in link.containers if c.domain != d and topo.contains(c.domain, d)]
    options = []
    if outer:
        options.append(min(outer))
    if inner:
        extra: int | None = 0
        for name, top in tops.items():
            inside = cheap.of(problem.pools[name], d, problem.pools[name].instances)
            if inside is None or top is None:
                extra = None
                break
            extra = (extra or 0) + inside[1] - top
        if extra is not None:
            options.append(min(inner) + extra)
    return min(options) if options else None


def rest_bound(problem: Problem, anchor: Anchor, cheap: Cheapest) -> Value | None:
    """Every replica's other pools anywhere, and each replica-level rule at its cheapest container."""
    total: Value = (0, 0)
    for name, plan in problem.pools.items():
        if name in anchor.pools:
            continue
        got = cheap.of(plan, None, problem.replicas * plan.instances)
        if got is None:
            return None
        total = _add(total, got)
    link = linked(problem, anchor)
    kv = sum(min((c.units for c in coloc.containers), default=0) for coloc in problem.colocations if coloc is not link)
    return _add(total, (0, problem.replicas * kv))
