"""LeaderWorkerSet per instance, under the coscheduling gang.

Phase 1, the gang: per replica the scheduler-plugins ``PodGroup`` of the default target; every engine pod
(all created by LWSs) carries its ``scheduling.x-k8s.io/pod-group`` label, so the replica still binds
all or nothing.
Phase 2, instances: every instance is a ``LeaderWorkerSet`` (a single-node one a group of one, made from
``workerTemplate`` alone, as LWS does when ``leaderTemplate`` is absent). An instance spanning nodes is a
``LeaderWorkerSet`` (``leaderworkerset.x-k8s.io/v1``) with one group (``replicas: 1``) of
``size`` = its pods: the leader pinned to its node, the workers admitted to exactly the other chosen nodes,
and a hostname anti-affinity over the instance's pods, so N pods on N admitted nodes land one per node.
Workers share one template, so they must ask for the same GPU count; placer picks as leader the pod that
makes this true, and refuses (bad input) an instance where no choice does. ``RecreateGroupOnPodRestart``
restarts the whole TP group together, as a torn NCCL communicator needs.
"""

from __future__ import annotations

from typing import Any

from placer.emit.targets import coscheduling
from placer.emit.targets.common import (
    GROUP_LABEL,
    Context,
    anti_affinity,
    dns_label,
    engine_container,
    hostname,
    instance_labels,
    leader_split,
    pod_annotations,
    pod_spec,
    replica_annotations,
)
from placer.emit.targets.controllers import LEADERWORKERSET_MAX, controller_name, pool_services
from placer.emit.targets.router import router_docs
from placer.model.errors import InputError
from placer.model.placement import InstancePlacement, ReplicaPlacement

OLDEST = "v0.3.0"  # first release with startupPolicy (LeaderCreated)
REQUIRES = ("LeaderWorkerSet", OLDEST, "has no startupPolicy")


WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"  # LWS labels every pod with its index (leader: 0)


def lws_name(ctx: Context, replica: int, inst: InstancePlacement) -> str:
    name = dns_label(f"{ctx.gang_name(replica)}-{inst.pool}-{inst.index}", "LeaderWorkerSet name")
    return controller_name(name, LEADERWORKERSET_MAX, "LeaderWorkerSet")


def lws_leader_host(ctx: Context, replica: int, inst: InstancePlacement) -> str:
    """The leader of the LWS's only group is ``<lws>-0``, under the headless Service LWS names after itself."""
    name = lws_name(ctx, replica, inst)
    return f"{name}-0.{name}.{ctx.namespace}.svc"


def _template(
    ctx: Context,
    rep: ReplicaPlacement,
    inst: InstancePlacement,
    pods: list[int],
    role: str,
    group: str,
    scheduler: str | None,
) -> dict[str, Any]:
    first = inst.pods[pods[0]]
    hosts = [hostname(ctx.topo, inst.pods[j].node) for j in pods]
    rank = 0 if role == "leader" else WORKER_INDEX  # workers share a template: their rank is LWS's label
    container = engine_container(ctx, inst, len(first.gpus), rank, leader=lws_leader_host(ctx, rep.index, inst))
    spec = pod_spec(ctx, container, hosts, scheduler, inst.pool)
    spec["affinity"] |= anti_affinity(ctx, rep.index, inst)
    labels = instance_labels(ctx.spec, rep.index, inst) | {GROUP_LABEL: group, "placer.dev/lws-role": role}
    annotations = pod_annotations(ctx, rep.index, inst, first if len(pods) == 1 else None)
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}


def leader_worker_set(
    ctx: Context, rep: ReplicaPlacement, inst: InstancePlacement, group: str, scheduler: str | None
) -> dict[str, Any]:
    split = leader_split(inst)
    name = lws_name(ctx, rep.index, inst)
    if split is None:
        counts = [len(p.gpus) for p in inst.pods]
        raise InputError(
            f"--target lws: instance {inst.pool}-{inst.index} of replica {rep.index} has pods asking for "
            f"{counts} GPUs; a LeaderWorkerSet's workers share one template (give the pool gpusPerNode, or "
            "choose another --target)"
        )
    leader, workers = split
    group_template: dict[str, Any] = {"size": len(inst.pods), "restartPolicy": "RecreateGroupOnPodRestart"}
    if workers:
        group_template["leaderTemplate"] = _template(ctx, rep, inst, [leader], "leader", group, scheduler)
        group_template["workerTemplate"] = _template(ctx, rep, inst, workers, "worker", group, scheduler)
    else:  # a group of one: LWS makes its leader from the worker template
        group_template["workerTemplate"] = _template(ctx, rep, inst, [leader], "leader", group, scheduler)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": name,
            "namespace": ctx.namespace,
            "labels": instance_labels(ctx.spec, rep.index, inst) | {GROUP_LABEL: group},
            "annotations": pod_annotations(ctx, rep.index, inst, None) | replica_annotations(ctx, rep.index),
        },
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": group_template,
        },
    }


def build(ctx: Context) -> list[dict]:
    ctx.require_version(*REQUIRES)
    ctx.hosts = lws_leader_host
    docs: list[dict] = []
    scheduler = ctx.spec.scheduling.scheduler_name  # the gang is the coscheduling PodGroup
    for rep in ctx.placement.replicas:
        group = ctx.gang_name(rep.index)
        docs.append(coscheduling.pod_group(ctx, rep))
        for inst in rep.instances:
            docs.append(leader_worker_set(ctx, rep, inst, group, scheduler))
        docs += pool_services(ctx, rep)
        docs += router_docs(ctx, rep)
    return docs
