"""Kueue topology-aware scheduling (TAS) for plain Pod groups.

Phase 1, the gang: every engine pod of a replica carries the ``kueue.x-k8s.io/pod-group-name`` label, the
``kueue.x-k8s.io/pod-group-total-count`` annotation (= the replica's pods) and the queue label; Kueue admits
the group as one Workload. ``kueue.x-k8s.io/pod-group-serving: "true"`` marks it as a server that never
completes.
Phase 2, PodSets: Kueue groups a pod group's pods into PodSets by ``kueue.x-k8s.io/role-hash``; placer
names one role per (pool, GPUs per pod), so a PodSet is uniform. Each role requires
(``podset-required-topology``) the level of the narrowest domain holding its pods, or, spread over the whole
cluster, asks for ``podset-unconstrained-topology`` (TAS bookkeeping without a domain). Independently, a
role made of whole instances of equal size is sliced per TP group: ``podset-slice-size`` = pods per instance
and ``podset-slice-required-topology`` = the level of the broadest instance, so that every TP group stays in
one domain of the level placer put it in, even when the role spans the spine. Which pods form a slice is
given, not left to Kueue's greedy fallback: each pod's ``kueue.x-k8s.io/pod-group-pod-index`` label is its
rank in its role, an instance's pods consecutive (Kueue gives consecutive ranks of a PodSet to one slice
domain; kueue pkg/controller/tas/topology_ungater.go). A multi-node instance whose pods split into two
roles (unequal GPU counts), one of them a single pod, keeps both in its domain as a PodSet group
(``podset-group-name`` = the instance, both requiring its level; Kueue groups exactly two PodSets, one of
them a single pod, and never with slices).
The replica's first Deployment carries placer's spec and solver status (``placer.dev/spec``, …), which
``placer explain`` reads back, since a Kueue pod group has no object of its own: on the Deployment's own
metadata, never in its pod template, where a new solve's status or a changed replica count would roll out
(restart) an engine that ``--keep`` keeps.
Phase 3, node affinity: each pod admits the nodes placer chose for its role in its replica (all pods of a
role must look alike to Kueue, so this narrows to a set rather than pinning one node per pod). Kueue's TAS
then assigns pods to those nodes and ungates them; kube-scheduler binds.
"""

from __future__ import annotations

from typing import Any

from placer.emit.targets.common import (
    RANK_LABEL,
    Context,
    engine_container,
    hostname,
    instance_labels,
    pod_annotations,
    pod_name,
    pod_spec,
    pool_service_name,
    replica_annotations,
    replica_pods,
)
from placer.emit.targets.controllers import pool_services
from placer.emit.targets.router import router_docs
from placer.model.levels import LEVEL_RANK
from placer.model.placement import InstancePlacement, ReplicaPlacement

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
POD_INDEX = "kueue.x-k8s.io/pod-group-pod-index"
PODSET_GROUP = "kueue.x-k8s.io/podset-group-name"
OLDEST = "v0.13.0"  # first release with PodSet slices and podset-group-name
REQUIRES = ("Kueue", OLDEST, "has no PodSet slices for plain Pod groups")


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
    out = {UNCONSTRAINED: "true"} if domain == ctx.topo.root or label is None else {REQUIRED: label}
    instances = {(i.pool, i.index): i for i, _ in members}
    whole = sum(len(i.pods) for i in instances.values()) == len(members)
    sizes = {len(i.pods) for i in instances.values()}
    if whole and len(sizes) == 1 and sizes != {1}:
        widest = max(
            (ctx.instance_domain(rep.index, i) for i in instances.values()), key=lambda d: LEVEL_RANK[ctx.level_of(d)]
        )
        slice_label = ctx.level_label(ctx.level_of(widest))
        if slice_label is not None and widest != ctx.topo.root:
            out |= {SLICE_REQUIRED: slice_label, SLICE_SIZE: str(sizes.pop())}
    return out


def _podset_groups(ctx: Context, rep: ReplicaPlacement, by_role: dict[str, list]) -> dict[str, dict[str, str]]:
    """Role -> annotations grouping it with the other role of the same instance (see Phase 2)."""
    out: dict[str, dict[str, str]] = {}
    owner: dict[tuple[str, int], list[str]] = {}
    for role, members in by_role.items():
        insts = {(i.pool, i.index) for i, _ in members}
        if len(insts) == 1:
            owner.setdefault(insts.pop(), []).append(role)
    for inst in rep.instances:
        pair = owner.get((inst.pool, inst.index), [])
        if len(pair) != 2 or len(inst.pods) != sum(len(by_role[r]) for r in pair):
            continue
        if min(len(by_role[r]) for r in pair) != 1:
            continue
        domain = ctx.instance_domain(rep.index, inst)
        label = ctx.level_label(ctx.level_of(domain))
        if label is None or domain == ctx.topo.root:
            continue
        for role in pair:
            out[role] = {REQUIRED: label, PODSET_GROUP: f"{inst.pool}-{inst.index}"}
    return out


def _rank_offsets(grouped: dict[str, dict[str, str]], by_role: dict[str, list]) -> dict[str, int]:
    """Kueue ranks a PodSet group's pods across both PodSets: the smaller (by count, then name) from 0, the
    other after it (kueue pkg/controller/tas/topology_ungater.go, rankOffsets), so its indices start there."""
    out: dict[str, int] = {}
    pairs: dict[str, list[str]] = {}
    for role, notes in grouped.items():
        pairs.setdefault(notes[PODSET_GROUP], []).append(role)
    for pair in pairs.values():
        first, second = sorted(pair, key=lambda r: (len(by_role[r]), r))
        out[second] = len(by_role[first])
    return out


def kueue_leader_host(ctx: Context, replica: int, inst: InstancePlacement) -> str:
    """Pods of a Deployment have generated names, so each gets a fixed hostname (its placer pod name) under
    its pool's headless Service: ``<pod name>.<service>.<namespace>.svc``."""
    return f"{pod_name(ctx.spec, replica, inst, 0)}.{pool_service_name(ctx, replica, inst.pool)}.{ctx.namespace}.svc"


def deployment_of_one(
    ctx: Context,
    rep: ReplicaPlacement,
    inst: InstancePlacement,
    j: int,
    pod_labels: dict[str, str],
    pod_notes: dict[str, str],
    spec: dict[str, Any],
    object_notes: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A placed pod under a controller Kueue's plain pod groups can live with: a Deployment of one.

    Kueue keeps a deleted group member's ``kueue.x-k8s.io/managed`` finalizer until a replacement pod of the
    group exists (kueue pkg/controller/jobs/pod/pod_controller.go, FindMatchingWorkloads), and a StatefulSet
    makes no replacement until the old pod object is gone: it would wait forever. A ReplicaSet makes the
    replacement at once, under a new name; Kueue adopts it into the admitted group and releases the old pod.
    ``Recreate``, so that an update never runs two copies asking for the same GPUs. The Deployment's own
    labels are placer's only: with Kueue's ``deployment`` integration, a queue label there would make the
    Deployment a workload of its own. ``object_notes``: annotations of the Deployment only (see the module's
    note on the spec)."""
    name = pod_name(ctx.spec, rep.index, inst, j)
    own = instance_labels(ctx.spec, rep.index, inst) | {RANK_LABEL: str(j)}
    selector = {k: own[k] for k in ("app.kubernetes.io/instance", "placer.dev/pool", "placer.dev/instance", RANK_LABEL)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": ctx.namespace,
            "labels": own,
            "annotations": {k: v for k, v in pod_notes.items() if k.startswith("placer.dev/")}
            | replica_annotations(ctx, rep.index)
            | (object_notes or {}),
        },
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": pod_labels, "annotations": pod_notes}, "spec": spec},
        },
    }


def build(ctx: Context) -> list[dict]:
    ctx.require_version(*REQUIRES)
    ctx.hosts = kueue_leader_host
    docs: list[dict] = []
    scheduler = ctx.scheduler(None)
    queue = ctx.queue(QUEUE)
    for rep in ctx.placement.replicas:
        group = ctx.gang_name(rep.index)
        role_of: dict[tuple[str, int, int], tuple[str, dict[str, str], list[str], int]] = {}
        by_role = roles(rep)
        grouped = _podset_groups(ctx, rep, by_role)
        offsets = _rank_offsets(grouped, by_role)
        for role, members in by_role.items():
            topology = grouped.get(role) or _topology(ctx, rep, members)
            hosts = [hostname(ctx.topo, i.pods[j].node) for i, j in members]
            for rank, (inst, j) in enumerate(members):  # an instance's pods are consecutive in its role
                role_of[(inst.pool, inst.index, j)] = (role, topology, hosts, offsets.get(role, 0) + rank)
        for inst in rep.instances:
            for j, pod in enumerate(inst.pods):
                role, topology, hosts, rank = role_of[(inst.pool, inst.index, j)]
                annotations = pod_annotations(ctx, rep.index, inst, pod)
                annotations |= {TOTAL: str(replica_pods(rep)), SERVING: "true", ROLE: role} | topology
                # a pod group has no object of its own: its first Deployment carries what explain reads
                first = ctx.group_annotations() if inst is rep.instances[0] and j == 0 else None
                container = engine_container(
                    ctx, inst, len(pod.gpus), j, leader=kueue_leader_host(ctx, rep.index, inst)
                )
                spec = pod_spec(ctx, container, hosts, scheduler, inst.pool)
                spec["hostname"] = pod_name(ctx.spec, rep.index, inst, j)
                spec["subdomain"] = pool_service_name(ctx, rep.index, inst.pool)
                pod_labels = instance_labels(ctx.spec, rep.index, inst) | {RANK_LABEL: str(j)}
                docs.append(
                    deployment_of_one(
                        ctx,
                        rep,
                        inst,
                        j,
                        pod_labels | {QUEUE_LABEL: queue, GROUP_LABEL: group, POD_INDEX: str(rank)},
                        annotations,
                        spec,
                        first,
                    )
                )
        docs += pool_services(ctx, rep)
        docs += router_docs(ctx, rep)
    return docs
