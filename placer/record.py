"""Read back what placer wrote: the placement record (``--placement FILE``) and the manifests ``placer
solve`` printed. Both carry the spec the placement was made for, so ``placer explain`` needs only them and
the cluster file.

The record is a pydantic model at the edge like every other input (its JSON Schema is generated from it);
manifests are read through their labels and ``placer.dev/*`` annotations, which emit.py writes for exactly
this purpose. Everything read here is untrusted: it goes through the same safe YAML loader and the same
validation as a hand-written spec, and the placement is then re-checked by the independent checker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from placer.errors import InputError
from placer.placement import InstancePlacement, Placement, Pod, ReplicaPlacement, SolveStats
from placer.spec import ServingTopology

SPEC_ANNOTATION = "placer.dev/spec"
STATUS_ANNOTATION = "placer.dev/solver-status"
CLUSTER_ANNOTATION = "placer.dev/cluster"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PodRecord(_Record):
    node: str
    gpus: list[int] = Field(min_length=1)


class InstanceRecord(_Record):
    pool: str
    index: int = Field(ge=0)
    domain: str
    pods: list[PodRecord] = Field(min_length=1)


class ReplicaRecord(_Record):
    index: int = Field(ge=0)
    router: str | None = None
    instances: list[InstanceRecord]


class StatusRecord(_Record):
    status: Literal["optimal", "feasible", "infeasible", "unknown", "greedy"]
    objective: int | None = None
    bound: int | None = None
    gap: float | None = None
    solver: str = "cp-sat"
    notes: list[str] = Field(default_factory=list)
    seconds: dict[str, float] | None = None

    def to_stats(self) -> SolveStats:
        return SolveStats(self.status, self.objective, self.bound, self.gap, self.solver, notes=list(self.notes))


class RecordMetadata(_Record):
    name: str
    namespace: str = "default"


class PlacementRecord(_Record):
    """``kind: Placement``: what was placed where, the solver's verdict, and the spec it was made for."""

    api_version: Literal["placer.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Placement"]
    metadata: RecordMetadata
    cluster: str = Field(description="metadata.name of the cluster file the placement was made on.")
    status: StatusRecord
    spec: ServingTopology | None = Field(
        default=None, description="The ServingTopology the placement was made for (explain needs it)."
    )
    replicas: list[ReplicaRecord]

    def to_placement(self) -> Placement:
        return Placement(
            deployment=self.metadata.name,
            namespace=self.metadata.namespace,
            cluster=self.cluster,
            replicas=tuple(
                ReplicaPlacement(
                    index=r.index,
                    router=r.router,
                    instances=tuple(
                        InstancePlacement(i.pool, i.index, tuple(Pod(p.node, tuple(p.gpus)) for p in i.pods), i.domain)
                        for i in r.instances
                    ),
                )
                for r in self.replicas
            ),
            stats=self.status.to_stats(),
        )


def spec_record(spec: ServingTopology) -> dict[str, Any]:
    """The spec as plain data, defaults left out (short, and equal to the original when validated again)."""
    return spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)


def status_record(stats: SolveStats) -> dict[str, Any]:
    return {"status": stats.status, "objective": stats.objective, "bound": stats.bound, "gap": stats.gap}


@dataclass(frozen=True)
class Placed:
    """A placement read back, with the spec it was made for and where it came from."""

    spec: ServingTopology
    placement: Placement
    source: str  # "placement record" | "manifests"


def load_placed(path: Path) -> Placed:
    """A placement record (YAML or JSON) or a manifest stream (multi-document YAML or a JSON ``List``)."""
    from placer.load import parse_documents, read_text

    docs = [d for d, _ in parse_documents(read_text(path), str(path))]  # JSON is YAML
    if len(docs) == 1 and isinstance(docs[0], dict) and docs[0].get("kind") == "List":
        docs = list(docs[0].get("items") or [])
    if not docs or not all(isinstance(d, dict) for d in docs):
        raise InputError(f"{path}: expected a Placement record or the manifests placer solve printed")
    if len(docs) == 1 and docs[0].get("kind") == "Placement":
        return _from_record(path, docs[0])
    if any(d.get("kind") == "Placement" for d in docs):
        raise InputError(f"{path}: a Placement record must be the only document in its file")
    return _from_manifests(path, docs)


def _from_record(path: Path, data: dict[str, Any]) -> Placed:
    from placer.load import format_loc

    try:
        record = PlacementRecord.model_validate(data)
    except ValidationError as exc:
        problems = [f"{format_loc(e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)[:5]]
        raise InputError(f"{path}: not a valid Placement record: " + "; ".join(problems)) from None
    if record.spec is None:
        raise InputError(f"{path}: spec: the record carries no spec (written by an older placer); solve again")
    return Placed(record.spec, record.to_placement(), "placement record")


def _annotation(doc: dict[str, Any], key: str) -> str | None:
    value = ((doc.get("metadata") or {}).get("annotations") or {}).get(key)
    return value if isinstance(value, str) else None


def _labels(doc: dict[str, Any]) -> dict[str, Any]:
    labels = (doc.get("metadata") or {}).get("labels") or {}
    return labels if isinstance(labels, dict) else {}


def _json_annotation(path: Path, doc: dict[str, Any], key: str) -> Any:
    raw = _annotation(doc, key)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: annotation {key} is not valid JSON ({exc.msg})") from None


def _from_manifests(path: Path, docs: list[dict[str, Any]]) -> Placed:
    """Rebuild the placement from the PodGroups (spec, status), Pods (GPUs) and router Deployments."""
    groups = [d for d in docs if d.get("kind") == "PodGroup" and _annotation(d, SPEC_ANNOTATION)]
    if not groups:
        raise InputError(
            f"{path}: no PodGroup with a {SPEC_ANNOTATION} annotation: these are not manifests placer emitted"
        )
    spec_data = _json_annotation(path, groups[0], SPEC_ANNOTATION)
    try:
        spec = ServingTopology.model_validate(spec_data)
    except ValidationError as exc:
        raise InputError(
            f"{path}: annotation {SPEC_ANNOTATION}: not a valid spec ({exc.error_count()} errors)"
        ) from None
    status = _json_annotation(path, groups[0], STATUS_ANNOTATION) or {"status": "unknown"}
    try:
        stats = StatusRecord.model_validate(status)
    except ValidationError:
        raise InputError(f"{path}: annotation {STATUS_ANNOTATION}: not a solver status") from None
    cluster = _annotation(groups[0], CLUSTER_ANNOTATION) or ""
    instances: dict[tuple[int, str, int], InstancePlacement] = {}
    routers: dict[int, str] = {}
    for doc in docs:
        labels = _labels(doc)
        if labels.get("app.kubernetes.io/name") != spec.metadata.name:
            continue
        try:
            replica = int(labels.get("placer.dev/replica", ""))
        except ValueError:
            continue
        if doc.get("kind") == "Pod":
            pool, index = labels.get("placer.dev/pool"), labels.get("placer.dev/instance", "")
            gpus = _annotation(doc, "placer.dev/instance-gpus")
            if pool not in spec.pools or not index.isdigit() or gpus is None:
                raise InputError(f"{path}: Pod {doc.get('metadata', {}).get('name')!r} lacks placer's labels")
            key = (replica, pool, int(index))
            if key not in instances:
                instances[key] = InstancePlacement(
                    pool, int(index), _parse_instance_gpus(path, gpus), _annotation(doc, "placer.dev/domain") or ""
                )
        elif doc.get("kind") == "Deployment" and labels.get("app.kubernetes.io/component") == "router":
            node = _annotation(doc, "placer.dev/node")
            if node:
                routers[replica] = node
    replicas = sorted({k[0] for k in instances})
    placement = Placement(
        deployment=spec.metadata.name,
        namespace=spec.metadata.namespace,
        cluster=cluster,
        replicas=tuple(
            ReplicaPlacement(r, tuple(instances[k] for k in sorted(instances) if k[0] == r), routers.get(r))
            for r in replicas
        ),
        stats=stats.to_stats(),
    )
    return Placed(spec, placement, "manifests")


def _parse_instance_gpus(path: Path, text: str) -> tuple[Pod, ...]:
    """``node-a:0,1,2,3;node-b:0,1,2,3`` -> pods."""
    pods = []
    for part in text.split(";"):
        node, _, gpus = part.partition(":")
        try:
            indices = tuple(int(g) for g in gpus.split(","))
        except ValueError:
            raise InputError(f"{path}: annotation placer.dev/instance-gpus {text!r} is not node:gpu,gpu;...") from None
        if not node or not indices:
            raise InputError(f"{path}: annotation placer.dev/instance-gpus {text!r} is not node:gpu,gpu;...")
        pods.append(Pod(node, indices))
    return tuple(pods)
