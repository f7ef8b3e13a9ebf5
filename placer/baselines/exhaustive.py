"""The exhaustive enumerator of the Dynamo write-up: for each TP group in turn, every combination of
TP-degree free GPUs within each domain at the pool's required level, costed with the shared cost model
(placer.topology.cost: all-reduce per forward pass plus telemetry, the terms that belong to one group); the lowest
cost wins, ties to the first domain in canonical order and the first combination.

Phase 1 counts the combinations up front with ``math.comb`` (an upper bound: free GPUs only shrink as
groups are placed) and gives up, with the count, when it exceeds the cap: a TP8 group in a 72-GPU NVL72 rack
alone is C(72, 8) ~ 1.2e10. Phase 2 enumerates, counting every combination it costs, never past the cap.

A multi-node instance is one group: every choice of ``nodeCount`` nodes with ``gpusPerNode`` free GPUs and,
on each, every choice of those GPUs; a PP > 1 instance without ``gpusPerNode`` is one group on one node.
Groups are chosen one at a time, so the replica-level KV term and the transfer floor play no part in the
choice (the checker reports a broken floor). Spread is honoured by leaving out the spread-level domains of
earlier replicas, and the router goes to the first node, in canonical order, within its ``near`` level of
the pool it must be near, if one has room, else to the first node with room.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass

from placer.baselines._common import Context, Gpus, NoFit, PoolDemand, State, gib
from placer.check.verify import stage_figures, steiner_figures
from placer.model.levels import LEVEL_WORDS
from placer.topology import cost


class GaveUp(Exception):
    """More combinations than the cap; raised before enumerating (or, defensively, on reaching it)."""


def big(x: int) -> str:
    return f"{x:,}" if x < 10**12 else f"{x:.2e}"


@dataclass(frozen=True)
class _Shape:
    """One group of a pool: its scope level, GPUs per pod and pods (1 pod of ``size`` unless multi-node)."""

    level: str
    per_pod: int
    pods: int

    @staticmethod
    def of(pool: PoolDemand) -> _Shape:
        if pool.multi_node:
            assert pool.node_count is not None and pool.gpus_per_node is not None
            return _Shape(pool.required, pool.gpus_per_node, pool.node_count)
        if pool.whole_node:
            return _Shape("node", pool.size, 1)
        return _Shape(pool.required, pool.size, 0)  # 0: GPUs drawn freely across the domain's nodes


def _usable(ctx: Context, state: State, pool: PoolDemand, n: int) -> list[int]:
    if n not in pool.eligible or not ctx.pod_fits(state, n, pool.cpu_m, pool.memory_bytes):
        return []
    return ctx.usable(state, n)


def _by_scope(ctx: Context, state: State, pool: PoolDemand, level: str) -> dict[str, list[tuple[int, int]]]:
    """Usable GPUs grouped by the domain at ``level`` that holds them, sorted by (node, GPU). A GPU with no
    domain that narrow (an NVLink node's GPU when the level is socket) can never satisfy it: left out."""
    out: dict[str, list[tuple[int, int]]] = {}
    for n in sorted(pool.eligible):
        for x in _usable(ctx, state, pool, n):
            d = ctx.scope(ctx.home_of[n][x], level)
            if d is not None:
                out.setdefault(d, []).append((n, x))
    return out


def _elementary(values: list[int], k: int) -> int:
    """Sum over all k-subsets of the product of their values (ways to pick k nodes and GPUs on each)."""
    e = [1] + [0] * k
    for v in values:
        for j in range(k, 0, -1):
            e[j] += e[j - 1] * v
    return e[k]


def _count(ctx: Context, state: State, pool: PoolDemand) -> tuple[int, str, int]:
    """Combinations for one group of ``pool`` now: the total, and the largest domain's share in words."""
    shape = _Shape.of(pool)
    total, worst, worst_n = 0, "", 0
    for d, gpus in _by_scope(ctx, state, pool, shape.level).items():
        if shape.pods:
            per_node: dict[int, int] = {}
            for n, _x in gpus:
                per_node[n] = per_node.get(n, 0) + 1
            c = _elementary([math.comb(f, shape.per_pod) for f in per_node.values()], shape.pods)
            words = f"{d}: {big(c)}"
        else:
            c = math.comb(len(gpus), shape.per_pod)
            words = f"{d}: C({len(gpus)}, {shape.per_pod}) = {big(c)}"
        total += c
        if c > worst_n:
            worst, worst_n = words, c
    return total, worst, worst_n


def count_combinations(ctx: Context) -> tuple[int, str]:
    """Phase 1: an upper bound on the combinations the enumerator would cost, and a sentence about it."""
    state = State(ctx.topo)
    total, worst, worst_n = 0, "", 0
    for pool in ctx.pools:
        c, words, w = _count(ctx, state, pool)
        total += ctx.spec.replicas * pool.instances * c
        if w > worst_n:
            worst, worst_n = words, w
    largest = f" (largest domain for one TP group: {worst})" if worst else ""
    return total, f"{big(total)} GPU combinations to cost{largest}"


class Enumerator:
    """Phase 2, one replica at a time; ``evaluated`` counts every combination costed."""

    def __init__(self, ctx: Context, cap: int):
        self.ctx = ctx
        self.cap = cap
        self.evaluated = 0
        w = ctx.spec.objective
        self.telemetry = [
            cost.telemetry_per_gpu_units(n.queue_depth, n.kv_cache_hit, w.queue_depth, w.cache_miss)
            for n in ctx.topo.nodes
        ]
        self._ring: dict[tuple, int] = {}

    def _allreduce_units(self, pool: PoolDemand, gpus: list[tuple[int, int]]) -> int:
        """The checker's instance cost: each stage's ring, PP hand-offs over the whole instance."""
        tp, ctx = pool.tensor_parallel, self.ctx
        stages = [gpus[s * tp : (s + 1) * tp] for s in range(pool.pipeline_parallel)]
        # the homes of each stage's GPUs, and how many sit on each node (the rings across nodes run per rail)
        key = (
            pool.name,
            tuple(frozenset(ctx.home_of[n][x] for n, x in st) for st in stages),
            tuple(tuple(sorted(Counter(n for n, _ in st).values())) for st in stages),
        )
        if key not in self._ring:
            m, spec = ctx.spec.model, ctx.spec
            msg = cost.activation_bytes(m.hidden_size, spec.tokens_in_flight(pool.name), m.bytes_per_element)
            figs = [stage_figures(spec, ctx.topo, pool.name, st) for st in stages]
            us = cost.forward_pass_allreduce_us(m.layers, tp, figs, msg, steiner_figures(ctx.topo, gpus))
            self._ring[key] = cost.to_units(spec.objective.all_reduce * us)
        return self._ring[key]

    def _reserve(self, n: int) -> None:
        """Count ``n`` combinations before costing them; the up-front bound keeps this under the cap."""
        if self.evaluated + n > self.cap:
            raise GaveUp(f"reached the cap of {self.cap:,} combinations while enumerating")
        self.evaluated += n

    def _best_in(self, pool: PoolDemand, shape: _Shape, gpus: list[tuple[int, int]]) -> tuple[int, list] | None:
        """The cheapest combination in one domain, first found on ties."""
        best: tuple[int, list] | None = None
        tele = [self.telemetry[n] for n, _x in gpus]
        if not shape.pods and pool.pipeline_parallel == 1:
            # The common case, kept lean: a ring's figures depend only on the set of homes it joins.
            homes = [self.ctx.home_of[n][x] for n, x in gpus]
            rings: dict[frozenset[str], int] = {}
            self._reserve(math.comb(len(gpus), shape.per_pod))
            cheapest: tuple[int, tuple[int, ...]] | None = None
            for c in itertools.combinations(range(len(gpus)), shape.per_pod):
                key = frozenset(map(homes.__getitem__, c))
                ring = rings.get(key)
                if ring is None:
                    ring = rings[key] = self._allreduce_units(pool, [gpus[i] for i in c])
                units = ring + sum(map(tele.__getitem__, c))
                if cheapest is None or units < cheapest[0]:
                    cheapest = (units, c)
            return None if cheapest is None else (cheapest[0], [gpus[i] for i in cheapest[1]])
        for combo in self._choices(shape, gpus):
            self._reserve(1)
            units = self._allreduce_units(pool, combo) + sum(self.telemetry[n] for n, _x in combo)
            if best is None or units < best[0]:
                best = (units, combo)
        return best

    def _choices(self, shape: _Shape, gpus: list[tuple[int, int]]):
        """Every combination in one domain, as a (node, GPU) list sorted like the placement's pods."""
        if not shape.pods:
            yield from (list(c) for c in itertools.combinations(gpus, shape.per_pod))
            return
        per_node: dict[int, list[int]] = {}
        for n, x in gpus:
            per_node.setdefault(n, []).append(x)
        roomy = [n for n, xs in per_node.items() if len(xs) >= shape.per_pod]
        for nodes in itertools.combinations(roomy, shape.pods):
            for picks in itertools.product(*(itertools.combinations(per_node[n], shape.per_pod) for n in nodes)):
                yield [(n, x) for n, xs in zip(nodes, picks, strict=True) for x in xs]

    def _group(self, state: State, pool: PoolDemand, who: str) -> Gpus:
        shape = _Shape.of(pool)
        best: tuple[int, list[tuple[int, int]]] | None = None
        roomiest = 0
        scopes = _by_scope(self.ctx, state, pool, shape.level)
        for d in sorted(scopes, key=self.ctx.topo.order.__getitem__):
            roomiest = max(roomiest, len(scopes[d]))
            found = self._best_in(pool, shape, scopes[d])
            if found is not None and (best is None or found[0] < best[0]):
                best = found
        if best is None:
            raise NoFit(
                f"{who} needs {pool.size} free GPUs within {LEVEL_WORDS[shape.level]}; "
                f"the roomiest such domain has {roomiest}"
            )
        per_node: dict[int, list[int]] = {}
        for n, x in best[1]:
            per_node.setdefault(n, []).append(x)
        for n, xs in per_node.items():
            state.take(n, xs, pool.cpu_m, pool.memory_bytes)
        return sorted(per_node.items())

    def _router(self, state: State, pods: dict[tuple[str, int], Gpus]) -> int:
        ctx, topo, router = self.ctx, self.ctx.topo, self.ctx.spec.router
        assert router is not None
        fits = [
            n.index
            for n in topo.nodes
            if n.schedulable and ctx.pod_fits(state, n.index, ctx.router_cpu_m, ctx.router_memory_bytes)
        ]
        if not fits:
            raise NoFit(
                f"router needs {ctx.router_cpu_m}m CPU and {gib(ctx.router_memory_bytes)} memory; no node has both"
            )
        fits.sort(key=lambda n: topo.order[topo.node_domain[n]])
        if router.near is not None:
            homes = sorted(
                {
                    ctx.home_of[n][x]
                    for (p, _i), got in pods.items()
                    if p == router.near.pool
                    for n, xs in got
                    for x in xs
                }
            )
            region = ctx.scope(topo.lowest_common(homes), router.near.level) if homes else None
            if region is not None:
                inside = set(topo.domains[region].nodes)
                fits = [n for n in fits if n in inside] or fits
        return fits[0]

    def __call__(self, ctx: Context, state: State, _k: int) -> tuple[dict[tuple[str, int], Gpus], int | None]:
        pods: dict[tuple[str, int], Gpus] = {}
        for pool in ctx.pools:
            for i in range(pool.instances):
                pods[(pool.name, i)] = self._group(state, pool, f"{pool.name}-{i}")
        router = None
        if ctx.spec.router is not None:
            router = self._router(state, pods)
            state.take(router, [], ctx.router_cpu_m, ctx.router_memory_bytes)
        return pods, router
