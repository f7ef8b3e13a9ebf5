"""Drafts -> the ``kind: Cluster`` document: node classes, nodes, fabric figures from NICs, overrides.

Nodes that share everything the hardware says (GPUs, interconnect, sockets, NICs) share a node class named
after their GPUs (``nvidia-h100-80gb-hbm3-x8``); the CPU and memory most of a class's nodes have go into the
class and only the others repeat them. A field no source gave is left out, so the file itself shows what is
a default. Nodes are listed in natural name order; the same inputs give the same bytes.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import yaml

from placer.importers import hardware as hw
from placer.importers.common import Note, natural_key
from placer.importers.domains import final_domains
from placer.importers.k8s_nodes import ALWAYS, AUTO_ORDER, PRESETS
from placer.importers.ledger import DEFAULT, Draft, Ledger
from placer.importers.nccl_tests import NcclTestRun
from placer.model import API_VERSION
from placer.model.load import collector_paused
from placer.model.yaml_text import add_yaml12_numbers
from placer.topology.cost import NETWORK_LEVELS
from placer.topology.graph import Topology

DOMAIN_KEYS = {"rack": "rack", "leaf": "leaf", "nvlink-domain": "nvlinkDomain"}


def _sockets(socket_of: dict[int, int], notes: list[Note], name: str) -> dict[int, int]:
    """NUMA node ids as sockets when they fit the model (0-15), else renumbered densely (and said so)."""
    if all(0 <= s <= 15 for s in socket_of.values()):
        return socket_of
    dense = {s: k for k, s in enumerate(sorted(set(socket_of.values())))}
    notes.append(Note(name, None, f"NUMA nodes {sorted(dense)} renumbered 0-{len(dense) - 1} (sockets go up to 15)"))
    return {g: dense[s] for g, s in socket_of.items()}


def node_class(draft: Draft, notes: list[Note]) -> dict[str, Any]:
    """What a node's hardware says, in the cluster format (only fields some source gave)."""
    v, origin = draft.values, draft.origin
    count = v.get("gpus") or 0
    out: dict[str, Any] = {}
    if count:
        if draft.socket_of is not None and draft.hardware is not None and len(draft.socket_of) == count:
            sockets = _sockets(draft.socket_of, notes, draft.name)
            out["gpus"] = [
                {"index": i, "product": v["product"], "memoryGiB": v["memoryGiB"], "socket": sockets[i]}
                for i in sorted(sockets)
            ]
        else:
            out["gpus"] = {"count": count, "product": v["product"], "memoryGiB": v["memoryGiB"]}
    for key in ("interconnect", "nvlinkGBps", "sockets"):
        if v.get(key) is not None and origin.get(key, DEFAULT) != DEFAULT:
            out[key] = v[key]
    found = draft.hardware
    if found is not None and count == len(found.gpus):
        socket_of = draft.socket_of or {}
        nics = []
        for nic in found.nics:
            entry: dict[str, Any] = {"name": _nic_name(nic.name)}
            sock = hw.nic_socket(found, nic, socket_of)
            if sock is not None:
                entry["socket"] = sock
            near = hw.near_gpus(found, nic)
            if near:
                entry["gpus"] = near
            if nic.bandwidth_gbps:
                entry["bandwidthGBps"] = nic.bandwidth_gbps
            nics.append(entry)
        if nics:
            out["nics"] = nics
        islands = hw.nvlink_islands(found)
        if found.nvlink_known and islands and not hw.all_pairs_nvlink(found):
            out["nvlinkIslands"] = islands
    return out


def _nic_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.:-]", "-", name)[:64].lstrip("_.:-")
    return cleaned or "nic"


def _class_name(cls: dict[str, Any], taken: set[str]) -> str:
    gpus = cls.get("gpus")
    if gpus is None:
        base = "no-gpu"
    else:
        product = gpus[0]["product"] if isinstance(gpus, list) else gpus["product"]
        count = len(gpus) if isinstance(gpus, list) else gpus["count"]
        base = f"{re.sub(r'[^a-z0-9]+', '-', product.lower()).strip('-') or 'gpu'}-x{count}"
    name, k = base, 2
    while name in taken:
        name, k = f"{base}-{k}", k + 1
    return name


def _quantity_m(millicores: int) -> str:
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def build_document(ledger: Ledger, name: str, fabric: dict[str, Any]) -> tuple[dict[str, Any], list[Note]]:
    """The cluster document (plain data, camelCase keys), and notes made while building it."""
    notes: list[Note] = []
    drafts = [ledger.drafts[n] for n in sorted(ledger.drafts, key=natural_key)]
    classes: dict[str, dict[str, Any]] = {}
    by_key: dict[str, str] = {}
    members: dict[str, list[Draft]] = {}
    for draft in drafts:
        cls = node_class(draft, notes)
        key = json.dumps(cls, sort_keys=True)
        if key not in by_key:
            by_key[key] = _class_name(cls, set(classes))
            classes[by_key[key]] = cls
        members.setdefault(by_key[key], []).append(draft)
        draft.values["class"] = by_key[key]
    for cname, group in members.items():
        for key in ("cpu", "memory"):
            given = [d.values[key] for d in group if d.origin.get(key, DEFAULT) != DEFAULT and key in d.values]
            if given:
                classes[cname][key] = Counter(given).most_common(1)[0][0]
    nodes = [_node_entry(d, classes[d.values["class"]]) for d in drafts]
    doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "Cluster", "metadata": {"name": name}}
    if fabric:
        doc["fabric"] = fabric
    if carried := topology_labels(drafts):
        doc["topologyLabels"] = carried
    doc["nodeClasses"] = dict(sorted(classes.items()))
    doc["nodes"] = nodes
    return doc, notes


def topology_labels(drafts: list[Draft]) -> dict[str, str]:
    """Per level, the node label that carries it: a key every node with that level has, valued as its domain
    (so schedulers' topology constraints can name it). Keys the label presets know come first."""
    out: dict[str, str] = {}
    for level in ("nvlink-domain", "rack", "leaf"):
        named = [(d, final_domains(d)[level]) for d in drafts if level in final_domains(d)]
        if not named:
            continue
        keys = set.intersection(*({k for k, v in d.labels.items() if v == value} for d, value in named))
        keys.discard("kubernetes.io/hostname")
        known = [*ALWAYS.get(level, ()), *(k for p in AUTO_ORDER for k in PRESETS[p].get(level, ()))]
        if keys:
            out[level] = min(keys, key=lambda k: (known.index(k) if k in known else len(known), k))
    return out


def _node_entry(draft: Draft, cls: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": draft.name, "class": draft.values["class"]}
    if draft.labels:
        entry["labels"] = dict(sorted(draft.labels.items()))
    domains = final_domains(draft)
    for level in ("rack", "leaf", "nvlink-domain"):
        if level in domains:
            entry[DOMAIN_KEYS[level]] = domains[level]
    for key in ("cpu", "memory"):
        if key in draft.values and draft.origin.get(key, DEFAULT) != DEFAULT and draft.values[key] != cls.get(key):
            entry[key] = draft.values[key]
    if draft.busy:
        entry["busy"] = sorted(draft.busy)
    if draft.used_cpu_m or draft.used_memory_bytes:
        entry["used"] = {"cpu": _quantity_m(draft.used_cpu_m), "memory": str(draft.used_memory_bytes)}
    if draft.values.get("schedulable") is False:
        entry["schedulable"] = False
    return entry


def fabric_from_hardware(ledger: Ledger) -> tuple[dict[str, Any], dict[str, tuple[str, int]]]:
    """``fabric.network`` figures every node's NICs agree on: rails per node, port speed, kind."""
    rails: dict[int, list[str]] = {}
    speeds: dict[float, list[str]] = {}
    kinds: dict[str, list[str]] = {}
    for draft in ledger.drafts.values():
        found = draft.hardware
        if found is None or not found.nics or draft.values.get("gpus") != len(found.gpus):
            continue
        rail_names = hw.rails(found)
        used = [n for n in found.nics if n.name in rail_names]
        rails.setdefault(len(used), []).append(draft.name)
        for nic in used:
            if nic.bandwidth_gbps:
                speeds.setdefault(nic.bandwidth_gbps, []).append(draft.name)
            if nic.kind:
                kinds.setdefault(nic.kind, []).append(draft.name)
    if rails and not kinds:
        ledger.notes.append(
            Note(
                "fabric.network.kind",
                None,
                "no source says whether the rail NICs are InfiniBand or Ethernet (nvidia-smi topo -m does not): left "
                "at the model's infiniband; set fabric.network.kind: ethernet for RoCE or EFA",
            )
        )
    network: dict[str, Any] = {}
    origin: dict[str, tuple[str, int]] = {}
    table: tuple[tuple[str, dict[Any, list[str]]], ...] = (
        ("kind", kinds),
        ("railGBps", speeds),
        ("railsPerNode", rails),
    )
    for key, found_values in table:
        if len(found_values) == 1:
            value, names = next(iter(found_values.items()))
            network[key] = value
            origin[f"fabric.network.{key}"] = ("NICs of the hardware files", len(set(names)))
        elif len(found_values) > 1:
            parts = ", ".join(f"{v} on {len(set(ns))} node(s)" for v, ns in sorted(found_values.items(), key=str))
            ledger.conflicts.append(f"fabric.network.{key}: nodes differ ({parts}); left at the default")
    return ({"network": network} if network else {}), origin


def nccl_overrides(
    runs: tuple[NcclTestRun, ...], ledger: Ledger, topo: Topology
) -> tuple[list[dict[str, Any]], list[Note]]:
    """Each run's peak bus bandwidth as the measured figure of the narrowest domain holding its hosts.

    An override is a figure per lane, as every fabric figure is (placer.topology.cost): a GPU pair inside a
    box, one rail on the network, where a transfer runs one lane per GPU over the node's rails. A test across
    nodes drives the rails its ranks sit on (one per rank, up to the node's rails) and reports their whole bus
    bandwidth,
    so over the network its figure is divided by those rails (``source`` says how many); taken whole it would
    count the rails twice, and a KV floor no network meets would pass."""
    notes: list[Note] = []
    by_domain: dict[str, dict[str, Any]] = {}
    index = {n.name: n.index for n in topo.nodes}
    for run in runs:
        peak = run.peak()
        if peak is None or peak.out_of_place.busbw_gbps is None:
            notes.append(Note(run.source, None, "no result row without errors: nothing to attach"))
            continue
        if run.cut_short():
            continue  # the parser's note says why: a small message's busbw is far below what the link sustains
        drafts = [ledger.resolve(h) for h in run.hosts]
        missing = [h for h, d in zip(run.hosts, drafts, strict=True) if d is None]
        if missing or not drafts:
            what = f"host(s) {', '.join(missing)} are not cluster nodes" if missing else "its hosts are unknown"
            notes.append(Note(run.source, None, f"{what}: the measured figure is not attached"))
            continue
        domain = topo.lowest_common([topo.node_domain[index[d.name]] for d in drafts if d is not None])
        busbw = peak.out_of_place.busbw_gbps
        test = f"nccl-tests {run.operation}" if run.operation else "nccl-tests"
        source = (
            f"{test} ({_basename(run.source)}): busbw {busbw:g} GB/s at {peak.size_bytes} B, "
            f"{len(run.ranks)} ranks on {len(run.hosts)} node(s)"
        )
        figure = busbw
        if topo.domains[domain].level in NETWORK_LEVELS:
            # a rank drives its own rail: a test with fewer ranks on a node than rails used only that many
            rails = max(1, min(topo.rails_per_node, len(run.ranks) // len(run.hosts)))
            figure = round(busbw / rails, 3)
            source += f", over {rails} rail(s) per node: {figure:g} GB/s per rail"
            notes.append(Note(run.source, None, _per_rail_meaning(domain, figure, rails, topo.rail_gbps)))
        if domain in by_domain:
            ledger.conflicts.append(
                f"overrides {domain}: {by_domain[domain]['bandwidthGBps']:g} GB/s from an earlier nccl-tests file, "
                f"{figure:g} from {run.source}; using {run.source}"
            )
        by_domain[domain] = {"domain": domain, "bandwidthGBps": figure, "source": source}
    return [by_domain[d] for d in sorted(by_domain)], notes


def _per_rail_meaning(domain: str, figure: float, rails: int, line_rate: float) -> str:
    """What a per-rail figure from nccl-tests is, so that nobody reads it as a NIC's measured line rate."""
    text = (
        f"{domain}: {figure:g} GB/s per rail is the test's bus bandwidth (busbw) over the {rails} rail(s) each node "
        "drove: what a collective like the one tested gets per rail, not a NIC's line rate (NCCL's algorithms that "
        "also use NVLink inside the nodes can lift it above the line rate)"
    )
    if figure > line_rate:
        text += f"; here it is above the {line_rate:g} GB/s of fabric.network.railGBps"
    return text


def _basename(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


class _Flow(dict):  # type: ignore[type-arg]
    """A mapping written on one line."""


class _FlowList(list):  # type: ignore[type-arg]
    """A list written on one line."""


_Base: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # type: ignore[assignment]


class _Dumper(_Base):  # type: ignore[misc,valid-type]
    def ignore_aliases(self, data: Any) -> bool:
        return True  # placer's loader refuses anchors and aliases


add_yaml12_numbers(_Dumper)  # a string such as "1e3" is quoted: placer's loader reads it as a number


_Dumper.add_representer(_Flow, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=True))
_Dumper.add_representer(_FlowList, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))


def _styled(value: Any, depth: int = 0) -> Any:
    """Mappings of scalars (a GPU, a NIC, a node without labels) and lists of scalars go on one line; the
    rest stays block style, so every node starts its own line."""
    if isinstance(value, dict):
        items = {k: _styled(v, depth + 1) for k, v in value.items()}
        return _Flow(items) if depth >= 1 and all(_flat(v) for v in value.values()) else items
    if isinstance(value, list):
        seq = [_styled(v, depth + 1) for v in value]
        return _FlowList(seq) if all(not isinstance(v, (dict, list)) for v in value) else seq
    return value


def _flat(value: Any) -> bool:
    if isinstance(value, list):
        return all(not isinstance(v, (dict, list)) for v in value)
    return not isinstance(value, dict)


def dump_cluster(document: dict[str, Any]) -> str:
    """Compact, deterministic YAML that ``placer.model.load`` reads back (key order kept, no aliases)."""
    with collector_paused():
        text: str = yaml.dump(_styled(document), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=200)
    return text
