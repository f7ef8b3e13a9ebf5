"""The router of each replica: a CPU pod placed near a pool, and the Service in front of it."""

from __future__ import annotations

from typing import Any

from placer.emit.targets.common import Context, affinity, hostname, labels
from placer.model.placement import ReplicaPlacement


def router_container(ctx: Context) -> dict[str, Any]:
    router = ctx.spec.router
    assert router is not None
    container: dict[str, Any] = {
        "name": "router",
        "image": router.image,
        "ports": [{"name": "http", "containerPort": router.port}],
        "resources": {"requests": {"cpu": router.cpu, "memory": router.memory}},
    }
    if router.args:
        container["args"] = list(router.args)
    return container


def router_selector(ctx: Context, replica: int) -> dict[str, str]:
    return {"app.kubernetes.io/instance": ctx.gang_name(replica), "app.kubernetes.io/component": "router"}


def router_service(ctx: Context, replica: int) -> dict[str, Any]:
    assert ctx.spec.router is not None
    name = f"{ctx.gang_name(replica)}-router"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ctx.namespace, "labels": labels(ctx.spec, replica, "router")},
        "spec": {
            "selector": router_selector(ctx, replica),
            "ports": [{"name": "http", "port": ctx.spec.router.port, "targetPort": "http"}],
        },
    }


def router_docs(ctx: Context, rep: ReplicaPlacement, pod_labels: dict[str, str] | None = None) -> list[dict]:
    """The router's Deployment (pinned to its node, which ``placer.dev/node`` records) and Service."""
    if ctx.spec.router is None or rep.router is None:
        return []
    name = f"{ctx.gang_name(rep.index)}-router"
    lab = labels(ctx.spec, rep.index, "router")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": ctx.namespace,
            "labels": lab,
            "annotations": {"placer.dev/node": rep.router},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": router_selector(ctx, rep.index)},
            "template": {
                "metadata": {"labels": lab | (pod_labels or {})},
                "spec": {"affinity": affinity([hostname(ctx.topo, rep.router)]), "containers": [router_container(ctx)]},
            },
        },
    }
    return [deployment, router_service(ctx, rep.index)]
