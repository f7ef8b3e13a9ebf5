"""``placer solve --topology-objects``: the cluster-scoped objects that describe the cluster's topology to
the target's scheduler, for clusters that do not have them yet.

A scheduler's topology constraints name levels (KAI, Kueue: node label keys through a named Topology;
Volcano: HyperNode tiers). Those objects are the cluster's, not the deployment's, and usually exist
already (an administrator or topograph creates them); where they do not, every constraint placer prints
points at nothing. This module prints them from the cluster file, with the same label keys
(``Context.level_label``) and tiers (``volcano.tiers``) that the target's constraints use, so the two
always agree:

- ``kueue``: a ``Topology`` (levels broadest first, ``kubernetes.io/hostname`` last) and a
  ``ResourceFlavor`` naming it, as ``kueue.x-k8s.io/v1beta2`` (served from Kueue v0.15.0; v1beta1 is
  deprecated from v0.16.0), ``v1beta1`` for ``--target-version 0.14``, and for 0.13 a ``v1alpha1``
  Topology (its only version) with a ``v1beta1`` flavor. A flavor with a topology must select nodes by at
  least one label (the CRD's CEL rule): the label every GPU node of the cluster file carries with one
  value, else GPU Feature Discovery's ``nvidia.com/gpu.present: "true"``.
- ``volcano``: one ``HyperNode`` (``topology.volcano.sh/v1alpha1``, Volcano 1.12 and later) per domain at
  each tiered level, its members the nodes (lowest tier) or the HyperNodes one tier down, by exact name
  (Volcano's webhook wants each a qualified name: at most 63 characters), with ``tierName`` = placer's level
  from Volcano 1.14.
- ``kai`` and ``grove``: the ``Topology`` / ``ClusterTopologyBinding`` their output already carries (unless
  ``scheduling.topology`` names one that exists), here too under that name: ``--topology-objects FILE``
  moves it from the stream into FILE (cluster-scoped objects kept apart, as GitOps repositories do), ``-``
  prints it once.
Other targets have no such object (they pin nodes): refused.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from placer.emit.targets import TOPOLOGY_TARGETS, grove, kai, volcano
from placer.emit.targets.common import HOSTNAME, TOPOLOGY_LABELS, Context
from placer.model.errors import InputError

# Kueue release -> (Topology, ResourceFlavor) API, newest first: v1beta2 from v0.15.0 (v1beta1 deprecated
# from v0.16.0), v1beta1 only in v0.14, and in v0.13 Topology v1alpha1 beside ResourceFlavor v1beta1
KUEUE_APIS = (
    ("0.15.0", "kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta2"),
    ("0.14.0", "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta1"),
    ("0.13.0", "kueue.x-k8s.io/v1alpha1", "kueue.x-k8s.io/v1beta1"),
)
HYPERNODE_API = "topology.volcano.sh/v1alpha1"
TIER_NAME = "1.14.0"  # HyperNode spec.tierName exists from Volcano 1.14.0
NAME_MAX = 63  # Volcano's webhook checks each member's exactMatch name as a qualified name
GPU_PRESENT = ("nvidia.com/gpu.present", "true")  # set by GPU Feature Discovery on every GPU node


def topology_objects(ctx: Context, target: str) -> list[dict[str, Any]]:
    """The topology objects ``target``'s constraints refer to, built from the cluster file."""
    if target not in TOPOLOGY_TARGETS:
        raise InputError(
            f"--topology-objects: the {target} target refers to no topology object (choose one of "
            f"{', '.join(TOPOLOGY_TARGETS)})"
        )
    if target == "kueue":
        return kueue_objects(ctx)
    if target == "volcano":
        return hypernodes(ctx)
    if target == "grove":
        return [grove.binding_doc(ctx)]
    return [kai.topology_doc(ctx)]


def level_labels(ctx: Context) -> list[str]:
    """The cluster's level label keys, broadest first, each once, hostname last (KAI and Kueue agree)."""
    return [level["nodeLabel"] for level in kai.topology_doc(ctx)["spec"]["levels"]]


def kueue_objects(ctx: Context) -> list[dict[str, Any]]:
    name = kai.topology_name(ctx)
    labels = dict(TOPOLOGY_LABELS)
    _, topology_api, flavor_api = next(
        (row for row in KUEUE_APIS if not ctx.version_below(row[0])), KUEUE_APIS[-1]
    )  # older than 0.13 is refused by the kueue target itself
    topology = {
        "apiVersion": topology_api,
        "kind": "Topology",
        "metadata": {"name": name, "labels": labels},
        "spec": {"levels": [{"nodeLabel": key} for key in level_labels(ctx)]},
    }
    key, value = shared_node_label(ctx, set(level_labels(ctx)))
    flavor = {
        "apiVersion": flavor_api,
        "kind": "ResourceFlavor",
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeLabels": {key: value}, "topologyName": name},
    }
    return [topology, flavor]


def shared_node_label(ctx: Context, skip: set[str]) -> tuple[str, str]:
    """A label every GPU node carries with the same value (not a level's), else GFD's GPU-present label."""
    nodes = [n for n in ctx.topo.nodes if n.gpus]
    if nodes:
        common = set(nodes[0].labels.items())
        for node in nodes[1:]:
            common &= set(node.labels.items())
        usable = sorted((k, v) for k, v in common if k not in skip and k != HOSTNAME)
        if usable:
            return usable[0]
    return GPU_PRESENT


def hypernodes(ctx: Context) -> list[dict[str, Any]]:
    """One HyperNode per domain at a tiered level; members by exact name, children before parents."""
    tiers = volcano.tiers(ctx)
    topo = ctx.topo
    node_name = {topo.node_domain[n.index]: n.name for n in topo.nodes}
    too_long = sorted(n for n in node_name.values() if len(n) > NAME_MAX)
    if too_long:
        raise InputError(
            f"--topology-objects: node {too_long[0]!r} has a name of {len(too_long[0])} characters; Volcano's "
            f"HyperNode webhook accepts member names of at most {NAME_MAX} (create those HyperNodes with a "
            "regexMatch or labelMatch selector yourself)"
        )
    tiered = [d for d in topo.domains.values() if _level(d.level) in tiers]
    tiered.sort(key=lambda d: (tiers[_level(d.level)], topo.order[d.id]))
    names = _names([d.id for d in tiered])
    out = []
    for d in tiered:
        members = [
            {"type": kind, "selector": {"exactMatch": {"name": names.get(m, node_name.get(m, m))}}}
            for kind, m in _members(topo, d.id, tiers, node_name)
        ]
        out.append(
            {
                "apiVersion": HYPERNODE_API,
                "kind": "HyperNode",
                "metadata": {"name": names[d.id], "labels": dict(TOPOLOGY_LABELS)},
                "spec": {"tier": tiers[_level(d.level)], "members": members}
                | ({} if ctx.version_below(TIER_NAME) else {"tierName": _level(d.level)}),
            }
        )
    return out


def _level(level: str) -> str:
    return "node" if level == "socket" else level


def _members(topo, domain_id: str, tiers: dict[str, int], node_name: dict[str, str]) -> list[tuple[str, str]]:
    """The nearest tiered domains (``HyperNode``) or nodes (``Node``) below a domain, in domain order."""
    out: list[tuple[str, str]] = []
    for child in topo.domains[domain_id].children:
        level = _level(topo.domains[child].level)
        if level in tiers:
            out.append(("HyperNode", child))
        elif child in node_name:
            out.append(("Node", child))
        elif level != "node":  # an untiered level in between: look through it
            out += _members(topo, child, tiers, node_name)
    return out


def _names(domain_ids: list[str]) -> dict[str, str]:
    """``placer-<level>-<name>``: lowercase letters, digits and single dashes, at most 63 characters (a
    longer or clashing one ends in a short hash of the domain id, so names stay stable run to run)."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for d in domain_ids:
        name = "placer-" + re.sub(r"[^a-z0-9]+", "-", d.lower()).strip("-")
        if len(name) > NAME_MAX or name in taken:
            digest = hashlib.sha256(d.encode()).hexdigest()[:8]
            name = f"{name[: NAME_MAX - 9].rstrip('-')}-{digest}"
        taken.add(name)
        out[d] = name
    return out
