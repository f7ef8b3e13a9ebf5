"""What `placer solve spec cluster | kubectl apply -f -` leaves must serve: for every target, the
disaggregated fixture's output has no bare engine Pod and no placeholder image, and every URL in the router's
command is the DNS name that a controller in the output gives one leader of that replica's prefill or decode
pool, with a Service in the output selecting that pool's pods. The DNS names are derived here from each
controller's own naming rules (StatefulSet, Deployment hostname/subdomain, LeaderWorkerSet, Grove), not from
placer's functions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from cli_in_process import run
from fixtures_solved import solved_fixture
from k8s_acceptance import made_pods

from placer.emit.manifests import build_manifests
from placer.emit.readback import load_running
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
    return solved_fixture("llama-70b-disagg")


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


def grove_pods(pcs: dict) -> list[dict]:
    """The pods Grove makes from a PodCliqueSet, labelled as Grove labels them: the clique's labels, then
    Grove's own over them (ai-dynamo/grove operator/internal/controller/podcliqueset/components/podclique/
    podclique.go, getLabels: app.kubernetes.io/name, component, managed-by, part-of are Grove's), each bound
    to the node placer chose for it."""
    name = pcs["metadata"]["name"]
    out = []
    for c in pcs["spec"]["template"]["cliques"]:
        notes = c["annotations"]
        grove = {
            "app.kubernetes.io/name": f"{name}-0-{c['name']}",
            "app.kubernetes.io/component": "pcs-podclique",
            "app.kubernetes.io/managed-by": "grove-operator",
            "app.kubernetes.io/part-of": name,
        }
        if "placer.dev/node" in notes:  # the router
            nodes = [notes["placer.dev/node"]]
        elif "placer.dev/instances" in notes:  # single-node instances: one pod per listed instance
            nodes = [v.split(":")[0] for _, v in sorted(json.loads(notes["placer.dev/instances"]).items())]
        else:  # one pod of a multi-node instance: its rank's node
            nodes = [notes["placer.dev/instance-gpus"].split(";")[int(c["labels"]["placer.dev/rank"])].split(":")[0]]
        for k, node in enumerate(nodes):
            out.append(
                {
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{name}-0-{c['name']}-{k}x",
                        "namespace": pcs["metadata"]["namespace"],
                        "labels": c["labels"] | grove,
                        "annotations": notes,
                    },
                    "spec": {"nodeName": node},
                    "status": {"phase": "Running"},
                }
            )
    return out


@pytest.mark.parametrize("fixture", ["llama-70b-disagg", "tp16-multinode"])
def test_grove_pods_as_grove_labels_them_are_found_by_services_and_read_back(fixture, tmp_path):
    spec = load_spec(ROOT / "fixtures" / "specs" / f"{fixture}.yaml")
    topo = build_topology(load_cluster(ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml"))
    placement = solve(build_problem(spec, topo), SolveOptions(time_limit_s=10))
    docs = build_manifests(spec, topo, placement, verify_placement(spec, topo, placement), target="grove")
    pods = [p for d in docs if d["kind"] == "PodCliqueSet" for p in grove_pods(d)]
    for svc in (d for d in docs if d["kind"] == "Service"):
        selected = [p for p in pods if svc["spec"]["selector"].items() <= p["metadata"]["labels"].items()]
        assert selected, f"Service {svc['metadata']['name']} selects none of Grove's pods"
    listed = tmp_path / "pods.json"
    listed.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    (running,) = load_running([listed])
    assert running.key == f"{spec.metadata.namespace}/{spec.metadata.name}"
    placed = {(r.index, i.pool, i.index): i.pods for r in placement.replicas for i in r.instances}
    assert {k: v.pods for k, v in running.instances.items()} == placed
    assert running.routers == {r.index: r.router for r in placement.replicas if r.router is not None}


def _spec_file(tmp_path: Path, fixture: str, change) -> Path:
    doc = yaml.safe_load((ROOT / "fixtures" / "specs" / f"{fixture}.yaml").read_text())
    change(doc)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_vllm_prefill_and_decode_advertise_their_pod_ip_for_nixl(disagg):
    """vLLM's NIXL side channel defaults to localhost; across pods the decode side must dial the prefill
    pod's IP, so every prefill and decode engine gets VLLM_NIXL_SIDE_CHANNEL_HOST from status.podIP."""
    spec, topo, placement, report = disagg
    pods = [
        p
        for p in made_pods(build_manifests(spec, topo, placement, report))
        if "placer.dev/pool" in p["metadata"]["labels"]
    ]
    assert pods
    for pod in pods:
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        names = list(env)  # placer's env first, so a user's env may reference it
        assert names.index("PLACER_POD_RANK") < names.index("VLLM_NIXL_SIDE_CHANNEL_HOST")


def test_a_controller_whose_pods_kubernetes_could_not_create_is_refused(tmp_path):
    def long_names(doc):
        doc["metadata"]["name"] = "a" * 40
        doc["pools"]["decodexxxxxx"] = doc["pools"].pop("decode") | {"role": "decode"}
        doc["transfer"]["to"] = "decodexxxxxx"
        doc["router"]["near"]["pool"] = "decodexxxxxx"

    path = _spec_file(tmp_path, "llama-70b-disagg", long_names)
    for target in ("coscheduling", "lws"):
        done = run("solve", path, ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml", "-t", target, "-q")
        assert (done.returncode, done.stdout) == (2, ""), done.stderr
        assert "characters; Kubernetes creates its pods only up to" in done.stderr


def test_a_preset_instance_spread_over_unequal_nodes_is_refused(tmp_path):
    """TP16 without nodeCount/gpusPerNode on a fragmented cluster: the solver may split an instance 6/7/3,
    which vLLM cannot run (it splits the TP group evenly over --nnodes)."""

    def no_layout(doc):
        pool = doc["pools"]["aggregated"]
        del pool["nodeCount"], pool["gpusPerNode"]
        pool["template"].pop("args", None)

    path = _spec_file(tmp_path, "tp16-multinode", no_layout)
    done = run("solve", path, ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml", "-q")
    if done.returncode == 0:  # the solver found an even split: then every pod asks for the same count
        counts = {
            p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
            for p in made_pods(list(yaml.safe_load_all(done.stdout)))
            if "placer.dev/pool" in p["metadata"]["labels"]
        }
        assert len(counts) == 1
    else:
        assert (done.returncode, done.stdout) == (2, "")
        assert "needs the same GPU count on every node of an instance" in done.stderr


def test_pool_names_ending_in_a_number_are_refused(tmp_path):
    def numbered(doc):
        doc["pools"]["decode-1"] = doc["pools"].pop("decode") | {"role": "decode"}
        doc["transfer"]["to"] = "decode-1"
        doc["router"]["near"]["pool"] = "decode-1"

    done = run(
        "validate",
        _spec_file(tmp_path, "llama-70b-disagg", numbered),
        ROOT / "fixtures" / "clusters" / "small-mixed.yaml",
    )
    assert done.returncode == 2 and "ends in -<number>" in done.stderr


def test_preset_instances_are_split_evenly_and_the_checker_holds_it():
    """On 4-GPU GB200 trays a vLLM TP8 prefill instance is two trays x 4 GPUs (vLLM splits TP evenly over
    --nnodes), never 2 + 3 + 3; the independent checker refuses an uneven one."""
    from dataclasses import replace

    from placer.model.placement import Pod

    spec = load_spec(ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml")
    topo = build_topology(load_cluster(ROOT / "fixtures" / "clusters" / "gb200-nvl72-1008.yaml"))
    placement = solve(build_problem(spec, topo), SolveOptions(time_limit_s=10))
    report = verify_placement(spec, topo, placement)
    spans = [i for r in placement.replicas for i in r.instances if len(i.pods) > 1]
    assert spans and all(len({len(p.gpus) for p in i.pods}) == 1 for i in spans)
    assert not report.violations
    rep = placement.replicas[0]
    inst = next(i for i in rep.instances if len(i.pods) > 1)
    a, b = inst.pods[0], inst.pods[1]
    uneven = (Pod(a.node, a.gpus + b.gpus[:1]), Pod(b.node, b.gpus[1:]), *inst.pods[2:])
    bent_rep = replace(rep, instances=tuple(replace(i, pods=uneven) if i is inst else i for i in rep.instances))
    bent = replace(placement, replicas=(bent_rep, *placement.replicas[1:]))
    from placer.check.verify import check

    assert any("needs equal GPUs per node" in v for v in check(spec, topo, bent).violations)
