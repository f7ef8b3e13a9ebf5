"""Summaries of a cluster (``placer cluster show``) and of an import: rich renderables, returned, never printed.

A cluster summary counts nodes, GPUs (busy, free, per product), node classes and domains per level, both as
named in the file and as the solver sees them after merging single-child domains. An import summary adds
where every field came from (how many nodes took each from which source, or from a default), the conflicts
between sources and the notes: what the importers could not understand.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from placer.importers.run import ImportReport
from placer.model import API_VERSION
from placer.model.cluster import ClusterSpec, GpuGroup, NodeClass
from placer.model.k8s import field_alias
from placer.model.levels import LEVELS
from placer.topology.graph import Topology

MAX_NOTES = 40


@dataclass(frozen=True)
class ClassLine:
    name: str
    nodes: int
    gpus_per_node: int
    product: str
    interconnect: str
    nvlink_gbps: float | None
    sockets: int
    nics: int | None


@dataclass(frozen=True)
class ClusterSummary:
    name: str
    nodes: int
    schedulable_nodes: int
    gpus: int
    busy_gpus: int
    free_gpus: int
    gpus_by_product: dict[str, int]
    classes: list[ClassLine]
    domains_named: dict[str, int]  # level -> distinct names given in the file
    domains_in_tree: dict[str, int]  # level -> domains the solver keeps
    overrides: list[dict[str, Any]]
    defaults: list[str]  # fields left at the model's defaults
    # GPUs neither busy nor free (their node is cordoned or not Ready), and the free GPUs per product.
    unschedulable_gpus: int = 0
    free_gpus_by_product: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The machine form (``cluster show --json``): versioned, its field names camelCase like every
        placer format (level, product and class names are data and stay as they are)."""
        out: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "ClusterSummary"}
        for name, value in asdict(self).items():
            if name == "classes":
                value = [{field_alias(k): v for k, v in line.items()} for line in value]
            out[field_alias(name)] = value
        return out


def summarize(spec: ClusterSpec, topo: Topology) -> ClusterSummary:
    products: Counter[str] = Counter()
    free_products: Counter[str] = Counter()
    for node in topo.nodes:
        for gpu in node.gpus:
            products[gpu.product] += 1
        for g in node.free_gpus:
            free_products[node.gpu(g).product] += 1
    named = {
        "nvlink-domain": len({n.nvlink_domain for n in spec.nodes if n.nvlink_domain}),
        "rack": len({n.rack for n in spec.nodes if n.rack}),
        "leaf": len({n.leaf for n in spec.nodes if n.leaf}),
    }
    in_tree = Counter(d.level for d in topo.domains.values())
    total = sum(len(n.gpus) for n in topo.nodes)
    busy = sum(len(n.busy) for n in topo.nodes)
    return ClusterSummary(
        name=spec.metadata.name,
        nodes=len(topo.nodes),
        schedulable_nodes=sum(1 for n in topo.nodes if n.schedulable),
        gpus=total,
        busy_gpus=busy,
        free_gpus=sum(len(n.free_gpus) for n in topo.nodes),
        gpus_by_product=dict(sorted(products.items())),
        classes=_classes(spec, topo),
        domains_named=named,
        domains_in_tree={level: in_tree.get(level, 0) for level in LEVELS},
        overrides=[o.model_dump(by_alias=True, exclude_none=True) for o in spec.overrides],
        defaults=_defaults(spec),
        unschedulable_gpus=sum(len(n.gpus) - len(n.busy) for n in topo.nodes if not n.schedulable),
        free_gpus_by_product={p: free_products.get(p, 0) for p in sorted(products)},
    )


def _classes(spec: ClusterSpec, topo: Topology) -> list[ClassLine]:
    lines = []
    counts = Counter(n.node_class for n in spec.nodes)
    for name, cls in sorted(spec.node_classes.items()):
        members = [n for n in topo.nodes if spec.nodes[n.index].node_class == name]
        first = members[0] if members else None
        lines.append(
            ClassLine(
                name=name,
                nodes=counts.get(name, 0),
                gpus_per_node=len(first.gpus) if first else _count(cls),
                product=first.gpus[0].product if first and first.gpus else "-",
                interconnect=cls.interconnect,
                nvlink_gbps=cls.nvlink_gbps,
                sockets=len(first.sockets) if first and first.gpus else cls.sockets,
                nics=len(cls.nics) if cls.nics is not None else None,
            )
        )
    return lines


def _count(cls: NodeClass) -> int:
    if cls.gpus is None:
        return 0
    return cls.gpus.count if isinstance(cls.gpus, GpuGroup) else len(cls.gpus)


def _defaults(spec: ClusterSpec) -> list[str]:
    out = []
    fabric = spec.fabric
    for key in ("nvlink", "pcie", "cross_socket", "nvlink_domain", "network", "spine"):
        name = f"fabric.{type(fabric).model_fields[key].alias or key}"
        if key not in fabric.model_fields_set:
            out.append(name)
            continue
        part = getattr(fabric, key)  # given: name each of its fields left out (a spine without latencyUs, say)
        fields = type(part).model_fields
        out += [f"{name}.{fields[k].alias or k}" for k in fields if k not in part.model_fields_set]
    for name, cls in sorted(spec.node_classes.items()):
        for key in ("cpu", "memory"):
            if key not in cls.model_fields_set and any(
                n.node_class == name and getattr(n, key) is None for n in spec.nodes
            ):
                out.append(f"nodeClasses.{name}.{key}")
        if cls.interconnect == "nvlink" and "interconnect" not in cls.model_fields_set and _count(cls) > 1:
            out.append(f"nodeClasses.{name}.interconnect")
    return out


def render_summary(summary: ClusterSummary) -> RenderableType:
    table = Table(title=f"cluster {summary.name}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    _row(table, "nodes", f"{summary.nodes} ({summary.schedulable_nodes} schedulable)")
    off = f", {summary.unschedulable_gpus} on unschedulable nodes" if summary.unschedulable_gpus else ""
    _row(table, "GPUs", f"{summary.gpus}: {summary.busy_gpus} busy, {summary.free_gpus} free{off}")
    for product, n in summary.gpus_by_product.items():
        _row(table, "  " + product, f"{n} ({summary.free_gpus_by_product.get(product, 0)} free)")
    for level in ("nvlink-domain", "rack", "leaf"):
        named, kept = summary.domains_named.get(level, 0), summary.domains_in_tree.get(level, 0)
        _row(table, f"{level} domains", f"{named} named, {kept} in the solver's tree")
    for o in summary.overrides:
        _row(table, "measured", f"{o['domain']}: {o.get('bandwidthGBps', '-')} GB/s ({o.get('source', '')})")
    classes = Table(title="node classes", title_justify="left")
    for col in ("class", "nodes", "GPUs/node", "product", "interconnect", "NVLink GB/s", "sockets", "NICs"):
        classes.add_column(col, overflow="fold")
    for c in summary.classes:
        _row(
            classes,
            c.name,
            str(c.nodes),
            str(c.gpus_per_node),
            c.product,
            c.interconnect if c.gpus_per_node > 1 else "-",
            f"{c.nvlink_gbps:g}" if c.nvlink_gbps else "-",
            str(c.sockets),
            "-" if c.nics is None else str(c.nics),
        )
    parts: list[RenderableType] = [table, classes]
    if summary.defaults:
        parts.append(Text("left at defaults: " + ", ".join(summary.defaults)))
    return Group(*parts)


def render_import(report: ImportReport, summary: ClusterSummary) -> RenderableType:
    sources = Table(title="sources", title_justify="left")
    for col in ("kind", "file", "gave"):
        sources.add_column(col, overflow="fold")
    for line in report.sources:
        _row(sources, line.kind, line.file, line.summary)
    origins = Table(title="where each field came from (nodes per source)", title_justify="left")
    origins.add_column("field")
    origins.add_column("source", overflow="fold")
    origins.add_column("nodes", justify="right")
    for key, by in report.provenance.items():
        for origin, n in by.items():
            _row(origins, key, Text(origin, style="yellow" if origin == "default" else ""), str(n))
    parts: list[RenderableType] = [sources, render_summary(summary), origins]
    if report.telemetry:
        used = Table(title="telemetry series (--metrics): used, reported or ignored", title_justify="left")
        for col in ("metric", "series", "use"):
            used.add_column(col, overflow="fold", justify="right" if col == "series" else "left")
        for row in report.telemetry:
            _row(used, row.metric, str(row.series), row.use)
        parts.append(used)
    if report.conflicts:
        parts.append(Text(f"conflicts ({len(report.conflicts)}):", style="bold red"))
        parts.extend(_line(f"  - {c}") for c in report.conflicts)
    if report.notes:
        parts.append(Text(f"not understood or not used ({len(report.notes)}):", style="bold"))
        parts.extend(_line(f"  - {n}") for n in report.notes[:MAX_NOTES])
        if len(report.notes) > MAX_NOTES:
            parts.append(Text(f"  ... and {len(report.notes) - MAX_NOTES} more"))
    return Group(*parts)


def _row(table: Table, *cells: RenderableType) -> None:
    """A table row of plain text: names, products and sources come from files and may hold '[/x]'."""
    table.add_row(*(Text(c) if isinstance(c, str) else c for c in cells))


def _line(text: str) -> Text:
    """One message per line, never wrapped, so that it can be grepped."""
    return Text(text, no_wrap=True, overflow="ignore")


def console_width(stream: Any) -> int | None:
    """Terminal width on a terminal; 120 columns when piped, so that files and CI logs stay readable."""
    return None if getattr(stream, "isatty", lambda: False)() else 120
