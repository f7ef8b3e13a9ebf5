"""kube-scheduler with the scheduler-plugins coscheduling plugin (the default target).

Per replica a ``PodGroup`` (``scheduling.x-k8s.io/v1alpha1``: ``minMember`` = the replica's pods,
``scheduleTimeoutSeconds``), per (instance, node) a ``StatefulSet`` of one (``common.stateful_set``) whose
pod joins it by the ``scheduling.x-k8s.io/pod-group`` label and is pinned by required node affinity, a
headless Service per pool, then the router's Deployment and Service. A recreated pod passes the plugin's
Permit at once, since the rest of its group is bound (scheduler-plugins pkg/coscheduling/core/core.go).
"""

from __future__ import annotations

from typing import Any

from placer.emit.targets.common import GROUP_LABEL, Context, engine_pod, replica_pods
from placer.emit.targets.controllers import pool_services, stateful_set
from placer.emit.targets.router import router_docs
from placer.model.placement import ReplicaPlacement

SCHEDULER = "scheduler-plugins-scheduler"
# The PodGroup's API group is scheduling.x-k8s.io from v0.25 (scheduling.sigs.k8s.io before); the oldest
# release the suite checks is v0.25.7 (tests/data/crds/upstream/scheduler-plugins-v0.25.7).
REQUIRES = ("scheduler-plugins", "v0.25", "serves its PodGroup as scheduling.sigs.k8s.io, not scheduling.x-k8s.io")


def pod_group(ctx: Context, rep: ReplicaPlacement, members: int | None = None) -> dict[str, Any]:
    """The replica's gang: no pod binds until ``minMember`` of them can."""
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": ctx.gang_metadata(rep.index),
        "spec": {
            "minMember": replica_pods(rep) if members is None else members,
            "scheduleTimeoutSeconds": ctx.spec.scheduling.schedule_timeout_seconds,
        },
    }


def build(ctx: Context) -> list[dict]:
    ctx.require_version(*REQUIRES)
    docs: list[dict] = []
    scheduler = ctx.spec.scheduling.scheduler_name
    for rep in ctx.placement.replicas:
        group = ctx.gang_name(rep.index)
        docs.append(pod_group(ctx, rep))
        for inst in rep.instances:
            for j in range(len(inst.pods)):
                docs.append(
                    stateful_set(ctx, rep, inst, j, engine_pod(ctx, rep, inst, j, scheduler, {GROUP_LABEL: group}))
                )
        docs += pool_services(ctx, rep)
        docs += router_docs(ctx, rep)
    return docs
