"""What every baseline shares: the cluster's free capacity as it fills up, what each pool asks for, the
replica-after-replica loop, and the way concrete GPUs become a ``Placement``.

The baselines work on ``Topology`` directly, in names and GPU indices, and share nothing with the solver's
``Problem`` or its greedy: a baseline that reused the solver's candidates would inherit its mistakes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from placer.model import k8s
from placer.model.levels import LEVEL_RANK, LEVELS
from placer.model.placement import InstancePlacement, Pod, ReplicaPlacement
from placer.model.spec import ServingTopology
from placer.solver.problem import eligible_nodes
from placer.topology.graph import Topology

Gpus = list[tuple[int, list[int]]]  # (node index, GPU indices) per pod


@dataclass(frozen=True)
class PoolDemand:
    """One pool as the baselines see it: how many GPUs in which shape, on which nodes, with what pod."""

    name: str
    instances: int
    tensor_parallel: int
    pipeline_parallel: int
    size: int  # GPUs per instance
    node_count: int | None
    gpus_per_node: int | None
    required: str
    eligible: frozenset[int]  # schedulable nodes whose GPUs match the selector
    cpu_m: int  # per pod
    memory_bytes: int

    @property
    def multi_node(self) -> bool:
        return self.node_count is not None

    @property
    def whole_node(self) -> bool:
        """A PP > 1 instance without nodeCount/gpusPerNode must fit one node (docs/DESIGN.md, known limits)."""
        return self.node_count is None and self.pipeline_parallel > 1


@dataclass
class Context:
    """Per (spec, topology): pools, GPU homes, and where every domain sits at every level."""

    spec: ServingTopology
    topo: Topology
    pools: list[PoolDemand]  # in spec order (the order a queue would see them)
    home_of: list[dict[int, str]]  # node -> GPU index -> its narrowest domain (socket or node)
    router_cpu_m: int = 0
    router_memory_bytes: int = 0
    _scopes: dict[str, dict[str, str | None]] = field(default_factory=dict)
    _spread_of: list[dict[int, str | None]] = field(default_factory=list)
    single_home: list[str | None] = field(default_factory=list)  # node -> its one home, None with sockets

    @staticmethod
    def build(spec: ServingTopology, topo: Topology) -> Context:
        pools = []
        for name, pool in spec.pools.items():
            reqs = pool.template.resources.scheduled
            pools.append(
                PoolDemand(
                    name=name,
                    instances=pool.instances,
                    tensor_parallel=pool.tensor_parallel,
                    pipeline_parallel=pool.pipeline_parallel,
                    size=pool.gpus_per_instance,
                    node_count=pool.node_count,
                    gpus_per_node=pool.gpus_per_node,
                    required=pool.placement.required,
                    eligible=eligible_nodes(topo, pool),
                    cpu_m=k8s.millicores(reqs.get("cpu", "0")),
                    memory_bytes=k8s.bytes_of(reqs.get("memory", "0")),
                )
            )
        home_of = [{g.index: topo.gpu_domain(node.index, g.index) for g in node.gpus} for node in topo.nodes]
        ctx = Context(spec, topo, pools, home_of)
        ctx.single_home = [next(iter(set(h.values()))) if len(set(h.values())) == 1 else None for h in home_of]
        if spec.router is not None:
            ctx.router_cpu_m = k8s.millicores(spec.router.cpu)
            ctx.router_memory_bytes = k8s.bytes_of(spec.router.memory)
        if spec.spread is not None:
            table = ctx.scope_table(spec.spread.level)
            ctx._spread_of = [{g: table[h] for g, h in homes.items()} for homes in home_of]
        return ctx

    def scope_table(self, level: str) -> dict[str, str | None]:
        """Domain -> the broadest domain at ``level`` or narrower that contains it (None if the domain itself
        is broader): the domain a pod set required at ``level`` must stay in, as Kueue sees it. With merged
        domains a DGX node is its own NVLink domain, so it is its own scope at both levels."""
        if level not in self._scopes:
            self._scopes[level] = {d: self.topo.domain_at(d, level) for d in self.topo.domains}
        return self._scopes[level]

    def scope(self, domain: str, level: str) -> str | None:
        return self.scope_table(level)[domain]

    def levels_up_to(self, level: str) -> list[str]:
        return [lv for lv in LEVELS if LEVEL_RANK[lv] <= LEVEL_RANK[level]]

    def pod_fits(self, state: State, node: int, cpu_m: int, memory_bytes: int) -> bool:
        return state.cpu[node] >= cpu_m and state.mem[node] >= memory_bytes

    def spread_domains(self, pods: Gpus) -> set[str | None]:
        """Spread-level domains these GPUs touch, as the checker counts them (None for a GPU with no domain
        that narrow, e.g. a GPU of an NVLink node under socket-level spread)."""
        return {self._spread_of[n][g] for n, gpus in pods for g in gpus} if self._spread_of else set()

    def usable(self, state: State, node: int) -> list[int]:
        """Free GPUs of ``node`` that spread allows: none whose spread-level domain an earlier replica uses."""
        free = state.free[node]
        if not state.spread_used:
            return free
        keys = self._spread_of[node]
        return [g for g in free if keys[g] not in state.spread_used]


class State:
    """Free GPUs, CPU and memory per node as baselines place pods; a journal undoes an unfinished replica."""

    def __init__(self, topo: Topology):
        self.free: list[list[int]] = [list(n.free_gpus) for n in topo.nodes]  # empty when unschedulable
        self.cpu: list[int] = [n.cpu_free_m for n in topo.nodes]
        self.mem: list[int] = [n.memory_free_bytes for n in topo.nodes]
        self.spread_used: set[str | None] = set()
        self._journal: list[tuple[int, tuple[int, ...], int, int]] = []

    def take(self, node: int, gpus: list[int], cpu_m: int, memory_bytes: int) -> None:
        gone = set(gpus)
        assert gone <= set(self.free[node]), "a baseline took a GPU that is not free"
        self.free[node] = [g for g in self.free[node] if g not in gone]
        self.cpu[node] -= cpu_m
        self.mem[node] -= memory_bytes
        self._journal.append((node, tuple(gpus), cpu_m, memory_bytes))

    def mark(self) -> int:
        return len(self._journal)

    def rollback(self, mark: int) -> None:
        while len(self._journal) > mark:
            node, gpus, cpu_m, memory_bytes = self._journal.pop()
            self.free[node] = sorted(self.free[node] + list(gpus))
            self.cpu[node] += cpu_m
            self.mem[node] += memory_bytes


class NoFit(Exception):
    """A pod or TP group of the current replica has nowhere to go; the message says why, for operators."""


PlaceReplica = Callable[[Context, State, int], tuple[dict[tuple[str, int], Gpus], int | None]]
"""Places one replica into ``State`` (pods per (pool, instance), router node) or raises NoFit."""


def place_replicas(ctx: Context, place_one: PlaceReplica) -> tuple[list[ReplicaPlacement], str | None]:
    """Replica after replica, each all-or-nothing: an unfinished replica gives its GPUs back and ends the
    walk (the next one is identical and would not fit either). Returns the replicas and why it stopped."""
    state = State(ctx.topo)
    out: list[ReplicaPlacement] = []
    for k in range(ctx.spec.replicas):
        mark = state.mark()
        try:
            pods, router = place_one(ctx, state, k)
        except NoFit as exc:
            state.rollback(mark)
            return out, f"replica {k}: {exc}"
        for p in pods.values():
            state.spread_used |= ctx.spread_domains(p)
        out.append(replica_placement(ctx, k, pods, router))
    return out, None


def replica_placement(ctx: Context, k: int, pods: dict[tuple[str, int], Gpus], router: int | None) -> ReplicaPlacement:
    """Concrete GPUs to the solver's output form: pods by node index, GPUs ascending, instances by (pool,
    index); an instance's domain is the narrowest one holding its GPUs."""
    topo = ctx.topo
    instances = []
    for (pool, i), got in sorted(pods.items()):
        merged: dict[int, list[int]] = {}
        for n, gpus in got:
            merged.setdefault(n, []).extend(gpus)
        homes = sorted({ctx.home_of[n][g] for n, gpus in merged.items() for g in gpus})
        instances.append(
            InstancePlacement(
                pool,
                i,
                tuple(Pod(topo.nodes[n].name, tuple(sorted(g))) for n, g in sorted(merged.items())),
                topo.lowest_common(homes),
            )
        )
    return ReplicaPlacement(k, tuple(instances), None if router is None else topo.nodes[router].name)


def gib(num_bytes: int) -> str:
    return f"{num_bytes / 2**30:g}Gi"
