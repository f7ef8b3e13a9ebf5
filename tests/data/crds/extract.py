"""Turn a published CRD into the JSON Schema the tests validate placer's objects against.

    python tests/data/crds/extract.py CRD.yaml [--version V] [--elide PATH]... [-o OUT.json]
    python tests/data/crds/extract.py --regenerate     # every file in GENERATED, from sources/

What it does to the version's ``openAPIV3Schema`` (and nothing else):

- drops every ``description`` (size; the meaning stays in the CRD);
- ``apiVersion`` / ``kind`` become ``const`` (group/version, kind) and the top level requires ``apiVersion``,
  ``kind`` and ``metadata`` besides what the CRD itself requires;
- an integer with ``format: int32`` / ``int64`` gets the type's ``minimum`` / ``maximum`` unless the CRD
  gives its own (the API server rejects values outside the type);
- every object schema with ``properties`` and no ``additionalProperties`` or
  ``x-kubernetes-preserve-unknown-fields`` gets ``additionalProperties: false``: the API server prunes
  unknown fields of a structural schema, so a field placer emits that the CRD does not know would be
  silently dropped; the tests make it an error instead;
- ``nullable: true`` becomes a ``null`` alternative of the type;
- ``--elide PATH`` replaces a subtree by ``{"type": "object"}``. PATH is dotted property names, ``[]`` for
  an array's items (``spec.template.cliques[].spec.podSpec``). Used for Kubernetes API types a CRD embeds
  (PodSpec, PersistentVolumeClaim, HPA metrics, ResourceClaimTemplateSpec) and for ``status``: placer emits
  no status, and the tests validate the pod specs it does emit with kubernetes-validate as Pods.

Everything else (``enum``, ``default``, ``pattern``, lengths, ``required``, ``format``, ``anyOf``, the
``x-kubernetes-*`` extensions, which JSON Schema ignores) is kept as the CRD has it. CEL rules
(``x-kubernetes-validations``) are kept as text but not evaluated; the tests check by hand the ones that
bear on placer's output. Output is stable: keys in a fixed order, properties in the CRD's order.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
# The schemas under tests/data/crds/ made by this script: output file -> (source under sources/, --elide paths).
# The sources are excerpts of the published CRDs (see README.md); the full published files give the same
# output with the same paths.
GENERATED = {
    "leaderworkerset.x-k8s.io.v1.json": (
        "leaderworkerset.x-k8s.io_leaderworkersets.excerpt.yaml",
        [
            "spec.leaderWorkerTemplate.leaderTemplate.spec",
            "spec.leaderWorkerTemplate.workerTemplate.spec",
            "spec.leaderWorkerTemplate.volumeClaimTemplates[]",
            "status",
        ],
    ),
    "podcliqueset.grove.io.v1alpha1.json": (
        "grove.io_podcliquesets.excerpt.yaml",
        [
            "spec.template.cliques[].spec.podSpec",
            "spec.template.cliques[].spec.autoScalingConfig.metrics[]",
            "spec.template.podCliqueScalingGroups[].scaleConfig.metrics[]",
            "spec.template.resourceClaimTemplates[].templateSpec",
            "status",
        ],
    ),
}
INT_BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
FIRST = ("type", "const")
LAST = ("items", "properties", "additionalProperties", "required")


def extract(crd: dict[str, Any], version: str | None = None, elide: list[str] | None = None) -> dict[str, Any]:
    """JSON Schema of one version of a CRD (the only, or the storage, version unless ``version`` names one)."""
    if crd.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"not a CustomResourceDefinition: kind {crd.get('kind')!r}")
    spec = crd["spec"]
    versions = spec["versions"]
    if version is None:
        chosen = versions[0] if len(versions) == 1 else next(v for v in versions if v.get("storage"))
    else:
        matching = [v for v in versions if v["name"] == version]
        if not matching:
            raise ValueError(f"no version {version!r}; the CRD has {[v['name'] for v in versions]}")
        chosen = matching[0]
    root = chosen["schema"]["openAPIV3Schema"]
    elided, seen = set(elide or []), set[str]()
    out = _convert(root, "", elided, seen)
    props = out.setdefault("properties", {})
    props["apiVersion"] = {"const": f"{spec['group']}/{chosen['name']}"}
    props["kind"] = {"const": spec["names"]["kind"]}
    required = ["apiVersion", "kind", "metadata"]
    out["required"] = required + [r for r in out.get("required", []) if r not in required]
    unused = elided - seen
    if unused:
        raise ValueError(f"--elide paths not in the schema: {sorted(unused)}")
    return _ordered(out)


def _convert(node: dict[str, Any], path: str, elided: set[str], seen: set[str]) -> dict[str, Any]:
    if path in elided:
        seen.add(path)
        return {"type": "object"}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "description":
            continue
        if key == "properties":
            out[key] = {
                name: _convert(child, f"{path}.{name}" if path else name, elided, seen) for name, child in value.items()
            }
        elif key == "items" and isinstance(value, dict):
            out[key] = _convert(value, f"{path}[]", elided, seen)
        elif key == "additionalProperties" and isinstance(value, dict):
            out[key] = _convert(value, f"{path}{{}}", elided, seen)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [_convert(v, path, elided, seen) for v in value]
        elif key == "not":
            out[key] = _convert(value, path, elided, seen)
        else:
            out[key] = value
    if out.get("type") == "integer" and out.get("format") in INT_BOUNDS:
        low, high = INT_BOUNDS[out["format"]]
        out.setdefault("minimum", low)
        out.setdefault("maximum", high)
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    open_ = out.get("x-kubernetes-preserve-unknown-fields") is True
    if "properties" in out and "additionalProperties" not in out and not open_:
        out["additionalProperties"] = False
    return _ordered(out)


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    """type first, then the other keywords alphabetically, then items / properties / additionalProperties /
    required: every run gives the same bytes."""
    head = [k for k in FIRST if k in node]
    tail = [k for k in LAST if k in node]
    middle = sorted(k for k in node if k not in FIRST and k not in LAST)
    return {k: node[k] for k in head + middle + tail}


def generated(name: str) -> str:
    """The text this script makes for one entry of ``GENERATED`` from its source excerpt."""
    source, elide = GENERATED[name]
    (crd,) = [d for d in yaml.safe_load_all((HERE / "sources" / source).read_text()) if d]
    return json.dumps(extract(crd, None, elide), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("crd", type=Path, nargs="?", help="the CRD YAML (one document)")
    parser.add_argument("--regenerate", action="store_true", help="rewrite every GENERATED file from sources/")
    parser.add_argument("--version", help="CRD version (default: the only one, else the storage version)")
    parser.add_argument("--elide", action="append", default=[], metavar="PATH", help="subtree to replace")
    parser.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    args = parser.parse_args(argv)
    if args.regenerate:
        for name in GENERATED:
            (HERE / name).write_text(generated(name))
        return 0
    if args.crd is None:
        parser.error("give a CRD file (or --regenerate)")
    docs = [d for d in yaml.safe_load_all(args.crd.read_text()) if d]
    if len(docs) != 1:
        parser.error(f"{args.crd}: expected one YAML document, found {len(docs)}")
    try:
        schema = extract(docs[0], args.version, args.elide)
    except (KeyError, ValueError, StopIteration) as exc:
        print(f"{args.crd}: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(schema, indent=2) + "\n"
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
