"""Slurm ``topology.yaml`` (Slurm 23.11 and later: a list of ``- topology: NAME`` entries with ``tree``,
``block`` or ``flat: true``) -> the same SlurmTopology as ``topology.conf`` (placer.importers.slurm_conf), read from
the cluster-default entry. Apart from the conf reader because every message here is located through the
YAML node tree (the line of the entry path that is wrong), which the line-oriented conf format needs none of.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from placer.importers.common import Note, error, got, short
from placer.importers.slurm_conf import Builder, SlurmTopology, block_sizes
from placer.model.errors import InputError
from placer.model.yaml_text import parse_documents


@dataclass(frozen=True)
class _Yaml:
    """Lines for messages about a topology.yaml: the composed node tree the data came from."""

    source: str
    text: str
    root: yaml.Node

    def node(self, *path: str | int) -> yaml.Node:
        """The node at ``path`` (mapping keys, list indices), or the deepest one on the way that exists."""
        node = self.root
        for step in path:
            if isinstance(node, yaml.MappingNode):
                inner = next((v for k, v in node.value if getattr(k, "value", None) == step), None)
            elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
                inner = node.value[step]
            else:
                inner = None
            if inner is None:
                break
            node = inner
        return node

    def error(self, path: tuple[str | int, ...], text: str) -> InputError:
        """An error at the line of ``path``, saying so when the file ends right there without a newline (a copy
        cut short)."""
        node = self.node(*path)
        inner = path[1:] if len(path) > 1 else ()  # below the list of topologies
        where = ".".join(f"[{p}]" if isinstance(p, int) else p for p in inner).replace(".[", "[")
        where = where or f"entry {path[0] + 1 if path and isinstance(path[0], int) else 1}"
        ends_here = not self.text.endswith("\n") and not self.text[node.end_mark.index :].strip()
        cut = " (the file ends there, without a newline: cut short?)" if ends_here else ""
        return error(self.source, node.start_mark.line + 1, f"{where}: {text}{cut}")


def parse_topology_yaml(text: str, source: str) -> SlurmTopology:
    """Parse a ``topology.yaml``: the topology marked ``cluster_default: true`` (else the first) is used."""
    docs = parse_documents(text, source)
    if len(docs) != 1 or not isinstance(docs[0][0], list):
        raise error(source, None, "expected one YAML document holding a list of '- topology: <name>' entries")
    entries, at = docs[0][0], _Yaml(source, text, docs[0][1])
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("topology"), str):
            raise at.error((i,), f"expected a mapping starting with 'topology: <name>', {got(entry)}")
    k = next((i for i, e in enumerate(entries) if e.get("cluster_default") is True), 0)
    chosen = entries[k]
    builder = Builder(source)
    for other in entries:
        if other is not chosen:
            builder.notes.append(
                Note(
                    source,
                    None,
                    f"topology {short(other['topology'])} ignored: {short(chosen['topology'])} is the cluster default",
                )
            )
    if "tree" in chosen:
        for i, sw in enumerate(_list(chosen["tree"], (k, "tree", "switches"), at, "switch")):
            line = at.node(k, "tree", "switches", i).start_mark.line + 1
            name = _str(sw, (k, "tree", "switches", i, "switch"), at)
            builder.switch(name, _opt(sw, "children"), _opt(sw, "nodes"), line)
    elif "block" in chosen:
        block = chosen["block"]
        if not isinstance(block, dict):
            raise at.error((k, "block"), "expected a mapping with blocks and block_sizes")
        sizes = block.get("block_sizes") or []
        if not isinstance(sizes, list):
            raise at.error((k, "block", "block_sizes"), f"expected a list of sizes, {got(sizes)}")
        builder.block_sizes = block_sizes(sizes, source, at.node(k, "block", "block_sizes").start_mark.line + 1)
        for i, b in enumerate(_list(block, (k, "block", "blocks"), at, "block")):
            line = at.node(k, "block", "blocks", i).start_mark.line + 1
            builder.block(_str(b, (k, "block", "blocks", i, "block"), at), _opt(b, "nodes"), line)
    elif chosen.get("flat") is not True:
        raise at.error((k,), f"topology {short(chosen['topology'])}: expected tree, block or flat: true")
    topo = builder.build()
    if topo.plugin == "flat":
        return SlurmTopology(
            source, "flat", (), {}, {}, {}, (), topo.notes + (Note(source, None, "flat topology: no leaves"),)
        )
    return topo


def _list(parent: Any, path: tuple[str | int, ...], at: _Yaml, item: str) -> list[dict[str, Any]]:
    """The list of mappings at ``path``; an item that is not a mapping is named with its line."""
    value = parent.get(path[-1]) if isinstance(parent, dict) else None
    if not isinstance(value, list):
        raise at.error(path, f"expected a list of mappings ('- {item}: NAME' ...), {got(value)}")
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise at.error((*path, i), f"expected a mapping such as '{item}: NAME' with nodes, {got(entry)}")
    return value


def _str(entry: dict[str, Any], path: tuple[str | int, ...], at: _Yaml) -> str:
    value = entry.get(path[-1])
    if not isinstance(value, str) or not value:
        raise at.error(path, f"expected a name, {got(value)}")
    return value


def _opt(entry: dict[str, Any], key: str) -> str | None:
    value = entry.get(key)
    return str(value) if value is not None else None
