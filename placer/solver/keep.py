"""What already runs: read it back, and turn it into kept instances and used GPUs for the next solve.

Three sources, told apart by their content:
- placement records (``--placement FILE``), one or a stream of them;
- the manifests placer printed (any ``--target``), one or several deployments in one stream;
- ``kubectl get pods -A -o json``: pods bound to a node (``spec.nodeName``) that carry placer's labels and
  ``placer.dev/instance-gpus``; a router pod counts where it is bound. Pods of other workloads are not
  read here: the cluster file (``placer import``) already marks their GPUs busy.

A running deployment that is also given as a spec is *kept*: its instances that the spec still has (same
replica, pool and index, same GPU count) are pinned where they run, the rest are dropped (scale-in) and
the spec's new instances are placed. One that is not given as a spec stays as it is: its GPUs (and, where
its spec is known, the CPU and memory of its pods) are simply in use.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from placer.model.errors import InputError
from placer.model.placement import Pod
from placer.model.running import Running, as_placement, running_placement
from placer.model.spec import ServingTopology
from placer.solver.problem import Kept
from placer.topology.graph import Topology
from placer.topology.usage import merge_usage, usage


@dataclass
class KeepPlan:
    """What --keep means for one solve: the cluster as the solver sees it, and per spec what stays."""

    topology: Topology  # kept GPUs free (each deployment's own are pinned in its model; placer.solver.fleet keeps
    # them busy for every other deployment), running deployments not given as specs busy
    kept: dict[str, Kept]  # deployment key -> kept instances
    dropped: dict[str, list[str]]  # deployment key -> instances not kept (scale-in, changed shape)
    untouched: list[Running]  # running deployments not given as specs: in use, not re-emitted


def plan_keep(running: list[Running], specs: list[ServingTopology], topo: Topology) -> KeepPlan:
    """Match running deployments to specs by namespace/name; check every node and GPU exists."""
    by_key = {f"{s.metadata.namespace}/{s.metadata.name}": s for s in specs}
    release: dict[int, list[int]] = defaultdict(list)
    taken: list = []  # usage of running deployments not given as specs
    kept: dict[str, Kept] = {}
    dropped: dict[str, list[str]] = {}
    untouched = []
    claims: dict[tuple[str, int], str] = {}
    for run in running:
        for (k, pool, i), inst in sorted(run.instances.items()):
            _check_pods(run, inst.pods, topo)
            for pod in inst.pods:
                for g in pod.gpus:
                    what = f"{run.key} replica {k} {pool}-{i}"
                    other = claims.setdefault((pod.node, g), what)
                    if other != what:
                        raise InputError(f"{run.source}: GPU {g} of {pod.node} is held by both {other} and {what}")
        for node in run.routers.values():
            _check_pods(run, (Pod(node, ()),), topo)
        spec = by_key.get(run.key)
        if spec is None:
            untouched.append(run)
            if run.spec is not None and all(pool in run.spec.pools for _k, pool, _i in run.instances):
                taken.append(usage(run.spec, topo, running_placement(run, topo.name)))
            else:  # bare pods: their GPUs are known, their requests are not
                gpus: dict[int, list[int]] = defaultdict(list)
                for inst in run.instances.values():
                    for pod in inst.pods:
                        gpus[topo.node_by_name(pod.node).index] += pod.gpus
                taken.append((gpus, {}, {}))
            continue
        keep, drop = {}, []
        for (k, pool, i), inst in sorted(run.instances.items()):
            p = spec.pools.get(pool)
            fits = (
                p is not None
                and k < spec.replicas
                and i < p.instances
                and sum(len(pod.gpus) for pod in inst.pods) == p.gpus_per_instance
                # a multi-node instance keeps its layout: nodeCount pods of gpusPerNode GPUs
                and (p.node_count is None or [len(pod.gpus) for pod in inst.pods] == [p.gpus_per_node] * p.node_count)
                # an engine preset splits evenly over its pods' nodes (the checker refuses anything else)
                and (p.template.engine == "custom" or len({len(pod.gpus) for pod in inst.pods}) == 1)
            )
            if fits:
                keep[(k, pool, i)] = inst
                for pod in inst.pods:
                    release[topo.node_by_name(pod.node).index] += pod.gpus
            else:
                drop.append(f"replica {k} {pool}-{i}")
        routers = {k: n for k, n in run.routers.items() if k < spec.replicas and spec.router is not None}
        for k, n in sorted(routers.items()):  # a node cordoned since: the router moves (it holds no GPU)
            if not topo.node_by_name(n).schedulable:
                del routers[k]
                drop.append(f"router of replica {k} ({n} is unschedulable)")
        kept[run.key] = Kept(keep, routers)
        if drop:
            dropped[run.key] = drop
    base = topo.with_released(release).with_usage(*merge_usage(taken))
    return KeepPlan(base, kept, dropped, untouched)


def _check_pods(run: Running, pods, topo: Topology) -> None:
    for pod in pods:
        try:
            node = topo.node_by_name(pod.node)
        except KeyError:
            if run.cluster and run.cluster != topo.name:  # the likelier mistake: the other cluster's file
                raise InputError(
                    f"{run.source}: {run.key} was placed on cluster {run.cluster!r}, but the cluster file is "
                    f"{topo.name!r} (it lists no node {pod.node!r})"
                ) from None
            raise InputError(
                f"{run.source}: {run.key} runs on node {pod.node!r}, which the cluster file does not list"
            ) from None
        unknown = sorted(set(pod.gpus) - {g.index for g in node.gpus})
        if unknown:
            raise InputError(f"{run.source}: {run.key} uses GPUs {unknown} of node {pod.node}, which has no such GPUs")


def kept_usage(
    spec: ServingTopology, kept: Kept | None, topo: Topology
) -> tuple[dict[int, list[int]], dict[int, int], dict[int, int]]:
    """What a deployment's kept instances and routers hold, by node index (like usage())."""
    meta = spec.metadata
    instances, routers = (kept.instances, kept.routers) if kept is not None else ({}, {})
    return usage(spec, topo, as_placement(meta.name, meta.namespace, topo.name, instances, routers))
