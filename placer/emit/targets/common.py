"""What every target shares: the context of one emit, labels and names, node affinity, the engine pod, and
the topology-label mapping (the router's objects are in ``router.py``).

Every value that reaches a manifest was validated at the edge (spec, cluster) or is checked here (generated
names); documents are plain dicts serialised by PyYAML or json, never string templates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from placer.check.verify import Report
from placer.emit.targets import nccl
from placer.emit.targets.versions import require_version, version_key
from placer.model import engines, k8s
from placer.model.engines import LEADER_ENV, PODS_ENV, RANK_ENV
from placer.model.errors import NameTooLong
from placer.model.levels import LEVEL_RANK
from placer.model.placement import InstancePlacement, Pod, ReplicaPlacement
from placer.model.placement import Placement as PlacementResult
from placer.model.record import CLUSTER_ANNOTATION, SPEC_ANNOTATION, STATUS_ANNOTATION, spec_record, status_record
from placer.model.spec import ServingTopology
from placer.topology.graph import Topology

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
ROUTER_ROLE = "placer.dev/role"  # "router" on the router's objects and pod
RANK_LABEL = "placer.dev/rank"  # a pod's rank in its instance, on pods a controller makes one per rank
GPU_RESOURCE = "nvidia.com/gpu"
HOSTNAME = "kubernetes.io/hostname"
# Node label per placer level when neither spec.scheduling.topologyLabels nor the cluster file's
# topologyLabels (written by `placer cluster import` from the labels the nodes carry) names one.
# Sockets have no label.
DEFAULT_LEVEL_LABELS = {
    "node": HOSTNAME,
    "nvlink-domain": "nvidia.com/gpu.clique",
    "rack": "placer.dev/rack",
    "leaf": "placer.dev/leaf",
}


@dataclass
class Context:
    """One emit: the inputs, the checker's report, and the target's switches."""

    spec: ServingTopology
    topo: Topology
    placement: PlacementResult
    report: Report
    nccl: bool = False  # add NCCL env and the placer.dev/nccl annotation to engine pods
    exact_gpus: bool = False  # the target enforces GPU indices (DRA)
    target_version: str | None = None  # --target-version: the scheduler's release; None = the newest supported

    @property
    def name(self) -> str:
        return self.spec.metadata.name

    @property
    def namespace(self) -> str:
        return self.spec.metadata.namespace

    @cached_property
    def costs(self) -> dict[tuple[int, str, int], Any]:
        return {(c.replica, c.pool, c.index): c for c in self.report.instances}

    @cached_property
    def kv(self) -> dict[int, Any]:
        return {c.replica: c for c in self.report.replicas}

    def pool_hosts(self, replica: int, pool: str) -> list[str]:
        """DNS names of the pods serving ``pool``'s API in ``replica`` (one leader per instance, by instance
        index): what the router is told. How pods are named depends on the controller, so targets whose
        controller is not a StatefulSet per pod replace ``hosts``."""
        rep = next(r for r in self.placement.replicas if r.index == replica)
        return [self.leader_host(replica, i) for i in rep.instances if i.pool == pool]

    def leader_host(self, replica: int, inst: InstancePlacement) -> str:
        """DNS name of an instance's leader pod (rank 0)."""
        return self.hosts(self, replica, inst)

    hosts: Any = None  # (ctx, replica, inst) -> leader DNS name; set in __post_init__, targets may replace it

    def __post_init__(self) -> None:
        if self.hosts is None:
            self.hosts = statefulset_leader_host

    def scheduler(self, target_default: str | None) -> str | None:
        """The spec's schedulerName when the user gave one, else the target's scheduler."""
        if "scheduler_name" in self.spec.scheduling.model_fields_set:
            return self.spec.scheduling.scheduler_name
        return target_default

    def queue(self, target_default: str) -> str:
        return self.spec.scheduling.queue or target_default

    def level_label(self, level: str) -> str | None:
        """Node label key of a placer level (a socket counts as its node; the whole cluster has none)."""
        level = "node" if level == "socket" else level
        if level == "spine":
            return None
        given = self.spec.scheduling.topology_labels.get(level)  # type: ignore[call-overload]
        return given or self.topo.level_labels.get(level) or DEFAULT_LEVEL_LABELS[level]

    def version_below(self, release: str) -> bool:
        """True when --target-version names a release older than ``release`` (no version: the newest)."""
        return self.target_version is not None and version_key(self.target_version) < version_key(release)

    def require_version(self, product: str, oldest: str, why: str) -> None:
        """Refuse (bad input, exit 2) a --target-version older than the oldest release placer's output fits."""
        require_version(self.target_version, product, oldest, why)

    @cached_property
    def levels_present(self) -> list[str]:
        """Levels of this cluster's domains after merging, narrowest first (sockets count as nodes)."""
        found = {("node" if d.level == "socket" else d.level) for d in self.topo.domains.values()}
        return sorted(found, key=LEVEL_RANK.__getitem__)

    def instance_domain(self, replica: int, inst: InstancePlacement) -> str:
        """Narrowest domain holding the instance's GPUs (the checker's figure)."""
        return self.costs[(replica, inst.pool, inst.index)].domain

    def level_of(self, domain_id: str) -> str:
        level = self.topo.domains[domain_id].level
        return "node" if level == "socket" else level

    def nodes_domain(self, pods: list[Pod]) -> str:
        """Narrowest domain holding every node of these pods."""
        doms = sorted({self.topo.node_domain[self.topo.node_by_name(p.node).index] for p in pods})
        return self.topo.lowest_common(doms)

    def replica_domain(self, rep: ReplicaPlacement) -> str:
        return self.nodes_domain([p for i in rep.instances for p in i.pods])

    def gang_name(self, replica: int) -> str:
        return gang_name(self.name, replica)

    def gang_metadata(self, replica: int, name: str | None = None, extra_labels: dict[str, str] | None = None) -> dict:
        """Metadata of a replica's gang object (PodGroup, PodCliqueSet): it carries what explain reads back."""
        return {
            "name": name or self.gang_name(replica),
            "namespace": self.namespace,
            "labels": labels(self.spec, replica, "gang") | (extra_labels or {}),
            "annotations": self.group_annotations() | replica_annotations(self, replica),
        }

    def group_annotations(self) -> dict[str, str]:
        """What explain needs to read the manifests back without the spec file (on each replica's gang)."""
        return {
            SPEC_ANNOTATION: json.dumps(spec_record(self.spec), sort_keys=True, separators=(",", ":")),
            STATUS_ANNOTATION: json.dumps(status_record(self.placement.stats), sort_keys=True, separators=(",", ":")),
            CLUSTER_ANNOTATION: self.placement.cluster,
        }


# A cluster's shared objects (KAI Topology, Grove ClusterTopologyBinding, --topology-objects) are labelled as
# placer's topology, not as any deployment's: every deployment's stream then carries the same bytes, and
# applying one deployment does not change placer's labels on what the others use.
TOPOLOGY_LABELS = {
    "app.kubernetes.io/name": "placer-topology",
    "app.kubernetes.io/component": "topology",
    "app.kubernetes.io/managed-by": "placer",
}


def labels(spec: ServingTopology, replica: int, component: str) -> dict[str, str]:
    """A replica's object labels. ``placer.dev/deployment`` repeats the name: Grove overwrites app.kubernetes.io's
    name, component, part-of and managed-by on its pods (podclique.go), and read-back must still find them."""
    name = spec.metadata.name
    out = {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/instance": gang_name(name, replica),
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": name,
        "app.kubernetes.io/managed-by": "placer",
        "placer.dev/deployment": name,
        "placer.dev/replica": str(replica),
    }
    if component == "router":  # Services select the router by a key no operator rewrites
        out[ROUTER_ROLE] = "router"
    return out


def instance_labels(spec: ServingTopology, replica: int, inst: InstancePlacement) -> dict[str, str]:
    out = labels(spec, replica, spec.role_of(inst.pool))
    return out | {"placer.dev/pool": inst.pool, "placer.dev/instance": str(inst.index)}


def dns_label(value: str, what: str) -> str:
    """A generated name must be a DNS-1123 label; a spec name too long for it is the user's to shorten."""
    try:
        return k8s.check_dns_label(value, what)
    except ValueError as exc:
        raise NameTooLong(f"{exc} (shorten metadata.name or the pool name)") from None


def hostname(topo: Topology, node: str) -> str:
    return topo.node_by_name(node).labels.get(HOSTNAME, node)


def affinity(hostnames: list[str]) -> dict[str, Any]:
    """Required node affinity admitting exactly these hosts."""
    values = sorted(set(hostnames)) if len(hostnames) > 1 else list(hostnames)
    term = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": values}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def pod_name(spec: ServingTopology, replica: int, inst: InstancePlacement, pod_index: int) -> str:
    base = f"{spec.metadata.name}-r{replica}-{inst.pool}-{inst.index}"
    return base if len(inst.pods) == 1 else f"{base}-{pod_index}"


def _fmt_us(us: float) -> str:
    return f"{us:.1f}"


def gang_name(deployment: str, replica: int) -> str:
    """A replica's gang object name (PodGroup, PodCliqueSet, ...), which every member pod names too."""
    return f"{deployment}-r{replica}"


def pod_annotations(ctx: Context, replica: int, inst: InstancePlacement, pod: Pod | None) -> dict[str, str]:
    """GPU indices, the narrowest domain and the instance's predicted costs (``pod`` None: a template for
    several pods); the replica's figures are replica_annotations."""
    c = ctx.costs[(replica, inst.pool, inst.index)]
    gbps = c.bottleneck.bandwidth_gbps
    out = {
        "placer.dev/instance-gpus": ";".join(f"{p.node}:{','.join(map(str, p.gpus))}" for p in inst.pods),
        "placer.dev/domain": c.domain,
        "placer.dev/allreduce-us-per-forward-pass": _fmt_us(c.allreduce_us),
        "placer.dev/bottleneck-gbps": f"{gbps:g}" if gbps != float("inf") else "none",
    }
    if pod is not None:
        out["placer.dev/gpus"] = ",".join(map(str, pod.gpus))
    if ctx.nccl:
        settings = nccl.instance_settings(ctx.spec, ctx.topo, inst, ctx.exact_gpus)
        out["placer.dev/nccl"] = json.dumps({s.name: f"{s.value}: {s.reason}" for s in settings}, sort_keys=True)
        notes = nccl.runtime_notes(ctx.topo, inst, ctx.exact_gpus)
        out["placer.dev/runtime-notes"] = json.dumps(notes)
    return out


def replica_annotations(ctx: Context, replica: int) -> dict[str, str]:
    """Figures of the whole replica (its worst prefill -> decode KV transfer), for the gang object's and the
    controllers' own metadata, never a pod template: a scale-out that adds an instance can change the worst
    pair, and a changed template would restart every kept pod of the replica on `kubectl apply`."""
    kv = ctx.kv.get(replica)  # none where the checker stopped before costing (a broken placement)
    return {} if kv is None or kv.kv_path is None else {"placer.dev/kv-transfer-us": _fmt_us(kv.kv_us)}


def engine_container(
    ctx: Context,
    inst: InstancePlacement,
    gpus: int | None,
    rank: int | str | None,
    claims: list[str] | None = None,
    settings: list[nccl.Setting] | None = None,
    leader: str | None = None,
    dynamo_worker: bool = False,
) -> dict[str, Any]:
    """The serving engine: the pool's template, ``gpus`` whole GPUs (or DRA ``claims``), placer's env
    (``settings``: the NCCL values shared by several instances, when one template serves them all; ``rank``:
    the pod's rank, or a pod label its controller sets; ``leader``: the leader's DNS name); with an engine
    preset, placer's command and flags (``dynamo_worker``: as a Dynamo worker, ``--target dynamo``)."""
    t = ctx.spec.pools[inst.pool].template
    requests, limits = dict(t.resources.requests), dict(t.resources.limits)
    if gpus is not None:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(gpus)
    env = placer_env(inst, rank, leader)  # first: a user's env value may reference it as $(PLACER_POD_RANK)
    given, theirs = {e.name for e in t.env}, ctx.spec.nccl.env
    # The user's values win over the preset's (template.env over both), in the preset's place: a template
    # value after it may reference it as $(NAME), which Kubernetes expands only from earlier entries.
    preset = [e for e in engines.preset_env(ctx.spec, inst.pool) if e["name"] not in given]
    env += [{"name": e["name"], "value": theirs[e["name"]]} if e["name"] in theirs else e for e in preset]
    env += [e.manifest() for e in t.env]
    present = {e["name"] for e in env}  # one value per name: placer's own, the preset's and the template's first
    if ctx.nccl:
        chosen = nccl.instance_settings(ctx.spec, ctx.topo, inst, ctx.exact_gpus) if settings is None else settings
        env += [{"name": s.name, "value": s.value} for s in chosen if s.name not in present]
    else:  # placer chooses nothing, but what the spec sets (nccl.env) is the user's, like template.env
        env += [{"name": k, "value": v} for k, v in sorted(theirs.items()) if k not in present]
    resources: dict[str, Any] = {"requests": requests}
    if limits:
        resources["limits"] = limits
    if claims:
        resources["claims"] = [{"name": c} for c in claims]
    container: dict[str, Any] = {"name": "engine", "image": t.image, "env": env, "resources": resources}
    if t.env_from:
        container["envFrom"] = [x.manifest() for x in t.env_from]
    own_rank = rank if isinstance(rank, int) else None  # a label name: one template for several ranks
    engines.check_instance(ctx.spec, inst, dynamo_worker)
    preset = engines.engine_spec(ctx.spec, inst.pool, len(inst.pods), own_rank, dynamo_worker)
    if preset is not None:  # template.engine: placer's command, flags, port and probes (engines.py)
        if engines.dynamo_workers(ctx.spec, dynamo_worker):  # the command is Dynamo's worker: its image
            container["image"] = engines.worker_image(t.engine, t.image)
        return container | preset
    if t.command:
        container["command"] = list(t.command)
    if t.args:
        container["args"] = list(t.args)
    if t.ports:
        container["ports"] = [{"name": p.name, "containerPort": p.container_port} for p in t.ports]
    return container


def placer_env(inst: InstancePlacement, rank: int | str | None, leader: str | None) -> list[dict[str, Any]]:
    """The pod's rank in its instance (a number, or the pod label its controller writes it in), the
    instance's pod count and, for a multi-node instance, the leader's address: what engine flags reference."""
    env: list[dict[str, Any]] = []
    if isinstance(rank, int):
        env.append({"name": RANK_ENV, "value": str(rank)})
    elif rank is not None:
        env.append({"name": RANK_ENV, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{rank}']"}}})
    env.append({"name": PODS_ENV, "value": str(len(inst.pods))})
    if leader is not None and len(inst.pods) > 1:
        env.append({"name": LEADER_ENV, "value": leader})
    return env


def pod_spec(
    ctx: Context, container: dict[str, Any], hosts: list[str], scheduler: str | None, pool: str
) -> dict[str, Any]:
    """An engine pod's spec: the container of one of ``pool``'s instances, its /dev/shm, pinned to ``hosts``."""
    spec: dict[str, Any] = {"restartPolicy": "Always", "affinity": affinity(hosts), "containers": [container]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return with_shm(spec, container, ctx.spec.pools[pool].template.shm_size)


SHM_VOLUME = "dshm"


def with_shm(spec: dict[str, Any], container: dict[str, Any], size: str) -> dict[str, Any]:
    """A memory-backed /dev/shm of the pool's ``template.shmSize`` (none for "0"): the runtime's 64 MiB
    default is too small for vLLM's shared-memory broadcast and NCCL's SHM transport, and vLLM's Kubernetes
    guide mounts one. (Dynamo's operator mounts its own: the dynamo target sets sharedMemorySize instead.)"""
    if k8s.parse_quantity(size) <= 0:
        return spec
    container["volumeMounts"] = [*container.get("volumeMounts", []), {"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    volume = {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size}}
    spec["volumes"] = [*spec.get("volumes", []), volume]
    return spec


def engine_pod(
    ctx: Context,
    rep: ReplicaPlacement,
    inst: InstancePlacement,
    j: int,
    scheduler: str | None,
    extra_labels: dict[str, str] | None = None,
    extra_annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The pod of one (instance, node): exactly the node and GPU count placer chose. Targets put it under a
    controller (``stateful_set``); it is never printed bare."""
    pod = inst.pods[j]
    container = engine_container(ctx, inst, len(pod.gpus), j, leader=ctx.leader_host(rep.index, inst))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": engine_pod_metadata(ctx, rep, inst, j, extra_labels, extra_annotations),
        "spec": pod_spec(ctx, container, [hostname(ctx.topo, pod.node)], scheduler, inst.pool),
    }


def engine_pod_metadata(
    ctx: Context,
    rep: ReplicaPlacement,
    inst: InstancePlacement,
    j: int,
    extra_labels: dict[str, str] | None = None,
    extra_annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Name, namespace, labels and annotations of an engine pod: what read-back and explain rely on, the
    same for every target that prints bare pods."""
    return {
        "name": pod_name(ctx.spec, rep.index, inst, j),
        "namespace": ctx.namespace,
        "labels": instance_labels(ctx.spec, rep.index, inst) | (extra_labels or {}),
        "annotations": pod_annotations(ctx, rep.index, inst, inst.pods[j]) | (extra_annotations or {}),
    }


def leader_split(inst: InstancePlacement) -> tuple[int, list[int]] | None:
    """(leader, workers) pod indices such that every worker asks for the same GPU count (one template for
    the workers, as LeaderWorkerSet and Grove cliques need), or None when no choice of leader allows it."""
    counts = [len(p.gpus) for p in inst.pods]
    for leader in range(len(counts)):
        workers = [j for j in range(len(counts)) if j != leader]
        if len({counts[j] for j in workers}) <= 1:
            return leader, workers
    return None


def anti_affinity(ctx: Context, replica: int, inst: InstancePlacement) -> dict[str, Any]:
    """At most one pod of this instance per node: with N pods admitted to exactly N nodes, each gets one."""
    match = {
        "app.kubernetes.io/instance": ctx.gang_name(replica),
        "placer.dev/pool": inst.pool,
        "placer.dev/instance": str(inst.index),
    }
    term = {"labelSelector": {"matchLabels": match}, "topologyKey": HOSTNAME}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def pool_service_name(ctx: Context, replica: int, pool: str) -> str:
    """The headless Service in front of a pool's pods in one replica (DNS-1035, as Services need)."""
    return dns_label(f"{ctx.gang_name(replica)}-{pool}", "Service name")


def statefulset_leader_host(ctx: Context, replica: int, inst: InstancePlacement) -> str:
    """Leader DNS name when each placed pod is a StatefulSet of one (named as the pod it replaces) whose
    governing Service is the pool's headless Service: ``<statefulset>-0.<service>.<namespace>.svc``."""
    sts = pod_name(ctx.spec, replica, inst, 0)
    return f"{sts}-0.{pool_service_name(ctx, replica, inst.pool)}.{ctx.namespace}.svc"


def replica_pods(rep: ReplicaPlacement) -> int:
    return sum(len(i.pods) for i in rep.instances)
