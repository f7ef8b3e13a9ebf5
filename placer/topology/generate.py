"""Synthetic ``kind: Cluster`` files: DGX H100 SuperPODs, GB200 NVL72 racks and a small mixed cluster.

Benchmarks and tests need clusters of realistic shape and fragmentation that nobody has to write by hand, and
committed fixtures must be reproducible, so the generator is pure and deterministic: one
``random.Random(seed)`` drawn in a fixed order, no clocks, no set iteration. Busy GPUs come from a
background of 1-, 2-, 4- and 8-GPU jobs, each inside one node, which fragments the cluster the way a shared
cluster is fragmented: few nodes stay whole, many keep a few free GPUs.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

import yaml

from placer.model import API_VERSION, k8s
from placer.model.cluster import MAX_NODES, GpuGroup
from placer.model.yaml_text import add_yaml12_numbers

STYLES: tuple[str, ...] = ("dgx-h100", "gb200-nvl72", "mixed")
JOB_SIZES: tuple[int, ...] = (1, 2, 4, 8)
JOB_WEIGHTS: tuple[int, ...] = (4, 3, 2, 1)  # small jobs are the common case on shared clusters
METRICS_SHARE = 0.2  # share of nodes that report serving telemetry
DEFAULT_BUSY = (0.30, 0.60)

# The key the model accepts for GPU memory, taken from the model so the two cannot drift apart.
_MEM: str = GpuGroup.model_fields["memory_gib"].alias or "memoryGiB"

Layout = tuple[dict[str, Any], dict[str, dict[str, Any]], list[dict[str, Any]]]  # fabric, classes, nodes


def _dgx_class() -> dict[str, Any]:
    return {
        "gpus": {"count": 8, "product": "NVIDIA-H100-80GB-HBM3", _MEM: 80},
        "interconnect": "nvlink",
        "nvlinkGBps": 900,
        "cpu": "224",
        "memory": "2Ti",
    }


def _spine() -> dict[str, Any]:
    return {"oversubscription": 2, "latencyUs": 5}


def _dgx_h100(gpus: int) -> Layout:
    """Scalable units of 32 nodes on one leaf, 4 nodes per rack; the NVLink domain is the node."""
    fabric = {
        "network": {"kind": "infiniband", "railGBps": 50, "railsPerNode": 8, "latencyUs": 2},
        "spine": _spine(),
    }
    nodes = []
    for i in range(math.ceil(gpus / 8)):
        su, n = divmod(i, 32)
        nodes.append(
            {
                "name": f"dgx-su{su + 1:02d}-n{n + 1:03d}",
                "class": "dgx-h100",
                "rack": f"r{i // 4 + 1:03d}",
                "leaf": f"su{su + 1:02d}",
            }
        )
    return fabric, {"dgx-h100": _dgx_class()}, nodes


def _gb200_nvl72(gpus: int) -> Layout:
    """18 four-GPU trays per rack, each rack one NVLink domain, 8 racks per leaf."""
    fabric = {
        "nvlinkDomain": {"bandwidthGBps": 600, "latencyUs": 1.5},
        "network": {"kind": "infiniband", "railGBps": 50, "railsPerNode": 4, "latencyUs": 2},
        "spine": _spine(),
    }
    tray = {
        "gpus": {"count": 4, "product": "NVIDIA-GB200", _MEM: 186},
        "interconnect": "nvlink",
        "nvlinkGBps": 1800,
        "sockets": 2,
        "cpu": "144",
        "memory": "960Gi",
    }
    nodes = []
    for r in range(math.ceil(gpus / 72)):
        rack = f"r{r + 1:03d}"
        for t in range(18):
            nodes.append(
                {
                    "name": f"gb200-{rack}-t{t + 1:02d}",
                    "class": "gb200-tray",
                    "rack": rack,
                    "nvlinkDomain": f"nvl-{rack}",
                    "leaf": f"su{r // 8 + 1:02d}",
                }
            )
    return fabric, {"gb200-tray": tray}, nodes


def _mixed(gpus: int) -> Layout:
    """Per 32 GPUs: a rack of 2 DGX H100 nodes and a rack of 2 PCIe A100 nodes, all under one leaf."""
    fabric = {"network": {"kind": "infiniband", "railGBps": 50, "railsPerNode": 8, "latencyUs": 2}}
    pcie = {
        "gpus": {"count": 8, "product": "NVIDIA-A100-PCIE-40GB", _MEM: 40},
        "interconnect": "pcie",
        "sockets": 2,
        "cpu": "128",
        "memory": "1Ti",
    }
    nodes = []
    for u in range(math.ceil(gpus / 32)):
        for kind, cls, rack in (("dgx", "dgx-h100", 2 * u + 1), ("pcie", "a100-pcie", 2 * u + 2)):
            for j in (1, 2):
                name = f"{kind}-{2 * u + j:02d}"
                nodes.append({"name": name, "class": cls, "rack": f"r{rack}", "leaf": "su01"})
    return fabric, {"dgx-h100": _dgx_class(), "a100-pcie": pcie}, nodes


_LAYOUTS = {"dgx-h100": _dgx_h100, "gb200-nvl72": _gb200_nvl72, "mixed": _mixed}


def _background_jobs(sizes: list[int], target: int, rng: random.Random) -> list[list[int]]:
    """Busy GPU indices per node after placing jobs of 1-8 GPUs, none straddling nodes, until ``target``
    GPUs are busy. A job takes any free GPUs of one node with room for it (an 8-GPU job: a whole free
    8-GPU node), so busy GPUs scatter the way they do after jobs come and go.

    The node is drawn uniformly from those with room, in node order; a Fenwick tree per job size finds
    the k-th of them in O(log n), so the whole draw is O(n log n) (a scan per job was quadratic: 96 s for
    100k GB200 GPUs), with the same random stream and so the same clusters as the scan."""
    free = [list(range(n)) for n in sizes]
    busy: list[list[int]] = [[] for _ in sizes]
    room = {s: _Fenwick([int(n >= s) for n in sizes]) for s in JOB_SIZES}
    with_free = [0] * (max(sizes, default=0) + 1)  # nodes by number of free GPUs
    for n in sizes:
        with_free[n] += 1
    left = target
    while left > 0:
        most = max(v for v, count in enumerate(with_free) if count)
        fits = [(s, w) for s, w in zip(JOB_SIZES, JOB_WEIGHTS, strict=True) if s <= min(left, most)]
        size = rng.choices([s for s, _ in fits], weights=[w for _, w in fits])[0]
        node = room[size].kth(rng.choice(range(room[size].total)))  # = rng.choice(nodes with room), in order
        taken = rng.sample(free[node], size)
        before = len(free[node])
        free[node] = [g for g in free[node] if g not in taken]
        after = len(free[node])
        with_free[before] -= 1
        with_free[after] += 1
        for s in JOB_SIZES:
            if after < s <= before:
                room[s].add(node, -1)
        busy[node].extend(taken)
        left -= size
    return [sorted(b) for b in busy]


class _Fenwick:
    """Counts over positions 0..n-1 with prefix sums and "the k-th counted position" in O(log n)."""

    def __init__(self, values: list[int]) -> None:
        self.n = len(values)
        self.tree = [0] * (self.n + 1)
        self.total = 0
        for i, v in enumerate(values):
            if v:
                self.add(i, v)

    def add(self, i: int, delta: int) -> None:
        self.total += delta
        i += 1
        while i <= self.n:
            self.tree[i] += delta
            i += i & -i

    def kth(self, k: int) -> int:
        """The position of the (k+1)-th counted element (k from 0)."""
        pos, step = 0, 1 << self.n.bit_length()
        while step:
            nxt = pos + step
            if nxt <= self.n and self.tree[nxt] <= k:
                pos, k = nxt, k - self.tree[nxt]
            step >>= 1
        return pos


MAX_GPUS = 400_000  # 100,000 nodes of 4 GPUs (GB200), the cluster format's node limit; more is a typo


def generate_cluster(
    style: str, gpus: int, seed: int, busy_fraction: float | None = None, name: str | None = None
) -> dict[str, Any]:
    """A ``kind: Cluster`` document as plain data; ``gpus`` is rounded up to whole nodes (DGX), whole
    racks (GB200 NVL72) or whole 32-GPU units (mixed). ``busy_fraction`` defaults to a seeded draw in
    [0.30, 0.60]. Same arguments, same result."""
    if style not in _LAYOUTS:
        raise ValueError(f"unknown style {style!r}; choose one of {', '.join(STYLES)}")
    if gpus < 1:
        raise ValueError(f"gpus must be at least 1, got {gpus}")
    if busy_fraction is not None and not 0 <= busy_fraction <= 1:
        raise ValueError(f"busy_fraction must be between 0 and 1, got {busy_fraction}")
    rng = random.Random(seed)
    drawn = rng.uniform(*DEFAULT_BUSY)  # always drawn, so the rest of the stream does not depend on it
    fraction = drawn if busy_fraction is None else busy_fraction
    fabric, classes, nodes = _LAYOUTS[style](gpus)
    if len(nodes) > MAX_NODES:  # whole racks can round past it: a file no other command would read
        raise ValueError(
            f"{gpus} GPUs as {style} make {len(nodes)} nodes; a cluster file holds at most {MAX_NODES} nodes"
        )
    sizes = [classes[n["class"]]["gpus"]["count"] for n in nodes]
    total = sum(sizes)
    for node, busy in zip(nodes, _background_jobs(sizes, round(fraction * total), rng), strict=True):
        if busy:
            node["busy"] = busy
    for i in sorted(rng.sample(range(len(nodes)), round(METRICS_SHARE * len(nodes)))):
        nodes[i]["metrics"] = {
            "queueDepth": round(rng.uniform(0, 8), 1),
            "kvCacheHit": round(rng.uniform(0, 0.9), 2),
        }
    name = k8s.check_dns_label(name if name is not None else f"{style}-{total}", "name")
    return {
        "apiVersion": API_VERSION,
        "kind": "Cluster",
        "metadata": {"name": name},
        "fabric": fabric,
        "nodeClasses": classes,
        "nodes": nodes,
    }


class _FlowMap(dict):  # type: ignore[type-arg]
    pass


class _FlowSeq(list):  # type: ignore[type-arg]
    pass


# libyaml's emitter when PyYAML has it: the same bytes (checked at 100k GPUs), 3x faster than the Python one.
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):  # type: ignore[valid-type,misc]
    def ignore_aliases(self, data: Any) -> bool:
        return True  # placer's loader refuses anchors and aliases


add_yaml12_numbers(_Dumper)  # a string such as "1e3" is quoted: placer's loader reads it as a number


_Dumper.add_representer(_FlowMap, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=True))
_Dumper.add_representer(_FlowSeq, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))


def _styled(value: Any, list_item: bool = False) -> Any:
    """Mark leaf collections (only scalars inside) for flow style; list items such as nodes stay block
    mappings so that each node starts its own line."""
    if isinstance(value, dict):
        leaf = all(not isinstance(v, (dict, list)) for v in value.values())
        items = {k: _styled(v) for k, v in value.items()}
        return _FlowMap(items) if leaf and not list_item else items
    if isinstance(value, list):
        leaf = all(not isinstance(v, (dict, list)) for v in value)
        seq = [_styled(v, list_item=True) for v in value]
        return _FlowSeq(seq) if leaf else seq
    return value


def dump_cluster_yaml(data: dict[str, Any]) -> str:
    """Compact, deterministic YAML: key order kept, leaf mappings and lists on one line, no aliases."""
    text: str = yaml.dump(_styled(data), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=200)
    return text


def dump_cluster_json(data: dict[str, Any]) -> str:
    """Deterministic JSON, key order kept, one node per line: what ``-o cluster.json`` writes. placer reads a
    JSON cluster file with the json module (placer.model.load.load_cluster), far faster than YAML at 100k
    GPUs, and one line per node still diffs and greps like the YAML."""
    parts = []
    for key, value in data.items():
        if key == "nodes" and isinstance(value, list) and value:
            rows = ",\n".join("  " + json.dumps(node, separators=(", ", ": ")) for node in value)
            parts.append(f'"nodes": [\n{rows}\n]')
        else:
            parts.append(f"{json.dumps(key)}: {json.dumps(value, separators=(', ', ': '))}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def dump_cluster(data: dict[str, Any], path: object = None) -> str:
    """The cluster file's text for ``path``: JSON for a ``.json`` file, YAML otherwise (stdout included)."""
    return dump_cluster_json(data) if str(path).lower().endswith(".json") else dump_cluster_yaml(data)
