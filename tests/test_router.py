"""Router presets (``router.kind``): a real image with its real command, told every prefill and decode
endpoint of its replica (``Context.pool_hosts``), with probes and a Service; custom routers get their
placeholders expanded per replica; under ``--target dynamo`` the frontend is Dynamo's."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_in_process import run
from fixtures_solved import solved_fixture
from k8s_acceptance import assert_accepted
from test_engines import with_engine

from placer.emit.manifests import build_manifests
from placer.emit.targets import TARGETS, router
from placer.emit.targets.common import Context
from placer.model import engines
from placer.model.errors import InputError
from placer.model.load import load_cluster, load_spec
from placer.model.spec import ServingTopology
from placer.pipeline import verify_placement
from placer.solver.problem import build_problem
from placer.solver.solve import SolveOptions, solve
from placer.topology.build import build_topology

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def disagg():
    return solved_fixture("llama-70b-disagg")


def routers(docs: list[dict]) -> list[dict]:
    return [
        c
        for d in docs
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
        if c["name"] == "router"
    ]


def after(args: list[str], flag: str) -> list[str]:
    """The value following each occurrence of ``flag``."""
    return [args[k + 1] for k, a in enumerate(args) if a == flag]


def expected_urls(spec: ServingTopology, ctx: Context, replica: int, role: str) -> list[str]:
    return [
        f"http://{host}:{engines.engine_port(spec.pools[pool].template)}"
        for pool in sorted(spec.pools)
        if spec.role_of(pool) == role
        for host in ctx.pool_hosts(replica, pool)
    ]


def test_quick_start_router_is_told_where_its_workers_are(disagg):
    spec, topo, placement, report = disagg
    assert spec.router_kind == "vllm"
    docs = build_manifests(spec, topo, placement, report, target="coscheduling")
    assert_accepted(docs)
    ctx = Context(spec, topo, placement, report)
    (container,) = routers(docs)
    assert container["image"] == router.ROUTER_IMAGES["vllm"] and container["command"] == ["vllm-router"]
    args = container["args"]
    assert "--vllm-pd-disaggregation" in args
    prefill, decode = expected_urls(spec, ctx, 0, "prefill"), expected_urls(spec, ctx, 0, "decode")
    assert after(args, "--prefill") == prefill and after(args, "--decode") == decode
    assert len(prefill) == spec.pools["prefill"].instances and len(decode) == spec.pools["decode"].instances
    assert after(args, "--port") == [str(spec.router.port)]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert "tcpSocket" in container["livenessProbe"]  # a router waiting for loading engines stays up
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-router"))
    assert service["spec"]["ports"][0]["port"] == spec.router.port


def test_sglang_router_gets_each_prefill_with_its_bootstrap_port(disagg):
    base, topo, placement, report = disagg
    spec = with_engine(base, "sglang")
    docs = build_manifests(spec, topo, placement, report, target="coscheduling")
    ctx = Context(spec, topo, placement, report)
    (container,) = routers(docs)
    assert container["command"] == ["python3", "-m", "sglang_router.launch_router"]
    args = container["args"]
    assert args[0] == "--pd-disaggregation"
    prefill = expected_urls(spec, ctx, 0, "prefill")
    assert after(args, "--prefill") == prefill
    assert [args[k + 2] for k, a in enumerate(args) if a == "--prefill"] == [str(engines.SGLANG_BOOTSTRAP_PORT)] * len(
        prefill
    )
    assert after(args, "--decode") == expected_urls(spec, ctx, 0, "decode")


def test_aggregated_router_gets_worker_urls():
    spec = load_spec(ROOT / "fixtures" / "specs" / "aggregated-tp8.yaml")
    topo = build_topology(load_cluster(ROOT / "fixtures" / "clusters" / "small-mixed.yaml"))
    placement = solve(build_problem(spec, topo), SolveOptions())
    report = verify_placement(spec, topo, placement)
    docs = build_manifests(spec, topo, placement, report, target="coscheduling")
    ctx = Context(spec, topo, placement, report)
    found = routers(docs)
    assert len(found) == len(placement.replicas)
    for rep, container in zip(sorted(placement.replicas, key=lambda r: r.index), found, strict=True):
        args = container["args"]
        workers = args[1 : args.index("--host")]
        assert args[0] == "--worker-urls" and workers == expected_urls(spec, ctx, rep.index, "aggregated")


def test_custom_router_expands_placeholders_with_every_host(disagg):
    base, topo, placement, report = disagg
    data = base.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    data["router"] = {
        "kind": "custom",
        "image": "example.com/my-router:1.2",
        "command": ["/router"],
        "args": [
            "--prefill",
            "{prefill_urls}",
            "--decode={decode_urls}",
            "--hosts",
            "{prefill_hosts}",
            "--listen=:{port}",
        ],
        "env": [{"name": "MODE", "value": "pd"}],
        "near": {"pool": "decode", "level": "rack"},
    }
    spec = ServingTopology.model_validate(data)
    docs = build_manifests(spec, topo, placement, report, target="coscheduling")
    assert_accepted(docs)
    ctx = Context(spec, topo, placement, report)
    (container,) = routers(docs)
    prefill_hosts = [h for p in sorted(spec.pools) if p == "prefill" for h in ctx.pool_hosts(0, p)]
    prefill, decode = expected_urls(spec, ctx, 0, "prefill"), expected_urls(spec, ctx, 0, "decode")
    assert container["image"] == "example.com/my-router:1.2" and container["command"] == ["/router"]
    assert container["args"] == [
        "--prefill",
        *prefill,
        f"--decode={','.join(decode)}",
        "--hosts",
        *prefill_hosts,
        f"--listen=:{spec.router.port}",
    ]
    assert container["env"] == [{"name": "MODE", "value": "pd"}]


def test_router_spec_errors_name_the_field(tmp_path):
    text = (ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml").read_text()
    path = tmp_path / "spec.yaml"
    path.write_text(text.replace("  kind: vllm ", "  kind: custom "))
    with pytest.raises(InputError, match=r"spec\.yaml:\d+: router: .*custom needs the router's image"):
        load_spec(path)
    path.write_text(text.replace("  kind: vllm ", "  args: ['{prefil_urls}']\n  kind: vllm "))
    with pytest.raises(InputError, match=r"unknown placeholder \{prefil_urls\}"):
        load_spec(path)
    path.write_text(text.replace("  kind: vllm ", "  kind: sglang "))
    with pytest.raises(InputError, match=r"sglang's router speaks to sglang engines"):
        load_spec(path)
    # no kind and nothing to infer it from: the spec must say
    custom = (
        text.replace("  kind: vllm ", "  #")
        .replace("engine: vllm", "engine: custom")
        .replace("vllm/vllm-openai:v0.15.0", "example.com/engine:1")
    )
    path.write_text(custom)
    spec = load_spec(path)  # placing needs no router kind ...
    assert spec.router is not None and spec.router_kind is None
    proc = run("solve", path, ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml")  # ... printing manifests does
    assert proc.returncode == 2 and "router.kind: give sglang, vllm, dynamo" in proc.stderr and proc.stdout == ""


def test_kind_is_inferred_from_the_engines():
    spec = load_spec(ROOT / "fixtures" / "specs" / "llama-70b-large.yaml")
    data = spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    del data["router"]["kind"]
    assert ServingTopology.model_validate(data).router_kind == "vllm"


@pytest.mark.parametrize("kind", ["vllm", "dynamo"])
def test_dynamo_target_frontend_is_dynamos(disagg, kind):
    base, topo, placement, report = disagg
    spec = with_engine(base, "vllm", router=kind)
    (dgd,) = build_manifests(spec, topo, placement, report, target="dynamo")
    assert_accepted([dgd])
    components = {c["name"]: c for c in dgd["spec"]["components"]}
    (front,) = components["frontend"]["podTemplate"]["spec"]["containers"]
    assert front["command"] == ["python3", "-m", "dynamo.frontend"]
    assert front["args"] == ["--http-port", str(spec.router.port)]
    assert front["image"] == router.ROUTER_IMAGES["dynamo"]
    assert front["livenessProbe"]["httpGet"]["path"] == "/live"
    for pool in ("prefill", "decode"):
        (main,) = components[pool]["podTemplate"]["spec"]["containers"]
        assert main["command"] == ["python3", "-m", "dynamo.vllm"]
        assert main["args"][main["args"].index("--disaggregation-mode") + 1] == pool


def test_every_target_builds_the_preset_router(disagg):
    spec, topo, placement, report = disagg
    for target in (t for t in TARGETS if t != "dra"):  # dra needs GPU ids (tests/test_targets.py adds them)
        docs = build_manifests(spec, topo, placement, report, target=target)
        text = str(docs)
        assert ("vllm-router" in text) != (target == "dynamo"), target


def _pods(docs: list[dict]) -> list[dict]:
    """Every router pod spec: a Deployment's template or a Grove router clique's."""
    out = [d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Deployment"]
    for d in docs:
        if d["kind"] == "PodCliqueSet":
            out += [c["spec"]["podSpec"] for c in d["spec"]["template"]["cliques"] if c["name"] == "router"]
    return [p for p in out if any(c["name"] == "router" for c in p["containers"])]


@pytest.mark.parametrize("target", ["coscheduling", "lws", "grove"])
def test_sglang_router_waits_for_every_engine_of_its_replica(disagg, target):
    """SGLang's router registers an engine only if it answers within ~35 s of the router's start, and
    engines open their port after loading weights: the router pod waits, in the router's own image, for
    exactly its replica's engines, and is ready only once its own /readiness says it has workers."""
    base, topo, placement, report = disagg
    spec = with_engine(base, "sglang")
    docs = build_manifests(spec, topo, placement, report, target=target)
    assert_accepted(docs)
    ctx = Context(spec, topo, placement, report)
    pods = _pods(docs)
    assert len(pods) == len(placement.replicas)
    for rep, pod in zip(sorted(placement.replicas, key=lambda r: r.index), pods, strict=True):
        (wait,) = pod["initContainers"]
        (container,) = pod["containers"]
        assert wait["image"] == container["image"] == router.ROUTER_IMAGES["sglang"]
        assert wait["resources"] == container["resources"]  # a LimitRange judges both alike
        assert wait["command"] == ["python3", "-c", router.WAIT_FOR_ENGINES]
        told = after(container["args"], "--prefill") + after(container["args"], "--decode")
        assert wait["args"] == told and len(told) == len(rep.instances)  # the URLs the router registers
        if target == "coscheduling":
            assert told == expected_urls(spec, ctx, rep.index, "prefill") + expected_urls(
                spec, ctx, rep.index, "decode"
            )
        assert container["readinessProbe"]["httpGet"]["path"] == "/readiness"


def test_routers_of_other_kinds_start_at_once_and_outlast_their_own_wait(disagg):
    """vLLM's router opens its port only once every engine answers, and exits after its own wait (600 s by
    default, shorter than a large model takes to load): placer gives it a longer wait, unless router.args
    sets one, and a startup probe longer than that keeps liveness from killing it first; no init container."""
    spec, topo, placement, report = disagg
    docs = build_manifests(spec, topo, placement, report, target="coscheduling")
    pods = _pods(docs)
    assert pods
    for pod in pods:
        assert "initContainers" not in pod
        (container,) = pod["containers"]
        (wait,) = after(container["args"], "--worker-startup-timeout-secs")
        startup = container["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] > int(wait) > 600
        assert "tcpSocket" in startup
    own = spec.model_copy(
        update={"router": spec.router.model_copy(update={"args": ["--worker-startup-timeout-secs=60"]})}
    )
    for pod in _pods(build_manifests(own, topo, placement, report, target="coscheduling")):
        args = pod["containers"][0]["args"]
        assert "--worker-startup-timeout-secs" not in args and args[-1] == "--worker-startup-timeout-secs=60"
    longer = spec.router.model_copy(update={"args": ["--worker-startup-timeout-secs", "3600"]})
    for pod in _pods(build_manifests(spec.model_copy(update={"router": longer}), topo, placement, report)):
        startup = pod["containers"][0]["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] > 3600  # the user's wait, outlasted too


def test_the_wait_ends_only_when_every_engine_is_ready(tmp_path):
    """The init container's script, run as the pod runs it: it waits while a port is closed and while an
    engine answers 503 (SGLang's engine warming up; a newer sglang-router refuses to register it), and ends
    once every URL answers 200."""
    import socket
    import subprocess
    import sys
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Engine(BaseHTTPRequestHandler):
        def do_GET(self):
            self.server.asked += 1
            self.send_response(503 if self.server.asked <= self.server.warming else 200)
            self.end_headers()

        def log_message(self, *args):
            pass

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    proc = subprocess.Popen([sys.executable, "-c", router.WAIT_FOR_ENGINES, *urls], stdout=subprocess.PIPE, text=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=2)  # nothing listens yet
        servers = [HTTPServer(("127.0.0.1", p), Engine) for p in ports]
        for server, warming in zip(servers, (2, 0), strict=True):
            server.asked, server.warming = 0, warming  # the first answers 503 twice, then 200
            threading.Thread(target=server.serve_forever, daemon=True).start()
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        assert out.splitlines() == [f"engine ready: {u}" for u in urls]
        assert servers[0].asked == 3 and servers[1].asked == 1
    finally:
        proc.kill()


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_start_first_is_refused_for_routers_that_wait_for_their_engines(tmp_path, kind):
    """Under Grove, startFirst holds every engine back until the router is ready; these routers become ready
    only with their engines (or register only engines that answer at once): a deadlock, refused as bad
    input with the field's line. Dynamo's workers register themselves, so its frontend may start first."""
    import yaml

    doc = yaml.safe_load((ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml").read_text())
    for pool in doc["pools"].values():
        pool["template"]["engine"] = kind
    doc["router"] |= {"kind": kind, "startFirst": True}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    cluster = ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml"
    out = run("solve", path, cluster, "-q", "-t", "grove")
    assert out.returncode == 2 and not out.stdout
    assert "router: startFirst" in out.stderr and "kind: dynamo" in out.stderr and "Traceback" not in out.stderr
    doc["router"]["kind"] = "dynamo"
    path.write_text(yaml.safe_dump(doc))
    ok = run("solve", path, cluster, "-q", "-t", "grove")
    assert ok.returncode == 0, ok.stderr
