"""Decomposition on the domain choice: when a rule ties part of every replica (some pools and the router)
to one of several disjoint domains, search over which domain each replica takes, best first.

Why: the large spec on DGX (``router.near: {pool: decode, level: leaf}``, KV floor met anywhere under the
spine) was not proven at 10k GPUs in 60 s. Removing the spread rule changed nothing; removing the router
rule proved it; fixing which leaf holds each replica's decode pool and router proved the rest in about 2 s
(issue 14). The monolithic model's relaxation spreads a replica's anchored instances over every leaf, each
container literal a small fraction, and so prices them at the cheapest GPUs of the whole cluster. Here the
leaf is chosen outside the model, where a per-leaf bound sees that all of them must fit in that one leaf.

Phase 1 bounds, per anchor domain ``d`` and replica count ``k``, what the anchored pools of ``k`` replicas
cost inside ``d`` (each instance at its cheapest candidate there, with the room each candidate has), and
once, what the other pools of every replica cost anywhere plus the cheapest KV container. Where every
candidate is one whole node (placer.solver.anchor_bound), these give way to a Lagrangian bound that also
separates by domain but prices each node class's capacity, so that the pools of different replicas no
longer count the same cheap nodes, and prices each replica's transfer by whether its linked pools stay
inside ``d``. Phase 2 walks the assignments (how many replicas each domain hosts) in increasing bound
order, A* with an exact suffix bound. A full assignment comes up again with its min-cost-flow bound (every
pool of every replica on shared capacity), split by branch and bound on each replica's transfer case, each
case an entry of the same heap; only one whose flow bound beats the best placement is solved as a model
with each replica's anchor fixed (``Problem.pins``), which presolve shrinks to a small problem. It stops
when the best placement found is no worse than the bound of every entry left: that placement is optimal.
Out of budget, the best placement found is returned, unproven, with the least open bound.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from placer.solver.anchor_bound import ARC_WORK_S, PRICE_WORK_S, AssignmentBound, applies
from placer.solver.anchor_cheap import Anchor, Cheapest, anchored_bound, kv_term, linked, rest_bound, tops
from placer.solver.cells import node_marks
from placer.solver.greedy import GreedyReplica
from placer.solver.options import CLOCK_NOTE, Budget, Outcome, SolveOptions, Unplaceable
from placer.solver.problem import Problem
from placer.solver.search import greedy_outcome, search

Value = tuple[int, int]  # (preferred-level misses, cost units), compared lexicographically
FIRST_SHARE = 0.5  # of the work left, at most, for one fixed-anchor model (the first is usually the answer)
# Work charged per entry the walk considers (building it and the heap push: 1.5-2 us measured on the 2-core
# machine), so a walk over very many domains is ended by the work budget, not by the wall-clock guard.
PUSH_WORK_S = 1.5e-6
MIN_SHARE_S = 0.3
EXACT = "exact"  # a full assignment's stage once only a fixed-anchor model can bound it further


def anchor_of(problem: Problem) -> Anchor | None:
    """The anchor rule that applies, or None: a router colocation over disjoint domains that does not cover
    every pool (when it does, placer.solver.decompose separates the problem exactly), no running instances,
    and replicas either not spread or spread over a level no broader than the anchor's domains."""
    if problem.kept is not None or problem.pins or problem.replicas < 1:
        return None
    topo = problem.topology
    rule = next((c for c in problem.colocations if c.router and set(c.pools) != set(problem.pools)), None)
    if rule is None or len(rule.containers) < 2:
        return None
    domains = tuple(sorted({c.domain for c in rule.containers}, key=lambda d: topo.order[d]))
    if any(topo.contains(a, b) for a in domains for b in domains if a != b):
        return None  # nested containers: the choice is not one of disjoint domains
    cap = []
    for d in domains:
        if problem.spread_level is None:
            cap.append(problem.replicas)
            continue
        owner = topo.domain_at(d, problem.spread_level)
        if owner == d:
            cap.append(1)
        elif owner is None:  # the spread level is narrower: d hosts one replica per spread domain in it
            level = problem.spread_level
            inside = {c for n in topo.domains[d].nodes for c in node_marks(topo, level, n)}
            cap.append(min(problem.replicas, len(inside)))
        else:
            return None  # several anchor domains share one spread domain: not modelled here
    return Anchor(rule.name, rule.pools, domains, tuple(cap))


def solve_by_anchor(
    problem: Problem, anchor: Anchor, options: SolveOptions, budget: Budget, start: list[GreedyReplica]
) -> Outcome | None:
    """The best placement by fixed-anchor models, starting from the greedy's ``start``; None when this
    search does not apply after all (the greedy did not place every replica; one model answers how many
    fit). Raises Unplaceable."""
    if len(start) < problem.replicas:
        return None  # how many replicas fit is the first question; the monolithic model answers it
    best: Outcome = greedy_outcome(problem, start)
    cheap = Cheapest(problem, anchor)
    rest = rest_bound(problem, anchor, cheap)
    if rest is None:
        return None
    link = linked(problem, anchor)
    top_share = tops(problem, anchor, cheap, link)
    kv = [0 if link is None else kv_term(problem, anchor, cheap, link, d, top_share) for d in anchor.domains]
    per_domain = [
        [anchored_bound(problem, anchor, cheap, i, k, kv[i]) for k in range(problem.replicas + 1)]
        for i in range(len(anchor.domains))
    ]
    # Where the flow bound applies, the walk is ordered by the Lagrangian bound (capacity priced at LP duals,
    # see _priced), and a full assignment comes up again with its flow bound, transfer case by case: only
    # one whose flow bound beats the best placement is solved exactly.
    flow = AssignmentBound(problem, anchor.domains, anchor.colocation, anchor.pools, link) if applies(problem) else None
    if flow is not None:
        priced = _priced(problem, anchor, flow, per_domain, budget, _assignment(problem, anchor, start))
        if priced is None:
            return None
        rest, per_domain = priced
    suffix = _suffix(per_domain, anchor, problem.replicas)
    # An entry's stage: None while the walk builds it; for a full assignment under the flow bound, the
    # transfer cases still to split (a tuple, see AssignmentBound.split, evaluated best first like every
    # other entry); EXACT when only a fixed-anchor model can tell more.
    heap: list[tuple[Value, int, int, int, Value, tuple[int, ...], object]] = []
    top = suffix[0][problem.replicas]
    if top is None:
        return None
    seq = 0
    heapq.heappush(heap, (_add(rest, top), seq, 0, problem.replicas, (0, 0), (), None))
    budget.spend(PUSH_WORK_S)
    proven = False
    solved = flows = 0
    open_bound: Value | None = None  # the least bound of an assignment popped but not solved to the end
    notes: list[str] = []
    while heap:
        bound, _s, j, left, partial, counts, stage = heap[0]
        if (best.misses, best.cost) <= bound:
            proven = True
            break
        if budget.out():
            break
        heapq.heappop(heap)
        if left == 0 and stage is None:
            stage = (None,) * len(counts) if flow is not None else EXACT
        if left == 0 and stage is not EXACT:
            assert flow is not None and isinstance(stage, tuple)
            got_bound, arcs, split = flow.of(counts, 0, stage)
            budget.spend(ARC_WORK_S * arcs)
            flows += 1
            if got_bound is None:
                continue  # no flow holds these replicas there (in this case), so no placement does
            nxt_bound = max(bound, (0, got_bound))
            cases = (
                [EXACT]
                if split is None
                else [stage[:split] + (b,) + stage[split + 1 :] for b in range(counts[split] + 1)]
            )
            for case in cases:
                seq += 1
                heapq.heappush(heap, (nxt_bound, seq, j, left, partial, counts, case))
            budget.spend(PUSH_WORK_S * len(cases))
            continue
        if left == 0:
            solved += 1
            share = budget.child(max(MIN_SHARE_S, FIRST_SHARE * budget.work_left))
            try:
                got = search(_pinned(problem, anchor, counts), options, share)
            except Unplaceable as exc:
                if exc.proven:
                    continue  # not every replica fits with their anchors there
                open_bound = bound
                break  # out of work inside it: what is in hand stands
            if (got.misses, got.cost) < (best.misses, best.cost):
                best = got
            if not got.proven:
                open_bound = bound
                break  # its value is not known, so no later bound can prove anything
            continue
        for k in range(0, min(left, anchor.cap[j]) + 1):
            step = per_domain[j][k]
            after = suffix[j + 1][left - k]
            if step is None or after is None:
                continue
            seq += 1
            nxt = _add(partial, step)
            item = (_add(rest, _add(nxt, after)), seq, j + 1, left - k, nxt, (*counts, k), None)
            heapq.heappush(heap, item)
        budget.spend(PUSH_WORK_S * (min(left, anchor.cap[j]) + 1))
    if not heap and not proven and open_bound is None:
        proven = True  # every assignment was solved to the end (or none remains that could hold the replicas)
    if options.log:
        options.log(
            f"[by anchor] {solved} fixed-{anchor.colocation} model(s) and {flows} flow bound(s) over "
            f"{len(anchor.domains)} domains"
        )
    if budget.clock_cut:
        notes.append(CLOCK_NOTE)
    if not proven:
        notes.append("work budget spent while choosing each replica's domain; the best placement found is returned")
    # Unproven, every placement not yet seen costs at least the least bound still open (assignments left in
    # the heap, and one cut short). The bounds are lexicographic (misses first): they bound the cost only
    # when they have the best placement's misses.
    still_open = [b for b in (heap[0][0] if heap else None, open_bound) if b is not None]
    low = min(still_open) if still_open else None
    cost_bound = best.cost if proven else (low[1] if low is not None and low[0] == best.misses else None)
    return replace(best, proven=proven, bound=cost_bound, notes=notes)


def _assignment(problem: Problem, anchor: Anchor, start: list[GreedyReplica]) -> tuple[int, ...] | None:
    """How many of the greedy's replicas have their router in each anchor domain (None: one is outside)."""
    topo = problem.topology
    counts = [0] * len(anchor.domains)
    for rep in start:
        if rep.router is None:
            return None
        home = topo.node_domain[rep.router]
        i = next((i for i, d in enumerate(anchor.domains) if topo.contains(d, home)), None)
        if i is None:
            return None
        counts[i] += 1
    return tuple(counts)


def _priced(problem: Problem, anchor: Anchor, flow: AssignmentBound, per_domain, budget: Budget, at):
    """(rest, per_domain) of the Lagrangian bound; an entry the per-domain bound found impossible stays so.

    Prices: the LP duals of the greedy's assignment ``at`` or of the relaxation with no replica assigned,
    whichever gives the higher bound at the root of the walk. Measured on the large spec at 10k DGX (seeds
    0, 1, 3), the better of the two brought 11-92 assignments up before the proof, the other 383-6,822;
    with no prices over 20,000 (bench/NOTES.md)."""
    best = None
    for counts, left in ([(at, 0)] if at is not None else []) + [((), problem.replicas)]:
        prices = flow.prices(counts, left)
        budget.spend(PRICE_WORK_S)
        if prices is None:
            continue
        tables = flow.tables(prices, anchor.cap, problem.replicas)
        if tables is None:
            return None  # a pool does not fit even with capacity priced: no assignment holds the replicas
        const, per = tables
        priced = [
            [None if old is None or new is None else (0, new) for old, new in zip(row, per[i], strict=False)]
            + [None] * (len(row) - len(per[i]))
            for i, row in enumerate(per_domain)
        ]
        top = _suffix(priced, anchor, problem.replicas)[0][problem.replicas]
        if top is not None and (best is None or _add((0, const), top) > best[0]):
            best = (_add((0, const), top), (0, const), priced)
    return None if best is None else best[1:]


def _add(a: Value, b: Value) -> Value:
    return a[0] + b[0], a[1] + b[1]


def _suffix(per_domain: list[list[Value | None]], anchor: Anchor, replicas: int) -> list[list[Value | None]]:
    """suffix[j][r]: the least bound for r replicas over domains j.. (None: they cannot host r)."""
    n = len(anchor.domains)
    suffix: list[list[Value | None]] = [[None] * (replicas + 1) for _ in range(n + 1)]
    suffix[n][0] = (0, 0)
    for j in range(n - 1, -1, -1):
        for r in range(replicas + 1):
            options = []
            for k in range(0, min(r, anchor.cap[j]) + 1):
                step, after = per_domain[j][k], suffix[j + 1][r - k]
                if step is not None and after is not None:
                    options.append(_add(step, after))
            suffix[j][r] = min(options) if options else None
    return suffix


def _pinned(problem: Problem, anchor: Anchor, counts: tuple[int, ...]) -> Problem:
    """The problem with replica r's anchor fixed: the first counts[0] replicas in domain 0, and so on."""
    pins: dict[tuple[int, str], str] = {}
    r = 0
    for i, k in enumerate(counts):
        for _ in range(k):
            pins[(r, anchor.colocation)] = anchor.domains[i]
            r += 1
    # Candidates, containers and router nodes outside every pinned domain can serve no replica: leave
    # them out of the model rather than to presolve (the model is then a fraction of the whole).
    topo = problem.topology
    used = sorted(set(pins.values()), key=lambda d: topo.order[d])

    def inside(domain: str) -> bool:
        return any(topo.contains(d, domain) for d in used)

    pools = {
        name: replace(plan, candidates=tuple(c for c in plan.candidates if inside(c.domain)))
        if name in anchor.pools
        else plan
        for name, plan in problem.pools.items()
    }
    colocations = [
        replace(c, containers=tuple(k for k in c.containers if k.domain in used)) if c.name == anchor.colocation else c
        for c in problem.colocations
    ]
    routers = tuple(n for n in problem.router_nodes if inside(topo.node_domain[n]))
    return replace(
        problem, pools=pools, colocations=colocations, router_nodes=routers, pins=pins, min_replicas=problem.replicas
    )
