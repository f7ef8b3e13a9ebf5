"""One policy's cluster as the churn simulation (bench/churn.py) replays a trace on it: what is free, what
each live job holds, and the one rule that places background jobs. Every take and release is checked, so a
double-booked GPU or a departure that gives back the wrong thing stops the run instead of skewing it."""

from __future__ import annotations

from dataclasses import dataclass

from placer.model import k8s
from placer.model.placement import Placement
from placer.model.spec import ServingTopology
from placer.topology.graph import Topology

BACKGROUND_CPU_M_PER_GPU = 2000
BACKGROUND_MEMORY_PER_GPU = 16 * 2**30


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
            reqs = spec.pools[inst.pool].template.resources.scheduled
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
