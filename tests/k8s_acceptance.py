"""Would current upstream accept this object? The checks an API server and the projects' admission webhooks
run on create, restated for the tests (a helper for tests, not part of placer).

Phase 1, custom kinds: the CRD is found by group and kind among the complete published CRDs vendored in
``tests/data/crds/upstream/`` (``SOURCES`` names repository, path, commit and release of each). The object's
``apiVersion`` must be a version the CRD serves. Defaults are applied, then the object is validated against
that version's ``openAPIV3Schema`` as a structural schema: a field the schema does not name is an error (the
API server would prune it silently, so placer's intent would be lost) unless an ancestor has
``x-kubernetes-preserve-unknown-fields``; ``x-kubernetes-int-or-string``, ``x-kubernetes-embedded-resource``,
list types (``set``, ``map`` keys), formats, bounds, patterns, enums, ``nullable`` and the value validations
(``allOf``/``anyOf``/``oneOf``/``not``) as Kubernetes reads them. Every ``x-kubernetes-validations`` CEL rule
is evaluated with cel-python as on create: ``self`` is the value; a rule that mentions ``oldSelf`` is a
transition rule, skipped on create unless it sets ``optionalOldSelf`` (then ``oldSelf`` is an empty optional).
Phase 2, built-in kinds (Pod, Service, Deployment, ...): kubernetes-validate in strict mode for
``K8S_VERSION``; pod templates embedded in custom kinds are validated the same way as Pods.
Phase 3, what the API server and webhooks check in Go code, restated as small functions, each with the
upstream file and line: object names and metadata (``ValidateObjectMeta``), Grove's PodCliqueSet webhook,
LeaderWorkerSet's webhook, KAI's PodGroup webhook.

``problems(doc)`` returns every finding as ``path: message``; ``assert_accepted(docs)`` fails with all of them.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import yaml

UPSTREAM = Path(__file__).resolve().parent / "data" / "crds" / "upstream"
K8S_VERSION = "1.34"  # built-in kinds; resource.k8s.io/v1 (DRA) is GA from 1.34
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}

# ---- names and metadata (k8s.io/apimachinery/pkg/util/validation/validation.go) -------------------------

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_ENV_VAR_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
OBJECT_META_FIELDS = {
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
    "managedFields",
}  # fmt: skip


def dns1123_label(value: str) -> list[str]:
    """IsDNS1123Label (apimachinery util/validation/validation.go): at most 63, [a-z0-9-], alphanumeric ends."""
    out = [] if _DNS1123_LABEL.match(value) else [f"{value!r} is not a DNS-1123 label ([a-z0-9-], alphanumeric ends)"]
    return out + ([f"{value!r} is longer than 63 characters"] if len(value) > 63 else [])


def dns1035_label(value: str) -> list[str]:
    """IsDNS1035Label (same file): a DNS-1123 label that starts with a letter (Service, LeaderWorkerSet)."""
    out = [] if _DNS1035_LABEL.match(value) else [f"{value!r} is not a DNS-1035 label (must start with a letter)"]
    return out + ([f"{value!r} is longer than 63 characters"] if len(value) > 63 else [])


def dns1123_subdomain(value: str) -> list[str]:
    """IsDNS1123Subdomain (same file): at most 253, dot-separated DNS-1123 labels."""
    ok = _DNS1123_SUBDOMAIN.match(value) and len(value) <= 253
    return [] if ok else [f"{value!r} is not a DNS-1123 subdomain"]


def qualified_name(key: str) -> list[str]:
    """IsQualifiedName (same file): label and annotation keys, ``[prefix/]name`` with a 63-character name."""
    prefix, _, name = key.rpartition("/")
    out = []
    if prefix and dns1123_subdomain(prefix):
        out.append(f"key {key!r}: prefix is not a DNS-1123 subdomain")
    if not _QUALIFIED_NAME.match(name) or len(name) > 63:
        out.append(f"key {key!r}: name part is not a qualified name of at most 63 characters")
    return out


def label_value(value: str) -> list[str]:
    """IsValidLabelValue (same file): at most 63, alphanumeric ends, [-_.A-Za-z0-9]."""
    ok = isinstance(value, str) and _LABEL_VALUE.match(value) and len(value) <= 63
    return [] if ok else [f"label value {value!r} is not valid"]


# Name rule per kind: ValidateObjectMeta's nameFn. Services use NameIsDNS1035Label (kubernetes/kubernetes
# pkg/apis/core/validation/validation.go, ValidateServiceName); custom resources and the other built-in kinds
# placer emits use NameIsDNSSubdomain (apiextensions-apiserver pkg/registry/customresource/validator.go).
NAME_RULES = {"Service": dns1035_label, "Namespace": dns1123_label}


def object_meta(meta: Any, kind: str, namespaced: bool | None, path: str = "metadata") -> list[str]:
    """ValidateObjectMeta (kubernetes pkg/apis/core/validation/validation.go / apimachinery
    pkg/api/validation/objectmeta.go): name, namespace, labels, annotations (keys, values, 256 KiB total)."""
    if not isinstance(meta, dict):
        return [f"{path}: must be an object"]
    out = [f"{path}.{k}: unknown ObjectMeta field" for k in meta if k not in OBJECT_META_FIELDS]
    name = meta.get("name")
    if name is None and "generateName" not in meta:
        out.append(f"{path}.name: required")
    elif name is not None:
        out += [f"{path}.name: {m}" for m in NAME_RULES.get(kind, dns1123_subdomain)(name)]
    if namespaced is True:
        ns = meta.get("namespace")
        out += [f"{path}.namespace: required"] if not ns else [f"{path}.namespace: {m}" for m in dns1123_label(ns)]
    if namespaced is False and meta.get("namespace"):
        out.append(f"{path}.namespace: not allowed on a cluster-scoped {kind}")
    out += labels_and_annotations(meta, path)
    return out


def labels_and_annotations(meta: dict, path: str) -> list[str]:
    out = []
    for key, value in (meta.get("labels") or {}).items():
        out += [f"{path}.labels: {m}" for m in qualified_name(key) + label_value(value)]
    annotations = meta.get("annotations") or {}
    for key, value in annotations.items():
        out += [f"{path}.annotations: {m}" for m in qualified_name(key)]
        if not isinstance(value, str):
            out.append(f"{path}.annotations[{key}]: must be a string")
    if sum(len(k) + len(str(v)) for k, v in annotations.items()) > 256 * 1024:
        out.append(f"{path}.annotations: total size exceeds 256 KiB")
    return out


# ---- CRDs ----------------------------------------------------------------------------------------------


@cache
def crds(release: str | None = None) -> dict[tuple[str, str], dict]:
    """(group, kind) -> the vendored CRD: main's, or with ``release`` (a folder ``upstream/<name>-<tag>``)
    that release's where it has one."""
    out = {}
    folders = [UPSTREAM] + ([UPSTREAM / release] if release else [])
    for folder in folders:
        if not folder.is_dir():
            raise FileNotFoundError(f"no vendored CRDs for release {release!r} ({folder})")
        out.update(_crds_in(folder))
    return out


@cache
def _crds_in(folder: Path) -> dict[tuple[str, str], dict]:
    """Read once per folder, by libyaml where PyYAML has it: the Python parser took ~1 s a CRD."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out = {}
    for path in sorted(folder.glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=loader)  # noqa: S506 (a safe loader)
        out[(crd["spec"]["group"], crd["spec"]["names"]["kind"])] = crd
    return out


def sources() -> list[dict[str, str]]:
    """The SOURCES rows: repository, path, commit, release, vendored file."""
    keys = ("repository", "path", "commit", "release", "file")
    lines = (UPSTREAM / "SOURCES").read_text().splitlines()
    return [dict(zip(keys, line.split("\t"), strict=True)) for line in lines if line and not line.startswith("#")]


def _group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def is_custom(doc: dict, release: str | None = None) -> bool:
    return (_group_version(doc.get("apiVersion", ""))[0], doc.get("kind")) in crds(release)


# ---- structural schema ---------------------------------------------------------------------------------


def apply_defaults(value: Any, schema: dict) -> Any:
    """The API server defaults before validating: missing properties with a ``default`` get it."""
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key, sub in props.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
        for key, item in value.items():
            sub = props.get(key)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None:
                apply_defaults(item, sub)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])
    return value


def _type_ok(value: Any, typ: str) -> bool:
    return {
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
    }[typ]


def validate_schema(value: Any, schema: dict, path: str = "", *, fields: bool = True) -> list[str]:
    """Errors of ``value`` against a structural schema node (``fields`` False inside allOf/anyOf/oneOf/not,
    whose properties only constrain values and never declare fields)."""
    where = path or "<root>"
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: null is not allowed"]
    out: list[str] = []
    if schema.get("x-kubernetes-int-or-string"):
        if not (_type_ok(value, "integer") or isinstance(value, str)):
            return [f"{where}: must be an integer or a string"]
    elif "type" in schema and not _type_ok(value, schema["type"]):
        return [f"{where}: must be of type {schema['type']}, got {type(value).__name__}"]
    out += _value_rules(value, schema, where)
    for key in ("allOf", "anyOf", "oneOf"):
        if key in schema:
            passed = [not validate_schema(value, s, path, fields=False) for s in schema[key]]
            if (key == "allOf" and not all(passed)) or (key == "anyOf" and not any(passed)):
                out.append(f"{where}: does not satisfy {key}")
            if key == "oneOf" and sum(passed) != 1:
                out.append(f"{where}: must satisfy exactly one of oneOf")
    if "not" in schema and not validate_schema(value, schema["not"], path, fields=False):
        out.append(f"{where}: must not satisfy 'not'")
    if isinstance(value, dict):
        out += _object(value, schema, path, fields)
    elif isinstance(value, list):
        out += _array(value, schema, path, fields)
    if fields:
        out += cel_rules(value, schema, where)
    return out


def _value_rules(value: Any, schema: dict, where: str) -> list[str]:
    out = []
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            out.append(f"{where}: longer than {schema['maxLength']} characters")
        if "minLength" in schema and len(value) < schema["minLength"]:
            out.append(f"{where}: shorter than {schema['minLength']} characters")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            out.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if _type_ok(value, "number"):
        if schema.get("format") in INT_RANGES and isinstance(value, int):
            lo, hi = INT_RANGES[schema["format"]]
            if not lo <= value <= hi:
                out.append(f"{where}: {value} is out of range for {schema['format']}")
        if "minimum" in schema and (
            value < schema["minimum"] or (schema.get("exclusiveMinimum") and value == schema["minimum"])
        ):
            out.append(f"{where}: {value} is below the minimum {schema['minimum']}")
        if "maximum" in schema and (
            value > schema["maximum"] or (schema.get("exclusiveMaximum") and value == schema["maximum"])
        ):
            out.append(f"{where}: {value} is above the maximum {schema['maximum']}")
        if "multipleOf" in schema and value % schema["multipleOf"]:
            out.append(f"{where}: not a multiple of {schema['multipleOf']}")
    return out


def _object(value: dict, schema: dict, path: str, fields: bool) -> list[str]:
    where = path or "<root>"
    out = [f"{where}: missing required field {k!r}" for k in schema.get("required", []) if k not in value]
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        out.append(f"{where}: more than {schema['maxProperties']} properties")
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        out.append(f"{where}: fewer than {schema['minProperties']} properties")
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    embedded = schema.get("x-kubernetes-embedded-resource")
    preserve = schema.get("x-kubernetes-preserve-unknown-fields")
    for key, item in value.items():
        sub = f"{path}.{key}" if path else key
        if key in props:
            out += validate_schema(item, props[key], sub, fields=fields)
        elif isinstance(extra, dict):
            out += validate_schema(item, extra, sub, fields=fields)
        elif embedded and key in ("apiVersion", "kind", "metadata"):
            if key == "metadata":
                out += object_meta(item, value.get("kind", ""), None, sub)
        elif fields and not preserve and extra is not True:
            out.append(f"{sub}: unknown field (the API server would prune it)")
    return out


def _array(value: list, schema: dict, path: str, fields: bool) -> list[str]:
    where = path or "<root>"
    out = []
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        out.append(f"{where}: more than {schema['maxItems']} items")
    if "minItems" in schema and len(value) < schema["minItems"]:
        out.append(f"{where}: fewer than {schema['minItems']} items")
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set" or schema.get("uniqueItems"):
        seen = [repr(v) for v in value]
        if len(set(seen)) != len(seen):
            out.append(f"{where}: duplicate items in a set")
    if list_type == "map":
        keys = [tuple(item.get(k) for k in schema.get("x-kubernetes-list-map-keys", [])) for item in value]
        if len(set(keys)) != len(keys):
            out.append(f"{where}: duplicate map keys {schema.get('x-kubernetes-list-map-keys')}")
    if isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out += validate_schema(item, schema["items"], f"{path}[{i}]", fields=fields)
    return out


# ---- CEL (x-kubernetes-validations) ---------------------------------------------------------------------


class _NoOldSelf:
    """``oldSelf`` on create for a rule with ``optionalOldSelf: true``: an optional with no value."""


def _has_value(value: Any) -> celpy.celtypes.BoolType:
    return celpy.celtypes.BoolType(not isinstance(value, _NoOldSelf))


def _lower_ascii(value: Any) -> celpy.celtypes.StringType:
    """Kubernetes' CEL strings extension (k8s.io/apiserver cel library, ext.Strings): ASCII letters only."""
    return celpy.celtypes.StringType("".join(c.lower() if c.isascii() else c for c in str(value)))


@cache
def _program(rule: str) -> celpy.Runner:
    env = celpy.Environment()
    return env.program(env.compile(rule), functions={"hasValue": _has_value, "lowerAscii": _lower_ascii})


def cel_rules(value: Any, schema: dict, where: str) -> list[str]:
    """Evaluate the node's CEL rules as on create (cel-python; Kubernetes' optional ``hasValue`` bound)."""
    out = []
    for rule in schema.get("x-kubernetes-validations", []):
        text = rule["rule"]
        activation: dict[str, Any] = {"self": celpy.json_to_cel(value)}
        if re.search(r"\boldSelf\b", text):
            if not rule.get("optionalOldSelf"):
                continue  # a transition rule: only on update
            activation["oldSelf"] = _NoOldSelf()
        try:
            result = _program(text).evaluate(activation)
        except celpy.CELEvalError as exc:  # the API server refuses the object when a rule cannot be evaluated
            out.append(f"{where}: CEL rule {text!r} failed to evaluate: {exc}")
            continue
        if isinstance(result, celpy.CELEvalError):
            out.append(f"{where}: CEL rule {text!r} failed to evaluate: {result}")
        elif result is not True and result != celpy.celtypes.BoolType(True):
            field = rule.get("fieldPath", "")
            at = (where + field) if where != "<root>" else (field.lstrip(".") or where)
            out.append(f"{at}: {rule.get('message') or 'failed rule: ' + text}")
    return out


# ---- one object ----------------------------------------------------------------------------------------


def _custom(doc: dict, release: str | None) -> list[str]:
    group, version = _group_version(doc["apiVersion"])
    crd = crds(release)[(group, doc["kind"])]
    served = [v["name"] for v in crd["spec"]["versions"] if v.get("served")]
    chosen = next((v for v in crd["spec"]["versions"] if v["name"] == version and v.get("served")), None)
    if chosen is None:
        return [f"apiVersion: {doc['apiVersion']} is not served; {crd['metadata']['name']} serves {served}"]
    if chosen.get("deprecated") and release is None:
        # accepted with a warning, but the newest release should get the current version: an error here
        return [f"apiVersion: {doc['apiVersion']} is deprecated: {chosen.get('deprecationWarning', '')}".rstrip(": ")]
    schema = chosen["schema"]["openAPIV3Schema"]
    obj = apply_defaults(copy.deepcopy(doc), schema)
    namespaced = crd["spec"]["scope"] == "Namespaced"
    out = object_meta(obj.get("metadata"), doc["kind"], namespaced)
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    top = {**schema, "properties": {k: v for k, v in schema.get("properties", {}).items() if k != "metadata"}}
    top_rules = top.pop("x-kubernetes-validations", [])
    out += validate_schema(body | {"apiVersion": doc["apiVersion"], "kind": doc["kind"]}, top)
    out += cel_rules(obj, {"x-kubernetes-validations": top_rules}, "<root>")
    return out


def embedded_pods(doc: dict) -> Iterable[tuple[str, dict, dict]]:
    """(path, metadata, pod spec) of the pod templates a custom kind embeds."""
    if doc["kind"] == "LeaderWorkerSet":
        lwt = doc["spec"]["leaderWorkerTemplate"]
        for key in ("leaderTemplate", "workerTemplate"):
            if key in lwt:
                yield f"spec.leaderWorkerTemplate.{key}", lwt[key].get("metadata", {}), lwt[key]["spec"]
    if doc["kind"] == "PodCliqueSet":
        for i, c in enumerate(doc["spec"]["template"]["cliques"]):
            meta = {k: c[k] for k in ("labels", "annotations") if k in c}
            yield f"spec.template.cliques[{i}].spec.podSpec", meta, c["spec"]["podSpec"]
    if doc["kind"] == "DynamoGraphDeployment":
        for i, c in enumerate(doc["spec"].get("components", [])):
            if "podTemplate" in c:
                t = c["podTemplate"]
                yield f"spec.components[{i}].podTemplate.spec", t.get("metadata", {}), t["spec"]


def _builtin(doc: dict, version: str) -> list[str]:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(map(str, exc.path)) or '<root>'}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError:
        return [f"apiVersion: {doc['apiVersion']} {doc['kind']} is not a Kubernetes {version} kind"]
    return []


def problems(
    doc: dict, *, k8s_version: str = K8S_VERSION, grove_tas: bool = True, release: str | None = None
) -> list[str]:
    """Every reason the API server (with the project's CRD and webhook) would refuse ``doc`` on create;
    ``release`` checks against an older release's CRDs (``upstream/<name>-<tag>/``, e.g. ``volcano-v1.12.0``)."""
    label = f"{doc.get('kind')} {doc.get('metadata', {}).get('name')!r}"
    if is_custom(doc, release):
        out = _custom(doc, release)
        for path, meta, spec in embedded_pods(doc):
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "embedded"} | meta, "spec": spec}
            out += [f"{path}: {m}" for m in _builtin(pod, k8s_version)]
            out += [f"{path}: {m}" for m in labels_and_annotations(meta, "metadata")]
        out += WEBHOOKS.get(doc["kind"], lambda d, **_: [])(doc, grove_tas=grove_tas)
    else:
        out = _builtin(doc, k8s_version)
        out += object_meta(doc.get("metadata"), doc.get("kind", ""), None)
    return [f"{label}: {m}" for m in out]


def assert_accepted(docs: Iterable[dict], **kw: Any) -> None:
    found = [m for d in docs for m in problems(d, **kw)]
    assert not found, "refused by upstream:\n  " + "\n  ".join(found[:40])


# ---- admission webhooks --------------------------------------------------------------------------------


def _unique(values: list[str], what: str) -> list[str]:
    dups = sorted({v for v in values if values.count(v) > 1})
    return [f"{what}: duplicate values {dups}"] if dups else []


GROVE_MAX_COMBINED_NAME = 45  # grove podcliqueset.go:44 maxCombinedResourceNameLength


def grove_name_length(pcs: str, group: str, clique: str) -> list[str]:
    """ai-dynamo/grove operator/internal/webhook/admission/pcs/validation/podcliqueset.go:1025-1041
    (validatePodNameConstraints): PodCliqueSet + scaling group + clique names at most 45 characters."""
    total = len(pcs) + len(group) + len(clique)
    if total <= GROVE_MAX_COMBINED_NAME:
        return []
    parts = f"PodCliqueSet {pcs!r}" + (f", scaling group {group!r}" if group else "") + f", clique {clique!r}"
    return [f"combined resource name length {total} exceeds 45 ({parts})"]


def grove_podcliqueset(doc: dict, *, grove_tas: bool = True, **_: Any) -> list[str]:
    """Grove's PodCliqueSet validating webhook on create (ai-dynamo/grove, operator/internal/webhook/admission/
    pcs/validation/podcliqueset.go and topologyconstraints.go at the commit in SOURCES)."""
    t = doc["spec"]["template"]
    cliques = t.get("cliques", [])
    groups = t.get("podCliqueScalingGroups", [])
    names = [c["name"] for c in cliques]
    out = [] if cliques else ["spec.template.cliques: at least one PodClique must be defined"]  # :241
    out += _unique(names, "spec.template.cliques[].name")  # podcliqueset.go:263
    out += _unique([c["spec"].get("roleName", "") for c in cliques], "spec.template.cliques[].roleName")  # :264
    grouped = [n for g in groups for n in g.get("cliqueNames", [])]
    for i, c in enumerate(cliques):
        path = f"spec.template.cliques[{i}]"
        out += [f"{path}.name: {m}" for m in dns1123_subdomain(c["name"])]  # :312
        if c["name"] not in grouped:  # :319 validateStandalonePodClique
            out += [f"{path}.name: {m}" for m in grove_name_length(doc["metadata"]["name"], "", c["name"])]
        spec = c["spec"]
        if spec.get("replicas", 0) <= 0:  # :523
            out.append(f"{path}.spec.replicas: must be greater than 0")
        mina = spec.get("minAvailable")
        if mina is not None and not 0 < mina <= spec.get("replicas", 0):  # :532-537
            out.append(f"{path}.spec.minAvailable: must be in 1..replicas")
        pod = spec.get("podSpec", {})
        if pod.get("topologySpreadConstraints") is not None or pod.get("nodeName"):  # :600-606 (create)
            out.append(f"{path}.spec.podSpec: topologySpreadConstraints and nodeName must not be set")
        for j, container in enumerate(pod.get("containers", [])):  # :627-636 validateContainerEnvVars
            env = [e["name"] for e in container.get("env", [])]
            out += _unique(env, f"{path}.spec.podSpec.containers[{j}].env")
            out += [f"{path}: env name {e!r} is invalid" for e in env if not _ENV_VAR_NAME.match(e)]
        if t.get("cliqueStartupType") == "CliqueStartupTypeExplicit":  # :540-549, :464-489
            after = spec.get("startsAfter", [])
            out += [f"{path}.spec.startsAfter: unknown clique {a!r}" for a in after if a not in names]
            out += [f"{path}.spec.startsAfter: refers to itself" for a in after if a == c["name"]]
            out += _unique(after, f"{path}.spec.startsAfter")
    schedulers = {c["spec"].get("podSpec", {}).get("schedulerName", "") for c in cliques}
    if len(schedulers) > 1:  # :286-293 validateSchedulerNames
        out.append(f"spec.template.cliques: the schedulerName for all pods have to be the same, got {schedulers}")
    out += _unique([g["name"] for g in groups], "spec.template.podCliqueScalingGroups[].name")  # :390
    out += _unique(grouped, "spec.template.podCliqueScalingGroups[].cliqueNames")  # :392
    for i, g in enumerate(groups):
        path = f"spec.template.podCliqueScalingGroups[{i}]"
        out += [f"{path}.name: {m}" for m in dns1123_subdomain(g["name"])]  # :347
        for n in g.get("cliqueNames", []):  # :499-518 validateScalingGroupPodCliqueNames (limit :1025-1041)
            if n not in names:
                out.append(f"{path}.cliqueNames: unidentified PodClique name {n!r}")
            out += [f"{path}: {m}" for m in grove_name_length(doc["metadata"]["name"], g["name"], n)]
        reps, mina = g.get("replicas"), g.get("minAvailable")
        if (reps is not None and reps <= 0) or (mina is not None and mina <= 0):  # :358-369
            out.append(f"{path}: replicas and minAvailable must be greater than 0")
        if reps is not None and mina is not None and mina > reps:  # :372-375
            out.append(f"{path}.minAvailable: must not be greater than replicas")
    out += grove_topology_constraints(t, grove_tas)
    return out


def grove_topology_constraints(t: dict, tas_enabled: bool) -> list[str]:
    """topologyconstraints.go:94-126: with Grove's topology-aware scheduling off, no constraint at all on
    create; podcliqueset.go:774-801 (validateResolvableTopologyConstraint): a constraint needs a topologyName,
    its own or inherited (PodCliqueSet -> scaling group -> clique), and all of them must name the same one."""
    owners: list[tuple[str, dict, str | None]] = [("spec.template", t, None)]
    pcs_name = (t.get("topologyConstraint") or {}).get("topologyName")
    by_clique: dict[str, str | None] = {}
    for i, g in enumerate(t.get("podCliqueScalingGroups", [])):
        owners.append((f"spec.template.podCliqueScalingGroups[{i}]", g, pcs_name))
        own = (g.get("topologyConstraint") or {}).get("topologyName") or pcs_name
        for n in g.get("cliqueNames", []):
            by_clique.setdefault(n, own)
    for i, c in enumerate(t.get("cliques", [])):
        owners.append((f"spec.template.cliques[{i}]", c, by_clique.get(c["name"], pcs_name)))
    out, seen = [], set()
    for path, owner, inherited in owners:
        tc = owner.get("topologyConstraint")
        if tc is None:
            continue
        if not tas_enabled:
            out.append(f"{path}.topologyConstraint: not allowed when Topology Aware Scheduling is disabled")
            continue
        name = tc.get("topologyName") or inherited
        if not name:
            out.append(f"{path}.topologyConstraint.topologyName: required when topologyConstraint is set")
        else:
            seen.add(name)
    if len(seen) > 1:
        out.append(f"spec.template: all topologyConstraint.topologyName values must match, got {sorted(seen)}")
    return out


def lws_leaderworkerset(doc: dict, **_: Any) -> list[str]:
    """kubernetes-sigs/lws pkg/webhooks/leaderworkerset_webhook.go:127-144 (generalValidate): the name is a
    DNS-1035 label (it names the headless Service); replicas 0..1,000,000; size at least 1."""
    out = [f"metadata.name: {m}" for m in dns1035_label(doc["metadata"]["name"])]
    spec = doc["spec"]
    if not 0 <= spec.get("replicas", 1) <= 1_000_000:
        out.append("spec.replicas: must be in 0..1000000")
    if spec["leaderWorkerTemplate"].get("size", 1) < 1:
        out.append("spec.leaderWorkerTemplate.size: must be equal or greater than 1")
    return out


def kai_podgroup(doc: dict, **_: Any) -> list[str]:
    """kai-scheduler/KAI-Scheduler pkg/apis/scheduling/v2alpha2/podgroup_webhook.go:102-207
    (validatePodGroupSpec, called by ValidateCreate at :23): minMember and minSubGroup exclusive; subgroup
    names unique, parents exist, no cycle; a leaf needs minMember; a subgroup with children must not set it."""
    spec = doc["spec"]
    subs = spec.get("subGroups", [])
    both = {"minMember", "minSubGroup"} <= set(spec)
    out = ["spec: minMember and minSubGroup are mutually exclusive"] if both else []
    names = [s["name"] for s in subs]
    out += _unique(names, "spec.subGroups[].name")
    parent = {s["name"]: s.get("parent") for s in subs}
    out += [f"spec.subGroups: parent {p!r} of {n!r} does not exist" for n, p in parent.items() if p and p not in parent]
    for n in parent:
        seen, cur = set(), n
        while cur is not None and cur in parent and cur not in seen:
            seen.add(cur)
            cur = parent[cur]
        if cur in seen:
            out.append("spec.subGroups: cycle detected in subgroups")
            break
    for s in subs:
        has_children = any(p == s["name"] for p in parent.values())
        if {"minMember", "minSubGroup"} <= set(s):
            out.append(f"subgroup {s['name']!r}: minMember and minSubGroup are mutually exclusive")
        if not has_children and "minMember" not in s:
            out.append(f"subgroup {s['name']}: minMember is required")
        if has_children and "minMember" in s:
            out.append(f"subgroup {s['name']!r}: minMember cannot be set on a mid-level SubGroup")
    return out


def _podgroup(doc: dict, **_: Any) -> list[str]:
    return kai_podgroup(doc) if doc["apiVersion"].startswith("scheduling.run.ai/") else []


WEBHOOKS = {"PodCliqueSet": grove_podcliqueset, "LeaderWorkerSet": lws_leaderworkerset, "PodGroup": _podgroup}


# ---- checks across the objects of one output ------------------------------------------------------------

KUEUE = "kueue.x-k8s.io/"


def made_pods(docs: Iterable[dict]) -> list[dict]:
    """Pods as the cluster will hold them: bare Pods, and each Deployment's or StatefulSet's template once
    per replica (named after its controller)."""
    out = []
    for d in docs:
        if d["kind"] == "Pod":
            out.append(d)
        elif d["kind"] in ("Deployment", "StatefulSet"):
            t = d["spec"]["template"]
            meta = t["metadata"] | {"name": d["metadata"]["name"], "namespace": d["metadata"].get("namespace")}
            out += [{"kind": "Pod", "metadata": meta, "spec": t["spec"]}] * d["spec"].get("replicas", 1)
    return out


def kueue_pod_groups(docs: Iterable[dict]) -> list[str]:
    """Kueue's checks on plain-Pod groups with TAS annotations (kubernetes-sigs/kueue
    pkg/controller/jobframework/tas_validation.go at ff69552e79ad, the main read for this). Per pod,
    ValidateTASPodSetRequest (:34-110): at most one of required / preferred / unconstrained (:51), slice size
    only with a slice topology and back (:102-108), slice size a positive integer (:131-156), podset-group-name
    not a number (:158) and never with slice annotations (:73-95). Per PodSet (pods of one group and role
    hash): the slice size not above its pod count (:170-190). Podset groups: exactly 2 PodSets, one of them a
    single pod, with the same required / preferred topology (:214-300). The pod index label below the group's
    total count (pkg/controller/jobs/pod/pod_controller.go:850), and every pod of a group agreeing on it."""
    out: list[str] = []
    podsets: dict[tuple[str, str], list[dict]] = {}
    totals: dict[str, set[str]] = {}
    for d in made_pods(docs):
        labels = d["metadata"].get("labels", {})
        if KUEUE + "pod-group-name" not in labels:
            continue
        a = d["metadata"].get("annotations", {})
        name = f"Pod {d['metadata']['name']!r}"
        group = labels[KUEUE + "pod-group-name"]
        totals.setdefault(group, set()).add(a.get(KUEUE + "pod-group-total-count", "<none>"))
        podsets.setdefault((group, a.get(KUEUE + "role-hash", "<spec hash>")), []).append(d)
        modes = [m for m in ("required", "preferred", "unconstrained") if f"{KUEUE}podset-{m}-topology" in a]
        if len(modes) > 1:
            out.append(f"{name}: more than one topology annotation {modes}")
        has_slice, has_size = KUEUE + "podset-slice-required-topology" in a, KUEUE + "podset-slice-size" in a
        if has_slice != has_size:
            out.append(f"{name}: podset-slice-required-topology and podset-slice-size go together")
        if has_size and not (a[KUEUE + "podset-slice-size"].isdigit() and int(a[KUEUE + "podset-slice-size"]) >= 1):
            out.append(f"{name}: podset-slice-size must be a positive integer")
        if KUEUE + "podset-group-name" in a:
            if a[KUEUE + "podset-group-name"].isdigit():
                out.append(f"{name}: podset-group-name must not be a number")
            if has_slice or has_size:
                out.append(f"{name}: podset-group-name may not be set with slice annotations")
            if not {"required", "preferred"} & set(modes):
                out.append(f"{name}: podset-group-name needs podset-required- or podset-preferred-topology")
        index = labels.get(KUEUE + "pod-group-pod-index")
        total = a.get(KUEUE + "pod-group-total-count", "0")
        if index is not None and not (index.isdigit() and int(index) < int(total)):
            out.append(f"{name}: pod-group-pod-index {index!r} is not below the total count {total}")
    out += [
        f"pod group {g!r}: pods disagree on pod-group-total-count {sorted(t)}" for g, t in totals.items() if len(t) > 1
    ]
    groups: dict[tuple[str, str], list[tuple[int, dict]]] = {}
    for (group, role), pods in podsets.items():
        a = pods[0]["metadata"]["annotations"]
        size = a.get(KUEUE + "podset-slice-size")
        if size and size.isdigit() and int(size) > len(pods):
            out.append(f"PodSet {group}/{role}: podset-slice-size {size} is greater than its {len(pods)} pods")
        if KUEUE + "podset-group-name" in a:
            groups.setdefault((group, a[KUEUE + "podset-group-name"]), []).append((len(pods), a))
    for (group, name), members in groups.items():
        if len(members) != 2:
            out.append(f"pod group {group!r}: podset group {name!r} has {len(members)} PodSets; it must have 2")
            continue
        if min(n for n, _ in members) != 1:
            out.append(f"pod group {group!r}: podset group {name!r} needs one PodSet of a single pod")
        keys = [
            (a.get(KUEUE + "podset-required-topology"), a.get(KUEUE + "podset-preferred-topology")) for _, a in members
        ]
        if keys[0] != keys[1]:
            out.append(f"pod group {group!r}: podset group {name!r} PodSets ask for different topologies {keys}")
    return out


def grove_bindings(docs: list[dict], existing: Iterable[str] = ()) -> list[str]:
    """Grove's ClusterTopologyBinding webhook (operator/internal/webhook/admission/clustertopology/validation/
    validation.go:41-60: unique domains and keys) and the PodCliqueSet webhook's look-up of the binding its
    constraints name (pcs/validation/podcliqueset.go:741-770 and topologyconstraints.go:142-172: the binding
    exists, every required or preferred domain is one of its levels, and a child's required domain is not
    broader than its parent's, topologyconstraints.go:207-290). ``existing``: bindings the cluster already has."""
    out: list[str] = []
    levels: dict[str, list[str]] = {name: [] for name in existing}
    for d in docs:
        if d["kind"] == "ClusterTopologyBinding":
            domains = [lv["domain"] for lv in d["spec"]["levels"]]
            keys = [lv["key"] for lv in d["spec"]["levels"]]
            out += [f"ClusterTopologyBinding {d['metadata']['name']!r}: {m}" for m in _unique(domains, "domain")]
            out += [f"ClusterTopologyBinding {d['metadata']['name']!r}: {m}" for m in _unique(keys, "key")]
            levels[d["metadata"]["name"]] = domains
    for d in docs:
        if d["kind"] != "PodCliqueSet":
            continue
        t = d["spec"]["template"]
        name = f"PodCliqueSet {d['metadata']['name']!r}"
        pcs_tc = t.get("topologyConstraint") or {}
        owners = [pcs_tc, *(g.get("topologyConstraint") or {} for g in t.get("podCliqueScalingGroups", []))]
        owners += [c.get("topologyConstraint") or {} for c in t.get("cliques", [])]
        binding = pcs_tc.get("topologyName") or next((o["topologyName"] for o in owners if "topologyName" in o), None)
        if binding is None:
            continue
        if binding not in levels:
            out.append(f"{name}: ClusterTopologyBinding {binding!r} not found")
            continue
        order = levels[binding]
        for o in owners:
            for which in ("required", "preferred"):
                dom = (o.get("pack") or {}).get(which)
                if dom is not None and order and dom not in order:
                    out.append(f"{name}: domain {dom!r} is not a level of ClusterTopologyBinding {binding!r}")
        parent = (pcs_tc.get("pack") or {}).get("required")
        for o in owners[1:]:
            child = (o.get("pack") or {}).get("required")
            if parent in order and child in order and order.index(child) < order.index(parent):
                out.append(f"{name}: a child's required domain {child!r} is broader than the PodCliqueSet's {parent!r}")
    return out
