"""Read back what placer wrote: the placement record (``--placement FILE``) and the manifests ``placer
solve`` printed. Both carry the spec the placement was made for, so ``placer explain`` needs only them and
the cluster file.

The record is a pydantic model at the edge like every other input (its JSON Schema is generated from it);
manifests are read through their labels and ``placer.dev/*`` annotations, which every ``--target`` writes
for exactly this purpose (where each one puts them: ``SPEC_CARRIERS`` below). Everything read here is
untrusted: it goes through the same safe YAML loader and the same validation as a hand-written spec, and
the placement is then re-checked by the independent checker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from placer.model.errors import InputError
from placer.model.placement import InstancePlacement, Placement, Pod, ReplicaPlacement, SolveStats
from placer.model.spec import ServingTopology

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


def load_placed(path: Path, deployment: str | None = None) -> Placed:
    """A placement record (YAML or JSON) or a manifest stream (multi-document YAML or a JSON ``List``).
    A file from a batch (several records, or several deployments' manifests) needs ``deployment``
    (``name`` or ``namespace/name``) to say which one."""
    from placer.model.load import parse_documents, read_text

    docs = [d for d, _ in parse_documents(read_text(path), str(path))]  # JSON is YAML
    if len(docs) == 1 and isinstance(docs[0], dict) and docs[0].get("kind") == "List":
        docs = list(docs[0].get("items") or [])
    if not docs or not all(isinstance(d, dict) for d in docs):
        raise InputError(f"{path}: expected a Placement record or the manifests placer solve printed")
    docs = _one_deployment(path, docs, deployment)
    if len(docs) == 1 and docs[0].get("kind") == "Placement":
        return _from_record(path, docs[0])
    if any(d.get("kind") == "Placement" for d in docs):
        raise InputError(f"{path}: a Placement record must be the only document in its file")
    return _from_manifests(path, docs)


def _one_deployment(path: Path, docs: list[dict[str, Any]], wanted: str | None) -> list[dict[str, Any]]:
    """The documents of one deployment: all of them when the file holds one, else the one asked for."""

    def key(doc: dict[str, Any]) -> tuple[str, str] | None:
        meta = _dict(doc.get("metadata"))
        name = meta.get("name") if doc.get("kind") == "Placement" else _labels(doc).get("app.kubernetes.io/name")
        return (str(meta.get("namespace") or "default"), str(name)) if name else None

    keys = sorted({k for d in docs if (k := key(d)) is not None})
    if wanted is None:
        if len(keys) > 1:
            names = ", ".join(f"{ns}/{n}" for ns, n in keys)
            raise InputError(f"{path}: holds several deployments ({names}): choose one with --deployment")
        return docs
    ns, _, name = wanted.rpartition("/")
    chosen = [d for d in docs if (k := key(d)) is not None and k[1] == name and (not ns or k[0] == ns)]
    if not chosen:
        names = ", ".join(f"{n_ns}/{n}" for n_ns, n in keys)
        raise InputError(f"{path}: no deployment {wanted!r} here (it holds {names})")
    return chosen


def _from_record(path: Path, data: dict[str, Any]) -> Placed:
    from placer.model.load import format_loc

    try:
        record = PlacementRecord.model_validate(data)
    except ValidationError as exc:
        problems = [f"{format_loc(e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)[:5]]
        raise InputError(f"{path}: not a valid Placement record: " + "; ".join(problems)) from None
    if record.spec is None:
        raise InputError(f"{path}: spec: the record carries no spec (written by an older placer); solve again")
    return Placed(record.spec, record.to_placement(), "placement record")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _annotation(doc: dict[str, Any], key: str) -> str | None:
    value = _dict(_dict(doc.get("metadata")).get("annotations")).get(key)
    return value if isinstance(value, str) else None


def _labels(doc: dict[str, Any]) -> dict[str, Any]:
    return _dict(_dict(doc.get("metadata")).get("labels"))


def _json_annotation(path: Path, doc: dict[str, Any], key: str) -> Any:
    raw = _annotation(doc, key)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: annotation {key} is not valid JSON ({exc.msg})") from None


# Where every --target leaves what explain needs (docs/DESIGN.md, "Explain reads only what placer wrote"):
# the spec, the solver's status and the cluster on each replica's gang object (a PodGroup, a Grove
# PodCliqueSet, or the first Pod of a Kueue pod group); an instance's GPUs on the objects that make its pods
# (placer.dev/instance-gpus on Pods, LeaderWorkerSets and Grove cliques; a Grove clique of single-node
# instances lists them in placer.dev/instances); the router's node on its Deployment or Grove clique.
SPEC_CARRIERS = ("PodGroup", "PodCliqueSet", "Pod")
ENGINE_KINDS = ("Pod", "LeaderWorkerSet", "PodClique")
ROUTER_KINDS = ("Deployment", "PodClique")


@dataclass(frozen=True)
class _Unit:
    """The labels and annotations of one object, or of one clique inside a Grove PodCliqueSet."""

    what: str  # for messages: Pod 'x', PodCliqueSet 'y' clique 'z'
    kind: str
    labels: dict[str, Any]
    annotations: dict[str, Any]


def _units(docs: list[dict[str, Any]]) -> list[_Unit]:
    out = []
    for doc in docs:
        kind, meta = doc.get("kind"), _dict(doc.get("metadata"))
        name = meta.get("name")
        out.append(_Unit(f"{kind} {name!r}", str(kind), _labels(doc), _dict(meta.get("annotations"))))
        if kind == "PodCliqueSet":
            cliques = _dict(_dict(doc.get("spec")).get("template")).get("cliques")
            for clique in cliques if isinstance(cliques, list) else []:
                clique = _dict(clique)
                what = f"PodCliqueSet {name!r} clique {clique.get('name')!r}"
                out.append(_Unit(what, "PodClique", _dict(clique.get("labels")), _dict(clique.get("annotations"))))
    return out


def _from_manifests(path: Path, docs: list[dict[str, Any]]) -> Placed:
    """Rebuild the placement from the gang object (spec, status), the engine objects (GPUs) and the
    router's object (node), whatever --target wrote them."""
    carriers = [d for d in docs if d.get("kind") in SPEC_CARRIERS and _annotation(d, SPEC_ANNOTATION)]
    if not carriers:
        raise InputError(
            f"{path}: no PodGroup, PodCliqueSet or Pod carries the {SPEC_ANNOTATION} annotation placer writes on "
            "each replica's gang: these are not manifests placer emitted"
        )
    if len({_annotation(d, SPEC_ANNOTATION) for d in carriers}) > 1:
        raise InputError(f"{path}: the objects carry different {SPEC_ANNOTATION} annotations: give one placement")
    spec_data = _json_annotation(path, carriers[0], SPEC_ANNOTATION)
    try:
        spec = ServingTopology.model_validate(spec_data)
    except ValidationError as exc:
        raise InputError(
            f"{path}: annotation {SPEC_ANNOTATION}: not a valid spec ({exc.error_count()} errors)"
        ) from None
    status = _json_annotation(path, carriers[0], STATUS_ANNOTATION) or {"status": "unknown"}
    try:
        stats = StatusRecord.model_validate(status)
    except ValidationError:
        raise InputError(f"{path}: annotation {STATUS_ANNOTATION}: not a solver status") from None
    cluster = _annotation(carriers[0], CLUSTER_ANNOTATION) or ""
    instances: dict[tuple[int, str, int], InstancePlacement] = {}
    routers: dict[int, str] = {}
    for unit in _units(docs):
        if unit.labels.get("app.kubernetes.io/name") != spec.metadata.name:
            continue
        try:
            replica = int(unit.labels.get("placer.dev/replica", ""))
        except (TypeError, ValueError):
            continue
        if unit.labels.get("app.kubernetes.io/component") == "router":
            node = unit.annotations.get("placer.dev/node")
            if unit.kind in ROUTER_KINDS and isinstance(node, str) and node:
                routers[replica] = node
        elif unit.kind in ENGINE_KINDS:
            for inst in _unit_instances(path, unit, spec):
                key = (replica, inst.pool, inst.index)
                if key in instances and instances[key].pods != inst.pods:
                    raise InputError(
                        f"{path}: {unit.what} puts {inst.pool}-{inst.index} of replica {replica} on other GPUs "
                        "than another object does"
                    )
                instances.setdefault(key, inst)
    _check_complete(path, spec, instances, routers)
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


def _unit_instances(path: Path, unit: _Unit, spec: ServingTopology) -> list[InstancePlacement]:
    """The instances one engine object makes: one (placer.dev/instance-gpus), or for a Grove clique of
    single-node instances, each one it lists (placer.dev/instances, their domains in placer.dev/domains)."""
    pool = unit.labels.get("placer.dev/pool")
    if pool not in spec.pools:
        raise InputError(f"{path}: {unit.what}: label placer.dev/pool {pool!r} is not a pool of the spec")
    gpus = unit.annotations.get("placer.dev/instance-gpus")
    if isinstance(gpus, str):
        index = unit.labels.get("placer.dev/instance")
        if not isinstance(index, str) or not index.isdigit():
            raise InputError(f"{path}: {unit.what}: no placer.dev/instance label (the instance's index)")
        domain = unit.annotations.get("placer.dev/domain")
        return [InstancePlacement(pool, int(index), _parse_instance_gpus(path, gpus), domain or "")]
    listed = unit.annotations.get("placer.dev/instances") if unit.kind == "PodClique" else None
    if not isinstance(listed, str):
        raise InputError(f"{path}: {unit.what}: no placer.dev/instance-gpus annotation (the GPUs placer chose)")
    try:
        table = json.loads(listed)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: {unit.what}: annotation placer.dev/instances is not JSON ({exc.msg})") from None
    if not isinstance(table, dict) or not all(isinstance(k, str) and k.isdigit() for k in table):
        raise InputError(f"{path}: {unit.what}: annotation placer.dev/instances is not {{index: node:gpu,...}}")
    domains = unit.annotations.get("placer.dev/domains")
    try:
        domain_of = json.loads(domains) if isinstance(domains, str) else {}
    except json.JSONDecodeError:
        domain_of = {}
    domain_of = domain_of if isinstance(domain_of, dict) else {}
    return [
        InstancePlacement(pool, int(k), _parse_instance_gpus(path, str(v)), str(domain_of.get(k, "")))
        for k, v in table.items()
    ]


def _check_complete(
    path: Path, spec: ServingTopology, instances: dict[tuple[int, str, int], Any], routers: dict[int, str]
) -> None:
    """A replica is placed whole or not at all: manifests missing part of one are cut short, not a placement."""
    if not instances:
        raise InputError(
            f"{path}: no Pod, LeaderWorkerSet or Grove clique of {spec.metadata.name!r} carries "
            "placer.dev/instance-gpus: the gang is there but not its pods"
        )
    for replica in sorted({k[0] for k in instances}):
        for name, pool in spec.pools.items():
            have = sorted(k[2] for k in instances if k[0] == replica and k[1] == name)
            if have != list(range(pool.instances)):
                raise InputError(
                    f"{path}: replica {replica} has {name} instances {have}; the spec places {pool.instances} "
                    f"(0-{pool.instances - 1}): the manifests are incomplete"
                )
        if spec.router is not None and replica not in routers:
            raise InputError(
                f"{path}: replica {replica} has no router object with a placer.dev/node annotation "
                "(a Deployment, or Grove's router clique)"
            )


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
