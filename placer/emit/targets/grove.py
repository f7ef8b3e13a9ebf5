"""Grove (``grove.io/v1alpha1``): one ``PodCliqueSet`` per placer replica.

Phase 1, roles: a ``router`` clique (one pod, pinned to the router's node) and one clique per pool for its
single-node instances (``replicas`` = those instances, admitted to exactly the nodes placer chose for them,
``minAvailable: 1``). Phase 2, multi-node instances: each is a ``PodCliqueScalingGroup`` (``replicas: 1``,
``minAvailable: 1``) over a leader clique pinned to its node and a worker clique admitted to the other chosen
nodes (hostname anti-affinity keeps one pod per node); where workers would need different GPU counts, each
pod gets its own pinned clique. Phase 3, the gang and its order: Grove gang-schedules the minimum of every
clique and scaling group, so a replica starts with at least one instance of each pool (and every multi-node
instance whole); with ``router.startFirst`` every engine clique ``startsAfter`` the router
(``CliqueStartupTypeExplicit``). Pack constraints: the PodCliqueSet packs at the level of the narrowest
domain holding the replica, each scaling group at its instance's level, in Grove's domain names (see
``GROVE_DOMAIN``). The router's ``Service`` selects the router clique's pods.

One PodCliqueSet per replica because Grove replicas share one template, and placer pins each replica to
its own nodes. ``schedulerName`` is left to Grove's operator unless the spec sets it.
"""

from __future__ import annotations

import json
from typing import Any

from placer.emit.targets.common import (
    Context,
    affinity,
    anti_affinity,
    dns_label,
    engine_container,
    hostname,
    instance_labels,
    labels,
    leader_split,
    pod_annotations,
    pod_spec,
)
from placer.emit.targets.nccl import instance_settings
from placer.emit.targets.router import router_container, router_service
from placer.model.placement import InstancePlacement, ReplicaPlacement

DESCRIPTION = "Grove PodCliqueSet per replica: cliques per role, scaling group per multi-node instance"
# placer level -> Grove topology domain (region > zone > datacenter > block > rack > host > numa). An NVLink
# domain packs at rack: looser where NVLink domains are smaller than racks; node affinity keeps the nodes.
GROVE_DOMAIN = {"socket": "numa", "node": "host", "nvlink-domain": "rack", "rack": "rack", "leaf": "block"}


def _pack(ctx: Context, domain_id: str) -> dict[str, str] | None:
    domain = GROVE_DOMAIN.get(ctx.level_of(domain_id))
    return None if domain is None or domain_id == ctx.topo.root else {"packDomain": domain}


def _clique(name: str, role: str, replicas: int, pod: dict, labels_: dict, annotations: dict) -> dict[str, Any]:
    return {
        "name": name,
        "labels": labels_,
        "annotations": annotations,
        "spec": {"roleName": role, "replicas": replicas, "minAvailable": 1, "podSpec": pod},
    }


def _engine(ctx: Context, rep: ReplicaPlacement, insts: list[InstancePlacement], pods: list[tuple[int, int]]) -> dict:
    """Pod spec for these (instance, pod) pairs: GPU count of the first, NCCL values all of them share."""
    first_inst, first_pod = insts[pods[0][0]], insts[pods[0][0]].pods[pods[0][1]]
    shared = None
    if ctx.nccl:
        per = [instance_settings(ctx.spec, ctx.topo, insts[i]) for i in sorted({i for i, _ in pods})]
        shared = [s for s in per[0] if all(s in other for other in per[1:])]
    container = engine_container(ctx, first_inst, len(first_pod.gpus), None, settings=shared)
    hosts = [hostname(ctx.topo, insts[i].pods[j].node) for i, j in pods]
    return pod_spec(ctx, container, hosts, ctx.scheduler(None))


def _instance_cliques(ctx: Context, rep: ReplicaPlacement, inst: InstancePlacement) -> list[dict[str, Any]]:
    role = ctx.spec.role_of(inst.pool)
    lab = instance_labels(ctx.spec, rep.index, inst)
    base = f"{inst.pool}-{inst.index}"
    split = leader_split(inst)
    groups = [("l", [split[0]]), ("w", split[1])] if split else [(f"p{j}", [j]) for j in range(len(inst.pods))]
    out = []
    for suffix, pods in groups:
        pod = _engine(ctx, rep, [inst], [(0, j) for j in pods])
        pod["affinity"] |= anti_affinity(ctx, rep.index, inst)
        notes = pod_annotations(ctx, rep.index, inst, inst.pods[pods[0]] if len(pods) == 1 else None)
        out.append(_clique(f"{base}-{suffix}", role, len(pods), pod, lab, notes))
    return out


def pod_clique_set(ctx: Context, rep: ReplicaPlacement) -> dict[str, Any]:
    name = dns_label(ctx.gang_name(rep.index), "PodCliqueSet name")
    cliques: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    has_router = ctx.spec.router is not None and rep.router is not None
    if has_router:
        assert rep.router is not None
        router_pod: dict[str, Any] = {
            "affinity": affinity([hostname(ctx.topo, rep.router)]),
            "containers": [router_container(ctx)],
        }
        sched = ctx.scheduler(None)
        if sched:
            router_pod["schedulerName"] = sched
        lab = labels(ctx.spec, rep.index, "router")
        cliques.append(_clique("router", "router", 1, router_pod, lab, {"placer.dev/node": rep.router}))
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
            pod = _engine(ctx, rep, single, [(k, 0) for k in range(len(single))])
            cliques.append(_clique(pool, ctx.spec.role_of(pool), len(single), pod, lab, notes))
        for inst in (i for i in members if len(i.pods) > 1):
            own = _instance_cliques(ctx, rep, inst)
            for clique in own:  # Grove names them <pcs>-<replica>-<group>-<index>-<clique>
                dns_label(f"{name}-0-{inst.pool}-{inst.index}-0-{clique['name']}", "PodClique name")
            cliques += own
            group: dict[str, Any] = {
                "name": f"{inst.pool}-{inst.index}",
                "cliqueNames": [c["name"] for c in own],
                "replicas": 1,
                "minAvailable": 1,
            }
            pack = _pack(ctx, ctx.instance_domain(rep.index, inst))
            if pack:
                group["topologyConstraint"] = pack
            groups.append(group)
    for clique in cliques:
        dns_label(f"{name}-0-{clique['name']}", "PodClique name")  # standalone: <pcs>-<replica>-<clique>
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
    docs: list[dict] = []
    for rep in ctx.placement.replicas:
        docs.append(pod_clique_set(ctx, rep))
        if ctx.spec.router is not None and rep.router is not None:
            docs.append(router_service(ctx, rep.index))
    return docs
