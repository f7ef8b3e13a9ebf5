"""``placer solve --keep``: new objects are written for the --target the running manifests were written
for (placer.emit.readback.target_of reads it off their kinds), so a scale-out never mixes two schedulers'
objects; a --target that differs from it is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_in_process import run
from test_cli import ROOT, assert_clean_failure
from test_dra_ids import with_gpu_ids

from placer.emit.readback import load_running, target_of
from placer.emit.targets import TARGETS
from placer.model.load import load_cluster

SPEC = ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml"
CLUSTER = ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml"


def _dra_cluster(tmp_path: Path) -> Path:
    """The fixture cluster with a uuid and bus id per GPU, which --target dra selects by."""
    path = tmp_path / "cluster-ids.yaml"
    data = with_gpu_ids(load_cluster(CLUSTER)).model_dump(mode="json", by_alias=True, exclude_none=True)
    path.write_text(yaml.safe_dump(data))
    return path


def _solve(tmp_path: Path, target: str, *extra) -> Path:
    cluster = _dra_cluster(tmp_path) if target == "dra" else CLUSTER
    out = run("solve", SPEC, cluster, "-q", "-t", target, *extra)
    assert out.returncode == 0, out.stderr
    path = tmp_path / f"{target}.yaml"
    path.write_text(out.stdout)
    return path


@pytest.mark.parametrize("target", TARGETS)
def test_every_targets_manifests_say_which_target_wrote_them(tmp_path, target):
    path = _solve(tmp_path, target)
    assert [r.target for r in load_running([path])] == [target]
    assert target_of([d for d in yaml.safe_load_all(path.read_text()) if d]) == target


def test_records_and_unknown_objects_name_no_target():
    assert target_of([{"apiVersion": "v1", "kind": "Service"}]) is None
    assert target_of([{"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {}}}]) is None


@pytest.mark.parametrize("target", ["kueue", "kai", "dynamo"])
def test_solve_keep_writes_for_the_running_target_and_refuses_another(tmp_path, target):
    running = _solve(tmp_path, target)
    again = run("solve", SPEC, CLUSTER, "--keep", running, "-q")
    assert again.returncode == 0, again.stderr
    assert again.stdout == running.read_text()  # nothing changed: the same objects, byte for byte
    other = "grove" if target != "grove" else "kai"
    refused = run("solve", SPEC, CLUSTER, "--keep", running, "-q", "-t", other)
    assert_clean_failure(refused, 2)
    assert f"written for --target {target}" in refused.stderr
    assert run("solve", SPEC, CLUSTER, "--keep", running, "-q", "-t", target).stdout == running.read_text()


def test_a_placement_record_carries_the_target_and_keep_follows_it(tmp_path):
    """README's autoscale loop passes the record --placement wrote as the next --keep: it must say the target,
    or from the second call on the default's objects start beside the running ones."""
    record = tmp_path / "p.yaml"
    assert run("solve", SPEC, CLUSTER, "-q", "-t", "kai", "--placement", record).returncode == 0
    assert yaml.safe_load(record.read_text())["target"] == "kai"
    again = run("solve", SPEC, CLUSTER, "--keep", record, "-q").stdout
    assert "scheduling.run.ai/" in again and "scheduling.x-k8s.io/" not in again
    old = yaml.safe_load(record.read_text())
    del old["target"]  # a record written before records carried it: the default, or the one given
    record.write_text(yaml.safe_dump(old))
    assert "scheduling.x-k8s.io/" in run("solve", SPEC, CLUSTER, "--keep", record, "-q").stdout
    assert "scheduling.run.ai/" in run("solve", SPEC, CLUSTER, "--keep", record, "-q", "-t", "kai").stdout
    old["target"] = "yarn"
    record.write_text(yaml.safe_dump(old))
    bad = run("solve", SPEC, CLUSTER, "--keep", record, "-q")
    assert_clean_failure(bad, 2)
    assert "target: 'yarn' is not a --target" in bad.stderr


def test_a_kubectl_pod_list_says_its_target(tmp_path):
    """Running pods as the API server returns them: Kueue's pods carry its labels, coscheduling's its
    pod-group label; a scale-out from them follows that target."""
    for target, mark in (("kueue", "kueue.x-k8s.io/"), ("coscheduling", "scheduling.x-k8s.io/pod-group")):
        manifests = _solve(tmp_path, target)
        pods = {"apiVersion": "v1", "kind": "List", "items": _running_pods(manifests)}
        listed = tmp_path / f"pods-{target}.json"
        listed.write_text(json.dumps(pods))
        assert [r.target for r in load_running([listed])] == [target]
        out = run("solve", SPEC, CLUSTER, "--keep", listed, "-q")
        assert out.returncode == 0, out.stderr
        assert mark in out.stdout


def test_grove_and_dynamo_pods_say_their_target(tmp_path):
    """Grove's and Dynamo's operators make the pods, so the pods carry no kind of placer's: the operators'
    own labels tell (Grove's grove.io/podclique; Dynamo's graph label, also when the graph runs on Grove)."""
    manifests = _solve(tmp_path, "grove")
    listed = tmp_path / "pods-grove.json"
    listed.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": _grove_pods(manifests)}))
    assert [r.target for r in load_running([listed])] == ["grove"]
    out = run("solve", SPEC, CLUSTER, "--keep", listed, "-q")
    assert out.returncode == 0, out.stderr
    assert out.stdout == manifests.read_text()  # every instance read back where it runs: nothing moves
    pod = {"kind": "Pod", "metadata": {"labels": {"grove.io/podclique": "g-0-decode"}}, "spec": {}}
    assert target_of([pod]) == "grove"
    pod["metadata"]["labels"]["nvidia.com/dynamo-graph-deployment-name"] = "g"
    assert target_of([pod]) == "dynamo"


def _grove_pods(manifests: Path) -> list[dict]:
    """The pods Grove's operator makes of a PodCliqueSet: one per node a clique's instances were placed on
    (its placer.dev/instances table; the router's placer.dev/node), labelled with the clique."""
    pods = []
    for d in yaml.safe_load_all(manifests.read_text()):
        if not d or d["kind"] != "PodCliqueSet":
            continue
        for clique in d["spec"]["template"]["cliques"]:
            notes = clique.get("annotations", {})
            table = json.loads(notes.get("placer.dev/instances", "{}"))
            nodes = sorted({v.split(":")[0] for v in table.values()}) or [notes["placer.dev/node"]]
            for i, node in enumerate(nodes):
                name = f"{d['metadata']['name']}-0-{clique['name']}"
                labels = clique["labels"] | {"grove.io/podclique": name}
                meta = {"name": f"{name}-{i}", "namespace": d["metadata"]["namespace"], "labels": labels}
                meta["annotations"] = notes
                spec = clique["spec"]["podSpec"] | {"nodeName": node}
                pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {}})
    return pods


def _running_pods(manifests: Path) -> list[dict]:
    """``kubectl get pods -o json`` of what the manifests made: each workload's pod, bound where placer said."""
    pods = []
    for d in yaml.safe_load_all(manifests.read_text()):
        if not d or d["kind"] not in ("Deployment", "StatefulSet"):
            continue
        t = d["spec"]["template"]
        gpus = t["metadata"].get("annotations", {}).get("placer.dev/instance-gpus", "")
        node = gpus.split(":")[0] or d["metadata"]["annotations"]["placer.dev/node"]  # an engine, or the router
        meta = t["metadata"] | {"name": d["metadata"]["name"] + "-0", "namespace": d["metadata"]["namespace"]}
        spec = t["spec"] | {"nodeName": node}
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": "Running"}})
    return pods


def test_dra_manifests_read_back_without_their_claim_templates_are_still_dra(tmp_path):
    path = _solve(tmp_path, "dra")
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d and not d["apiVersion"].startswith("resource.")]
    assert target_of(docs) == "dra"  # the pods' templates ask for resource claims; the PodGroup is coscheduling's


def test_topology_objects_follow_the_kept_target(tmp_path):
    running = _solve(tmp_path, "kueue")
    out = run("solve", SPEC, CLUSTER, "--keep", running, "-q", "--topology-objects", "-")
    assert out.returncode == 0, out.stderr
    assert {"Topology"} <= {d["kind"] for d in yaml.safe_load_all(out.stdout) if d}
    lws = _solve(tmp_path, "lws")
    refused = run("solve", SPEC, CLUSTER, "--keep", lws, "--topology-objects", "-")
    assert_clean_failure(refused, 2)
    assert "the lws target refers to no topology object" in refused.stderr
    assert "placing 1 deployment" not in refused.stderr  # refused from what runs, before any solving


def test_each_deployment_follows_its_own_running_target(tmp_path):
    """Two deployments kept together, written for two targets: each is printed for its own; a new one gets
    the one given (else the default), and a --target that contradicts one being printed is refused."""
    a = _solve(tmp_path, "kueue")
    other = tmp_path / "other-spec.yaml"
    doc = yaml.safe_load(SPEC.read_text())
    doc["metadata"]["name"] = "second"
    other.write_text(yaml.safe_dump(doc))
    b = tmp_path / "b.yaml"
    b.write_text(run("solve", other, CLUSTER, "--keep", a, "-q", "-t", "grove").stdout)  # beside the first
    both = run("solve", SPEC, other, CLUSTER, "--keep", a, "--keep", b, "-q")
    assert both.returncode == 0, both.stderr
    assert both.stdout == a.read_text() + b.read_text()  # each deployment's objects as they run, byte for byte
    third = tmp_path / "third.yaml"
    doc["metadata"]["name"] = "third"
    third.write_text(yaml.safe_dump(doc))
    new = run("solve", third, CLUSTER, "--keep", a, "--keep", b, "-q")  # the running two are not printed
    assert new.returncode == 0, new.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(new.stdout) if d}
    assert "PodGroup" in kinds and "PodCliqueSet" not in kinds  # the default, not a running one's
    assert "PodCliqueSet" in run("solve", third, CLUSTER, "--keep", a, "--keep", b, "-q", "-t", "grove").stdout
    refused = run("solve", SPEC, other, CLUSTER, "--keep", a, "--keep", b, "-q", "-t", "grove")
    assert_clean_failure(refused, 2)
    assert "serving/llama-70b runs from objects written for --target kueue" in refused.stderr
    mixed = run("solve", SPEC, other, CLUSTER, "--keep", a, "--keep", b, "--topology-objects", "-")
    assert_clean_failure(mixed, 2)
    assert "different targets" in mixed.stderr
    assert "placing 2 deployment" not in mixed.stderr  # before any solving


@pytest.mark.parametrize("target", [t for t in TARGETS if t != "dra"])
def test_scaling_out_with_keep_leaves_every_kept_pod_template_alone(tmp_path, target):
    """A changed pod template is a rollout: the engine restarts. Scaling a deployment out must change no
    kept engine's template (a spec or solver status there did, on Kueue's first Deployment of a replica)."""
    spec = ROOT / "fixtures" / "specs" / "aggregated-tp8.yaml"
    base = run("solve", spec, CLUSTER, "-q", "-t", target)
    assert base.returncode == 0, base.stderr
    running = tmp_path / "running.yaml"
    running.write_text(base.stdout)
    doc = yaml.safe_load(spec.read_text())
    doc["replicas"] += 1
    bigger = tmp_path / "bigger.yaml"
    bigger.write_text(yaml.safe_dump(doc))
    out = run("solve", bigger, CLUSTER, "-q", "--keep", running)
    assert out.returncode == 0, out.stderr

    def templates(text: str) -> dict[str, dict]:
        docs = [d for d in yaml.safe_load_all(text) if d]
        return {
            d["metadata"]["name"]: d["spec"]["template"] for d in docs if d["kind"] in ("Deployment", "StatefulSet")
        }

    before, after = templates(base.stdout), templates(out.stdout)
    assert len(after) > len(before) or target in ("lws", "grove", "dynamo")  # the new replica's workloads
    for name, template in before.items():
        assert after.get(name) == template, name
