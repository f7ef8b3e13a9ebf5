"""A placement as a picture (``placer explain --svg FILE``): racks -> nodes -> GPUs, coloured by instance.

Phase 1 (plan) decides what to draw in detail. Clusters up to ``DETAIL_GPUS`` GPUs and ``DETAIL_NODES`` nodes
are drawn whole. Above that, every domain whose nodes hold no placed GPU and no router collapses into one
summary box (an unused leaf becomes one box; an unused rack inside a used leaf another); more than
``MAX_SUMMARIES`` such boxes side by side merge into runs; and if the GPUs left in detail still exceed the
budget, unused nodes inside used domains collapse too. The picture then grows with the placement, not with
the cluster.
Phase 2 (layout) sizes boxes bottom up: a domain whose children are nodes stacks them in columns like a rack;
any other domain flows its children left to right, wrapping rows.
Phase 3 (draw) emits the boxes and one ``rect`` per drawn GPU with a ``<title>`` naming node and index, then
one KV-path highlight per replica with a prefill->decode transfer (a hub per side, an arc between the hubs,
labelled with the report's link class and bandwidth), then the legend.

The document is built with ``xml.etree.ElementTree``: the serializer escapes every input string, characters
XML cannot carry are replaced, and the output is ASCII (character references for the rest). Presentation
attributes only (no stylesheet, nothing external) and integer or one-decimal coordinates: same input, same
bytes.
"""

from __future__ import annotations

import colorsys
import math
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from placer.check.verify import ReplicaCost, Report, check
from placer.model.placement import Placement
from placer.model.spec import ServingTopology
from placer.topology.graph import Gpu, Node, Topology

DETAIL_GPUS = 2048  # clusters up to this size are drawn whole; above it, the GPUs drawn in detail
DETAIL_NODES = 512
MAX_SUMMARIES = 64  # more summary boxes than this in one domain merge into runs
LEGEND_INSTANCES = 40
LEGEND_PATHS = 16

CELL, PITCH, ROW_GPUS, SOCKET_GAP, PAD = 10, 12, 8, 3, 4  # GPU cell, cell distance, cells per row, gaps
NODE_FONT, GROUP_FONT, TOP_FONT, LEGEND_FONT = 8, 9, 10, 9
CHAR_W = 0.62  # monospace advance per em: boxes are sized without measuring text
NODE_ROWS = 16  # a rack's node boxes form columns of at most this many
MAX_ROW_W = 1200  # other domains wrap their children at this width
MAX_LABEL = 28  # characters of a name shown in a box (the full name is in its title)

FREE, BUSY, CORDONED, KV = "#ececec", "#9e9e9e", "#6f6f6f", "#d81b60"
INK, FRAME, SUMMARY_FILL = "#222222", "#b0b0b0", "#f6f6f6"
HUES = (212, 30, 135, 268, 182, 48, 95, 240)  # one per pool, away from the KV crimson; pools 9-16 paler
FONTS = "DejaVu Sans Mono, Menlo, Consolas, monospace"
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_PLURAL = {"leaf": "leaves"}

InstanceKey = tuple[int, str, int]  # (replica, pool, instance index)
Slot = tuple["_Box", int, int, int, int]  # a child box at (x, y) in a slot of (w, h), relative to its parent


def pool_colour(spec: ServingTopology, pool: str) -> str:
    """The pool's base colour: its hue (one per pool, in spec order) at middle lightness."""
    hue, sat = _pool_hue(spec, pool)
    return _hex(hue, 0.45, sat)


def instance_colours(spec: ServingTopology, placement: Placement) -> dict[InstanceKey, str]:
    """Fill per (replica, pool, instance index): the pool's hue, one shade per instance, replicas in order.

    Lightness steps by the golden ratio, so neighbours differ and an instance's shade does not depend on how
    many instances follow it."""
    out: dict[InstanceKey, str] = {}
    seen: dict[str, int] = defaultdict(int)
    for key in _instance_keys(spec, placement):
        hue, sat = _pool_hue(spec, key[1])
        out[key] = _hex(hue, 0.34 + 0.32 * ((seen[key[1]] * 0.6180339887) % 1.0), sat)
        seen[key[1]] += 1
    return out


def render_svg(spec: ServingTopology, topo: Topology, placement: Placement, report: Report | None = None) -> str:
    """Draw the placement on its cluster as a self-contained SVG document.

    Parameters
    ----------
    spec, topo, placement
        The spec, the cluster's topology and a placement of the spec on it. Every pod and router must name a
        node of ``topo`` (else ValueError); the rest is the checker's business (``placer.check.verify.check``).
    report
        The checker's report for this placement: it labels each replica's prefill->decode path with its link
        class and bandwidth. Computed with ``placer.check.verify.check`` when not given.

    Returns
    -------
    str
        An SVG document in ASCII (other characters as references), under 1 MB for 1,024 GPUs. Every placed GPU
        is one ``rect`` titled ``"<node> GPU <index>: ..."`` filled with its instance's colour
        (``instance_colours``); each replica with a KV transfer has one ``<g class="kv-path">``; collapsed
        domains are ``<g class="summary">``. Same inputs, same text.
    """
    if report is None:
        report = check(spec, topo, placement)
    return _Canvas(spec, topo, placement, report).render()


# ---------------------------------------------------------------------------------------------- drawing kit


def _clean(text: str) -> str:
    """Characters XML 1.0 cannot carry (control characters, lone surrogates) become U+FFFD."""
    return _NOT_XML.sub("\ufffd", text)


def _num(value: float) -> str:
    """Integers as they are, other numbers to one decimal: short, and the same on every platform."""
    if isinstance(value, int):
        return str(value)
    text = f"{value:.1f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _el(parent: ET.Element, tag: str, text: str | None = None, **attrs: object) -> ET.Element:
    """A child element; ``font_size`` becomes ``font-size``, ``class_`` ``class``; numbers via ``_num``."""
    values = {
        key.rstrip("_").replace("_", "-"): _num(v) if isinstance(v, int | float) else _clean(str(v))
        for key, v in attrs.items()
    }
    el = ET.SubElement(parent, tag, values)
    if text is not None:
        el.text = _clean(text)
    return el


def _title(parent: ET.Element, text: str) -> None:
    _el(parent, "title", text)


def _text_w(text: str, size: int) -> int:
    return math.ceil(len(text) * size * CHAR_W)


def _short(name: str, limit: int = MAX_LABEL) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "\u2026"


def _hex(hue: float, light: float, sat: float) -> str:
    r, g, b = colorsys.hls_to_rgb(hue / 360.0, light, sat)
    return "#" + "".join(f"{round(c * 255):02x}" for c in (r, g, b))


def _pool_hue(spec: ServingTopology, pool: str) -> tuple[float, float]:
    k = list(spec.pools).index(pool)
    return float(HUES[k % len(HUES)]), 0.62 if k < len(HUES) else 0.38


def _instance_keys(spec: ServingTopology, placement: Placement) -> list[InstanceKey]:
    """Every instance of the placement: replicas in order, pools in spec order, then instance index."""
    order = {p: k for k, p in enumerate(spec.pools)}
    keys = [(r.index, i.pool, i.index) for r in placement.replicas for i in r.instances]
    return sorted(keys, key=lambda k: (k[0], order.get(k[1], len(order)), k[1], k[2]))


def _ranges(values: Iterable[int]) -> str:
    """GPU indices as runs: 0-3,6."""
    runs: list[list[int]] = []
    for v in sorted(values):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _time(us: float) -> str:
    return f"{us / 1000:.3g} ms" if us >= 1000 else f"{us:.3g} us"


def _mean(points: list[tuple[float, float]]) -> tuple[float, float]:
    return sum(p[0] for p in points) / len(points), sum(p[1] for p in points) / len(points)


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


class _Obstacles:
    """Weighted rectangles hashed on a grid: how much of what is drawn a KV label would hide."""

    GRID = 64

    def __init__(self) -> None:
        self.rects: list[tuple[float, float, float, float, float]] = []
        self.grid: dict[tuple[int, int], list[int]] = defaultdict(list)

    def _cells(self, x0: float, y0: float, x1: float, y1: float) -> Iterable[tuple[int, int]]:
        g = self.GRID
        return ((i, j) for i in range(int(x0) // g, int(x1) // g + 1) for j in range(int(y0) // g, int(y1) // g + 1))

    def add(self, x0: float, y0: float, x1: float, y1: float, weight: float) -> None:
        for cell in self._cells(x0, y0, x1, y1):
            self.grid[cell].append(len(self.rects))
        self.rects.append((x0, y0, x1, y1, weight))

    def overlap(self, x0: float, y0: float, x1: float, y1: float) -> float:
        seen: set[int] = set()
        total = 0.0
        for cell in self._cells(x0, y0, x1, y1):
            for k in self.grid.get(cell, ()):
                if k not in seen:
                    seen.add(k)
                    a, b, c, d, weight = self.rects[k]
                    total += weight * max(0.0, min(x1, c) - max(x0, a)) * max(0.0, min(y1, d) - max(y0, b))
        return total


# ---------------------------------------------------------------------------------------------- the canvas


class _Canvas:
    """One render: the lookups every box needs, then plan, layout and draw."""

    def __init__(self, spec: ServingTopology, topo: Topology, placement: Placement, report: Report) -> None:
        self.spec, self.topo, self.placement = spec, topo, placement
        self.kv = {rc.replica: rc for rc in report.replicas if rc.kv_path is not None}
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
        self.colours = instance_colours(spec, placement)
        self.counts = self._count()
        self.centres: dict[InstanceKey, list[tuple[float, float]]] = defaultdict(list)  # filled while drawing
        self.obstacles = _Obstacles()  # node and summary boxes, then KV labels, as they are drawn

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

    def _plan(self) -> _Box:
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

    # Phase 3: draw.

    def render(self) -> str:
        body = self._plan()
        legend = self._legend_rows(summarised=_has_summary(body))
        head = self._heading()
        top = 2 * (TOP_FONT + 6) + PAD
        legend_w = max(_text_w(text, LEGEND_FONT) for text, _ in legend) + 16 + 2 * PAD
        legend_h = len(legend) * (LEGEND_FONT + 5) + 2 * PAD
        width = max(9 * PAD + body.w + legend_w, max(_text_w(line, TOP_FONT + 2) for line in head) + 6 * PAD)
        gutter = 2 * (LEGEND_FONT + 6) if self.kv else 0  # room for KV labels where the cluster is crowded
        height = top + max(body.h + gutter, legend_h) + 3 * PAD
        svg = ET.Element("svg", {"xmlns": "http://www.w3.org/2000/svg"})
        for key, value in (("width", width), ("height", height), ("viewBox", f"0 0 {width} {height}")):
            svg.set(key, str(value))
        svg.set("font-family", FONTS)
        _title(svg, f"placement of {self.placement.deployment} on {self.topo.name}")
        _el(svg, "rect", x=0, y=0, width=width, height=height, fill="#ffffff")
        for k, line in enumerate(head):
            _el(svg, "text", line, x=3 * PAD, y=(k + 1) * (TOP_FONT + 6), font_size=TOP_FONT + 2 - 2 * k, fill=INK)
        self._draw(body, _el(svg, "g", class_="cluster"), 3 * PAD, top, body.w, body.h)
        self._draw_paths(_el(svg, "g", class_="kv-paths"), (3 * PAD, top, 3 * PAD + body.w, top + body.h + gutter))
        self._draw_legend(_el(svg, "g", class_="legend"), legend, 6 * PAD + body.w, top, legend_w, legend_h)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(svg, encoding="us-ascii").decode() + "\n"

    def _heading(self) -> list[str]:
        pl, st = self.placement, self.placement.stats
        gpus = len(self.owner)
        cost = "" if st.objective is None else f", cost {st.objective} units"
        return [
            f"{_short(pl.deployment, 64)} ({_short(pl.namespace, 64)}) on {_short(self.topo.name, 64)}",
            f"{len(pl.replicas)}/{self.spec.replicas} replica(s), {gpus} GPUs placed; {st.status}{cost}; "
            f"cluster {self.counts[self.topo.root].words()}",
        ]

    def _draw(self, box: _Box, parent: ET.Element, x: int, y: int, w: int, h: int) -> None:
        if isinstance(box, _NodeBox):
            self._draw_node(box.node, parent, x, y, w, h)
            return
        assert isinstance(box, _SummaryBox | _GroupBox)
        summary = isinstance(box, _SummaryBox)
        if summary:
            self.obstacles.add(x, y, x + w, y + h, weight=0.3)
        g = _el(parent, "g", class_="summary" if summary else "domain")
        _title(g, box.title)
        frame = {"fill": SUMMARY_FILL, "stroke_dasharray": "3,2"} if summary else {"fill": "#ffffff"}
        _el(g, "rect", x=x, y=y, width=w, height=h, rx=3, stroke=FRAME, **frame)
        if isinstance(box, _SummaryBox):
            for k, line in enumerate(box.lines):
                _el(
                    g,
                    "text",
                    line,
                    x=x + PAD,
                    y=y + PAD + (k + 1) * (NODE_FONT + 2) - 2,
                    font_size=NODE_FONT,
                    fill="#555555",
                )
        elif isinstance(box, _GroupBox):
            _el(g, "text", box.header, x=x + PAD, y=y + PAD + box.font - 1, font_size=box.font, fill=INK)
            self.obstacles.add(x, y, x + 2 * PAD + _text_w(box.header, box.font), y + 2 * PAD + box.font, weight=1.0)
            for child, cx, cy, cw, ch in box.children:
                self._draw(child, g, x + cx, y + cy, cw, ch)

    def _draw_node(self, node: Node, parent: ET.Element, x: int, y: int, w: int, h: int) -> None:
        g = _el(parent, "g", class_="node")
        self.obstacles.add(x, y, x + w, y + h, weight=1.0)
        c = self._node_counts(node)
        routers = ", ".join(map(str, self.routers.get(node.index, [])))
        state = "" if node.schedulable else " (unschedulable)"
        hosts = f"; router of replica {routers}" if routers else ""
        product = f" {node.gpus[0].product}" if node.gpus else ""
        _title(
            g,
            f"node {node.name}{state}: {c.gpus}{product} GPUs, {c.free} free, {c.busy} busy, {c.placed} placed{hosts}",
        )
        dashed = {} if node.schedulable else {"stroke_dasharray": "2,2"}
        _el(g, "rect", x=x, y=y, width=w, height=h, rx=2, fill="#ffffff", stroke=FRAME, **dashed)
        _el(g, "text", _short(node.name), x=x + PAD, y=y + PAD + NODE_FONT - 1, font_size=NODE_FONT, fill=INK)
        if routers:
            badge = _el(g, "g", class_="router")
            _title(badge, f"router of replica {routers} on node {node.name}")
            bx = x + PAD + _text_w(_short(node.name), NODE_FONT) + 4
            _el(badge, "rect", x=bx, y=y + PAD - 1, width=10, height=NODE_FONT + 2, rx=2, fill=INK)
            _el(badge, "text", "R", x=bx + 2, y=y + PAD + NODE_FONT - 1, font_size=NODE_FONT, fill="#ffffff")
        top = y + PAD + NODE_FONT + 3
        if not node.gpus:
            _el(g, "text", "no GPUs", x=x + PAD, y=top + CELL - 2, font_size=NODE_FONT, fill="#777777")
            return
        cells = _el(g, "g", class_="gpus", stroke="#ffffff")
        per_row, sockets = min(ROW_GPUS, len(node.gpus)), len(node.sockets)
        for k, gpu in enumerate(node.gpus):
            row_start = k % per_row == 0
            if row_start:
                cx, cy = x + PAD, top + (k // per_row) * PITCH
            elif gpu.socket != node.gpus[k - 1].socket:
                cx += SOCKET_GAP
            owner = self.owner.get((node.index, gpu.index))
            if owner is not None:
                fill, what = self.colours[owner], f"replica {owner[0]} {owner[1]}-{owner[2]}"
                self.centres[owner].append((cx + CELL / 2, cy + CELL / 2))
            elif gpu.index in node.busy:
                fill, what = BUSY, "busy"
            elif not node.schedulable:
                fill, what = CORDONED, "node unschedulable"
            else:
                fill, what = FREE, "free"
            rect = _el(cells, "rect", x=cx, y=cy, width=CELL, height=CELL, fill=fill)
            _title(rect, f"{node.name} GPU {gpu.index}: {what}" + (f" (socket {gpu.socket})" if sockets > 1 else ""))
            cx += PITCH

    def _transfer_pools(self) -> tuple[str, str] | None:
        t = self.spec.transfer
        if t is not None:
            return t.source, t.target
        roles = {self.spec.role_of(p): p for p in self.spec.pools}
        return (roles["prefill"], roles["decode"]) if "prefill" in roles and "decode" in roles else None

    def _link_class(self, rc: ReplicaCost, short: bool = False) -> str:
        """The link class of a KV path in an operator's words, from its level and the nodes' interconnect."""
        level = rc.kv_path.level if rc.kv_path is not None else "spine"
        net = {"infiniband": "InfiniBand", "ethernet": "Ethernet"}.get(self.topo.network_kind, self.topo.network_kind)
        if level in ("socket", "node"):
            rep = next(r for r in self.placement.replicas if r.index == rc.replica)
            nvlink = all(self._node(p.node).interconnect == "nvlink" for i in rep.instances for p in i.pods)
            word = "NVLink" if nvlink else "PCIe" if level == "socket" else "PCIe cross-socket"
            return word if short else f"{word}, one {'node' if level == 'node' else 'socket'}"
        if level == "nvlink-domain":
            return "NVLink domain"
        net = {"InfiniBand": "IB", "Ethernet": "Eth"}.get(net, net) if short else net
        return f"{net} {level}" if short else f"{net}, {'through the spine' if level == 'spine' else 'one ' + level}"

    def _path_words(self, rc: ReplicaCost, short: bool = False) -> str:
        bw = "" if rc.kv_bandwidth_gbps is None else f" \u00b7 {rc.kv_bandwidth_gbps:g} GB/s"
        return f"{self._link_class(rc, short)}{bw}" + ("" if short else f" \u00b7 {_time(rc.kv_us)} per prompt")

    def _draw_paths(self, parent: ET.Element, area: tuple[int, int, int, int]) -> None:
        """Per replica: spokes from each prefill instance to a hub, an arc to the decode hub, spokes out, and
        a label near the arc where it hides least (``area`` includes a free strip below the cluster)."""
        pools = self._transfer_pools()
        for rep in sorted(self.placement.replicas, key=lambda r: r.index):
            rc = self.kv.get(rep.index)
            if pools is None or rc is None:
                continue
            centres = [
                [self.centres[(rep.index, i.pool, i.index)] for i in rep.instances if i.pool == p] for p in pools
            ]
            ends = [[_mean(c) for c in side if c] for side in centres]
            if not all(ends):
                continue
            g = _el(parent, "g", class_="kv-path", id=f"kv-r{rep.index}")
            _title(g, f"replica {rep.index}: KV path {pools[0]} -> {pools[1]}, {self._path_words(rc)}")
            s, d = _mean(ends[0]), _mean(ends[1])
            for a, b in [(a, s) for a in ends[0]] + [(d, b) for b in ends[1]]:
                _el(g, "line", x1=a[0], y1=a[1], x2=b[0], y2=b[1], stroke=KV, stroke_width=1.5, stroke_dasharray="3,2")
            dx, dy = d[0] - s[0], d[1] - s[1]
            dist = math.hypot(dx, dy) or 1.0
            side = -1 if rep.index % 2 == 0 else 1  # replicas alternate sides
            bulge = max(24.0, 0.25 * dist) * side
            cx, cy = (s[0] + d[0]) / 2 + bulge * dy / dist, (s[1] + d[1]) / 2 - bulge * dx / dist
            path = f"M{_num(s[0])},{_num(s[1])} Q{_num(cx)},{_num(cy)} {_num(d[0])},{_num(d[1])}"
            _el(g, "path", d=path, fill="none", stroke="#ffffff", stroke_width=5, stroke_opacity=0.8)
            _el(g, "path", d=path, fill="none", stroke=KV, stroke_width=2.5)
            for px, py in (s, d):
                _el(g, "circle", cx=px, cy=py, r=3, fill=KV)
            label = f"r{rep.index} \u00b7 {self._path_words(rc, short=True)}"
            size = (_text_w(label, LEGEND_FONT) + 2 * PAD, LEGEND_FONT + 6)
            mid = (0.25 * s[0] + 0.5 * cx + 0.25 * d[0], 0.25 * s[1] + 0.5 * cy + 0.25 * d[1])
            lx, ly = self._label_spot(mid, (side * dy / dist, -side * dx / dist), size, area)
            if math.hypot(lx + size[0] / 2 - mid[0], ly + size[1] / 2 - mid[1]) > size[1]:
                _el(g, "line", x1=mid[0], y1=mid[1], x2=lx + size[0] / 2, y2=ly + size[1] / 2, stroke=KV)
            _el(g, "rect", x=lx, y=ly, width=size[0], height=size[1], rx=3, fill="#ffffff", fill_opacity=0.9, stroke=KV)
            _el(g, "text", label, x=lx + PAD, y=ly + LEGEND_FONT + 2, font_size=LEGEND_FONT, fill=KV)
            self.obstacles.add(lx, ly, lx + size[0], ly + size[1], weight=4.0)

    def _label_spot(
        self, mid: tuple[float, float], normal: tuple[float, float], size: tuple[int, int], area: tuple[int, ...]
    ) -> tuple[float, float]:
        """Top-left of a label near an arc's midpoint, kept in ``area``: the nearest spot that hides least of
        the boxes and labels drawn so far (a leader line joins it to the arc when it moves away)."""
        best: tuple[float, float, float] | None = None
        for away in (0, 16, 32, 48, 72, 104):
            for sign in (1, -1) if away else (1,):
                for shift in (0.0, size[0] / 2, -size[0] / 2):
                    x = mid[0] + sign * away * normal[0] + shift - size[0] / 2
                    y = mid[1] + sign * away * normal[1] - size[1] / 2
                    x, y = min(max(x, area[0]), area[2] - size[0]), min(max(y, area[1]), area[3] - size[1])
                    score = self.obstacles.overlap(x, y, x + size[0], y + size[1]) + 6 * away + 2 * abs(shift)
                    if best is None or score < best[0]:
                        best = (score, x, y)
        assert best is not None
        return best[1], best[2]

    # The legend: pools, instances, KV paths, key.

    def _legend_rows(self, summarised: bool) -> list[tuple[str, str | None]]:
        """(text, swatch): a colour, "" for a heading, None for no swatch, or a symbol: kv, router, summary."""
        rows: list[tuple[str, str | None]] = [("Pools", "")]
        for name, pool in self.spec.pools.items():
            shape = f"TP{pool.tensor_parallel}" + (
                f" x PP{pool.pipeline_parallel}" if pool.pipeline_parallel > 1 else ""
            )
            text = f"{_short(name, 16)} ({self.spec.role_of(name)}): {pool.instances} x {shape} per replica"
            rows.append((text, pool_colour(self.spec, name)))
        rows.append(("Instances (replica pool-index: node [GPUs])", ""))
        keys = _instance_keys(self.spec, self.placement)
        pods = {(r.index, i.pool, i.index): i.pods for r in self.placement.replicas for i in r.instances}
        for key in keys[:LEGEND_INSTANCES]:
            p = pods[key]
            where = f"{_short(p[0].node)} [{_ranges(p[0].gpus)}]" if p else "-"
            more = f" +{len(p) - 1} node{'s' * (len(p) > 2)}" if len(p) > 1 else ""
            rows.append((f"r{key[0]} {_short(key[1], 16)}-{key[2]}: {where}{more}", self.colours[key]))
        if len(keys) > LEGEND_INSTANCES:
            rows.append((f"... {len(keys) - LEGEND_INSTANCES} more instances (hover a GPU)", None))
        if self.kv:
            rows.append(("KV paths (worst prefill -> decode pair)", ""))
            rows += [(f"r{r}: {self._path_words(self.kv[r])}", "kv") for r in sorted(self.kv)[:LEGEND_PATHS]]
            if len(self.kv) > LEGEND_PATHS:
                rows.append((f"... {len(self.kv) - LEGEND_PATHS} more (hover a path)", None))
        rows += [("Key", ""), ("free GPU", FREE), ("busy GPU", BUSY)]
        if any(not n.schedulable for n in self.topo.nodes):
            rows.append(("GPU of an unschedulable node", CORDONED))
        rows += [("router (R)", "router")] if self.routers else []
        rows += [("prefill -> decode KV path", "kv")] if self.kv else []
        rows += [("nothing placed: summary", "summary")] if summarised else []
        return rows

    def _draw_legend(self, g: ET.Element, rows: list[tuple[str, str | None]], x: int, y: int, w: int, h: int) -> None:
        _el(g, "rect", x=x, y=y, width=w, height=h, rx=3, fill="#ffffff", stroke=FRAME)
        for k, (text, swatch) in enumerate(rows):
            ty = y + PAD + (k + 1) * (LEGEND_FONT + 5) - 4
            sx, sy = x + PAD, ty - CELL + 1
            if swatch == "":
                _el(g, "text", text, x=sx, y=ty, font_size=LEGEND_FONT, fill=INK, font_weight="bold")
                continue
            if swatch == "kv":
                _el(g, "line", x1=sx, y1=sy + 5, x2=sx + CELL, y2=sy + 5, stroke=KV, stroke_width=2.5)
            elif swatch == "summary":
                _el(
                    g,
                    "rect",
                    x=sx,
                    y=sy,
                    width=CELL,
                    height=CELL,
                    fill=SUMMARY_FILL,
                    stroke=FRAME,
                    stroke_dasharray="3,2",
                )
            elif swatch is not None:
                _el(
                    g,
                    "rect",
                    x=sx,
                    y=sy,
                    width=CELL,
                    height=CELL,
                    rx=2 if swatch == "router" else 0,
                    fill=INK if swatch == "router" else swatch,
                )
            _el(g, "text", text, x=sx + 16, y=ty, font_size=LEGEND_FONT, fill=INK)


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
