"""Placement -> Kubernetes manifests, in a canonical order, ready for ``kubectl apply -f -``.

Per replica: a scheduler-plugins coscheduling ``PodGroup`` (the gang: no pod of the replica binds until
all can), one ``Pod`` per (instance, node) pinned with required node affinity on
``kubernetes.io/hostname`` and asking for exactly the GPUs placer chose there, then the router's
``Deployment`` and ``Service``. Annotations carry the GPU indices and predicted costs so that
``placer explain`` can read the manifests back. Every value that reaches a manifest was validated at the
edge (names, labels, images, env), and documents are serialised by PyYAML, never by string templates.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from placer.placement import InstancePlacement, Placement
from placer.record import CLUSTER_ANNOTATION, SPEC_ANNOTATION, STATUS_ANNOTATION, spec_record, status_record
from placer.spec import ServingTopology
from placer.topology import Topology
from placer.verify import Report

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
GPU_RESOURCE = "nvidia.com/gpu"


def _labels(spec: ServingTopology, replica: int, component: str) -> dict[str, str]:
    name = spec.metadata.name
    return {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/instance": f"{name}-r{replica}",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": name,
        "app.kubernetes.io/managed-by": "placer",
        "placer.dev/replica": str(replica),
    }


def _affinity(hostname: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [hostname]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _hostname(topo: Topology, node: str) -> str:
    return topo.node_by_name(node).labels.get("kubernetes.io/hostname", node)


def _fmt_us(us: float) -> str:
    return f"{us:.1f}"


def pod_name(spec: ServingTopology, replica: int, inst: InstancePlacement, pod_index: int) -> str:
    base = f"{spec.metadata.name}-r{replica}-{inst.pool}-{inst.index}"
    return base if len(inst.pods) == 1 else f"{base}-{pod_index}"


def build_manifests(spec: ServingTopology, topo: Topology, placement: Placement, report: Report) -> list[dict]:
    ns = spec.metadata.namespace
    name = spec.metadata.name
    costs = {(c.replica, c.pool, c.index): c for c in report.instances}
    kv = {c.replica: c for c in report.replicas}
    docs: list[dict] = []
    # The PodGroup carries what explain needs to read the manifests back without the spec file.
    group_annotations = {
        SPEC_ANNOTATION: json.dumps(spec_record(spec), sort_keys=True, separators=(",", ":")),
        STATUS_ANNOTATION: json.dumps(status_record(placement.stats), sort_keys=True, separators=(",", ":")),
        CLUSTER_ANNOTATION: placement.cluster,
    }
    for rep in placement.replicas:
        group = f"{name}-r{rep.index}"
        members = sum(len(i.pods) for i in rep.instances)
        docs.append(
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {
                    "name": group,
                    "namespace": ns,
                    "labels": _labels(spec, rep.index, "gang"),
                    "annotations": dict(group_annotations),
                },
                "spec": {"minMember": members, "scheduleTimeoutSeconds": spec.scheduling.schedule_timeout_seconds},
            }
        )
        for inst in rep.instances:
            pool = spec.pools[inst.pool]
            c = costs[(rep.index, inst.pool, inst.index)]
            for j, pod in enumerate(inst.pods):
                labels = _labels(spec, rep.index, spec.role_of(inst.pool))
                labels |= {"placer.dev/pool": inst.pool, "placer.dev/instance": str(inst.index), GROUP_LABEL: group}
                annotations = {
                    "placer.dev/gpus": ",".join(map(str, pod.gpus)),
                    "placer.dev/instance-gpus": ";".join(f"{p.node}:{','.join(map(str, p.gpus))}" for p in inst.pods),
                    "placer.dev/domain": c.domain,
                    "placer.dev/allreduce-us-per-forward-pass": _fmt_us(c.allreduce_us),
                    "placer.dev/bottleneck-gbps": f"{c.ring.bandwidth_gbps:g}"
                    if c.ring.bandwidth_gbps != float("inf")
                    else "none",
                }
                if kv[rep.index].kv_path is not None:
                    annotations["placer.dev/kv-transfer-us"] = _fmt_us(kv[rep.index].kv_us)
                t = pool.template
                requests = dict(t.resources.requests) | {GPU_RESOURCE: str(len(pod.gpus))}
                limits = dict(t.resources.limits) | {GPU_RESOURCE: str(len(pod.gpus))}
                env = [{"name": e.name, "value": e.value} for e in t.env]
                env += [
                    {"name": "PLACER_POD_RANK", "value": str(j)},
                    {"name": "PLACER_INSTANCE_PODS", "value": str(len(inst.pods))},
                ]
                container: dict[str, Any] = {
                    "name": "engine",
                    "image": t.image,
                    "env": env,
                    "resources": {"requests": requests, "limits": limits},
                }
                if t.command:
                    container["command"] = list(t.command)
                if t.args:
                    container["args"] = list(t.args)
                if t.ports:
                    container["ports"] = [{"name": p.name, "containerPort": p.container_port} for p in t.ports]
                docs.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": pod_name(spec, rep.index, inst, j),
                            "namespace": ns,
                            "labels": labels,
                            "annotations": annotations,
                        },
                        "spec": {
                            "schedulerName": spec.scheduling.scheduler_name,
                            "restartPolicy": "Always",
                            "affinity": _affinity(_hostname(topo, pod.node)),
                            "containers": [container],
                        },
                    }
                )
        if spec.router is not None and rep.router is not None:
            docs += _router(spec, topo, rep.index, rep.router)
    return docs


def _router(spec: ServingTopology, topo: Topology, replica: int, node: str) -> list[dict]:
    router = spec.router
    assert router is not None
    name = f"{spec.metadata.name}-r{replica}-router"
    labels = _labels(spec, replica, "router")
    selector = {
        "app.kubernetes.io/instance": labels["app.kubernetes.io/instance"],
        "app.kubernetes.io/component": "router",
    }
    container: dict[str, Any] = {
        "name": "router",
        "image": router.image,
        "ports": [{"name": "http", "containerPort": router.port}],
        "resources": {"requests": {"cpu": router.cpu, "memory": router.memory}},
    }
    if router.args:
        container["args"] = list(router.args)
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": name,
                "namespace": spec.metadata.namespace,
                "labels": labels,
                "annotations": {"placer.dev/node": node},
            },
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"affinity": _affinity(_hostname(topo, node)), "containers": [container]},
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": spec.metadata.namespace, "labels": labels},
            "spec": {"selector": selector, "ports": [{"name": "http", "port": router.port, "targetPort": "http"}]},
        },
    ]


class _PlainDumper(yaml.SafeDumper):
    """No anchors or aliases: a shared dict is written out in full at each place (readers such as placer's
    own loader, and reviewers, get plain YAML)."""

    def ignore_aliases(self, data) -> bool:
        return True


def to_yaml(docs: list[dict]) -> str:
    return "".join(
        "---\n" + yaml.dump(d, Dumper=_PlainDumper, sort_keys=True, default_flow_style=False, width=1000) for d in docs
    )


def to_json_list(docs: list[dict]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}, indent=2, sort_keys=True) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory and rename, so readers never see half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent or Path("."), prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def placement_text(placement: Placement, path: Path, spec: ServingTopology) -> str:
    """The placement record as JSON or YAML, chosen by the file's extension, with the spec inside."""
    record = placement.to_record(spec_record(spec))
    if path.suffix.lower() == ".json":
        return json.dumps(record, indent=2, sort_keys=True) + "\n"
    return yaml.dump(record, Dumper=_PlainDumper, sort_keys=True, default_flow_style=False)
