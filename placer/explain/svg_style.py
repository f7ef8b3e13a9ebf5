"""The SVG's palette and element kit: one colour per pool and one shade per instance, and a safe way to add
an element (every string escaped, characters XML cannot carry replaced, numbers to one decimal)."""

from __future__ import annotations

import colorsys
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterable

from placer.explain.svg_layout import InstanceKey
from placer.model.placement import Placement
from placer.model.spec import ServingTopology

FREE, BUSY, CORDONED, KV = "#ececec", "#9e9e9e", "#6f6f6f", "#d81b60"
INK, FRAME, SUMMARY_FILL = "#222222", "#b0b0b0", "#f6f6f6"
HUES = (212, 30, 135, 268, 182, 48, 95, 240)  # one per pool, away from the KV crimson; pools 9-16 paler
FONTS = "DejaVu Sans Mono, Menlo, Consolas, monospace"
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


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
