"""Dynamic Resource Allocation (``resource.k8s.io/v1``, Kubernetes >= 1.34): the exact GPUs, not just how many.

Phase 1, the gang: the coscheduling ``PodGroup`` of the default target (kube-scheduler's DRA plugin
allocates claims; the coscheduling plugin holds the replica back until all of it fits).
Phase 2, one ``ResourceClaimTemplate`` per pod: a single request for ``count`` devices of the spec's
DeviceClass (``gpu.nvidia.com``, the NVIDIA DRA driver's) whose CEL selector admits only the GPUs placer
chose on that node, named by an attribute the driver publishes: ``uuid`` (every release, v25.3.0 to main),
or, where the cluster file knows no uuid, the standard ``resource.kubernetes.io/pciBusID`` (v25.12.0 and
later). The driver stopped publishing ``index`` in v25.8.0, and a selector naming an attribute a device
lacks makes the scheduler abort the claim, so indices are never selected on. The pod's node affinity makes
the node exact, so the claim can only be met by those GPUs. The identifiers come from the cluster file
(``gpuIds``, written by ``placer cluster import --resourceslices`` or ``--nccl-xml``); a chosen GPU with
neither is bad input (exit 2) naming the node, the GPUs and the import that supplies them.
Phase 3, multi-node NVLink: an instance whose pods sit on several trays of one NVLink domain (GB200 NVL72)
needs an IMEX channel shared by its pods; placer emits a ``ComputeDomain`` (``resource.nvidia.com/v1beta1``)
per such instance, whose controller creates the channel's ResourceClaimTemplate, and every pod of the
instance claims it. Phase 4, the pod: ``resourceClaims`` names the templates, the engine container consumes
the claims, and asks for no ``nvidia.com/gpu`` (the device plugin's resource; a DRA cluster publishes the
GPUs through ResourceSlices instead).
"""

from __future__ import annotations

from typing import Any

from placer.emit.targets import coscheduling
from placer.emit.targets.common import (
    GROUP_LABEL,
    Context,
    dns_label,
    engine_container,
    engine_pod_metadata,
    hostname,
    instance_labels,
    pod_name,
    pod_spec,
)
from placer.emit.targets.controllers import pool_services, stateful_set
from placer.emit.targets.router import router_docs
from placer.model.errors import InputError
from placer.model.placement import InstancePlacement, Pod, ReplicaPlacement

CLAIM = "gpus"
CHANNEL = "imex-channel"
STANDARD = "resource.kubernetes.io"  # the domain of the standard pciBusID attribute
IMPORTS = (
    "import them into the cluster file: `placer cluster import --resourceslices resourceslices.json` "
    "(`kubectl get resourceslices -o json`: uuid and bus id of every GPU the DRA driver publishes) or "
    "`--nccl-xml` with an NCCL_TOPO_DUMP_FILE dump of the node (bus ids)"
)


def selector(driver: str, attribute: str, values: list[str]) -> str:
    """CEL over the device's attributes: whole GPUs whose ``attribute`` is one of ``values``."""
    domain = STANDARD if attribute == "pciBusID" else driver
    listed = ", ".join(f'"{v}"' for v in values)
    return f'device.attributes["{driver}"].type == "gpu" && device.attributes["{domain}"].{attribute} in [{listed}]'


def pod_selector(ctx: Context, pod: Pod) -> str:
    """The selector of one pod's claim: by uuid when every chosen GPU has one, else by bus id."""
    node = ctx.topo.node_by_name(pod.node)
    gpus = [node.gpu(i) for i in pod.gpus]
    driver = ctx.spec.scheduling.dra.driver
    if all(g.uuid for g in gpus):
        return selector(driver, "uuid", [g.uuid or "" for g in gpus])
    if all(g.pci_bus_id for g in gpus):
        return selector(driver, "pciBusID", [g.pci_bus_id or "" for g in gpus])
    missing = [g.index for g in gpus if not g.uuid and not g.pci_bus_id]
    partial = "" if missing else " (some have only a uuid, others only a bus id; one selector needs one kind)"
    which = missing or list(pod.gpus)
    raise InputError(
        f"--target dra: node {pod.node} GPU(s) {','.join(map(str, which))}: the cluster file has no "
        f"gpuIds (uuid or pciBusID) for them{partial}, and the NVIDIA DRA driver publishes no GPU index "
        f"to select on (since v25.8.0); {IMPORTS}"
    )


def imex_instance(ctx: Context, inst: InstancePlacement) -> bool:
    """Pods on several nodes of one multi-node NVLink domain: they share GPU memory through IMEX."""
    if len({p.node for p in inst.pods}) < 2:
        return False
    domains = {ctx.topo.node_by_name(p.node).path.get("nvlink-domain") for p in inst.pods}
    return len(domains) == 1 and None not in domains


def _base(ctx: Context, rep: ReplicaPlacement, inst: InstancePlacement) -> str:
    return f"{ctx.name}-r{rep.index}-{inst.pool}-{inst.index}"


def compute_domain(ctx: Context, rep: ReplicaPlacement, inst: InstancePlacement) -> dict[str, Any]:
    """The IMEX domain of one instance; its controller makes the ResourceClaimTemplate ``<name>-channel``."""
    name = dns_label(f"{_base(ctx, rep, inst)}-imex", "ComputeDomain name")
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {
            "name": name,
            "namespace": ctx.namespace,
            "labels": instance_labels(ctx.spec, rep.index, inst),
            "annotations": {"placer.dev/nodes": ",".join(sorted({p.node for p in inst.pods}))},
        },
        "spec": {
            "numNodes": 0,  # deprecated; 0 with the driver's default IMEXDaemonsWithDNSNames
            "channel": {"resourceClaimTemplate": {"name": dns_label(f"{name}-channel", "channel template name")}},
        },
    }


def claim_template(ctx: Context, rep: ReplicaPlacement, inst: InstancePlacement, j: int) -> dict[str, Any]:
    pod: Pod = inst.pods[j]
    dra = ctx.spec.scheduling.dra
    request = {
        "name": CLAIM,
        "exactly": {
            "deviceClassName": dra.device_class,
            "allocationMode": "ExactCount",
            "count": len(pod.gpus),
            "selectors": [{"cel": {"expression": pod_selector(ctx, pod)}}],
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


def claimed_pod(
    ctx: Context, rep: ReplicaPlacement, inst: InstancePlacement, j: int, scheduler: str | None, channel: str | None
) -> dict:
    pod = inst.pods[j]
    template = claim_template(ctx, rep, inst, j)
    claims = [CLAIM] + ([CHANNEL] if channel else [])
    container = engine_container(ctx, inst, None, j, claims=claims, leader=ctx.leader_host(rep.index, inst))
    spec = pod_spec(ctx, container, [hostname(ctx.topo, pod.node)], scheduler, inst.pool)
    spec["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": template["metadata"]["name"]}]
    if channel:
        spec["resourceClaims"].append({"name": CHANNEL, "resourceClaimTemplateName": channel})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": engine_pod_metadata(ctx, rep, inst, j, {GROUP_LABEL: ctx.gang_name(rep.index)}),
        "spec": spec,
    }


# --target-version names the Kubernetes release for this target: DRA is kube-scheduler's.
REQUIRES = (
    "Kubernetes",
    "1.34",
    "serves no resource.k8s.io/v1 (DRA is GA from 1.34; 1.32-1.33 have only v1beta1/v1beta2)",
)


def build(ctx: Context) -> list[dict]:
    ctx.require_version(*REQUIRES)
    docs: list[dict] = []
    scheduler = ctx.spec.scheduling.scheduler_name  # the gang is the coscheduling PodGroup
    for rep in ctx.placement.replicas:
        docs.append(coscheduling.pod_group(ctx, rep))
        for inst in rep.instances:
            channel = None
            if imex_instance(ctx, inst):
                domain = compute_domain(ctx, rep, inst)
                docs.append(domain)
                channel = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
            for j in range(len(inst.pods)):
                docs.append(claim_template(ctx, rep, inst, j))
                docs.append(stateful_set(ctx, rep, inst, j, claimed_pod(ctx, rep, inst, j, scheduler, channel)))
        docs += pool_services(ctx, rep)
        docs += router_docs(ctx, rep)
    return docs
