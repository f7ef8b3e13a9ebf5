"""YAML text -> plain data and its node tree (for lines), refusing what an untrusted input must not carry:
nesting past MAX_DEPTH, tags, aliases and merge keys (alias bombs), complex keys, huge integers, duplicate
keys (PyYAML would silently keep the last one). Plain scalars are read as YAML 1.2 reads them, as editors
validating with the JSON Schemas do. libyaml parses; the checks walk the composed tree once.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import yaml

from placer.model.errors import InputError

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # type: ignore[assignment]

MAX_DEPTH = 64  # placer's formats nest about 10 deep; deeper is hostile (libyaml's composer recurses in C)
MAX_INT_DIGITS = 4300  # Python's own limit for converting digits to an int
_PLAIN = "tag:yaml.org,2002:"
# Tags the safe loader builds into plain data; any other tag (``!foo``, ``!!python/...``, ``!!binary``,
# ``!!set``) is refused, and a bare ``=`` (the YAML 1.1 ``value`` type) too.
_ALLOWED_TAGS = {_PLAIN + t for t in ("null", "bool", "int", "float", "str", "seq", "map", "timestamp")}
_OPEN = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSE = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def parse_documents(text: str, source: str) -> list[tuple[Any, yaml.Node]]:
    """Parse every YAML document, refusing deep nesting, tags, aliases, complex keys, huge integers and
    duplicate keys; keep each node tree for lines."""
    try:
        if not _parser_limits_nesting():
            _check_depth(text, source)
        nodes = list(yaml.compose_all(text, Loader=_Loader))
    except yaml.YAMLError as exc:
        fault = exc
        try:  # what the event pass finds first is said first, as where it runs before composing
            _check_depth(text, source)
        except yaml.YAMLError as first:
            fault = first
        raise InputError(_depth_message(fault, source) or _yaml_message(fault, source)) from None
    if _parser_limits_nesting():  # every document before any other check, as the event pass did
        for node in nodes:
            _check_nesting(node, source)
    out = []
    for node in nodes:
        if node is None:
            continue
        _check_node(node, source)
        loader = _Loader("")
        try:
            data = loader.construct_document(node)
        except Exception as exc:  # noqa: BLE001 - PyYAML's constructors fail in many ways on explicit tags
            raise InputError(_construct_message(exc, node, source)) from None
        out.append((data, node))
    if len(out) > 1:  # empty documents beside others (a trailing ---) do not count, as kubectl skips them;
        out = [d for d in out if d[0] is not None] or out[:1]  # a lone one is still an empty document
    return out


def _yaml_message(exc: Exception, source: str) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f":{mark.line + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).split("\n")[0]
    return f"{source}{where}: not valid YAML: {problem}"


def _construct_message(exc: Exception, root: yaml.Node, source: str) -> str:
    """A value the safe constructor could not build (``!!bool maybe``, ``!!timestamp x``): the line of the
    first explicitly tagged scalar that does not match its tag's form, else the error itself."""
    if isinstance(exc, yaml.YAMLError):
        return _yaml_message(exc, source)
    resolver = _Loader("")
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            if node.tag != resolver.resolve(yaml.ScalarNode, node.value, (True, False)) and node.tag != _PLAIN + "str":
                return f"{source}:{node.start_mark.line + 1}: {node.value[:40]!r} is not a valid {_tag_name(node.tag)}"
        elif isinstance(node, yaml.MappingNode):
            stack += [v for kv in node.value for v in kv]
        else:
            stack += node.value
    return f"{source}: not valid YAML: {type(exc).__name__}: {exc}"


@functools.cache
def _parser_limits_nesting() -> bool:
    """Whether the parser refuses deep nesting itself, before the composer recurses into it (libyaml as
    bundled from PyYAML 6.0.4 on stops at 1,000 levels; 25,000 flow brackets crashed older ones). Then
    MAX_DEPTH is checked on the composed tree (_check_nesting, a fifth of a second on a 100k-GPU cluster
    file) and the event pass over the whole text, a second parse that took it a second, is not needed."""
    deep = "[" * 1100 + "]" * 1100
    try:
        for _ in yaml.parse(deep, Loader=_Loader):
            pass
    except yaml.YAMLError as exc:
        return _depth_message(exc, "") is not None
    return False


def _depth_message(exc: yaml.YAMLError, source: str) -> str | None:
    """The refusal of libyaml's own nesting limit, said as placer's (whichever limit comes first)."""
    if not isinstance(exc, yaml.MarkedYAMLError) or "nesting depth" not in str(exc.problem):
        return None
    line = f":{exc.problem_mark.line + 1}" if exc.problem_mark is not None else ""
    return f"{source}{line}: YAML nested more than {MAX_DEPTH} levels deep"


def _check_depth(text: str, source: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH from the event stream (libyaml's parser keeps its own stack),
    before the composer recurses into it: for parsers without a nesting limit of their own."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, _OPEN):
                depth += 1
                if depth > MAX_DEPTH:
                    line = f":{event.start_mark.line + 1}" if event.start_mark is not None else ""
                    raise InputError(f"{source}{line}: YAML nested more than {MAX_DEPTH} levels deep")
            elif isinstance(event, _CLOSE):
                depth -= 1
    except yaml.YAMLError as exc:
        message = _depth_message(exc, source)
        if message is None:
            raise
        raise InputError(message) from None


def _tag_name(tag: str) -> str:
    return "!!" + tag.removeprefix(_PLAIN) if tag.startswith(_PLAIN) else tag


_EXPONENT_ONLY = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+")


def add_yaml12_numbers(resolver: type) -> type:
    """Make a PyYAML dumper (or resolver) class see what placer's loader reads as numbers (YAML 1.2) and
    PyYAML (1.1) does not: plain ``1e3``, ``1.0e3``, ``08`` and ``0o10``. A dumper then quotes such a
    string, and placer reads back the string it wrote."""
    whole = re.compile(_EXPONENT_ONLY.pattern + r"\Z")  # PyYAML's resolvers match a prefix: "5e7a9c" is text
    resolver.add_implicit_resolver("tag:yaml.org,2002:float", whole, list("-+0123456789."))
    resolver.add_implicit_resolver(
        "tag:yaml.org,2002:int", re.compile(r"(?:[-+]?[0-9]+|0o[0-7]+)\Z"), list("-+0123456789")
    )
    return resolver


def _check_nesting(root: yaml.Node | None, source: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH at the first collection, in document order, that passes it: what
    the event pass (_check_depth) says, read off the composed tree (a pre-order walk; a node met again is an
    alias, which nests nothing of its own and is refused by _check_node)."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, int]] = [(root, 1)] if root is not None else []
    while stack:
        node, depth = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if depth > MAX_DEPTH:
            raise InputError(f"{source}:{node.start_mark.line + 1}: YAML nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, yaml.MappingNode):
            items = [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            items = node.value
        else:
            continue
        stack += [(item, depth + 1) for item in reversed(items) if not isinstance(item, yaml.ScalarNode)]


def _check_node(root: yaml.Node, source: str) -> None:
    """Reject aliases (a node reached twice), tags, complex keys, huge integers and duplicate mapping keys,
    iteratively."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        line = node.start_mark.line + 1
        if id(node) in seen:
            raise InputError(f"{source}:{line}: YAML anchors and aliases are not allowed")
        seen.add(id(node))
        if node.tag not in _ALLOWED_TAGS:
            if node.tag == "tag:yaml.org,2002:merge":
                raise InputError(f"{source}:{line}: YAML merge keys (<<) are not allowed")
            if node.tag == "tag:yaml.org,2002:value":
                raise InputError(f"{source}:{line}: a bare '=' is not a value; quote it ('=')")
            raise InputError(f"{source}:{line}: YAML tag {_tag_name(node.tag)!r} is not allowed (plain YAML only)")
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for key, value in node.value:
                if key.tag == "tag:yaml.org,2002:merge":
                    raise InputError(f"{source}:{key.start_mark.line + 1}: YAML merge keys (<<) are not allowed")
                if not isinstance(key, yaml.ScalarNode):
                    kind = "sequence" if isinstance(key, yaml.SequenceNode) else "mapping"
                    raise InputError(
                        f"{source}:{key.start_mark.line + 1}: a mapping key must be a plain value, not a {kind}"
                    )
                _as_yaml12(key)
                if key.tag == _PLAIN + "bool":
                    raise InputError(
                        f"{source}:{key.start_mark.line + 1}: key {key.value!r} is read as a boolean: quote it if "
                        "it is a name, or remove it"
                    )
                if key.tag == _PLAIN + "null":
                    raise InputError(
                        f"{source}:{key.start_mark.line + 1}: a mapping key must be a name, not null "
                        f"({key.value or 'empty'!r}): quote it if it is a name, or remove it"
                    )
                if key.value in keys:
                    raise InputError(f"{source}:{key.start_mark.line + 1}: key {key.value!r} appears twice")
                keys.add(key.value)
                stack += [key, value]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value
        else:
            _as_yaml12(node)
        if node.tag == _PLAIN + "int" and len(node.value) > MAX_INT_DIGITS:
            raise InputError(
                f"{source}:{line}: a number of {len(node.value)} digits is over the {MAX_INT_DIGITS}-digit limit"
            )


_STR, _INT, _FLOAT, _BOOL, _TIMESTAMP = (_PLAIN + t for t in ("str", "int", "float", "bool", "timestamp"))
_NUMERIC_START = frozenset("0123456789+-.")
_YAML11_ONLY_BOOL = frozenset(["yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF"])
_DECIMAL = re.compile(r"[-+]?[0-9]+")
_OCTAL = re.compile(r"0o[0-7]+")


def _as_yaml12(node: yaml.ScalarNode) -> None:
    """Read a plain scalar as YAML 1.2 (what editors validating with the JSON Schemas read), not PyYAML's 1.1:
    1e3 is a number; yes/no/on/off, dates, base-60 values (a PCI bus id 0000:18:00.0), 1_000 and 0b101 are
    text; 010 is ten, not octal eight; 08 is eight, not text; 0o10 is eight. Called on every scalar of a
    100k-GPU cluster file: the common cases (a name, a small number) return after a test or two."""
    if node.style:
        return
    value, tag = node.value, node.tag
    if tag == _STR:
        if value[:1] not in _NUMERIC_START:
            return
        if _EXPONENT_ONLY.fullmatch(value):
            node.tag = _FLOAT  # PyYAML (1.1) wants 1.0e+3
        elif _DECIMAL.fullmatch(value):
            node.tag, node.value = _INT, _without_leading_zeros(value)
        elif _OCTAL.fullmatch(value):
            node.tag, node.value = _INT, str(int(value[2:], 8))
    elif tag in (_INT, _FLOAT):
        if ":" in value or "_" in value or value.lstrip("+-")[:2] in ("0b", "0B"):  # base 60, groups, binary
            node.tag = _STR
        elif tag == _INT and len(value) > 1 and value.lstrip("+-")[:1] == "0" and "x" not in value:
            node.value = _without_leading_zeros(value)  # decimal, not 1.1's octal
    elif (tag == _BOOL and value in _YAML11_ONLY_BOOL) or tag == _TIMESTAMP:
        node.tag = _STR


def _without_leading_zeros(value: str) -> str:
    sign = value[0] if value[0] in "+-" else ""
    digits = value[len(sign) :].lstrip("0") or "0"
    return sign + digits
