"""Exact decomposition by domain: when every replica must sit inside one of several disjoint domains, solve
each domain on its own and combine the answers by dynamic programming.

Why: a KV-transfer floor that only a rack (NVL72) or an InfiniBand leaf meets puts each replica inside one
such domain, but in the monolithic model the LP relaxation spreads a replica's instances over all of them
(each container literal at 1/|domains|), so its bound is weak and proofs at 10k GPUs take seconds
(bench/NOTES.md). Separated, the cost is a sum over domains: a domain's best (misses, cost) for hosting k
replicas depends only on what is inside it (capacity, CPU, links and telemetry never cross a domain
boundary). SCALING.md measured this decomposition at 0.2-1.9 s where the monolithic model did not prove.

The per-domain answers are computed lazily, best-first: a cheap lower bound stands in for every domain not
solved yet; the DP picks the best selection under those estimates; every unsolved entry it picked is
solved exactly (a small CP-SAT model through solve.search) and the DP runs again. When the DP's pick
consists only of solved entries, it is optimal: its true value equals its estimate, which is no worse than
any other selection's estimate, which is no worse than that selection's true value.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

from placer.model.levels import LEVEL_RANK
from placer.model.placement import ReplicaPlacement
from placer.solver.figures import free_in
from placer.solver.greedy import greedy
from placer.solver.options import CLOCK_NOTE, Budget, Outcome, SolveOptions, Unplaceable
from placer.solver.problem import Problem
from placer.solver.search import _forced_misses, greedy_outcome, search
from placer.topology.graph import Topology

INFEASIBLE = None  # a (domain, k) entry that has no placement
# The least time one domain's model is given when several are still to be solved: an NVL72 rack's model
# proved in ~20 ms on average here (73 of them in 1.4 s on GB200 10k, before the second lower bound), so
# 0.5 s leaves a wide margin for a loaded machine while a 10 s limit still covers ~20 domains that hit it.
MIN_SHARE_S = 0.5
Value = tuple[int, int]  # (preferred-level misses, cost units): compared lexicographically
Estimate = Callable[[int, int], "Value | None"]  # (domain index, replicas) -> value or lower bound


@dataclass(frozen=True)
class Split:
    """Every replica lies wholly inside one of ``domains`` (disjoint, canonical order). With replicas spread
    over a level at or above these domains, ``groups`` lists the domains sharing a spread-level domain and
    each group hosts at most one replica (``one_per_group``); otherwise every group is one domain."""

    domains: tuple[str, ...]
    groups: tuple[tuple[int, ...], ...]
    one_per_group: bool


def split_of(problem: Problem) -> Split | None:
    """The decomposition that applies to the problem, or None (then one model is solved).

    It applies when one replica-level rule (colocation) covers every pool, at least two disjoint domains
    satisfy it, and every other rule (the router's included) can only be met inside one of those."""
    if problem.kept is not None:
        return None  # running instances tie replicas to where they are; one model handles them
    topo = problem.topology
    envelope = next((c for c in problem.colocations if set(c.pools) == set(problem.pools)), None)
    if envelope is None:
        return None
    listed = {c.domain for c in envelope.containers}
    maximal = [d for d in listed if not any(a in listed for a in topo.ancestors(d)[1:])]
    if len(maximal) < 2:
        return None
    # A rule whose domain is broader than one of these could be met across two of them. (One disjoint
    # from all of them can never hold a replica's pools, so it is simply never used.)
    broader = {a for d in maximal for a in topo.ancestors(d)[1:]}
    if any(c.domain in broader for coloc in problem.colocations for c in coloc.containers):
        return None
    if problem.has_router and not any(c.router for c in problem.colocations):
        return None  # the router may sit anywhere, outside the replica's domain
    domains = tuple(sorted(maximal, key=lambda d: topo.order[d]))
    level = problem.spread_level
    if level is None:
        return Split(domains, tuple((i,) for i in range(len(domains))), False)
    owners = [topo.domain_at(d, level) for d in domains]
    if any(owner is None for owner in owners):
        named = [owner for owner in owners if owner is not None]
        if len(named) != len(set(named)):
            return None  # some domains share spread-level domains, others hold several: one model
        # No two domains share a spread-level domain: each holds whole ones (the spread level is narrower) or
        # is alone inside its own, so every spread-level domain (even a spanning instance's) lies inside one
        # of them and the per-domain models enforce the spread.
        return Split(domains, tuple((i,) for i in range(len(domains))), False)
    by_spread: dict[str, list[int]] = {}
    for i, owner in enumerate(owners):
        by_spread.setdefault(owner, []).append(i)  # type: ignore[arg-type]
    return Split(domains, tuple(tuple(g) for g in by_spread.values()), True)


def partition(problem: Problem, split: Split) -> list[Problem]:
    """The problem confined to each split domain (one pass over candidates, not one per domain); a part
    is solved for k replicas as ``replace(part, replicas=k, min_replicas=k)``."""
    topo = problem.topology
    index = {d: i for i, d in enumerate(split.domains)}
    owner_memo: dict[str, int | None] = {}

    def owner(dom: str) -> int | None:
        if dom not in owner_memo:
            owner_memo[dom] = next((index[a] for a in topo.ancestors(dom) if a in index), None)
        return owner_memo[dom]

    node_owner = {n: owner(topo.node_domain[n]) for d in split.domains for n in topo.domains[d].nodes}
    # Bucket every candidate, container and router node by its owner once (in their order), rather than
    # filtering all of them again for each domain: O(candidates), not O(domains x candidates).
    candidates: dict[str, dict[int | None, list]] = {name: defaultdict(list) for name in problem.pools}
    for name, plan in problem.pools.items():
        for c in plan.candidates:
            candidates[name][owner(c.domain)].append(c)
    containers: list[dict[int | None, list]] = []
    for c in problem.colocations:
        buckets: dict[int | None, list] = defaultdict(list)
        for k in c.containers:
            buckets[owner(k.domain)].append(k)
        containers.append(buckets)
    routers: dict[int | None, list] = defaultdict(list)
    for n in problem.router_nodes:
        routers[node_owner.get(n)].append(n)
    unlike: dict[int | None, list] = defaultdict(list)
    for d in problem.unlike_domains:
        unlike[owner(d)].append(d)
    parts = []
    for i, dom in enumerate(split.domains):
        nodes = frozenset(topo.domains[dom].nodes)
        pools = {
            name: replace(plan, eligible=plan.eligible & nodes, candidates=tuple(candidates[name].get(i, ())))
            for name, plan in problem.pools.items()
        }
        colocations = [
            replace(c, containers=tuple(b.get(i, ()))) for c, b in zip(problem.colocations, containers, strict=True)
        ]
        parts.append(
            replace(
                problem,
                pools=pools,
                colocations=colocations,
                router_nodes=tuple(routers.get(i, ())),
                unlike_domains=tuple(unlike.get(i, ())),
            )
        )
    return parts


def lower_bound(problem: Problem) -> Value | None:
    """A bound on one replica's (misses, cost) inside a restricted problem, ignoring how instances share
    capacity; None when some part of a replica has nowhere to go."""
    topo = problem.topology
    tele = problem.telemetry_units
    first = _bound_per_instance(problem)
    if first is None:
        return INFEASIBLE
    # Telemetry is paid per GPU used, so a replica pays at least its GPU count's cheapest free GPUs; with
    # the all-reduce units alone per instance, that is a second bound, tighter when telemetry varies.
    misses = units = 0
    for plan in problem.pools.values():
        ranked = sorted((int(c.preferred_miss), c.units) for c in plan.candidates)
        if not ranked:
            return INFEASIBLE
        misses += ranked[0][0] * plan.instances
        units += ranked[0][1] * plan.instances
    eligible = set().union(*(plan.eligible for plan in problem.pools.values()))
    gpus = sorted(tele[n] for n in eligible for _g in topo.nodes[n].free_gpus)
    need = sum(plan.size * plan.instances for plan in problem.pools.values())
    if len(gpus) < need:
        return INFEASIBLE
    second = (misses, units + sum(gpus[:need]) + _kv_bound(problem))
    return max(first, second)


def _kv_bound(problem: Problem) -> int:
    return sum(min((c.units for c in coloc.containers), default=0) for coloc in problem.colocations)


def _bound_per_instance(problem: Problem) -> Value | None:
    """Each instance at its cheapest candidate (all-reduce and telemetry), as many as fit per node."""
    topo = problem.topology
    tele = problem.telemetry_units
    misses = cost = 0
    for plan in problem.pools.values():
        options: list[tuple[int, int, int]] = []  # (miss, cost, how many instances it can take)
        for cand in plan.candidates:
            dom = topo.domains[cand.domain]
            usable = [n for n in dom.nodes if n in plan.eligible and topo.nodes[n].free_gpus]
            if not usable:
                continue
            cheapest = min(tele[n] for n in usable)
            if cand.kind == "unit":
                free = free_in(topo, dom.nodes[0], dom)
                options.append(
                    (int(cand.preferred_miss), cand.units + plan.size * tele[dom.nodes[0]], free // plan.size)
                )
            else:
                options.append((int(cand.preferred_miss), cand.units + plan.size * cheapest, plan.instances))
        need = plan.instances
        for miss, units, room in sorted(options):
            take = min(need, room)
            misses, cost, need = misses + miss * take, cost + units * take, need - take
            if need == 0:
                break
        if need:
            return INFEASIBLE
    if any(not coloc.containers for coloc in problem.colocations):
        return INFEASIBLE
    cost += _kv_bound(problem)
    if problem.has_router and not problem.router_nodes:
        return INFEASIBLE
    return misses, cost


def solve_by_domain(problem: Problem, split: Split, options: SolveOptions, budget: Budget) -> Outcome:
    """The best selection of (domain, replicas) by lazy, exact DP; raises Unplaceable like solve.search."""

    t0 = time.perf_counter()
    topo = problem.topology
    per_replica = sum(plan.size * plan.instances for plan in problem.pools.values())
    room = [
        min(
            _cap(problem, split, d),
            topo.free_in_domain(d) // max(1, per_replica),
        )
        for d in split.domains
    ]
    parts = partition(problem, split)
    bounds = [lower_bound(part) if room[i] else INFEASIBLE for i, part in enumerate(parts)]
    solved: dict[tuple[int, int], Outcome | None] = {}  # (domain index, k) -> answer, None if infeasible
    searched = 0

    def estimate(i: int, k: int) -> Value | None:
        """The entry's value if solved, else a lower bound: k times one replica's proven value or bound."""
        if k == 0:
            return 0, 0
        if k > room[i] or bounds[i] is INFEASIBLE:
            return INFEASIBLE
        if any((i, j) in solved and solved[(i, j)] is None for j in range(1, k + 1)):
            return INFEASIBLE  # k replicas fit wherever k + 1 do
        got = solved.get((i, k))
        if got is not None:
            return got.misses, got.cost
        one = solved.get((i, 1))
        base = (one.misses, one.cost) if one is not None and one.proven else bounds[i]
        assert base is not None
        return base[0] * k, base[1] * k

    forced = _forced_misses(problem, 1)

    def least_miss_cost(i: int, k: int) -> int | None:
        """A lower bound on the cost of k replicas in domain i with the fewest misses the spec allows
        (``forced`` each); None when they cannot have so few. Estimates order misses first, so they bound
        the cost only at equal misses: a proven entry's cost, its search's bound, k times one replica's."""
        if k > room[i] or bounds[i] is INFEASIBLE or bounds[i][0] > forced:
            return None
        if any((i, j) in solved and solved[(i, j)] is None for j in range(1, k + 1)):
            return None  # proven infeasible
        got, one = solved.get((i, k)), solved.get((i, 1))
        if got is not None and got.proven:
            return got.cost if got.misses == k * forced else None
        if one is not None and one.proven and one.misses > forced:
            return None  # one replica alone misses more here
        lower = [bounds[i][1] * k if bounds[i][0] == forced else 0]
        lower += [one.cost * k] if one is not None and one.proven else []
        lower += [got.bound] if got is not None and got.misses == k * forced and got.bound is not None else []
        return max(lower)

    def solve_entry(i: int, k: int, share: int) -> None:
        """Solve one entry within its share of the work left, so one hard domain cannot starve the rest."""
        nonlocal searched
        searched += 1
        log = options.log
        tag = f"{split.domains[i]} x{k}"
        sub_options = replace(options, log=(lambda line: log(f"[{tag}] {line}")) if log else None)
        try:
            entry = budget.child(max(MIN_SHARE_S, budget.work_left / share))
            solved[(i, k)] = search(replace(parts[i], replicas=k, min_replicas=k), sub_options, entry)
        except Unplaceable as exc:
            if not exc.proven:
                raise TimeoutError from None
            solved[(i, k)] = None

    timed_out = False
    while True:
        pick = _best_selection(split, room, problem.replicas, estimate)
        todo = [(i, k) for i, k in pick if k and (i, k) not in solved]
        if not todo:
            break
        try:
            for j, (i, k) in enumerate(todo):
                if budget.out():
                    raise TimeoutError
                solve_entry(i, k, len(todo) - j)
        except TimeoutError:
            timed_out = True
            break
    if timed_out:
        pick = _best_selection(
            split, room, problem.replicas, lambda i, k: estimate(i, k) if k == 0 or (i, k) in solved else INFEASIBLE
        )
    chosen = [(i, k) for i, k in sorted(pick) if k]
    answers = [solved[e] for e in chosen]
    n = sum(k for _i, k in chosen)
    if timed_out:
        fallback = greedy_outcome(problem, greedy(problem, options.greedy_units()))
        if len(fallback.replicas) > n and len(fallback.replicas) >= problem.min_replicas:
            # which limit: the wall clock's answer depends on the machine, and --time-limit is not the remedy
            cut = CLOCK_NOTE if budget.clock_cut else "time limit hit while solving domain by domain"
            notes = [f"{cut}; the greedy placement is returned"]
            bound = _least_miss_bound(problem, split, room, fallback, least_miss_cost)
            return replace(fallback, bound=bound, notes=notes, seconds={"search": time.perf_counter() - t0})
    if n < problem.min_replicas or (timed_out and n == 0):
        raise Unplaceable(not timed_out)
    replicas: list[ReplicaPlacement] = []
    notes: list[str] = []
    for out in answers:
        assert out is not None
        replicas += [ReplicaPlacement(len(replicas) + j, r.instances, r.router) for j, r in enumerate(out.replicas)]
        notes += [x for x in out.notes if x not in notes]
    misses = sum(out.misses for out in answers if out)
    cost = sum(out.cost for out in answers if out)
    proven = not timed_out and all(out.proven for out in answers if out)
    if timed_out:
        notes.append("time limit hit while solving domain by domain; the best complete placement found is returned")
    if budget.clock_cut and CLOCK_NOTE not in notes:
        notes.append(CLOCK_NOTE)
    if options.log:
        options.log(
            f"[by domain] {searched} model(s) solved over {len(split.domains)} "
            f"{_level_word(topo, split.domains)} domains; the rest were excluded by their lower bound"
        )
    out = Outcome(tuple(replicas), misses, cost, cost if proven else None, proven, notes, {})
    bound = cost if proven else _least_miss_bound(problem, split, room, out, least_miss_cost)
    return replace(out, bound=bound, seconds={"search": time.perf_counter() - t0})


def _least_miss_bound(
    problem: Problem,
    split: Split,
    room: list[int],
    found: Outcome,
    least_miss_cost: Callable[[int, int], int | None],
) -> int | None:
    """A cost bound for a cut-short search that placed every replica with the fewest misses the spec allows:
    the least sum of per-entry bounds at those misses over every selection of all replicas. The staged
    optimum is such a selection, each of its entries at exactly its forced misses (none can have fewer, and
    they add up). None otherwise: estimates ordered misses first bound no cost at other misses."""
    n = len(found.replicas)
    if n < problem.replicas or found.misses > _forced_misses(problem, n):
        return None

    def as_value(i: int, k: int) -> Value | None:
        c = least_miss_cost(i, k)
        return None if c is None else (0, c)

    chosen = _best_selection(split, room, n, as_value)
    if sum(k for _i, k in chosen) < n:
        return None  # cannot happen while the placement itself has these misses; claim nothing then
    bound = sum(as_value(i, k)[1] for i, k in chosen if k)  # type: ignore[index]
    return bound if bound <= found.cost else None


def _cap(problem: Problem, split: Split, domain: str) -> int:
    """The most replicas a domain of the split may host: one where they are spread over a level at or above
    it (a group or a domain inside one spread-level domain), so no entry of more is ever solved."""
    level = problem.spread_level
    if split.one_per_group or (level is not None and problem.topology.domain_at(domain, level) is not None):
        return 1
    return problem.replicas


def _level_word(topo: Topology, domains: tuple[str, ...]) -> str:
    levels = sorted({topo.domains[d].level for d in domains}, key=LEVEL_RANK.__getitem__)
    return "/".join(levels)


def _best_selection(split: Split, room: list[int], replicas: int, estimate: Estimate) -> list[tuple[int, int]]:
    """How many replicas each domain hosts: most replicas first, then least (misses, cost) under
    ``estimate``; ties go to the earlier domain in canonical order (deterministic output)."""
    # best[n] = (value, choices) for n replicas placed over the groups seen so far
    best: dict[int, tuple[Value, list[tuple[int, int]]]] = {0: ((0, 0), [])}
    for group in split.groups:
        options: list[tuple[int, int, Value]] = []  # (domain, k, value)
        for i in group:
            top = room[i]
            for k in range(1, top + 1):
                v = estimate(i, k)
                if v is not None:
                    options.append((i, k, v))
        nxt = dict(best)
        for n, (val, choice) in best.items():
            for i, k, v in options:
                m = n + k
                if m > replicas:
                    continue
                cand = ((val[0] + v[0], val[1] + v[1]), [*choice, (i, k)])
                if m not in nxt or cand[0] < nxt[m][0]:
                    nxt[m] = cand
        best = nxt
    n = max(best)
    return best[n][1]
