"""Phases 1 and 2 of the SVG (``placer explain --svg``): what to draw in detail, and how big each box is.

Phase 1 (plan) decides what to draw in detail. Clusters up to ``DETAIL_GPUS`` GPUs and ``DETAIL_NODES`` nodes
are drawn whole. Above that, every domain whose nodes hold no placed GPU and no router collapses into one
summary box (an unused leaf becomes one box; an unused rack inside a used leaf another); more than
``MAX_SUMMARIES`` such boxes side by side merge into runs; and if the GPUs left in detail still exceed the
budget, unused nodes inside used domains collapse too. The picture then grows with the placement, not with
the cluster.
Phase 2 (layout) sizes boxes bottom up: a domain whose children are nodes stacks them in columns like a rack;
any other domain flows its children left to right, wrapping rows. Nothing here draws: ``svg.py`` does.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from placer.model.placement import Placement
from placer.model.spec import ServingTopology
from placer.topology.graph import Gpu, Node, Topology

DETAIL_GPUS = 2048  # clusters up to this size are drawn whole; above it, the GPUs drawn in detail
DETAIL_NODES = 512
MAX_SUMMARIES = 64  # more summary boxes than this in one domain merge into runs

CELL, PITCH, ROW_GPUS, SOCKET_GAP, PAD = 10, 12, 8, 3, 4  # GPU cell, cell distance, cells per row, gaps
NODE_FONT, GROUP_FONT, TOP_FONT, LEGEND_FONT = 8, 9, 10, 9
CHAR_W = 0.62  # monospace advance per em: boxes are sized without measuring text
NODE_ROWS = 16  # a rack's node boxes form columns of at most this many
MAX_ROW_W = 1200  # other domains wrap their children at this width
MAX_LABEL = 28  # characters of a name shown in a box (the full name is in its title)

_PLURAL = {"leaf": "leaves"}

InstanceKey = tuple[int, str, int]  # (replica, pool, instance index)
Slot = tuple["_Box", int, int, int, int]  # a child box at (x, y) in a slot of (w, h), relative to its parent


def _text_w(text: str, size: int) -> int:
    return math.ceil(len(text) * size * CHAR_W)


def _short(name: str, limit: int = MAX_LABEL) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "\u2026"


# ---------------------------------------------------------------------------------------------- boxes


@dataclass
class _Counts:
    nodes: int = 0
    gpus: int = 0
    free: int = 0
    busy: int = 0
    placed: int = 0

    def __iadd__(self, other: _Counts) -> _Counts:
        self.nodes, self.gpus = self.nodes + other.nodes, self.gpus + other.gpus
        self.free, self.busy, self.placed = self.free + other.free, self.busy + other.busy, self.placed + other.placed
        return self

    def words(self) -> str:
        placed = f", {self.placed} placed" if self.placed else ""
        return (
            f"{self.nodes} node{'s' * (self.nodes != 1)}, {self.gpus} GPUs: {self.free} free, {self.busy} busy{placed}"
        )


@dataclass
class _Box:
    w: int
    h: int


@dataclass
class _NodeBox(_Box):
    node: Node


@dataclass
class _SummaryBox(_Box):
    lines: list[str]
    title: str


@dataclass
class _GroupBox(_Box):
    header: str
    title: str
    font: int
    children: list[Slot] = field(default_factory=list)


class Layout:
    """Who holds each GPU and router, counts per domain, and the box tree to draw (phases 1 and 2)."""

    def __init__(self, spec: ServingTopology, topo: Topology, placement: Placement) -> None:
        self.spec, self.topo, self.placement = spec, topo, placement
        self.owner: dict[tuple[int, int], InstanceKey] = {}  # (node index, GPU index) -> instance
        self.routers: dict[int, list[int]] = defaultdict(list)  # node index -> replicas whose router it hosts
        for rep in sorted(placement.replicas, key=lambda r: r.index):
            for inst in rep.instances:
                if inst.pool not in spec.pools:
                    raise ValueError(f"the placement names pool {inst.pool!r}, which is not in the spec")
                for pod in inst.pods:
                    node = self._node(pod.node)
                    self.owner.update({(node.index, g): (rep.index, inst.pool, inst.index) for g in pod.gpus})
            if rep.router is not None:
                self.routers[self._node(rep.router).index].append(rep.index)
        self.counts = self._count()

    def _node(self, name: str) -> Node:
        try:
            return self.topo.node_by_name(name)
        except KeyError:
            raise ValueError(f"the placement names node {name!r}, which is not in cluster {self.topo.name!r}") from None

    # Phase 1: counts per domain, and what to draw in detail.

    def _count(self) -> dict[str, _Counts]:
        out: dict[str, _Counts] = {}
        stack = [(self.topo.root, False)]
        while stack:
            dom_id, children_done = stack.pop()
            dom = self.topo.domains[dom_id]
            if dom.level == "node":
                out[dom_id] = self._node_counts(self.topo.nodes[dom.nodes[0]])
            elif children_done:
                out[dom_id] = _Counts()
                for child in dom.children:
                    out[dom_id] += out[child]
            else:
                stack += [(dom_id, True)] + [(child, False) for child in dom.children]
        return out

    def _node_counts(self, node: Node) -> _Counts:
        placed = sum((node.index, g.index) in self.owner for g in node.gpus)
        free = sum((node.index, g) not in self.owner for g in node.free_gpus)
        return _Counts(1, len(node.gpus), free, len(node.gpus) - free - placed, placed)

    def _used(self, dom_id: str) -> bool:
        return self.counts[dom_id].placed > 0 or any(n in self.routers for n in self.topo.domains[dom_id].nodes)

    def plan(self) -> _Box:
        whole = self.counts[self.topo.root]
        if whole.gpus <= DETAIL_GPUS and whole.nodes <= DETAIL_NODES:
            return self._box(self.topo.root, collapse=False, collapse_nodes=False)
        box = self._box(self.topo.root, collapse=True, collapse_nodes=False)
        if _detailed_gpus(box) > DETAIL_GPUS:
            box = self._box(self.topo.root, collapse=True, collapse_nodes=True)
        return box

    # Phase 2: layout, bottom up.

    def _box(self, dom_id: str, collapse: bool, collapse_nodes: bool) -> _Box:
        dom = self.topo.domains[dom_id]
        if dom.level == "node":
            return self._node_box(self.topo.nodes[dom.nodes[0]])
        rack_like = all(self.topo.domains[c].level == "node" for c in dom.children)
        boxes: list[_Box | str] = []  # a box, or the id of a domain to summarise
        for child in dom.children:
            is_node = self.topo.domains[child].level == "node"
            if collapse and not self._used(child) and (collapse_nodes or not is_node):
                boxes.append(child)
            else:
                boxes.append(self._box(child, collapse, collapse_nodes))
        return self._group(dom_id, self._summaries(boxes, merge_over=1 if rack_like else MAX_SUMMARIES), rack_like)

    def _summaries(self, boxes: list[_Box | str], merge_over: int) -> list[_Box]:
        """One summary box per collapsed domain; consecutive ones merge into a run when there are too many."""
        if sum(isinstance(b, str) for b in boxes) <= merge_over:
            return [self._summary([b]) if isinstance(b, str) else b for b in boxes]
        out: list[_Box] = []
        run: list[str] = []
        for b in [*boxes, None]:
            if isinstance(b, str):
                run.append(b)
                continue
            if run:
                out.append(self._summary(run))
                run = []
            if b is not None:
                out.append(b)
        return out

    def _summary(self, doms: list[str]) -> _SummaryBox:
        total = _Counts()
        for d in doms:
            total += self.counts[d]
        levels = {self.topo.domains[d].level for d in doms}
        first, last = doms[0].split("/", 1)[1], doms[-1].split("/", 1)[1]
        if len(doms) == 1:
            name, span = (first if levels == {"node"} else doms[0]), doms[0]
        else:
            level = levels.pop() if len(levels) == 1 else "domain"
            name, span = f"{len(doms)} {_PLURAL.get(level, level + 's')} {first}..{last}", f"{doms[0]} .. {doms[-1]}"
        lines = [_short(name, 34), f"{total.nodes} node{'s' * (total.nodes != 1)}, {total.gpus} GPUs"]
        lines.append(f"{total.free} free, {total.busy} busy")
        w = max(_text_w(line, NODE_FONT) for line in lines) + 2 * PAD
        return _SummaryBox(w, 3 * (NODE_FONT + 2) + 2 * PAD, lines, f"{span} (nothing placed): {total.words()}")

    def _node_box(self, node: Node) -> _NodeBox:
        badge = 14 if node.index in self.routers else 0
        per_row = min(ROW_GPUS, len(node.gpus)) or 1
        rows = [node.gpus[k : k + per_row] for k in range(0, len(node.gpus), per_row)]
        cells_w = max((_row_width(r) for r in rows), default=_text_w("no GPUs", NODE_FONT))
        w = max(_text_w(_short(node.name), NODE_FONT) + badge, cells_w, 40) + 2 * PAD
        return _NodeBox(w, NODE_FONT + 3 + max(len(rows), 1) * PITCH + 2 * PAD - 2, node)

    def _group(self, dom_id: str, boxes: list[_Box], rack_like: bool) -> _GroupBox:
        dom, counts = self.topo.domains[dom_id], self.counts[dom_id]
        near_top = dom.parent is None or self.topo.domains[dom.parent].parent is None
        font = TOP_FONT if near_top else GROUP_FONT
        name = f"cluster {self.topo.name}" if dom.level == "spine" else dom_id
        header = f"{_short(name, 40)} \u00b7 {counts.free}/{counts.gpus} free"
        top = font + 2 * PAD
        slots: list[Slot] = []
        if rack_like:  # equal slots in columns of at most NODE_ROWS
            sw, sh = max(b.w for b in boxes), max(b.h for b in boxes)
            cols = math.ceil(len(boxes) / NODE_ROWS)
            rows = math.ceil(len(boxes) / cols)
            for k, box in enumerate(boxes):
                col, row = divmod(k, rows)
                slots.append((box, PAD + col * (sw + PAD), top + row * (sh + PAD), sw, sh))
            inner_w, inner_h = cols * (sw + PAD) - PAD, rows * (sh + PAD) - PAD
        else:  # a shelf, left to right, wrapping at MAX_ROW_W
            x = y = row_h = inner_w = 0
            for box in boxes:
                if x and x + box.w > MAX_ROW_W:
                    x, y, row_h = 0, y + row_h + 2 * PAD, 0
                slots.append((box, PAD + x, top + y, box.w, box.h))
                x += box.w + 2 * PAD
                row_h, inner_w = max(row_h, box.h), max(inner_w, x - 2 * PAD)
            inner_h = y + row_h
        w = max(inner_w, _text_w(header, font)) + 2 * PAD
        return _GroupBox(w, top + inner_h + PAD, header, f"{name}: {counts.words()}", font, slots)


def _row_width(gpus: tuple[Gpu, ...]) -> int:
    gaps = sum(a.socket != b.socket for a, b in zip(gpus, gpus[1:], strict=False))
    return len(gpus) * PITCH - (PITCH - CELL) + gaps * SOCKET_GAP


def _has_summary(box: _Box) -> bool:
    if isinstance(box, _GroupBox):
        return any(_has_summary(child) for child, *_ in box.children)
    return isinstance(box, _SummaryBox)


def _detailed_gpus(box: _Box) -> int:
    if isinstance(box, _NodeBox):
        return len(box.node.gpus)
    if isinstance(box, _GroupBox):
        return sum(_detailed_gpus(child) for child, *_ in box.children)
    return 0
