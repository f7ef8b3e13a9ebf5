"""``placer cluster import`` end to end: read and parse every file, merge, build, validate, report.

The result is validated twice over: against the cluster model (what ``placer validate`` checks) and by
building the topology the solver would use, so a file this writes always loads.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from placer.importers.aws_topology import parse_instance_topology
from placer.importers.common import Note, read_source, split_assignment
from placer.importers.document import build_document, fabric_from_hardware, nccl_overrides
from placer.importers.domains import check_nesting
from placer.importers.k8s_nodes import label_scheme, parse_nodes
from placer.importers.k8s_pods import parse_pods
from placer.importers.ledger import DEFAULT, Ledger
from placer.importers.merge import Defaults, HardwareFile, Sources, apply_sources
from placer.importers.nccl_tests import NcclTestRun, parse_nccl_tests
from placer.importers.nccl_xml import parse_nccl_xml
from placer.importers.prom import MetricsFile, parse_metrics
from placer.importers.resourceslices import gpu_ids, parse_resourceslices
from placer.importers.slurm import parse_slurm
from placer.importers.telemetry import (
    ClusterView,
    MetricsInput,
    Telemetry,
    Usage,
    import_telemetry,
    match_node,
)
from placer.importers.topo_matrix import parse_topo_matrix
from placer.model.cluster import ClusterSpec
from placer.model.errors import InputError
from placer.model.load import collector_paused
from placer.topology.build import build_topology
from placer.topology.graph import Topology


@dataclass(frozen=True)
class ImportOptions:
    nodes: Path | None = None
    pods: Path | None = None
    topo: tuple[str, ...] = ()  # "[PATTERN=]FILE"
    nccl_xml: tuple[str, ...] = ()
    nccl_tests: tuple[Path, ...] = ()
    slurm: Path | None = None
    aws_topology: Path | None = None
    resourceslices: Path | None = None
    metrics: tuple[str, ...] = ()  # "[NODE=]FILE": Prometheus API JSON or /metrics text
    label_preset: str = "auto"
    level_labels: tuple[str, ...] = ()  # "LEVEL=KEY"
    gpu_product: str | None = None
    gpu_memory_gib: float | None = None
    name: str = "imported"
    strict: bool = False


@dataclass(frozen=True)
class SourceLine:
    kind: str
    file: str
    summary: str


@dataclass
class ImportReport:
    sources: list[SourceLine] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    provenance: dict[str, dict[str, int]] = field(default_factory=dict)  # field -> origin -> nodes
    telemetry: list[Usage] = field(default_factory=list)  # every metric seen in --metrics, and its use


@dataclass(frozen=True)
class ImportResult:
    document: dict[str, Any]
    spec: ClusterSpec
    topology: Topology
    report: ImportReport


def read_metrics(options: ImportOptions, lines: list[SourceLine]) -> tuple[tuple[str | None, MetricsFile], ...]:
    """Parse every --metrics file: (NODE of NODE=FILE or None, the file's series)."""
    out = []
    for value in options.metrics:
        node, sep, file = value.partition("=")
        if not sep:
            node, file = "", value
        elif not node or not file:
            raise InputError(f"--metrics {value!r}: expected NODE=FILE (e.g. 'dgx-001=vllm.txt') or FILE")
        parsed = parse_metrics(read_source(Path(file)), file)
        out.append((node or None, parsed))
        where = f"{node}: " if node else ""
        lines.append(SourceLine("telemetry", file, f"{where}{len(parsed.series)} series ({parsed.form})"))
    return tuple(out)


def read_sources(options: ImportOptions) -> tuple[Sources, list[SourceLine]]:
    """Read and parse every file the options name; parse errors name the file (and line)."""
    lines: list[SourceLine] = []
    nodes = pods = slurm = aws = None
    if options.nodes is not None:
        nodes = parse_nodes(read_source(options.nodes), str(options.nodes))
        gpus = sum(n.gpu_capacity or 0 for n in nodes.nodes)
        lines.append(
            SourceLine("kubernetes nodes", str(options.nodes), f"{len(nodes.nodes)} nodes, {gpus} GPUs ({nodes.shape})")
        )
    if options.pods is not None:
        pods = parse_pods(read_source(options.pods), str(options.pods))
        held = sum(u.gpus for u in pods.usages)
        lines.append(
            SourceLine("kubernetes pods", str(options.pods), f"{len(pods.usages)} bound pods hold {held} GPUs")
        )
    hardware: list[HardwareFile] = []
    for value in options.nccl_xml:
        pattern, file = split_assignment(value, "--nccl-xml")
        xml = parse_nccl_xml(read_source(Path(file)), file)
        hardware.append(HardwareFile(pattern, xml.to_hardware()))
        kind = "hint file" if xml.hint_file else "dump"
        lines.append(
            SourceLine("NCCL topology XML", file, f"{pattern}: {len(xml.gpus)} GPUs, {len(xml.nics)} NICs ({kind})")
        )
    for value in options.topo:
        pattern, file = split_assignment(value, "--topo")
        matrix = parse_topo_matrix(read_source(Path(file)), file)
        hardware.append(HardwareFile(pattern, matrix.to_hardware()))
        lines.append(
            SourceLine(
                "nvidia-smi topo -m", file, f"{pattern}: {len(matrix.gpus)} GPUs, {len(matrix.nic_columns)} NICs"
            )
        )
    runs = []
    for path in options.nccl_tests:
        run = parse_nccl_tests(read_source(path), str(path))
        runs.append(run)
        peak = run.peak()
        figure = (
            f"peak busbw {peak.out_of_place.busbw_gbps:g} GB/s"
            if peak and peak.out_of_place.busbw_gbps
            else "no usable row"
        )
        if run.avg_busbw_gbps is not None:
            figure += f", average bus bandwidth {run.avg_busbw_gbps:g} GB/s"
        if run.cut_short():
            figure += " (cut short: not attached)"
        lines.append(SourceLine("nccl-tests", str(path), f"{len(run.hosts)} host(s), {len(run.rows)} sizes, {figure}"))
    if options.slurm is not None:
        slurm = parse_slurm(read_source(options.slurm), str(options.slurm))
        lines.append(SourceLine("slurm topology", str(options.slurm), f"{slurm.plugin}: {len(slurm.nodes)} nodes"))
    if options.aws_topology is not None:
        aws = parse_instance_topology(read_source(options.aws_topology), str(options.aws_topology))
        lines.append(SourceLine("aws instance topology", str(options.aws_topology), f"{len(aws.instances)} instances"))
    slices = None
    if options.resourceslices is not None:
        slices = parse_resourceslices(read_source(options.resourceslices), str(options.resourceslices))
        on = len(slices.nodes())
        lines.append(
            SourceLine("DRA ResourceSlices", str(options.resourceslices), f"{len(slices.gpus)} GPUs on {on} nodes")
        )
    sources = Sources(nodes, pods, tuple(hardware), tuple(runs), slurm, aws, slices)
    return sources, lines


def _levels(values: tuple[str, ...]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for value in values:
        level, sep, key = value.partition("=")
        if not sep:
            raise InputError(f"--level-label {value!r}: expected LEVEL=KEY, e.g. rack=example.com/rack")
        out.setdefault(level.strip(), []).append(key.strip())
    return out


def merge_sources(
    sources: Sources,
    options: ImportOptions,
    lines: list[SourceLine] | None = None,
    metrics: tuple[tuple[str | None, MetricsFile], ...] = (),
) -> ImportResult:
    """Merge parsed sources into a validated cluster (the part of the import that does not read files)."""
    if not (sources.nodes or sources.slurm or sources.aws or sources.hardware):
        raise InputError("nothing to import: give --nodes, --topo, --nccl-xml, --slurm or --aws-topology")
    try:
        scheme = label_scheme(options.label_preset, _levels(options.level_labels))
    except ValueError as exc:
        raise InputError(str(exc)) from None
    ledger = apply_sources(sources, scheme, Defaults(options.gpu_product, options.gpu_memory_gib))
    if not ledger.drafts:
        raise InputError("no nodes found in the sources (an empty node list?)")
    check_nesting(ledger)
    fabric, fabric_origin = fabric_from_hardware(ledger)
    document, notes = build_document(ledger, options.name, fabric)
    ids, id_notes, id_origin = gpu_ids(ledger.drafts, ledger.aliases, sources.resourceslices)
    for node in document["nodes"]:
        if node["name"] in ids:
            node["gpuIds"] = ids[node["name"]]
    notes += id_notes
    spec, topo = _validate(document)
    if sources.nccl_tests:
        overrides, more = nccl_overrides(sources.nccl_tests, ledger, topo)
        notes += more
        if overrides:
            document["overrides"] = overrides
            spec, topo = _validate(document)
    usage: list[Usage] = []
    if metrics:
        found = _telemetry(metrics, sources, ledger, topo, ids)
        usage = found.usage
        notes += found.notes
        for node in document["nodes"]:
            if node["name"] in found.metrics:
                node["metrics"] = found.metrics[node["name"]]
        spec, topo = _validate(document)
    report = _report(sources, ledger, lines or [], notes, fabric_origin)
    report.telemetry = usage
    if any("metrics" in n for n in document["nodes"]):
        report.provenance["metrics"] = {"telemetry (--metrics)": sum("metrics" in n for n in document["nodes"])}
    if id_origin:
        report.provenance["gpuIds"] = dict(sorted(id_origin.items()))
    if sources.resourceslices is not None:
        report.notes[:0] = list(sources.resourceslices.notes)
    if options.strict:
        _refuse_cut_runs(sources.nccl_tests)
    if options.strict and report.conflicts:
        raise InputError("conflicting sources (--strict):\n  " + "\n  ".join(report.conflicts))
    return ImportResult(document, spec, topo, report)


def _refuse_cut_runs(runs: tuple[NcclTestRun, ...]) -> None:
    """Under --strict, an nccl-tests log that stopped before its largest size is an error, not a note."""
    cut = [f"{r.source}: {why}" for r in runs if (why := r.cut_short())]
    if cut:
        raise InputError(
            "nccl-tests run(s) cut short (--strict): no figure can be taken from them:\n  " + "\n  ".join(cut)
        )


def import_cluster(options: ImportOptions) -> ImportResult:
    with collector_paused():
        sources, lines = read_sources(options)
        metrics = read_metrics(options, lines)
        return merge_sources(sources, options, lines, metrics)


def _telemetry(
    metrics: tuple[tuple[str | None, MetricsFile], ...],
    sources: Sources,
    ledger: Ledger,
    topo: Topology,
    ids: dict[str, list[dict[str, Any]]],
) -> Telemetry:
    """The cluster as the telemetry mapping sees it, and the mapping's result."""

    def resolve(name: str) -> str | None:
        draft = ledger.resolve(name)
        return draft.name if draft is not None else None

    pods: dict[str, tuple[str, tuple[int, ...] | None]] = {}
    bare: Counter[str] = Counter()
    for use in sources.pods.usages if sources.pods else ():
        node = resolve(use.node)
        if node is not None:
            pods[use.pod] = (node, use.gpu_indices)
            bare[use.pod.rpartition("/")[2]] += 1
    for use in sources.pods.usages if sources.pods else ():
        name = use.pod.rpartition("/")[2]
        if bare[name] == 1 and use.pod in pods:
            pods.setdefault(name, pods[use.pod])  # engines' series may carry pod without namespace
    uuids = {g["uuid"]: (node, g["index"]) for node, entries in ids.items() for g in entries if g.get("uuid")}
    view = ClusterView({n.name: len(n.gpus) for n in topo.nodes}, resolve, pods, uuids)
    names = [n.name for n in topo.nodes]
    inputs: list[MetricsInput] = []
    notes: list[Note] = []
    for node, parsed in metrics:
        targets = match_node(node, names, resolve) if node is not None else [None]
        if not targets:
            notes.append(
                Note(parsed.source, None, f"NODE {node!r} matches no node; series that name no node are ignored")
            )
            targets = [None]
        inputs += [MetricsInput(parsed, t) for t in targets]
        notes += parsed.notes
    found = import_telemetry(inputs, view)
    found.notes[:0] = notes
    return found


def _validate(document: dict[str, Any]) -> tuple[ClusterSpec, Topology]:
    try:
        spec = ClusterSpec.model_validate(document)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)[:5])
        raise InputError(f"the imported cluster is not valid: {problems}") from None
    return spec, build_topology(spec)


def _report(
    sources: Sources,
    ledger: Ledger,
    lines: list[SourceLine],
    notes: list[Note],
    fabric_origin: dict[str, tuple[str, int]],
) -> ImportReport:
    report = ImportReport(sources=list(lines), conflicts=list(ledger.conflicts))
    parsed = [sources.nodes, sources.pods, sources.slurm, sources.aws, *sources.nccl_tests]
    for item in parsed:
        if item is not None:
            report.notes.extend(item.notes)
    seen_hw: set[int] = set()
    for hw_file in sources.hardware:
        if id(hw_file.hardware) not in seen_hw:
            seen_hw.add(id(hw_file.hardware))
            report.notes.extend(hw_file.hardware.notes)
    report.notes.extend(ledger.notes)
    report.notes.extend(notes)
    report.notes[:] = dict.fromkeys(report.notes)  # a note reached through two paths is listed once
    provenance: dict[str, Counter[str]] = {}
    for draft in ledger.drafts.values():
        gpu_fields = draft.values.get("gpus", 0) > 0
        for key in ("gpus", "product", "memoryGiB", "interconnect", "nvlinkGBps", "sockets", "cpu", "memory"):
            if key in ("product", "memoryGiB") and not gpu_fields:
                continue
            if key in ("interconnect", "nvlinkGBps", "sockets") and draft.values.get("gpus", 0) < 2:
                continue
            if key == "nvlinkGBps" and draft.values.get("interconnect") != "nvlink":
                continue
            provenance.setdefault(key, Counter())[draft.origin.get(key, DEFAULT)] += 1
        for level, by in draft.domains.items():
            provenance.setdefault(level, Counter())[list(by)[-1]] += 1
        if draft.busy:
            provenance.setdefault("busy", Counter())[draft.origin.get("busy", "kubernetes (unavailable GPUs)")] += 1
    for key, (origin, nodes) in fabric_origin.items():
        provenance[key] = Counter({origin: nodes})
    report.provenance = {k: dict(sorted(v.items())) for k, v in provenance.items()}
    return report
