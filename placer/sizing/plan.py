"""``placer size``'s work: place the spec, read each pool's communication figures and GPU product from the
placement it got, size every pool with the roofline, and place again with the new counts until the counts
stop changing (a larger pool may land on slower links, which may need more instances).

Phase 1 (inputs): the workload's rate, the SLO targets each role needs, and the model's parameter count.
Phase 2 (loop, at most ``MAX_ROUNDS``): place -> check -> figures per pool -> counts. When the cluster
cannot place the new counts, the last placement that fit gives the figures and a note says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from placer.check.gate import verify_placement
from placer.check.verify import Report, forward_pass, gpus_of
from placer.model.errors import InfeasibleError, InputError
from placer.model.placement import Placement
from placer.model.spec import ModelShape, ServingTopology
from placer.sizing import roofline
from placer.sizing.gpus import GpuFigures, figures_of
from placer.solver.options import SolveOptions
from placer.topology import cost
from placer.topology.graph import Topology

MAX_ROUNDS = 4


@dataclass(frozen=True)
class PoolResult:
    name: str
    instance: roofline.Instance
    comm: roofline.Comm
    sizing: roofline.Sizing


@dataclass
class SizeResult:
    spec: ServingTopology  # the input with the new counts
    load: roofline.Load  # per replica
    model: roofline.ModelCost
    efficiency: roofline.Efficiency
    pools: list[PoolResult]
    rounds: int
    notes: list[str] = field(default_factory=list)


def parameters_of(model: ModelShape) -> float:
    """The parameter count: given, or from the shape (attention with q/o of hidden x hidden, k/v of
    hidden x kvHeads x headDim, a gated MLP of 3 hidden x intermediate matrices; embeddings left out)."""
    if model.parameters is not None:
        return model.parameters
    if model.intermediate_size is None:
        raise InputError("model.parameters: placer size needs the parameter count (or model.intermediateSize)")
    h, kv = model.hidden_size, model.kv_heads * model.head_dim
    return float(model.layers * (2 * h * h + 2 * h * kv + 3 * h * model.intermediate_size))


def model_cost(spec: ServingTopology) -> roofline.ModelCost:
    m = spec.model
    return roofline.ModelCost(
        parameters=parameters_of(m),
        bytes_per_element=m.bytes_per_element,
        layers=m.layers,
        hidden_size=m.hidden_size,
        kv_bytes_per_token=cost.kv_cache_bytes(m.layers, m.kv_heads, m.head_dim, m.bytes_per_element, 1),
    )


def load_of(spec: ServingTopology, replicas: int | None = None) -> roofline.Load:
    """The load one replica carries (the rate split over ``replicas``, by default the spec's), and the targets
    each role present needs (bad input when missing)."""
    w, slo = spec.workload, spec.slo
    if w.request_rate is None:
        raise InputError("workload.requestRate: placer size needs the request rate (requests per second)")
    roles = {spec.role_of(p) for p in spec.pools}
    if roles & {"prefill", "aggregated"} and slo.ttft_ms is None:
        raise InputError("slo.ttftMs: placer size needs a TTFT target to size prefill or aggregated pools")
    if roles & {"decode", "aggregated"} and slo.itl_ms is None:
        raise InputError("slo.itlMs: placer size needs an ITL target to size decode or aggregated pools")
    return roofline.Load(
        rate=w.request_rate / (replicas or spec.replicas),
        prompt_mean=w.prompt_tokens,
        prompt_p90=w.prompt_p90,
        output_mean=w.output_tokens,
        ttft_ms=slo.ttft_ms,
        itl_ms=slo.itl_ms,
    )


def with_counts(spec: ServingTopology, counts: dict[str, int]) -> ServingTopology:
    pools = {name: pool.model_copy(update={"instances": counts[name]}) for name, pool in spec.pools.items()}
    return spec.model_copy(update={"pools": pools})


def pool_figures(
    spec: ServingTopology, topo: Topology, placement: Placement, report: Report, pool: str
) -> tuple[roofline.Instance, roofline.Comm]:
    """The pool's worst placed instance: slowest GPU product, least memory, largest all-reduce terms; and
    the replica's slowest KV path when the pool is the transfer's source (prefill pays the transfer)."""
    p = spec.pools[pool]
    fixed = per_token = 0.0
    products: set[str] = set()
    memory = float("inf")
    for rep in placement.replicas:
        for inst in rep.instances:
            if inst.pool != pool:
                continue
            gpus = gpus_of(topo, inst)
            zero = forward_pass(spec, topo, pool, gpus, 0)[1]
            one = forward_pass(spec, topo, pool, gpus, 1)[1]
            fixed, per_token = max(fixed, zero), max(per_token, one - zero)
            for n, g in gpus:
                gpu = topo.nodes[n].gpu(g)
                products.add(gpu.product)
                memory = min(memory, gpu.memory_gib)
    where = f"pools.{pool}"
    rows: list[GpuFigures] = [figures_of(name, where) for name in sorted(products)]
    slowest = min(rows, key=lambda f: (f.hbm_tbps, f.bf16_tflops, f.product))
    kv_bw: float | None = None
    kv_lat = 0.0
    if spec.role_of(pool) == "prefill":
        paths = [(r.kv_bandwidth_gbps, r.kv_path) for r in report.replicas if r.kv_bandwidth_gbps is not None]
        if paths:
            bw, path = min(paths, key=lambda x: (x[0], -(x[1].latency_us if x[1] else 0.0)))
            kv_bw, kv_lat = bw, path.latency_us if path else 0.0
    instance = roofline.Instance(p.tensor_parallel, p.gpus_per_instance, slowest, memory)
    return instance, roofline.Comm(fixed, per_token, kv_bw, kv_lat)


def size_spec(
    spec: ServingTopology,
    topo: Topology,
    place: Callable[[ServingTopology, Topology, SolveOptions], Placement],
    options: SolveOptions,
    efficiency: roofline.Efficiency = roofline.Efficiency(),  # noqa: B008
    progress: Callable[[str], None] = lambda _m: None,
) -> SizeResult:
    """Counts per pool that meet the SLO with the communication of the placement placer gives them.
    ``place`` is the solver entry (``pipeline.place``), passed in so this stage needs none above it."""
    load, model = load_of(spec), model_cost(spec)
    notes: list[str] = []
    counts = {name: p.instances for name, p in spec.pools.items()}
    placed = _first_placement(spec, topo, place, options, counts, notes)
    results: list[PoolResult] = []
    rounds = 0
    for rounds in range(1, MAX_ROUNDS + 1):
        current, placement, report = placed
        serving = _serving_replicas(spec, current, placement)
        load = load_of(spec, serving)
        if serving < spec.replicas:
            fewer = (
                f"only {serving} of {spec.replicas} replicas fit on this cluster, so the router splits "
                f"{spec.workload.request_rate:g} req/s over {serving}: {load.rate:g} each"
            )
            notes[:] = [n for n in notes if not n.startswith("only ")] + [fewer]
        results = _size_pools(current, topo, placement, report, load, model, efficiency)
        failed = [r for r in results if r.sizing.instances is None]
        if failed:
            raise InfeasibleError(
                "no instance count meets the SLO",
                [f"pool {r.name}: {r.sizing.reason}" for r in failed],
            )
        new = {r.name: int(r.sizing.instances or 0) for r in results}
        progress(f"round {rounds}: " + ", ".join(f"{k} {counts[k]} -> {v}" for k, v in new.items()))
        if new == {name: p.instances for name, p in current.pools.items()}:
            counts = new  # the placed counts (one per pool when the spec as written did not fit)
            break
        counts = new
        try:
            candidate = with_counts(spec, counts)
            placement = place(candidate, topo, options)
            placed = (candidate, placement, verify_placement(candidate, topo, placement))
        except InfeasibleError as exc:
            notes.append(
                f"the cluster cannot place {_counts_text(counts)} per replica now ({exc}); the communication "
                "figures are those of the last placement that fit"
            )
            break
    else:
        notes.append(f"the counts still changed after {MAX_ROUNDS} rounds; the last round's are written")
    return SizeResult(with_counts(spec, counts), load, model, efficiency, results, rounds, notes)


def _serving_replicas(spec: ServingTopology, current: ServingTopology, placement: Placement) -> int:
    """The replicas that carry the rate: those placed (minReplicas lets fewer than asked fit), except for the
    one-replica stand-in placed only for its link figures when the spec as written does not fit."""
    return len(placement.replicas) if current.replicas == spec.replicas else spec.replicas


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in counts.items())


def _first_placement(
    spec: ServingTopology,
    topo: Topology,
    place: Callable[[ServingTopology, Topology, SolveOptions], Placement],
    options: SolveOptions,
    counts: dict[str, int],
    notes: list[str],
) -> tuple[ServingTopology, Placement, Report]:
    """The spec as written; if it does not fit, one instance per pool in one replica (the figures are per
    instance, and the rate is still split over the spec's replicas)."""
    try:
        placement = place(spec, topo, options)
        return spec, placement, verify_placement(spec, topo, placement)
    except InfeasibleError as exc:
        small = with_counts(spec, dict.fromkeys(counts, 1)).model_copy(update={"replicas": 1, "min_replicas": 1})
        try:
            placement = place(small, topo, options)
        except InfeasibleError as first:
            inner = _why(small, topo, place, options, first)
            raise InfeasibleError(
                "cannot place even one instance of each pool, so there are no link figures to size with",
                [str(inner), *inner.reasons],
                inner.conflicts,
                proven=inner.proven,
            ) from None
        notes.append(f"the spec as written does not fit ({exc}); figures from one instance per pool")
        return small, placement, verify_placement(small, topo, placement)


def _why(spec, topo, place, options: SolveOptions, error: InfeasibleError) -> InfeasibleError:
    """The error with the conflicting rules named, as solve names them: sizing places with ``explain`` off
    (a round that does not fit is a note, and explaining it would cost seconds), so ask once more here."""
    if options.explain or error.reasons or not error.proven:
        return error
    try:
        place(spec, topo, replace(options, explain=True))
    except InfeasibleError as explained:
        return explained
    return error


def _size_pools(
    spec: ServingTopology,
    topo: Topology,
    placement: Placement,
    report: Report,
    load: roofline.Load,
    model: roofline.ModelCost,
    eff: roofline.Efficiency,
) -> list[PoolResult]:
    out = []
    for name in spec.pools:
        instance, comm = pool_figures(spec, topo, placement, report, name)
        sizing = roofline.size(spec.role_of(name), instance, model, comm, load, eff)
        out.append(PoolResult(name, instance, comm, sizing))
    return out
