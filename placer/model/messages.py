"""Pydantic's validation errors as a person reads them: ``file:line: field.path: what was expected (what was
given)``, one line per problem, the line found in the YAML node tree the loader kept (placer.model.load)."""

from __future__ import annotations

import functools
import re
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from placer.model.k8s import field_alias


def line_of(root: yaml.Node, path: tuple[Any, ...]) -> int | None:
    """The 1-based line of the value at ``path`` (pydantic loc), or of the deepest parent found."""
    node, line = root, root.start_mark.line + 1
    for part in path:
        if isinstance(node, yaml.MappingNode):
            match = next(
                ((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(part)), None
            )
            if match is None:
                return line
            node, line = match[1], match[0].start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_PATH_IN_MESSAGE = re.compile(r"^([A-Za-z][\w]*(?:\[\d+\]|\.[\w][\w-]*)*):")  # names may start with a digit


def path_from_text(text: str) -> tuple[Any, ...]:
    match = _PATH_IN_MESSAGE.match(text)
    if not match:
        return ()
    parts: list[Any] = []
    for token in re.findall(r"[\w][\w-]*|\[\d+\]", match.group(1)):
        parts.append(int(token[1:-1]) if token.startswith("[") else token)
    return tuple(parts)


_SHAPE_ERRORS = {"list_type", "dict_type", "model_type", "model_attributes_type", "tuple_type"}


def _wrong_shape(err: Any) -> bool:
    """A union member's error that only says the value had another shape than that member takes."""
    return err["type"] in _SHAPE_ERRORS or isinstance(err.get("input"), (dict, list))


def _field_loc(raw: tuple[Any, ...]) -> tuple[Any, ...]:
    """The field path of a pydantic error location, without its validator and union-member parts."""
    loc = tuple(p for p in raw if not (isinstance(p, str) and p.startswith(("function-", "list[", "dict["))))
    # pydantic reports union members as extra loc parts (e.g. 'GpuGroup'): drop the names of models (a user's
    # key such as a node class 'DGX' or a label 'Zone' stays in the path).
    return tuple(p for p in loc if not (isinstance(p, str) and p in _model_names()))


@functools.cache
def _model_names() -> frozenset[str]:
    from placer.model import cluster, record, spec

    return frozenset(
        name
        for module in (spec, cluster, record)
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, BaseModel)
    )


def _snake(err: Any, loc: tuple[Any, ...]) -> bool:
    """An unknown field spelled in snake_case whose camelCase spelling is a field (``hidden_size``)."""
    if err["type"] != "extra_forbidden" or not loc or not isinstance(loc[-1], str) or "_" not in loc[-1]:
        return False
    return field_alias(loc[-1]) in _field_names()


@functools.cache
def _field_names() -> frozenset[str]:
    from placer.model import cluster, record, spec

    models = [v for m in (spec, cluster, record) for v in vars(m).values() if isinstance(v, type)]
    return frozenset(f.alias or name for m in models if issubclass(m, BaseModel) for name, f in m.model_fields.items())


def validation_message(exc: ValidationError, source: str, root: yaml.Node) -> str:
    """One paragraph per problem: file:line: field.path: what was expected (what was given)."""
    lines = []
    errors = [(err, _field_loc(err["loc"])) for err in exc.errors(include_url=False)]
    # A union (``gpus: {count: ...}`` or a list) reports every member that failed; where one member got
    # further, the others' "should be a valid list" (or a scalar member's "should be a valid number" for a
    # mapping it was given) says nothing about what is wrong: keep the deeper one.
    deeper = {loc[:k] for _, loc in errors for k in range(len(loc))}
    errors = [(err, loc) for err, loc in errors if not (loc in deeper and _wrong_shape(err))]
    # A scalar that a scalar member refused with a reason (inf for a number) was no mapping either: say the reason.
    reasoned = {loc for err, loc in errors if not _wrong_shape(err)}
    errors = [(err, loc) for err, loc in errors if not (loc in reasoned and _wrong_shape(err))]
    # A snake_case spelling (hidden_size) is unknown; its camelCase field then says "Field required": one message.
    snake = {loc[:-1] + (field_alias(loc[-1]),) for err, loc in errors if _snake(err, loc)}
    errors = [(err, loc) for err, loc in errors if not (err["type"] == "missing" and loc in snake)]
    for err, loc in errors[:10]:
        msg = err["msg"].removeprefix("Value error, ")
        path = loc or path_from_text(msg)
        line = line_of(root, path)
        where = f"{source}:{line}" if line else source
        field = format_loc(loc)
        got = err.get("input")
        hint = ""
        if _snake(err, loc):
            msg = f"unknown field: field names are camelCase ({field_alias(loc[-1])})"
        elif err["type"] in ("extra_forbidden",):
            msg = "unknown field (check spelling; see schemas/ for the allowed fields)"
        elif not isinstance(got, (dict, list)) and got is not None and err["type"] != "value_error":
            hint = f" (got {got!r})"
            if err["type"] == "string_type" and isinstance(got, (int, float)) and not isinstance(got, bool):
                hint = f" (got the number {got!r}: quote it if it is text, as YAML reads 8, 1.5 and 1e3 as numbers)"
        lines.append(f"{where}: {field + ': ' if field else ''}{msg}{hint}")
    more = len(errors) - 10
    if more > 0:
        lines.append(f"... and {more} more problem(s)")
    return "\n".join(lines)
