"""Kueue topology-aware scheduling (TAS) for plain Pod groups.

Phase 1, the gang: every engine pod of a replica carries the ``kueue.x-k8s.io/pod-group-name`` label, the
``kueue.x-k8s.io/pod-group-total-count`` annotation (= the replica's pods) and the queue label; Kueue admits
the group as one Workload. ``kueue.x-k8s.io/pod-group-serving: "true"`` marks it as a server that never
completes.
Phase 2, PodSets: Kueue groups a pod group's pods into PodSets by ``kueue.x-k8s.io/role-hash``; placer
names one role per (pool, GPUs per pod), so a PodSet is uniform. Each role requires
(``podset-required-topology``) the level of the narrowest domain holding its pods; when the role is made of
whole instances of equal size, ``podset-slice-size`` = pods per instance and
``podset-slice-required-topology`` = the level of the broadest instance, so that every TP group stays in
one domain of the level placer put it in. A role spread over the whole cluster asks for
``podset-unconstrained-topology`` (TAS bookkeeping without a domain).
The replica's first pod also carries placer's spec and solver status (``placer.dev/spec``, …), which
``placer explain`` reads back, since a Kueue pod group has no object of its own.
Phase 3, node affinity: each pod admits the nodes placer chose for its role in its replica (all pods of a
role must look alike to Kueue, so this narrows to a set rather than pinning one node per pod). Kueue's TAS
then assigns pods to those nodes and ungates them; kube-scheduler binds.
"""

from __future__ import annotations

from typing import Any

from placer.emit.targets.common import (
    Context,
    engine_container,
    hostname,
    instance_labels,
    pod_annotations,
    pod_name,
    pod_spec,
    replica_pods,
)
from placer.emit.targets.router import router_docs
from placer.model.levels import LEVEL_RANK
from placer.model.placement import InstancePlacement, ReplicaPlacement

DESCRIPTION = "Kueue TAS pod groups: podset required/slice topology annotations, queue label, narrowed affinity"
QUEUE = "default"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
TOTAL = "kueue.x-k8s.io/pod-group-total-count"
SERVING = "kueue.x-k8s.io/pod-group-serving"
ROLE = "kueue.x-k8s.io/role-hash"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"


def roles(rep: ReplicaPlacement) -> dict[str, list[tuple[InstancePlacement, int]]]:
    """Role name -> its (instance, pod index) pairs; a pool's pods split by GPU count when they differ."""
    by_pool: dict[str, set[int]] = {}
    for inst in rep.instances:
        by_pool.setdefault(inst.pool, set()).update(len(p.gpus) for p in inst.pods)
    out: dict[str, list[tuple[InstancePlacement, int]]] = {}
    for inst in rep.instances:
        for j, pod in enumerate(inst.pods):
            role = inst.pool if len(by_pool[inst.pool]) == 1 else f"{inst.pool}-g{len(pod.gpus)}"
            out.setdefault(role, []).append((inst, j))
    return out


def _topology(ctx: Context, rep: ReplicaPlacement, members: list[tuple[InstancePlacement, int]]) -> dict[str, str]:
    domain = ctx.nodes_domain([i.pods[j] for i, j in members])
    label = ctx.level_label(ctx.level_of(domain))
    if domain == ctx.topo.root or label is None:
        return {UNCONSTRAINED: "true"}
    out = {REQUIRED: label}
    instances = {(i.pool, i.index): i for i, _ in members}
    whole = sum(len(i.pods) for i in instances.values()) == len(members)
    sizes = {len(i.pods) for i in instances.values()}
    if whole and len(sizes) == 1 and sizes != {1}:
        widest = max(
            (ctx.instance_domain(rep.index, i) for i in instances.values()), key=lambda d: LEVEL_RANK[ctx.level_of(d)]
        )
        slice_label = ctx.level_label(ctx.level_of(widest))
        if slice_label is not None:
            out |= {SLICE_REQUIRED: slice_label, SLICE_SIZE: str(sizes.pop())}
    return out


def build(ctx: Context) -> list[dict]:
    docs: list[dict] = []
    scheduler = ctx.scheduler(None)
    queue = ctx.queue(QUEUE)
    for rep in ctx.placement.replicas:
        group = ctx.gang_name(rep.index)
        role_of: dict[tuple[str, int, int], tuple[str, dict[str, str], list[str]]] = {}
        for role, members in roles(rep).items():
            topology = _topology(ctx, rep, members)
            hosts = [hostname(ctx.topo, i.pods[j].node) for i, j in members]
            for inst, j in members:
                role_of[(inst.pool, inst.index, j)] = (role, topology, hosts)
        for inst in rep.instances:
            for j, pod in enumerate(inst.pods):
                role, topology, hosts = role_of[(inst.pool, inst.index, j)]
                annotations = pod_annotations(ctx, rep.index, inst, pod)
                annotations |= {TOTAL: str(replica_pods(rep)), SERVING: "true", ROLE: role} | topology
                if inst is rep.instances[0] and j == 0:  # a pod group has no object of its own: its first pod
                    annotations |= ctx.group_annotations()  # carries what explain reads (spec, status)
                container = engine_container(ctx, inst, len(pod.gpus), j)
                doc: dict[str, Any] = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": pod_name(ctx.spec, rep.index, inst, j),
                        "namespace": ctx.namespace,
                        "labels": instance_labels(ctx.spec, rep.index, inst) | {QUEUE_LABEL: queue, GROUP_LABEL: group},
                        "annotations": annotations,
                    },
                    "spec": pod_spec(ctx, container, hosts, scheduler),
                }
                docs.append(doc)
        docs += router_docs(ctx, rep)
    return docs
