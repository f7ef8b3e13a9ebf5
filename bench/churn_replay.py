"""Phase 2 of the churn simulation (bench/churn.py): replay a trace under one policy, each serving arrival
placed on the state the earlier ones left, every placement checked, and the figures the report reads
recorded per decision and per sample."""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

from bench.churn_trace import Job
from bench.churn_world import Usage, World, usage_of
from bench.run import stranded_gpus
from placer.baselines import BASELINES, run_baseline
from placer.check.verify import Report, check
from placer.model.errors import InfeasibleError
from placer.model.placement import Placement
from placer.model.spec import ServingTopology
from placer.pipeline import SolveOptions, place
from placer.topology.graph import Topology

POLICIES: tuple[str, ...] = ("placer", *BASELINES)


@dataclass
class Decision:
    """One serving arrival under one policy."""

    job: str
    shape: str
    arrive_h: float
    depart_h: float
    outcome: str  # optimal | feasible | placed (baselines) | no-fit | gave-up | infeasible | timeout
    admitted: bool
    gpus: int = 0
    gpu_hours: float = 0.0  # inside the trace window
    violations: list[str] = field(default_factory=list)
    allreduce_us: list[float] = field(default_factory=list)  # per TP group, per forward pass
    kv_us: list[float] = field(default_factory=list)  # per replica with a prefill -> decode path
    units: int | None = None
    seconds: float = 0.0
    held: dict[str, list[int]] = field(default_factory=dict)  # node name -> GPU indices (for tests)


@dataclass
class Sample:
    """The world on the 15-minute grid, for the stranded-GPU figures and the plot."""

    t_h: float
    offered: int  # serving deployments offered so far
    admitted: int
    admitted_ok: int  # admitted without breaking a hard rule
    live: int  # serving deployments running
    stranded: int
    free: int
    serving_gpus: int
    background_gpus: int


@dataclass
class PolicyRun:
    """Everything one policy's replay of one trace recorded."""

    policy: str
    decisions: list[Decision] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    background_offered: int = 0
    background_placed: int = 0
    background_gpu_hours: float = 0.0
    background_held: list[tuple[str, float, float, dict[str, list[int]]]] = field(default_factory=list)
    seconds: float = 0.0


Placed = tuple[str, Placement | None, Report | None]  # outcome, placement, its check


def placer_policy(options: SolveOptions) -> Callable[[ServingTopology, Topology], Placed]:
    """placer as a policy: build + solve; infeasibility (proven or not) is a rejection, not an error."""

    def policy(spec: ServingTopology, topo: Topology) -> Placed:
        try:
            pl = place(spec, topo, options)
        except InfeasibleError as exc:
            return ("infeasible" if exc.proven else "timeout"), None, None
        return pl.stats.status, pl, None

    return policy


def baseline_policy(name: str) -> Callable[[ServingTopology, Topology], Placed]:
    """A baseline as a policy; its run comes with the checker's report, so it is not checked twice."""

    def place(spec: ServingTopology, topo: Topology) -> Placed:
        r = run_baseline(name, spec, topo)
        return r.outcome, r.placement, r.report

    return place


def replay(
    policy: str,
    place: Callable[[ServingTopology, Topology], Placed],
    base: Topology,
    trace: Sequence[Job],
    shapes: dict[str, ServingTopology],
    hours: float,
    sample_every_h: float = 0.25,
    progress: Callable[[str], None] = lambda _m: None,
) -> PolicyRun:
    """Replay the trace on an empty world: departures before arrivals, samples on a fixed grid; at the end
    every job left is released and the world must be the empty cluster again."""
    run = PolicyRun(policy)
    world = World(base)
    gone: list[tuple[float, str]] = []  # (departure, job) heap
    grid = [i * sample_every_h for i in range(int(hours / sample_every_h) + 1)]
    pools = _shape_pools(shapes)
    counts = {"offered": 0, "admitted": 0, "ok": 0}
    t_start = time.perf_counter()

    def sample(t: float) -> None:
        topo = world.topology()
        run.samples.append(
            Sample(
                t,
                counts["offered"],
                counts["admitted"],
                counts["ok"],
                sum(1 for k in world.kind.values() if k == "serving"),
                stranded_gpus(pools, topo, set()),  # type: ignore[arg-type]  # reads only .pools
                sum(len(f) for f in world.free),
                world.gpus_of("serving"),
                world.gpus_of("background"),
            )
        )

    def advance(t: float) -> None:
        while True:
            dep = gone[0][0] if gone else math.inf
            smp = grid[len(run.samples)] if len(run.samples) < len(grid) else math.inf
            if min(dep, smp) > t:
                return
            if dep <= smp:
                world.release(heapq.heappop(gone)[1])
            else:
                sample(smp)

    for job in trace:
        advance(job.arrive_h)
        counted = 0 <= job.arrive_h < hours
        if job.kind == "background":
            run.background_offered += counted
            usage = world.background_fit(job.gpus)
            if usage is not None:
                world.take(job.id, job.kind, usage)
                heapq.heappush(gone, (job.depart_h, job.id))
                run.background_placed += counted
                run.background_gpu_hours += job.gpus * _inside(job.arrive_h, job.depart_h, hours)
                run.background_held.append((job.id, job.arrive_h, job.depart_h, _named(base, usage)))
            continue
        assert job.shape is not None
        spec = shapes[job.shape]
        counts["offered"] += 1
        topo = world.topology()
        t0 = time.perf_counter()
        outcome, pl, rep = place(spec, topo)
        seconds = time.perf_counter() - t0
        d = Decision(job.id, job.shape, job.arrive_h, job.depart_h, outcome, pl is not None, seconds=seconds)
        if pl is not None:
            rep = rep if rep is not None else check(spec, topo, pl)
            if policy == "placer" and not rep.ok:
                raise AssertionError(f"placer's placement of {job.id} broke a rule: {rep.violations[:3]}")
            usage = usage_of(spec, topo, pl)
            world.take(job.id, job.kind, usage)
            heapq.heappush(gone, (job.depart_h, job.id))
            counts["admitted"] += 1
            counts["ok"] += rep.ok
            d.gpus = usage.gpu_count
            d.gpu_hours = d.gpus * _inside(job.arrive_h, job.depart_h, hours)
            d.violations = list(rep.violations)
            d.allreduce_us = [c.allreduce_us for c in rep.instances]
            d.kv_us = [r.kv_us for r in rep.replicas if r.kv_path is not None]
            d.units = rep.total_units
            d.held = _named(base, usage)
        run.decisions.append(d)
        if counts["offered"] % 25 == 0:
            progress(
                f"{base.name} {policy}: t={job.arrive_h:5.1f} h, {counts['admitted']}/{counts['offered']} admitted, "
                f"{time.perf_counter() - t_start:.0f} s"
            )
    advance(hours)
    for _t, job_id in sorted(gone):
        world.release(job_id)
    _check_drained(policy, world, base)
    run.seconds = time.perf_counter() - t_start
    return run


def _check_drained(policy: str, world: World, base: Topology) -> None:
    """With every job released the world must be the empty cluster again, or departures leaked resources."""
    if world.live or [len(f) for f in world.free] != [len(n.free_gpus) for n in base.nodes]:
        raise AssertionError(f"{policy}: the drained world is not the empty cluster")
    if world.cpu != [n.cpu_free_m for n in base.nodes] or world.mem != [n.memory_free_bytes for n in base.nodes]:
        raise AssertionError(f"{policy}: CPU or memory did not come back")


def _inside(start: float, end: float, hours: float) -> float:
    """Hours of [start, end) inside the trace window: warm-up and overrun are not served hours."""
    return max(0.0, min(end, hours) - max(start, 0.0))


def _named(topo: Topology, usage: Usage) -> dict[str, list[int]]:
    """What a job holds by node name, as the raw JSON and the tests read it."""
    return {topo.nodes[n].name: list(g) for n, g in sorted(usage.gpus.items())}


def _shape_pools(shapes: dict[str, ServingTopology]) -> SimpleNamespace:
    """Every distinct pool shape of the trace, as the one 'spec' bench/run.py's stranded_gpus reads (it
    reads only ``.pools``): a free GPU is stranded when no TP group of any shape could still use it."""
    seen: dict[tuple, object] = {}
    for spec in shapes.values():
        for pool in spec.pools.values():
            key = (pool.tensor_parallel, pool.gpus_per_node, pool.placement.required)
            seen.setdefault(key, pool)
    return SimpleNamespace(pools={f"p{i}": p for i, p in enumerate(seen.values())})
