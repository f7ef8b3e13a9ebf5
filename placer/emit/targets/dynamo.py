"""Dynamo (``nvidia.com/v1beta1`` ``DynamoGraphDeployment``): one DGD per placer replica.

Phase 1, components: the router becomes the ``frontend`` component (one pod, pinned to the router's node);
each pool one component of its role's type (``prefill``, ``decode``, or ``worker`` for an aggregated pool)
with ``replicas`` = the pool's instances, ``multinode.nodeCount`` = nodes per instance when an instance
spans nodes, and the engine as the ``main`` container of ``podTemplate`` (its ``nvidia.com/gpu`` limit is
the GPUs per pod, so TP = nodeCount x that limit, as Dynamo's multinode guide requires; a vLLM or SGLang
image gets the matching ``--tensor-parallel-size`` / ``--tp-size``). Phase 2, pinning: ``podTemplate.spec``
carries required node affinity admitting exactly the nodes placer chose for the pool in this replica, and a
hostname anti-affinity over the pool's pods where no node holds two of them. Phase 3, the gang: the DGD asks
for Dynamo's Grove pathway (``nvidia.com/enable-grove``), which renders it as one PodCliqueSet whose base
gang is every component's ``minAvailable`` (1) replica; ``nvidia.com/kai-scheduler-queue`` names the
spec's queue when it gives one.

Why one DGD per replica and node sets per pool (read from ai-dynamo/dynamo's operator,
``deploy/operator/internal/dynamo/graph.go``: ``GenerateGrovePodCliqueSet`` and ``GenerateBasePodSpec``):
the operator turns a DGD into one PodCliqueSet with ``replicas: 1``, every component into a clique per role
(leader and worker cliques under a PodCliqueScalingGroup of ``replicas`` = the component's replicas for a
multinode component), and builds every role's pod spec by merging the component's ``podTemplate.spec``
over its defaults (``mergo.WithOverride``). So a user's affinity survives, but it is one affinity for every
pod of the component: per-instance pinning inside one component cannot be expressed, and per-replica
separation needs a DGD per replica. See docs/TARGETS.md.
"""

from __future__ import annotations

import json
from typing import Any

from placer.emit.targets.common import (
    HOSTNAME,
    Context,
    affinity,
    dns_label,
    engine_container,
    hostname,
    labels,
)
from placer.emit.targets.nccl import instance_settings
from placer.emit.targets.router import router_container
from placer.model.errors import InputError, NameTooLong
from placer.model.placement import InstancePlacement, ReplicaPlacement

API_VERSION = "nvidia.com/v1beta1"
ENABLE_GROVE = "nvidia.com/enable-grove"
KAI_QUEUE = "nvidia.com/kai-scheduler-queue"
MAIN = "main"  # the operator merges its defaults into the container of this name (v1beta1 MainContainerName)
# Grove's PodCliqueSet webhook limits PodCliqueSet + scaling group + clique names to 45 characters
# (ai-dynamo/dynamo deploy/operator/internal/consts: MaxCombinedGroveResourceNameLength).
MAX_GROVE_NAMES = 45
COMPONENT_TYPE = {"prefill": "prefill", "decode": "decode", "aggregated": "worker"}
# (marker in the image name, backendFramework, the engine's tensor-parallel flag or None to leave args alone)
BACKENDS = (
    ("sglang", "sglang", "--tp-size"),
    ("vllm", "vllm", "--tensor-parallel-size"),
    ("trtllm", "trtllm", None),
    ("tensorrt-llm", "trtllm", None),
    ("tensorrtllm", "trtllm", None),
)


ENGINE_FRAMEWORKS = ("vllm", "sglang", "trtllm")  # engine presets are Dynamo's backendFramework names


def backend(image: str) -> tuple[str | None, str | None]:
    """(backendFramework, its tensor-parallel flag) from the engine image's name, or (None, None)."""
    name = image.rsplit("/", 1)[-1].split(":")[0].lower()
    return next(((framework, flag) for marker, framework, flag in BACKENDS if marker in name), (None, None))


def _with_tp(args: list[str], flag: str | None, tp: int, pool: str) -> list[str]:
    """The engine's args with ``flag tp``: kept when the template already says so, added when it says nothing."""
    if flag is None:
        return args
    for k, arg in enumerate(args):
        if arg == flag and k + 1 < len(args):
            value = args[k + 1]
        elif arg.startswith(flag + "="):
            value = arg.partition("=")[2]
        else:
            continue
        if value != str(tp):
            raise InputError(
                f"--target dynamo: pools.{pool}.template.args sets {flag} {value}, but the pool's "
                f"tensorParallel is {tp} (Dynamo runs TP = multinode.nodeCount x GPUs per pod)"
            )
        return args
    return [*args, flag, str(tp)]


def _pool_component(ctx: Context, rep: ReplicaPlacement, pool: str, members: list[InstancePlacement]) -> dict:
    pods = [p for inst in members for p in inst.pods]
    per_pod = sorted({len(p.gpus) for p in pods})
    per_inst = sorted({len(inst.pods) for inst in members})
    if len(per_pod) > 1 or len(per_inst) > 1:
        raise InputError(
            f"--target dynamo: pool {pool} has pods with {per_pod} GPUs over instances of {per_inst} nodes; a "
            f"Dynamo component gives every pod one GPU limit and every replica one nodeCount: give "
            f"pools.{pool}.gpusPerNode"
        )
    gpus, nodes = per_pod[0], per_inst[0]
    shared = None
    if ctx.nccl:
        each = [instance_settings(ctx.spec, ctx.topo, inst, ctx.exact_gpus) for inst in members]
        shared = [s for s in each[0] if all(s in other for other in each[1:])]
    container = engine_container(ctx, members[0], gpus, None, settings=shared, dynamo_worker=True)
    container["name"] = MAIN
    flag = backend(container["image"])[1]
    tp = ctx.spec.pools[pool].tensor_parallel
    args = _with_tp(list(container.get("args", [])), flag, tp, pool)
    if args:
        container["args"] = args
    hosts = [hostname(ctx.topo, p.node) for p in pods]
    spec: dict[str, Any] = {"affinity": affinity(hosts), "containers": [container]}
    if len(set(hosts)) == len(hosts) and len(hosts) > 1:
        match = {"app.kubernetes.io/instance": ctx.gang_name(rep.index), "placer.dev/pool": pool}
        term = {"labelSelector": {"matchLabels": match}, "topologyKey": HOSTNAME}
        spec["affinity"]["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    sched = ctx.scheduler(None)
    if sched:
        spec["schedulerName"] = sched
    # Dynamo's operator drops any /dev/shm mount of `main` and mounts its own tmpfs there, sized by the
    # component's sharedMemorySize ("0": none; unset: 8Gi): the pool's shmSize goes there (below).
    placed = {str(i.index): ";".join(f"{p.node}:{','.join(map(str, p.gpus))}" for p in i.pods) for i in members}
    domains = {str(i.index): ctx.instance_domain(rep.index, i) for i in members}
    notes = {
        "placer.dev/instances": json.dumps(placed, sort_keys=True),
        "placer.dev/domains": json.dumps(domains, sort_keys=True),
    }
    if ctx.nccl and shared is not None:
        notes["placer.dev/nccl"] = json.dumps({s.name: f"{s.value}: {s.reason}" for s in shared}, sort_keys=True)
    component: dict[str, Any] = {
        "name": pool,
        "type": COMPONENT_TYPE[ctx.spec.role_of(pool)],
        "replicas": len(members),
        "podTemplate": {
            "metadata": {
                "labels": labels(ctx.spec, rep.index, ctx.spec.role_of(pool)) | {"placer.dev/pool": pool},
                "annotations": notes,
            },
            "spec": spec,
        },
    }
    component["sharedMemorySize"] = ctx.spec.pools[pool].template.shm_size
    if nodes > 1:
        component["multinode"] = {"nodeCount": nodes}
    return component


def _frontend(ctx: Context, rep: ReplicaPlacement) -> dict[str, Any]:
    assert rep.router is not None
    container = router_container(ctx, rep.index, frontend=True)
    container["name"] = MAIN
    spec: dict[str, Any] = {"affinity": affinity([hostname(ctx.topo, rep.router)]), "containers": [container]}
    sched = ctx.scheduler(None)
    if sched:
        spec["schedulerName"] = sched
    return {
        "name": "frontend",
        "type": "frontend",
        "replicas": 1,
        "podTemplate": {
            "metadata": {
                "labels": labels(ctx.spec, rep.index, "router"),
                "annotations": {"placer.dev/node": rep.router},
            },
            "spec": spec,
        },
    }


def _check_names(name: str, components: list[dict[str, Any]]) -> None:
    """What Grove's webhook will check of the names the operator derives (PodCliqueSet = the DGD's name,
    scaling group = the component's name, cliques = the component's name, ``-ldr`` / ``-wkr`` for multinode)."""
    for c in components:
        clique = c["name"] + ("-ldr" if "multinode" in c else "")
        group = c["name"] if "multinode" in c else ""
        total = len(name) + len(group) + len(clique)
        if total > MAX_GROVE_NAMES:
            raise NameTooLong(
                f"--target dynamo: DynamoGraphDeployment {name!r} component {c['name']!r} gives Grove names of "
                f"{total} characters (PodCliqueSet + scaling group + clique); Grove allows {MAX_GROVE_NAMES}: "
                "shorten metadata.name or the pool name"
            )


def graph_deployment(ctx: Context, rep: ReplicaPlacement) -> dict[str, Any]:
    name = dns_label(ctx.gang_name(rep.index), "DynamoGraphDeployment name")
    components: list[dict[str, Any]] = []
    if ctx.spec.router is not None and rep.router is not None:
        if any(pool.lower() == "frontend" for pool in ctx.spec.pools):
            raise InputError(
                "--target dynamo: a pool named 'frontend' would share its component name with the router's "
                "(Dynamo wants component names unique, case-insensitively): rename the pool"
            )
        components.append(_frontend(ctx, rep))
    frameworks = set()
    for pool in sorted({i.pool for i in rep.instances}):
        members = sorted((i for i in rep.instances if i.pool == pool), key=lambda i: i.index)
        components.append(_pool_component(ctx, rep, pool, members))
        template = ctx.spec.pools[pool].template
        frameworks.add(template.engine if template.engine in ENGINE_FRAMEWORKS else backend(template.image)[0])
    _check_names(name, components)
    meta = ctx.gang_metadata(rep.index, name=name)
    meta["annotations"][ENABLE_GROVE] = "true"
    if ctx.spec.scheduling.queue:
        meta["annotations"][KAI_QUEUE] = ctx.spec.scheduling.queue
    spec: dict[str, Any] = {}
    if len(frameworks) == 1 and None not in frameworks:
        spec["backendFramework"] = frameworks.pop()
    spec["components"] = components
    return {"apiVersion": API_VERSION, "kind": "DynamoGraphDeployment", "metadata": meta, "spec": spec}


def build(ctx: Context) -> list[dict]:
    return [graph_deployment(ctx, rep) for rep in ctx.placement.replicas]
