"""Pruning with kubectl's ApplySets (KEP-3659): the contract placer's output keeps, as small pure functions.

``KUBECTL_APPLYSET=true kubectl apply --prune --applyset=configmap/placer-NAME -n NS -f -`` makes every object
of the stream a member of one ApplySet and deletes the members a later apply no longer carries, so a re-solve
with ``--keep`` and fewer replicas or instances removes exactly the objects placer stopped printing.

kubectl, not placer, writes the ApplySet metadata, and must (kubernetes/kubectl, pkg/cmd/apply/applyset.go,
commit dee3483a3d6a64c07fdf746caf80af446dee99ac, unchanged in this respect since v1.27):

- ``AddLabels`` puts ``applyset.kubernetes.io/part-of`` on every object it reads and *refuses* an input
  object that already has that label ("ApplySet label ... already set in input data"); so placer prints none.
- ``fetchParent`` refuses an existing parent whose ``applyset.kubernetes.io/tooling`` names another tool,
  and creates a missing ConfigMap or Secret parent itself (server-side apply, field manager
  ``kubectl-applyset``) with the id label and the tooling, contains-group-kinds and additional-namespaces
  annotations; a parent printed by placer would be taken as a member of its own set. So placer prints none.

What placer does keep: names derived only from the spec name, replica, pool and instance (the same object
on every solve that keeps it), every namespaced object of one deployment in one namespace (kubectl's ``-n``
must match each object), and one parent per deployment by convention, :func:`parent_name`.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from typing import Any

PREFIX = "applyset.kubernetes.io/"
PART_OF = PREFIX + "part-of"
PARENT_ID = PREFIX + "id"
TOOLING = PREFIX + "tooling"
CONTAINS_GROUP_KINDS = PREFIX + "contains-group-kinds"
ADDITIONAL_NAMESPACES = PREFIX + "additional-namespaces"
PARENT_KIND = "ConfigMap"  # kubectl accepts ConfigMap and Secret parents without a labelled CRD
PARENT_GROUP = ""

Key = tuple[str, str, str]  # (group/kind, namespace or "", name): an object's identity to the API server


def applyset_id(name: str, namespace: str, kind: str = PARENT_KIND, group: str = PARENT_GROUP) -> str:
    """kubectl's ``ApplySet.ID``: ``applyset-<base64url(sha256(name.namespace.kind.group)), no padding>-v1``;
    the value of the parent's id label and of every member's part-of label."""
    digest = hashlib.sha256(".".join((name, namespace, kind, group)).encode()).digest()
    return "applyset-" + base64.urlsafe_b64encode(digest).decode().rstrip("=") + "-v1"


def parent_name(deployment: str) -> str:
    """The ConfigMap that tracks one deployment's objects: one ApplySet per deployment, so consecutive solves
    of the same spec share it and applying one deployment never prunes another."""
    return f"placer-{deployment}"


def prune_command(deployment: str, namespace: str) -> str:
    """The kubectl line that applies one deployment's manifests from stdin and prunes what it dropped."""
    return (
        f"KUBECTL_APPLYSET=true kubectl apply --prune --applyset=configmap/{parent_name(deployment)} "
        f"-n {namespace} -f -"
    )


def identity(doc: dict[str, Any]) -> Key:
    """An object's identity: group/kind, namespace, name (the version does not name an object)."""
    api, meta = str(doc.get("apiVersion", "")), doc.get("metadata") or {}
    group = api.rpartition("/")[0]
    return (f"{doc.get('kind')}.{group}" if group else str(doc.get("kind")), meta.get("namespace") or "", meta["name"])


def carried_keys(doc: dict[str, Any]) -> list[str]:
    """ApplySet labels and annotations an object already carries: kubectl refuses such input (part-of) or it
    would mislead another tool (the parent's keys), so placer's output must have none."""
    meta = doc.get("metadata") or {}
    return sorted(k for part in ("labels", "annotations") for k in (meta.get(part) or {}) if k.startswith(PREFIX))


def as_members(docs: Iterable[dict[str, Any]], set_id: str) -> list[dict[str, Any]]:
    """What kubectl's ``AddLabels`` makes of the stream: each object with ``part-of: set_id`` (copies; the
    input is untouched). Raises ValueError where kubectl would refuse the input."""
    out = []
    for doc in docs:
        if PART_OF in ((doc.get("metadata") or {}).get("labels") or {}):
            raise ValueError(f"ApplySet label {PART_OF!r} already set in input data: {identity(doc)}")
        meta = dict(doc.get("metadata") or {})
        meta["labels"] = {**(meta.get("labels") or {}), PART_OF: set_id}
        out.append({**doc, "metadata": meta})
    return out


def pruned(live: Iterable[dict[str, Any]], applied: Iterable[dict[str, Any]], set_id: str) -> set[Key]:
    """What kubectl's prune deletes after applying ``applied``: live objects labelled part of the set that
    the apply did not touch (kubectl matches by UID; placer's objects are matched by identity)."""
    kept = {identity(d) for d in applied}
    return {identity(d) for d in live if ((d.get("metadata") or {}).get("labels") or {}).get(PART_OF) == set_id} - kept
