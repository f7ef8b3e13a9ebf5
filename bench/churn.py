"""Churn simulation (issue 6): a seeded day of serving deployments and small jobs arriving and leaving on a
DGX H100 cluster, replayed with placer and with each baseline, every arrival placed on the state that the
earlier ones left.

    python bench/churn.py             # 1,024- and 10,000-GPU clusters: bench/CHURN.md, bench/churn.png (~5-8 min)
    python bench/churn.py --quick     # a 128-GPU cluster, 6 hours: seconds; writes to /tmp/churn-quick/

Phase 1 draws the trace (``generate_trace``). Arrivals are Poisson with a daily cycle (the rate is the mean
times ``1 + amplitude * cos(2 pi (t - peak) / 24 h)``, drawn by thinning), lifetimes are lognormal. Two
streams: serving deployments of the fixture shapes (``SHAPES``), and a background of 1-, 2-, 4- and 8-GPU
jobs weighted as placer.generate weights them. Rates come from target loads: the mean share of the
cluster's GPUs each stream would keep busy if everything were admitted. The background starts 12 hours
before the serving stream, so that at t = 0 the cluster is as full and as fragmented as it stays.

Phase 2 replays the trace per policy (``replay``) on a cluster that starts empty (placer.generate with
``busy_fraction=0``). Each policy has a world of its own: its decisions change what is free later. Rules
shared by every world:

- A background job is placed by one rule, the same in every world: count-only bin-pack, i.e. on the node
  with the fewest free GPUs that still holds it (ties: the first node by name), the lowest free GPU
  indices, 2 CPUs and 16 GiB per GPU. A background job that does not fit is dropped (counted).
- A serving deployment is placed by the policy on ``Topology.with_usage`` of what is live; one that does
  not fit is rejected, not queued. A baseline placement that breaks a hard rule of its spec (the
  checker's verdict) is admitted anyway, as that scheduler would run it, and counted as a violation.
- Every placement is checked with ``placer.verify.check`` against its spec and the state it was placed
  on; placer's must pass (checked here, the run stops otherwise).
- A departure gives back exactly the GPUs, CPU and memory its arrival took (checked: at the end every
  world is drained and must equal the empty cluster).

Phase 3 reports (``report``, ``plot``): per policy and cluster, deployments admitted / offered, GPU-hours
served, predicted all-reduce time per forward pass (mean and p99 over admitted TP groups), KV-transfer
time (over admitted replicas with a prefill -> decode path), hard-rule violations, stranded GPUs over time
(bench/run.py's definition, over every pool shape in the trace) and placement latency.

Placement latency is what each policy takes to decide one arrival on the state given to it: for placer
build_problem + solve (on a rejection that includes placer's own explanation of why nothing fits); for a
baseline its run (the checker excluded for both).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run import stranded_gpus  # noqa: E402
from placer import k8s  # noqa: E402
from placer.baselines import BASELINES, run_baseline  # noqa: E402
from placer.cluster import ClusterSpec  # noqa: E402
from placer.errors import InfeasibleError  # noqa: E402
from placer.generate import JOB_SIZES, JOB_WEIGHTS, generate_cluster  # noqa: E402
from placer.load import load_spec  # noqa: E402
from placer.placement import Placement  # noqa: E402
from placer.problem import build_problem  # noqa: E402
from placer.solve import SolveOptions, solve  # noqa: E402
from placer.spec import ServingTopology  # noqa: E402
from placer.topology import Topology, build_topology  # noqa: E402
from placer.verify import Report, check  # noqa: E402

POLICIES: tuple[str, ...] = ("placer", *BASELINES)

# Serving shapes: name -> (fixture spec, replicas override). The large spec's four 128-GPU replicas would
# be half the 1,024-GPU cluster, so the trace offers one replica of it.
SHAPES: dict[str, tuple[str, int | None]] = {
    "llama-70b-disagg": ("llama-70b-disagg", None),  # 2 x TP8 prefill + 4 x TP4 decode, 400 GB/s floor: 32 GPUs
    "aggregated-tp8": ("aggregated-tp8", None),  # 2 replicas x TP8 on one node each, spread across racks
    "tp16-multinode": ("tp16-multinode", None),  # TP16 over two nodes of one leaf
    "llama-70b-large-1r": ("llama-70b-large", 1),  # 8 x TP8 + 16 x TP4, 200 GB/s floor: 128 GPUs
}
BACKGROUND_CPU_M_PER_GPU = 2000
BACKGROUND_MEMORY_PER_GPU = 16 * 2**30
WARMUP_H = 12.0  # the background runs this long before t = 0


# ---- phase 1: the trace -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceParams:
    """What the trace is drawn from. Loads are shares of the cluster's GPUs kept busy on average."""

    hours: float = 24.0
    serving_load: float = 0.55
    background_load: float = 0.35
    amplitude: float = 0.5  # rate swings between (1 - a) and (1 + a) times its mean over a day
    peak_hour: float = 15.0
    serving_median_h: float = 1.0
    serving_sigma: float = 1.0
    background_median_h: float = 1.0
    background_sigma: float = 1.0
    shapes: tuple[tuple[str, float], ...] = (
        ("llama-70b-disagg", 0.4),
        ("aggregated-tp8", 0.25),
        ("tp16-multinode", 0.2),
        ("llama-70b-large-1r", 0.15),
    )


@dataclass(frozen=True)
class Job:
    id: str  # s0001 (serving) or b00001 (background)
    kind: str  # serving | background
    arrive_h: float
    depart_h: float
    gpus: int  # GPUs asked for (serving: all replicas)
    shape: str | None = None


def lognormal_mean(median: float, sigma: float) -> float:
    return median * math.exp(sigma**2 / 2)


def rate_factor(t_h: float, p: TraceParams) -> float:
    """The daily cycle: 1 + a cos(2 pi (t - peak) / 24), mean 1 over a day."""
    return 1.0 + p.amplitude * math.cos(2 * math.pi * (t_h - p.peak_hour) / 24.0)


def _poisson(rng: random.Random, mean_per_h: float, start_h: float, end_h: float, p: TraceParams) -> list[float]:
    """Arrival times of a Poisson process with the daily cycle, by thinning (Lewis-Shedler)."""
    top = mean_per_h * (1 + p.amplitude)
    out, t = [], start_h
    while top > 0:
        t += rng.expovariate(top)
        if t >= end_h:
            break
        if rng.random() * (1 + p.amplitude) <= rate_factor(t, p):
            out.append(t)
    return out


def rates(p: TraceParams, cluster_gpus: int, shapes: dict[str, ServingTopology]) -> tuple[float, float]:
    """Mean arrivals per hour (serving, background) that keep the target loads busy if all were admitted."""
    total = sum(w for _, w in p.shapes)
    mean_gpus = sum(w * deployment_gpus(shapes[s]) for s, w in p.shapes) / total
    serving = p.serving_load * cluster_gpus / (mean_gpus * lognormal_mean(p.serving_median_h, p.serving_sigma))
    bg_gpus = sum(s * w for s, w in zip(JOB_SIZES, JOB_WEIGHTS, strict=True)) / sum(JOB_WEIGHTS)
    bg_life = lognormal_mean(p.background_median_h, p.background_sigma)
    return serving, p.background_load * cluster_gpus / (bg_gpus * bg_life)


def generate_trace(p: TraceParams, cluster_gpus: int, shapes: dict[str, ServingTopology], seed: int) -> list[Job]:
    """Serving arrivals in [0, hours), background arrivals in [-WARMUP_H, hours), sorted by arrival.

    Arrival times, sizes and lifetimes each draw from their own seeded generator per stream, so a shorter
    trace is a prefix of a longer one and one stream's parameters do not move the other stream."""
    serving_rate, bg_rate = rates(p, cluster_gpus, shapes)
    jobs: list[Job] = []
    times, sizes, lives = (random.Random(f"churn/{seed}/serving/{what}") for what in ("time", "size", "life"))
    names, weights = [s for s, _ in p.shapes], [w for _, w in p.shapes]
    for i, t in enumerate(_poisson(times, serving_rate, 0.0, p.hours, p)):
        shape = sizes.choices(names, weights=weights)[0]
        life = lives.lognormvariate(math.log(p.serving_median_h), p.serving_sigma)
        jobs.append(Job(f"s{i:04d}", "serving", t, t + life, deployment_gpus(shapes[shape]), shape))
    times, sizes, lives = (random.Random(f"churn/{seed}/background/{what}") for what in ("time", "size", "life"))
    for i, t in enumerate(_poisson(times, bg_rate, -WARMUP_H, p.hours, p)):
        size = sizes.choices(JOB_SIZES, weights=JOB_WEIGHTS)[0]
        life = lives.lognormvariate(math.log(p.background_median_h), p.background_sigma)
        jobs.append(Job(f"b{i:05d}", "background", t, t + life, size))
    return sorted(jobs, key=lambda j: (j.arrive_h, j.id))


def load_shapes(names: Sequence[str]) -> dict[str, ServingTopology]:
    out = {}
    for name in names:
        fixture, replicas = SHAPES[name]
        spec = load_spec(ROOT / "fixtures" / "specs" / f"{fixture}.yaml")
        if replicas is not None:
            spec = ServingTopology.model_validate(spec.model_dump(by_alias=True) | {"replicas": replicas})
        out[name] = spec
    return out


def deployment_gpus(spec: ServingTopology) -> int:
    return spec.replicas * sum(p.gpus_per_instance * p.instances for p in spec.pools.values())


# ---- phase 2: the replay ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """What one job holds: GPU indices, millicores and bytes of memory, per node index."""

    gpus: dict[int, tuple[int, ...]]
    cpu_m: dict[int, int]
    memory_bytes: dict[int, int]

    @property
    def gpu_count(self) -> int:
        return sum(len(g) for g in self.gpus.values())


def usage_of(spec: ServingTopology, topo: Topology, pl: Placement) -> Usage:
    """The GPUs, CPU and memory a placement takes, accounted as the checker accounts them."""
    gpus: dict[int, list[int]] = {}
    cpu: dict[int, int] = {}
    mem: dict[int, int] = {}

    def add(node: int, cpu_m: int, memory: int) -> None:
        cpu[node] = cpu.get(node, 0) + cpu_m
        mem[node] = mem.get(node, 0) + memory

    for rep in pl.replicas:
        for inst in rep.instances:
            reqs = spec.pools[inst.pool].template.resources.requests
            for pod in inst.pods:
                n = topo.node_by_name(pod.node).index
                gpus.setdefault(n, []).extend(pod.gpus)
                add(n, k8s.millicores(reqs.get("cpu", "0")), k8s.bytes_of(reqs.get("memory", "0")))
        if spec.router is not None and rep.router is not None:
            add(topo.node_by_name(rep.router).index, k8s.millicores(spec.router.cpu), k8s.bytes_of(spec.router.memory))
    return Usage({n: tuple(sorted(g)) for n, g in gpus.items()}, cpu, mem)


class World:
    """One policy's cluster as jobs come and go: free GPUs, CPU and memory per node, and what each live job
    holds. Taking a GPU that is not free, or giving back what was not taken, is a bug and raises."""

    def __init__(self, base: Topology):
        self.base = base
        self.free: list[set[int]] = [set(n.free_gpus) for n in base.nodes]
        self.cpu = [n.cpu_free_m for n in base.nodes]
        self.mem = [n.memory_free_bytes for n in base.nodes]
        self.live: dict[str, Usage] = {}
        self.kind: dict[str, str] = {}
        self.rank = {n.index: i for i, n in enumerate(sorted(base.nodes, key=lambda n: n.name))}
        # Nodes by free GPU count, for the background bin-pack rule.
        self.by_free: list[set[int]] = [set() for _ in range(1 + max((len(n.gpus) for n in base.nodes), default=0))]
        for n, f in enumerate(self.free):
            self.by_free[len(f)].add(n)

    def _move(self, node: int, before: int) -> None:
        self.by_free[before].discard(node)
        self.by_free[len(self.free[node])].add(node)

    def take(self, job: str, kind: str, usage: Usage) -> None:
        if job in self.live:
            raise AssertionError(f"{job} is already live")
        for n, gpus in usage.gpus.items():
            if not set(gpus) <= self.free[n] or len(set(gpus)) != len(gpus):
                taken = sorted(set(gpus) - self.free[n])
                raise AssertionError(f"{job}: GPUs {taken} of {self.base.nodes[n].name} are not free")
        for n, c in usage.cpu_m.items():
            if c > self.cpu[n] or usage.memory_bytes.get(n, 0) > self.mem[n]:
                raise AssertionError(f"{job}: {self.base.nodes[n].name} has not the CPU or memory")
        for n, gpus in usage.gpus.items():
            before = len(self.free[n])
            self.free[n] -= set(gpus)
            self._move(n, before)
        for n, c in usage.cpu_m.items():
            self.cpu[n] -= c
        for n, m in usage.memory_bytes.items():
            self.mem[n] -= m
        self.live[job] = usage
        self.kind[job] = kind

    def release(self, job: str) -> Usage:
        usage = self.live.pop(job)
        del self.kind[job]
        for n, gpus in usage.gpus.items():
            if set(gpus) & self.free[n]:
                raise AssertionError(f"{job}: gives back GPUs of {self.base.nodes[n].name} that are free")
            before = len(self.free[n])
            self.free[n] |= set(gpus)
            self._move(n, before)
        for n, c in usage.cpu_m.items():
            self.cpu[n] += c
        for n, m in usage.memory_bytes.items():
            self.mem[n] += m
        return usage

    def topology(self) -> Topology:
        """The cluster as a placer sees it now: the base with every live job's GPUs busy."""
        busy: dict[int, set[int]] = {}
        cpu: dict[int, int] = {}
        mem: dict[int, int] = {}
        for usage in self.live.values():
            for n, gpus in usage.gpus.items():
                busy.setdefault(n, set()).update(gpus)
            for n, c in usage.cpu_m.items():
                cpu[n] = cpu.get(n, 0) + c
            for n, m in usage.memory_bytes.items():
                mem[n] = mem.get(n, 0) + m
        return self.base.with_usage(busy, cpu, mem)

    def background_fit(self, gpus: int) -> Usage | None:
        """Count-only bin-pack (kube-scheduler MostAllocated on equal nodes): the node with the fewest free
        GPUs that holds the job and its CPU/memory, ties to the first node by name; lowest free indices."""
        cpu_m, mem = gpus * BACKGROUND_CPU_M_PER_GPU, gpus * BACKGROUND_MEMORY_PER_GPU
        for count in range(gpus, len(self.by_free)):
            fits = [n for n in self.by_free[count] if self.cpu[n] >= cpu_m and self.mem[n] >= mem]
            if fits:
                n = min(fits, key=self.rank.__getitem__)
                return Usage({n: tuple(sorted(self.free[n])[:gpus])}, {n: cpu_m}, {n: mem})
        return None

    def gpus_of(self, kind: str) -> int:
        return sum(u.gpu_count for j, u in self.live.items() if self.kind[j] == kind)


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
    def place(spec: ServingTopology, topo: Topology) -> Placed:
        try:
            pl = solve(build_problem(spec, topo), options)
        except InfeasibleError as exc:
            return ("infeasible" if exc.proven else "timeout"), None, None
        return pl.stats.status, pl, None

    return place


def baseline_policy(name: str) -> Callable[[ServingTopology, Topology], Placed]:
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
    if world.live or [len(f) for f in world.free] != [len(n.free_gpus) for n in base.nodes]:
        raise AssertionError(f"{policy}: the drained world is not the empty cluster")
    if world.cpu != [n.cpu_free_m for n in base.nodes] or world.mem != [n.memory_free_bytes for n in base.nodes]:
        raise AssertionError(f"{policy}: CPU or memory did not come back")
    run.seconds = time.perf_counter() - t_start
    return run


def _inside(start: float, end: float, hours: float) -> float:
    return max(0.0, min(end, hours) - max(start, 0.0))


def _named(topo: Topology, usage: Usage) -> dict[str, list[int]]:
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


# ---- a cluster's whole run --------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One cluster of the benchmark and the trace and solver budget it gets."""

    gpus: int
    cluster_seed: int
    params: TraceParams
    time_limit_s: float
    policies: tuple[str, ...] = POLICIES


def empty_cluster(gpus: int, seed: int) -> Topology:
    """A generated DGX H100 cluster with nothing running (telemetry on a fifth of the nodes as generated)."""
    return build_topology(ClusterSpec.model_validate(generate_cluster("dgx-h100", gpus, seed, busy_fraction=0.0)))


def run_case(case: Case, seed: int, progress: Callable[[str], None] = lambda _m: None) -> dict:
    shapes = load_shapes([s for s, _ in case.params.shapes])
    base = empty_cluster(case.gpus, case.cluster_seed)
    trace = generate_trace(case.params, case.gpus, shapes, seed)
    runs = []
    for policy in case.policies:
        place = (
            placer_policy(SolveOptions(time_limit_s=case.time_limit_s, workers=1, explain=False))
            if policy == "placer"
            else baseline_policy(policy)
        )
        run = replay(policy, place, base, trace, shapes, case.params.hours, progress=progress)
        progress(f"{base.name} {policy}: done in {run.seconds:.0f} s")
        runs.append(run)
    serving_rate, bg_rate = rates(case.params, case.gpus, shapes)
    return {
        "cluster": base.name,
        "gpus": sum(len(n.gpus) for n in base.nodes),
        "nodes": len(base.nodes),
        "seed": seed,
        "case": asdict(case),
        "serving_per_h": serving_rate,
        "background_per_h": bg_rate,
        "shape_gpus": {s: deployment_gpus(spec) for s, spec in shapes.items()},
        "offered": {
            "serving": sum(1 for j in trace if j.kind == "serving"),
            "background": sum(1 for j in trace if j.kind == "background" and j.arrive_h >= 0),
            "warmup": sum(1 for j in trace if j.arrive_h < 0),
        },
        "runs": [asdict(r) for r in runs],
    }


# ---- phase 3: the report ----------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0-100)."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _us(v: float | None) -> str:
    return "-" if v is None else (f"{v:.0f} µs" if v < 1000 else f"{v / 1000:.2f} ms")


def _s(v: float | None) -> str:
    return "-" if v is None else (f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s")


def _n(v: float | None, fmt: str = ".0f") -> str:
    return "-" if v is None else format(v, fmt)


RULES: tuple[tuple[str, str], ...] = (
    ("floor", "floor is"),
    ("max level", "limit is"),
    ("router", "router on"),
    ("spread", "spread across"),
    ("packing", "must pack within"),
)


def rule_of(violation: str) -> str:
    """The hard rule a checker sentence is about (placer.verify words them)."""
    return next((name for name, words in RULES if words in violation), "other")


def summarize(run: dict) -> dict:
    """The table's figures for one policy's run (a PolicyRun as plain data)."""
    ds = run["decisions"]
    ok = [d for d in ds if d["admitted"]]
    broke = [d for d in ok if d["violations"]]
    floor = [d for d in ok if any("floor is" in v for v in d["violations"])]
    ar = [x for d in ok for x in d["allreduce_us"]]
    kv = [x for d in ok for x in d["kv_us"]]
    lat = [d["seconds"] for d in ds]
    stranded = [s["stranded"] for s in run["samples"] if s["t_h"] > 0]
    return {
        "policy": run["policy"],
        "offered": len(ds),
        "admitted": len(ok),
        "broke": len(broke),
        "floor": len(floor),
        "rules": {
            name: n
            for name in [*(r for r, _ in RULES), "other"]
            if (n := sum(1 for d in broke if any(rule_of(v) == name for v in d["violations"])))
        },
        "violations": sum(len(d["violations"]) for d in ok),
        "gpu_hours": sum(d["gpu_hours"] for d in ok),
        "ar_mean": mean(ar),
        "ar_p99": pct(ar, 99),
        "kv_mean": mean(kv),
        "kv_p99": pct(kv, 99),
        "stranded_mean": mean(stranded),
        "stranded_max": max(stranded, default=None),
        "lat_mean": mean(lat),
        "lat_p99": pct(lat, 99),
        "lat_max": max(lat, default=None),
        "lat_admitted_mean": mean([d["seconds"] for d in ok]),
        "lat_rejected_mean": mean([d["seconds"] for d in ds if not d["admitted"]]),
        "timeouts": sum(1 for d in ds if d["outcome"] in ("timeout", "gave-up")),
        "not_optimal": sum(1 for d in ok if d["outcome"] == "feasible"),
        "bg": f"{run['background_placed']}/{run['background_offered']}",
        "bg_gpu_hours": run["background_gpu_hours"],
    }


def report(
    results: list[dict], cmd: str, wall_s: float, load: tuple[float, float] | None = None, version: str = ""
) -> str:
    p = results[0]["case"]["params"]
    lines = [
        "# Churn simulation",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}, "
        f"OR-Tools {_ortools()}{', ' + version if version else ''}. Reproduce: `{cmd}` ({wall_s / 60:.1f} min "
        "for the whole run). The script and its rules are described in `bench/churn.py`; `bench/churn.png` "
        "plots admitted deployments and stranded GPUs over time."
        + (
            f" The machine is shared: 1-minute load average {load[0]:.1f} at the start, {load[1]:.1f} at the end "
            "(latencies are inflated by whatever else ran)."
            if load
            else ""
        ),
        "",
        "## Trace",
        "",
        f"- {p['hours']:g} hours of serving arrivals; a background of small jobs starting {WARMUP_H:g} h earlier. "
        f"Poisson arrivals with a daily cycle: rate = mean × (1 + {p['amplitude']:g} cos(2π (t − "
        f"{p['peak_hour']:g} h) / 24 h)), so the rate peaks at hour {p['peak_hour']:g}.",
        f"- Serving lifetimes lognormal, σ {p['serving_sigma']:g}, median per cluster below (mean "
        f"{lognormal_mean(1.0, p['serving_sigma']):.2f} × the median); background lifetimes "
        f"lognormal, median {p['background_median_h']:g} h, σ {p['background_sigma']:g} (mean "
        f"{lognormal_mean(p['background_median_h'], p['background_sigma']):.1f} h).",
        f"- Rates from target loads: serving deployments would keep {p['serving_load']:.0%} of the GPUs busy on "
        f"average if all were admitted, background jobs {p['background_load']:.0%}; the daily peak offers "
        f"about {1 + p['amplitude']:g}× that.",
        "- Serving shapes (weight, GPUs): "
        + ", ".join(f"{s} ({w:g}, {results[0]['shape_gpus'][s]})" for s, w in p["shapes"])
        + ". Background: 1/2/4/8 GPUs weighted 4/3/2/1 (placer.generate's mix), 2 CPUs and 16 GiB per GPU, "
        "placed in every policy's world by one rule: count-only bin-pack on one node (fewest free GPUs that "
        "fit, first by name, lowest GPU indices).",
        "- A serving deployment that does not fit is rejected, not queued. A baseline placement that breaks "
        "a hard rule is admitted (that scheduler would run it) and counted in 'broke a rule'. Every "
        "placement is checked by `placer.verify.check` on the state it was placed on.",
        "- Clusters: generated DGX H100 (`placer.generate`, 8 GPUs per node, 4 nodes per rack, 32 per leaf, "
        "2:1 spine), empty at the start (busy_fraction 0), telemetry on a fifth of the nodes.",
        "",
        "| cluster | seed | serving lifetime median | serving / h (mean) | background / h (mean) | serving offered "
        "| background offered (+ warm-up) | placer time limit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['cluster']} | {r['seed']} | {r['case']['params']['serving_median_h']:g} h "
            f"| {r['serving_per_h']:.1f} | {r['background_per_h']:.0f} "
            f"| {r['offered']['serving']} | {r['offered']['background']} (+ {r['offered']['warmup']}) "
            f"| {r['case']['time_limit_s']:g} s |"
        )
    lines += [
        "",
        "## Results",
        "",
        "All-reduce: predicted time per forward pass of each admitted TP group (mean / p99 over TP groups). "
        "KV transfer: worst prefill → decode pair per admitted replica, one typical prompt. Stranded: free "
        "GPUs no TP group of any shape in the trace could use (bench/run.py's `stranded_gpus`), sampled every "
        "15 min (mean / max over the day). Latency: one arrival's decision (placer: build + solve, and on a "
        "rejection its explanation; baselines: their run), mean / p99 / max over all serving arrivals.",
        "",
        "| cluster | policy | admitted / offered | admitted keeping every rule | broke a rule: which (deployments) "
        "| GPU-hours served | all-reduce / pass mean / p99 | KV transfer mean / p99 | stranded GPUs mean / max "
        "| background placed | latency mean / p99 / max |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for run in r["runs"]:
            s = summarize(run)
            lines.append(
                f"| {r['cluster']} | {s['policy']} | {s['admitted']} / {s['offered']} | {s['admitted'] - s['broke']} "
                f"| {s['broke']}"
                + (": " + ", ".join(f"{k} {v}" for k, v in s["rules"].items()) if s["rules"] else "")
                + " "
                f"| {s['gpu_hours']:,.0f} | {_us(s['ar_mean'])} / {_us(s['ar_p99'])} "
                f"| {_us(s['kv_mean'])} / {_us(s['kv_p99'])} | {_n(s['stranded_mean'])} / {_n(s['stranded_max'])} "
                f"| {s['bg']} | {_s(s['lat_mean'])} / {_s(s['lat_p99'])} / {_s(s['lat_max'])} |"
            )
    lines += [
        "",
        "## Per shape",
        "",
        "Admitted / offered, admitted with a broken rule, and mean all-reduce per forward pass per TP group.",
        "",
    ]
    for r in results:
        names = [s for s, _ in p["shapes"]]
        lines += [f"**{r['cluster']}**", "", "| policy | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for run in r["runs"]:
            cells = []
            for shape in names:
                ds = [d for d in run["decisions"] if d["shape"] == shape]
                ok = [d for d in ds if d["admitted"]]
                ar = mean([x for d in ok for x in d["allreduce_us"]])
                broke = sum(1 for d in ok if d["violations"])
                cells.append(f"{len(ok)}/{len(ds)}, broke {broke}, {_us(ar)}")
            lines.append(f"| {run['policy']} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Rejections and placer's solves", ""]
    for r in results:
        for run in r["runs"]:
            s = summarize(run)
            outcomes: dict[str, int] = {}
            for d in run["decisions"]:
                outcomes[d["outcome"]] = outcomes.get(d["outcome"], 0) + 1
            words = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            lines.append(
                f"- {r['cluster']} {run['policy']}: {words}; decision latency admitted {_s(s['lat_admitted_mean'])}, "
                f"rejected {_s(s['lat_rejected_mean'])} (mean); replay {run['seconds']:.0f} s."
            )
    return "\n".join(lines) + "\n"


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(6.5 * len(results), 7), squeeze=False, sharex="col")
    for col, r in enumerate(results):
        top, bottom = axes[0][col], axes[1][col]
        for run in r["runs"]:
            t = [s["t_h"] for s in run["samples"]]
            (line,) = top.step(t, [s["admitted"] for s in run["samples"]], where="post", label=run["policy"])
            if any(s["admitted_ok"] != s["admitted"] for s in run["samples"]):
                top.step(t, [s["admitted_ok"] for s in run["samples"]], where="post", ls=":", color=line.get_color())
            bottom.plot(t, _moving_mean([s["stranded"] for s in run["samples"]], 4), label=run["policy"])
        first = r["runs"][0]["samples"]
        top.step(
            [s["t_h"] for s in first],
            [s["offered"] for s in first],
            where="post",
            color="0.6",
            ls="--",
            label="offered",
        )
        top.set_title(f"{r['cluster']}: deployments admitted (cumulative; dotted: without a broken rule)", fontsize=10)
        bottom.set_title(
            f"{r['cluster']}: stranded GPUs (free, no TP group of the trace fits; 1-hour moving mean)", fontsize=10
        )
        bottom.set_xlabel("hour of the trace")
        top.legend(fontsize=8)
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _moving_mean(values: list[float], width: int) -> list[float]:
    """Mean of each value and the ``width - 1`` before it (15-minute samples are noisy to the eye)."""
    return [sum(values[max(0, i - width + 1) : i + 1]) / (i + 1 - max(0, i - width + 1)) for i in range(len(values))]


def placer_version() -> str:
    """The commit the run's placer came from, and whether placer/ differed from it (others may be editing)."""
    import subprocess

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return "placer (not a git checkout)"
    return f"placer at {head}" + (
        " with uncommitted changes in placer/" if git("status", "--porcelain", "placer") else ""
    )


def _ortools() -> str:
    from importlib.metadata import version

    return version("ortools")


# ---- the command ------------------------------------------------------------------------------------

# The 10,000-GPU cluster's deployments live 3.5x longer than the 1,024-GPU one's: the same loads with 1-hour
# lifetimes would offer ~2,100 deployments a day there, more solves (placer's and the exhaustive
# enumerator's, ~0.3-0.5 s each at that size) than a 15-minute run holds; this way it is ~600.
FULL: tuple[Case, ...] = (
    Case(1024, 7, TraceParams(serving_median_h=1.0), time_limit_s=5.0),
    Case(10_000, 1, TraceParams(serving_median_h=3.5), time_limit_s=5.0),
)
QUICK: tuple[Case, ...] = (
    Case(
        128,
        0,
        TraceParams(
            hours=6.0,
            serving_median_h=0.5,
            shapes=(("llama-70b-disagg", 0.5), ("aggregated-tp8", 0.3), ("tp16-multinode", 0.2)),
        ),
        time_limit_s=5.0,
    ),
)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a 128-GPU cluster, 6 hours (seconds)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sizes", default="", help="comma-separated GPU counts to keep (default: all)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--out-dir", type=Path, default=None, help="default: bench/ (full), /tmp/churn-quick/ (quick)")
    ap.add_argument("--raw", type=Path, default=None, help="also write every decision and sample as JSON here")
    args = ap.parse_args(argv)
    out = args.out_dir or (Path(tempfile.gettempdir()) / "churn-quick" if args.quick else ROOT / "bench")
    out.mkdir(parents=True, exist_ok=True)
    keep = {int(s) for s in args.sizes.split(",") if s}
    policies = tuple(p for p in args.policies.split(",") if p)
    unknown = sorted(set(policies) - set(POLICIES))
    if unknown:
        ap.error(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
    cases = [c for c in (QUICK if args.quick else FULL) if not keep or c.gpus in keep]
    t0 = time.perf_counter()
    load_start = os.getloadavg()[0]
    version = placer_version()  # before the run: the code imported is the code on disk now
    results = []
    for case in cases:
        case = Case(case.gpus, case.cluster_seed, case.params, case.time_limit_s, policies)
        results.append(run_case(case, args.seed, progress=lambda m: print(m, file=sys.stderr, flush=True)))
    wall = time.perf_counter() - t0
    cmd = "python bench/churn.py" + (" --quick" if args.quick else "") + (f" --seed {args.seed}" if args.seed else "")
    if args.sizes:
        cmd += f" --sizes {args.sizes}"
    if args.policies != ",".join(POLICIES):
        cmd += f" --policies {args.policies}"
    if args.raw:
        args.raw.write_text(json.dumps(results, sort_keys=True) + "\n")
    (out / "CHURN.md").write_text(report(results, cmd, wall, (load_start, os.getloadavg()[0]), version))
    plot(results, out / "churn.png")
    for r in results:
        for run in r["runs"]:
            s = summarize(run)
            print(
                f"{r['cluster']} {s['policy']}: {s['admitted']}/{s['offered']} admitted, broke {s['broke']} "
                f"(floor {s['floor']}), stranded mean {_n(s['stranded_mean'])}, latency mean {_s(s['lat_mean'])}",
                file=sys.stderr,
            )
    print(f"wrote {out / 'CHURN.md'}, {out / 'churn.png'} in {wall:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
