"""Slurm ``topology.conf`` (tree and block plugins) -> which leaf each node is under; the parts a ``topology.yaml``
reader (placer.importers.slurm_yaml) shares: the hostlist syntax and the builder that checks and flattens.

Tree: ``SwitchName=s0 Nodes=dev[0-5]`` lines define leaf switches, ``SwitchName=s3 Switches=s[0-2]`` the
tiers above. The switch a node hangs off becomes its placer ``leaf``; placer models a single spine, so the
tiers above the leaves are joined into it (reported when there is more than one such switch).
Block: ``BlockName=b1 Nodes=node[1-32]`` groups nodes with better connectivity among them than to the rest:
a block becomes the nodes' ``leaf``. ``BlockSizes`` (base block size, then the sizes of aggregated blocks)
has no placer level and is reported. NVIDIA topograph writes ``# rack11=nvl-1-1`` above each block: the
block's NVLink domain, which is imported as the nodes' ``nvlinkDomain``.
Names use Slurm's hostlist expressions (``tux[0-3,12,18-20]``, ``node[01-04]``, ``rack[1-2]-n[1-4]``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from placer.importers.common import Note, check_node_count, error, is_label_value, is_node_name, short
from placer.model.errors import InputError

MAX_NAMES = 1_000_000
_RANGE = re.compile(r"^(\d{1,9})(?:-(\d{1,9}))?$")
_ALIAS = re.compile(r"^#\s*([^\s=#]+)=(\S+)\s*$")


def expand_hostlist(expr: str, source: str = "hostlist", line: int | None = None) -> list[str]:
    """Slurm hostlist expression -> names, in order (``n[1-3,7]`` -> n1 n2 n3 n7; ``n[08-10]`` keeps width)."""
    names: list[str] = []
    for item in _split_top(expr.strip(), source, line):
        parts: list[list[str]] = []
        for text, bracket in re.findall(r"([^\[\]]+)|\[([^\[\]]*)\]", item):
            parts.append([text] if text else _ranges(bracket, source, line))
        if "".join(re.findall(r"[^\[\]]+|\[[^\[\]]*\]", item)) != item:
            raise error(source, line, f"hostlist {short(item)}: unbalanced or nested brackets")
        expanded = [""]
        for choices in parts:
            if len(expanded) * len(choices) + len(names) > MAX_NAMES:
                raise error(source, line, f"hostlist {short(item)} expands to more than {MAX_NAMES} names")
            expanded = [e + c for e in expanded for c in choices]
        names.extend(expanded)
    return names


def _split_top(expr: str, source: str, line: int | None) -> list[str]:
    items, depth, current = [], 0, ""
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise error(source, line, f"hostlist {short(expr)}: ']' without '['")
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    if depth:
        raise error(source, line, f"hostlist {short(expr)}: '[' without ']'")
    items.append(current)
    return [i.strip() for i in items if i.strip()]


def _ranges(text: str, source: str, line: int | None) -> list[str]:
    out: list[str] = []
    for part in text.split(","):
        match = _RANGE.match(part.strip())
        if not match:
            raise error(source, line, f"hostlist range {short(part)}: expected N or N-M")
        lo_text, hi_text = match.group(1), match.group(2) or match.group(1)
        lo, hi = int(lo_text), int(hi_text)
        if hi < lo or hi - lo >= MAX_NAMES:
            raise error(source, line, f"hostlist range {short(part)}: empty or too long")
        width = len(lo_text) if lo_text.startswith("0") and len(lo_text) > 1 else 0
        out.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return out


@dataclass(frozen=True)
class SlurmTopology:
    source: str
    plugin: str  # "tree", "block" or "flat"
    nodes: tuple[str, ...]  # every node named, in file order
    leaf_of: dict[str, str]  # node -> its leaf switch (tree) or block
    nvlink_of: dict[str, str]  # node -> NVLink domain named by topograph comments (block)
    parent_of: dict[str, str]  # switch -> the switch above it (tree)
    block_sizes: tuple[int, ...] = ()
    notes: tuple[Note, ...] = field(default=())


@dataclass
class Builder:
    """Collects switches or blocks from either file format, then checks and flattens them."""

    source: str
    plugin: str = "flat"
    switches: dict[str, tuple[list[str], list[str], int | None]] = field(default_factory=dict)  # children, nodes
    blocks: dict[str, tuple[list[str], int | None]] = field(default_factory=dict)
    block_sizes: list[int] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)

    def switch(self, name: str, children: str | None, nodes: str | None, line: int | None) -> None:
        self._kind("tree", line)
        if name in self.switches:
            raise error(self.source, line, f"switch {short(name)} is defined twice")
        kids = expand_hostlist(children, self.source, line) if children else []
        members = expand_hostlist(nodes, self.source, line) if nodes else []
        self.switches[name] = (kids, members, line)

    def block(self, name: str, nodes: str | None, line: int | None) -> None:
        self._kind("block", line)
        if name in self.blocks:
            raise error(self.source, line, f"block {short(name)} is defined twice")
        self.blocks[name] = (expand_hostlist(nodes, self.source, line) if nodes else [], line)

    def _kind(self, plugin: str, line: int | None) -> None:
        if self.plugin not in ("flat", plugin):
            raise error(self.source, line, f"{plugin} and {self.plugin} definitions mixed in one topology")
        self.plugin = plugin

    def build(self) -> SlurmTopology:
        leaf_of: dict[str, str] = {}
        nvlink_of: dict[str, str] = {}
        parent_of: dict[str, str] = {}
        order: list[str] = []

        def place(node: str, domain: str, what: str, line: int | None) -> None:
            if not is_node_name(node):
                self.notes.append(Note(self.source, line, f"node {short(node)} is not a Kubernetes node name; skipped"))
                return
            if node in leaf_of:
                raise error(
                    self.source, line, f"node {node} is in both {what} {leaf_of[node]} and {domain}: placer needs one"
                )
            order.append(node)
            leaf_of[node] = domain
            check_node_count(len(order), self.source, line)

        parents: dict[str, list[str]] = {}  # Slurm allows a switch under several parents (its own doc example)
        for name, (kids, members, line) in self.switches.items():
            for kid in kids:
                if kid not in self.switches:
                    raise error(self.source, line, f"switch {short(name)}: child switch {short(kid)} is not defined")
                if kid == name:
                    raise error(self.source, line, f"switches form a loop through {short(name)}")
                parents.setdefault(kid, []).append(name)
                parent_of.setdefault(kid, name)
            for node in members:
                place(node, name, "switch", line)
        self._check_loops(parents)
        several = [(kid, ups) for kid, ups in parents.items() if len(ups) > 1]
        if several:
            first, ups = several[0]
            more = "; ..." if len(several) > 1 else ""
            self.notes.append(
                Note(
                    self.source,
                    None,
                    f"{len(several)} switch(es) under several parents ({first} under {', '.join(ups)}{more}): Slurm "
                    "allows it; placer models one spine, so the parents are joined into it",
                )
            )
        for name, (members, line) in self.blocks.items():
            for node in members:
                place(node, name, "block", line)
                if name in self.aliases and is_label_value(self.aliases[name]):
                    nvlink_of[node] = self.aliases[name]
            if self.block_sizes and len(members) < self.block_sizes[0]:
                self.notes.append(
                    Note(self.source, line, f"block {name} has {len(members)} nodes, fewer than BlockSizes' base")
                )
        bad = sorted({d for d in leaf_of.values() if not is_label_value(d)})
        if bad:
            self.notes.append(
                Note(self.source, None, f"{short(bad[0])} cannot name a placer domain; its nodes get no leaf")
            )
            leaf_of = {n: d for n, d in leaf_of.items() if d not in bad}
        self._report(parent_of)
        return SlurmTopology(
            self.source,
            self.plugin,
            tuple(order),
            leaf_of,
            nvlink_of,
            parent_of,
            tuple(self.block_sizes),
            tuple(self.notes),
        )

    def _check_loops(self, parents: dict[str, list[str]]) -> None:
        """Refuse a cycle in the switch graph (every parent counted), in linear time."""
        state: dict[str, int] = {}  # 1: on the current path, 2: done
        for start in self.switches:
            if start in state:
                continue
            stack = [(start, iter(parents.get(start, ())))]
            state[start] = 1
            while stack:
                name, ups = stack[-1]
                up = next(ups, None)
                if up is None:
                    state[name] = 2
                    stack.pop()
                elif state.get(up) == 1:
                    raise error(self.source, self.switches[up][2], f"switches form a loop through {short(up)}")
                elif up not in state:
                    state[up] = 1
                    stack.append((up, iter(parents.get(up, ()))))

    def _report(self, parent_of: dict[str, str]) -> None:
        upper = [s for s, (kids, _, _) in self.switches.items() if kids]
        roots = [s for s in self.switches if s not in parent_of]
        if len(upper) > 1:
            self.notes.append(
                Note(
                    self.source,
                    None,
                    f"{len(upper)} switches above the leaf switches: placer models one spine, so the tiers above "
                    "the leaves are joined into it",
                )
            )
        if len(roots) > 1 and self.switches:
            self.notes.append(
                Note(
                    self.source,
                    None,
                    f"{len(roots)} top-level switches (not one connected tree): joined under one spine",
                )
            )
        if len(self.block_sizes) > 1:
            sizes = ",".join(map(str, self.block_sizes))
            self.notes.append(
                Note(self.source, None, f"BlockSizes={sizes}: aggregated blocks have no placer level; recorded only")
            )


def parse_topology_conf(text: str, source: str) -> SlurmTopology:
    """Parse a ``topology.conf`` (tree or block plugin)."""
    builder = Builder(source)
    number = 0
    pending = ""
    lines = text.replace("\r\n", "\n").split("\n")
    for number, raw in enumerate(lines, start=1):
        alias = _ALIAS.match(raw.strip())
        if alias:
            builder.aliases[alias.group(1)] = alias.group(2)
        line = pending + raw.split("#", 1)[0]
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        if not line.strip():
            continue
        try:
            _conf_line(line, number, builder)
        except InputError as exc:
            if number < len(lines):
                raise
            raise InputError(f"{exc} (the last line, without a newline: is the file cut short?)") from None
    if builder.plugin == "flat" and not builder.block_sizes:
        raise error(source, None, "no SwitchName= or BlockName= line: not a Slurm topology.conf")
    if not text.endswith("\n"):
        _check_cut_hostlist(builder, number, lines[-1])
    return builder.build()


def _check_cut_hostlist(builder: Builder, last: int, line: str) -> None:
    """A file that ends without a newline may be a copy cut mid-name: when the line's very last hostlist item is
    a plain name (a bracketed range closes itself, or fails to parse) that is only the start of other nodes'
    names (``Nodes=srv`` beside ``srv1101``...), say so. A note, not an error: ``gpu1`` beside ``gpu10`` is as
    likely a complete file written without a final newline."""
    item = line.split("#", 1)[0].rstrip().rpartition("=")[2].rpartition(",")[2]
    if not item or "[" in item or "]" in item:
        return
    groups = [(m, n) for _, m, n in builder.switches.values()] + list(builder.blocks.values())
    others = {name for members, number in groups if number != last for name in members}
    longer = next((o for o in sorted(others) if o.startswith(item) and o != item), None)
    if longer is not None:
        builder.notes.append(
            Note(
                builder.source,
                last,
                f"the file ends without a newline at node {short(item)}, which is only the start of other node "
                f"names ({longer}, ...): if the copy was cut short, export it again",
            )
        )


def _conf_line(line: str, number: int, builder: Builder) -> None:
    source = builder.source
    pairs: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if not sep:
            raise error(source, number, f"expected Key=Value, found {short(token)}")
        pairs[key.lower()] = value.strip('"')
    first = line.split("=", 1)[0].strip().lower()
    if first == "switchname":
        known = {"switchname", "switches", "nodes", "linkspeed"}
        builder.switch(pairs["switchname"], pairs.get("switches"), pairs.get("nodes"), number)
    elif first == "blockname":
        known = {"blockname", "nodes"}
        builder.block(pairs["blockname"], pairs.get("nodes"), number)
    elif first == "blocksizes":
        known = {"blocksizes"}
        builder.block_sizes = block_sizes(pairs["blocksizes"].split(","), source, number)
    else:
        builder.notes.append(Note(source, number, f"{short(first)} lines are not understood (ring and other plugins)"))
        return
    for key in sorted(set(pairs) - known):
        builder.notes.append(Note(source, number, f"{short(key)}= not understood; ignored"))
    if "linkspeed" in pairs:
        builder.notes.append(Note(source, number, "LinkSpeed is unitless in Slurm; ignored"))


def block_sizes(values: list[Any], source: str, line: int | None) -> list[int]:
    out = []
    for v in values:
        text = str(v).strip()
        if not text.isdigit() or len(text) > 7 or int(text) == 0:
            raise error(source, line, f"BlockSizes: {short(text)} is not a positive whole number")
        out.append(int(text))
    return out
