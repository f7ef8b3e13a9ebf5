"""YAML files -> validated models, with errors that name the file, the field path and the line.

Inputs are untrusted: a size limit, read once from a pipe; the YAML itself is read by placer.model.yaml_text
(safe loading only, no anchors/aliases, no duplicate keys, YAML 1.2 scalars), a JSON cluster file by
placer.model.json_text. Errors found after loading are located by composing the document again.
"""

from __future__ import annotations

import errno
import gc
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from placer.model.cluster import ClusterSpec
from placer.model.errors import InputError
from placer.model.json_text import json_object
from placer.model.messages import line_of, path_from_text, validation_message
from placer.model.spec import ServingTopology
from placer.model.yaml_text import parse_documents

MAX_BYTES = 64 * 1024 * 1024
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
    wrong in it is then said by the YAML reading of the same text, with its line, as for any other file.

    Python's cycle collector is paused meanwhile (``collector_paused``): a 100k-GPU YAML file took 8.0 CPU s
    with it running, 4.0 without."""
    with collector_paused():
        return _load_cluster(path)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Reading a cluster (or importing one) builds millions of small objects that live to the end and no
    garbage to speak of; Python's cyclic collector would rescan them again and again (a third of a
    30k-node import). Inputs are bounded (64 MiB), so pausing it bounds the garbage too. A caller's disabled
    collector stays disabled."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _load_cluster(path: Path) -> ClusterSpec:
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
