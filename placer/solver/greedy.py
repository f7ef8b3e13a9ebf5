"""A topology-aware greedy in the style of Kueue TAS best fit, used to warm-start the solver.

Phase 1 (per replica, one at a time): walk the replica-level containers (KV-transfer domain, router
domain) cheapest first and keep the best of the first few that fit. Phase 2: inside them, give each
instance the candidate with the fewest preferred-level misses, then the lowest all-reduce cost, then the
tightest fit (fewest free GPUs left), then canonical order; take concrete GPUs at once. A replica that
fits nowhere ends the walk (replicas are identical, so the next would not fit either).

Cost: linear in the cluster per instance. A container limits an instance to the candidates in its subtree,
found by bisection on the candidates' pre-order positions (a subtree is one interval of the pre-order), and
each trial works on a copy-on-write layer over the state instead of a copy of it. The walk counts its work
(candidates looked at, nodes visited) and stops at ``work_limit``: what it placed by then is the warm start,
the same on every machine.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from placer.solver.cells import node_marks
from placer.solver.problem import Candidate, Container, PoolPlan, Problem

GREEDY_CONTAINERS = 12  # fitting container choices compared per replica (the first one is often poor)


@dataclass
class GreedyInstance:
    pool: str
    index: int
    candidate: int  # index into the pool's candidates
    pods: list[tuple[int, list[int]]]  # (node index, GPU indices)


@dataclass
class GreedyReplica:
    instances: list[GreedyInstance]
    containers: dict[str, int] = field(default_factory=dict)  # colocation name -> container index
    router: int | None = None


class _Layer(dict):  # type: ignore[type-arg]
    """A dict that reads through to ``base`` for keys it does not hold: a trial's changes, not a copy."""

    def __init__(self, base: dict) -> None:
        super().__init__()
        self.base = base

    def __missing__(self, key):
        return self.base[key]


class Lazy(dict):  # type: ignore[type-arg]
    """A node's entry read from the cluster the first time it is asked for: a walk touches few of the
    nodes, and a batch runs hundreds of walks on a 10,000-GPU cluster."""

    def __init__(self, read) -> None:
        super().__init__()
        self.read = read

    def __missing__(self, key):
        value = self[key] = self.read(key)
        return value


@dataclass
class _State:
    free: dict[int, list[int]]  # lists are replaced, never changed in place, so layers may share them
    cpu: dict[int, int]
    mem: dict[int, int]
    spread_used: set[str]

    def trial(self) -> _State:
        return _State(_Layer(self.free), _Layer(self.cpu), _Layer(self.mem), set(self.spread_used))

    def commit(self, trial: _State) -> None:
        """Make a trial's changes this state's own (the other trials are dropped)."""
        self.free.update(trial.free)
        self.cpu.update(trial.cpu)
        self.mem.update(trial.mem)
        self.spread_used = trial.spread_used


@dataclass
class _Scope:
    """A pool's candidates inside one choice of containers, in the walk's order, with what the walk reads
    of each: its static key and its eligible nodes (all computed once, when the scope is ranked)."""

    candidates: list[int]
    statics: list[tuple[int, int]]
    nodes: list[list[int]]


class _Scopes:
    """Per pool, its candidates sorted by pre-order position, so the candidates under a container domain
    are one bisection away; and memoised per-candidate lookups the walk repeats."""

    def __init__(self, problem: Problem) -> None:
        topo = problem.topology
        self.problem = problem
        self.sorted: dict[str, list[int]] = {}
        self.keys: dict[str, list[int]] = {}
        for name, plan in problem.pools.items():
            ranked = sorted(range(len(plan.candidates)), key=lambda ci: (topo.order[plan.candidates[ci].domain], ci))
            self.sorted[name] = ranked
            self.keys[name] = [topo.order[plan.candidates[ci].domain] for ci in ranked]
        self._nodes: dict[tuple[str, int], list[int]] = {}
        self._static: dict[tuple[str, int], tuple[int, int]] = {}
        self._in_scope: dict[tuple[str, int, int], _Scope] = {}
        self._spread: dict[str, str | None] = {}
        self._marks: dict[int, tuple[str, ...]] = {}
        self.work = 0  # candidates looked at and nodes visited: the deterministic measure of the walk
        self.limit: int | None = None
        rank = topo.node_ranks
        keys = [rank[n] for n in problem.router_nodes]
        # Router nodes come in pre-order, so those under a container are one bisection away too.
        self.router_keys = keys if all(a <= b for a, b in zip(keys, keys[1:], strict=False)) else None

    def router_nodes(self, scope: str | None):
        """The router candidates inside the domain ``scope`` (all of them for None), in their order."""
        nodes = self.problem.router_nodes
        if scope is None:
            return nodes
        topo = self.problem.topology
        if self.router_keys is None:
            return [n for n in nodes if topo.contains(scope, topo.node_domain[n])]
        start, end = topo.subtree_interval(scope)
        return nodes[bisect_left(self.router_keys, start) : bisect_left(self.router_keys, end)]

    def over(self) -> bool:
        return self.limit is not None and self.work > self.limit

    def in_scope(self, pool: str, combo: dict) -> _Scope:
        """The candidates of ``pool`` inside every container of ``combo`` that covers it, best static key
        first (see ``static``), so an instance's walk can stop at the first key worse than a fit."""
        topo = self.problem.topology
        lo, hi = 0, len(topo.order)
        for coloc in self.problem.colocations:
            if pool in coloc.pools and coloc.name in combo:
                start, end = topo.subtree_interval(combo[coloc.name][1].domain)
                lo, hi = max(lo, start), min(hi, end)
        memo = self._in_scope.get((pool, lo, hi))
        if memo is not None:
            return memo
        keys = self.keys[pool]
        found = self.sorted[pool][bisect_left(keys, lo) : bisect_left(keys, hi)] if lo < hi else []
        plan = self.problem.pools[pool]
        self.work += 2 * len(found) + 1
        ranked = sorted(found, key=lambda ci: (self.static(plan, ci), ci))
        got = self._in_scope[(pool, lo, hi)] = _Scope(
            ranked, [self.static(plan, ci) for ci in ranked], [self.nodes(plan, ci) for ci in ranked]
        )
        return got

    def static(self, pool: PoolPlan, ci: int) -> tuple[int, int]:
        """The part of a candidate's greedy key that does not change as GPUs are taken: (preferred-level
        miss, all-reduce units + the cheapest telemetry of its nodes for the whole instance)."""
        key = (pool.name, ci)
        got = self._static.get(key)
        if got is None:
            cand, nodes = pool.candidates[ci], self.nodes(pool, ci)
            got = self._static[key] = (int(cand.preferred_miss), cand.units + pool.size * _tele(self.problem, nodes))
        return got

    def nodes(self, pool: PoolPlan, ci: int) -> list[int]:
        key = (pool.name, ci)
        got = self._nodes.get(key)
        if got is None:
            dom = self.problem.topology.domains[pool.candidates[ci].domain]
            got = self._nodes[key] = [n for n in dom.nodes if n in pool.eligible]
            self.work += len(dom.nodes)
        return got

    def spread_domain(self, domain: str) -> str | None:
        """The spread-level domain containing ``domain``; None when ``domain`` is broader than that level."""
        if domain not in self._spread:
            level = self.problem.spread_level
            self._spread[domain] = None if level is None else self.problem.topology.domain_at(domain, level)
        return self._spread[domain]

    def marks(self, node: int) -> tuple[str, ...]:
        """The spread-level domains GPUs of ``node`` touch, as the model counts them (placer.solver.cells)."""
        got = self._marks.get(node)
        if got is None:
            assert self.problem.spread_level is not None
            got = self._marks[node] = node_marks(self.problem.topology, self.problem.spread_level, node)
        return got

    def open_nodes(self, pool: PoolPlan, ci: int, used: set[str]) -> list[int]:
        """The candidate's nodes whose spread-level domains no earlier replica uses (a candidate broader
        than the spread level may draw from several)."""
        return [n for n in self.nodes(pool, ci) if used.isdisjoint(self.marks(n))]


def greedy(problem: Problem, work_limit: int | None = None) -> list[GreedyReplica]:
    """Replicas one at a time, as many as fit, until ``work_limit`` units of work are spent (None: no limit).

    A replica is only ever complete: when the limit stops the walk, the replicas placed so far are the
    answer (maybe none), and the solver starts from them."""
    return greedy_counted(problem, work_limit)[0]


def greedy_counted(problem: Problem, work_limit: int | None = None) -> tuple[list[GreedyReplica], int]:
    """``greedy`` and the work it spent (charged to the search's budget)."""
    topo = problem.topology
    nodes = topo.nodes
    state = _State(
        Lazy(lambda n: list(nodes[n].free_gpus)),
        Lazy(lambda n: nodes[n].cpu_free_m),
        Lazy(lambda n: nodes[n].memory_free_bytes),
        set(),
    )
    scopes = _Scopes(problem)
    scopes.limit = work_limit
    scopes.work = 4 * _reachable(problem)  # ~4 units a node the walk may read, as when the state was a copy
    out: list[GreedyReplica] = []
    for _ in range(problem.replicas):
        if scopes.over():
            break
        placed = _place_replica(problem, state, scopes)
        if placed is None:
            break
        trial, replica = placed
        state.commit(trial)
        out.append(replica)
    return out, scopes.work


def _reachable(problem: Problem) -> int:
    """How many nodes the walk may read: the pools' eligible nodes and the router's. Not the whole cluster's:
    a domain of a decomposition is one leaf of a 100k-GPU cluster, and charging each leaf's walk for every
    node (what a copy of the state once cost) spent the budget of a GB200 proof on walks that took 2 ms."""
    sets = {plan.eligible for plan in problem.pools.values()}
    nodes = next(iter(sets)) if len(sets) == 1 else frozenset().union(*sets)
    return len(nodes) + sum(1 for n in problem.router_nodes if n not in nodes)


def _place_replica(problem: Problem, state: _State, scopes: _Scopes) -> tuple[_State, GreedyReplica] | None:
    colocs = problem.colocations
    choices: list[list[tuple[int, Container]]] = [
        sorted(enumerate(c.containers), key=lambda ic: (ic[1].units, ic[1].order)) for c in colocs
    ]
    best: tuple[tuple[int, int], _State, GreedyReplica] | None = None
    tried = 0
    for combo in _combinations(problem, choices):
        if scopes.over():
            return None
        scopes.work += 1
        trial = state.trial()
        replica = _try(problem, trial, combo, scopes)
        if replica is None:
            continue
        key = _score(problem, replica)
        if best is None or key < best[0]:
            best = (key, trial, replica)
        tried += 1
        if tried >= GREEDY_CONTAINERS:
            break
    return None if best is None else (best[1], best[2])


def _score(problem: Problem, replica: GreedyReplica) -> tuple[int, int]:
    """(preferred-level misses, cost units) of a greedy replica, to compare container choices."""
    misses = units = 0
    for g in replica.instances:
        plan = problem.pools[g.pool]
        cand = plan.candidates[g.candidate]
        misses += cand.preferred_miss
        units += cand.units + sum(len(gpus) * problem.telemetry_units[n] for n, gpus in g.pods)
    for coloc in problem.colocations:
        if coloc.name in replica.containers:
            units += coloc.containers[replica.containers[coloc.name]].units
    return misses, units


def _combinations(problem: Problem, choices: list[list[tuple[int, Container]]]):
    """Nested container choices: the transfer container first, then router containers nested with it."""
    if not choices:
        yield {}
        return
    contains = problem.topology.contains
    first, rest = choices[0], choices[1:]
    for i, cont in first:
        if not rest:
            yield {problem.colocations[0].name: (i, cont)}
            continue
        for j, other in rest[0]:
            if contains(other.domain, cont.domain) or contains(cont.domain, other.domain):
                yield {problem.colocations[0].name: (i, cont), problem.colocations[1].name: (j, other)}


def _try(problem: Problem, state: _State, combo: dict, scopes: _Scopes) -> GreedyReplica | None:
    replica = GreedyReplica([], {name: ic[0] for name, ic in combo.items()})
    mine: set[str] = set()
    for pool in sorted(problem.pools.values(), key=lambda p: (-p.size, p.name)):
        scope = scopes.in_scope(pool.name, combo)
        for i in range(pool.instances):
            got = _place_instance(problem, state, pool, scope, scopes)
            if got is None:
                return None
            cand_index, pods = got
            replica.instances.append(GreedyInstance(pool.name, i, cand_index, pods))
            if problem.spread_level:
                sd = scopes.spread_domain(pool.candidates[cand_index].domain)
                mine.update([sd] if sd is not None else [d for n, _gpus in pods for d in scopes.marks(n)])
    if problem.has_router:
        node = _place_router(problem, state, combo, scopes)
        if node is None:
            return None
        replica.router = node
    state.spread_used |= mine
    replica.instances.sort(key=lambda g: (g.pool, g.index))
    return replica


def _place_instance(problem: Problem, state: _State, pool: PoolPlan, scope: _Scope, scopes: _Scopes):
    # The walk's hottest loop (a batch calls it ~45 k times): lookups are hoisted, and the common case (a
    # candidate that is not a socket) counts free GPUs inline. Work is charged exactly as before.
    topo = problem.topology
    best = None
    best_static = None
    spread = problem.spread_level
    used = state.spread_used
    free, cpu, mem = state.free, state.cpu, state.mem
    cpu_m, mem_b, limit = pool.cpu_m, pool.memory_bytes, scopes.limit
    candidates, domains = pool.candidates, topo.domains
    for ci, static, cand_nodes in zip(scope.candidates, scope.statics, scope.nodes, strict=True):
        if best_static is not None and static > best_static:
            break  # the scope is sorted by this part of the key: nothing later can win
        if limit is not None and scopes.work > limit:
            return None  # out of work: this trial is dropped, the replicas placed so far stand
        scopes.work += 1
        cand = candidates[ci]
        home = scopes.spread_domain(cand.domain) if spread else None  # its spread-level domain
        if home is not None and home in used:
            continue
        # a candidate broader than the spread level (no home) may draw from several spread-level domains
        nodes = scopes.open_nodes(pool, ci, used) if spread and home is None else cand_nodes
        scopes.work += len(nodes)
        if pool.multi_node:
            g = pool.gpus_per_node or 0
            fit = [n for n in nodes if len(free[n]) >= g and cpu[n] >= cpu_m and mem[n] >= mem_b]
            if len(fit) < (pool.node_count or 0):
                continue
            left = sum(len(free[n]) for n in fit)
        else:
            # every node an instance takes GPUs from gets one of its pods: only nodes with room for one count
            dom = domains[cand.domain]
            if dom.level == "socket":
                left = sum(len(_free_of(topo, state, n, dom)) for n in nodes if _pod_fits(state, n, pool))
            else:
                left = 0
                for n in nodes:
                    if cpu[n] >= cpu_m and mem[n] >= mem_b:
                        left += len(free[n])
            if left < pool.size:
                continue
        key = (*static, left, cand.order)
        if best is None or key < best[0]:
            best, best_static = (key, ci, nodes), static
    if best is None:
        return None
    _key, ci, nodes = best
    return ci, _take(problem, state, pool, candidates[ci], nodes)


def _tele(problem: Problem, nodes: list[int]) -> int:
    return min(problem.telemetry_units[n] for n in nodes) if nodes else 0


def _free_of(topo, state: _State, node: int, dom) -> list[int]:
    if dom.level == "socket":
        n = topo.nodes[node]
        return [g for g in state.free[node] if n.gpu(g).socket == dom.socket]
    return state.free[node]


def _take(
    problem: Problem, state: _State, pool: PoolPlan, cand: Candidate, nodes: list[int]
) -> list[tuple[int, list[int]]]:
    topo = problem.topology
    dom = topo.domains[cand.domain]
    pods: list[tuple[int, list[int]]] = []
    if pool.multi_node:
        g = pool.gpus_per_node or 0
        fit = [n for n in nodes if len(state.free[n]) >= g and _pod_fits(state, n, pool)]
        fit.sort(key=lambda n: (problem.telemetry_units[n], len(state.free[n]), topo.order[topo.node_domain[n]]))
        for n in fit[: pool.node_count]:
            pods.append((n, _grab(state, n, state.free[n][:g], pool)))
        return pods
    need = pool.size
    # Best fit: draw from the most fragmented nodes first, leaving whole nodes for whole-node instances.
    if len(nodes) > 1:
        tele, order, node_domain = problem.telemetry_units, topo.order, topo.node_domain
        nodes = sorted(nodes, key=lambda n: (tele[n], len(_free_of(topo, state, n, dom)), order[node_domain[n]]))
    for n in nodes:
        avail = _free_of(topo, state, n, dom)
        if not avail or not _pod_fits(state, n, pool):
            continue
        take = avail[: min(need, len(avail))]
        pods.append((n, _grab(state, n, take, pool)))
        need -= len(take)
        if need == 0:
            break
    return sorted(pods)


def _pod_fits(state: _State, node: int, pool: PoolPlan) -> bool:
    return state.cpu[node] >= pool.cpu_m and state.mem[node] >= pool.memory_bytes


def _grab(state: _State, node: int, gpus: list[int], pool: PoolPlan) -> list[int]:
    chosen, taken = list(gpus), set(gpus)
    state.free[node] = [g for g in state.free[node] if g not in taken]
    state.cpu[node] -= pool.cpu_m
    state.mem[node] -= pool.memory_bytes
    return chosen


def _place_router(problem: Problem, state: _State, combo: dict, scopes: _Scopes) -> int | None:
    scope = combo.get("router")
    for n in scopes.router_nodes(None if scope is None else scope[1].domain):
        if state.cpu[n] >= problem.router_cpu_m and state.mem[n] >= problem.router_memory_bytes:
            state.cpu[n] -= problem.router_cpu_m
            state.mem[n] -= problem.router_memory_bytes
            return n
    return None
