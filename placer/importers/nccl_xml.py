"""NCCL topology XML (``NCCL_TOPO_FILE`` / ``NCCL_TOPO_DUMP_FILE``) -> :class:`NcclTopology` -> hardware.

The file is ``<system>`` holding ``<cpu numaid>`` elements; under them a tree of ``<pci busid class>``
elements (bridges 0x0604, GPUs 0x03xx, NICs 0x02xx), a GPU carrying ``<gpu dev sm>`` with ``<nvlink target
count tclass>`` children (tclass 0x0680 is an NVSwitch, 0x068001 the POWER9 CPU), a NIC ``<nic><net name
speed>``. Two kinds of file share the format: dumps, which have all of that, and hand-written *hint files*
(Azure, AWS) that only place GPUs and NICs under PCIe switches and NUMA nodes: they say nothing about NVLink,
and the import says so. An NCCL *graph* file (``<graphs>``) is a search result, not a topology: refused.

The input is untrusted: it is parsed by expat (the parser under ElementTree) with every DTD refused, so no
entity can be declared, expanded or fetched, and with limits on size and depth; line numbers come along.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from xml.parsers import expat

from placer.importers.common import Note, error, short
from placer.importers.gpus import PCI_DEVICES
from placer.importers.hardware import GpuInfo, NicInfo, NodeHardware

KIND = "NCCL topology XML"
MAX_ELEMENTS = 100_000
MAX_DEPTH = 64
NVSWITCH = 0x0680
POWER_CPU = 0x068001
KNOWN_ATTRS = {
    "system": {"version"},
    "cpu": {"numaid", "affinity", "arch", "vendor", "familyid", "modelid", "host_hash"},
    "pci": {"busid", "class", "vendor", "device", "subsystem_vendor", "subsystem_device", "link_speed", "link_width"},
    "gpu": {"dev", "sm", "rank", "gdr"},
    "nvlink": {"target", "count", "tclass"},
    "nic": set(),
    "net": {"name", "dev", "speed", "port", "latency", "guid", "maxconn", "gdr", "coll"},
}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    line: int
    parent: Element | None = None
    children: list[Element] = field(default_factory=list)


@dataclass(frozen=True)
class XmlGpu:
    index: int
    bus_id: str
    numa: int | None
    dev: int | None
    sm: int | None
    device_id: int | None
    path: tuple[int, ...]  # ids of the <pci> switches above it, outermost first
    line: int


@dataclass(frozen=True)
class XmlNic:
    name: str
    bus_id: str | None
    numa: int | None
    kind: str | None
    bandwidth_gbps: float | None
    path: tuple[int, ...]
    line: int


@dataclass(frozen=True)
class NcclTopology:
    """What the file says, with GPUs in CUDA order (``<gpu dev>``, else PCI bus order like nvidia-smi)."""

    source: str
    hint_file: bool  # no <gpu>/<nvlink> elements: NVLink connectivity unknown
    numa_nodes: tuple[int, ...]
    gpus: tuple[XmlGpu, ...]
    nics: tuple[XmlNic, ...]
    nvlinks: dict[tuple[int, int], int]  # GPU index pair (i < j) -> bonded links, direct or through NVSwitch
    notes: tuple[Note, ...]

    def gpu_link(self, i: int, j: int) -> str:
        """nvidia-smi's code for a GPU pair: NV#, else the PCIe path (PIX, PXB, PHB, SYS)."""
        count = self.nvlinks.get((min(i, j), max(i, j)), 0)
        if count:
            return f"NV{count}"
        return _pcie_code(self.gpus[i].path, self.gpus[i].numa, self.gpus[j].path, self.gpus[j].numa)

    def to_hardware(self) -> NodeHardware:
        gpus = tuple(
            GpuInfo(index=g.index, numa=g.numa, bus_id=g.bus_id, sm=g.sm, device_id=g.device_id) for g in self.gpus
        )
        links = {
            (a.index, b.index): self.gpu_link(a.index, b.index)
            for a in self.gpus
            for b in self.gpus
            if a.index < b.index
        }
        nics = tuple(
            NicInfo(
                name=n.name,
                numa=n.numa,
                links=tuple(_pcie_code(n.path, n.numa, g.path, g.numa) for g in self.gpus),
                bandwidth_gbps=n.bandwidth_gbps,
                kind=n.kind,
            )
            for n in self.nics
        )
        return NodeHardware(self.source, KIND, gpus, links, nics, not self.hint_file, self.notes)


def _pcie_code(a: tuple[int, ...], numa_a: int | None, b: tuple[int, ...], numa_b: int | None) -> str:
    if numa_a != numa_b:
        return "SYS"
    shared = 0
    while shared < min(len(a), len(b)) and a[shared] == b[shared]:
        shared += 1
    if shared == 0:
        return "PHB"
    return "PIX" if shared == len(a) == len(b) else "PXB"


def parse_xml(text: str, source: str) -> Element:
    """Parse with expat into a small element tree; any DTD (and so any entity) is refused."""
    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    root: list[Element] = []
    stack: list[Element] = []
    count = 0

    def refuse(*_: object) -> None:
        raise error(
            source, parser.CurrentLineNumber, "DOCTYPE and ENTITY declarations are not allowed (untrusted input)"
        )

    def start(tag: str, attrs: dict[str, str]) -> None:
        nonlocal count
        count += 1
        if count > MAX_ELEMENTS or len(stack) >= MAX_DEPTH:
            raise error(source, parser.CurrentLineNumber, f"more than {MAX_ELEMENTS} elements or {MAX_DEPTH} levels")
        element = Element(tag, dict(attrs), parser.CurrentLineNumber, stack[-1] if stack else None)
        if stack:
            stack[-1].children.append(element)
        else:
            root.append(element)
        stack.append(element)

    def end(_tag: str) -> None:
        stack.pop()

    parser.StartDoctypeDeclHandler = refuse  # type: ignore[assignment]
    parser.EntityDeclHandler = refuse
    parser.ExternalEntityRefHandler = refuse  # type: ignore[assignment]
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(text, True)
    except expat.ExpatError as exc:
        raise error(source, exc.lineno, f"not well-formed XML: {expat.ErrorString(exc.code)}") from None
    except RecursionError:  # pragma: no cover - the depth limit comes first
        raise error(source, None, "XML nested too deeply") from None
    if not root:
        raise error(source, None, "no XML element found")
    return root[0]


def parse_nccl_xml(text: str, source: str) -> NcclTopology:
    """Parse one NCCL topology file (a dump or a hint file)."""
    root = parse_xml(text, source)
    if root.tag in ("graphs", "graph"):
        raise error(
            source,
            root.line,
            f"this is an NCCL graph file (<{root.tag}>: the rings and trees NCCL searched, NCCL_GRAPH_FILE), "
            "not a topology; dump the topology with NCCL_TOPO_DUMP_FILE=<file> instead",
        )
    if root.tag != "system":
        raise error(source, root.line, f"expected an NCCL topology file (<system>), found <{root.tag[:40]}>")
    notes: list[Note] = []
    _check_vocabulary(root, source, notes)
    numa_nodes: list[int] = []
    raw_gpus: list[tuple[Element, int | None, tuple[int, ...]]] = []
    nics: list[XmlNic] = []
    unknown_pci: list[Element] = []  # leaf <pci> devices whose class is missing or not a hex number
    for cpu in root.children:
        if cpu.tag != "cpu":
            continue
        numa = _int(cpu.attrs.get("numaid"), 10)
        if numa is None:
            given = cpu.attrs.get("numaid")
            what = "without a numaid" if given is None else f"numaid={short(given, 20)} is not a NUMA node number"
            notes.append(Note(source, cpu.line, f"<cpu> {what}: its devices get no NUMA node"))
        else:
            numa_nodes.append(numa)
        for element, path in _walk(cpu):
            if element.tag == "pci":
                cls = _int(element.attrs.get("class"), 16)
                if cls is None:
                    if not any(c.tag == "pci" for c in element.children):
                        unknown_pci.append(element)
                elif cls >> 16 == 0x03:
                    raw_gpus.append((element, numa, path))
                elif cls >> 16 == 0x02 and not any(c.tag == "nic" for c in element.children):
                    nics.append(_pci_nic(element, cls, numa, path, None))
            elif element.tag == "nic":
                pci = element.parent if element.parent is not None and element.parent.tag == "pci" else None
                cls = _int(pci.attrs.get("class"), 16) if pci is not None else None
                nets: list[Element | None] = [c for c in element.children if c.tag == "net"] or [None]
                for net in nets:
                    nic = _pci_nic(pci or element, cls, numa, path[:-1] if pci is not None else path, net)
                    nics.append(nic)
                    if cls is None:
                        notes.append(Note(source, nic.line, _kind_without_class(nic)))
    if not raw_gpus:
        what = (
            f"its {_classless(unknown_pci)}, so GPUs and NICs cannot be told apart"
            + ("" if _first_bad_class_line(unknown_pci) else " (a hint file that only pins PCI devices to NUMA nodes)")
            if unknown_pci
            else "no <pci> element with a GPU class (0x03....)"
        )
        raise error(source, _first_bad_class_line(unknown_pci) or root.line, f"no GPU found: {what}")
    gpus, nvlinks, hint = _gpus(raw_gpus, source, notes)
    if hint:
        notes.append(
            Note(
                source,
                None,
                "a hint file: no <gpu> or <nvlink> elements, so NVLink connectivity is unknown; only the GPUs' "
                "PCIe switches and NUMA nodes are used, and the interconnect follows the GPU product (only an "
                "NVSwitch board's is nvlink; see the product-table note); combine with nvidia-smi topo -m for NVLink",
            )
        )
    if unknown_pci:
        notes.append(Note(source, unknown_pci[0].line, f"{_classless(unknown_pci)}: ignored"))
    return NcclTopology(source, hint, tuple(sorted(set(numa_nodes))), gpus, tuple(nics), nvlinks, tuple(notes))


def _classless(devices: list[Element]) -> str:
    """How many <pci> devices have no usable class, and why: none given, or a value that is not a hex code."""
    bad = [d for d in devices if "class" in d.attrs]
    if not bad:
        return f"{len(devices)} <pci> device(s) carry no class attribute"
    return (
        f"{len(devices)} <pci> device(s) have no usable class (class={short(bad[0].attrs['class'], 20)} at line "
        f"{bad[0].line} is not a hex PCI class code such as 0x030200)"
    )


def _first_bad_class_line(devices: list[Element]) -> int | None:
    return next((d.line for d in devices if "class" in d.attrs), None)


def _walk(cpu: Element) -> list[tuple[Element, tuple[int, ...]]]:
    """Every element under a <cpu> with the ids of the <pci> elements above it (iterative, outermost first)."""
    out: list[tuple[Element, tuple[int, ...]]] = []
    stack: list[tuple[Element, tuple[int, ...]]] = [(c, ()) for c in reversed(cpu.children)]
    while stack:
        element, path = stack.pop()
        out.append((element, path))
        inner = path + (id(element),) if element.tag == "pci" else path
        stack.extend((c, inner) for c in reversed(element.children))
    return out


def _gpus(
    raw: list[tuple[Element, int | None, tuple[int, ...]]], source: str, notes: list[Note]
) -> tuple[tuple[XmlGpu, ...], dict[tuple[int, int], int], bool]:
    detail = [next((c for c in pci.children if c.tag == "gpu"), None) for pci, _, _ in raw]
    hint = all(d is None for d in detail)
    devs = [_int(d.attrs.get("dev"), 10) if d is not None else None for d in detail]
    if all(d is not None for d in devs) and len(set(devs)) == len(devs):
        order = sorted(range(len(raw)), key=lambda k: devs[k] or 0)
    else:
        if not hint:
            notes.append(
                Note(source, None, "GPUs numbered in PCI bus order: <gpu dev> missing, not a number or repeated")
            )
        order = sorted(range(len(raw)), key=lambda k: raw[k][0].attrs.get("busid", "").lower())
    gpus: list[XmlGpu] = []
    for index, k in enumerate(order):
        pci, numa, path = raw[k]
        d = detail[k]
        vendor = _int(pci.attrs.get("vendor"), 16)
        device = _int(pci.attrs.get("device"), 16)
        gpus.append(
            XmlGpu(
                index=index,
                bus_id=pci.attrs.get("busid", "").lower(),
                numa=numa,
                dev=devs[k],
                sm=_int(d.attrs.get("sm"), 10) if d is not None else None,
                device_id=device if vendor in (None, 0x10DE) and device in PCI_DEVICES else None,
                path=path,
                line=pci.line,
            )
        )
    by_bus = {g.bus_id: g.index for g in gpus}
    nvlinks: dict[tuple[int, int], int] = {}
    switch_links: dict[int, int] = {}
    for g, k in zip(gpus, order, strict=True):
        d = detail[k]
        for link in d.children if d is not None else []:
            if link.tag != "nvlink":
                continue
            target = link.attrs.get("target", "").lower()
            count = _int(link.attrs.get("count"), 10) or 0
            tclass = _int(link.attrs.get("tclass"), 16)
            if target == g.bus_id:
                notes.append(Note(source, link.line, f"GPU {g.index}: <nvlink> to its own bus id {target} ignored"))
            elif tclass is not None and tclass >> 8 == NVSWITCH and tclass != POWER_CPU:
                switch_links[g.index] = switch_links.get(g.index, 0) + count
            elif tclass == POWER_CPU:
                notes.append(Note(source, link.line, f"GPU {g.index}: {count} NVLink(s) to the CPU recorded only"))
            elif target in by_bus:
                pair = (min(g.index, by_bus[target]), max(g.index, by_bus[target]))
                nvlinks[pair] = max(nvlinks.get(pair, 0), count)
            else:
                notes.append(Note(source, link.line, f"GPU {g.index}: <nvlink> target {short(target, 20)} unknown"))
    for a in switch_links:
        for b in switch_links:
            if a < b:
                nvlinks[(a, b)] = max(nvlinks.get((a, b), 0), min(switch_links[a], switch_links[b]))
    return tuple(gpus), nvlinks, hint


_ETHERNET_NETDEV = re.compile(r"^(eth|en[a-z]|em|bond)[0-9a-z]*$")


def nic_kind(cls: int | None, net_name: str | None) -> str | None:
    """InfiniBand or Ethernet: the PCI class says (0x0207, 0x0200); without one, a kernel Ethernet interface
    name (``eth0``, ``ens5``: what NCCL's socket transport names its NICs, where an InfiniBand HCA is
    ``mlx5_0``) is Ethernet; anything else is unknown."""
    if cls is not None:
        return {0x0207: "infiniband", 0x0200: "ethernet"}.get(cls >> 8)
    return "ethernet" if net_name and _ETHERNET_NETDEV.match(net_name) else None


def _kind_without_class(nic: XmlNic) -> str:
    if nic.kind == "ethernet":
        return f"NIC {short(nic.name, 20)}: no PCI class; taken as Ethernet from its interface name"
    return f"NIC {short(nic.name, 20)}: no PCI class or interface name says whether it is InfiniBand or Ethernet"


def _pci_nic(el: Element, cls: int | None, numa: int | None, path: tuple[int, ...], net: Element | None) -> XmlNic:
    kind = nic_kind(cls, net.attrs.get("name") if net is not None else None)
    speed = _int(net.attrs.get("speed"), 10) if net is not None else None  # Mb/s
    bus = el.attrs.get("busid")
    name = net.attrs.get("name") if net is not None else None
    return XmlNic(
        name=name or bus or "nic",
        bus_id=bus.lower() if bus else None,
        numa=numa,
        kind=kind,
        bandwidth_gbps=speed / 8000 if speed else None,
        path=path,
        line=(net or el).line,
    )


def _check_vocabulary(root: Element, source: str, notes: list[Note]) -> None:
    """Note elements and attributes this importer does not read (once per name)."""
    seen: set[str] = set()
    stack = [root]
    while stack:
        element = stack.pop()
        stack.extend(element.children)
        known = KNOWN_ATTRS.get(element.tag)
        if known is None:
            key = f"<{element.tag}>"
            if key not in seen:
                seen.add(key)
                notes.append(Note(source, element.line, f"element <{element.tag[:40]}> not understood"))
            continue
        for attr in sorted(set(element.attrs) - known):
            key = f"<{element.tag} {attr}>"
            if key not in seen:
                seen.add(key)
                notes.append(Note(source, element.line, f"attribute {attr[:40]} of <{element.tag}> ignored"))
    notes.sort(key=lambda n: (n.line or 0, n.text))


def _int(value: str | None, base: int) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip(), base) if len(value) <= 20 else None
    except ValueError:
        return None
