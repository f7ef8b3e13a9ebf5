"""What a placement takes from the cluster (GPUs, CPU, memory by node index): what the next deployment of a
batch, a ``--keep`` solve and the batch checker must leave alone."""

from __future__ import annotations

from collections import defaultdict

from placer.model import k8s
from placer.model.placement import Placement
from placer.model.spec import ServingTopology
from placer.topology.graph import Topology


def merge_usage(usages) -> tuple[dict[int, list[int]], dict[int, int], dict[int, int]]:
    gpus: dict[int, list[int]] = defaultdict(list)
    cpu: dict[int, int] = defaultdict(int)
    mem: dict[int, int] = defaultdict(int)
    for g, c, m in usages:
        for n, v in g.items():
            gpus[n] += v
        for n, v in c.items():
            cpu[n] += v
        for n, v in m.items():
            mem[n] += v
    return gpus, cpu, mem


def usage(
    spec: ServingTopology, topo: Topology, placement: Placement
) -> tuple[dict[int, list[int]], dict[int, int], dict[int, int]]:
    """GPUs, CPU and memory a placement takes, by node index: what the next deployment must leave alone."""
    gpus: dict[int, list[int]] = defaultdict(list)
    cpu: dict[int, int] = defaultdict(int)
    mem: dict[int, int] = defaultdict(int)
    for rep in placement.replicas:
        for inst in rep.instances:
            reqs = spec.pools[inst.pool].template.resources.scheduled
            for pod in inst.pods:
                n = topo.node_by_name(pod.node).index
                gpus[n] += pod.gpus
                cpu[n] += k8s.millicores(reqs.get("cpu", "0"))
                mem[n] += k8s.bytes_of(reqs.get("memory", "0"))
        if rep.router is not None and spec.router is not None:
            n = topo.node_by_name(rep.router).index
            cpu[n] += k8s.millicores(spec.router.cpu)
            mem[n] += k8s.bytes_of(spec.router.memory)
    return gpus, cpu, mem
