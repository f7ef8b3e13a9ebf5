"""NVIDIA KAI-Scheduler: a hierarchical ``PodGroup`` (``scheduling.run.ai/v2alpha2``) per replica.

Phase 1, the gang: ``minMember`` = the replica's pods, ``queue``, and a ``topologyConstraint`` requiring the
whole replica inside one domain of the level placer put it in (the narrowest domain holding its nodes).
Phase 2, the hierarchy: one subgroup per pool (parent of its instances, required at the level that holds
the pool's instances) and one leaf subgroup per instance (``minMember`` = its pods, required at the level
of the domain placer chose for it, preferred at the spec's preferred level when narrower). KAI's webhook
wants the PodGroup's ``minMember`` to be the sum over the leaves, which it is.
Phase 3, the pods: each placed pod is a StatefulSet of one (``common.stateful_set``: a deleted pod comes
back pinned, with its gang annotation) whose template has ``schedulerName: kai-scheduler``, the
``pod-group-name`` annotation, the ``kai.scheduler/subgroup-name`` and ``kai.scheduler/queue`` labels, and
node affinity to the chosen node. KAI's pod-grouper would otherwise replace placer's PodGroup by one of its
own per StatefulSet (``minAvailable`` 1, no gang); ``kai.scheduler/skip-podgrouper: "true"`` on the
StatefulSet and its template tells it to leave them to placer's PodGroup (KAI v0.15.0 and later,
pkg/podgrouper/pod_controller.go; the external-PodGroup design in docs/developer/designs/external-podgroups).
Constraints name node labels through a ``Topology`` (``kai.scheduler/v1alpha1``, cluster-scoped, served by
KAI v0.12.0 and later) whose levels are this cluster's levels as the node labels that carry them
(``Context.level_label``), broadest first, hostname last; placer emits it unless ``scheduling.topology``
names one that exists. Two levels carried by one label (a GB200 rack that is its NVLink domain) are one
level, since KAI wants each label once.
"""

from __future__ import annotations

from typing import Any

from placer.emit.targets.common import (
    HOSTNAME,
    TOPOLOGY_LABELS,
    Context,
    engine_pod,
    replica_pods,
)
from placer.emit.targets.controllers import pool_services, stateful_set
from placer.emit.targets.router import router_docs
from placer.model.levels import LEVEL_RANK
from placer.model.placement import InstancePlacement, ReplicaPlacement

SCHEDULER = "kai-scheduler"
QUEUE = "default-queue"
QUEUE_LABEL = "kai.scheduler/queue"
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
GROUP_ANNOTATION = "pod-group-name"
TOPOLOGY_API = "kai.scheduler/v1alpha1"  # the only version KAI serves (v0.12.0 to main)
OLDEST = "v0.15.0"  # first release whose pod-grouper honours skip-podgrouper (Topology, subgroup parents: v0.12.0)
REQUIRES = ("KAI-Scheduler", OLDEST, "has no kai.scheduler/skip-podgrouper")
SKIP_PODGROUPER = "kai.scheduler/skip-podgrouper"


def topology_name(ctx: Context) -> str:
    return ctx.spec.scheduling.topology or f"placer-{ctx.placement.cluster}"


def topology_doc(ctx: Context) -> dict[str, Any]:
    """The levels of this cluster as node labels, broadest first; ``kubernetes.io/hostname`` last."""
    keys = [k for k in (ctx.level_label(lv) for lv in reversed(ctx.levels_present)) if k and k != HOSTNAME]
    levels = [{"nodeLabel": k} for k in dict.fromkeys(keys)] + [{"nodeLabel": HOSTNAME}]
    return {
        "apiVersion": TOPOLOGY_API,
        "kind": "Topology",
        "metadata": {"name": topology_name(ctx), "labels": dict(TOPOLOGY_LABELS)},
        "spec": {"levels": levels},
    }


def _constraint(ctx: Context, level: str, preferred: str | None = None) -> dict[str, str] | None:
    required = ctx.level_label(level)
    out = {"topology": topology_name(ctx)}
    if required is not None:
        out["requiredTopologyLevel"] = required
    if preferred == "socket":
        preferred = "node"
    if preferred in ctx.levels_present and LEVEL_RANK[preferred] < LEVEL_RANK[level]:  # a level the Topology has
        pref = ctx.level_label(preferred)
        if pref is not None and pref != required:
            out["preferredTopologyLevel"] = pref
    return out if len(out) > 1 else None


def subgroup_name(inst: InstancePlacement) -> str:
    return f"{inst.pool}-{inst.index}"


def _subgroups(ctx: Context, rep: ReplicaPlacement) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for pool in sorted({i.pool for i in rep.instances}):
        members = [i for i in rep.instances if i.pool == pool]
        pool_level = ctx.level_of(ctx.nodes_domain([p for i in members for p in i.pods]))
        group: dict[str, Any] = {"name": pool}
        constraint = _constraint(ctx, pool_level)
        if constraint:
            group["topologyConstraint"] = constraint
        out.append(group)
        preferred = ctx.spec.pools[pool].placement.preferred
        for inst in members:
            leaf: dict[str, Any] = {"name": subgroup_name(inst), "parent": pool, "minMember": len(inst.pods)}
            constraint = _constraint(ctx, ctx.level_of(ctx.instance_domain(rep.index, inst)), preferred)
            if constraint:
                leaf["topologyConstraint"] = constraint
            out.append(leaf)
    return out


def pod_group(ctx: Context, rep: ReplicaPlacement) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "minMember": replica_pods(rep),
        "queue": ctx.queue(QUEUE),
        "subGroups": _subgroups(ctx, rep),
    }
    constraint = _constraint(ctx, ctx.level_of(ctx.replica_domain(rep)))
    if constraint:
        spec["topologyConstraint"] = constraint
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": ctx.gang_metadata(rep.index, extra_labels={QUEUE_LABEL: ctx.queue(QUEUE)}),
        "spec": spec,
    }


def build(ctx: Context) -> list[dict]:
    ctx.require_version(*REQUIRES)
    docs: list[dict] = [] if ctx.spec.scheduling.topology else [topology_doc(ctx)]
    scheduler = ctx.scheduler(SCHEDULER)
    queue = {QUEUE_LABEL: ctx.queue(QUEUE)}
    for rep in ctx.placement.replicas:
        group = ctx.gang_name(rep.index)
        docs.append(pod_group(ctx, rep))
        for inst in rep.instances:
            extra = queue | {SUBGROUP_LABEL: subgroup_name(inst)}
            notes = {GROUP_ANNOTATION: group, SKIP_PODGROUPER: "true"}
            for j in range(len(inst.pods)):
                sts = stateful_set(ctx, rep, inst, j, engine_pod(ctx, rep, inst, j, scheduler, extra, notes))
                sts["metadata"]["annotations"][SKIP_PODGROUPER] = "true"  # the pod-grouper looks up the owners too
                docs.append(sts)
        docs += pool_services(ctx, rep)
        docs += router_docs(ctx, rep)
    return docs
