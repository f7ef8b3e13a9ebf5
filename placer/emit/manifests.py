"""Placement -> Kubernetes manifests, in a canonical order, ready for ``kubectl apply -f -``.

The public entry points live here; the manifests themselves are built by one module per output flavour in
``placer.emit.targets`` (``--target``): the default ``coscheduling`` gives per replica a scheduler-plugins
``PodGroup``, one ``Pod`` per (instance, node) pinned with required node affinity on
``kubernetes.io/hostname`` and asking for exactly the GPUs placer chose there, then the router's
``Deployment`` and ``Service``; docs/TARGETS.md describes the others (KAI, Volcano, Kueue, Grove,
LeaderWorkerSet, DRA). Annotations carry the GPU indices and predicted costs so that ``placer explain`` can
read the manifests back. Every value that reaches a manifest was validated at the edge (names, labels,
images, env), and documents are serialised by PyYAML or json, never by string templates.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Mapping
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from placer.check.verify import Report
from placer.emit.targets import DEFAULT_TARGET, TARGETS, builder
from placer.emit.targets.common import GPU_RESOURCE, GROUP_LABEL, Context, pod_name
from placer.model.errors import InputError
from placer.model.placement import Placement
from placer.model.record import spec_record
from placer.model.spec import ServingTopology
from placer.model.yaml_text import add_yaml12_numbers
from placer.topology.graph import Topology

__all__ = [
    "GPU_RESOURCE",
    "GROUP_LABEL",
    "TARGETS",
    "build_manifests",
    "placement_text",
    "pod_name",
    "to_json_list",
    "to_yaml",
]


def build_manifests(
    spec: ServingTopology,
    topo: Topology,
    placement: Placement,
    report: Report,
    target: str = DEFAULT_TARGET,
    nccl: bool | None = None,
    target_version: str | None = None,
) -> list[dict]:
    """The manifests for one ``--target``. ``nccl`` adds placer's NCCL environment to engine pods; by default
    every target but ``coscheduling`` (whose output stays as it always was) gets it. ``target_version``: the
    release of the target's scheduler (``--target-version``; default the newest placer supports)."""
    with_nccl = (target != DEFAULT_TARGET) if nccl is None else nccl
    ctx = Context(
        spec, topo, placement, report, nccl=with_nccl, exact_gpus=target == "dra", target_version=target_version
    )
    return builder(target)(ctx)


def topology_manifests(
    placed: list[tuple[ServingTopology, Placement, Report]],
    topo: Topology,
    target: str,
    target_version: str | None = None,
) -> list[dict]:
    """``--topology-objects``: the cluster-scoped objects ``target``'s constraints refer to
    (placer.emit.targets.topology_objects), built for each placed deployment with its label keys and tiers.
    They are the cluster's, so they are printed once; deployments that need different ones are refused."""
    from placer.emit.targets.topology_objects import topology_objects

    out: dict[tuple[str, str], tuple[str, dict]] = {}
    for spec, placement, report in placed:
        ctx = Context(spec, topo, placement, report, target_version=target_version)
        for doc in topology_objects(ctx, target):
            key = (doc["kind"], doc["metadata"]["name"])
            first = out.setdefault(key, (spec.metadata.name, doc))
            if first[1] != doc:
                raise InputError(
                    f"--topology-objects: {first[0]} and {spec.metadata.name} need different {key[0]} "
                    f"{key[1]!r} (their scheduling.topologyLabels, volcanoTiers or topology differ); print "
                    "them one deployment at a time"
                )
    return [doc for _, doc in out.values()]


def _identity(doc: dict) -> tuple:
    meta = doc.get("metadata") or {}
    return (doc.get("apiVersion"), doc.get("kind"), meta.get("namespace"), meta.get("name"))


def without_repeats(docs: list[dict]) -> list[dict]:
    """Each object once: the deployments of a batch share their target's cluster-scoped topology object,
    and ``--topology-objects -`` adds it beside theirs (``kubectl create`` refuses an object twice). Only
    exact repeats go; two different objects of one name stay, for the API server to refuse, not placer
    to pick between."""
    seen: dict[tuple, list[dict]] = {}
    out = []
    for doc in docs:
        same = seen.setdefault(_identity(doc), [])
        if doc in same:
            continue
        same.append(doc)
        out.append(doc)
    return out


def split_off(docs: list[dict], taken: list[dict]) -> list[dict]:
    """``docs`` without the objects of ``taken`` (``--topology-objects FILE`` moves them there)."""
    return [d for d in docs if d not in taken]


class _PlainDumper(yaml.SafeDumper):
    """No anchors or aliases: a shared dict is written out in full at each place (readers such as placer's
    own loader, and reviewers, get plain YAML)."""

    def ignore_aliases(self, data) -> bool:
        return True


class _FastDumper(getattr(yaml, "CSafeDumper", _PlainDumper)):  # type: ignore[misc]
    """The same, with libyaml's emitter (every PyPI wheel of PyYAML has it): 5x faster, which a batch of
    2,500 manifests needs (3 s with the Python emitter). It writes the same bytes as the Python one except
    where a long string holds characters outside printable ASCII (it folds those lines elsewhere) or a key
    has 123-128 characters (see _SIMPLE_KEY_MAX), so only documents with neither are given to it
    (tests/test_targets.py).

    What stays in Python is made direct: the plain types a manifest holds become nodes without PyYAML's
    per-object lookup (anything else goes the usual way), and a scalar's implicit tag, a pure function of
    its text, is remembered. Same nodes, so the same bytes; half the time on a batch."""

    def ignore_aliases(self, data) -> bool:
        return True

    def represent_data(self, data):
        kind = type(data)
        if kind is str:
            return ScalarNode(_STR, data, style=self.default_style)
        if kind is dict and self.default_flow_style is not None:
            items = list(data.items())
            if self.sort_keys:
                with contextlib.suppress(TypeError):  # keys of unlike types: as PyYAML, left in their order
                    items = sorted(items)
            pairs = [(self.represent_data(k), self.represent_data(v)) for k, v in items]
            return MappingNode(_MAP, pairs, flow_style=self.default_flow_style)
        if kind is list and self.default_flow_style is not None:
            nodes = [self.represent_data(v) for v in data]
            return SequenceNode(_SEQ, nodes, flow_style=self.default_flow_style)
        if kind is int:
            return ScalarNode(_INT, str(data), style=self.default_style)
        return super().represent_data(data)

    def resolve(self, kind, value, implicit):
        if kind is ScalarNode and not self.yaml_path_resolvers:
            return _scalar_tag(value, implicit)
        return super().resolve(kind, value, implicit)


_STR, _INT = "tag:yaml.org,2002:str", "tag:yaml.org,2002:int"
_MAP, _SEQ = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"


class _Resolver(yaml.resolver.Resolver):
    pass


for _cls in (_PlainDumper, _FastDumper, _Resolver):  # a string such as "1e3" is quoted, as the loader needs
    add_yaml12_numbers(_cls)


@functools.lru_cache(maxsize=1 << 16)
def _scalar_tag(value: str, implicit: tuple[bool, bool]) -> str:
    return _Resolver().resolve(ScalarNode, value, implicit)


# The Python emitter counts a key's implicit "!!str" tag (5 characters) against its 128-character limit for a
# simple key and writes a longer key as "? key"; libyaml does not count the tag. Keys of 123-128 characters
# would come out differently, so a document holding one goes to the Python emitter.
_SIMPLE_KEY_MAX = 122
_LONG_KEY = re.compile(r"""(?:'[^']{123,}'|"[^"]{123,}"): """)  # a quoted key of _SIMPLE_KEY_MAX + 1 or more


def _libyaml_alike(value) -> bool:
    """Whether libyaml's emitter writes this document as the Python one does: every string printable ASCII
    and no key longer than _SIMPLE_KEY_MAX. The document's repr says so at C speed when it is ASCII with no
    backslash (a string's repr escapes exactly the unprintable characters and shows the printable non-ASCII
    ones as they are; a key is a quoted string before ": "); otherwise the strings are looked at one by one."""
    text = repr(value)
    if text.isascii() and "\\" not in text:
        return _LONG_KEY.search(text) is None
    return _strings_alike(value)


def _strings_alike(value) -> bool:
    if isinstance(value, str):
        return value.isascii() and value.isprintable()
    if isinstance(value, dict):
        return all(
            _strings_alike(k) and _strings_alike(v) and not (isinstance(k, str) and len(k) > _SIMPLE_KEY_MAX)
            for k, v in value.items()
        )
    if isinstance(value, list):
        return all(_strings_alike(v) for v in value)
    return True


def to_yaml(docs: list[dict]) -> str:
    """Every document after a ``---`` line, keys sorted: the same bytes for the same manifests, with or
    without libyaml."""
    return "".join("---\n" + _dump(doc, width=1000) for doc in docs)


def _dump(doc, width: int | None = None) -> str:
    """One document in block style, keys sorted (``width`` None: PyYAML's 80 columns), by libyaml's emitter
    where every string in it is printable ASCII and by the Python one otherwise: the same bytes either way."""
    dumper = _FastDumper if _libyaml_alike(doc) else _PlainDumper
    return yaml.dump(doc, Dumper=dumper, sort_keys=True, default_flow_style=False, width=width)


def to_json_list(docs: list[dict]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}, indent=2, sort_keys=True) + "\n"


def placement_text(placement: Placement, path: Path, spec: ServingTopology, target: str | None = None) -> str:
    """The placement record as JSON or YAML, chosen by the file's extension, with the spec (and the --target
    of the manifests printed beside it) inside."""
    record = placement.to_record(spec_record(spec), target=target)
    if path.suffix.lower() == ".json":
        return json.dumps(record, indent=2, sort_keys=True) + "\n"
    return _dump(record)


def records_text(
    placements: list[tuple[ServingTopology, Placement]],
    targets: Mapping[str, str] | None = None,
    path: Path | None = None,
) -> str:
    """Several placement records (what --placement writes for a batch, --keep, plan and autoscale): a YAML
    stream, or for a ``path`` ending in ``.json`` one record alone and several as a ``kind: List`` (JSON has no streams;
    every reader takes both). ``targets``: the --target of each deployment's manifests, by namespace/name."""
    targets = targets or {}
    records = [p.to_record(spec_record(s), target=targets.get(f"{p.namespace}/{p.deployment}")) for s, p in placements]
    if path is not None and path.suffix.lower() == ".json":
        return json.dumps(records[0], indent=2, sort_keys=True) + "\n" if len(records) == 1 else to_json_list(records)
    return "".join("---\n" + _dump(record) for record in records)
