"""What every importer shares: notes, errors with file and line, safe JSON, names and sorting."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from placer.model import k8s
from placer.model.errors import InputError
from placer.model.load import read_text

MAX_NODES = 100_000  # the cluster format's limit, checked while parsing rather than after merging


def check_node_count(count: int, source: str, line: int | None = None) -> None:
    """Fail as soon as a source names more nodes than a cluster may have."""
    if count > MAX_NODES:
        raise error(source, line, f"more than {MAX_NODES} nodes (the cluster limit)")


@dataclass(frozen=True)
class Note:
    """Something a source said that placer could not use, or used only in part: the summary lists these as
    "what it could not understand"."""

    source: str
    line: int | None
    text: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.text}" if self.line else f"{self.source}: {self.text}"


def error(source: str, line: int | None, text: str) -> InputError:
    """An InputError that names the file and, when known, the line."""
    return InputError(f"{source}:{line}: {text}" if line else f"{source}: {text}")


def read_source(path: Path) -> str:
    """Read an input file (64 MiB limit, UTF-8); a byte-order mark is dropped."""
    return read_text(path).removeprefix("\ufeff")


def load_json(text: str, source: str) -> Any:
    """Parse JSON; errors name the line and column, deep nesting is bad input rather than a crash."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(source, exc.lineno, f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise error(source, None, "not usable JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise error(source, None, f"not usable JSON: {exc}") from None


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts node2 before node10."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p)


def is_node_name(name: str) -> bool:
    return len(name) <= 253 and bool(k8s.DNS1123_SUBDOMAIN.match(name))


@lru_cache(maxsize=4096)
def is_label_value(value: str) -> bool:
    try:
        k8s.check_label_value(value)
    except ValueError:
        return False
    return bool(value)


@lru_cache(maxsize=4096)
def is_label_key(key: str) -> bool:
    try:
        k8s.check_label_key(key)
    except ValueError:
        return False
    return True


_CONTROL_RUN = re.compile(r"([\x00-\x08\x0b-\x1f\x7f])\1{3,}")
_CONTROL_NAMES = {"\x00": "NUL", "\x1b": "ESC", "\x7f": "DEL"}


def short(text: str, limit: int = 60) -> str:
    """A value quoted in a message, cut so that a hostile file cannot flood the terminal; a run of one
    control character (57 NUL bytes) is shown as its count."""
    text = text.replace("\n", " ").replace("\r", " ")
    runs: list[str] = []

    def count(m: re.Match[str]) -> str:
        name = _CONTROL_NAMES.get(m.group(1), f"0x{ord(m.group(1)):02x}")
        runs.append(f"{len(m.group(0))} {name} bytes")
        return m.group(1)

    text = _CONTROL_RUN.sub(count, text)
    quoted = repr(text if len(text) <= limit else text[: limit - 3] + "...")
    return f"{quoted} (with {', '.join(runs)})" if runs else quoted


def got(value: Any, limit: int = 60) -> str:
    """The end of an "expected X, ..." message: what the file gave, or that it gave nothing (a field left out
    or written as null used to read "got 'None'", as if the file had written None)."""
    return "but it is missing or null" if value is None else f"got {short(str(value), limit)}"


def found_kind(data: Any) -> str:
    """What a file holds instead of the expected kind, for "expected ..., <this>" messages."""
    if not isinstance(data, dict):
        return f"but the file holds a JSON {type(data).__name__}"
    kind = data.get("kind")
    if kind is None:
        return "but the file has no kind field"
    return f"got {short(str(kind), 30)}"


def split_assignment(value: str, what: str) -> tuple[str, str]:
    """``PATTERN=FILE`` -> (pattern, file); a bare ``FILE`` applies to every node (pattern ``*``)."""
    pattern, sep, file = value.partition("=")
    if not sep:
        return "*", value
    if not pattern or not file:
        raise InputError(f"{what} {value!r}: expected PATTERN=FILE (e.g. 'node-*=topo.txt') or FILE")
    return pattern, file
