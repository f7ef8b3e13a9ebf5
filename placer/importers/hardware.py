"""One node's hardware as ``nvidia-smi topo -m`` or an NCCL topology file shows it, and what follows from it.

Both formats reduce to the same picture: GPUs (with NUMA node and CPU affinity), a link code for every GPU
pair and every GPU-NIC pair, and NICs. Link codes are nvidia-smi's, from nearest to farthest:
``NV#`` (# bonded NVLinks), ``PIX`` (one PCIe switch), ``PXB`` (several PCIe switches), ``PHB`` (through the
host bridge), ``NODE`` (between host bridges of one NUMA node), ``SYS`` (across NUMA nodes; old drivers
printed ``SOC``). From that picture this module derives what the cluster model can hold: NVLink islands,
whether every pair is NVLink-connected (``interconnect: nvlink``), sockets per GPU, and rails (NICs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from placer.importers.common import Note

NV = re.compile(r"^NV(\d{1,3})$")
NEAR = ("PIX", "PXB")  # a NIC this close to a GPU is its rail (GPUDirect RDMA through one PCIe switch tree)
RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}


def canonical(code: str) -> str:
    """The code a modern driver prints for ``code`` (``SOC`` was renamed ``SYS``)."""
    return "SYS" if code == "SOC" else code


def nvlinks(code: str) -> int:
    match = NV.match(code)
    return int(match.group(1)) if match else 0


def distance(code: str) -> int:
    """Smaller is nearer; any NVLink is nearest."""
    return 0 if nvlinks(code) else RANK.get(canonical(code), 6)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    numa: int | None = None
    cpu_affinity: str | None = None
    gpu_numa: int | None = None  # "GPU NUMA ID": the GPU's own memory node (Grace), not the CPU side
    bus_id: str | None = None
    sm: int | None = None
    device_id: int | None = None


@dataclass(frozen=True)
class NicInfo:
    name: str
    numa: int | None = None
    links: tuple[str, ...] = ()  # code to each GPU, in GPU order (empty when unknown)
    bandwidth_gbps: float | None = None  # GB/s
    kind: str | None = None  # "infiniband", "ethernet"


@dataclass(frozen=True, eq=False)
class NodeHardware:
    """A node's GPUs, NICs and the link code of every GPU pair (``links[(i, j)]`` with ``i < j``).

    Compared and hashed by identity: one file describes many nodes, and what is derived from it below is
    computed once per file (``lru_cache``), not once per node."""

    source: str
    kind: str  # "nvidia-smi topo -m" or "NCCL topology XML"
    gpus: tuple[GpuInfo, ...]
    links: dict[tuple[int, int], str]
    nics: tuple[NicInfo, ...] = ()
    nvlink_known: bool = True  # False for NCCL hint files, which do not say
    notes: tuple[Note, ...] = field(default=())
    bus_ids_from: str = ""  # the file the GPUs' bus ids came from, where another one gave them (else source)

    def link(self, a: int, b: int) -> str:
        """Link code between GPU indices ``a`` and ``b`` as a modern driver prints it."""
        if a == b:
            return "X"
        return canonical(self.links[(min(a, b), max(a, b))])

    @property
    def indices(self) -> list[int]:
        return [g.index for g in self.gpus]


@lru_cache(maxsize=1024)
def nvlink_islands(hw: NodeHardware) -> list[list[int]]:
    """GPUs connected through NVLink, directly or via other GPUs; only groups of two or more."""
    parent = {i: i for i in hw.indices}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for (a, b), code in sorted(hw.links.items()):
        if nvlinks(code):
            ra, rb = root(a), root(b)
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, list[int]] = {}
    for i in hw.indices:
        groups.setdefault(root(i), []).append(i)
    return sorted((sorted(g) for g in groups.values() if len(g) > 1), key=lambda g: g[0])


@lru_cache(maxsize=1024)
def all_pairs_nvlink(hw: NodeHardware) -> bool:
    """Every GPU pair is NVLink-connected (an NVSwitch board or a full mesh): the node's interconnect."""
    return len(hw.gpus) > 1 and all(nvlinks(c) for c in hw.links.values())


@lru_cache(maxsize=1024)
def min_nvlinks(hw: NodeHardware) -> int:
    """The narrowest NVLink bond between two GPUs of the node (0 if some pair has none)."""
    return min((nvlinks(c) for c in hw.links.values()), default=0)


@lru_cache(maxsize=1024)
def sockets(hw: NodeHardware) -> tuple[dict[int, int], str]:
    """Socket (NUMA node) of every GPU and how it was found: the NUMA affinity column, else groups of equal
    CPU affinity, else the GPU groups that ``SYS`` links separate, else one socket."""
    if hw.gpus and all(g.numa is not None for g in hw.gpus):
        return {g.index: g.numa for g in hw.gpus if g.numa is not None}, "NUMA affinity"
    if hw.gpus and all(g.cpu_affinity for g in hw.gpus):
        lists = sorted({g.cpu_affinity for g in hw.gpus if g.cpu_affinity}, key=_first_cpu)
        return {g.index: lists.index(g.cpu_affinity or "") for g in hw.gpus}, "CPU affinity"
    groups = _non_sys_groups(hw)
    if len(groups) > 1:
        return {i: n for n, group in enumerate(groups) for i in group}, "SYS links between GPU groups"
    return {i: 0 for i in hw.indices}, "none (one socket assumed)"


def _first_cpu(cpus: str | None) -> int:
    match = re.match(r"\d+", cpus or "")
    return int(match.group(0)) if match else 0


def _non_sys_groups(hw: NodeHardware) -> list[list[int]]:
    groups: list[list[int]] = []
    for i in hw.indices:
        home = next((g for g in groups if all(hw.link(i, j) != "SYS" for j in g)), None)
        if home is None:
            groups.append([i])
        else:
            home.append(i)
    return groups


@lru_cache(maxsize=1024)
def rails(hw: NodeHardware) -> list[str]:
    """NICs that are the nearest NIC of at least one GPU: the ones its traffic leaves the node through."""
    used: set[str] = set()
    # Rails are InfiniBand ports unless the fabric is Ethernet: a storage or management Ethernet port near a
    # GPU is not a rail when the node has InfiniBand ones (12 ports, 4 of them Ethernet, are 8 rails).
    ib = any(n.kind == "infiniband" for n in hw.nics)
    nics = [n for n in hw.nics if not (ib and n.kind == "ethernet") and len(n.links) == len(hw.gpus)]
    for g, _ in enumerate(hw.gpus):
        dists = [(distance(n.links[g]), n.name) for n in nics]
        if dists:
            best = min(d for d, _ in dists)
            used.update(name for d, name in dists if d == best)
    return [n.name for n in hw.nics if n.name in used]


def near_gpus(hw: NodeHardware, nic: NicInfo) -> list[int]:
    """GPUs behind the same PCIe switch tree as ``nic`` (PIX/PXB)."""
    return [g.index for g, code in zip(hw.gpus, nic.links, strict=False) if canonical(code) in NEAR]


def nic_socket(hw: NodeHardware, nic: NicInfo, socket_of: dict[int, int]) -> int | None:
    """The NIC's NUMA node as given, else that of the GPUs it reaches without crossing sockets."""
    if nic.numa is not None:
        return nic.numa
    # Nearest first: the GPUs behind its own PCIe switch tree, then any it reaches without crossing sockets
    # (NODE also joins NUMA nodes of one CPU, so it alone can name two).
    for near in (NEAR, ("PIX", "PXB", "PHB", "NODE")):
        found = {
            socket_of[g.index]
            for g, code in zip(hw.gpus, nic.links, strict=False)
            if canonical(code) in near and g.index in socket_of
        }
        if found:
            return found.pop() if len(found) == 1 else None
    return None


def conflicts(a: NodeHardware, b: NodeHardware) -> list[str]:
    """Where two files of one node disagree (merge lists each as "<file> and <file> ..."): GPU counts;
    NVLink bonds, sockets (compared as groups of GPUs: the files may number NUMA nodes differently), rails
    and network kinds, each only where both files know it."""
    if len(a.gpus) != len(b.gpus):
        return [f"describe different GPU counts ({len(a.gpus)} and {len(b.gpus)})"]
    out = []
    if a.nvlink_known and b.nvlink_known and any(nvlinks(a.links[k]) != nvlinks(b.links.get(k, "")) for k in a.links):
        out.append("describe different NVLinks")
    groups = [_socket_groups(x) for x in (a, b)]
    if None not in groups and groups[0] != groups[1]:
        out.append(f"put the GPUs on different sockets ({_said(groups[0])} and {_said(groups[1])})")
    if all(n.links for x in (a, b) for n in x.nics) and a.nics and b.nics:
        ra, rb = rails(a), rails(b)
        if len(ra) != len(rb):
            out.append(f"find {len(ra)} and {len(rb)} network rails")
    kinds = [{n.kind for n in x.nics if n.kind} for x in (a, b)]
    if all(kinds) and kinds[0] != kinds[1]:
        out.append(f"name different networks ({'/'.join(sorted(kinds[0]))} and {'/'.join(sorted(kinds[1]))})")
    return out


def _socket_groups(x: NodeHardware) -> list[list[int]] | None:
    """The GPUs of each socket, where the file says (None where one socket was only assumed)."""
    of, how = sockets(x)
    if how.startswith("none"):
        return None
    return sorted(sorted(i for i in of if of[i] == s) for s in set(of.values()))


def _said(groups: list[list[int]]) -> str:
    return " | ".join(",".join(map(str, g)) for g in groups)
