"""What already runs: read it back, and turn it into kept instances and used GPUs for the next solve.

Three sources, told apart by their content:
- placement records (``--placement FILE``), one or a stream of them;
- the manifests placer printed (any ``--target``), one or several deployments in one stream;
- ``kubectl get pods -A -o json``: pods bound to a node (``spec.nodeName``) that carry placer's labels and
  ``placer.dev/instance-gpus``; a router pod counts where it is bound. Pods of other workloads are not
  read here: the cluster file (``placer import``) already marks their GPUs busy.

A running deployment that is also given as a spec is *kept*: its instances that the spec still has (same
replica, pool and index, same GPU count) are pinned where they run, the rest are dropped (scale-in) and
the spec's new instances are placed. One that is not given as a spec stays as it is: its GPUs (and, where
its spec is known, the CPU and memory of its pods) are simply in use.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placer.model.errors import InputError
from placer.model.placement import InstancePlacement, Placement, Pod, ReplicaPlacement, SolveStats
from placer.model.spec import ServingTopology
from placer.solver.problem import Kept
from placer.topology.graph import Topology


@dataclass
class Running:
    """One deployment as it runs: instances by (replica, pool, index), routers by replica."""

    namespace: str
    name: str
    source: str
    instances: dict[tuple[int, str, int], InstancePlacement] = field(default_factory=dict)
    routers: dict[int, str] = field(default_factory=dict)
    spec: ServingTopology | None = None  # known from records and manifests, not from bare pods

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def load_running(paths: Sequence[Path]) -> list[Running]:
    """Every deployment the files describe; the same deployment in two files is an error."""
    from placer.model.load import parse_documents, read_text

    out: dict[str, Running] = {}
    for path in paths:
        docs = [d for d, _ in parse_documents(read_text(path), str(path))]
        if len(docs) == 1 and isinstance(docs[0], dict) and docs[0].get("kind") == "List":
            docs = list(docs[0].get("items") or [])
        if not all(isinstance(d, dict) for d in docs):
            raise InputError(f"{path}: expected placement records, placer's manifests or a kubectl pod list")
        for running in _read(path, docs):
            if running.key in out:
                raise InputError(f"{path}: {running.key} is also described in {out[running.key].source}")
            out[running.key] = running
    return [out[k] for k in sorted(out)]


def _read(path: Path, docs: list[dict[str, Any]]) -> list[Running]:
    from placer.model.record import _from_manifests, _from_record

    if not docs:
        return []
    if all(d.get("kind") == "Placement" for d in docs):
        return [_from_placed(path, _from_record(path, d)) for d in docs]
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
    return [_from_placed(path, _from_manifests(path, group)) for _key, group in sorted(groups.items())]


def _from_placed(path: Path, placed) -> Running:
    pl = placed.placement
    running = Running(pl.namespace, pl.deployment, str(path), spec=placed.spec)
    for rep in pl.replicas:
        for inst in rep.instances:
            running.instances[(rep.index, inst.pool, inst.index)] = inst
        if rep.router is not None:
            running.routers[rep.index] = rep.router
    return running


def _from_pods(path: Path, docs: list[dict[str, Any]]) -> list[Running]:
    """``kubectl get pods -o json``: placer's pods that are bound to a node; pending ones do not run yet."""
    from placer.model.record import _parse_instance_gpus

    out: dict[tuple[str, str], Running] = {}
    for d in docs:
        node = _dict(d.get("spec")).get("nodeName")
        if not _is_placer(d) or not node or _dict(d.get("status")).get("phase") in ("Succeeded", "Failed"):
            continue
        meta, labels = _dict(d.get("metadata")), _labels(d)
        ns, name = str(meta.get("namespace") or "default"), labels["app.kubernetes.io/name"]
        running = out.setdefault((ns, name), Running(ns, name, str(path)))
        replica = _int(labels.get("placer.dev/replica"))
        if replica is None:
            continue
        if labels.get("app.kubernetes.io/component") == "router":
            running.routers[replica] = str(node)
            continue
        gpus = _dict(meta.get("annotations")).get("placer.dev/instance-gpus")
        pool, index = labels.get("placer.dev/pool"), _int(labels.get("placer.dev/instance"))
        if not isinstance(gpus, str) or not isinstance(pool, str) or index is None:
            continue
        domain = str(_dict(meta.get("annotations")).get("placer.dev/domain") or "")
        running.instances[(replica, pool, index)] = InstancePlacement(
            pool, index, _parse_instance_gpus(path, gpus), domain
        )
    return [out[k] for k in sorted(out)]


def _node_name(doc: dict[str, Any]) -> str | None:
    return _dict(doc.get("spec")).get("nodeName")


def _is_placer(doc: dict[str, Any]) -> bool:
    labels = _labels(doc)
    return labels.get("app.kubernetes.io/managed-by") == "placer" and bool(labels.get("app.kubernetes.io/name"))


def _labels(doc: dict[str, Any]) -> dict[str, Any]:
    return _dict(_dict(doc.get("metadata")).get("labels"))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, str) and value.isdigit() else None


@dataclass
class KeepPlan:
    """What --keep means for one solve: the cluster as the solver sees it, and per spec what stays."""

    topology: Topology  # kept GPUs free (each deployment's own are pinned in its model; placer.solver.fleet keeps
    # them busy for every other deployment), running deployments not given as specs busy
    kept: dict[str, Kept]  # deployment key -> kept instances
    dropped: dict[str, list[str]]  # deployment key -> instances not kept (scale-in, changed shape)
    untouched: list[Running]  # running deployments not given as specs: in use, not re-emitted


def plan_keep(running: list[Running], specs: list[ServingTopology], topo: Topology) -> KeepPlan:
    """Match running deployments to specs by namespace/name; check every node and GPU exists."""
    from placer.solver.fleet import merge_usage, usage

    by_key = {f"{s.metadata.namespace}/{s.metadata.name}": s for s in specs}
    release: dict[int, list[int]] = defaultdict(list)
    taken: list = []  # usage of running deployments not given as specs
    kept: dict[str, Kept] = {}
    dropped: dict[str, list[str]] = {}
    untouched = []
    claims: dict[tuple[str, int], str] = {}
    for run in running:
        for (k, pool, i), inst in sorted(run.instances.items()):
            _check_pods(run, inst.pods, topo)
            for pod in inst.pods:
                for g in pod.gpus:
                    what = f"{run.key} replica {k} {pool}-{i}"
                    other = claims.setdefault((pod.node, g), what)
                    if other != what:
                        raise InputError(f"{run.source}: GPU {g} of {pod.node} is held by both {other} and {what}")
        for node in run.routers.values():
            _check_pods(run, (Pod(node, ()),), topo)
        spec = by_key.get(run.key)
        if spec is None:
            untouched.append(run)
            if run.spec is not None and all(pool in run.spec.pools for _k, pool, _i in run.instances):
                taken.append(usage(run.spec, topo, running_placement(run, topo.name)))
            else:  # bare pods: their GPUs are known, their requests are not
                gpus: dict[int, list[int]] = defaultdict(list)
                for inst in run.instances.values():
                    for pod in inst.pods:
                        gpus[topo.node_by_name(pod.node).index] += pod.gpus
                taken.append((gpus, {}, {}))
            continue
        keep, drop = {}, []
        for (k, pool, i), inst in sorted(run.instances.items()):
            p = spec.pools.get(pool)
            fits = (
                p is not None
                and k < spec.replicas
                and i < p.instances
                and sum(len(pod.gpus) for pod in inst.pods) == p.gpus_per_instance
                # a multi-node instance keeps its layout: nodeCount pods of gpusPerNode GPUs
                and (p.node_count is None or [len(pod.gpus) for pod in inst.pods] == [p.gpus_per_node] * p.node_count)
            )
            if fits:
                keep[(k, pool, i)] = inst
                for pod in inst.pods:
                    release[topo.node_by_name(pod.node).index] += pod.gpus
            else:
                drop.append(f"replica {k} {pool}-{i}")
        routers = {k: n for k, n in run.routers.items() if k < spec.replicas and spec.router is not None}
        kept[run.key] = Kept(keep, routers)
        if drop:
            dropped[run.key] = drop
    base = topo.with_released(release).with_usage(*merge_usage(taken))
    return KeepPlan(base, kept, dropped, untouched)


def _check_pods(run: Running, pods, topo: Topology) -> None:
    for pod in pods:
        try:
            node = topo.node_by_name(pod.node)
        except KeyError:
            raise InputError(
                f"{run.source}: {run.key} runs on node {pod.node!r}, which the cluster file does not list"
            ) from None
        unknown = sorted(set(pod.gpus) - {g.index for g in node.gpus})
        if unknown:
            raise InputError(f"{run.source}: {run.key} uses GPUs {unknown} of node {pod.node}, which has no such GPUs")


def running_placement(run: Running, cluster: str) -> Placement:
    """A running deployment as a Placement (for the checker and plan's move list)."""
    return as_placement(run.name, run.namespace, cluster, run.instances, run.routers)


def as_placement(
    name: str,
    namespace: str,
    cluster: str,
    instances: dict[tuple[int, str, int], InstancePlacement],
    routers: dict[int, str],
) -> Placement:
    """Instances by (replica, pool, index) and routers by replica, as a Placement."""
    replicas = sorted({k for k, _p, _i in instances} | set(routers))
    return Placement(
        name,
        namespace,
        cluster,
        tuple(
            ReplicaPlacement(k, tuple(instances[key] for key in sorted(instances) if key[0] == k), routers.get(k))
            for k in replicas
        ),
        SolveStats("unknown"),
    )


def records_text(placements: list[tuple[ServingTopology, Placement]]) -> str:
    """Several placement records as one YAML stream (what --placement writes for a batch)."""
    import yaml

    from placer.emit.manifests import _PlainDumper
    from placer.model.record import spec_record

    return "".join(
        "---\n" + yaml.dump(p.to_record(spec_record(s)), Dumper=_PlainDumper, sort_keys=True, default_flow_style=False)
        for s, p in placements
    )
