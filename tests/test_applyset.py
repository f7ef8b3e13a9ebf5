"""Pruning with ``kubectl apply --prune --applyset`` (KEP-3659): every target's output is input kubectl accepts
and labels whole (no object already carries an ApplySet key; one namespace per deployment), the set id is
kubectl's, and a scale-in with ``--keep`` prunes exactly the objects of the dropped replicas or instances,
computed from the two outputs. kubectl's side (AddLabels, prune) is modelled by placer.emit.applyset after
kubernetes/kubectl pkg/cmd/apply/applyset.go; see that module."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
import yaml
from cli_in_process import run
from k8s_acceptance import assert_accepted
from test_cli import SMALL
from test_fleet import leaf_cluster

from placer.emit import applyset
from placer.emit.readback import load_placed, load_running
from placer.emit.targets import TARGETS

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "targets"
AGG = ROOT / "fixtures" / "specs" / "aggregated-tp8.yaml"


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def _labels(doc: dict) -> dict:
    return doc["metadata"].get("labels") or {}


def _shared(doc: dict) -> bool:
    return _labels(doc).get("app.kubernetes.io/component") == "topology"


def _kubectl_id(name: str, namespace: str, kind: str, group: str) -> str:
    """Written out here, independently of placer: base64url(sha256(name.namespace.kind.group)), unpadded."""
    raw = hashlib.sha256(f"{name}.{namespace}.{kind}.{group}".encode()).digest()
    return "applyset-" + base64.urlsafe_b64encode(raw).decode().replace("=", "") + "-v1"


def test_the_set_id_is_kubectls():
    # kubectl's own vector (pkg/cmd/apply/apply_test.go, TestApplySetInvalidLiveParent): Secret my-set in test
    assert applyset.applyset_id("my-set", "test", "Secret") == "applyset-0eFHV8ySqp7XoShsGvyWFQD3s96yqwHmzc4e0HR1dsY-v1"
    parent = applyset.parent_name("llama-70b")
    assert parent == "placer-llama-70b"
    assert applyset.applyset_id(parent, "serving") == _kubectl_id(parent, "serving", "ConfigMap", "")
    assert applyset.applyset_id(parent, "serving") != applyset.applyset_id(parent, "default")
    assert applyset.prune_command("llama-70b", "serving") == (
        "KUBECTL_APPLYSET=true kubectl apply --prune --applyset=configmap/placer-llama-70b -n serving -f -"
    )


def test_the_parent_kubectl_creates_is_a_valid_configmap():
    """What kubectl's buildParentPatch writes, for the longest spec name placer accepts (63 characters)."""
    name = applyset.parent_name("a" * 63)
    parent = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "serving",
            "labels": {applyset.PARENT_ID: applyset.applyset_id(name, "serving")},
            "annotations": {
                applyset.TOOLING: "kubectl/v1.32.4",
                applyset.CONTAINS_GROUP_KINDS: "Deployment.apps,Pod,PodGroup.scheduling.x-k8s.io,Service",
                applyset.ADDITIONAL_NAMESPACES: "",
            },
        },
    }
    assert_accepted([parent])


def _golden() -> list[tuple[str, Path]]:
    return [(t, p) for t in sorted(TARGETS) for p in sorted((GOLDEN / t).glob("*.yaml"))]


def test_every_target_has_golden_output_to_check():
    assert {t for t, _ in _golden()} == set(TARGETS)


@pytest.mark.parametrize("target,path", _golden(), ids=[f"{t}/{p.stem}" for t, p in _golden()])
def test_every_object_of_every_target_joins_the_set(target, path):
    docs = _docs(path.read_text())
    assert all(not applyset.carried_keys(d) for d in docs), "kubectl refuses input that carries ApplySet keys"
    namespaces = {d["metadata"]["namespace"] for d in docs if "namespace" in d["metadata"]}
    assert len(namespaces) == 1, namespaces  # kubectl -n NS must match every namespaced object
    # cluster-scoped: only the cluster's shared topology object (KAI Topology, Grove ClusterTopologyBinding)
    assert all(_shared(d) for d in docs if "namespace" not in d["metadata"])
    [ns] = namespaces
    name = {_labels(d)["app.kubernetes.io/name"] for d in docs if not _shared(d)}
    assert len(name) == 1, name
    set_id = applyset.applyset_id(applyset.parent_name(name.pop()), ns)
    members = applyset.as_members(docs, set_id)
    assert all(_labels(m)[applyset.PART_OF] == set_id for m in members)
    assert len({applyset.identity(m) for m in members}) == len(docs)  # one object each, none named twice
    # the labelled objects are still what the API server accepts, and placer's input is untouched
    assert_accepted(members)
    assert _docs(path.read_text()) == docs
    with pytest.raises(ValueError, match="already set in input data"):
        applyset.as_members(members[:1], set_id)  # what kubectl says to a stream that carries the label


def _replica(doc: dict) -> int | None:
    value = _labels(doc).get("placer.dev/replica")
    return int(value) if value is not None else None


def _instance(doc: dict) -> tuple[int, str, int] | None:
    labels = _labels(doc)
    if "placer.dev/instance" not in labels:
        return None
    return int(labels["placer.dev/replica"]), labels["placer.dev/pool"], int(labels["placer.dev/instance"])


def _solve(tmp_path: Path, spec: Path, cluster: Path, target: str, *keep: Path) -> str:
    args = [str(spec), str(cluster), "-q", "-t", target]
    for k in keep:
        args += ["--keep", str(k)]
    out = run("solve", *args)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _with_replicas(tmp_path: Path, n: int) -> Path:
    doc = yaml.safe_load(AGG.read_text())
    doc["replicas"] = n
    path = tmp_path / f"agg-{n}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_scale_in_prunes_exactly_the_dropped_replicas_objects(tmp_path, target):
    spec2, spec1 = _with_replicas(tmp_path, 2), _with_replicas(tmp_path, 1)
    set_id = applyset.applyset_id(applyset.parent_name("llama-70b-agg"), "default")
    first = _solve(tmp_path, spec2, SMALL, target)
    running = tmp_path / "running.yaml"
    running.write_text(first)
    second = _solve(tmp_path, spec1, SMALL, target, running)
    live = applyset.as_members(_docs(first), set_id)  # what the first apply left in the cluster
    gone = applyset.pruned(live, _docs(second), set_id)
    # expected from the spec change alone: every object of a replica the smaller spec no longer has
    expected = {applyset.identity(d) for d in _docs(first) if (r := _replica(d)) is not None and r >= 1}
    assert gone == expected and expected
    kept = {applyset.identity(d) for d in _docs(first)} - gone
    assert all(_replica(d) in (0, None) for d in _docs(first) if applyset.identity(d) in kept)
    assert all(not _shared(d) or applyset.identity(d) in kept for d in _docs(first))  # never the shared topology


def test_scale_out_prunes_nothing_and_a_later_scale_in_prunes_what_it_added(tmp_path):
    set_id = applyset.applyset_id(applyset.parent_name("llama-70b-agg"), "default")
    one = _solve(tmp_path, _with_replicas(tmp_path, 1), SMALL, "coscheduling")
    (tmp_path / "one.yaml").write_text(one)
    two = _solve(tmp_path, _with_replicas(tmp_path, 2), SMALL, "coscheduling", tmp_path / "one.yaml")
    (tmp_path / "two.yaml").write_text(two)
    assert applyset.pruned(applyset.as_members(_docs(one), set_id), _docs(two), set_id) == set()
    again = _solve(tmp_path, _with_replicas(tmp_path, 1), SMALL, "coscheduling", tmp_path / "two.yaml")
    gone = applyset.pruned(applyset.as_members(_docs(two), set_id), _docs(again), set_id)
    added = {applyset.identity(d) for d in _docs(two)} - {applyset.identity(d) for d in _docs(one)}
    assert gone == added and added


def _pool_spec(tmp_path: Path, instances: int) -> Path:
    doc = {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "ServingTopology",
        "metadata": {"name": "svc", "namespace": "serving"},
        "model": {"layers": 4, "hiddenSize": 1024, "kvHeads": 2, "headDim": 64},
        "pools": {
            "aggregated": {
                "instances": instances,
                "tensorParallel": 4,
                "placement": {"required": "node"},
                "template": {"image": "example.com/engine:1", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            }
        },
        "replicas": 1,
    }
    path = tmp_path / f"svc-{instances}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_scale_in_of_a_pool_prunes_exactly_the_dropped_instances_objects(tmp_path, target):
    cluster = leaf_cluster(tmp_path, [(n, [], None) for n in ("n1", "n2", "n3")])
    if target == "dra":  # claims select GPUs by uuid: the cluster as a ResourceSlice import records it
        from test_dra_ids import with_gpu_ids

        from placer.model.load import load_cluster

        ids = with_gpu_ids(load_cluster(cluster)).model_dump(mode="json", by_alias=True, exclude_none=True)
        cluster.write_text(yaml.safe_dump(ids))
    set_id = applyset.applyset_id(applyset.parent_name("svc"), "serving")
    first = _solve(tmp_path, _pool_spec(tmp_path, 3), cluster, target)
    running = tmp_path / "running.yaml"
    running.write_text(first)
    second = _solve(tmp_path, _pool_spec(tmp_path, 2), cluster, target, running)
    gone = applyset.pruned(applyset.as_members(_docs(first), set_id), _docs(second), set_id)
    # objects of one instance (Pods, LeaderWorkerSets, DRA claims): those of instance 2 go; objects of a whole
    # replica (Grove's PodCliqueSet, Dynamo's graph) stay and are updated in place
    expected = {applyset.identity(d) for d in _docs(first) if (i := _instance(d)) is not None and i[2] >= 2}
    assert gone == expected
    assert bool(expected) == (target not in ("grove", "dynamo"))


def _spec_in(tmp_path: Path, name: str, namespace: str) -> dict:
    doc = yaml.safe_load(_pool_spec(tmp_path, 1).read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    return doc


def test_a_batch_is_applied_one_set_per_deployment(tmp_path):
    """A batch stream spans deployments (and namespaces): solving each spec with --keep of the batch's records
    prints that deployment alone, where the batch put it, for its own ApplySet."""
    cluster = leaf_cluster(tmp_path, [(n, [], None) for n in ("n1", "n2", "n3")])
    specs = {("team-a", "a"): _spec_in(tmp_path, "a", "team-a"), ("team-b", "b"): _spec_in(tmp_path, "b", "team-b")}
    batch = tmp_path / "batch.yaml"
    batch.write_text(yaml.safe_dump_all(list(specs.values())))
    records = tmp_path / "records.yaml"
    out = run("solve", str(batch), str(cluster), "-q", "--placement", str(records))
    assert out.returncode == 0, out.stderr
    whole = {applyset.identity(d): d for d in _docs(out.stdout)}
    seen: set = set()
    for (ns, name), doc in specs.items():
        one = tmp_path / f"{name}.yaml"
        one.write_text(yaml.safe_dump(doc))
        docs = _docs(_solve(tmp_path, one, cluster, "coscheduling", records))
        assert {d["metadata"]["namespace"] for d in docs} == {ns}
        assert all(_labels(d)["app.kubernetes.io/name"] == name for d in docs)
        for d in docs:  # the same objects as in the batch; only the gang's spec/status record may differ
            assert applyset.identity(d) in whole
            if d["kind"] == "StatefulSet":
                assert d == whole[applyset.identity(d)]
        seen |= {applyset.identity(d) for d in docs}
        # applying b's stream to b's set never prunes a's objects: they carry a's set id
        ids = {n: applyset.applyset_id(applyset.parent_name(n), s) for s, n in specs}
        other = "a" if name == "b" else "b"
        live = applyset.as_members([d for d in whole.values() if d["metadata"]["namespace"] != ns], ids[other])
        assert applyset.pruned(live, docs, ids[name]) == set()
    assert seen == set(whole)


@pytest.mark.parametrize("target", ["coscheduling", "kai", "grove"])
def test_readers_ignore_what_kubectl_adds(tmp_path, target):
    """explain and --keep read back a kubectl get of the set (members labelled, the parent ConfigMap with them)
    as they read placer's own output."""
    plain = tmp_path / "plain.yaml"
    plain.write_text((GOLDEN / target / "aggregated-tp8-small-mixed.yaml").read_text())
    name, ns = "placer-llama-70b-agg", "default"
    set_id = applyset.applyset_id(name, ns)
    parent = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {applyset.PARENT_ID: set_id},
            "annotations": {applyset.TOOLING: "kubectl/v1.32.4", applyset.CONTAINS_GROUP_KINDS: "Pod"},
        },
    }
    labelled = tmp_path / "labelled.yaml"
    labelled.write_text(yaml.safe_dump_all([parent, *applyset.as_members(_docs(plain.read_text()), set_id)]))
    assert load_placed(labelled).placement == load_placed(plain).placement
    assert load_placed(labelled).spec == load_placed(plain).spec
    [a], [b] = load_running([labelled]), load_running([plain])
    assert (a.key, a.instances, a.routers) == (b.key, b.instances, b.routers)
    got = run("explain", str(labelled), "-c", str(SMALL))
    want = run("explain", str(plain), "-c", str(SMALL))
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout


@pytest.mark.parametrize("target", ["kai", "grove"])
def test_the_shared_topology_object_is_the_same_bytes_in_every_deployment_s_stream(target):
    """Every deployment on a cluster carries the cluster's Topology / ClusterTopologyBinding; applying one
    must not relabel it for the others (it named the deployment that emitted it, so each apply changed it)."""
    from test_cli import DISAGG

    shared = []
    for spec in (AGG, DISAGG):
        out = run("solve", spec, ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml", "--target", target, "-q")
        assert out.returncode == 0, out.stderr
        shared.append([d for d in _docs(out.stdout) if "namespace" not in d["metadata"]])
    assert len(shared[0]) == 1 and shared[0] == shared[1]
    assert _shared(shared[0][0]) and "app.kubernetes.io/part-of" not in _labels(shared[0][0])
