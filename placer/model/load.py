"""YAML files -> validated models, with errors that name the file, the field path and the line.

Inputs are untrusted: safe loading only, a size limit, no anchors/aliases (the cheapest defence against
alias bombs, and hand-written specs do not need them), no duplicate keys (PyYAML would silently keep the
last one). The fast path parses with libyaml; line numbers are recovered by composing the document again
only when there is an error to report.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import stat
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from placer.model.cluster import ClusterSpec
from placer.model.errors import InputError
from placer.model.json_text import json_object
from placer.model.messages import line_of, path_from_text, validation_message
from placer.model.spec import ServingTopology

MAX_BYTES = 64 * 1024 * 1024
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # type: ignore[assignment]
M = TypeVar("M", bound=BaseModel)

KINDS: dict[str, type[BaseModel]] = {"ServingTopology": ServingTopology, "Cluster": ClusterSpec}


STDIN = "-"
_STREAMS: dict[str, str] = {}  # what a pipe, FIFO or stdin gave: such an input can be read only once


def forget_streams() -> None:
    """End of one command: what stdin or a FIFO gave belongs to it. A process that runs several (a test, a
    service calling ``placer.cli.main``) would otherwise give the next one the first one's stdin."""
    _STREAMS.clear()


def read_text(path: Path) -> str:
    """Read an input as UTF-8 text, at most ``MAX_BYTES``; ``-`` is standard input.

    The limit is enforced while reading (a pipe or /dev/zero reports no size), and what a non-regular file
    gave is kept, so that a second read of the same pipe (a spec counted, then loaded) sees the same text."""
    key = str(path)
    if key in _STREAMS:
        return _STREAMS[key]
    data, regular = _read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    if not regular:
        _STREAMS[key] = text
    return text


def _read_bytes(path: Path) -> tuple[bytes, bool]:
    """The bytes of ``path`` (at most the limit) and whether it is a regular file."""
    limit = MAX_BYTES
    try:
        if str(path) == STDIN:
            stream = getattr(sys.stdin, "buffer", None)
            data = stream.read(limit + 1) if stream is not None else sys.stdin.read(limit + 1).encode("utf-8")
            regular = False
        else:
            with open(path, "rb") as fh:
                info = os.fstat(fh.fileno())
                regular = stat.S_ISREG(info.st_mode)
                if stat.S_ISDIR(info.st_mode):
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
                if regular and info.st_size > limit:
                    raise InputError(
                        f"{path}: {info.st_size} bytes is over the {limit // (1024 * 1024)} MiB input limit"
                    )
                data = fh.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if len(data) > limit:
        raise InputError(f"{path}: more than {limit // (1024 * 1024)} MiB (the input limit)")
    return data, regular


def check_stdin_once(paths: Iterable[Path | str | None]) -> None:
    """Standard input can be given as one input only."""
    if sum(1 for p in paths if p is not None and str(p) == STDIN) > 1:
        raise InputError("'-' (standard input) can be read only once: give it for one input")


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


def load_model(path: Path, model: type[M]) -> M:
    """Load one document of ``model``'s kind from ``path``."""
    docs = parse_documents(read_text(path), str(path))
    if len(docs) != 1:
        raise InputError(f"{path}: expected exactly one YAML document, found {len(docs)}")
    return validate_document(docs[0], str(path), model)


_TYPE_NAMES = {list: "list", dict: "mapping", int: "number", float: "number", bool: "boolean"}


def validate_document(doc: tuple[Any, yaml.Node], source: str, model: type[M]) -> M:
    data, root = doc
    if not isinstance(data, dict):
        got = "an empty document" if data is None else f"a {_TYPE_NAMES.get(type(data), type(data).__name__)}"
        raise InputError(f"{source}:1: expected a mapping with apiVersion and kind, got {got}")
    expected_kind = model.model_fields["kind"].annotation.__args__[0]  # type: ignore[union-attr]
    kind = data.get("kind")
    if kind != expected_kind:
        got = repr(kind) if isinstance(kind, str | None) else f"a {_TYPE_NAMES.get(type(kind), type(kind).__name__)}"
        raise InputError(
            f"{source}:{line_of(root, ('kind',))}: kind: expected {expected_kind!r}, got {got}"
            + (
                f" (this file is a {kind}, given where a {expected_kind} belongs)"
                if isinstance(kind, str) and kind in KINDS
                else ""
            )
        )
    try:
        return model.model_validate(data, by_alias=True, by_name=False)  # camelCase only, as the schemas say
    except ValidationError as exc:
        raise InputError(validation_message(exc, source, root)) from None


def load_spec(path: Path) -> ServingTopology:
    return load_model(path, ServingTopology)


def load_specs(path: Path) -> list[tuple[ServingTopology, str]]:
    """Every spec a path gives: a file of one or more YAML documents, or a directory of them (``*.yaml``,
    ``*.yml``, in name order). Each comes with its source for messages: ``file`` or ``file#2`` (document 2)."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        if not files:
            raise InputError(f"{path}: directory holds no .yaml or .yml spec files")
        return [spec for f in files for spec in load_specs(f)]
    docs = parse_documents(read_text(path), str(path))
    if not docs:
        raise InputError(f"{path}: no YAML document")
    many = len(docs) > 1
    out = []
    for i, doc in enumerate(docs, start=1):
        source = f"{path}#{i}" if many else str(path)  # numbered as parse_documents counts, for locate
        out.append((validate_document(doc, source, ServingTopology), source))
    return out


def load_cluster(path: Path) -> ClusterSpec:
    """A cluster file. One written as JSON (``placer cluster generate -o cluster.json``; JSON is YAML) is read
    by the json module first: a 100k-GPU file's YAML parse took seconds, json.loads a tenth of one. Anything
    wrong in it is then said by the YAML reading of the same text, with its line, as for any other file."""
    data = json_object(read_text(path))
    if data is not None and data.get("kind") == "Cluster":
        try:
            return ClusterSpec.model_validate(data, by_alias=True, by_name=False)
        except ValidationError:
            pass  # said below, with the line
    return load_model(path, ClusterSpec)


def locate(source: Path | str, error: InputError) -> InputError:
    """Give an error raised after loading (message starting with a field path) the file and line. ``source``
    is a file, or a spec's source as load_specs names it (``file#2``: the line is looked up in document 2)."""
    message = str(error)
    path, document = source_document(source)
    try:
        docs = parse_documents(read_text(path), str(path))
    except InputError:
        docs = []
    return (
        at_line(source, docs[document - 1][1], message) if len(docs) >= document else InputError(f"{source}: {message}")
    )


def at_line(source: Path | str, root: yaml.Node, message: str) -> InputError:
    """An error found after validation (``message`` starts with a field path), given the line of that
    field in the document ``root`` it came from."""
    line = line_of(root, path_from_text(message))
    return InputError(f"{source}:{line}: {message}" if line else f"{source}: {message}")


def source_document(source: Path | str) -> tuple[Path, int]:
    """The file and document number (from 1) of a source as load_specs names it. A file whose own name ends
    in ``#N`` is that file (document 1), not document N of another."""
    found = re.fullmatch(r"(.+)#([1-9]\d*)", str(source))
    if found is None or Path(source).exists():
        return Path(source), 1
    return Path(found.group(1)), int(found.group(2))
