"""Which running deployments ``placer plan`` lets move for the pending ones: those near them.

Phase 1, per pending deployment, on the cluster with every running deployment's GPUs free: its possible
homes, the domains of its required levels where one replica could go (a container of its widest
replica-level rule, else a candidate domain of its largest pool), with the GPUs one replica needs there.
Phase 2, on the cluster as it runs: per home, the GPUs missing and the running deployments holding GPUs
there; homes that need the fewest deployments moved (then the fewest GPUs, then canonical order) come
first. Scopes grow: the holders of the best home per replica, then of 4 and 16 times as many homes; the
caller widens to every running deployment when none of them gives a plan.
"""

from __future__ import annotations

from collections import defaultdict

from placer.model.errors import InfeasibleError, InputError
from placer.model.running import Running, running_placement
from placer.model.spec import ServingTopology
from placer.solver.keep import plan_keep
from placer.solver.problem import build_problem
from placer.topology.graph import Topology
from placer.topology.usage import usage

MIN_RUNNING = 10  # with fewer running deployments the whole model is small: no scope
GROWTH = (1, 4, 16)  # homes per pending replica in each scope
NEVER = 1 << 30  # deployments to move in a home that no moves can free


def scopes(running: list[Running], pending: list[tuple[ServingTopology, str]], topo: Topology) -> list[frozenset[str]]:
    """Growing sets of running deployment keys to let move, smallest first; empty when the whole model is
    small enough or the homes cannot be listed (then the caller uses every running deployment)."""
    known = [r for r in running if r.spec is not None]
    if len(known) < MIN_RUNNING:
        return []
    free_all = plan_keep(running, [r.spec for r in known if r.spec is not None], topo).topology
    held: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))  # node -> key -> GPUs
    for r in known:
        assert r.spec is not None
        gpus, _cpu, _mem = usage(r.spec, topo, running_placement(r, topo.name))
        for n, gs in gpus.items():
            held[n][r.key] += len(gs)
    ranked: list[tuple[list[tuple[tuple, list[str]]], int]] = []  # per pending: (ranked homes, replicas)
    for spec, _source in pending:
        try:
            homes = _homes(spec, free_all)
        except (InfeasibleError, InputError):
            return []
        ranked.append(([_rank(free_all, h, need, slot, elig, held) for h, need, slot, elig in homes], spec.replicas))
    out: list[frozenset[str]] = []
    for grow in GROWTH:
        keys: set[str] = set()
        for scored, replicas in ranked:
            possible = [h for h in sorted(scored, key=lambda h: h[0]) if h[0][0] < NEVER]
            for _score, holders in possible[: grow * replicas]:
                keys.update(holders)
        scope = frozenset(keys)
        if len(scope) >= len(known):
            break
        if not out or scope != out[-1]:
            out.append(scope)
    return out


def _homes(spec: ServingTopology, free_all: Topology) -> list[tuple[str, int, int, frozenset[int]]]:
    """(domain, GPUs one replica needs there, the fewest GPUs a node must have free to hold one of its
    instances, eligible nodes) for every place one replica could go."""
    problem = build_problem(spec, free_all)
    widest = max(problem.colocations, key=lambda c: len(c.pools), default=None)
    if widest is not None:
        plans = [problem.pools[p] for p in widest.pools]
        need = sum(p.size * p.instances for p in plans)
        eligible = frozenset().union(*(p.eligible for p in plans))
        return [(c.domain, need, min(p.slot for p in plans), eligible) for c in widest.containers]
    pool = max(problem.pools.values(), key=lambda p: (p.size * p.instances, p.name))
    return [(c.domain, pool.size, pool.slot, pool.eligible) for c in pool.candidates]


def _rank(
    free_all: Topology, home: str, need: int, slot: int, eligible: frozenset[int], held: dict[int, dict[str, int]]
) -> tuple[tuple, list[str]]:
    """((deployments to move, GPUs moved, canonical order), every deployment holding GPUs in the home).
    Room counts whole slots per node; the holders with the most GPUs there move first."""
    nodes = [n for n in free_all.domains[home].nodes if n in eligible]
    free = {n: len(free_all.nodes[n].free_gpus) - sum(held.get(n, {}).values()) for n in nodes}
    holders: dict[str, list[tuple[int, int]]] = defaultdict(list)  # key -> (node, GPUs)
    for n in nodes:
        for key, gpus in held.get(n, {}).items():
            holders[key].append((n, gpus))

    def room() -> int:
        return sum(f // slot * slot for f in free.values())

    count = moved = 0
    order = sorted(holders, key=lambda k: (-sum(g for _n, g in holders[k]), k))
    for key in order:
        if room() >= need:
            break
        for n, gpus in holders[key]:
            free[n] += gpus
        count, moved = count + 1, moved + sum(g for _n, g in holders[key])
    if room() < need:  # moving every deployment here does not make room: the last home to try
        return (NEVER, moved, free_all.order[home]), []
    everyone = sorted(holders) if count else []
    return (count, moved, free_all.order[home]), everyone
