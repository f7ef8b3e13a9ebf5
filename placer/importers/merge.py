"""Parsed sources -> one ``kind: Cluster`` document, with the provenance of every field and every conflict.

Phase 1 fixes the node set: the Kubernetes nodes when ``--nodes`` is given (other sources only annotate
them), else every node Slurm, the AWS topology or a ``--topo NAME=FILE`` names.
Phase 2 applies the sources in a fixed order, later ones overriding earlier ones field by field:

    defaults < Slurm < AWS instance topology < NCCL XML < nvidia-smi topo -m < Kubernetes nodes < pods

Inventory files describe hardware; the live cluster comes later because it is what the scheduler will act on
(so a GPU count from ``status.capacity`` beats one from a topology file). Every override of a different
value is recorded as a conflict (``--strict`` makes them errors), never resolved silently. Domain names are
compared as partitions: two sources may name the same leaf differently; they conflict only when they group
nodes differently.
Phase 3 (``derive.py``) derives what the model needs (NVLink GB/s from ``NV#`` and the GPU generation,
sockets, rails) and fills the rest from documented defaults, each counted in the report. Where no source
shows the NVLinks, the product table decides (``gpus.links_of_product``: only NVSwitch boards are
``nvlink``), and says so. ``document.py`` then groups nodes into classes and validates the result;
nccl-tests figures become ``overrides`` on the domain the test spanned.
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from dataclasses import dataclass, replace

from placer.importers import gpus as gpu_table
from placer.importers import hardware as hw
from placer.importers.aws_topology import InstanceTopology
from placer.importers.common import Note, is_node_name
from placer.importers.derive import Defaults, derive, products_from_runs
from placer.importers.domains import RACK_FROM_NVLINK, add_domain, check_partitions, final_domains
from placer.importers.k8s_nodes import ZONE, LabelScheme, NodesFile, domains_from_labels, kept_labels
from placer.importers.k8s_pods import PodsFile
from placer.importers.ledger import Draft, Ledger
from placer.importers.nccl_tests import NcclTestRun
from placer.importers.resourceslices import ResourceSlices
from placer.importers.slurm import SlurmTopology
from placer.model.errors import InputError

_GLOB = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class HardwareFile:
    pattern: str  # fnmatch pattern over node names ("*" for every node)
    hardware: hw.NodeHardware


@dataclass(frozen=True)
class Sources:
    """Everything parsed, in command-line order within each kind."""

    nodes: NodesFile | None = None
    pods: PodsFile | None = None
    hardware: tuple[HardwareFile, ...] = ()  # NCCL XML files first, then topo -m files
    nccl_tests: tuple[NcclTestRun, ...] = ()
    slurm: SlurmTopology | None = None
    aws: InstanceTopology | None = None
    resourceslices: ResourceSlices | None = None  # GPU identifiers only (gpuIds), applied after the merge


def apply_sources(sources: Sources, scheme: LabelScheme, defaults: Defaults) -> Ledger:
    """Phases 1-3: the drafts of every node with values, provenance, busy GPUs and domains."""
    ledger = Ledger()
    named = _node_set(sources, ledger)
    if sources.slurm is not None:
        _apply_slurm(sources.slurm, ledger)
    if sources.aws is not None:
        _apply_aws(sources.aws, ledger)
    for k, hw_file in enumerate(sources.hardware):
        _apply_hardware(hw_file, ledger, named.get(k))
    if sources.nodes is not None:
        _apply_k8s(sources.nodes, scheme, ledger)
    tested = products_from_runs(sources.nccl_tests, ledger)
    for draft in ledger.drafts.values():
        derive(draft, defaults, ledger, tested.get(draft.name))
    if sources.pods is not None:
        _apply_pods(sources.pods, ledger)
    for draft in ledger.drafts.values():
        _mark_busy(draft)
        if "nvlink-domain" in draft.domains and "rack" not in draft.domains:
            # A node without a rack is alone in its rack, so a multi-node NVLink domain needs one to nest in.
            add_domain(draft, "rack", final_domains(draft)["nvlink-domain"], RACK_FROM_NVLINK)
    check_partitions(ledger)
    return ledger


# --- phase 1: the node set --------------------------------------------------------------------------------


def _node_set(sources: Sources, ledger: Ledger) -> dict[int, str]:
    """Create the nodes; returns, per hardware file that names its own node, that node."""
    if sources.nodes is not None:
        for node in sources.nodes.nodes:
            ledger.add(node.name)
            for alias in (node.labels.get("kubernetes.io/hostname"), node.instance_id):
                if alias:
                    ledger.alias(alias, node.name)
        return {}
    if sources.slurm is not None:
        for name in sources.slurm.nodes:
            ledger.add(name)
    if sources.aws is not None:
        for inst in sources.aws.instances:
            ledger.add(inst.instance_id)
    inventory = bool(sources.slurm or sources.aws)
    named: dict[int, str] = {}
    for k, hw_file in enumerate(sources.hardware):
        pattern, source = hw_file.pattern, hw_file.hardware.source
        if not _GLOB.search(pattern):
            if inventory and ledger.resolve(pattern) is None:
                continue  # reported when applied: a name the inventory does not know
            if not is_node_name(pattern):
                raise InputError(f"{source}: {pattern!r} is not a node name (lower-case DNS-1123, e.g. dgx-01)")
            ledger.add(pattern)
        elif not inventory:
            if pattern != "*":
                raise InputError(
                    f"{source}: pattern {pattern!r} needs --nodes, --slurm or --aws-topology to match node names "
                    "against; give one node name instead (NAME=FILE)"
                )
            named[k] = _name_from_file(source, ledger)
            ledger.add(named[k])
            ledger.notes.append(
                Note(source, None, f"no node inventory given: the node is named {named[k]!r} after the file")
            )
    return named


def _name_from_file(source: str, ledger: Ledger) -> str:
    stem = re.sub(r"\.[A-Za-z0-9]+$", "", source.replace("\\", "/").rsplit("/", 1)[-1]).lower()
    base = re.sub(r"[^a-z0-9.-]+", "-", stem).strip("-.")[:60] or "node"
    name, k = base, 2
    while name in ledger.drafts:
        name, k = f"{base}-{k}", k + 1
    return name


# --- phase 2: sources in order ----------------------------------------------------------------------------


def _apply_slurm(slurm: SlurmTopology, ledger: Ledger) -> None:
    origin = f"slurm ({slurm.source})"
    unknown = []
    for name in slurm.nodes:
        draft = ledger.resolve(name)
        if draft is None:
            unknown.append(name)
            continue
        if name in slurm.leaf_of:
            add_domain(draft, "leaf", slurm.leaf_of[name], origin)
        if name in slurm.nvlink_of:
            add_domain(draft, "nvlink-domain", slurm.nvlink_of[name], origin)
    if unknown:
        ledger.notes.append(
            Note(slurm.source, None, f"{len(unknown)} Slurm node(s) are not cluster nodes, e.g. {unknown[0]}")
        )


def _apply_aws(aws: InstanceTopology, ledger: Ledger) -> None:
    origin = f"aws-topology ({aws.source})"
    unknown = []
    for inst in aws.instances:
        draft = ledger.resolve(inst.instance_id)
        if draft is None:
            unknown.append(inst.instance_id)
            continue
        if inst.leaf:
            add_domain(draft, "leaf", inst.leaf, origin)
        if inst.instance_type and "node.kubernetes.io/instance-type" not in draft.labels:
            draft.labels["node.kubernetes.io/instance-type"] = inst.instance_type
    if unknown:
        ledger.notes.append(Note(aws.source, None, f"{len(unknown)} instance(s) match no node, e.g. {unknown[0]}"))


def _apply_hardware(hw_file: HardwareFile, ledger: Ledger, own_node: str | None) -> None:
    found = hw_file.hardware
    origin = f"{found.kind} ({found.source})"
    if own_node is not None:
        names = [own_node]
    elif _GLOB.search(hw_file.pattern):
        names = [n for n in ledger.drafts if fnmatch.fnmatchcase(n, hw_file.pattern)]
    else:
        target = ledger.resolve(hw_file.pattern)
        names = [target.name] if target is not None else []
    if not names:
        ledger.notes.append(Note(found.source, None, f"pattern {hw_file.pattern!r} matches no node; file not used"))
        return
    for name in names:
        draft = ledger.drafts[name]
        before = draft.hardware
        for what in hw.conflicts(before, found) if before is not None else []:
            ledger.conflicts.append(f"node {name}: {before.source} and {found.source} {what}; using {found.source}")
        draft.hardware = _complement(found, before) if before is not None else found
        ledger.set(draft, "gpus", len(found.gpus), origin)


def _complement(new: hw.NodeHardware, old: hw.NodeHardware) -> hw.NodeHardware:
    """The later file wins, but what only the earlier one knows (a hint file's PCI device ids and compute
    capability; its NICs' kind and speed) is kept, GPU by GPU, when both describe the same number of GPUs."""
    if len(new.gpus) != len(old.gpus):
        return new
    gpus = tuple(
        replace(g, device_id=g.device_id or o.device_id, sm=g.sm or o.sm, bus_id=g.bus_id or o.bus_id)
        for g, o in zip(new.gpus, old.gpus, strict=True)
    )
    kept = any(o.bus_id and not g.bus_id for g, o in zip(new.gpus, old.gpus, strict=True))
    return replace(
        new,
        gpus=gpus,
        nics=_complement_nics(new.nics, old.nics),
        bus_ids_from=(old.bus_ids_from or old.source) if kept else new.bus_ids_from,
    )


def _complement_nics(new: tuple[hw.NicInfo, ...], old: tuple[hw.NicInfo, ...]) -> tuple[hw.NicInfo, ...]:
    """A NIC's kind and speed from the earlier file's NIC of the same name; or, when the earlier file's NICs are
    all of one kind and both files list as many, that kind (nvidia-smi's NIC names need not be NCCL's). A later
    file without NICs keeps the earlier file's."""
    if not new:
        return old
    by_name = {n.name: n for n in old}
    kinds = {n.kind for n in old}
    shared = next(iter(kinds)) if len(kinds) == 1 and len(new) == len(old) else None
    out = []
    for nic in new:
        twin = by_name.get(nic.name)
        kind = nic.kind or (twin.kind if twin else None) or shared
        speed = nic.bandwidth_gbps or (twin.bandwidth_gbps if twin else None)
        out.append(replace(nic, kind=kind, bandwidth_gbps=speed))
    return tuple(out)


def _apply_k8s(nodes: NodesFile, scheme: LabelScheme, ledger: Ledger) -> None:
    origin = f"kubernetes ({nodes.source})"
    labels_origin = f"node labels ({nodes.source})"
    found = domains_from_labels(list(nodes.nodes), scheme, nodes.source)
    ledger.notes.extend(found.notes)
    coarse: list[str] = []
    for node in nodes.nodes:
        draft = ledger.drafts[node.name]
        draft.labels.update(kept_labels(node, scheme))
        capacity = node.gpu_capacity if node.gpu_capacity is not None or nodes.shape == "label dump" else 0
        if capacity is not None:
            if draft.hardware is not None and len(draft.hardware.gpus) != capacity:
                ledger.notes.append(
                    Note(draft.hardware.source, None, f"node {node.name}: GPU layout not used (GPU counts differ)")
                )
                draft.hardware = None
            ledger.set(draft, "gpus", capacity, origin)
            if node.gpu_allocatable is not None and node.gpu_allocatable < capacity:
                draft.unavailable = capacity - node.gpu_allocatable
                ledger.notes.append(
                    Note(
                        nodes.source,
                        None,
                        f"node {node.name}: {draft.unavailable} of {capacity} GPUs not allocatable: marked busy",
                    )
                )
        if node.product:
            ledger.set(draft, "product", node.product, labels_origin)
        if node.memory_gib:
            product = node.product or draft.values.get("product")
            _set_reported_memory(draft, product, node.memory_gib, nodes.source, ledger)
        draft.sm = node.sm or draft.sm
        for key, value in (("cpu", node.cpu), ("memory", node.memory)):
            if value is not None:
                ledger.set(draft, key, value, origin)
        if not node.schedulable:
            ledger.set(draft, "schedulable", False, origin)
            ledger.notes.append(Note(nodes.source, None, f"node {node.name}: {node.why_unschedulable}: unschedulable"))
        if node.taints:
            ledger.notes.append(
                Note(
                    nodes.source,
                    None,
                    f"node {node.name}: taints {', '.join(node.taints)} (pods placer emits carry no tolerations)",
                )
            )
        replicas = node.labels.get("nvidia.com/gpu.replicas", "1")
        strategy = node.labels.get("nvidia.com/gpu.sharing-strategy", "none")
        if replicas.isdigit() and int(replicas) > 1 and draft.values.get("gpus"):
            physical = node.labels.get("nvidia.com/gpu.count", "")
            draft.boards_gpus = int(physical) if physical.isdigit() else draft.values["gpus"] // int(replicas)
        if replicas not in ("", "0", "1") or strategy not in ("", "none"):  # 0: what GFD writes for MIG devices
            ledger.notes.append(
                Note(
                    nodes.source,
                    None,
                    f"node {node.name}: GPUs shared ({strategy}, replicas {replicas}): counts are replicas",
                )
            )
        for level, value in found.domains[node.name].items():
            if level == "leaf" and draft.domains.get("leaf") and _only_zone(node, scheme):
                coarse.append(node.name)  # a finer source (AWS, Slurm) named the leaf: the zone does not win
                continue
            add_domain(draft, level, value, labels_origin)
    if coarse:
        ledger.notes.append(
            Note(
                nodes.source,
                None,
                f"leaf: {len(coarse)} node(s) (e.g. {coarse[0]}) carry only the coarse {ZONE} label; the finer leaf "
                "from Slurm or AWS instance topology is kept (--label-preset zone uses the zone)",
            )
        )


def _set_reported_memory(draft: Draft, product: str | None, reported: float, source: str, ledger: Ledger) -> None:
    """A driver-reported size (GFD's label) becomes the product's one figure: its nominal size when a little
    below it, so that a memory floor means the same on every source's nodes."""
    figure, said = gpu_table.memory_figure(product, reported)
    origin = f"node labels ({source})" if figure == reported else f"product name (labels report {reported:g})"
    ledger.set(draft, "memoryGiB", figure, origin)
    if said:
        ledger.notes.append(Note(source, None, said))


def _only_zone(node, scheme: LabelScheme) -> bool:
    """Under ``auto``, the leaf a node's labels give comes from the zone, the last-resort key."""
    if scheme.name != "auto":
        return False
    return next((k for k in scheme.levels.get("leaf", ()) if node.labels.get(k)), None) == ZONE


def _apply_pods(pods: PodsFile, ledger: Ledger) -> None:
    ledger.notes.extend(pods.notes)
    unknown: Counter[str] = Counter()
    for use in pods.usages:
        draft = ledger.resolve(use.node)
        if draft is None:
            unknown[use.node] += 1
            continue
        draft.used_cpu_m += use.cpu_m
        draft.used_memory_bytes += use.memory_bytes
        if not use.gpus:
            continue
        count = draft.values.get("gpus") or 0
        taken = set(draft.busy)
        wanted = list(use.gpu_indices or ())
        if wanted and all(0 <= i < count and i not in taken for i in wanted):
            draft.busy.extend(wanted)
        else:
            free = [i for i in range(count) if i not in taken]
            if len(free) < use.gpus:
                ledger.notes.append(
                    Note(pods.source, None, f"node {draft.name}: pods request more GPUs than its {count}; capped")
                )
            draft.busy.extend(free[: use.gpus])
        draft.origin["busy"] = f"pods ({pods.source})"
    for name, n in sorted(unknown.items()):
        ledger.notes.append(Note(pods.source, None, f"{n} pod(s) on node {name}, which is not in the cluster"))


def _mark_busy(draft: Draft) -> None:
    """GPUs the device plugin does not offer (capacity - allocatable) are busy too: the highest free ones."""
    if not draft.unavailable:
        return
    count = draft.values.get("gpus") or 0
    free = [i for i in range(count) if i not in draft.busy]
    draft.busy.extend(free[len(free) - min(draft.unavailable, len(free)) :])
