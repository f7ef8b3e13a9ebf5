"""What `placer solve spec cluster | kubectl apply -f -` leaves must serve: for every target, the
disaggregated fixture's output has no bare engine Pod and no placeholder image, and every URL in the router's
command is the DNS name that a controller in the output gives one leader of that replica's prefill or decode
pool, with a Service in the output selecting that pool's pods. The DNS names are derived here from each
controller's own naming rules (StatefulSet, Deployment hostname/subdomain, LeaderWorkerSet, Grove), not from
placer's functions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from k8s_acceptance import made_pods

from placer.emit.manifests import build_manifests
from placer.emit.targets import TARGETS
from placer.model.load import load_cluster, load_spec
from placer.pipeline import verify_placement
from placer.solver.problem import build_problem
from placer.solver.solve import SolveOptions, solve
from placer.topology.build import build_topology

ROOT = Path(__file__).resolve().parent.parent
URL = re.compile(r"http://([^:/\s,]+):(\d+)")


@pytest.fixture(scope="module")
def disagg():
    spec = load_spec(ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml")
    topo = build_topology(load_cluster(ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml"))
    placement = solve(build_problem(spec, topo), SolveOptions(time_limit_s=10))
    return spec, topo, placement, verify_placement(spec, topo, placement)


def leader_names(docs: list[dict]) -> dict[str, dict]:
    """DNS name -> pod template of every pod a controller in ``docs`` makes, as that controller names it."""
    out: dict[str, dict] = {}
    for d in docs:
        meta, spec = d["metadata"], d.get("spec", {})
        ns = meta.get("namespace", "default")
        if d["kind"] == "StatefulSet":  # pod <name>-<ordinal>, subdomain = serviceName
            for k in range(spec["replicas"]):
                out[f"{meta['name']}-{k}.{spec['serviceName']}.{ns}.svc"] = spec["template"]
        elif d["kind"] == "Deployment" and "subdomain" in spec["template"]["spec"]:
            t = spec["template"]
            out[f"{t['spec']['hostname']}.{t['spec']['subdomain']}.{ns}.svc"] = t
        elif d["kind"] == "LeaderWorkerSet":  # leader <lws>-<group>, under the Service named after the LWS
            group = spec["leaderWorkerTemplate"]
            leader = group.get("leaderTemplate", group["workerTemplate"])
            for g in range(spec["replicas"]):
                out[f"{meta['name']}-{g}.{meta['name']}.{ns}.svc"] = leader
        elif d["kind"] == "PodCliqueSet":  # hostname <pcs>-<i>-[<group>-<j>-]<clique>-<k>, subdomain <pcs>-<i>
            t = spec["template"]
            grouped = {c: g["name"] for g in t.get("podCliqueScalingGroups", []) for c in g["cliqueNames"]}
            for i in range(spec["replicas"]):
                for c in t["cliques"]:
                    prefix = f"{meta['name']}-{i}-" + (f"{grouped[c['name']]}-0-" if c["name"] in grouped else "")
                    for k in range(c["spec"]["replicas"]):
                        pod = {"metadata": {"labels": c["labels"]}, "spec": c["spec"]["podSpec"]}
                        out[f"{prefix}{c['name']}-{k}.{meta['name']}-{i}.{ns}.svc"] = pod
    return out


def router_args(docs: list[dict]) -> dict[str, list[str]]:
    """Replica -> the router container's command and args."""
    out = {}
    for d in docs:
        templates = []
        if d["kind"] == "Deployment":
            templates = [d["spec"]["template"]]
        elif d["kind"] == "PodCliqueSet":
            templates = [
                {"metadata": {"labels": c["labels"]}, "spec": c["spec"]["podSpec"]}
                for c in d["spec"]["template"]["cliques"]
            ]
        for t in templates:
            labels = t["metadata"]["labels"]
            if labels.get("app.kubernetes.io/component") == "router":
                (c,) = t["spec"]["containers"]
                out[labels["placer.dev/replica"]] = c.get("command", []) + c.get("args", [])
    return out


@pytest.mark.parametrize("target", [t for t in TARGETS if t not in ("dra", "dynamo")])
def test_the_router_is_told_every_leader_of_its_replica(disagg, target):
    spec, topo, placement, report = disagg
    docs = build_manifests(spec, topo, placement, report, target=target)
    assert not any(d["kind"] == "Pod" for d in docs)  # every engine under a controller
    assert "ghcr.io/placer/" not in str(docs)
    names = leader_names(docs)
    services = [d for d in docs if d["kind"] == "Service"]
    routers = router_args(docs)
    assert sorted(routers) == sorted(str(r.index) for r in placement.replicas)
    for rep in placement.replicas:
        told = [(m.group(1), int(m.group(2))) for arg in routers[str(rep.index)] for m in URL.finditer(arg)]
        assert len({h for h, _ in told}) == len(told)  # each engine named once
        named: dict[str, int] = {}
        for host, port in told:
            assert host in names, f"{target}: the router names {host}, which no controller makes"
            pod = names[host]
            labels = pod["metadata"]["labels"]
            assert labels["placer.dev/replica"] == str(rep.index)  # its own replica's engines only
            engine = next(c for c in pod["spec"]["containers"] if c["name"] == "engine")
            assert port in [p["containerPort"] for p in engine.get("ports", [])]
            assert any(
                s["spec"]["selector"].items() <= labels.items() and s["metadata"]["labels"].get("placer.dev/pool")
                for s in services
            ), f"{target}: no pool Service selects {host}"
            named[labels["placer.dev/pool"]] = named.get(labels["placer.dev/pool"], 0) + 1
        expected = {
            pool: sum(1 for i in rep.instances if i.pool == pool)
            for pool in spec.pools
            if spec.role_of(pool) in ("prefill", "decode")
        }
        assert named == expected, target  # every leader of the replica's prefill and decode pools, once


def test_dra_is_wired_like_coscheduling(disagg):
    """DRA's output needs GPU ids in the cluster file (tests/test_dra_ids.py); its controllers and router are
    the coscheduling target's, which the test above proves, so here: no bare Pod, the same router args."""
    from test_dra_ids import with_gpu_ids

    spec, _, _, _ = disagg
    topo = build_topology(with_gpu_ids(load_cluster(ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml")))
    placement = solve(build_problem(spec, topo), SolveOptions(time_limit_s=10))
    report = verify_placement(spec, topo, placement)
    dra = build_manifests(spec, topo, placement, report, target="dra")
    cos = build_manifests(spec, topo, placement, report, target="coscheduling")
    assert not any(d["kind"] == "Pod" for d in dra)
    assert router_args(dra) == router_args(cos) and router_args(dra)
    names = leader_names(dra)
    assert all(m.group(1) in names for args in router_args(dra).values() for a in args for m in URL.finditer(a))
    assert made_pods(dra)
