"""Why a placement is what it is: the numbers behind it, in the vocabulary of the people who run it.

``explain_placement`` turns (spec, topology, placement) into an ``Explanation``: plain data that the rich
view (view.py), ``--output json`` and the SVG all read. Every number comes from the shared cost
model (placer.topology.cost) through the independent checker (placer.check.verify), so the cost terms shown add up to
exactly the objective the solver minimised. Nothing here prints.

Phase 1 runs the checker (violations are shown, never hidden). Phase 2 describes each TP group: where its
GPUs are, the narrowest domain holding them, the slowest link its ring crosses and what that costs per
all-reduce and per forward pass. Phase 3 describes each replica's KV path (the worst prefill -> decode pair)
and router. Phase 4 splits the objective into its four weighted terms and checks SLO targets. Phase 5 adds
the counterfactuals: what the baselines (count-only, Kueue-style greedy, exhaustive) place on the same
cluster, costed the same way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from placer.check import verify
from placer.emit.targets.nccl import instance_settings
from placer.explain.counterfactuals import PolicyView, _baseline_view, policy_view, preferred_misses
from placer.explain.links import LinkView, bottleneck_link
from placer.model.k8s import field_alias
from placer.model.levels import LEVEL_RANK
from placer.model.placement import InstancePlacement, Placement, ReplicaPlacement
from placer.model.spec import ServingTopology
from placer.topology import cost
from placer.topology.graph import Topology


@dataclass(frozen=True)
class InstanceView:
    replica: int
    pool: str
    index: int
    role: str
    tensor_parallel: int
    pipeline_parallel: int
    pods: list[dict[str, Any]]  # [{"node": name, "gpus": [..]}]
    domain: str  # narrowest domain holding all its GPUs
    domain_level: str
    link: LinkView | None  # None for a single GPU
    message_bytes: float
    allreduce_us_per_call: float  # slowest stage's ring
    ring_gbps: float  # that ring's bandwidth: its bottleneck link's, x rings side by side across nodes
    ring_lanes: int  # rings side by side across nodes (one per rail), 1 inside a node
    allreduce_us_per_pass: float  # 2 per layer per stage, plus PP hand-offs
    preferred: str | None
    preferred_met: bool
    units: int
    nccl: list[dict[str, str]] = field(default_factory=list)  # [{name, value, reason}] for the --target outputs


@dataclass(frozen=True)
class TransferView:
    replica: int
    source: str  # the worst pair, e.g. "prefill-1"
    target: str
    route_domain: str  # the domain the transfer goes through
    link: LinkView
    lanes: int
    bandwidth_gbps: float  # lanes x per-lane bottleneck
    prompt_tokens: int
    kv_bytes: float
    transfer_us: float
    floor_gbps: float | None
    meets_floor: bool
    units: int


@dataclass(frozen=True)
class RouterView:
    replica: int
    node: str
    near_pool: str | None
    within: str  # narrowest domain holding the router and every instance of the near pool
    limit: str | None  # the level the spec allows
    ok: bool


@dataclass(frozen=True)
class CostTerm:
    name: str  # allReduce | kvTransfer | queueDepth | cacheMiss (the spec's objective keys)
    weight: float
    units: int
    share: float  # of the total; 0 when the total is 0
    note: str | None = None  # e.g. how many GPUs used had no measured KV-cache hit rate


@dataclass(frozen=True)
class SloCheck:
    name: str  # ttft | itl
    target_ms: float
    communication_ms: float  # what the placement adds to the request's latency
    share: float  # of the target
    ok: bool
    what: str  # which times were added up


@dataclass
class Explanation:
    deployment: str
    namespace: str
    cluster: str
    status: str
    objective: int | None
    bound: int | None
    gap: float | None
    notes: list[str]
    violations: list[str]
    instances: list[InstanceView] = field(default_factory=list)
    transfers: list[TransferView] = field(default_factory=list)
    routers: list[RouterView] = field(default_factory=list)
    terms: list[CostTerm] = field(default_factory=list)
    total_units: int = 0
    slos: list[SloCheck] = field(default_factory=list)
    policies: list[PolicyView] = field(default_factory=list)


# ---- naming links ----------------------------------------------------------------------------------


# ---- the explanation ---------------------------------------------------------------------------------


def explain_placement(
    spec: ServingTopology,
    topo: Topology,
    placement: Placement,
    baselines: list | None = None,
    target: str | None = None,
) -> Explanation:
    """Everything explain shows, from the inputs alone (the checker recomputes every figure). ``target``:
    the --target the placement was printed for, where known; its NCCL settings are the ones shown (only
    dra's pods get the IMEX channel multi-node NVLink needs)."""
    report = verify.check(spec, topo, placement)
    st = placement.stats
    ex = Explanation(
        placement.deployment,
        placement.namespace,
        placement.cluster,
        st.status,
        st.objective,
        st.bound,
        st.gap,
        list(st.notes),
        list(report.violations),
    )
    if report.violations and not report.instances:
        return ex  # structurally broken (unknown nodes, missing instances): nothing to measure
    costs = {(c.replica, c.pool, c.index): c for c in report.instances}
    for rep in placement.replicas:
        for inst in rep.instances:
            c = costs[(rep.index, inst.pool, inst.index)]
            ex.instances.append(_instance_view(spec, topo, rep.index, inst, c, imex=target == "dra"))
        transfer = _transfer_view(spec, topo, rep)
        if transfer is not None:
            ex.transfers.append(transfer)
        router = _router_view(spec, topo, rep)
        if router is not None:
            ex.routers.append(router)
    ex.total_units = report.total_units
    if st.objective is not None and report.total_units != st.objective:
        ex.notes.append(
            f"on this cluster file it costs {report.total_units:,} units, not the {st.objective:,} it was solved at "
            "(its telemetry or links have changed since); the solver's status and bound are for the cluster it saw"
        )
    w = spec.objective
    parts = [
        ("allReduce", w.all_reduce, sum(c.units for c in report.instances)),
        ("kvTransfer", w.kv_transfer, sum(r.units for r in report.replicas)),
        ("queueDepth", w.queue_depth, report.queue_units),
        ("cacheMiss", w.cache_miss, report.cache_miss_units),
    ]
    total = report.total_units
    notes = {"cacheMiss": unknown_hit_note(topo, placement)}
    ex.terms = [
        CostTerm(name, weight, units, units / total if total else 0.0, notes.get(name)) for name, weight, units in parts
    ]
    ex.slos = _slo_checks(spec, topo, placement, ex)
    placer_view = policy_view("placer", "placer (CP-SAT)", "placed", f"solver status: {st.status}", report)
    placer_view = replace(placer_view, preferred_misses=preferred_misses(spec, topo, report))
    ex.policies = [placer_view] + [_baseline_view(spec, topo, b, total) for b in baselines or []]
    return ex


def unknown_hit_note(topo: Topology, placement: Placement) -> str | None:
    """Say so when GPUs used have no measured KV-cache hit rate, rather than let the cache term pass for a
    measurement: they are charged at the mean of the measured GPUs (nothing when none is measured)."""
    nodes = {n.name: n for n in topo.nodes}
    used = unknown = 0
    for rep in placement.replicas:
        for inst in rep.instances:
            for pod in inst.pods:
                node = nodes.get(pod.node)
                used += len(pod.gpus)
                unknown += sum(1 for g in pod.gpus if node is not None and g in node.kv_cache_unknown)
    if not unknown:
        return None
    if all(n.kv_cache_unknown == frozenset(g.index for g in n.gpus) for n in topo.nodes):
        return "hit rate unknown on every GPU: not charged"
    return f"hit rate unknown on {unknown} of {used} GPUs used: charged at the measured GPUs' mean"


def _instance_view(
    spec: ServingTopology,
    topo: Topology,
    replica: int,
    inst: InstancePlacement,
    c: verify.InstanceCost,
    imex: bool = False,
) -> InstanceView:
    pool = spec.pools[inst.pool]
    gpus = verify.gpus_of(topo, inst)
    tp = pool.tensor_parallel
    stages = [gpus[s * tp : (s + 1) * tp] for s in range(pool.pipeline_parallel)]
    msg = cost.activation_bytes(spec.model.hidden_size, spec.tokens_in_flight(inst.pool), spec.model.bytes_per_element)
    figures, _ = verify.forward_pass(spec, topo, inst.pool, gpus, spec.tokens_in_flight(inst.pool))
    per_call = max(cost.ring_allreduce_us(tp, msg, f.bandwidth_gbps, f.latency_us) for f in figures)
    slowest = min(range(len(stages)), key=lambda s: figures[s].bandwidth_gbps)
    ring_gbps = figures[slowest].bandwidth_gbps
    lanes = (
        verify.ring_lanes_of(spec, topo, inst.pool, stages[slowest])
        if figures[slowest].level in cost.NETWORK_LEVELS
        else 1
    )
    worst_stage = max(range(len(stages)), key=lambda s: (figures[s].latency_us == 0, -figures[s].bandwidth_gbps))
    link = bottleneck_link(topo, stages[worst_stage]) if tp > 1 else None
    if pool.pipeline_parallel > 1 and len(gpus) > 1:
        whole = bottleneck_link(topo, gpus)
        if whole is not None and (link is None or (whole.bandwidth_gbps or 0) < (link.bandwidth_gbps or 0)):
            link = whole  # the PP hand-off crosses a slower link than any TP ring
    level = topo.domains[c.domain].level
    preferred = pool.placement.preferred
    return InstanceView(
        replica=replica,
        pool=inst.pool,
        index=inst.index,
        role=spec.role_of(inst.pool),
        tensor_parallel=tp,
        pipeline_parallel=pool.pipeline_parallel,
        pods=[{"node": p.node, "gpus": list(p.gpus)} for p in inst.pods],
        domain=c.domain,
        domain_level=level,
        link=link,
        message_bytes=msg,
        allreduce_us_per_call=per_call,
        ring_gbps=ring_gbps,
        ring_lanes=lanes,
        allreduce_us_per_pass=c.allreduce_us,
        preferred=preferred,
        preferred_met=preferred is None or LEVEL_RANK[level] <= LEVEL_RANK[preferred],
        units=c.units,
        nccl=[
            {"name": x.name, "value": x.value, "reason": x.reason} for x in instance_settings(spec, topo, inst, imex)
        ],
    )


def _transfer_view(spec: ServingTopology, topo: Topology, rep: ReplicaPlacement) -> TransferView | None:
    pair = verify.transfer_pair(spec)
    if pair is None:
        return None
    m = spec.model
    kv_bytes = cost.kv_cache_bytes(m.layers, m.kv_heads, m.head_dim, m.bytes_per_element, spec.workload.prompt_tokens)
    rails = topo.rails_per_node
    worst = None
    for a in (i for i in rep.instances if i.pool == pair[0]):
        for b in (i for i in rep.instances if i.pool == pair[1]):
            ga, gb = verify.gpus_of(topo, a), verify.gpus_of(topo, b)
            route = verify.kv_route(topo, ga + gb, len(ga), len(gb))
            us = cost.kv_transfer_us(kv_bytes, route, len(ga), len(gb), rails)
            if worst is None or us > worst[0]:
                worst = (us, a, b, ga, gb, route)
    if worst is None:
        return None
    us, a, b, ga, gb, route = worst
    top = topo.lowest_common(sorted({topo.gpu_domain(n, g) for n, g in ga + gb}))
    route_domain = next(d for d in topo.ancestors(top) if topo.domains[d].level == route.level)
    link = bottleneck_link(topo, ga + gb, route_domain)
    assert link is not None
    bw = cost.kv_bandwidth_gbps(route, len(ga), len(gb), rails)
    floor = spec.transfer.min_bandwidth_gbps if spec.transfer is not None else None
    return TransferView(
        replica=rep.index,
        source=f"{a.pool}-{a.index}",
        target=f"{b.pool}-{b.index}",
        route_domain=route_domain,
        link=link,
        lanes=cost.kv_lanes(route, len(ga), len(gb), rails),
        bandwidth_gbps=bw,
        prompt_tokens=spec.workload.prompt_tokens,
        kv_bytes=kv_bytes,
        transfer_us=us,
        floor_gbps=floor,
        meets_floor=floor is None or bw >= floor - 1e-9,
        units=cost.to_units(spec.objective.kv_transfer * us),
    )


def _router_view(spec: ServingTopology, topo: Topology, rep: ReplicaPlacement) -> RouterView | None:
    if spec.router is None or rep.router is None:
        return None
    node = topo.node_by_name(rep.router)
    near = spec.router.near
    homes = [topo.node_domain[node.index]]
    if near is not None:
        for inst in rep.instances:
            if inst.pool == near.pool:
                homes += [topo.gpu_domain(n, g) for n, g in verify.gpus_of(topo, inst)]
    within = topo.lowest_common(sorted(set(homes)))
    limit = near.level if near is not None else None
    ok = limit is None or LEVEL_RANK[topo.domains[within].level] <= LEVEL_RANK[limit]
    return RouterView(rep.index, rep.router, near.pool if near else None, within, limit, ok)


def _slo_checks(spec: ServingTopology, topo: Topology, placement: Placement, ex: Explanation) -> list[SloCheck]:
    """Communication time the placement adds to each SLO target. placer models links, not FLOPs, so the
    check is that communication leaves room within the budget; the share says how much it takes."""
    out = []
    prefill_pools = [p for p in spec.pools if spec.role_of(p) in ("prefill", "aggregated")]
    decode_pools = [p for p in spec.pools if spec.role_of(p) in ("decode", "aggregated")]
    if spec.slo.ttft_ms and prefill_pools:
        worst = 0.0
        prompt = spec.workload.prompt_tokens
        for rep in placement.replicas:
            prompt_pass = max(
                (
                    verify.forward_pass(spec, topo, inst.pool, verify.gpus_of(topo, inst), prompt)[1]
                    for inst in rep.instances
                    if inst.pool in prefill_pools
                ),
                default=0.0,
            )
            kv = max((t.transfer_us for t in ex.transfers if t.replica == rep.index), default=0.0)
            worst = max(worst, prompt_pass + kv)
        what = "all-reduces of one prompt's forward pass" + (" + KV transfer" if ex.transfers else "")
        out.append(_slo("ttft", spec.slo.ttft_ms, worst / 1000, what))
    if spec.slo.itl_ms and decode_pools:
        worst = max((i.allreduce_us_per_pass for i in ex.instances if i.pool in decode_pools), default=0.0)
        out.append(_slo("itl", spec.slo.itl_ms, worst / 1000, "all-reduces of one decode step's forward pass"))
    return out


def _slo(name: str, target_ms: float, comm_ms: float, what: str) -> SloCheck:
    return SloCheck(name, target_ms, comm_ms, comm_ms / target_ms, comm_ms <= target_ms, what)


# ---- policies side by side ---------------------------------------------------------------------------


# ---- machine output ----------------------------------------------------------------------------------


def _rounded(value: Any, keys: bool = True) -> Any:
    """camelCase keys like every placer file; floats to 4 decimals so JSON output is stable and readable;
    infinities as null. Pool names used as keys are kept as they are."""
    if isinstance(value, float):
        return None if value != value or value in (float("inf"), float("-inf")) else round(value, 4)
    if isinstance(value, dict):
        return {
            (field_alias(k) if keys else k): _rounded(v, keys=k != "allreduce_us_per_pass") for k, v in value.items()
        }
    if isinstance(value, list):
        return [_rounded(v, keys) for v in value]
    return value


def to_json(ex: Explanation) -> dict[str, Any]:
    """The explanation as plain data (``placer explain --output json``); keys are stable."""
    return _rounded(
        {
            "apiVersion": "placer.dev/v1alpha1",
            "kind": "Explanation",
            "metadata": {"name": ex.deployment, "namespace": ex.namespace},
            "cluster": ex.cluster,
            "solver": {"status": ex.status, "objective": ex.objective, "bound": ex.bound, "gap": ex.gap},
            "notes": ex.notes,
            "violations": ex.violations,
            "instances": [asdict(i) for i in ex.instances],
            "transfers": [asdict(t) for t in ex.transfers],
            "routers": [asdict(r) for r in ex.routers],
            "cost": {
                "totalUnits": ex.total_units,
                "unitsPerUs": cost.UNITS_PER_US,
                "terms": [asdict(t) for t in ex.terms],
            },
            "slos": [asdict(s) for s in ex.slos],
            "policies": [asdict(p) for p in ex.policies],
        }
    )
