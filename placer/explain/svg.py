"""A placement as a picture (``placer explain --svg FILE``): racks -> nodes -> GPUs, coloured by instance.

Phases 1 (plan: what to draw in detail) and 2 (layout: box sizes) are ``svg_layout.Layout``.
Phase 3 (draw) emits the boxes and one ``rect`` per drawn GPU with a ``<title>`` naming node and index, then
one KV-path highlight per replica with a prefill->decode transfer (a hub per side, an arc between the hubs,
labelled with the report's link class and bandwidth), then the legend.

The document is built with ``xml.etree.ElementTree``: the serializer escapes every input string, characters
XML cannot carry are replaced, and the output is ASCII (character references for the rest). Presentation
attributes only (no stylesheet, nothing external) and integer or one-decimal coordinates: same input, same
bytes.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterable

from placer.check.verify import ReplicaCost, Report, check
from placer.explain.svg_layout import (
    CELL,
    LEGEND_FONT,
    NODE_FONT,
    PAD,
    PITCH,
    ROW_GPUS,
    SOCKET_GAP,
    TOP_FONT,
    InstanceKey,
    Layout,
    _Box,
    _GroupBox,
    _has_summary,
    _NodeBox,
    _short,
    _SummaryBox,
    _text_w,
)
from placer.explain.svg_style import (
    BUSY,
    CORDONED,
    FONTS,
    FRAME,
    FREE,
    INK,
    KV,
    SUMMARY_FILL,
    _el,
    _instance_keys,
    _mean,
    _num,
    _ranges,
    _time,
    _title,
    instance_colours,
    pool_colour,
)
from placer.model.placement import Placement
from placer.model.spec import ServingTopology
from placer.topology.graph import Node, Topology

LEGEND_INSTANCES = 40
LEGEND_PATHS = 16


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


class _Canvas(Layout):
    """One render: the layout (phases 1 and 2), then phase 3, drawing it."""

    def __init__(self, spec: ServingTopology, topo: Topology, placement: Placement, report: Report) -> None:
        super().__init__(spec, topo, placement)
        self.kv = {rc.replica: rc for rc in report.replicas if rc.kv_path is not None}
        self.colours = instance_colours(spec, placement)
        self.centres: dict[InstanceKey, list[tuple[float, float]]] = defaultdict(list)  # filled while drawing
        self.obstacles = _Obstacles()  # node and summary boxes, then KV labels, as they are drawn

    # Phase 3: draw.

    def render(self) -> str:
        body = self.plan()
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
