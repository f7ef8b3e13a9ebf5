"""``placer solve --topology-objects``: the cluster-scoped objects that describe the cluster's topology to
the target's scheduler, for clusters that do not have them yet.

A scheduler's topology constraints name levels (KAI, Kueue: node label keys through a named Topology;
Volcano: HyperNode tiers). Those objects are the cluster's, not the deployment's, and usually exist
already (an administrator or topograph creates them); where they do not, every constraint placer prints
points at nothing. This module prints them from the cluster file, with the same label keys
(``Context.level_label``) and tiers (``volcano.tiers``) that the target's constraints use, so the two
always agree:

- ``kueue``: a ``Topology`` (levels broadest first, ``kubernetes.io/hostname`` last) and a
  ``ResourceFlavor`` naming it (``kueue.x-k8s.io/v1beta1``, served from Kueue v0.14.0 to main;
  ``--target-version 0.13`` gets Kueue v0.13's ``v1alpha1`` Topology). A flavor with a topology must select
  nodes by at least one label (the CRD's CEL rule): the label every node of the cluster file carries with
  one value, else GPU Feature Discovery's ``nvidia.com/gpu.present: "true"``.
- ``volcano``: one ``HyperNode`` (``topology.volcano.sh/v1alpha1``, Volcano 1.12 and later) per domain at
  each tiered level, its members the nodes (lowest tier) or the HyperNodes one tier down, by exact name.
- ``kai``: nothing more: the kai target prints its ``Topology`` already (unless ``scheduling.topology``
  names one that exists).
Other targets have no such object (they pin nodes, or Grove reads its own ClusterTopology): refused.
"""

from __future__ import annotations

import re
from typing import Any

from placer.emit.targets import TOPOLOGY_TARGETS, kai, volcano
from placer.emit.targets.common import HOSTNAME, Context
from placer.model.errors import InputError

KUEUE_API = "kueue.x-k8s.io/v1beta1"  # served from Kueue v0.14.0 to main (v1beta2 is main's storage version)
KUEUE_OLD_TOPOLOGY_API = "kueue.x-k8s.io/v1alpha1"  # Kueue v0.13's only Topology version
KUEUE_V1BETA1 = "0.14.0"
HYPERNODE_API = "topology.volcano.sh/v1alpha1"
GPU_PRESENT = ("nvidia.com/gpu.present", "true")  # set by GPU Feature Discovery on every GPU node
# The cluster's objects, shared by its deployments: labelled as placer's topology, not as any deployment's
# (a deployment's labels would change with each one applied, and its ApplySet would prune them)
LABELS = {
    "app.kubernetes.io/name": "placer-topology",
    "app.kubernetes.io/component": "topology",
    "app.kubernetes.io/managed-by": "placer",
}


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
    return []  # kai: its build() prints the Topology


def level_labels(ctx: Context) -> list[str]:
    """The cluster's level label keys, broadest first, each once, hostname last (KAI and Kueue agree)."""
    return [level["nodeLabel"] for level in kai.topology_doc(ctx)["spec"]["levels"]]


def kueue_objects(ctx: Context) -> list[dict[str, Any]]:
    name = kai.topology_name(ctx)
    labels = dict(LABELS)
    api = KUEUE_OLD_TOPOLOGY_API if ctx.version_below(KUEUE_V1BETA1) else KUEUE_API
    topology = {
        "apiVersion": api,
        "kind": "Topology",
        "metadata": {"name": name, "labels": labels},
        "spec": {"levels": [{"nodeLabel": key} for key in level_labels(ctx)]},
    }
    key, value = shared_node_label(ctx, set(level_labels(ctx)))
    flavor = {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeLabels": {key: value}, "topologyName": name},
    }
    return [topology, flavor]


def shared_node_label(ctx: Context, skip: set[str]) -> tuple[str, str]:
    """A label every node carries with the same value (not a level's), else GFD's GPU-present label."""
    nodes = ctx.topo.nodes
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
                "metadata": {"name": names[d.id], "labels": dict(LABELS)},
                "spec": {"tier": tiers[_level(d.level)], "members": members},
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
    """``placer-<level>-<name>`` as a DNS-1123 name; a clash after lowercasing gets a numbered suffix."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for d in domain_ids:
        base = "placer-" + re.sub(r"[^a-z0-9.-]+", "-", d.lower()).strip("-.")
        base = base[:240].rstrip("-.")
        name, n = base, 2
        while name in taken:
            name, n = f"{base}-{n}", n + 1
        taken.add(name)
        out[d] = name
    return out
