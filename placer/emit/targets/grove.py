"""Grove (``grove.io/v1alpha1``): one ``PodCliqueSet`` per placer replica.

Phase 1, roles: a ``router`` clique (one pod, pinned to the router's node) and one clique per pool for its
single-node instances (``replicas`` = those instances, admitted to exactly the nodes placer chose for them,
``minAvailable: 1``). Phase 2, multi-node instances: each is a ``PodCliqueScalingGroup`` (``replicas: 1``,
``minAvailable: 1``) over one clique per pod, each pinned to its node and told its rank (``PLACER_POD_RANK``)
and its leader's DNS name (``PLACER_LEADER_ADDRESS``: Grove's stable pod hostname, ``grove_leader_host``).
Grove's controllers recreate a deleted pod with the same hostname, node affinity and GPU count.
Phase 3, the gang and its order: Grove gang-schedules the minimum of every clique and scaling group, so a
replica starts with at least one instance of each pool (and every multi-node instance whole); with
``router.startFirst`` every engine clique ``startsAfter`` the router (``CliqueStartupTypeExplicit``). Every
clique's ``roleName`` is its own name (Grove's webhook wants them unique). Phase 4, packing (Grove
v0.1.0-alpha.10 and later, topology-aware scheduling enabled in Grove's OperatorConfiguration, else its
webhook refuses every constraint): the PodCliqueSet requires (``pack.required``) the domain of the narrowest
level holding the replica, each scaling group its instance's level. Domains are named in a
``ClusterTopologyBinding`` (``placer-<cluster>``, cluster-scoped) whose levels are this cluster's levels
with the node labels that carry them (``Context.level_label``), broadest first; every constraint names it in
``topologyName``. ``scheduling.topology`` names an existing binding instead, whose domains must then be
called as in ``GROVE_DOMAIN``. The router's ``Service`` selects the router clique's pods.

Grove names pods ``<PodCliqueSet>-<i>-[<scaling group>-<j>-]<clique>-<random>`` and allows the three
names 45 characters together; a spec whose names exceed that is refused (bad input, exit 2).

One PodCliqueSet per replica because Grove replicas share one template, and placer pins each replica to
its own nodes. ``schedulerName`` is left to Grove's operator unless the spec sets it.
"""

from __future__ import annotations

import json
from typing import Any

from placer.emit.targets.common import (
    RANK_LABEL,
    TOPOLOGY_LABELS,
    Context,
    dns_label,
    engine_container,
    hostname,
    instance_labels,
    labels,
    pod_annotations,
    pod_spec,
)
from placer.emit.targets.controllers import pool_services
from placer.emit.targets.nccl import instance_settings
from placer.emit.targets.router import router_pod, router_service
from placer.model.errors import NameTooLong
from placer.model.placement import InstancePlacement, ReplicaPlacement

# placer level -> domain name in the ClusterTopologyBinding (Grove's own names where it has one: block, rack,
# host). A socket packs at its host: no node label names a NUMA node.
GROVE_DOMAIN = {"socket": "host", "node": "host", "nvlink-domain": "nvlink-domain", "rack": "rack", "leaf": "block"}
OLDEST = "v0.1.0-alpha.10"  # first release with pack.required (packDomain is refused on create since)
REQUIRES = ("Grove", OLDEST, "has no pack.required (and refuses packDomain on new workloads since)")
MAX_POD_NAME_PARTS = 45  # Grove's webhook: PodCliqueSet + scaling group + clique name lengths


def binding_name(ctx: Context) -> str:
    return ctx.spec.scheduling.topology or f"placer-{ctx.placement.cluster}"


def _levels(ctx: Context) -> list[tuple[str, str]]:
    """(domain, node label) broadest first, host last; a level carried by the same label as a broader one
    (a GB200 rack that is its NVLink domain) is that level (Grove wants each label once)."""
    out: dict[str, str] = {}
    for level in reversed(ctx.levels_present):
        key = ctx.level_label(level)
        if key is not None and key not in out.values():
            out[GROVE_DOMAIN[level]] = key
    return list(out.items())


def _domain(ctx: Context, level: str) -> str | None:
    """The binding's domain for a placer level (the broader level's, when both share one label)."""
    key = ctx.level_label(level)
    return next((d for d, k in _levels(ctx) if k == key), None) if key else None


def binding_doc(ctx: Context) -> dict[str, Any]:
    return {
        "apiVersion": "grove.io/v1alpha1",
        "kind": "ClusterTopologyBinding",
        "metadata": {"name": binding_name(ctx), "labels": dict(TOPOLOGY_LABELS)},
        "spec": {"levels": [{"domain": d, "key": k} for d, k in _levels(ctx)]},
    }


def _name_budget(pcs: str, group: str, clique: str) -> None:
    total = len(pcs) + len(group) + len(clique)
    if total > MAX_POD_NAME_PARTS:
        parts = " + ".join(f"{n!r} ({len(n)})" for n in (pcs, group, clique) if n)
        raise NameTooLong(
            f"--target grove: Grove names pods after the PodCliqueSet, scaling group and clique, and allows "
            f"{MAX_POD_NAME_PARTS} characters for them together; {parts} = {total} (shorten metadata.name or the "
            "pool name)"
        )


def _pack(ctx: Context, domain_id: str) -> dict[str, Any] | None:
    domain = _domain(ctx, ctx.level_of(domain_id))
    if domain is None or domain_id == ctx.topo.root:
        return None
    return {"topologyName": binding_name(ctx), "pack": {"required": domain}}


def _clique(name: str, replicas: int, pod: dict, labels_: dict, annotations: dict) -> dict[str, Any]:
    """A clique; its roleName is its name, since Grove wants roleNames unique within a PodCliqueSet."""
    return {
        "name": name,
        "labels": labels_,
        "annotations": annotations,
        "spec": {"roleName": name, "replicas": replicas, "minAvailable": 1, "podSpec": pod},
    }


def _engine(
    ctx: Context,
    rep: ReplicaPlacement,
    insts: list[InstancePlacement],
    pods: list[tuple[int, int]],
    rank: int | None = None,
) -> dict:
    """Pod spec for these (instance, pod) pairs: GPU count of the first, NCCL values all of them share;
    ``rank``: the pods' rank in their instance, when they share one."""
    first_inst, first_pod = insts[pods[0][0]], insts[pods[0][0]].pods[pods[0][1]]
    shared = _shared(ctx, [insts[i] for i in sorted({i for i, _ in pods})])
    leader = grove_leader_host(ctx, rep.index, first_inst) if len(first_inst.pods) > 1 else None
    container = engine_container(ctx, first_inst, len(first_pod.gpus), rank, settings=shared, leader=leader)
    hosts = [hostname(ctx.topo, insts[i].pods[j].node) for i, j in pods]
    return pod_spec(ctx, container, hosts, ctx.scheduler(None), first_inst.pool)


def _shared(ctx: Context, insts: list[InstancePlacement]) -> list | None:
    """The NCCL values every one of these instances gets (one template serves them all); None without NCCL."""
    if not ctx.nccl:
        return None
    per = [instance_settings(ctx.spec, ctx.topo, inst, ctx.exact_gpus) for inst in insts]
    return [s for s in per[0] if all(s in other for other in per[1:])]


def _pod_clique_name(inst: InstancePlacement, j: int) -> str:
    return f"{inst.pool}-{inst.index}-p{j}"


def _frozen(pcs: dict[str, Any]) -> dict[str, Any]:
    """What Grove's update webhook refuses to change in a PodCliqueSet (Grove's
    operator/internal/webhook/admission/pcs/validation/podcliqueset.go: clique and scaling-group composition,
    a clique's roleName, minAvailable, startsAfter and schedulerName, a group's cliqueNames and minAvailable,
    the startup type, and every topology constraint)."""
    t = pcs["spec"]["template"]
    groups = t.get("podCliqueScalingGroups", [])
    return {
        "cliques": sorted(c["name"] for c in t["cliques"]),
        "scaling groups": sorted(g["name"] for g in groups),
        "clique settings": {
            c["name"]: [c["spec"].get(k) for k in ("roleName", "minAvailable", "startsAfter")]
            + [c["spec"]["podSpec"].get("schedulerName")]
            for c in t["cliques"]
        },
        "scaling-group settings": {
            g["name"]: [g["cliqueNames"], g.get("minAvailable"), g.get("topologyConstraint")] for g in groups
        },
        "startup order": t.get("cliqueStartupType"),
        "topology constraint": t.get("topologyConstraint"),
    }


def _differs(a: Any, b: Any) -> bool:
    """Settings per clique or group differ where both have it (a new or dropped one is a composition change)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return any(a[k] != b[k] for k in a.keys() & b.keys())
    return a != b


def refused_updates(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[str]:
    """Each PodCliqueSet of ``after`` that exists in ``before`` with a field Grove's webhook holds immutable
    changed: one sentence each, with what to do, so that it is said before ``kubectl apply`` is refused."""
    old = {
        (d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in before if d.get("kind") == "PodCliqueSet"
    }
    out = []
    for doc in after:
        key = (doc["metadata"].get("namespace"), doc["metadata"]["name"]) if doc.get("kind") == "PodCliqueSet" else None
        if key not in old:
            continue
        a, b = _frozen(old[key]), _frozen(doc)
        changed = [k for k in a if _differs(a[k], b[k])]
        if changed:
            name = key[1]
            out.append(
                f"PodCliqueSet {name} changes its {', '.join(changed)}, which Grove's webhook does not allow on "
                f"an update: `kubectl delete podcliqueset {name}` first (the replica restarts), or use a target "
                "with objects per instance (coscheduling, kai, volcano, kueue, lws)"
            )
    return out


def grove_leader_host(ctx: Context, replica: int, inst: InstancePlacement) -> str:
    """Grove gives pod k of PodClique C the hostname ``C-k`` under the headless Service of its PodCliqueSet
    replica, ``<pcs>-0`` (grove operator/internal/controller/podclique/components/pod/pod.go; names from
    operator/api/common/namegen.go). A multi-node instance's leader is pod 0 of its first clique, inside its
    scaling group (``<pcs>-0-<group>-0-<clique>``); single-node instances are the pods of their pool's clique,
    the k-th for the k-th instance (which one is which does not matter to the router)."""
    pcs = ctx.gang_name(replica)
    if len(inst.pods) > 1:
        group = f"{inst.pool}-{inst.index}"
        clique = f"{pcs}-0-{group}-0-{_pod_clique_name(inst, 0)}"
    else:
        rep = next(r for r in ctx.placement.replicas if r.index == replica)
        single = [i.index for i in rep.instances if i.pool == inst.pool and len(i.pods) == 1]
        clique = f"{pcs}-0-{inst.pool}"
        return f"{clique}-{single.index(inst.index)}.{pcs}-0.{ctx.namespace}.svc"
    return f"{clique}-0.{pcs}-0.{ctx.namespace}.svc"


def _instance_cliques(ctx: Context, rep: ReplicaPlacement, inst: InstancePlacement) -> list[dict[str, Any]]:
    """A clique per pod of a multi-node instance: each pinned to its node, with its own rank (one template
    for several workers could not give each its rank, nor pin each to its node)."""
    lab = instance_labels(ctx.spec, rep.index, inst)
    out = []
    for j, placed in enumerate(inst.pods):
        pod = _engine(ctx, rep, [inst], [(0, j)], rank=j)
        notes = pod_annotations(ctx, rep.index, inst, placed)
        out.append(_clique(_pod_clique_name(inst, j), 1, pod, lab | {RANK_LABEL: str(j)}, notes))
    return out


def pod_clique_set(ctx: Context, rep: ReplicaPlacement) -> dict[str, Any]:
    name = dns_label(ctx.gang_name(rep.index), "PodCliqueSet name")
    cliques: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    has_router = ctx.spec.router is not None and rep.router is not None
    if has_router:
        assert rep.router is not None
        pod = router_pod(ctx, rep)
        sched = ctx.scheduler(None)
        if sched:
            pod["schedulerName"] = sched
        lab = labels(ctx.spec, rep.index, "router")
        cliques.append(_clique("router", 1, pod, lab, {"placer.dev/node": rep.router}))
    for pool in sorted({i.pool for i in rep.instances}):
        members = [i for i in rep.instances if i.pool == pool]
        single = [i for i in members if len(i.pods) == 1]
        if single:
            lab = labels(ctx.spec, rep.index, ctx.spec.role_of(pool)) | {"placer.dev/pool": pool}
            placed = {str(i.index): f"{i.pods[0].node}:{','.join(map(str, i.pods[0].gpus))}" for i in single}
            domains = {str(i.index): ctx.instance_domain(rep.index, i) for i in single}
            notes = {
                "placer.dev/instances": json.dumps(placed, sort_keys=True),
                "placer.dev/domains": json.dumps(domains, sort_keys=True),
            }
            shared = _shared(ctx, single)
            if shared is not None:  # what runs says it carries placer's NCCL values (readback, autoscale)
                notes["placer.dev/nccl"] = json.dumps(
                    {x.name: f"{x.value}: {x.reason}" for x in shared}, sort_keys=True
                )
            pod = _engine(ctx, rep, single, [(k, 0) for k in range(len(single))], rank=0)
            cliques.append(_clique(pool, len(single), pod, lab, notes))
        for inst in (i for i in members if len(i.pods) > 1):
            own = _instance_cliques(ctx, rep, inst)
            group_name = f"{inst.pool}-{inst.index}"
            for clique in own:
                _name_budget(name, group_name, clique["name"])
            cliques += own
            group: dict[str, Any] = {
                "name": group_name,
                "cliqueNames": [c["name"] for c in own],
                "replicas": 1,
                "minAvailable": 1,
            }
            pack = _pack(ctx, ctx.instance_domain(rep.index, inst))
            if pack:
                group["topologyConstraint"] = pack
            groups.append(group)
    grouped = {n for g in groups for n in g["cliqueNames"]}
    for clique in cliques:
        if clique["name"] not in grouped:
            _name_budget(name, "", clique["name"])
    template: dict[str, Any] = {"cliques": cliques}
    if groups:
        template["podCliqueScalingGroups"] = groups
    if has_router and ctx.spec.router and ctx.spec.router.start_first:
        template["cliqueStartupType"] = "CliqueStartupTypeExplicit"
        for clique in cliques[1:]:
            clique["spec"]["startsAfter"] = ["router"]
    pack = _pack(ctx, ctx.replica_domain(rep))
    if pack:
        template["topologyConstraint"] = pack
    return {
        "apiVersion": "grove.io/v1alpha1",
        "kind": "PodCliqueSet",
        "metadata": ctx.gang_metadata(rep.index, name=name),
        "spec": {"replicas": 1, "template": template},
    }


def build(ctx: Context) -> list[dict]:
    ctx.require_version(*REQUIRES)
    ctx.hosts = grove_leader_host
    docs: list[dict] = [] if ctx.spec.scheduling.topology else [binding_doc(ctx)]
    for rep in ctx.placement.replicas:
        docs.append(pod_clique_set(ctx, rep))
        docs += pool_services(ctx, rep)
        if ctx.spec.router is not None and rep.router is not None:
            docs.append(router_service(ctx, rep.index))
    return docs
