"""The merge's working state: one draft per node, each field with the source that gave it, and the
conflicts met on the way (a later source overriding a different value from an earlier one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from placer.importers import hardware as hw
from placer.importers.common import Note

DEFAULT = "default"
AMBIGUOUS = ""  # an alias two nodes share (e.g. the short name of a.x and a.y): resolves to nothing


@dataclass
class Draft:
    """One node while sources are applied: values and, per field, the source that gave them."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    domains: dict[str, dict[str, str]] = field(default_factory=dict)  # level -> source -> value
    hardware: hw.NodeHardware | None = None
    socket_of: dict[int, int] | None = None  # GPU index -> socket, from the hardware file
    sm: int | None = None
    boards_gpus: int | None = None  # physical GPUs where the node's count is of shared replicas (time-slicing)
    unavailable: int = 0
    busy: list[int] = field(default_factory=list)
    used_cpu_m: int = 0
    used_memory_bytes: int = 0


@dataclass
class Ledger:
    """Drafts by name, the aliases other sources use for them, notes and conflicts."""

    drafts: dict[str, Draft] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)

    def set(self, draft: Draft, key: str, value: Any, origin: str) -> None:
        old = draft.values.get(key)
        if key in draft.values and old != value and draft.origin.get(key, DEFAULT) != DEFAULT:
            self.conflicts.append(
                f"node {draft.name}: {key} is {_show(old)} from {draft.origin[key]} but {_show(value)} from {origin}; "
                f"using {origin}"
            )
        draft.values[key] = value
        draft.origin[key] = origin

    def resolve(self, name: str) -> Draft | None:
        """The node another source means by ``name``: its name, short name, hostname label or instance id."""
        if name in self.drafts:
            return self.drafts[name]
        found = self.aliases.get(name) or self.aliases.get(name.split(".", 1)[0])
        return self.drafts.get(found) if found else None

    def alias(self, alias: str, name: str) -> None:
        if self.aliases.setdefault(alias, name) != name:
            self.aliases[alias] = AMBIGUOUS

    def add(self, name: str) -> Draft:
        draft = self.drafts.setdefault(name, Draft(name))
        self.alias(name.split(".", 1)[0], name)
        return draft


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)
