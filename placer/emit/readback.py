"""Read back what placer wrote: the placement record (``--placement FILE``), the manifests ``placer
solve`` printed, and what runs (``kubectl get pods -A -o json``). Records and manifests carry the spec the
placement was made for, so ``placer explain`` needs only them and the cluster file.

Manifests are read through their labels and ``placer.dev/*`` annotations, which every ``--target`` writes
for exactly this purpose (where each one puts them: ``SPEC_CARRIERS`` below). Everything read here is
untrusted: it goes through the same safe YAML loader and the same validation as a hand-written spec, and
the placement is then re-checked by the independent checker.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from placer.emit.checks import check_gpus_once, located
from placer.emit.targets import TARGETS
from placer.model.errors import InputError
from placer.model.placement import InstancePlacement, Placement, Pod, ReplicaPlacement
from placer.model.record import CLUSTER_ANNOTATION, SPEC_ANNOTATION, STATUS_ANNOTATION, PlacementRecord, StatusRecord
from placer.model.running import Running
from placer.model.spec import ServingTopology


@dataclass(frozen=True)
class Placed:
    """A placement read back, with the spec it was made for and where it came from."""

    spec: ServingTopology
    placement: Placement
    source: str  # "placement record" | "manifests"
    target: str | None = None  # the --target it was written for, where it says


def load_placed(path: Path, deployment: str | None = None) -> Placed:
    """A placement record (YAML or JSON) or a manifest stream (multi-document YAML or a JSON ``List``).
    A file from a batch (several records, or several deployments' manifests) needs ``deployment``
    (``name`` or ``namespace/name``) to say which one."""
    parsed = _documents(path)
    docs = [d for d, _ in parsed]
    if not docs or not all(isinstance(d, dict) for d in docs):
        raise InputError(f"{path}: expected a Placement record or the manifests placer solve printed")
    docs = _one_deployment(path, docs, deployment)
    if len(docs) == 1 and docs[0].get("kind") == "Placement":
        return _from_record(path, docs[0], _root_of(parsed, docs[0]))
    if any(d.get("kind") == "Placement" for d in docs):
        raise InputError(f"{path}: a Placement record must be the only document in its file")
    return _from_manifests(path, docs)


def _documents(path: Path) -> list[tuple[Any, yaml.Node]]:
    """The file's documents with their YAML nodes (for the lines of errors); a JSON ``List`` (JSON is
    YAML) gives its items."""
    from placer.model.load import read_text
    from placer.model.yaml_text import parse_documents

    parsed = parse_documents(read_text(path), str(path))
    if len(parsed) == 1 and isinstance(parsed[0][0], dict) and parsed[0][0].get("kind") == "List":
        data, root = parsed[0]
        items = data.get("items") or []
        seq = next((v for k, v in root.value if getattr(k, "value", None) == "items"), None)
        if not isinstance(items, list):
            line = seq.start_mark.line + 1 if seq is not None else 1
            raise InputError(f"{path}:{line}: items: a List's items must be a list of objects")
        nodes = (
            seq.value if isinstance(seq, yaml.SequenceNode) and len(seq.value) == len(items) else [root] * len(items)
        )
        parsed = list(zip(items, nodes, strict=True))
    _check_record_kinds(path, parsed)
    return parsed


def _check_record_kinds(path: Path, parsed: list[tuple[Any, yaml.Node]]) -> None:
    """A placer.dev/ document here is a Placement record: a mistyped or missing kind was read as manifests
    and refused as "not manifests placer emitted", with no line; another placer kind is the wrong file."""
    from placer.model.load import KINDS
    from placer.model.messages import line_of

    for data, root in parsed:
        if not isinstance(data, dict) or not str(data.get("apiVersion", "")).startswith("placer.dev/"):
            continue
        kind = data.get("kind")
        if kind == "Placement":
            continue
        other = f" (this file is a {kind}, given where a Placement record or manifests belong)" if kind in KINDS else ""
        raise InputError(
            f"{path}:{line_of(root, ('kind',))}: kind: a placer.dev/ document here is a record of kind "
            f"'Placement', got {kind!r}{other}"
        )


def _root_of(parsed: list[tuple[Any, yaml.Node]], doc: dict[str, Any]) -> yaml.Node:
    return next(node for data, node in parsed if data is doc)


def _one_deployment(path: Path, docs: list[dict[str, Any]], wanted: str | None) -> list[dict[str, Any]]:
    """The documents of one deployment: all of them when the file holds one, else the one asked for."""

    def key(doc: dict[str, Any]) -> tuple[str, str] | None:
        if _shared(doc):
            return None
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
    matching = [k for k in keys if k[1] == name and (not ns or k[0] == ns)]
    names = ", ".join(f"{n_ns}/{n}" for n_ns, n in keys)
    if not matching:
        raise InputError(f"{path}: no deployment {wanted!r} here (it holds {names})")
    if len(matching) > 1:
        which = " or ".join(f"{n_ns}/{n}" for n_ns, n in matching)
        raise InputError(f"{path}: --deployment {wanted!r} is in several namespaces here: give {which}")
    return [d for d in docs if key(d) == matching[0]]


def _from_record(path: Path, data: dict[str, Any], root: yaml.Node) -> Placed:
    from placer.model.load import validate_document

    record = validate_document((data, root), str(path), PlacementRecord)
    if record.spec is None:
        raise InputError(f"{path}: spec: the record carries no spec (written by an older placer); solve again")
    meta = record.spec.metadata
    if (record.metadata.namespace, record.metadata.name) != (meta.namespace, meta.name):
        field, mine, theirs = (
            ("namespace", record.metadata.namespace, meta.namespace)
            if record.metadata.namespace != meta.namespace
            else ("name", record.metadata.name, meta.name)
        )
        raise located(
            path,
            f"metadata.{field}: metadata.{field} {mine!r} is not the {field} of the spec it carries ({theirs!r})",
            root,
        )
    if record.target is not None and record.target not in TARGETS:
        raise located(path, f"target: {record.target!r} is not a --target ({', '.join(TARGETS)})", root)
    problem = record_shape_problem(record, record.spec)
    if problem is not None:
        raise located(path, problem, root)
    placement = record.to_placement()
    check_gpus_once(path, placement, root)
    return Placed(record.spec, placement, "placement record", record.target)


def record_shape_problem(record: PlacementRecord, spec: ServingTopology) -> str | None:
    """What makes a record no placement of its spec at all (a field path first), or None: every replica
    lists each of the spec's instances exactly once, and a router where the spec has one. The manifests'
    reader asks the same of what it reads (_check_complete); an edited record is bad input, not a placement
    for the checker to find broken."""
    seen: set[int] = set()
    for r, rep in enumerate(record.replicas):
        if rep.index in seen:
            return f"replicas[{r}].index: replica {rep.index} is listed twice"
        seen.add(rep.index)
        listed: set[tuple[str, int]] = set()
        for i, inst in enumerate(rep.instances):
            where = f"replicas[{r}].instances[{i}]"
            pool = spec.pools.get(inst.pool)
            if pool is None:
                return f"{where}.pool: {inst.pool!r} is not a pool of the spec (its pools: {', '.join(spec.pools)})"
            if inst.index >= pool.instances:
                return (
                    f"{where}.index: pool {inst.pool!r} has {pool.instances} instance(s) per replica "
                    f"(0-{pool.instances - 1}), not {inst.index}"
                )
            if (inst.pool, inst.index) in listed:
                return f"{where}: {inst.pool} instance {inst.index} of replica {rep.index} is listed twice"
            listed.add((inst.pool, inst.index))
        for name, pool in spec.pools.items():
            missing = [k for k in range(pool.instances) if (name, k) not in listed]
            if missing:
                return (
                    f"replicas[{r}].instances: replica {rep.index} lacks {name} instance(s) {missing}; the spec "
                    f"places {pool.instances} per replica: the record is incomplete"
                )
        if (spec.router is None) != (rep.router is None):
            asks = "has no router" if spec.router is None else "asks for a router per replica"
            return f"replicas[{r}].router: the spec {asks}"
    return None


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
# PodCliqueSet, or the metadata of the first Deployment of a Kueue pod group); an instance's GPUs on the
# objects that make its pods (placer.dev/instance-gpus on Pods, LeaderWorkerSets and Grove cliques; a Grove
# clique of single-node instances lists them in placer.dev/instances); the router's node on its Deployment or
# Grove clique.
SPEC_CARRIERS = ("PodGroup", "PodCliqueSet", "Pod", "StatefulSet", "Deployment", "DynamoGraphDeployment")
ENGINE_KINDS = ("Pod", "StatefulSet", "Deployment", "LeaderWorkerSet", "PodClique", "DynamoComponent")
ROUTER_KINDS = ("Deployment", "PodClique", "DynamoComponent")


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
        if kind == "DynamoGraphDeployment":  # a component's pods carry its podTemplate's labels and annotations
            components = _dict(doc.get("spec")).get("components")
            for component in components if isinstance(components, list) else []:
                component = _dict(component)
                meta = _dict(_dict(component.get("podTemplate")).get("metadata"))
                what = f"DynamoGraphDeployment {name!r} component {component.get('name')!r}"
                out.append(_Unit(what, "DynamoComponent", _dict(meta.get("labels")), _dict(meta.get("annotations"))))
    return out


def _from_manifests(path: Path, docs: list[dict[str, Any]]) -> Placed:
    """Rebuild the placement from the gang object (spec, status), the engine objects (GPUs) and the
    router's object (node), whatever --target wrote them."""
    carriers = [d for d in docs if d.get("kind") in SPEC_CARRIERS and _annotation(d, SPEC_ANNOTATION)]
    if not carriers:
        raise InputError(
            f"{path}: no PodGroup, PodCliqueSet, StatefulSet or Pod carries the {SPEC_ANNOTATION} annotation placer "
            "writes on each replica's gang: these are not manifests placer emitted"
        )
    if len({_annotation(d, SPEC_ANNOTATION) for d in carriers}) > 1:
        raise InputError(f"{path}: the objects carry different {SPEC_ANNOTATION} annotations: give one placement")
    spec_data = _json_annotation(path, carriers[0], SPEC_ANNOTATION)
    try:
        spec = ServingTopology.model_validate(spec_data, by_alias=True, by_name=False)
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
    return Placed(spec, placement, "manifests", target_of(docs))


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
    listed = unit.annotations.get("placer.dev/instances") if unit.kind in ("PodClique", "DynamoComponent") else None
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
            f"{path}: no StatefulSet, Pod, LeaderWorkerSet or Grove clique of {spec.metadata.name!r} carries "
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


def load_running(paths: Sequence[Path]) -> list[Running]:
    """Every deployment the files describe; the same deployment in two files is an error."""
    out: dict[str, Running] = {}
    for path in paths:
        parsed = _documents(path)
        if not all(isinstance(d, dict) for d, _ in parsed):
            raise InputError(f"{path}: expected placement records, placer's manifests or a kubectl pod list")
        for running in _read(path, parsed):
            if running.key in out:
                raise InputError(f"{path}: {running.key} is also described in {out[running.key].source}")
            out[running.key] = running
    return [out[k] for k in sorted(out)]


def _read(path: Path, parsed: list[tuple[dict[str, Any], yaml.Node]]) -> list[Running]:
    docs = [d for d, _ in parsed]
    if not docs:
        return []
    if all(d.get("kind") == "Placement" for d in docs):
        return [_from_placed(path, _from_record(path, d, root)) for d, root in parsed]
    if any(d.get("kind") == "Placement" for d in docs):
        raise InputError(f"{path}: placement records and manifests mixed in one file")
    if all(d.get("kind") == "Pod" for d in docs) and any("status" in d or _node_name(d) for d in docs):
        return _from_pods(path, docs)  # what the API server returns (placer's own output has neither)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for d in docs:
        if _is_placer(d):
            meta = _dict(d.get("metadata"))
            groups[(str(meta.get("namespace") or "default"), _labels(d)["app.kubernetes.io/name"])].append(d)
    if not groups:
        raise InputError(f"{path}: no object carries placer's labels (app.kubernetes.io/managed-by: placer)")
    out = []
    for _key, group in sorted(groups.items()):
        running = _from_placed(path, _from_manifests(path, group))
        running.target = target_of(group)
        running.nccl = _carries(group, "placer.dev/nccl")
        out.append(running)
    return out


def _carries(node: Any, key: str) -> bool:
    """Whether any mapping inside ``node`` has ``key`` (an annotation anywhere in objects and templates)."""
    if isinstance(node, dict):
        return key in node or any(_carries(v, key) for v in node.values())
    if isinstance(node, list):
        return any(_carries(v, key) for v in node)
    return False


# What tells each --target's output apart, most specific first. Kinds: LWS and DRA also write a
# coscheduling PodGroup, so they come before it. Pods (a kubectl pod list, or the templates of workloads
# read back without their gang object): what each target writes on them (docs/TARGETS.md), or the LWS
# controller's label; Grove's and Dynamo's pods are made by their operators and say nothing placer relies on.
_KINDS = (
    ("dynamo", lambda api, kind: kind == "DynamoGraphDeployment"),
    ("grove", lambda api, kind: kind == "PodCliqueSet"),
    ("lws", lambda api, kind: kind == "LeaderWorkerSet"),
    ("dra", lambda api, kind: api.startswith("resource.k8s.io/")),
    ("kai", lambda api, kind: kind == "PodGroup" and api.startswith("scheduling.run.ai/")),
    ("volcano", lambda api, kind: kind == "PodGroup" and api.startswith("scheduling.volcano.sh/")),
)
_PODS = (
    # Labels the operators put on every pod they make, in their own code: Dynamo's
    # KubeLabelDynamoGraphDeploymentName (also on a graph that runs on Grove, so it comes first) and Grove's
    # LabelPodClique.
    ("dynamo", lambda labels, notes, spec: "nvidia.com/dynamo-graph-deployment-name" in labels),
    ("grove", lambda labels, notes, spec: "grove.io/podclique" in labels),
    ("dra", lambda labels, notes, spec: bool(spec.get("resourceClaims"))),
    ("lws", lambda labels, notes, spec: "leaderworkerset.sigs.k8s.io/name" in labels),
    ("kai", lambda labels, notes, spec: any(str(k).startswith("kai.scheduler/") for k in labels)),
    ("volcano", lambda labels, notes, spec: "scheduling.k8s.io/group-name" in notes),
    ("kueue", lambda labels, notes, spec: any(str(k).startswith("kueue.x-k8s.io/") for k in labels)),
)


def target_of(docs: list[dict[str, Any]]) -> str | None:
    """The ``--target`` one deployment's objects (manifests, or its running pods) were written for; None
    when nothing says (a placement record, a target placer does not know, objects edited beyond recognition)."""
    seen = {(str(d.get("apiVersion") or ""), str(d.get("kind") or "")) for d in docs}
    pods = [_pod_template(d) for d in docs]
    for target, matches in _KINDS:
        if any(matches(api, kind) for api, kind in seen):
            return target
    for target, marks in _PODS:
        if any(marks(*pod) for pod in pods):
            return target
    if any(kind == "PodGroup" for _, kind in seen) or any("scheduling.x-k8s.io/pod-group" in lb for lb, _, _ in pods):
        return "coscheduling"
    return None


def _pod_template(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(labels, annotations, pod spec) of a Pod, or of a workload's pod template; empty for other objects."""
    if doc.get("kind") == "Pod":
        meta, spec = _dict(doc.get("metadata")), _dict(doc.get("spec"))
    else:
        template = _dict(_dict(doc.get("spec")).get("template"))
        meta, spec = _dict(template.get("metadata")), _dict(template.get("spec"))
    return _dict(meta.get("labels")), _dict(meta.get("annotations")), spec


def _from_placed(path: Path, placed) -> Running:
    pl = placed.placement
    running = Running(
        pl.namespace,
        pl.deployment,
        str(path),
        spec=placed.spec,
        stats=pl.stats,
        cluster=pl.cluster,
        target=placed.target,
    )
    for rep in pl.replicas:
        for inst in rep.instances:
            running.instances[(rep.index, inst.pool, inst.index)] = inst
        if rep.router is not None:
            running.routers[rep.index] = rep.router
    return running


def _from_pods(path: Path, docs: list[dict[str, Any]]) -> list[Running]:
    """``kubectl get pods -o json``: placer's pods that are bound to a node; pending ones do not run yet.
    A pod of a Grove clique of single-node instances lists them all (``placer.dev/instances``): it stands
    for the ones placed on the node it runs on."""
    out: dict[tuple[str, str], Running] = {}
    pods: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for d in docs:
        node = _dict(d.get("spec")).get("nodeName")
        if not _is_placer(d) or not node or _dict(d.get("status")).get("phase") in ("Succeeded", "Failed"):
            continue
        meta, labels = _dict(d.get("metadata")), _labels(d)
        ns, name = str(meta.get("namespace") or "default"), _deployment(labels)
        running = out.setdefault((ns, name), Running(ns, name, str(path)))
        pods[(ns, name)].append(d)
        replica = _int(labels.get("placer.dev/replica"))
        if replica is None:
            continue
        if labels.get("app.kubernetes.io/component") == "router" or labels.get("placer.dev/role") == "router":
            running.routers[replica] = str(node)
            continue
        notes = _dict(meta.get("annotations"))
        pool = labels.get("placer.dev/pool")
        if not isinstance(pool, str):
            continue
        for inst in _pod_instances(path, notes, pool, _int(labels.get("placer.dev/instance")), str(node)):
            running.instances[(replica, pool, inst.index)] = inst
    for key, running in out.items():
        running.target = target_of(pods[key])
    return [out[k] for k in sorted(out)]


def _pod_instances(path: Path, notes: dict[str, Any], pool: str, index: int | None, node: str) -> list[Any]:
    """The instances a running pod stands for: its own (``placer.dev/instance-gpus``), or those of a Grove
    clique's list that were placed on the pod's node."""
    gpus = notes.get("placer.dev/instance-gpus")
    if isinstance(gpus, str) and index is not None:
        domain = str(notes.get("placer.dev/domain") or "")
        return [InstancePlacement(pool, index, _parse_instance_gpus(path, gpus), domain)]
    listed = notes.get("placer.dev/instances")
    if not isinstance(listed, str):
        return []
    try:
        table, domains = json.loads(listed), json.loads(str(notes.get("placer.dev/domains") or "{}"))
    except json.JSONDecodeError:
        raise InputError(f"{path}: annotation placer.dev/instances is not JSON") from None
    if not isinstance(table, dict) or not isinstance(domains, dict):
        raise InputError(f"{path}: annotation placer.dev/instances is not {{index: node:gpu,...}}")
    out = []
    for k, text in sorted(table.items()):
        pods = _parse_instance_gpus(path, str(text))
        if str(k).isdigit() and pods[0].node == node:
            out.append(InstancePlacement(pool, int(k), pods, str(domains.get(k, ""))))
    return out


def _node_name(doc: dict[str, Any]) -> str | None:
    return _dict(doc.get("spec")).get("nodeName")


def _is_placer(doc: dict[str, Any]) -> bool:
    """Made by placer: its ``placer.dev/deployment`` label (which operators that rewrite
    ``app.kubernetes.io/*`` on their pods keep), or placer's ``app.kubernetes.io`` labels (older output)."""
    labels = _labels(doc)
    named = labels.get("app.kubernetes.io/managed-by") == "placer" and bool(labels.get("app.kubernetes.io/name"))
    return (named or bool(labels.get("placer.dev/deployment"))) and not _shared(doc)


def _deployment(labels: dict[str, Any]) -> str:
    return str(labels.get("placer.dev/deployment") or labels["app.kubernetes.io/name"])


def _shared(doc: dict[str, Any]) -> bool:
    """A cluster's topology object (KAI Topology, Grove ClusterTopologyBinding): every deployment on that
    cluster shares it, so it belongs to none of them."""
    return _labels(doc).get("app.kubernetes.io/component") == "topology"


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, str) and value.isdigit() else None
