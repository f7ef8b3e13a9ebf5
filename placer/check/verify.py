"""The independent checker: re-verifies every hard constraint of a placement from the inputs alone, and
recomputes its cost with the shared cost model.

It imports neither OR-Tools nor placer.solver.cpsat, and does not read the solver's candidates: it looks only at
the spec, the topology built from the cluster file, and the concrete GPUs of each pod. Placer runs it
before anything is printed; tests run it on every solution.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from placer.model import k8s
from placer.model.levels import LEVEL_RANK, LEVEL_WORDS
from placer.model.placement import InstancePlacement, Placement
from placer.model.spec import ServingTopology
from placer.topology import cost
from placer.topology.graph import Topology


@dataclass
class InstanceCost:
    replica: int
    pool: str
    index: int
    domain: str  # narrowest domain containing its GPUs
    bottleneck: cost.PathFigures  # the slowest link joining its GPUs, one lane (placer.dev/bottleneck-gbps)
    allreduce_us: float
    units: int


@dataclass
class ReplicaCost:
    replica: int
    kv_path: cost.PathFigures | None
    kv_bandwidth_gbps: float | None
    kv_us: float
    units: int


@dataclass
class Report:
    violations: list[str] = field(default_factory=list)
    instances: list[InstanceCost] = field(default_factory=list)
    replicas: list[ReplicaCost] = field(default_factory=list)
    queue_units: int = 0  # w3 x queue depth, summed over the GPUs used
    cache_miss_units: int = 0  # w4 x (1 - KV-cache hit), summed over the GPUs used

    @property
    def telemetry_units(self) -> int:
        return self.queue_units + self.cache_miss_units

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def total_units(self) -> int:
        return sum(i.units for i in self.instances) + sum(r.units for r in self.replicas) + self.telemetry_units


def steiner_figures(topo: Topology, gpus: list[tuple[int, int]]) -> cost.PathFigures:
    """Slowest edge and largest latency of the smallest subtree joining these GPUs (node index, GPU)."""
    homes = [topo.gpu_domain(n, g) for n, g in gpus]
    top = topo.lowest_common(sorted(set(homes)))
    if len(gpus) <= 1:
        return cost.PathFigures(float("inf"), 0.0, topo.domains[top].level)
    bw, lat = float("inf"), 0.0
    seen: set[str] = set()  # vertices whose edge up is counted
    for home in sorted(set(homes)):
        home_bw, home_lat = topo.crossing[home]  # each GPU's own link into its home carries the home's figures
        bw, lat = min(bw, home_bw), max(lat, home_lat)
        below = home
        while below != top and below not in seen:
            seen.add(below)
            dom = topo.domains[below]
            bw, lat = min(bw, dom.up[0]), max(lat, dom.up[1])
            below = dom.parent  # type: ignore[assignment]
    return cost.PathFigures(bw, lat, topo.domains[top].level)


def ring_lanes_of(spec: ServingTopology, topo: Topology, pool_name: str, gpus: list[tuple[int, int]]) -> int:
    """Rings side by side of one TP group across nodes (cost.ring_lanes), where its split over nodes is
    fixed (nodeCount, or an engine preset, which splits evenly); 1 inside a node or for a free split."""
    pool = spec.pools[pool_name]
    per_node = Counter(n for n, _ in gpus)
    if len(per_node) < 2 or (pool.template.engine == "custom" and pool.node_count is None):
        return 1
    return cost.ring_lanes(min(per_node.values()), topo.rails_per_node)


def stage_figures(
    spec: ServingTopology, topo: Topology, pool_name: str, gpus: list[tuple[int, int]]
) -> cost.PathFigures:
    """One TP group's ring: its subtree's figures, and across the network one ring per rail
    (``ring_lanes_of``): the links above its nodes carry that many rails, each node's own links (all of
    them, socket crossings included, as the solver prices a node) every ring at their rate."""
    fig = steiner_figures(topo, gpus)
    lanes = ring_lanes_of(spec, topo, pool_name, gpus)
    if fig.level not in cost.NETWORK_LEVELS or lanes <= 1:
        return fig
    nodes = sorted({n for n, _ in gpus})
    top = topo.lowest_common(sorted({topo.gpu_domain(n, g) for n, g in gpus}))
    network = float("inf")
    for n in nodes:
        below = topo.node_domain[n]
        while below != top:
            dom = topo.domains[below]
            assert dom.parent is not None
            network = min(network, dom.up[0])
            below = dom.parent
    inner = min(steiner_figures(topo, [(n, g.index) for g in topo.nodes[n].gpus]).bandwidth_gbps for n in nodes)
    return cost.ring_over_rails(fig, lanes, network, inner)


def kv_route(topo: Topology, gpus: list[tuple[int, int]], src: int, dst: int) -> cost.PathFigures:
    """The KV path between two instances: through their narrowest common domain or any domain above it,
    whichever is fastest (cost.best_kv_route)."""
    base = steiner_figures(topo, gpus)
    top = topo.lowest_common(sorted({topo.gpu_domain(n, g) for n, g in gpus}))
    routes, bw, lat = [base], base.bandwidth_gbps, base.latency_us
    for a in topo.ancestors(top)[1:]:
        # Going up to ``a`` adds the edges from the common domain up to it.
        below = next(d for d in topo.ancestors(top) if topo.domains[d].parent == a)
        up_bw, up_lat = topo.domains[below].up
        bw, lat = min(bw, up_bw), max(lat, up_lat)
        routes.append(cost.PathFigures(bw, lat, topo.domains[a].level))
    return cost.best_kv_route(routes, src, dst, topo.rails_per_node)


def gpus_of(topo: Topology, inst: InstancePlacement) -> list[tuple[int, int]]:
    """An instance's GPUs as (node index, GPU index), pod after pod: stage s is the s-th TP-sized run."""
    return [(topo.node_by_name(p.node).index, g) for p in inst.pods for g in p.gpus]


def check(spec: ServingTopology, topo: Topology, placement: Placement) -> Report:
    """Every hard constraint, then the cost. Violations are sentences naming the object and the rule."""
    r = Report()
    _check_structure(spec, topo, placement, r)
    if r.violations:
        return r
    _check_gpus_and_capacity(spec, topo, placement, r)
    _check_packing(spec, topo, placement, r)
    _check_transfer(spec, topo, placement, r)
    _check_router(spec, topo, placement, r)
    _check_spread(spec, topo, placement, r)
    return r


def _check_structure(spec: ServingTopology, topo: Topology, pl: Placement, r: Report) -> None:
    n = len(pl.replicas)
    if not spec.replicas_floor <= n <= spec.replicas:
        r.violations.append(f"{n} replicas placed; the spec asks for {spec.replicas_floor}-{spec.replicas}")
    if [rep.index for rep in pl.replicas] != list(range(n)):
        r.violations.append("replica indices are not 0..n-1")
    for rep in pl.replicas:
        want = sorted((p, i) for p, pool in spec.pools.items() for i in range(pool.instances))
        got = sorted((i.pool, i.index) for i in rep.instances)
        if got != want:

            def names(keys) -> str:
                return ", ".join(f"{p}-{i}" for p, i in sorted(keys))

            missing, extra = set(want) - set(got), set(got) - set(want)
            twice = {k for k in got if got.count(k) > 1}
            said = [f"lacks {names(missing)}"] if missing else []
            said += [f"has {names(extra)}, which the spec does not place"] if extra else []
            said += [f"lists {names(twice)} twice"] if twice else []
            r.violations.append(f"replica {rep.index} does not hold the spec's instances: {'; '.join(said)}")
        for inst in rep.instances:
            for pod in inst.pods:
                try:
                    node = topo.node_by_name(pod.node)
                except KeyError:
                    r.violations.append(f"replica {rep.index} {inst.pool}-{inst.index}: unknown node {pod.node!r}")
                    continue
                indices = {g.index for g in node.gpus}
                for g in pod.gpus:
                    if g not in indices:  # found here, before anything prices links to it
                        r.violations.append(
                            f"replica {rep.index} {inst.pool}-{inst.index}: GPU {g} does not exist on {pod.node}"
                        )
        if spec.router is not None:
            if rep.router is None:
                r.violations.append(f"replica {rep.index} has no router")
            else:
                try:
                    if not topo.node_by_name(rep.router).schedulable:
                        r.violations.append(f"replica {rep.index}: router on {rep.router}, which is unschedulable")
                except KeyError:
                    r.violations.append(f"replica {rep.index}: router on unknown node {rep.router!r}")
        elif rep.router is not None:
            r.violations.append(f"replica {rep.index} has a router on {rep.router}; the spec asks for none")


def _check_gpus_and_capacity(spec: ServingTopology, topo: Topology, pl: Placement, r: Report) -> None:
    used: dict[tuple[str, int], str] = {}
    cpu: dict[str, int] = defaultdict(int)
    mem: dict[str, int] = defaultdict(int)
    w = spec.objective
    for rep in pl.replicas:
        for inst in rep.instances:
            pool = spec.pools[inst.pool]
            who = f"replica {rep.index} {inst.pool}-{inst.index}"
            total = sum(len(p.gpus) for p in inst.pods)
            if total != pool.gpus_per_instance:
                r.violations.append(f"{who}: has {total} GPUs, needs TP x PP = {pool.gpus_per_instance}")
            if len({p.node for p in inst.pods}) != len(inst.pods):
                r.violations.append(f"{who}: two pods on one node")
            if pool.node_count is not None and (
                len(inst.pods) != pool.node_count or any(len(p.gpus) != pool.gpus_per_node for p in inst.pods)
            ):
                r.violations.append(f"{who}: needs {pool.node_count} nodes x {pool.gpus_per_node} GPUs")
            if any(not p.gpus for p in inst.pods):
                r.violations.append(f"{who}: a pod with no GPU")
            if pool.pipeline_parallel > 1 and pool.node_count is None and len(inst.pods) > 1:
                r.violations.append(
                    f"{who}: {pool.pipeline_parallel} pipeline stages without nodeCount must share one node"
                )
            if pool.template.engine != "custom" and len({len(p.gpus) for p in inst.pods}) > 1:
                # an engine preset runs one process group that splits TP evenly over its pods' nodes
                counts = [len(p.gpus) for p in inst.pods]
                r.violations.append(f"{who}: engine {pool.template.engine} needs equal GPUs per node, has {counts}")
            reqs = pool.template.resources.scheduled
            for pod in inst.pods:
                node = topo.node_by_name(pod.node)
                cpu[pod.node] += k8s.millicores(reqs.get("cpu", "0"))
                mem[pod.node] += k8s.bytes_of(reqs.get("memory", "0"))
                r.queue_units += len(pod.gpus) * cost.queue_units_per_gpu(node.queue_depth, w.queue_depth)
                r.cache_miss_units += len(pod.gpus) * cost.cache_miss_units_per_gpu(node.kv_cache_hit, w.cache_miss)
                for g in pod.gpus:
                    if g in node.busy or not node.schedulable:
                        r.violations.append(f"{who}: GPU {g} on {pod.node} is busy")
                    if (pod.node, g) in used:
                        r.violations.append(f"{who}: GPU {g} on {pod.node} is also used by {used[(pod.node, g)]}")
                    used[(pod.node, g)] = who
                    gpu = node.gpu(g)
                    sel = pool.gpu
                    if (sel.product and gpu.product != sel.product) or (
                        sel.min_memory_gib and gpu.memory_gib < sel.min_memory_gib
                    ):
                        r.violations.append(f"{who}: GPU {g} on {pod.node} ({gpu.product}) does not match the selector")
        if spec.router is not None and rep.router is not None:
            cpu[rep.router] += k8s.millicores(spec.router.cpu)
            mem[rep.router] += k8s.bytes_of(spec.router.memory)
    for name in sorted(cpu):
        node = topo.node_by_name(name)
        if cpu[name] > node.cpu_free_m:
            r.violations.append(f"node {name}: pods request {cpu[name]}m CPU, {node.cpu_free_m}m free")
        if mem[name] > node.memory_free_bytes:
            r.violations.append(f"node {name}: pods request {mem[name]} bytes of memory, {node.memory_free_bytes} free")


def forward_pass(
    spec: ServingTopology, topo: Topology, pool_name: str, gpus: list[tuple[int, int]], tokens: int
) -> tuple[list[cost.PathFigures], float]:
    """Each pipeline stage's ring figures and the all-reduce time of one forward pass over ``tokens``."""
    pool, m = spec.pools[pool_name], spec.model
    tp = pool.tensor_parallel
    stages = [stage_figures(spec, topo, pool_name, gpus[s * tp : (s + 1) * tp]) for s in range(pool.pipeline_parallel)]
    msg = cost.activation_bytes(m.hidden_size, tokens, m.bytes_per_element)
    return stages, cost.forward_pass_allreduce_us(m.layers, tp, stages, msg, steiner_figures(topo, gpus))


def _check_packing(spec: ServingTopology, topo: Topology, pl: Placement, r: Report) -> None:
    for rep in pl.replicas:
        for inst in rep.instances:
            pool = spec.pools[inst.pool]
            gpus = gpus_of(topo, inst)
            stages, us = forward_pass(spec, topo, inst.pool, gpus, spec.tokens_in_flight(inst.pool))
            for s, fig in enumerate(stages):
                if LEVEL_RANK[fig.level] > LEVEL_RANK[pool.placement.required]:
                    r.violations.append(
                        f"replica {rep.index} {inst.pool}-{inst.index} stage {s}: TP group spans "
                        f"{LEVEL_WORDS[fig.level]}, must pack within {LEVEL_WORDS[pool.placement.required]}"
                    )
            homes = sorted({topo.gpu_domain(n, g) for n, g in gpus})
            r.instances.append(
                InstanceCost(
                    rep.index,
                    inst.pool,
                    inst.index,
                    topo.lowest_common(homes),
                    steiner_figures(topo, gpus),
                    us,
                    cost.to_units(spec.objective.all_reduce * us),
                )
            )


def transfer_pair(spec: ServingTopology) -> tuple[str, str] | None:
    if spec.transfer is not None:
        return spec.transfer.source, spec.transfer.target
    roles = {spec.role_of(p): p for p in spec.pools}
    return (roles["prefill"], roles["decode"]) if "prefill" in roles and "decode" in roles else None


def _check_transfer(spec: ServingTopology, topo: Topology, pl: Placement, r: Report) -> None:
    pair = transfer_pair(spec)
    m = spec.model
    kv_bytes = cost.kv_cache_bytes(m.layers, m.kv_heads, m.head_dim, m.bytes_per_element, spec.workload.prompt_tokens)
    for rep in pl.replicas:
        if pair is None:
            r.replicas.append(ReplicaCost(rep.index, None, None, 0.0, 0))
            continue
        src = [i for i in rep.instances if i.pool == pair[0]]
        dst = [i for i in rep.instances if i.pool == pair[1]]
        worst: tuple[float, cost.PathFigures, float] | None = None
        for a in src:
            for b in dst:
                ga, gb = gpus_of(topo, a), gpus_of(topo, b)
                figs = kv_route(topo, ga + gb, len(ga), len(gb))
                bw = cost.kv_bandwidth_gbps(figs, len(ga), len(gb), topo.rails_per_node)
                us = cost.kv_transfer_us(kv_bytes, figs, len(ga), len(gb), topo.rails_per_node)
                t = spec.transfer
                where = f"replica {rep.index} {a.pool}-{a.index} -> {b.pool}-{b.index}"
                if t is not None and t.min_bandwidth_gbps and bw < t.min_bandwidth_gbps - 1e-9:
                    r.violations.append(f"{where}: KV path offers {bw:g} GB/s, floor is {t.min_bandwidth_gbps:g} GB/s")
                # maxLevel bounds how far apart the two instances are (their narrowest common domain), not
                # the route: a PCIe node's transfer may leave through its NIC rails and still be in the node.
                apart = topo.domains[topo.lowest_common(sorted({topo.gpu_domain(n, g) for n, g in ga + gb}))].level
                if t is not None and t.max_level and LEVEL_RANK[apart] > LEVEL_RANK[t.max_level]:
                    r.violations.append(f"{where}: apart across {LEVEL_WORDS[apart]}, limit is {t.max_level}")
                if worst is None or us > worst[0]:
                    worst = (us, figs, bw)
        assert worst is not None
        us, figs, bw = worst
        r.replicas.append(ReplicaCost(rep.index, figs, bw, us, cost.to_units(spec.objective.kv_transfer * us)))


def _check_router(spec: ServingTopology, topo: Topology, pl: Placement, r: Report) -> None:
    if spec.router is None or spec.router.near is None:
        return
    near = spec.router.near
    for rep in pl.replicas:
        if rep.router is None:
            continue
        node = topo.node_by_name(rep.router)
        homes = [topo.node_domain[node.index]]
        for inst in rep.instances:
            if inst.pool == near.pool:
                homes += [topo.gpu_domain(n, g) for n, g in gpus_of(topo, inst)]
        top = topo.lowest_common(sorted(set(homes)))
        if LEVEL_RANK[topo.domains[top].level] > LEVEL_RANK[near.level]:
            r.violations.append(
                f"replica {rep.index}: router on {rep.router} is not within "
                f"{LEVEL_WORDS[near.level]} of every {near.pool} instance"
            )


def _check_spread(spec: ServingTopology, topo: Topology, pl: Placement, r: Report) -> None:
    if spec.spread is None:
        return
    level = spec.spread.level
    owner: dict[str, int] = {}
    for rep in pl.replicas:
        touched: set[str] = set()
        for inst in rep.instances:
            for n, g in gpus_of(topo, inst):
                # The GPU's home stands for itself when even it is broader than the spread level.
                home = topo.gpu_domain(n, g)
                touched.add(topo.domain_at(home, level) or home)
        for d in sorted(touched):
            if d in owner and owner[d] != rep.index:
                r.violations.append(
                    f"replicas {owner[d]} and {rep.index} share {d} (spread across {spec.spread.level})"
                )
            owner.setdefault(d, rep.index)
