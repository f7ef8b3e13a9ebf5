"""``kubectl get nodes -o json`` -> :class:`K8sNode` records, and topology labels -> placer levels.

Accepted shapes: a ``List``/``NodeList`` (what kubectl prints), a single ``Node``, and the per-node label
dump of the aws-ofi-nccl topology guide (``{"Nodes": [{"Name", "InstanceId", "Topology": {labels}}]}``).

A node's GPUs are ``status.capacity["nvidia.com/gpu"]``; capacity minus allocatable GPUs are unavailable
(the device plugin marks unhealthy GPUs that way) and become busy. GPU Feature Discovery labels give the
product (``nvidia.com/gpu.product``), memory in MiB (``nvidia.com/gpu.memory``), the compute capability
and the multi-node NVLink domain (``nvidia.com/gpu.clique``).

Racks, leaves and NVLink domains come from topology labels. Keys differ by provider and by generation of
NVIDIA topograph, so a *label scheme* maps each placer level to an ordered list of keys (first present
wins); presets cover the schemes in use and ``--level-label LEVEL=KEY`` overrides any level. Tiers placer
has no level for (spine, core, datacenter: placer models one spine; sub-domains inside an NVLink domain) are
kept as labels and reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from placer.importers.common import (
    Note,
    check_node_count,
    error,
    found_kind,
    got,
    is_label_key,
    is_label_value,
    is_node_name,
    load_json,
    short,
)
from placer.model import k8s

GPU_RESOURCE = "nvidia.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
PRODUCT = "nvidia.com/gpu.product"
MEMORY_MIB = "nvidia.com/gpu.memory"
LEVEL_NAMES = ("nvlink-domain", "rack", "leaf")

# Presets: level -> label keys, first present wins. "unmapped" keys are topology tiers placer has no level
# for; they are kept on the node and reported when they split the cluster.
ZONE = "topology.kubernetes.io/zone"  # coarse: an availability zone holds many network leaves
PRESETS: dict[str, dict[str, tuple[str, ...]]] = {
    "topograph-v5": {  # accelerator.topograph.run / fabric.topograph.run (topograph v1.0.0 and later)
        "nvlink-domain": ("accelerator.topograph.run/domain",),
        "leaf": ("fabric.topograph.run/tier-0",),
        "unmapped": (
            "accelerator.topograph.run/sub-domain",
            "fabric.topograph.run/tier-1",
            "fabric.topograph.run/tier-2",
        ),
    },
    "topograph-v4": {  # xclr.topology.nvidia.com + network.topology.nvidia.com/tier-N
        "nvlink-domain": ("xclr.topology.nvidia.com/domain",),
        "leaf": ("network.topology.nvidia.com/tier-0",),
        "unmapped": (
            "xclr.topology.nvidia.com/sub-domain",
            "network.topology.nvidia.com/tier-1",
            "network.topology.nvidia.com/tier-2",
        ),
    },
    "topograph-v3": {  # network.topology.nvidia.com/{accelerator,leaf,spine,core} (v0.3.0-v0.5.0)
        "nvlink-domain": ("network.topology.nvidia.com/accelerator",),
        "leaf": ("network.topology.nvidia.com/leaf",),
        "unmapped": ("network.topology.nvidia.com/spine", "network.topology.nvidia.com/core"),
    },
    "topograph-v2": {  # network.topology.nvidia.com/{accelerator,block,spine,datacenter} (v0.1.0)
        "nvlink-domain": ("network.topology.nvidia.com/accelerator",),
        "leaf": ("network.topology.nvidia.com/block",),
        "unmapped": ("network.topology.nvidia.com/spine", "network.topology.nvidia.com/datacenter"),
    },
    "topograph-v1": {  # network.topology.kubernetes.io/* (before March 2025)
        "nvlink-domain": ("network.topology.kubernetes.io/accelerator",),
        "leaf": ("network.topology.kubernetes.io/block",),
        "unmapped": ("network.topology.kubernetes.io/spine", "network.topology.kubernetes.io/datacenter"),
    },
    "aws": {  # EKS: layer 1 is the top of the network, the highest layer the node's own switch
        "leaf": (
            "topology.k8s.aws/network-node-layer-4",
            "topology.k8s.aws/network-node-layer-3",
        ),
        "unmapped": (
            "topology.k8s.aws/network-node-layer-2",
            "topology.k8s.aws/network-node-layer-1",
        ),
    },
    "gke": {  # a sub-block is a rack behind one ToR (on A4X the NVL72 rack); a block one fast network
        "rack": ("cloud.google.com/gce-topology-subblock",),
        "leaf": ("cloud.google.com/gce-topology-block",),
        "unmapped": ("cloud.google.com/gce-topology-host",),
    },
    "zone": {"leaf": (ZONE,)},
}
ALWAYS = {"nvlink-domain": (CLIQUE,)}  # GFD's clique is an NVLink domain under every scheme
AUTO_ORDER = ("topograph-v5", "topograph-v4", "topograph-v3", "topograph-v2", "topograph-v1", "aws", "gke")
KEEP_LABELS = (
    "kubernetes.io/hostname",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    PRODUCT,
    CLIQUE,
)


@dataclass(frozen=True)
class LabelScheme:
    """Per placer level, the label keys that name its domain, first present wins."""

    name: str
    levels: dict[str, tuple[str, ...]]
    unmapped: tuple[str, ...] = ()

    def keys(self) -> set[str]:
        return {k for keys in self.levels.values() for k in keys} | set(self.unmapped)


def label_scheme(preset: str = "auto", overrides: Mapping[str, list[str]] | None = None) -> LabelScheme:
    """The scheme for a preset name (``auto`` tries every network preset, newest first, and the zone only
    for nodes that have nothing finer), with ``--level-label`` overrides (an empty key turns a level off)."""
    if preset == "auto":
        chosen = [PRESETS[p] for p in AUTO_ORDER] + [PRESETS["zone"]]
    elif preset == "none":
        chosen = []
    elif preset in PRESETS:
        chosen = [PRESETS[preset]]
    else:
        names = ", ".join(["auto", "none", *PRESETS])
        raise ValueError(f"unknown label preset {preset!r}; choose one of {names}")
    levels: dict[str, list[str]] = {level: list(ALWAYS.get(level, ())) for level in LEVEL_NAMES}
    unmapped: list[str] = []
    for p in chosen:
        for level, keys in p.items():
            target = unmapped if level == "unmapped" else levels[level]
            target.extend(k for k in keys if k not in target)
    for level, wanted in (overrides or {}).items():
        if level not in LEVEL_NAMES:
            raise ValueError(f"--level-label {level}=...: level must be one of {', '.join(LEVEL_NAMES)}")
        levels[level] = [k for k in wanted if k]
    return LabelScheme(preset, {k: tuple(v) for k, v in levels.items()}, tuple(unmapped))


@dataclass(frozen=True)
class K8sNode:
    name: str
    labels: dict[str, str]
    gpu_capacity: int | None = None
    gpu_allocatable: int | None = None
    cpu: str | None = None  # allocatable
    memory: str | None = None  # allocatable
    schedulable: bool = True
    why_unschedulable: str | None = None
    taints: tuple[str, ...] = ()
    provider_id: str | None = None
    instance_id: str | None = None

    @property
    def product(self) -> str | None:
        return self.labels.get(PRODUCT)

    @property
    def memory_gib(self) -> float | None:
        """GFD's ``nvidia.com/gpu.memory`` (MiB) in GiB, to 0.01 (an H100 80GB reports 81559 MiB = 79.65)."""
        mib = self.labels.get(MEMORY_MIB, "")
        return round(int(mib) / 1024, 2) if mib.isdigit() and 0 < int(mib) < 10**8 else None

    @property
    def sm(self) -> int | None:
        major = self.labels.get("nvidia.com/gpu.compute.major", "")
        minor = self.labels.get("nvidia.com/gpu.compute.minor", "")
        return int(major) * 10 + int(minor) if major.isdigit() and minor.isdigit() and len(major + minor) < 5 else None


@dataclass(frozen=True)
class NodesFile:
    source: str
    shape: str  # "List", "Node" or "label dump"
    nodes: tuple[K8sNode, ...]
    notes: tuple[Note, ...] = field(default=())


def parse_nodes(text: str, source: str) -> NodesFile:
    """Parse ``kubectl get nodes -o json`` output (or one Node, or the aws-ofi-nccl label dump)."""
    if text.lstrip().startswith(("apiVersion:", "kind:", "items:")):
        raise error(source, 1, "this looks like YAML; run kubectl get nodes -o json")
    data = load_json(text, source)
    notes: list[Note] = []
    if isinstance(data, dict) and isinstance(data.get("Nodes"), list) and "kind" not in data:
        items, shape = data["Nodes"], "label dump"
        check_node_count(len(items), source)
        notes.append(Note(source, None, "a node label dump (not kubectl output): names and labels only, no GPU counts"))
        nodes = [_dump_node(item, f"Nodes[{i}]", source) for i, item in enumerate(items)]
    elif isinstance(data, dict) and data.get("kind") == "Node":
        shape = "Node"
        nodes = [_node(data, "", source, notes)]
    elif isinstance(data, dict) and data.get("kind") in ("List", "NodeList") and isinstance(data.get("items"), list):
        shape = "List"
        check_node_count(len(data["items"]), source)
        nodes = []
        for i, item in enumerate(data["items"]):
            if isinstance(item, dict) and item.get("kind", "Node") != "Node":
                notes.append(Note(source, None, f"items[{i}]: a {short(str(item.get('kind')), 30)} ignored"))
                continue
            nodes.append(_node(item, f"items[{i}].", source, notes))
    else:
        raise error(source, None, f"expected kubectl get nodes -o json output (kind List or Node), {found_kind(data)}")
    seen: set[str] = set()
    for node in nodes:  # a set, not list.count in a loop: 44k nodes took minutes
        if node.name in seen:
            raise error(source, None, f"node {node.name!r} appears twice")
        seen.add(node.name)
    return NodesFile(source, shape, tuple(nodes), tuple(notes))


def _get(obj: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _name(value: Any, where: str, source: str) -> str:
    if not isinstance(value, str) or not is_node_name(value):
        raise error(source, None, f"{where}: expected a node name (DNS-1123 subdomain), {got(value)}")
    return value


def _labels(raw: Any, where: str, source: str, notes: list[Note]) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise error(source, None, f"{where}: expected a mapping of labels")
    out = {}
    for key, value in raw.items():
        if isinstance(value, str) and is_label_key(key) and (value == "" or is_label_value(value)):
            out[key] = value
        else:
            notes.append(Note(source, None, f"{where}: label {short(str(key))} is not a valid Kubernetes label"))
    return out


def _node(item: Any, where: str, source: str, notes: list[Note]) -> K8sNode:
    if not isinstance(item, dict):
        raise error(source, None, f"{where or 'document'}: expected a Node object")
    name = _name(_get(item, "metadata", "name"), f"{where}metadata.name", source)
    labels = _labels(_get(item, "metadata", "labels"), f"{where}metadata.labels", source, notes)
    capacity = _get(item, "status", "capacity") or {}
    allocatable = _get(item, "status", "allocatable") or {}
    reasons = []
    if _get(item, "spec", "unschedulable") is True:
        reasons.append("cordoned (spec.unschedulable)")
    conditions = _get(item, "status", "conditions")
    ready = (
        next((c for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"), None)
        if isinstance(conditions, list)
        else None
    )
    if ready is not None and ready.get("status") != "True":
        reasons.append("not Ready")
    taints = []
    raw_taints = _get(item, "spec", "taints")
    for t in raw_taints if isinstance(raw_taints, list) else []:
        if isinstance(t, dict) and t.get("effect") in ("NoSchedule", "NoExecute"):
            taints.append(f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}")
    provider = _get(item, "spec", "providerID")
    if labels.get(MEMORY_MIB) and K8sNode(name, labels).memory_gib is None:
        notes.append(
            Note(source, None, f"{name}: label {MEMORY_MIB}={short(labels[MEMORY_MIB])} is not a size in MiB; ignored")
        )
    return K8sNode(
        name=name,
        labels=labels,
        gpu_capacity=_count(capacity, f"{where}status.capacity", source, notes),
        gpu_allocatable=_count(allocatable, f"{where}status.allocatable", source, notes),
        cpu=_quantity(allocatable.get("cpu") if isinstance(allocatable, dict) else None, f"{name}: cpu", source, notes),
        memory=_quantity(
            allocatable.get("memory") if isinstance(allocatable, dict) else None, f"{name}: memory", source, notes
        ),
        schedulable=not reasons,
        why_unschedulable=", ".join(reasons) or None,
        taints=tuple(sorted(taints)),
        provider_id=provider if isinstance(provider, str) else None,
        instance_id=_instance_id(provider),
    )


def _dump_node(item: Any, where: str, source: str) -> K8sNode:
    if not isinstance(item, dict):
        raise error(source, None, f"{where}: expected an object with Name and Topology")
    name = _name(item.get("Name"), f"{where}.Name", source)
    notes: list[Note] = []
    labels = _labels(item.get("Topology"), f"{where}.Topology", source, notes)
    instance = item.get("InstanceId")
    return K8sNode(name=name, labels=labels, instance_id=instance if isinstance(instance, str) else None)


def _count(resources: Any, where: str, source: str, notes: list[Note]) -> int | None:
    if not isinstance(resources, dict) or GPU_RESOURCE not in resources:
        return None
    value = resources[GPU_RESOURCE]
    text = str(value)
    if isinstance(value, (str, int)) and not isinstance(value, bool) and text.isdigit() and len(text) <= 4:
        return int(text)
    notes.append(Note(source, None, f"{where}[{GPU_RESOURCE}] = {short(text)} is not a GPU count; ignored"))
    return None


def _quantity(value: Any, what: str, source: str, notes: list[Note]) -> str | None:
    if value is None:
        return None
    try:
        if k8s.parse_quantity(str(value)) > 10**18:
            raise ValueError("too large")
    except (ValueError, ArithmeticError):
        notes.append(Note(source, None, f"{what} {short(str(value))} is not a Kubernetes quantity; ignored"))
        return None
    return str(value)


def _instance_id(provider: Any) -> str | None:
    """``aws:///us-west-2a/i-0abc`` -> ``i-0abc``; other providers give no instance id placer uses."""
    if isinstance(provider, str) and provider.startswith("aws://"):
        last = provider.rsplit("/", 1)[-1]
        return last if last.startswith("i-") else None
    return None


@dataclass(frozen=True)
class LabelDomains:
    """Per node, the domain names the scheme found, the key each level came from, and unmapped tiers."""

    domains: dict[str, dict[str, str]]  # node -> level -> value
    keys_used: dict[str, dict[str, int]]  # level -> key -> node count
    notes: tuple[Note, ...]


def domains_from_labels(nodes: list[K8sNode], scheme: LabelScheme, source: str) -> LabelDomains:
    """Apply the scheme: the first key of each level a node carries names its domain there."""
    domains: dict[str, dict[str, str]] = {}
    used: dict[str, dict[str, int]] = {level: {} for level in LEVEL_NAMES}
    notes: list[Note] = []
    for node in nodes:
        mine: dict[str, str] = {}
        for level in LEVEL_NAMES:
            key = next((k for k in scheme.levels.get(level, ()) if node.labels.get(k)), None)
            if key is not None:
                mine[level] = node.labels[key]
                used[level][key] = used[level].get(key, 0) + 1
        domains[node.name] = mine
    for key in scheme.unmapped:
        values = {n.labels[key] for n in nodes if n.labels.get(key)}
        if len(values) > 1:
            notes.append(Note(source, None, f"label {key} has {len(values)} values: {_unmapped_why(key)}"))
    for level, keys in used.items():
        if len(keys) > 1:
            parts = ", ".join(f"{k} ({n} nodes)" for k, n in sorted(keys.items()))
            notes.append(Note(source, None, f"{level} named by several label keys: {parts}"))
    return LabelDomains(domains, used, tuple(notes))


def _unmapped_why(key: str) -> str:
    """Why a tier has no placer level: a sub-domain splits an NVLink domain, the others sit above the leaf."""
    if key.endswith("/sub-domain"):
        return (
            "a tier inside the NVLink domain, which placer does not split (its nodes are one NVLink domain), so it "
            "is kept as a node label only"
        )
    return "placer has no level for that tier (it models one spine), so it is kept as a node label only"


def kept_labels(node: K8sNode, scheme: LabelScheme) -> dict[str, str]:
    """The labels worth carrying into the cluster file: hostname, instance type, zone/region, GPU product and
    clique, and every topology key of the scheme; the rest of a node's labels are inventory noise here."""
    keep = set(KEEP_LABELS) | scheme.keys()
    return {k: v for k, v in sorted(node.labels.items()) if k in keep and v}
