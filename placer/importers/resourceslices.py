"""``kubectl get resourceslices -o json`` -> the identifiers of every whole GPU, per node and GPU index.

A DRA driver publishes one pool per node; each ``ResourceSlice`` (``resource.k8s.io/v1``, also ``v1beta2``
and ``v1beta1``, whose devices wrap their fields in ``basic``) lists devices with typed attributes. Only
the NVIDIA GPU driver's (``gpu.nvidia.com``) devices of ``type: gpu`` are GPUs here; MIG and VFIO devices,
other drivers' devices and ComputeDomain channels are counted and reported, not used.

Phase 1, read: per device its node (``spec.nodeName``, else the slice's Node owner), ``uuid`` and bus id
(the standard ``resource.kubernetes.io/pciBusID`` of driver v25.12.0 and later, or the driver's own
``pcieBusID`` of v25.3-v25.8, normalised to ``dddd:bb:dd.f`` lower case). Phase 2, index: nvidia-smi (and
so placer, the device plugin and ``CUDA_VISIBLE_DEVICES`` with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``) numbers a
node's GPUs in PCI bus order, so a node's GPUs are indexed by sorting their bus ids; the ``index``
attribute of driver v25.3.x is used where present; without either, the number in the device name
(``gpu-<minor>``, the /dev/nvidia minor) is taken, and the summary says so. A slice pool split over several
slices (``resourceSliceCount``) is read whole; a missing slice is reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from placer.importers.common import Note, error, got, is_node_name, load_json, short

DRIVER = "gpu.nvidia.com"
BUS_ID = re.compile(r"^(?:[0-9a-fA-F]{4,8}:)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
UUID = re.compile(r"^GPU-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")
API_VERSIONS = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1")


def normalize_bus_id(value: str) -> str | None:
    """``00000000:65:00.0`` (nvidia-smi), ``0000:65:00.0`` (NCCL, DRA) or ``65:00.0`` -> ``0000:65:00.0``.

    The domain keeps its low four hex digits (nvidia-smi prints eight, the DRA attribute four); None when the
    value is not a PCI address."""
    value = value.strip()
    match = BUS_ID.match(value)
    if not match:
        return None
    domain = value.split(":")[0] if value.count(":") == 2 else "0000"
    return f"{int(domain, 16) & 0xFFFF:04x}:{match.group(1).lower()}:{match.group(2).lower()}.{match.group(3)}"


@dataclass(frozen=True)
class SliceGpu:
    node: str
    device: str  # device name in the pool (gpu-<minor>)
    uuid: str | None
    bus_id: str | None
    index_attr: int | None  # the ``index`` attribute (driver v25.3.x only)
    product: str | None


@dataclass(frozen=True)
class GpuIds:
    """One GPU's identifiers as the cluster file records them."""

    index: int
    uuid: str | None
    bus_id: str | None


@dataclass(frozen=True)
class ResourceSlices:
    source: str
    gpus: tuple[SliceGpu, ...]
    notes: tuple[Note, ...] = field(default=())

    def nodes(self) -> list[str]:
        return sorted({g.node for g in self.gpus})

    def by_node(self) -> dict[str, list[GpuIds]]:
        """Node -> its GPUs' identifiers, indexed as nvidia-smi numbers them (module docstring, phase 2)."""
        out: dict[str, list[GpuIds]] = {}
        for node in self.nodes():
            mine = [g for g in self.gpus if g.node == node]
            if all(g.index_attr is not None for g in mine):
                order = sorted(mine, key=lambda g: g.index_attr or 0)
                indices = [g.index_attr or 0 for g in order]
            elif all(g.bus_id for g in mine):
                order = sorted(mine, key=lambda g: g.bus_id or "")
                indices = list(range(len(order)))
            else:
                order = sorted(mine, key=lambda g: _minor(g.device))
                indices = [_minor(g.device) for g in order]
            out[node] = [GpuIds(i, g.uuid, g.bus_id) for i, g in zip(indices, order, strict=True)]
        return out

    def index_basis(self, node: str) -> str:
        mine = [g for g in self.gpus if g.node == node]
        if all(g.index_attr is not None for g in mine):
            return "the driver's index attribute"
        if all(g.bus_id for g in mine):
            return "PCI bus order"
        return "device names (gpu-<minor>)"


def _minor(device: str) -> int:
    match = re.fullmatch(r"gpu-(\d+)", device)
    return int(match.group(1)) if match else 10**6


def _attr(attrs: dict[str, Any], name: str, kind: str) -> Any:
    value = attrs.get(name)
    return value.get(kind) if isinstance(value, dict) else None


def _items(data: Any, source: str) -> list[dict[str, Any]]:
    if isinstance(data, dict) and data.get("kind") == "ResourceSlice":
        return [data]
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        return data["items"]
    raise error(source, None, "expected `kubectl get resourceslices -o json`: a List of ResourceSlice objects")


def parse_resourceslices(text: str, source: str) -> ResourceSlices:
    data = load_json(text, source)
    notes: list[Note] = []
    gpus: list[SliceGpu] = []
    skipped: dict[str, int] = {}
    pools: dict[tuple[str, str], tuple[int, int]] = {}  # (driver, pool) -> (slices seen, resourceSliceCount)
    for i, item in enumerate(_items(data, source)):
        where = f"items[{i}]"
        if not isinstance(item, dict) or item.get("kind") != "ResourceSlice":
            raise error(
                source,
                None,
                f"{where}: expected kind ResourceSlice, got "
                f"{short(str(item.get('kind') if isinstance(item, dict) else item))}",
            )
        if item.get("apiVersion") not in API_VERSIONS:
            raise error(
                source,
                None,
                f"{where}.apiVersion: expected one of {', '.join(API_VERSIONS)}, {got(item.get('apiVersion'))}",
            )
        spec = item.get("spec")
        if not isinstance(spec, dict):
            raise error(source, None, f"{where}.spec: expected an object")
        driver = spec.get("driver")
        pool: dict[str, Any] = spec["pool"] if isinstance(spec.get("pool"), dict) else {}
        key = (str(driver), str(pool.get("name")))
        seen, count = pools.get(key, (0, 0))
        slice_count = pool.get("resourceSliceCount")
        pools[key] = (seen + 1, max(count, slice_count if isinstance(slice_count, int) else 1))
        devices = spec.get("devices") or []
        if not isinstance(devices, list):
            raise error(source, None, f"{where}.spec.devices: expected a list")
        if driver != DRIVER:
            skipped[f"driver {driver}"] = skipped.get(f"driver {driver}", 0) + len(devices)
            continue
        node = spec.get("nodeName") or next(
            (
                o.get("name")
                for o in (item.get("metadata") or {}).get("ownerReferences") or []
                if isinstance(o, dict) and o.get("kind") == "Node"
            ),
            None,
        )
        if not isinstance(node, str) or not is_node_name(node):
            raise error(source, None, f"{where}.spec.nodeName: expected the node of a per-node pool, {got(node)}")
        for j, dev in enumerate(devices):
            at = f"{where}.spec.devices[{j}]"
            if not isinstance(dev, dict):
                raise error(source, None, f"{at}: expected an object")
            body: dict[str, Any] = dev["basic"] if isinstance(dev.get("basic"), dict) else dev  # v1beta1
            attrs = body.get("attributes") or {}
            if not isinstance(attrs, dict):
                raise error(source, None, f"{at}.attributes: expected an object")
            kind = _attr(attrs, "type", "string")
            if kind != "gpu":
                skipped[f"type {kind}"] = skipped.get(f"type {kind}", 0) + 1
                continue
            name = dev.get("name")
            if not isinstance(name, str) or not name:
                raise error(source, None, f"{at}.name: expected the device name")
            uuid = _attr(attrs, "uuid", "string")
            if uuid is not None and (not isinstance(uuid, str) or not UUID.match(uuid)):
                raise error(
                    source,
                    None,
                    f"{at}.attributes.uuid: expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, {got(uuid)}",
                )
            raw_bus = _attr(attrs, "resource.kubernetes.io/pciBusID", "string") or _attr(attrs, "pcieBusID", "string")
            bus = normalize_bus_id(raw_bus) if isinstance(raw_bus, str) else None
            if raw_bus is not None and bus is None:
                raise error(
                    source, None, f"{at}.attributes: pciBusID {short(str(raw_bus))} is not a PCI address (dddd:bb:dd.f)"
                )
            index = _attr(attrs, "index", "int")
            if index is not None and (not isinstance(index, int) or not 0 <= index <= 255):
                raise error(source, None, f"{at}.attributes.index: expected 0-255, {got(index)}")
            product = _attr(attrs, "productName", "string")
            gpus.append(SliceGpu(node, name, uuid, bus, index, product if isinstance(product, str) else None))
    for (drv, pool_name), (seen, count) in sorted(pools.items()):
        if seen < count:
            notes.append(
                Note(
                    source,
                    None,
                    f"pool {pool_name} of {drv}: {seen} of {count} slices present; devices of the others are missing",
                )
            )
    for what, n in sorted(skipped.items()):
        notes.append(Note(source, None, f"{n} device(s) of {what} are not whole NVIDIA GPUs; not used"))
    _check_unique(gpus, source)
    return ResourceSlices(source, tuple(gpus), tuple(notes))


def _check_unique(gpus: list[SliceGpu], source: str) -> None:
    """A device name or bus id twice on one node, or a uuid twice anywhere: not one cluster's slices."""
    seen: dict[tuple[str, str], str] = {}
    for g in gpus:
        for kind, value in (("device", g.device), ("uuid", g.uuid), ("bus id", g.bus_id)):
            if value is None:
                continue
            key = (kind, value if kind == "uuid" else f"{g.node}/{value}")
            if key in seen:
                raise error(source, None, f"{kind} {short(value)} appears twice (on nodes {seen[key]} and {g.node})")
            seen[key] = g.node


def gpu_ids(
    drafts: dict[str, Any], aliases: dict[str, str], slices: ResourceSlices | None
) -> tuple[dict[str, list[dict[str, Any]]], list[Note], dict[str, int]]:
    """Per node name, the ``gpuIds`` entries of the cluster file; notes; provenance (origin -> nodes).

    Bus ids come first from the node's hardware file (an NCCL topology XML dump knows each GPU's bus id),
    then from the ResourceSlices, which also give the uuid; a bus id the two disagree on is reported and the
    slice's is kept (it is what the DRA driver will match)."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    notes: list[Note] = []
    origin: dict[str, int] = {}
    for name, draft in drafts.items():
        hardware = getattr(draft, "hardware", None)
        if hardware is None or not any(g.bus_id for g in hardware.gpus):
            continue
        entries = {}
        for g in hardware.gpus:
            bus = normalize_bus_id(g.bus_id) if g.bus_id else None
            if bus:
                entries[g.index] = {"index": g.index, "pciBusID": bus}
        if entries:
            out[name] = entries
            key = f"{hardware.bus_ids_from or hardware.source} (bus ids)"
            origin[key] = origin.get(key, 0) + 1
    if slices is not None:
        for node, ids in slices.by_node().items():
            found = node if node in drafts else aliases.get(node)
            if found is None:
                notes.append(
                    Note(
                        slices.source, None, f"node {short(node)} is in no other source; its {len(ids)} GPU(s) not used"
                    )
                )
                continue
            name = found
            count = drafts[name].values.get("gpus", 0)
            if any(g.index >= count for g in ids):
                notes.append(
                    Note(
                        slices.source,
                        None,
                        f"node {name}: {len(ids)} GPU(s) in the slices, indexed by {slices.index_basis(node)}, "
                        f"but the node has {count}; identifiers not used",
                    )
                )
                continue
            entries = out.setdefault(name, {})
            for g in ids:
                entry = entries.setdefault(g.index, {"index": g.index})
                old = entry.get("pciBusID")
                if old and g.bus_id and old != g.bus_id:
                    notes.append(
                        Note(
                            slices.source,
                            None,
                            f"node {name} GPU {g.index}: bus id {old} from the topology file but {g.bus_id} "
                            "in the ResourceSlices; using the ResourceSlices'",
                        )
                    )
                if g.uuid:
                    entry["uuid"] = g.uuid
                if g.bus_id:
                    entry["pciBusID"] = g.bus_id
            key = f"{slices.source} (ResourceSlices, indexed by {slices.index_basis(node)})"
            origin[key] = origin.get(key, 0) + 1
    ordered = {name: [entries[i] for i in sorted(entries)] for name, entries in out.items()}
    return ordered, notes, origin
