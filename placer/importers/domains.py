"""Domains per level (NVLink domain, rack, leaf) as several sources name them: the value that wins, whether
two sources group nodes the same way, and whether the result nests the way placer's levels must."""

from __future__ import annotations

from placer.importers.common import natural_key
from placer.importers.k8s_nodes import LEVEL_NAMES
from placer.importers.ledger import Draft, Ledger
from placer.model.errors import InputError

RACK_FROM_NVLINK = "its NVLink domain (placer nests each NVLink domain in one rack)"
PLURAL = {"nvlink-domain": "NVLink domains", "rack": "racks", "leaf": "leaves"}


def add_domain(draft: Draft, level: str, value: str, origin: str) -> None:
    draft.domains.setdefault(level, {})[origin] = value


def final_domains(draft: Draft) -> dict[str, str]:
    """Per level, the value of the latest source that named one (sources were applied in order)."""
    return {level: list(by.values())[-1] for level, by in draft.domains.items() if by}


def check_partitions(ledger: Ledger) -> None:
    """Two sources conflict on a level when they group the same nodes differently (names may differ)."""
    for level in LEVEL_NAMES:
        origins: list[str] = []
        for draft in ledger.drafts.values():
            for origin in draft.domains.get(level, {}):
                if origin not in origins:
                    origins.append(origin)
        for i, a in enumerate(origins):
            for b in origins[i + 1 :]:
                problem = _partition_difference(ledger, level, a, b)
                if problem:
                    ledger.conflicts.append(f"{level}: {problem}; using {b}")


def _partition_difference(ledger: Ledger, level: str, a: str, b: str) -> str | None:
    forward: dict[str, tuple[str, str]] = {}
    backward: dict[str, tuple[str, str]] = {}
    for name in sorted(ledger.drafts, key=natural_key):
        by = ledger.drafts[name].domains.get(level, {})
        if a not in by or b not in by:
            continue
        va, vb = by[a], by[b]
        if va in forward and forward[va][0] != vb:
            other = forward[va][1]
            return f"{a} puts {other} and {name} together ({va!r}) but {b} separates them ({forward[va][0]!r}, {vb!r})"
        if vb in backward and backward[vb][0] != va:
            other = backward[vb][1]
            return f"{b} puts {other} and {name} together ({vb!r}) but {a} separates them ({backward[vb][0]!r}, {va!r})"
        forward.setdefault(va, (vb, name))
        backward.setdefault(vb, (va, name))
    return None


def check_nesting(ledger: Ledger) -> None:
    """Every NVLink domain inside one rack and one leaf, every rack under one leaf (placer's levels nest).
    A node without a rack or NVLink domain is alone in it; nodes without a leaf share the default one."""
    pairs = (("nvlink-domain", "leaf"), ("nvlink-domain", "rack"), ("rack", "leaf"))
    parents: dict[tuple[str, str, str], tuple[str, str]] = {}
    for name in sorted(ledger.drafts, key=natural_key):
        draft = ledger.drafts[name]
        mine = final_domains(draft)
        for child_level, parent_level in pairs:
            child = mine.get(child_level)
            if child is None:
                continue
            parent = mine.get(parent_level, "default" if parent_level == "leaf" else f"~{name}")
            seen = parents.setdefault((child_level, child, parent_level), (parent, name))
            if seen[0] != parent:
                given = _origin_of(draft, parent_level) or "none given"
                raise InputError(
                    f"{child_level} {child!r} ({_origin_of(draft, child_level)}) spans {PLURAL[parent_level]} "
                    f"{_lbl(seen[0])} (node {seen[1]}) and {_lbl(parent)} (node {name}, {given}): placer's levels "
                    "must nest; choose other label keys with --level-label or --label-preset"
                )


def _origin_of(draft: Draft, level: str) -> str:
    by = draft.domains.get(level, {})
    return list(by)[-1] if by else ""


def _lbl(value: str) -> str:
    return "none" if value.startswith("~") else repr(value)
