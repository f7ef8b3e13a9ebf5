"""kube-scheduler with ``nvidia.com/gpu: N``: a GPU is a count, the cluster has no shape.

Each pod asks for N GPUs of a matching product on ONE node. A non-multi-node instance is one pod of
TP x PP GPUs; a multi-node one (``nodeCount`` x ``gpusPerNode``) is ``nodeCount`` pods, kept on distinct
nodes as a LeaderWorkerSet's exclusive placement would. Filter: schedulable, matching GPUs, enough free GPUs,
CPU and memory for the pod's requests. Score: NodeResourcesFit on the GPU count, kube-scheduler's integer
0-100 score, ``LeastAllocated`` (spread) or ``MostAllocated`` (bin-pack); ties go to the first node by name
(kube-scheduler picks a random one among ties; a baseline must be reproducible). The device plugin hands
out the lowest free GPU indices, as a topology-unaware plugin does. The router pod goes to the node with
the most (spread) or least (bin-pack) free CPU that fits it.

It knows nothing of packing levels, KV-transfer floors, router proximity or spread: the checker reports
what it broke. Pods go in queue order: replica by replica, pools in spec order, instance by instance.
"""

from __future__ import annotations

from placer.baselines._common import Context, Gpus, NoFit, PoolDemand, State, gib

MAX_NODE_SCORE = 100  # kube-scheduler's framework.MaxNodeScore


def _score(total: int, used_after: int, spread: bool) -> int:
    """NodeResourcesFit for one resource: least-allocated scores the free share, most-allocated the used."""
    if total == 0:
        return 0
    kept = total - used_after
    return (kept if spread else used_after) * MAX_NODE_SCORE // total


def _pick_node(ctx: Context, state: State, pool: PoolDemand, n_gpus: int, avoid: set[int], spread: bool) -> int:
    best: tuple[int, str] | None = None
    chosen = -1
    nodes = ctx.topo.nodes
    for n in pool.eligible:
        free = state.free[n]
        if len(free) < n_gpus or n in avoid or not ctx.pod_fits(state, n, pool.cpu_m, pool.memory_bytes):
            continue
        total = len(nodes[n].gpus)
        key = (-_score(total, total - len(free) + n_gpus, spread), nodes[n].name)
        if best is None or key < best:
            best, chosen = key, n
    if best is None:
        if not pool.eligible:
            raise NoFit(f"{pool.name} pod needs {n_gpus} GPUs; no schedulable node matches its GPU selector")
        most = max((len(state.free[n]) for n in pool.eligible if n not in avoid), default=0)
        raise NoFit(
            f"{pool.name} pod needs {n_gpus} free GPUs on one node with room for its requests; "
            f"the most free on a matching node is {most}"
        )
    return chosen


def _pick_router(ctx: Context, state: State, spread: bool) -> int:
    best: tuple[int, str] | None = None
    chosen = -1
    for node in ctx.topo.nodes:
        n = node.index
        if not node.schedulable or not ctx.pod_fits(state, n, ctx.router_cpu_m, ctx.router_memory_bytes):
            continue
        key = (-state.cpu[n] if spread else state.cpu[n], node.name)
        if best is None or key < best:
            best, chosen = key, n
    if best is None:
        raise NoFit(f"router needs {ctx.router_cpu_m}m CPU and {gib(ctx.router_memory_bytes)} memory; no node has both")
    return chosen


def _place(ctx: Context, state: State, spread: bool) -> tuple[dict[tuple[str, int], Gpus], int | None]:
    pods: dict[tuple[str, int], Gpus] = {}
    for pool in ctx.pools:
        per_pod = pool.gpus_per_node if pool.multi_node else pool.size
        assert per_pod is not None
        for i in range(pool.instances):
            got: Gpus = []
            used: set[int] = set()
            for _ in range(pool.node_count or 1):
                n = _pick_node(ctx, state, pool, per_pod, used, spread)
                gpus = state.free[n][:per_pod]
                state.take(n, gpus, pool.cpu_m, pool.memory_bytes)
                got.append((n, gpus))
                used.add(n)
            pods[(pool.name, i)] = got
    router = None
    if ctx.spec.router is not None:
        router = _pick_router(ctx, state, spread)
        state.take(router, [], ctx.router_cpu_m, ctx.router_memory_bytes)
    return pods, router


def spread(ctx: Context, state: State, _k: int) -> tuple[dict[tuple[str, int], Gpus], int | None]:
    """LeastAllocated: each pod to the node left with the largest share of free GPUs."""
    return _place(ctx, state, spread=True)


def binpack(ctx: Context, state: State, _k: int) -> tuple[dict[tuple[str, int], Gpus], int | None]:
    """MostAllocated: each pod to the node left with the smallest share of free GPUs."""
    return _place(ctx, state, spread=False)
