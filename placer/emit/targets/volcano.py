"""Volcano: a ``PodGroup`` (``scheduling.volcano.sh/v1beta1``) per replica with network-topology constraints.

Phase 1, the gang: ``minMember`` = the replica's pods, ``queue``, and ``networkTopology`` in hard mode
whose ``highestTierAllowed`` is the HyperNode tier of the narrowest domain holding the replica's nodes.
Phase 2, ``subGroupPolicy``: one policy per pool whose instances each need ``subGroupSize`` pods (pods are
grouped by ``placer.dev/instance`` through ``matchLabelKeys``; ``minSubGroups`` = the pool's instances),
in hard mode at the tier of the broadest instance; a pool whose instances differ in pod count gets one
policy per instance instead. Single-node instances need no tier (one pod sits on one node).
Versions: ``networkTopology`` on PodGroups exists from Volcano 1.12, ``subGroupPolicy`` from 1.14 (older
releases' strict field validation refuses it). ``--target-version 1.12`` or ``1.13`` leaves
``subGroupPolicy`` out (each TP group's tier is then held by node affinity only); before 1.12 is refused.
Phase 3, the pods: ``schedulerName: volcano``, the ``scheduling.k8s.io/group-name`` annotation, node
affinity to the chosen node.

Tiers: Volcano numbers HyperNode tiers from 1 at the switches nearest the nodes. placer numbers the levels
its cluster file has above the node, narrowest first (e.g. rack 1, leaf 2, spine 3);
``scheduling.volcanoTiers`` gives the cluster's real numbering when it differs. The whole cluster (the
spine, when it is the root) is left unconstrained.
"""

from __future__ import annotations

from typing import Any

from placer.emit.targets.common import Context, engine_pod, replica_pods
from placer.emit.targets.controllers import pool_services, stateful_set
from placer.emit.targets.router import router_docs
from placer.model.levels import LEVEL_RANK, LEVELS
from placer.model.placement import ReplicaPlacement

SCHEDULER = "volcano"
QUEUE = "default"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
OLDEST = "1.12.0"  # first release with networkTopology on PodGroups
REQUIRES = ("Volcano", OLDEST, "has no networkTopology on PodGroups")
SUBGROUPS = "1.14.0"  # first release with subGroupPolicy


def tiers(ctx: Context) -> dict[str, int]:
    """HyperNode tier per level above the node: the spec's, else numbered from this cluster's levels."""
    if ctx.spec.scheduling.volcano_tiers:
        return {str(k): v for k, v in ctx.spec.scheduling.volcano_tiers.items()}
    above = [lv for lv in ctx.levels_present if LEVEL_RANK[lv] > LEVEL_RANK["node"]]
    return {lv: i + 1 for i, lv in enumerate(above)}


def _network(ctx: Context, domain_id: str) -> dict[str, Any] | None:
    """Hard constraint to the tier of this domain; none for a node or the whole cluster."""
    level = ctx.level_of(domain_id)
    if domain_id == ctx.topo.root or level == "node":
        return None
    known = tiers(ctx)
    # A level the tier map leaves out is constrained at the next broader level it names (looser, still true).
    tier = next((known[lv] for lv in LEVELS[LEVEL_RANK[level] :] if lv in known), None)
    return None if tier is None else {"mode": "hard", "highestTierAllowed": tier}


def _policy(name: str, size: int, count: int, selector: dict[str, str], network: dict | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "subGroupSize": size,
        "minSubGroups": count,
        "labelSelector": {"matchLabels": selector},
        "matchLabelKeys": ["placer.dev/instance"],
    }
    if network:
        out["networkTopology"] = network
    return out


def _policies(ctx: Context, rep: ReplicaPlacement) -> list[dict[str, Any]]:
    out = []
    for pool in sorted({i.pool for i in rep.instances}):
        members = [i for i in rep.instances if i.pool == pool]
        selector = {"placer.dev/replica": str(rep.index), "placer.dev/pool": pool}
        domains = [ctx.instance_domain(rep.index, i) for i in members]
        if len({len(i.pods) for i in members}) == 1:
            widest = max(domains, key=lambda d: LEVEL_RANK[ctx.level_of(d)])
            out.append(_policy(pool, len(members[0].pods), len(members), selector, _network(ctx, widest)))
            continue
        for inst, dom in zip(members, domains, strict=True):
            sel = selector | {"placer.dev/instance": str(inst.index)}
            out.append(_policy(f"{pool}-{inst.index}", len(inst.pods), 1, sel, _network(ctx, dom)))
    return out


def pod_group(ctx: Context, rep: ReplicaPlacement) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": replica_pods(rep), "queue": ctx.queue(QUEUE)}
    if not ctx.version_below(SUBGROUPS):
        spec["subGroupPolicy"] = _policies(ctx, rep)
    network = _network(ctx, ctx.replica_domain(rep))
    if network:
        spec["networkTopology"] = network
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": ctx.gang_metadata(rep.index),
        "spec": spec,
    }


def build(ctx: Context) -> list[dict]:
    ctx.require_version(*REQUIRES)
    docs: list[dict] = []
    scheduler = ctx.scheduler(SCHEDULER)
    for rep in ctx.placement.replicas:
        group = ctx.gang_name(rep.index)
        docs.append(pod_group(ctx, rep))
        for inst in rep.instances:
            for j in range(len(inst.pods)):
                pod = engine_pod(ctx, rep, inst, j, scheduler, None, {GROUP_ANNOTATION: group})
                docs.append(stateful_set(ctx, rep, inst, j, pod))
        docs += pool_services(ctx, rep)
        docs += router_docs(ctx, rep)
    return docs
