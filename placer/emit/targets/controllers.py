"""Controllers that keep placed pods alive, and the Services that name them.

A target builds each placed pod (``common.engine_pod``) and hands it to one of these wrappers, so no engine
is printed as a bare Pod (docs/TARGETS.md, "Engines under controllers", says which target uses which and
why); every target also prints each pool's headless Service.
"""

from __future__ import annotations

from typing import Any

from placer.emit.targets.common import (
    RANK_LABEL,
    Context,
    instance_labels,
    labels,
    pool_service_name,
    replica_annotations,
)
from placer.model.errors import NameTooLong
from placer.model.placement import InstancePlacement, ReplicaPlacement

# The StatefulSet controller labels each pod controller-revision-hash=<name>-<10-character hash>, a label value
# (at most 63 characters): a longer name is accepted and its pods are never created (kubernetes/kubernetes
# issue 64023). A LeaderWorkerSet makes a worker StatefulSet <lws>-<group> of its own (kubernetes-sigs/lws
# issue 410), two characters more.
STATEFULSET_MAX = 63 - 11
LEADERWORKERSET_MAX = STATEFULSET_MAX - 2


def controller_name(name: str, limit: int, kind: str) -> str:
    """Refuse (bad input) a controller name whose pods Kubernetes could not create."""
    if len(name) > limit:
        raise NameTooLong(
            f"{kind} name {name!r} has {len(name)} characters; Kubernetes creates its pods only up to {limit} "
            "(the controller-revision-hash label repeats it): shorten metadata.name or the pool name"
        )
    return name


def stateful_set(ctx: Context, rep: ReplicaPlacement, inst: InstancePlacement, j: int, pod: dict) -> dict[str, Any]:
    """A placed pod under a controller: a StatefulSet of one whose template is the pinned ``pod``.

    A deleted, evicted or lost pod comes back with the same name, node affinity, GPU count and gang label,
    without placer. A StatefulSet rather than a Deployment because it never runs two copies at once (a
    Deployment's surge would ask for the GPUs twice, on a node that has them once) and it gives the pod a
    stable DNS name under the pool's headless Service, which the router and a multi-node leader need. The
    StatefulSet's own labels are placer's only: a scheduler's queue label there would make an integration
    (Kueue's ``statefulset``) manage the StatefulSet as a workload of its own."""
    meta = pod["metadata"]
    name = meta["name"]
    controller_name(name, STATEFULSET_MAX, "StatefulSet")
    own = instance_labels(ctx.spec, rep.index, inst) | {RANK_LABEL: str(j)}
    selector = {k: own[k] for k in ("app.kubernetes.io/instance", "placer.dev/pool", "placer.dev/instance", RANK_LABEL)}
    notes = {k: v for k, v in meta["annotations"].items() if k.startswith("placer.dev/")}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": own,
            "annotations": notes | replica_annotations(ctx, rep.index),
        },
        "spec": {
            "replicas": 1,
            "serviceName": pool_service_name(ctx, rep.index, inst.pool),
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": meta["labels"] | {RANK_LABEL: str(j)}, "annotations": meta["annotations"]},
                "spec": pod["spec"],
            },
        },
    }


def pool_services(ctx: Context, rep: ReplicaPlacement) -> list[dict[str, Any]]:
    """Per pool of the replica, the headless Service over its pods: it gives every engine pod a DNS name
    (the router's URLs, a multi-node instance's leader address) and lists the pool's endpoints. Addresses
    are published before pods are ready, since a multi-node instance's leader is not ready until its
    workers have joined it."""
    out = []
    for pool in sorted({i.pool for i in rep.instances}):
        template = ctx.spec.pools[pool].template
        service: dict[str, Any] = {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"app.kubernetes.io/instance": ctx.gang_name(rep.index), "placer.dev/pool": pool},
        }
        if template.ports:
            service["ports"] = [
                {"name": p.name, "port": p.container_port, "targetPort": p.name} for p in template.ports
            ]
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": pool_service_name(ctx, rep.index, pool),
                    "namespace": ctx.namespace,
                    "labels": labels(ctx.spec, rep.index, ctx.spec.role_of(pool)) | {"placer.dev/pool": pool},
                },
                "spec": service,
            }
        )
    return out
