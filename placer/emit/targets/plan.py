"""What ``placer solve --dry-run`` shows instead of manifests: explain's summary of the placement, the NCCL
settings each instance would get (with their reasons), and the objects the chosen target would create.
Renderables are returned, never printed."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from placer.emit.targets.nccl import instance_settings, runtime_notes
from placer.model.spec import ServingTopology
from placer.topology.graph import Topology


def nccl_table(spec: ServingTopology, topo: Topology, placement, exact_gpus: bool) -> RenderableType:
    t = Table(title="runtime settings per TP group (NCCL env and notes)", title_justify="left")
    for col in ("replica", "instance", "setting", "reason"):
        t.add_column(col)
    for rep in placement.replicas:
        for inst in rep.instances:
            name = f"{inst.pool}-{inst.index}"
            settings = instance_settings(spec, topo, inst, exact_gpus)
            for s in settings:
                t.add_row(str(rep.index), name, Text(f"{s.name}={s.value}"), Text(s.reason))
            for note in runtime_notes(topo, inst, exact_gpus):
                t.add_row(str(rep.index), name, "note", Text(note))
            if not settings:
                t.add_row(str(rep.index), name, "-", "one GPU or nothing to choose: no NCCL settings")
    return t


def objects_table(target: str, docs: list[dict], title: str | None = None) -> RenderableType:
    title = f"objects --target {target} would create ({len(docs)})" if title is None else title
    t = Table(title=title or None, title_justify="left")
    for col in ("kind", "apiVersion", "namespace", "name"):
        t.add_column(col)
    for d in docs:
        meta = d["metadata"]
        t.add_row(d["kind"], d["apiVersion"], meta.get("namespace", "(cluster)"), Text(meta["name"]))
    return t


def render_plan(
    explanation: RenderableType,
    spec: ServingTopology,
    topo: Topology,
    placement,
    target: str,
    docs: list[dict],
    nccl: bool,
    topology_file: tuple[str, list[dict]] | None = None,
) -> RenderableType:
    """``topology_file``: (FILE, the objects) when --topology-objects writes them apart from the stream."""
    parts: list[RenderableType] = [explanation]
    if nccl:
        parts.append(nccl_table(spec, topo, placement, exact_gpus=target == "dra"))
    parts.append(objects_table(target, docs))
    if topology_file is not None:
        path, objects = topology_file
        # A line, not the table's title: a title wraps to the table's width, and paths are long.
        parts.append(Text(f"objects --topology-objects {path} would hold ({len(objects)})"))
        parts.append(objects_table(target, objects, title=""))
    return Group(*parts)
