"""The router of each replica: a real router image started with its real command, told where the replica's
prefill and decode engines are (``Context.pool_hosts``), placed near a pool, with probes and a Service.

``router.kind`` (docs/TARGETS.md, "Router presets", cites each command and image):

- ``sglang``: SGLang's router (``python3 -m sglang_router.launch_router``) in PD mode, each prefill URL with
  its bootstrap port; an aggregated deployment gets ``--worker-urls``.
- ``vllm``: vLLM's router (``vllm-router``) in PD mode (``--vllm-pd-disaggregation``), or ``--worker-urls``.
- ``dynamo``: Dynamo's frontend (``python3 -m dynamo.frontend``), which discovers its workers itself
  (Kubernetes discovery under Dynamo's operator, etcd/NATS otherwise: ``router.env``); no URLs.
- ``custom``: ``router.image`` with ``router.command``/``router.args``, placeholders expanded per replica.

The image is pinned per kind (``ROUTER_IMAGES``); ``router.image`` overrides it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from placer.emit.targets.common import ROUTER_ROLE, Context, affinity, hostname, labels
from placer.model import engines, placeholders
from placer.model.errors import InputError
from placer.model.placement import ReplicaPlacement
from placer.model.spec import ROUTER_KIND_NEEDED

# Pinned router images (docs/TARGETS.md says where each tag comes from and when it was pinned).
ROUTER_IMAGES = {
    "sglang": "lmsysorg/sglang:v0.5.5",
    "vllm": "vllm/vllm-router:v0.1.17",
    "dynamo": engines.DYNAMO_RUNTIME["vllm"],  # every Dynamo runtime image has the frontend
}
ROUTER_COMMAND = {
    "sglang": ["python3", "-m", "sglang_router.launch_router"],
    "vllm": ["vllm-router"],
    "dynamo": ["python3", "-m", "dynamo.frontend"],
}
ROLE_KEYS = {"prefill": "prefill", "decode": "decode", "aggregated": "worker"}


def endpoints(ctx: Context, replica: int) -> dict[str, list[str]]:
    """Placeholder values of one replica: the engines' hosts and ``http://host:port`` URLs per role (pools
    in name order, instances in index order), and the router's port."""
    out: dict[str, list[str]] = {f"{key}_{kind}": [] for key in ROLE_KEYS.values() for kind in ("hosts", "urls")}
    for pool in sorted(ctx.spec.pools):
        key = ROLE_KEYS[ctx.spec.role_of(pool)]
        port = engines.engine_port(ctx.spec.pools[pool].template)
        hosts = ctx.pool_hosts(replica, pool)
        out[f"{key}_hosts"] += hosts
        out[f"{key}_urls"] += [f"http://{h}:{port}" for h in hosts]
    assert ctx.spec.router is not None
    out["port"] = [str(ctx.spec.router.port)]
    return out


def _prefill_bootstrap(ctx: Context, replica: int) -> list[str]:
    """SGLang's ``--prefill URL BOOTSTRAP_PORT`` per prefill instance (a custom engine: the URL alone)."""
    out: list[str] = []
    for pool in sorted(ctx.spec.pools):
        if ctx.spec.role_of(pool) != "prefill":
            continue
        t = ctx.spec.pools[pool].template
        port = engines.engine_port(t)
        for host in ctx.pool_hosts(replica, pool):
            out += ["--prefill", f"http://{host}:{port}"]
            if t.engine == "sglang":
                out.append(str(engines.SGLANG_BOOTSTRAP_PORT))
    return out


def preset_args(ctx: Context, replica: int) -> list[str]:
    """The preset's flags for one replica: where the workers are, where the router listens."""
    router = ctx.spec.router
    assert router is not None and router.kind is not None
    ep = endpoints(ctx, replica)
    listen = ["--host", "0.0.0.0", "--port", str(router.port)]
    pd = bool(ep["prefill_urls"] or ep["decode_urls"])
    if router.kind == "sglang":
        if pd:
            decode = [a for url in ep["decode_urls"] for a in ("--decode", url)]
            return ["--pd-disaggregation", *_prefill_bootstrap(ctx, replica), *decode, *listen]
        return ["--worker-urls", *ep["worker_urls"], *listen]
    # vllm: a router.args value of the wait wins (clap takes a flag once)
    if not any(a == WAIT_FLAG or a.startswith(WAIT_FLAG + "=") for a in router.args):
        listen += [WAIT_FLAG, str(VLLM_WORKER_WAIT_S)]
    if pd:
        prefill = [a for url in ep["prefill_urls"] for a in ("--prefill", url)]
        decode = [a for url in ep["decode_urls"] for a in ("--decode", url)]
        return ["--vllm-pd-disaggregation", *prefill, *decode, *listen]
    return ["--worker-urls", *ep["worker_urls"], *listen]


# How long a router may take to open its port. vLLM's router opens it only once every engine answers, and
# gives up (exits, and is restarted) after its --worker-startup-timeout-secs (600 s by default, vllm-router
# 0.1.17 src/main.rs): placer gives it VLLM_WORKER_WAIT_S, long enough for a large model's weights to load,
# and the startup probe outlasts that (or a longer wait router.args sets), so liveness never kills a router
# that is still waiting.
VLLM_WORKER_WAIT_S = 1800
STARTUP_PERIOD_S = 10
WAIT_FLAG = "--worker-startup-timeout-secs"


def _args_wait_s(args: Sequence[str]) -> int | None:
    """The wait ``router.args`` sets for vLLM's router (``--worker-startup-timeout-secs N`` or ``=N``)."""
    for k, arg in enumerate(args):
        value = args[k + 1] if arg == WAIT_FLAG and k + 1 < len(args) else arg.partition("=")[2]
        if (arg == WAIT_FLAG or arg.startswith(WAIT_FLAG + "=")) and value.isdigit():
            return int(value)
    return None


def startup_failures(args: Sequence[str]) -> int:
    """Startup-probe failures allowed: past the longest the router may wait for its engines, plus a minute."""
    wait = max(VLLM_WORKER_WAIT_S, _args_wait_s(args) or 0)
    return -(-wait // STARTUP_PERIOD_S) + 6


def router_probes(kind: str, args: Sequence[str] = ()) -> dict[str, Any]:
    """Readiness where the router says it can serve, liveness on the process alone, and a startup probe
    that gives the port time to open. SGLang's router answers ``/health`` whether or not it has workers
    (sglang-router 0.2.2 ``src/server.rs``: ``health`` is ``liveness``); its ``/readiness`` is 503 until a
    worker (in PD mode a prefill and a decode) is healthy, so the Service sends nothing to a router that
    has no engine yet. vLLM's router answers only once its workers do; Dynamo's frontend ``/health`` says
    whether it is serving, ``/live`` whether it runs."""
    alive: dict[str, Any] = {"tcpSocket": {"port": "http"}}
    if kind == "dynamo":
        alive = {"httpGet": {"path": "/live", "port": "http"}}  # the frontend's own liveness (workers aside)
    path = "/readiness" if kind == "sglang" else "/health"
    ready: dict[str, Any] = {"httpGet": {"path": path, "port": "http"}}
    if kind == "custom":
        ready = {"tcpSocket": {"port": "http"}}
    return {
        "startupProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": STARTUP_PERIOD_S}
        | {"failureThreshold": startup_failures(args)},
        "readinessProbe": ready | {"periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": alive | {"periodSeconds": 20, "failureThreshold": 3},
    }


# Waits until every engine URL answers GET /health with a 2xx: its port is open and its warm-up done (SGLang's
# engine answers 503 while it warms up). SGLang's router registers the engines it is given only if one
# answers within about 35 s of the router's start and never tries again (sglang-router 0.2.2
# src/core/workflow/steps/worker_registration.rs, retry bounded by --health-check-timeout-secs + 30 s),
# while an engine opens its port only once its weights are loaded.
WAIT_FOR_ENGINES = """\
import sys, time, urllib.request
for url in sys.argv[1:]:
    while True:
        try:
            urllib.request.urlopen(url + "/health", timeout=5)
            break
        except OSError:
            time.sleep(5)
    print("engine ready:", url, flush=True)
"""


def wait_for_engines(ctx: Context, replica: int, image: str) -> dict[str, Any]:
    """An init container, in the router's image, that holds the router back until the replica's engines
    answer, so that it registers every one of them."""
    router = ctx.spec.router
    assert router is not None
    return {
        "name": "wait-for-engines",
        "image": image,
        "command": ["python3", "-c", WAIT_FOR_ENGINES],
        "args": told_urls(ctx, replica),
        # the router's own requests: a pod asks the larger of its init and app containers' anyway, and a
        # namespace's LimitRange then judges both alike
        "resources": {"requests": {"cpu": router.cpu, "memory": router.memory}},
    }


def told_urls(ctx: Context, replica: int) -> list[str]:
    """The engine URLs a preset router is given: prefill and decode in PD mode, else the workers."""
    ep = endpoints(ctx, replica)
    pd = ep["prefill_urls"] + ep["decode_urls"]
    return pd or ep["worker_urls"]


def router_pod(ctx: Context, rep: ReplicaPlacement) -> dict[str, Any]:
    """The router's pod spec, pinned to its node: the router container, and for SGLang's router the init
    container that waits for the engines."""
    assert rep.router is not None and ctx.spec.router is not None
    container = router_container(ctx, rep.index)
    pod: dict[str, Any] = {"affinity": affinity([hostname(ctx.topo, rep.router)])}
    if ctx.spec.router.kind == "sglang":
        pod["initContainers"] = [wait_for_engines(ctx, rep.index, container["image"])]
    pod["containers"] = [container]
    return pod


def router_container(ctx: Context, replica: int, frontend: bool = False) -> dict[str, Any]:
    """The router of ``replica``; ``frontend``: it becomes a Dynamo graph's frontend (``--target dynamo``),
    where only Dynamo's own frontend (or a custom one) finds the workers."""
    router = ctx.spec.router
    assert router is not None
    if router.kind is None:  # placement needs no kind; the manifests do (the CLI says so before solving)
        raise InputError(ROUTER_KIND_NEEDED)
    kind = router.kind
    if frontend and kind != "custom":
        kind = "dynamo"  # Dynamo's workers are found by Dynamo's frontend only, whatever router.kind says
    values = endpoints(ctx, replica)
    if kind == "dynamo":
        command = list(ROUTER_COMMAND["dynamo"])
        args = ["--http-port", str(router.port)] + placeholders.expand(list(router.args), values)
    elif kind == "custom":
        command = placeholders.expand(list(router.command), values)
        args = placeholders.expand(list(router.args), values)
    else:
        command = list(ROUTER_COMMAND[kind])
        args = preset_args(ctx, replica) + placeholders.expand(list(router.args), values)
    # router.image overrides the kind's image; a sglang/vllm router turned Dynamo frontend takes Dynamo's.
    image = router.image if router.image and kind == router.kind else ROUTER_IMAGES.get(kind)
    container: dict[str, Any] = {"name": "router", "image": image}
    if command:
        container["command"] = command
    if args:
        container["args"] = args
    if router.env:
        container["env"] = [e.manifest() for e in router.env]
    container["ports"] = [{"name": "http", "containerPort": router.port}]
    container["resources"] = {"requests": {"cpu": router.cpu, "memory": router.memory}}
    return container | router_probes(kind, router.args)


def router_selector(ctx: Context, replica: int) -> dict[str, str]:
    """The router's pod, by keys that survive operators rewriting ``app.kubernetes.io/component`` (Grove)."""
    return {"app.kubernetes.io/instance": ctx.gang_name(replica), ROUTER_ROLE: "router"}


def router_service(ctx: Context, replica: int) -> dict[str, Any]:
    assert ctx.spec.router is not None
    name = f"{ctx.gang_name(replica)}-router"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ctx.namespace, "labels": labels(ctx.spec, replica, "router")},
        "spec": {
            "selector": router_selector(ctx, replica),
            "ports": [{"name": "http", "port": ctx.spec.router.port, "targetPort": "http"}],
        },
    }


def router_docs(ctx: Context, rep: ReplicaPlacement) -> list[dict]:
    """The router's Deployment (pinned to its node, which ``placer.dev/node`` records) and Service."""
    if ctx.spec.router is None or rep.router is None:
        return []
    name = f"{ctx.gang_name(rep.index)}-router"
    lab = labels(ctx.spec, rep.index, "router")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": ctx.namespace,
            "labels": lab,
            "annotations": {"placer.dev/node": rep.router},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": router_selector(ctx, rep.index)},
            "template": {
                "metadata": {"labels": lab},
                "spec": router_pod(ctx, rep),
            },
        },
    }
    return [deployment, router_service(ctx, rep.index)]
