"""``kubectl get pods -A -o json`` -> what each node's running pods hold: GPUs, CPU and memory requests.

Only pods bound to a node (``spec.nodeName``) and not terminated (phase not ``Succeeded``/``Failed``) hold
resources. A pod's request is what the scheduler counts: the sum over its containers, or the largest init
container if that is more, plus ``spec.overhead``. ``nvidia.com/gpu`` is an extended resource, so its limit
is its request. Which GPU indices a pod holds is not in the API; pods placer emitted carry them in the
``placer.dev/gpus`` annotation, and for the others the merge marks the lowest free indices busy (GPUs of a
node are interchangeable to the solver unless the node is modelled per socket).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from placer.importers.common import Note, error, found_kind, load_json, short
from placer.model import k8s

GPU_RESOURCE = "nvidia.com/gpu"
GPU_ANNOTATION = "placer.dev/gpus"
DONE_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class PodUsage:
    pod: str  # namespace/name
    node: str
    gpus: int
    gpu_indices: tuple[int, ...] | None  # from placer.dev/gpus, when present and consistent
    cpu_m: int
    memory_bytes: int


@dataclass(frozen=True)
class PodsFile:
    source: str
    usages: tuple[PodUsage, ...]
    unbound: int  # pods not (yet) bound to a node: they hold nothing
    finished: int
    notes: tuple[Note, ...] = field(default=())


def parse_pods(text: str, source: str) -> PodsFile:
    data = load_json(text, source)
    if isinstance(data, dict) and data.get("kind") == "Pod":
        items = [data]
    elif isinstance(data, dict) and data.get("kind") in ("List", "PodList") and isinstance(data.get("items"), list):
        items = data["items"]
    else:
        raise error(source, None, f"expected kubectl get pods -A -o json output (kind List), {found_kind(data)}")
    notes: list[Note] = []
    usages: list[PodUsage] = []
    unbound = finished = 0
    other_gpu_resources: set[str] = set()
    for i, pod in enumerate(items):
        if not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod":
            notes.append(Note(source, None, f"items[{i}]: not a Pod; ignored"))
            continue
        meta = _dict(pod.get("metadata"))
        name = f"{meta.get('namespace', 'default')}/{meta.get('name', f'items[{i}]')}"
        spec = _dict(pod.get("spec"))
        status = _dict(pod.get("status"))
        if status.get("phase") in DONE_PHASES:
            finished += 1
            continue
        node = spec.get("nodeName")
        if not isinstance(node, str) or not node:
            unbound += 1
            continue
        try:
            gpus, cpu_m, memory = _requests(spec, other_gpu_resources)
        except (ValueError, ArithmeticError) as exc:
            notes.append(Note(source, None, f"pod {short(name)}: {exc}; its requests are not counted"))
            continue
        annotations = _dict(meta.get("annotations"))
        indices = _indices(annotations.get(GPU_ANNOTATION), gpus)
        if annotations.get(GPU_ANNOTATION) is not None and indices is None:
            notes.append(Note(source, None, f"pod {short(name)}: {GPU_ANNOTATION} does not match its GPU count"))
        usages.append(PodUsage(name, node, gpus, indices, cpu_m, memory))
    for resource in sorted(other_gpu_resources):
        notes.append(Note(source, None, f"resource {short(resource)} (MIG or another device) is not modelled"))
    return PodsFile(source, tuple(usages), unbound, finished, tuple(notes))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _container_requests(container: Any, other: set[str]) -> tuple[Decimal, Decimal, Decimal]:
    resources = _dict(_dict(container).get("resources"))
    limits = _dict(resources.get("limits"))
    requests = _dict(resources.get("requests"))
    merged = {**limits, **requests}  # a missing request defaults to the limit
    for key in merged:
        if isinstance(key, str) and (key.startswith("nvidia.com/mig-") or key in ("amd.com/gpu",)):
            other.add(key)
    gpu = merged.get(GPU_RESOURCE, limits.get(GPU_RESOURCE, 0))
    return (
        k8s.parse_quantity(str(gpu)),
        k8s.parse_quantity(str(merged.get("cpu", 0))),
        k8s.parse_quantity(str(merged.get("memory", 0))),
    )


def _requests(spec: dict[str, Any], other: set[str]) -> tuple[int, int, int]:
    """(GPUs, millicores, bytes) the scheduler counts for the pod."""
    containers = _list(spec.get("containers"))
    inits = _list(spec.get("initContainers"))
    total = [Decimal(0)] * 3
    sidecars = [Decimal(0)] * 3
    peak = [Decimal(0)] * 3
    for c in containers:
        total = [a + b for a, b in zip(total, _container_requests(c, other), strict=True)]
    for c in inits:
        req = _container_requests(c, other)
        if isinstance(c, dict) and c.get("restartPolicy") == "Always":  # a sidecar runs alongside
            sidecars = [a + b for a, b in zip(sidecars, req, strict=True)]
        else:
            peak = [max(p, s + r) for p, s, r in zip(peak, sidecars, req, strict=True)]
    overhead = _dict(spec.get("overhead"))
    extra = [
        Decimal(0),
        k8s.parse_quantity(str(overhead.get("cpu", 0))),
        k8s.parse_quantity(str(overhead.get("memory", 0))),
    ]
    out = [max(t + s, p) + e for t, s, p, e in zip(total, sidecars, peak, extra, strict=True)]
    # Bounds first: turning 1e999999 into an int would take minutes.
    if out[1] > 10**6 or out[2] > 10**18 or min(out) < 0:
        raise ValueError("CPU or memory request outside any node's range")
    if out[0] > 1024 or out[0] != out[0].to_integral_value():
        raise ValueError(f"{GPU_RESOURCE} request {out[0]} is not a whole GPU count")
    return (
        int(out[0]),
        int((out[1] * 1000).to_integral_value("ROUND_CEILING")),
        int(out[2].to_integral_value("ROUND_CEILING")),
    )


def _indices(value: Any, gpus: int) -> tuple[int, ...] | None:
    if not isinstance(value, str):
        return None
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if len(parts) != gpus or not all(p.isdigit() and len(p) <= 3 for p in parts):
        return None
    indices = tuple(int(p) for p in parts)
    return indices if len(set(indices)) == len(indices) else None
