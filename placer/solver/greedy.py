"""A topology-aware greedy in the style of Kueue TAS best fit, used to warm-start the solver.

Phase 1 (per replica, one at a time): walk the replica-level containers (KV-transfer domain, router
domain) cheapest first and keep the best of the first few that fit. Phase 2: inside them, give each
instance the candidate with the fewest preferred-level misses, then the lowest all-reduce cost, then the
tightest fit (fewest free GPUs left), then canonical order; take concrete GPUs at once. A replica that
fits nowhere ends the walk (replicas are identical, so the next would not fit either).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass
class _State:
    free: dict[int, list[int]]
    cpu: dict[int, int]
    mem: dict[int, int]
    spread_used: set[str]

    def copy(self) -> _State:
        return _State({k: list(v) for k, v in self.free.items()}, dict(self.cpu), dict(self.mem), set(self.spread_used))


def greedy(problem: Problem) -> list[GreedyReplica]:
    topo = problem.topology
    state = _State(
        {n.index: list(n.free_gpus) for n in topo.nodes},
        {n.index: n.cpu_free_m for n in topo.nodes},
        {n.index: n.memory_free_bytes for n in topo.nodes},
        set(),
    )
    out: list[GreedyReplica] = []
    for _ in range(problem.replicas):
        placed = _place_replica(problem, state)
        if placed is None:
            break
        state, replica = placed
        out.append(replica)
    return out


def _place_replica(problem: Problem, state: _State) -> tuple[_State, GreedyReplica] | None:
    colocs = problem.colocations
    choices: list[list[tuple[int, Container]]] = [
        sorted(enumerate(c.containers), key=lambda ic: (ic[1].units, ic[1].order)) for c in colocs
    ]
    best: tuple[tuple[int, int], _State, GreedyReplica] | None = None
    tried = 0
    for combo in _combinations(problem, choices):
        trial = state.copy()
        replica = _try(problem, trial, combo)
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
    anc = problem.topology.ancestors
    first, rest = choices[0], choices[1:]
    for i, cont in first:
        if not rest:
            yield {problem.colocations[0].name: (i, cont)}
            continue
        for j, other in rest[0]:
            if cont.domain in anc(other.domain) or other.domain in anc(cont.domain):
                yield {problem.colocations[0].name: (i, cont), problem.colocations[1].name: (j, other)}


def _scope_ok(problem: Problem, pool: str, cand: Candidate, combo: dict) -> bool:
    anc = set(problem.topology.ancestors(cand.domain))
    for coloc in problem.colocations:
        if pool in coloc.pools and coloc.name in combo and combo[coloc.name][1].domain not in anc:
            return False
    return True


def _spread_domain(problem: Problem, domain: str) -> str | None:
    """The spread-level domain containing ``domain``; None when ``domain`` is broader than that level."""
    level = problem.spread_level
    return None if level is None else problem.topology.domain_at(domain, level)


def _try(problem: Problem, state: _State, combo: dict) -> GreedyReplica | None:
    replica = GreedyReplica([], {name: ic[0] for name, ic in combo.items()})
    mine: set[str] = set()
    for pool in sorted(problem.pools.values(), key=lambda p: (-p.size, p.name)):
        for i in range(pool.instances):
            got = _place_instance(problem, state, pool, combo, mine)
            if got is None:
                return None
            cand_index, pods = got
            replica.instances.append(GreedyInstance(pool.name, i, cand_index, pods))
            if problem.spread_level:
                sd = _spread_domain(problem, pool.candidates[cand_index].domain)
                assert sd is not None
                mine.add(sd)
    if problem.has_router:
        node = _place_router(problem, state, combo)
        if node is None:
            return None
        replica.router = node
    state.spread_used |= mine
    replica.instances.sort(key=lambda g: (g.pool, g.index))
    return replica


def _place_instance(problem: Problem, state: _State, pool: PoolPlan, combo: dict, mine: set[str]):
    topo = problem.topology
    best = None
    for ci, cand in enumerate(pool.candidates):
        if not _scope_ok(problem, pool.name, cand, combo):
            continue
        if problem.spread_level:
            sd = _spread_domain(problem, cand.domain)
            if sd is None or sd in state.spread_used:
                continue
        dom = topo.domains[cand.domain]
        nodes = [n for n in dom.nodes if n in pool.eligible]
        if pool.multi_node:
            g = pool.gpus_per_node or 0
            fit = [
                n
                for n in nodes
                if len(state.free[n]) >= g and state.cpu[n] >= pool.cpu_m and state.mem[n] >= pool.memory_bytes
            ]
            if len(fit) < (pool.node_count or 0):
                continue
            left = sum(len(state.free[n]) for n in fit)
        else:
            left = sum(len(_free_of(topo, state, n, dom)) for n in nodes)
            if left < pool.size:
                continue
            if cand.kind == "unit" and (state.cpu[nodes[0]] < pool.cpu_m or state.mem[nodes[0]] < pool.memory_bytes):
                continue
        key = (cand.preferred_miss, cand.units + pool.size * _tele(problem, nodes), left, cand.order)
        if best is None or key < best[0]:
            best = (key, ci)
    if best is None:
        return None
    ci = best[1]
    return ci, _take(problem, state, pool, pool.candidates[ci])


def _tele(problem: Problem, nodes: list[int]) -> int:
    return min(problem.telemetry_units[n] for n in nodes) if nodes else 0


def _free_of(topo, state: _State, node: int, dom) -> list[int]:
    if dom.level == "socket":
        n = topo.nodes[node]
        return [g for g in state.free[node] if n.gpu(g).socket == dom.socket]
    return state.free[node]


def _take(problem: Problem, state: _State, pool: PoolPlan, cand: Candidate) -> list[tuple[int, list[int]]]:
    topo = problem.topology
    dom = topo.domains[cand.domain]
    nodes = [n for n in dom.nodes if n in pool.eligible]
    pods: list[tuple[int, list[int]]] = []
    if pool.multi_node:
        g = pool.gpus_per_node or 0
        fit = [n for n in nodes if len(state.free[n]) >= g and state.cpu[n] >= pool.cpu_m]
        fit.sort(key=lambda n: (problem.telemetry_units[n], len(state.free[n]), topo.order[topo.node_domain[n]]))
        for n in fit[: pool.node_count]:
            pods.append((n, _grab(state, n, state.free[n][:g], pool)))
        return pods
    need = pool.size
    # Best fit: draw from the most fragmented nodes first, leaving whole nodes for whole-node instances.
    order = sorted(
        nodes,
        key=lambda n: (problem.telemetry_units[n], len(_free_of(topo, state, n, dom)), topo.order[topo.node_domain[n]]),
    )
    for n in order:
        avail = _free_of(topo, state, n, dom)
        if not avail or need == 0:
            continue
        take = avail[: min(need, len(avail))]
        pods.append((n, _grab(state, n, take, pool)))
        need -= len(take)
    return sorted(pods)


def _grab(state: _State, node: int, gpus: list[int], pool: PoolPlan) -> list[int]:
    chosen = list(gpus)
    state.free[node] = [g for g in state.free[node] if g not in chosen]
    state.cpu[node] -= pool.cpu_m
    state.mem[node] -= pool.memory_bytes
    return chosen


def _place_router(problem: Problem, state: _State, combo: dict) -> int | None:
    scope = combo.get("router")
    anc = problem.topology.ancestors
    for n in problem.router_nodes:
        if scope is not None and scope[1].domain not in anc(problem.topology.node_domain[n]):
            continue
        if state.cpu[n] >= problem.router_cpu_m and state.mem[n] >= problem.router_memory_bytes:
            state.cpu[n] -= problem.router_cpu_m
            state.mem[n] -= problem.router_memory_bytes
            return n
    return None
