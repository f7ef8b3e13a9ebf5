"""Dynamic Resource Allocation (``resource.k8s.io/v1``): the exact GPUs, not just how many.

Phase 1, the gang: the coscheduling ``PodGroup`` of the default target (kube-scheduler's DRA plugin
allocates claims; the coscheduling plugin holds the replica back until all of it fits).
Phase 2, one ``ResourceClaimTemplate`` per pod: a single request for ``count`` devices of the spec's
DeviceClass (``gpu.nvidia.com``, the NVIDIA DRA driver's) whose CEL selector admits only whole GPUs
(``type == "gpu"``) with the indices placer chose on that node; the pod's node affinity makes the node
exact, so the claim can only be satisfied by those GPUs. Phase 3, the pod: ``resourceClaims`` names the
template, the engine container consumes the claim, and asks for no ``nvidia.com/gpu`` (that is the device
plugin's resource; a DRA cluster publishes the GPUs through ResourceSlices instead).
"""

from __future__ import annotations

from typing import Any

from placer.emit.targets import coscheduling
from placer.emit.targets.common import (
    GROUP_LABEL,
    Context,
    engine_container,
    hostname,
    instance_labels,
    pod_annotations,
    pod_name,
    pod_spec,
)
from placer.emit.targets.router import router_docs
from placer.model.placement import InstancePlacement, Pod, ReplicaPlacement

DESCRIPTION = "DRA ResourceClaimTemplates selecting the exact GPUs per node (CEL), coscheduling gang"
CLAIM = "gpus"


def selector(driver: str, gpus: tuple[int, ...]) -> str:
    """CEL over the driver's device attributes: whole GPUs with exactly these indices."""
    attrs = f'device.attributes["{driver}"]'
    return f'{attrs}.type == "gpu" && {attrs}.index in [{", ".join(map(str, gpus))}]'


def claim_template(ctx: Context, rep: ReplicaPlacement, inst: InstancePlacement, j: int) -> dict[str, Any]:
    pod: Pod = inst.pods[j]
    dra = ctx.spec.scheduling.dra
    request = {
        "name": CLAIM,
        "exactly": {
            "deviceClassName": dra.device_class,
            "allocationMode": "ExactCount",
            "count": len(pod.gpus),
            "selectors": [{"cel": {"expression": selector(dra.driver, pod.gpus)}}],
        },
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": f"{pod_name(ctx.spec, rep.index, inst, j)}-gpus",
            "namespace": ctx.namespace,
            "labels": instance_labels(ctx.spec, rep.index, inst),
            "annotations": {"placer.dev/node": pod.node, "placer.dev/gpus": ",".join(map(str, pod.gpus))},
        },
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def claimed_pod(ctx: Context, rep: ReplicaPlacement, inst: InstancePlacement, j: int, scheduler: str | None) -> dict:
    pod = inst.pods[j]
    template = claim_template(ctx, rep, inst, j)
    container = engine_container(ctx, inst, None, j, claims=[CLAIM])
    spec = pod_spec(ctx, container, [hostname(ctx.topo, pod.node)], scheduler)
    spec["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": template["metadata"]["name"]}]
    group = ctx.gang_name(rep.index)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(ctx.spec, rep.index, inst, j),
            "namespace": ctx.namespace,
            "labels": instance_labels(ctx.spec, rep.index, inst) | {GROUP_LABEL: group},
            "annotations": pod_annotations(ctx, rep.index, inst, pod),
        },
        "spec": spec,
    }


def build(ctx: Context) -> list[dict]:
    docs: list[dict] = []
    scheduler = ctx.spec.scheduling.scheduler_name  # the gang is the coscheduling PodGroup
    for rep in ctx.placement.replicas:
        docs.append(coscheduling.pod_group(ctx, rep))
        for inst in rep.instances:
            for j in range(len(inst.pods)):
                docs.append(claim_template(ctx, rep, inst, j))
                docs.append(claimed_pod(ctx, rep, inst, j, scheduler))
        docs += router_docs(ctx, rep)
    return docs
