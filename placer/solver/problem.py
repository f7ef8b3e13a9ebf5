"""What the solver, the greedy and the checker all consume: the spec and the topology turned into pools,
candidates and costs, with integer indices inside.

Phase 1 finds, per pool, the nodes whose GPUs match its selector. Phase 2 lists every place an instance
could go and what it would cost there: a *unit* (a node, or a CPU socket of a PCIe node) when the instance
fits on one node; a *pooled* domain (NVLink domain, rack, leaf, cluster) when it may span nodes and takes
GPUs from the domain's free pool, the split decided after solving; a *container* for multi-node instances
with a fixed GPUs-per-node. Only places with enough free GPUs are listed. Phase 3 lists, per replica-level
rule (KV transfer, router proximity), the domains that satisfy it, with the KV-transfer cost of each.

Costs here are the cost model's (placer.topology.cost) worst case over the pool's eligible nodes in a domain: exact
when those nodes are alike, which is how racks are built; the checker recomputes from the real GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from placer.model import k8s
from placer.model.errors import InputError
from placer.model.levels import LEVEL_RANK, LEVEL_WORDS
from placer.model.placement import InstancePlacement
from placer.model.spec import Pool, ServingTopology
from placer.solver.candidates import (
    Candidate,
    Container,
    kv_containers,
    pool_candidates,
    router_containers,
)
from placer.solver.figures import domain_figures, free_in, unlike_anywhere, worst_figures
from placer.solver.layout import layout
from placer.topology import cost
from placer.topology.graph import Node, Topology


@dataclass(frozen=True)
class PoolPlan:
    name: str
    role: str
    tensor_parallel: int
    pipeline_parallel: int
    size: int  # GPUs per instance
    instances: int
    node_count: int | None  # multi-node: exact nodes per instance
    gpus_per_node: int | None
    eligible: frozenset[int]  # node indices whose GPUs match the selector
    selector: tuple[str | None, float | None]
    required: str
    preferred: str | None
    message_bytes: float
    candidates: tuple[Candidate, ...]
    cpu_m: int  # per pod
    memory_bytes: int

    @property
    def multi_node(self) -> bool:
        return self.node_count is not None

    @property
    def slot(self) -> int:
        """The fewest GPUs one node must have free to hold part of an instance: the whole instance when it
        may only sit on one node, gpusPerNode for multi-node, 1 when it may span nodes."""
        if self.multi_node:
            return self.gpus_per_node or 1
        return self.size if all(c.kind == "unit" for c in self.candidates) else 1


@dataclass(frozen=True)
class Colocation:
    """A replica-level rule: all members' GPUs (and the router, if a member) inside one container domain."""

    name: str  # "transfer" or "router"
    pools: tuple[str, ...]
    router: bool
    containers: tuple[Container, ...]
    rule: str  # plain words, for conflict explanations


@dataclass(frozen=True)
class Kept:
    """Instances already running (``--keep``, ``placer plan``): ``hard`` pins them to their GPUs; soft ones
    may move, and the model counts how many stay (plan minimises moves). Keys are (replica, pool, index)."""

    instances: dict[tuple[int, str, int], InstancePlacement]
    routers: dict[int, str]  # replica -> node name
    hard: bool = True

    @property
    def replicas(self) -> set[int]:
        return {k for k, _p, _i in self.instances} | set(self.routers)


@dataclass
class Problem:
    spec: ServingTopology
    topology: Topology
    pools: dict[str, PoolPlan]
    colocations: list[Colocation]
    replicas: int
    min_replicas: int
    spread_level: str | None
    telemetry_units: tuple[int, ...]  # per node: cost units per GPU used (shared by every state of the cluster)
    router_cpu_m: int = 0
    router_memory_bytes: int = 0
    router_nodes: tuple[int, ...] = ()
    kv_bytes: float = 0.0
    transfer_pair: tuple[str, str] | None = None
    # Domains priced at a worst case over nodes whose links differ: the model's optimum is then not
    # proven to be the true one, so the solver does not claim "optimal" (docs/DESIGN.md, Exactness).
    unlike_domains: tuple[str, ...] = ()
    kept: Kept | None = None  # running instances: pinned (hard) or movable at a price (soft)
    # (replica, colocation) -> the container domain it must use (placer.solver.anchor fixes these)
    pins: dict[tuple[int, str], str] = field(default_factory=dict)

    @property
    def has_router(self) -> bool:
        return self.spec.router is not None


def with_kept(problem: Problem, kept: Kept) -> Problem:
    """The problem with running instances attached; their routers' nodes stay router candidates even where
    the pruning in _router_candidates dropped them."""
    topo = problem.topology
    routers = {topo.node_by_name(n).index for n in kept.routers.values()}
    nodes = tuple(sorted(set(problem.router_nodes) | routers, key=topo.node_ranks.__getitem__))
    return replace(problem, kept=kept, router_nodes=nodes)


def kept_candidate(problem: Problem, inst: InstancePlacement) -> int | None:
    """The candidate a running instance occupies: its recorded domain when that is a candidate, else the
    narrowest candidate domain holding all its GPUs (records read back from Grove carry no domain)."""
    plan = problem.pools[inst.pool]
    by_domain = {c.domain: ci for ci, c in enumerate(plan.candidates)}
    if inst.domain in by_domain:
        return by_domain[inst.domain]
    topo = problem.topology
    doms = [topo.gpu_domain(topo.node_by_name(p.node).index, g) for p in inst.pods for g in p.gpus]
    return next((by_domain[d] for d in topo.ancestors(topo.lowest_common(doms)) if d in by_domain), None)


def eligible_nodes(topo: Topology, pool: Pool) -> frozenset[int]:
    """The nodes whose GPUs the pool's selector matches: the same on every state of one cluster (usage does
    not change a node's GPUs or whether it is schedulable), so worked out once (Topology.cached)."""
    sel = pool.gpu
    return topo.cached(
        ("eligible", sel.product, sel.min_memory_gib),
        lambda: frozenset(node.index for node in topo.nodes if node_matches(node, sel.product, sel.min_memory_gib)),
    )


def node_matches(node: Node, product: str | None, min_memory_gib: float | None) -> bool:
    """Whether a pool whose GPU selector asks for this product and memory may use the node's GPUs."""
    if not node.gpus or not node.schedulable:
        return False
    g = node.gpus[0]
    if product is not None and g.product != product:
        return False
    return min_memory_gib is None or g.memory_gib >= min_memory_gib


def build_problem(spec: ServingTopology, topo: Topology) -> Problem:
    """Turn spec + topology into pools with candidates; raises InfeasibleError when a pool has nowhere to go."""
    memo: dict = {}
    pools: dict[str, PoolPlan] = {}
    for name, pool in spec.pools.items():
        eligible = eligible_nodes(topo, pool)
        check_pool_fits(topo, name, pool, eligible)
        shape = layout(topo, pool, eligible)
        cands = pool_candidates(topo, spec, name, pool, eligible, memo, shape)
        node_count, gpus_per_node, _ = shape
        reqs = pool.template.resources.scheduled
        pools[name] = PoolPlan(
            name=name,
            role=spec.role_of(name),
            tensor_parallel=pool.tensor_parallel,
            pipeline_parallel=pool.pipeline_parallel,
            size=pool.gpus_per_instance,
            instances=pool.instances,
            node_count=node_count,
            gpus_per_node=gpus_per_node,
            eligible=eligible,
            selector=(pool.gpu.product, pool.gpu.min_memory_gib),
            required=pool.placement.required,
            preferred=pool.placement.preferred,
            message_bytes=cost.activation_bytes(
                spec.model.hidden_size, spec.tokens_in_flight(name), spec.model.bytes_per_element
            ),
            candidates=cands,
            cpu_m=k8s.millicores(reqs.get("cpu", "0")),
            memory_bytes=k8s.bytes_of(reqs.get("memory", "0")),
        )
    w = spec.objective
    # Metrics are fixed when the cluster is loaded, so every state of it (fleet batches) shares the vector.
    telemetry = topo.cached(
        ("telemetry", w.queue_depth, w.cache_miss),
        lambda: tuple(
            cost.telemetry_per_gpu_units(n.queue_depth, n.kv_cache_hit, w.queue_depth, w.cache_miss) for n in topo.nodes
        ),
    )
    m = spec.model
    problem = Problem(
        spec=spec,
        topology=topo,
        pools=pools,
        colocations=[],
        replicas=spec.replicas,
        min_replicas=spec.replicas_floor,
        # One replica cannot share a domain with another: no spread rule to model (the checker agrees).
        spread_level=spec.spread.level if spec.spread and spec.replicas > 1 else None,
        telemetry_units=telemetry,
        kv_bytes=cost.kv_cache_bytes(
            m.layers, m.kv_heads, m.head_dim, m.bytes_per_element, spec.workload.prompt_tokens
        ),
    )
    _add_transfer(problem, memo)
    _add_router(problem)
    problem.unlike_domains = _unlike_domains(memo) if unlike_anywhere(topo) else ()
    return problem


def _unlike_domains(memo: dict) -> tuple[str, ...]:
    """Domains for which nodes priced up to them had different figures (see Problem.unlike_domains)."""
    seen: dict[str, set[tuple[float, float]]] = {}
    for (_node, domain), figs in memo.items():
        seen.setdefault(domain, set()).add((figs.bandwidth_gbps, figs.latency_us))
    return tuple(sorted(d for d, f in seen.items() if len(f) > 1))


def check_pool_fits(topo: Topology, name: str, pool: Pool, eligible: frozenset[int]) -> None:
    """The input errors build_problem can raise (a pool's shape against the largest matching node): cheap,
    so a batch checks every spec before solving any."""
    where = f"pools.{name}"
    if not eligible:
        return  # nothing matches the selector: no candidates; explained by placer.solver.conflicts if it matters
    biggest = topo.cached(("biggest", eligible), lambda: max(len(topo.nodes[n].gpus) for n in eligible))
    if pool.node_count is not None:
        if pool.gpus_per_node and pool.gpus_per_node > biggest:
            raise InputError(
                f"{where}.gpusPerNode: {pool.gpus_per_node} is more than the {biggest} GPUs "
                "of the largest matching node"
            )
        return
    size = pool.gpus_per_instance
    if pool.pipeline_parallel > 1 and size > biggest:
        raise InputError(
            f"{where}: {pool.pipeline_parallel} pipeline stages of TP{pool.tensor_parallel} need {size} GPUs; "
            f"without nodeCount/gpusPerNode an instance must fit on one node and the largest matching node has "
            f"{biggest}; set gpusPerNode to a multiple of {pool.tensor_parallel} and nodeCount to match"
        )
    if pool.placement.required in ("node", "socket") and size > biggest:
        raise InputError(
            f"{where}.tensorParallel: {size} GPUs cannot pack within {LEVEL_WORDS[pool.placement.required]}: "
            f"the largest matching node has {biggest} GPUs"
        )


def containers_for(problem: Problem, pools: tuple[str, ...], allowed, memo: dict, kv: bool) -> tuple[Container, ...]:
    """Domains that can hold one replica's members of ``pools`` and pass ``allowed``, with their KV cost."""
    topo = problem.topology
    need = sum(problem.pools[p].size * problem.pools[p].instances for p in pools)
    eligible = set().union(*(problem.pools[p].eligible for p in pools))
    out = []
    for dom_id in sorted(topo.domains, key=topo.order.__getitem__):
        dom = topo.domains[dom_id]
        nodes = [n for n in dom.nodes if n in eligible]
        free = sum(free_in(topo, n, dom) for n in nodes)
        if free < need:
            continue
        kv_us, units, bw = _kv_price(problem, pools, dom_id, nodes, memo) if kv else (0.0, 0, None)
        if not allowed(dom, bw):
            continue
        out.append(Container(dom_id, topo.order[dom_id], kv_us, units))
    return tuple(out)


def _kv_price(problem: Problem, pools: tuple[str, ...], dom_id: str, nodes: list[int], memo: dict):
    """(KV-transfer us, its cost units, GB/s) of one replica's prefill -> decode inside a domain."""
    topo = problem.topology
    figs = domain_figures(topo, dom_id, nodes, memo)
    src, dst = (problem.pools[p] for p in pools)
    routes = [figs] + [worst_figures(topo, a, nodes, memo) for a in topo.ancestors(dom_id)[1:]]
    route = cost.best_kv_route(routes, src.size, dst.size, topo.rails_per_node)
    kv_us = cost.kv_transfer_us(problem.kv_bytes, route, src.size, dst.size, topo.rails_per_node)
    bw = cost.kv_bandwidth_gbps(route, src.size, dst.size, topo.rails_per_node)
    return kv_us, cost.to_units(problem.spec.objective.kv_transfer * kv_us), bw


def _add_transfer(problem: Problem, memo: dict) -> None:
    spec = problem.spec
    t = spec.transfer
    if t is None:
        roles = {spec.role_of(p): p for p in spec.pools}
        if "prefill" in roles and "decode" in roles:
            pair = (roles["prefill"], roles["decode"])
            floor, max_level = None, None
        else:
            return
    else:
        pair, floor, max_level = (t.source, t.target), t.min_bandwidth_gbps, t.max_level
    problem.transfer_pair = pair

    def allowed(dom, bw: float | None) -> bool:
        if max_level is not None and LEVEL_RANK[dom.level] > LEVEL_RANK[max_level]:
            return False
        return floor is None or (bw is not None and bw >= floor)

    src, dst = (problem.pools[p] for p in pair)
    key = (src.size, dst.size, problem.kv_bytes, spec.objective.kv_transfer, floor, max_level)
    conts = kv_containers(
        problem.topology,
        src.eligible | dst.eligible,
        src.size * src.instances + dst.size * dst.instances,
        key,
        lambda dom_id, nodes, pairs: _kv_price(problem, pair, dom_id, nodes, pairs),
        allowed,
        memo,
    )
    rule = f"{pair[0]} and {pair[1]} of one replica"
    if floor is not None:
        rule += f" joined by at least {floor:g} GB/s"
    if max_level is not None:
        rule += f" within {LEVEL_WORDS[max_level]}"
    problem.colocations.append(Colocation("transfer", pair, False, conts, rule))


def _add_router(problem: Problem) -> None:
    spec = problem.spec
    router = spec.router
    if router is None:
        return
    problem.router_cpu_m = k8s.millicores(router.cpu)
    problem.router_memory_bytes = k8s.bytes_of(router.memory)
    problem.router_nodes = _router_candidates(problem)
    if router.near is None:
        return
    level = router.near.level
    near = problem.pools[router.near.pool]
    conts = router_containers(problem.topology, near.eligible, near.size * near.instances, level, problem.router_nodes)
    problem.colocations.append(
        Colocation(
            "router",
            (router.near.pool,),
            True,
            conts,
            f"router within {LEVEL_WORDS[level]} of every {router.near.pool} instance",
        )
    )


def _router_candidates(problem: Problem) -> tuple[int, ...]:
    """Nodes a router may go to. A node whose CPU and memory cannot run out, even if every free GPU became
    a pod of its own and every replica's router landed there, is interchangeable with any other such node
    under the same parent domain, provided that parent may itself hold the router and its pool (a router
    that must share a node cannot move): keeping the first ``replicas`` of them per parent is then exact
    and cuts thousands of literals at 10k GPUs."""
    topo = problem.topology
    pod_cpu = max((p.cpu_m for p in problem.pools.values()), default=0)
    pod_mem = max((p.memory_bytes for p in problem.pools.values()), default=0)
    near = problem.spec.router.near.level if problem.spec.router and problem.spec.router.near else None
    parents = _swap_parents(topo, near)
    cpu, mem, replicas = problem.router_cpu_m, problem.router_memory_bytes, problem.replicas
    kept_per_parent: dict[str | None, int] = {}
    out = []
    for n, parent in zip(topo.nodes, parents, strict=True):
        cpu_free, mem_free = n.cpu_free_m, n.memory_free_bytes
        if not (n.schedulable and cpu_free >= cpu and mem_free >= mem):
            continue
        if parent is not None:
            pods = len(n.free_gpus)
            if cpu_free >= replicas * cpu + pods * pod_cpu and mem_free >= replicas * mem + pods * pod_mem:
                kept = kept_per_parent.get(parent, 0)
                if kept >= replicas:
                    continue
                kept_per_parent[parent] = kept + 1
        out.append(n.index)
    return tuple(sorted(out, key=topo.node_ranks.__getitem__))


def _swap_parents(topo: Topology, near: str | None) -> list[str | None]:
    """Per node, the parent domain under which a roomy router node may stand in for another, or None where
    that is not exact: no parent, or one broader than the router's ``near`` level (a router that must share
    a domain with its pool cannot move out of it). Static per cluster (Topology.cached)."""

    def make() -> list[str | None]:
        out = []
        for n in topo.nodes:
            parent = topo.domains[topo.node_domain[n.index]].parent
            ok = parent is not None and (near is None or LEVEL_RANK[topo.domains[parent].level] <= LEVEL_RANK[near])
            out.append(parent if ok else None)
        return out

    return topo.cached(("router-parents", near), make)
