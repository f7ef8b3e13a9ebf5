"""Kueue topology-aware scheduling (TAS), BestFit profile: topology-aware, one TP group at a time.

A replica is one workload, admitted on its own; each pool is a pod set whose TP groups must each sit within
the pool's ``placement.required`` level. Kueue's algorithm, from ``findTopologyAssignment`` in
kubernetes-sigs/kueue ``pkg/cache/tas_flavor_snapshot.go``, KEP 2724 (``keps/2724-topology-aware-scheduling``)
and https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/:

Phase 1: count how many pods fit in every leaf domain (free GPUs, CPU and memory of the node) and bubble
the counts up the domain tree.

Phase 2a (level): for each level from the narrowest up to the required one, order that level's domains by
free capacity, most first (ties by domain order); if the first can hold the group, take the *tightest* domain
that still holds it (``findBestFitDomainIdx``: the smallest count not below the demand) and stop. Beyond the
required level the group does not fit: Kueue's ``allows to fit only N out of M pod(s)``. (Kueue's own
``podset-required-topology`` looks at the required level only, and ``podset-preferred-topology`` walks up
from the preferred one; walking up from the narrowest level and stopping at the required one combines the
two into "the smallest level that fits".)

Phase 2b (descent): go down level by level: the children of the chosen domains, most free first, are taken
whole until the remainder fits in one of them, and that last one is again the tightest that holds it
(``updateCountsToMinimum``). KEP 2724's example: nodes fitting 3, 3, 2 and 1 pods and a pod set of 7 take
3 + 3 and then the node with exactly 1, not the one with 2.

Mapped to placer: a TP group of a single-node pool is TP one-GPU slots (a node it lands on runs one pod of
the instance with that many GPUs); a multi-node instance is ``nodeCount`` pods of ``gpusPerNode`` GPUs, at
most one per node, placed as one group; a PP > 1 instance without ``gpusPerNode`` is one pod on one node.
Inside a node the device plugin gives the lowest free indices. The router is a one-pod pod set with no GPUs
and no topology request, best-fitted on CPU and memory. Spread is honoured (domains of the spread level used
by an earlier replica are left out); the KV-transfer floor and router proximity are not: Kueue has no notion
of them, so the checker reports what they break.
"""

from __future__ import annotations

from dataclasses import dataclass

from placer.baselines._common import Context, Gpus, NoFit, State
from placer.model.levels import LEVEL_WORDS

UNBOUNDED = 1 << 30  # pods that fit when a pod asks for nothing of a resource


@dataclass(frozen=True)
class _Group:
    who: str
    count: int  # pods, or GPU slots when ``slots``
    per_pod: int  # GPUs per pod (0 for the router)
    slots: bool
    cpu_m: int
    memory_bytes: int
    one_per_node: bool
    nodes: frozenset[int] | None  # None: every schedulable node
    required: str
    spread: bool  # subject to spread


def _leaf_counts(ctx: Context, state: State, g: _Group) -> dict[str, int]:
    """Phase 1 at the leaves: GPU slots per socket/node home, or pods per node."""
    topo = ctx.topo
    out: dict[str, int] = {}
    nodes = g.nodes if g.nodes is not None else [n.index for n in topo.nodes if n.schedulable]
    cpu, mem, cpu_m, mem_b = state.cpu, state.mem, g.cpu_m, g.memory_bytes
    for n in nodes:
        if cpu[n] < cpu_m or mem[n] < mem_b:
            continue
        free = ctx.usable(state, n) if g.spread else state.free[n]
        if not free and g.per_pod:
            continue
        if g.slots:
            home = ctx.single_home[n]
            if home is not None:
                out[home] = len(free)
                continue
            homes = ctx.home_of[n]
            for x in free:
                out[homes[x]] = out.get(homes[x], 0) + 1
            continue
        fits = len(free) // g.per_pod if g.per_pod else UNBOUNDED
        if cpu_m:
            fits = min(fits, cpu[n] // cpu_m)
        if mem_b:
            fits = min(fits, mem[n] // mem_b)
        if g.one_per_node:
            fits = min(fits, 1)
        if fits > 0:
            out[topo.node_domain[n]] = fits
    return out


def _bubble(ctx: Context, leaves: dict[str, int]) -> dict[str, int]:
    """Phase 1 upwards: every domain's count is the sum of its leaves', moved up one level at a time."""
    doms = ctx.topo.domains
    counts = dict(leaves)
    frontier = leaves
    while frontier:
        up: dict[str, int] = {}
        for d, v in frontier.items():
            parent = doms[d].parent
            if parent is not None:
                up[parent] = up.get(parent, 0) + v
        for d, v in up.items():
            counts[d] = counts.get(d, 0) + v
        frontier = up
    return counts


def _best_fit(cands: list[str], counts: dict[str, int], need: int, order: dict[str, int]) -> str:
    """findBestFitDomainIdx: the first, in most-free-first order, of the domains with the smallest count
    that still holds ``need``."""
    return min((d for d in cands if counts[d] >= need), key=lambda d: (counts[d], order[d]))


def _find(ctx: Context, state: State, g: _Group) -> list[tuple[str, int]]:
    """Phases 1, 2a and 2b for one group: (leaf domain, pods or slots) pairs."""
    topo = ctx.topo
    order = topo.order
    leaves = _leaf_counts(ctx, state, g)
    counts = _bubble(ctx, leaves)
    chosen: str | None = None
    best, best_at = 0, ""
    for level in ctx.levels_up_to(g.required):
        table = ctx.scope_table(level)
        cands = sorted({d for leaf in leaves if (d := table[leaf]) is not None}, key=order.__getitem__)
        if not cands:
            continue
        top = max(cands, key=lambda d: (counts[d], -order[d]))
        if counts[top] >= g.count:
            chosen = _best_fit(cands, counts, g.count, order)
            break
        best, best_at = counts[top], top
    if chosen is None:
        unit = "GPU" if g.slots else "pod"
        room = f"the roomiest, {best_at}, allows to fit only {best} out of {g.count}" if best_at else "no node has room"
        raise NoFit(f"{g.who} needs {g.count} {unit}(s) within {LEVEL_WORDS[g.required]}; {room}")
    selected = [(chosen, g.count)]
    while any(d not in leaves for d, _ in selected):
        lower = [c for d, _ in selected for c in ([d] if d in leaves else topo.domains[d].children) if counts.get(c)]
        lower.sort(key=lambda d: (-counts[d], order[d]))
        remaining, nxt = g.count, []
        for i, d in enumerate(lower):
            if counts[d] >= remaining:
                nxt.append((_best_fit(lower[i:], counts, remaining, order), remaining))
                break
            nxt.append((d, counts[d]))
            remaining -= counts[d]
        selected = nxt
    return selected


def _take(ctx: Context, state: State, g: _Group, assignment: list[tuple[str, int]]) -> Gpus:
    """Concrete GPUs: the lowest free indices of each leaf, one pod per node."""
    topo = ctx.topo
    per_node: dict[int, list[int]] = {}
    for leaf, k in assignment:
        n = topo.domains[leaf].nodes[0]
        free = [
            x for x in (ctx.usable(state, n) if g.spread else state.free[n]) if not g.slots or ctx.home_of[n][x] == leaf
        ]
        want = k if g.slots else k * g.per_pod
        per_node.setdefault(n, []).extend(free[:want])
    out: Gpus = []
    for n, gpus in sorted(per_node.items()):
        state.take(n, gpus, g.cpu_m, g.memory_bytes)
        out.append((n, gpus))
    return out


def place(ctx: Context, state: State, _k: int) -> tuple[dict[tuple[str, int], Gpus], int | None]:
    pods: dict[tuple[str, int], Gpus] = {}
    for pool in ctx.pools:
        for i in range(pool.instances):
            if pool.multi_node:
                assert pool.node_count is not None and pool.gpus_per_node is not None
                count, per_pod, slots = pool.node_count, pool.gpus_per_node, False
            elif pool.whole_node:
                count, per_pod, slots = 1, pool.size, False
            else:
                count, per_pod, slots = pool.size, 1, True
            g = _Group(
                who=f"{pool.name}-{i}",
                count=count,
                per_pod=per_pod,
                slots=slots,
                cpu_m=pool.cpu_m,
                memory_bytes=pool.memory_bytes,
                one_per_node=not slots,
                nodes=pool.eligible,
                required=pool.required,
                spread=True,
            )
            pods[(pool.name, i)] = _take(ctx, state, g, _find(ctx, state, g))
    router = None
    if ctx.spec.router is not None:
        g = _Group(
            who="router",
            count=1,
            per_pod=0,
            slots=False,
            cpu_m=ctx.router_cpu_m,
            memory_bytes=ctx.router_memory_bytes,
            one_per_node=False,
            nodes=None,
            required="spine",
            spread=False,
        )
        ((leaf, _),) = _find(ctx, state, g)
        router = ctx.topo.domains[leaf].nodes[0]
        state.take(router, [], ctx.router_cpu_m, ctx.router_memory_bytes)
    return pods, router
