"""Batch placement (several specs, priorities), --keep (scale out without moving what runs) and
placer plan (fewest moves), on the bundled fixtures and small hand-made clusters."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from cli_in_process import run
from k8s_acceptance import made_pods
from test_cli import run as run_process

from placer.emit.manifests import records_text
from placer.emit.readback import load_running
from placer.model.errors import InputError
from placer.model.load import load_cluster, load_spec, load_specs
from placer.model.placement import Pod
from placer.model.spec import ServingTopology
from placer.pipeline import run_fleet, verify_fleet
from placer.solver.fleet import Deployment, solve_fleet
from placer.solver.keep import plan_keep
from placer.solver.plan import plan
from placer.solver.solve import SolveOptions
from placer.topology.build import build_topology

FIX = Path(__file__).parent.parent / "fixtures"
DGX = FIX / "clusters" / "dgx-h100-1024.yaml"
DISAGG = FIX / "specs" / "llama-70b-disagg.yaml"
OPTS = SolveOptions(time_limit_s=20)


def _spec_doc(name: str, tp: int, instances: int, priority: int = 0, replicas: int = 1) -> dict:
    return {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "ServingTopology",
        "metadata": {"name": name},
        "model": {"layers": 4, "hiddenSize": 1024, "kvHeads": 2, "headDim": 64},
        "pools": {
            "aggregated": {
                "instances": instances,
                "tensorParallel": tp,
                "placement": {"required": "node"},
                "template": {"image": "example.com/engine:1", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            }
        },
        "replicas": replicas,
        "scheduling": {"priority": priority},
    }


def _cluster(tmp_path: Path, busy: dict[str, list[int]]) -> Path:
    """n1, n2, n3: 8 H100 each in one leaf, with the given GPUs busy."""
    return leaf_cluster(tmp_path, [(n, busy.get(n, []), None) for n in ("n1", "n2", "n3")])


def leaf_cluster(tmp_path: Path, rows: list[tuple[str, list[int], float | None]], name: str = "cluster.yaml") -> Path:
    """8-GPU H100 nodes in one leaf: (name, busy GPUs, KV-cache hit or None for no telemetry)."""
    nodes = []
    for node_name, busy, hit in rows:
        node: dict = {"name": node_name, "leaf": "l1", "gpus": {"count": 8, "product": "H100", "memoryGiB": 80}}
        if busy:
            node["busy"] = list(busy)  # a fresh list: a shared one would dump as a YAML alias
        if hit is not None:
            node["metrics"] = {"queueDepth": 0, "kvCacheHit": hit}
        nodes.append(node)
    doc = {"apiVersion": "placer.dev/v1alpha1", "kind": "Cluster", "metadata": {"name": "tiny"}, "nodes": nodes}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def _write_specs(tmp_path: Path, docs: list[dict], name: str = "specs.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_specs_load_from_multi_document_files_and_directories(tmp_path):
    multi = _write_specs(tmp_path, [_spec_doc("a", 4, 1), _spec_doc("b", 4, 1)])
    got = load_specs(multi)
    assert [s.metadata.name for s, _ in got] == ["a", "b"]
    assert [src for _, src in got] == [f"{multi}#1", f"{multi}#2"]
    d = tmp_path / "dir"
    d.mkdir()
    (d / "2.yaml").write_text(yaml.safe_dump(_spec_doc("z", 4, 1)))
    (d / "1.yml").write_text(yaml.safe_dump(_spec_doc("y", 4, 1)))
    (d / "notes.txt").write_text("not a spec")
    assert [s.metadata.name for s, _ in load_specs(d)] == ["y", "z"]
    bad = _write_specs(tmp_path, [_spec_doc("a", 4, 1), {**_spec_doc("b", 4, 1), "replicas": 0}], "bad.yaml")
    with pytest.raises(InputError, match=r"bad\.yaml#2:\d+: replicas"):
        load_specs(bad)


def test_higher_priority_is_placed_even_when_listed_last(tmp_path):
    # 24 free GPUs: three TP8 instances. Low (2 x TP8) first in the file, high (2 x TP8) last: only one fits
    # and it must be the high one, placed exactly as if it were alone.
    cluster = _cluster(tmp_path, {})
    specs = _write_specs(tmp_path, [_spec_doc("low", 8, 2, priority=0), _spec_doc("high", 8, 2, priority=5)])
    res = run_fleet([specs], cluster, OPTS)
    assert [p.deployment.spec.metadata.name for p in res.fleet.placed] == ["high"]
    assert [u.deployment.spec.metadata.name for u in res.fleet.unplaced] == ["low"]
    assert res.fleet.unplaced[0].reasons  # says why
    alone = run_fleet([_write_specs(tmp_path, [_spec_doc("high", 8, 2, priority=5)], "alone.yaml")], cluster, OPTS)
    assert res.fleet.placed[0].placement.stats.objective == alone.fleet.placed[0].placement.stats.objective
    # only the placed deployment's objects are emitted
    names = {m["metadata"]["labels"]["app.kubernetes.io/name"] for m in res.manifests}
    assert names == {"high"}


def test_equal_priority_places_the_larger_first_and_both_when_they_fit(tmp_path):
    cluster = _cluster(tmp_path, {"n3": [0, 1, 2, 3]})  # 20 free GPUs
    specs = _write_specs(tmp_path, [_spec_doc("small", 4, 1), _spec_doc("big", 8, 2)])
    res = run_fleet([specs], cluster, OPTS)
    assert [p.deployment.spec.metadata.name for p in res.fleet.placed] == ["big", "small"]
    assert not res.fleet.unplaced
    # the bound never exceeds the cost (test_fleet_properties checks it against the joint optimum)
    assert res.fleet.bound is not None and res.fleet.bound <= res.fleet.cost


def test_batch_never_double_books_and_the_checker_sees_a_forged_overlap(tmp_path):
    cluster = _cluster(tmp_path, {})
    specs = _write_specs(tmp_path, [_spec_doc("a", 4, 2), _spec_doc("b", 4, 2), _spec_doc("c", 8, 1)])
    res = run_fleet([specs], cluster, OPTS)
    used = [
        (p.node, g)
        for pl in res.fleet.placed
        for r in pl.placement.replicas
        for i in r.instances
        for p in i.pods
        for g in p.gpus
    ]
    assert len(used) == len(set(used)) == 24
    from placer.model.errors import VerificationError

    placed = [(p.deployment.spec, p.placement) for p in res.fleet.placed]
    with pytest.raises(VerificationError, match="given to both"):
        forged = replace(placed[0][1], deployment=placed[1][1].deployment)
        verify_fleet(res.topology, [placed[0], (placed[1][0], forged)])


def test_fleet_on_the_fixture_cluster_matches_single_solves_when_nothing_competes(tmp_path):
    topo = build_topology(load_cluster(DGX))
    spec = load_spec(DISAGG)
    other = spec.model_copy(update={"metadata": spec.metadata.model_copy(update={"name": "llama-70b-b"})})
    res = solve_fleet([Deployment(spec, "a"), Deployment(other, "b")], topo, OPTS)
    assert len(res.placed) == 2
    costs = [p.placement.stats.objective for p in res.placed]
    assert costs[0] <= costs[1]  # the second placed on what the first left: never cheaper
    assert res.bound is not None and res.bound <= res.cost


def _replica_bump(tmp_path: Path, replicas: int, decode: int) -> Path:
    doc = yaml.safe_load(DISAGG.read_text())
    doc["router"]["near"]["level"] = "leaf"  # a fifth decode instance does not fit the fixture's racks
    doc["replicas"] = replicas
    doc["pools"]["decode"]["instances"] = decode
    path = tmp_path / f"disagg-{replicas}-{decode}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _objects(text: str) -> dict[tuple[str, str], str]:
    return {(d["kind"], d["metadata"]["name"]): yaml.safe_dump(d) for d in yaml.safe_load_all(text)}


@pytest.mark.parametrize("replicas,decode", [(2, 4), (1, 5)])
def test_keep_scales_out_without_touching_running_pods(tmp_path, replicas, decode):
    first = run("solve", str(_replica_bump(tmp_path, 1, 4)), str(DGX), "-q")
    assert first.returncode == 0
    running = tmp_path / "running.yaml"
    running.write_text(first.stdout)
    bigger = _replica_bump(tmp_path, replicas, decode)
    second = run("solve", str(bigger), str(DGX), "--keep", str(running), "-q")
    assert second.returncode == 0, second.stderr
    before, after = _objects(first.stdout), _objects(second.stdout)
    for key, text in before.items():
        if key[0] == "StatefulSet":
            assert after[key] == text or "kv-transfer-us" in _diff_keys(text, after[key]), key
    new = sorted(k for k in after if k not in before)
    if replicas == 2:
        assert all("-r1" in name for _, name in new) and new
        for key in before:  # a whole new replica: every pod and router object of replica 0 is identical
            if key[0] != "PodGroup":
                assert after[key] == before[key], key
    else:
        assert ("StatefulSet", "llama-70b-r0-decode-4") in new
    # the same request again gives the same bytes
    again = run_process("solve", str(bigger), str(DGX), "--keep", str(running), "-q")  # another hash seed
    assert again.stdout == second.stdout


def _diff_keys(a: str, b: str) -> set[str]:
    da, db = yaml.safe_load(a), yaml.safe_load(b)
    ann_a, ann_b = da["metadata"].get("annotations", {}), db["metadata"].get("annotations", {})
    return {k for k in set(ann_a) | set(ann_b) if ann_a.get(k) != ann_b.get(k)}


def test_keep_accepts_placement_records_and_kubectl_pods(tmp_path):
    record = tmp_path / "record.yaml"
    first = run("solve", str(DISAGG), str(DGX), "-q", "--placement", str(record))
    assert first.returncode == 0
    # kubectl get pods -A -o json: the emitted pods, bound where placer said, with status and extra fields
    pods = []
    for d in made_pods(d for d in yaml.safe_load_all(first.stdout) if d["kind"] == "StatefulSet"):
        node = d["metadata"]["annotations"]["placer.dev/instance-gpus"].split(":")[0]
        d["spec"]["nodeName"] = node
        d["status"] = {"phase": "Running"}
        pods.append(d)
    router = next(d for d in yaml.safe_load_all(first.stdout) if d["kind"] == "Deployment")
    pods.append(  # the pod the router's Deployment made, where it was bound
        {
            "kind": "Pod",
            "metadata": {"name": "router-abc12", "namespace": "serving", **router["spec"]["template"]["metadata"]},
            "spec": {"nodeName": router["metadata"]["annotations"]["placer.dev/node"]},
            "status": {"phase": "Running"},
        }
    )
    pods.append({"kind": "Pod", "metadata": {"name": "other", "labels": {}}, "spec": {"nodeName": "x"}})
    pod_list = tmp_path / "pods.json"
    pod_list.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    from_record, from_pods = load_running([record]), load_running([pod_list])
    assert [r.key for r in from_record] == [r.key for r in from_pods] == ["serving/llama-70b"]
    assert from_record[0].instances == from_pods[0].instances  # same pods, same domains
    assert from_record[0].routers == from_pods[0].routers and from_pods[0].routers
    pending = json.loads(pod_list.read_text())
    del pending["items"][0]["spec"]["nodeName"]  # not bound yet: not running
    pending["items"][0]["status"] = {"phase": "Pending"}
    pod_list_pending = tmp_path / "pods-pending.json"
    pod_list_pending.write_text(json.dumps(pending))
    assert len(load_running([pod_list_pending])[0].instances) == len(from_pods[0].instances) - 1
    bigger = _replica_bump(tmp_path, 2, 4)
    a = run("solve", str(bigger), str(DGX), "--keep", str(record), "-q")
    b = run("solve", str(bigger), str(DGX), "--keep", str(pod_list), "-q")
    assert a.returncode == b.returncode == 0
    pods_a = {k: v for k, v in _objects(a.stdout).items() if k[0] == "StatefulSet"}
    pods_b = {k: v for k, v in _objects(b.stdout).items() if k[0] == "StatefulSet"}
    assert pods_a and pods_a == pods_b


def test_running_deployment_not_given_keeps_its_gpus(tmp_path):
    cluster = _cluster(tmp_path, {})
    first = run_fleet([_write_specs(tmp_path, [_spec_doc("old", 8, 2)], "old.yaml")], cluster, OPTS)
    record = tmp_path / "old-record.yaml"
    record.write_text(records_text([(p.deployment.spec, p.placement) for p in first.fleet.placed]))
    new = _write_specs(tmp_path, [_spec_doc("new", 8, 2)], "new.yaml")
    res = run_fleet([new], cluster, OPTS, keep_paths=[record])
    assert [u.deployment.spec.metadata.name for u in res.fleet.unplaced] == ["new"]  # only 8 GPUs are left
    assert any("not given as a spec" in n for n in res.notes)


def test_keep_errors_name_the_file(tmp_path):
    cluster = _cluster(tmp_path, {})
    record = tmp_path / "r.yaml"
    first = run("solve", str(DISAGG), str(DGX), "-q", "--placement", str(record))
    assert first.returncode == 0
    r = run("solve", str(DISAGG), str(cluster), "--keep", str(record))
    assert r.returncode == 2 and "r.yaml" in r.stderr and "placed on cluster 'dgx-h100-1024'" in r.stderr
    record.write_text(record.read_text().replace("cluster: dgx-h100-1024", "cluster: tiny"))  # same name, no node
    r = run("solve", str(DISAGG), str(cluster), "--keep", str(record))
    assert r.returncode == 2 and "r.yaml" in r.stderr and "which the cluster file does not list" in r.stderr


def test_plan_moves_the_one_instance_in_the_way(tmp_path):
    # n1 and n2 whole, n3 half busy. "small" (TP4) runs on n1; "wide" (2 x TP8) needs two whole nodes:
    # moving small to n3 is the only way, and it is one move.
    cluster = _cluster(tmp_path, {"n3": [0, 1, 2, 3]})
    topo = build_topology(load_cluster(cluster))
    record = _small_running_on_n1(tmp_path, cluster)
    wide = _write_specs(tmp_path, [_spec_doc("wide", 8, 2)], "w.yaml")
    assert run_fleet([wide], cluster, OPTS, keep_paths=[record]).fleet.unplaced  # does not fit as things stand
    result = plan(load_running([record]), load_specs(wide), topo, OPTS)
    assert [(m.deployment, m.what, m.source, m.target.split(":")[0]) for m in result.moves] == [
        ("default/small", "aggregated-0", "n1:0,1,2,3", "n3")
    ]
    assert len(result.placements[1][1].replicas) == 1
    # CLI: JSON plan on stdout, records of the state after the moves feed --keep
    after = tmp_path / "after.yaml"
    r = run("plan", "--from", str(record), str(wide), str(cluster), "--placement", str(after), "-q")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["kind"] == "Plan" and len(doc["moves"]) == 1 and doc["moves"][0]["from"] == "n1:0,1,2,3"
    assert {x.key for x in load_running([after])} == {"default/small", "default/wide"}


def test_plan_says_when_nothing_can_make_room(tmp_path):
    cluster = _cluster(tmp_path, {})
    record = tmp_path / "r.yaml"
    first = run_fleet([_write_specs(tmp_path, [_spec_doc("a", 8, 2)], "a.yaml")], cluster, OPTS)
    record.write_text(records_text([(p.deployment.spec, p.placement) for p in first.fleet.placed]))
    huge = _write_specs(tmp_path, [_spec_doc("huge", 8, 2)], "h.yaml")
    r = run("plan", "--from", str(record), str(huge), str(cluster))
    assert r.returncode == 1 and "no set of moves makes the pending deployments fit" in r.stderr
    # why, as solve says it: huge fits alone once 'a' is gone, but 'a' keeps its two replicas
    assert "each pending deployment fits on the cluster with every running instance gone, but not beside" in r.stderr
    huger = _write_specs(tmp_path, [_spec_doc("huger", 8, 4)], "hh.yaml")
    r = run("plan", "--from", str(record), str(huger), str(cluster))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "default/huger: aggregated needs 32 GPUs for 1 replica(s); only 24 matching GPUs are free" in r.stderr


def test_cli_batch_exit_codes_and_stdout(tmp_path):
    cluster = _cluster(tmp_path, {})
    fits = _write_specs(tmp_path, [_spec_doc("a", 8, 1), _spec_doc("b", 8, 1)], "fits.yaml")
    r = run("solve", str(fits), str(cluster))
    assert r.returncode == 0
    too_many = _write_specs(tmp_path, [_spec_doc("a", 8, 2), _spec_doc("b", 8, 2)], "many.yaml")
    r = run("solve", str(too_many), str(cluster), "-q")
    assert r.returncode == 1
    assert {d["metadata"]["labels"]["app.kubernetes.io/name"] for d in yaml.safe_load_all(r.stdout)} == {"a"}
    dup = _write_specs(tmp_path, [_spec_doc("a", 8, 1), _spec_doc("a", 8, 1)], "dup.yaml")
    r = run("solve", str(dup), str(cluster))
    assert r.returncode == 2 and "unique" in r.stderr
    r = run("solve", str(cluster))
    assert r.returncode == 2


def test_plan_keep_releases_kept_gpus_that_the_cluster_lists_busy(tmp_path):
    # A cluster imported while the deployment ran lists its GPUs busy: --keep must not count them twice.
    first = run("solve", str(DISAGG), str(DGX), "-q")
    running = tmp_path / "running.yaml"
    running.write_text(first.stdout)
    current = load_running([running])
    topo = build_topology(load_cluster(DGX))
    held = {(p.node, g) for i in current[0].instances.values() for p in i.pods for g in p.gpus}
    busy_doc = yaml.safe_load(DGX.read_text())
    for node in busy_doc["nodes"]:
        extra = sorted(g for n, g in held if n == node["name"])
        if extra:
            node["busy"] = sorted(set(node.get("busy", [])) | set(extra))
    busy_cluster = tmp_path / "busy.yaml"
    busy_cluster.write_text(yaml.safe_dump(busy_doc))
    plan_a = plan_keep(current, [load_spec(DISAGG)], topo)
    plan_b = plan_keep(current, [load_spec(DISAGG)], build_topology(load_cluster(busy_cluster)))
    assert [n.free_gpus for n in plan_a.topology.nodes] == [n.free_gpus for n in plan_b.topology.nodes]
    r = run("solve", str(DISAGG), str(busy_cluster), "--keep", str(running), "-q")
    assert r.returncode == 0
    kept = {k: v for k, v in _objects(first.stdout).items() if k[0] == "StatefulSet"}
    assert kept and {k: v for k, v in _objects(r.stdout).items() if k[0] == "StatefulSet"} == kept


def test_plan_on_the_fixture_batch_frees_a_leaf_with_one_move(tmp_path):
    # The README's example: the bundled batch, then five more Llama-70B replicas.
    running = tmp_path / "running.yaml"
    batch = run("solve", str(FIX / "specs"), str(DGX), "--placement", str(running), "-q")
    assert batch.returncode == 1  # llama-70b-large does not fit this cluster
    doc = yaml.safe_load(DISAGG.read_text())
    doc["metadata"]["name"] = "llama-70b-p"
    doc["replicas"] = 5
    five = tmp_path / "five.yaml"
    five.write_text(yaml.safe_dump(doc))
    assert run("solve", str(five), str(DGX), "--keep", str(running), "-q").returncode == 1
    doc["replicas"] = 4  # README: "four do"
    four = tmp_path / "four.yaml"
    four.write_text(yaml.safe_dump(doc))
    assert run("solve", str(four), str(DGX), "--keep", str(running), "-q").returncode == 0
    after = tmp_path / "after.yaml"
    r = run("plan", "--from", str(running), str(five), str(DGX), "--placement", str(after), "-q")
    assert r.returncode == 0, r.stderr
    plan_doc = json.loads(r.stdout)
    assert [(m["deployment"], m["instance"]) for m in plan_doc["moves"]] == [("default/llama-405b", "aggregated-0")]
    assert plan_doc["pending"] == [{"deployment": "serving/llama-70b-p", "replicas": 5}]
    # README.md quotes this move: its leaves and cost must be what placer prints today
    (move,) = plan_doc["moves"]
    src, dst = (sorted({n.split("-")[1] for n in re.findall(r"dgx-su\d+-n\d+", move[k])}) for k in ("from", "to"))
    readme = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text().split())
    before, after_units = move["unitsBefore"], move["unitsAfter"]
    cost = f"unchanged at {before:,}" if before == after_units else f"{before:,} → {after_units:,}"
    quoted = f"from two nodes of leaf {src[0]} to two nodes of {dst[0]}, its cost (all-reduce + telemetry) {cost}"
    assert quoted in readme
    # the state after the moves is a valid --keep input in which everything stays put
    kept = run("solve", str(five), str(DGX), "--keep", str(after), "-q")
    assert kept.returncode == 0, kept.stderr


def test_a_deployment_left_out_one_by_one_is_placed_jointly(tmp_path):
    # n1 (2 free) and n2 (4 free) report cache hits, so they are cheap; n3 and n4 have 2 free each and report
    # misses (an unknown hit rate would be neutral, the mean of the known ones: docs/DESIGN.md).
    # "wide" (3 x TP2, the larger, placed first) alone takes n1 + n2; then "half" (TP4) has no node with 4
    # free. No node is wholly free, so no scarcity price steers wide (placer.solver.scarcity): the repair does.
    # Together: wide on n1, n3, n4 and half on n2.
    cluster = leaf_cluster(
        tmp_path,
        [("n1", [0, 1, 2, 3, 4, 5], 0.9), ("n2", [0, 1, 2, 3], 0.9), ("n3", [0, 1, 2, 3, 4, 5], 0.0)]
        + [("n4", [0, 1, 2, 3, 4, 5], 0.0)],
    )
    topo = build_topology(load_cluster(cluster))
    wide = ServingTopology.model_validate(_spec_doc("wide", 2, 3))
    half = ServingTopology.model_validate(_spec_doc("half", 4, 1))
    alone = solve_fleet([Deployment(wide, "a")], topo, OPTS)
    assert {p.node for r in alone.placed[0].placement.replicas for i in r.instances for p in i.pods} == {"n1", "n2"}
    res = solve_fleet([Deployment(wide, "a"), Deployment(half, "b")], topo, OPTS)
    assert not res.unplaced
    assert any("re-arranging" in n for n in res.notes)
    by_name = {p.deployment.spec.metadata.name: p.placement for p in res.placed}
    assert [p.node for r in by_name["half"].replicas for i in r.instances for p in i.pods] == ["n2"]
    verify_fleet(topo, [(p.deployment.spec, p.placement) for p in res.placed])


def test_explain_picks_one_deployment_of_a_batch(tmp_path):
    records = tmp_path / "records.yaml"
    batch = run("solve", str(FIX / "specs"), str(DGX), "--placement", str(records), "-q")
    manifests = tmp_path / "all.yaml"
    manifests.write_text(batch.stdout)
    for source in (manifests, records):
        r = run("explain", str(source), "-c", str(DGX), "--no-baselines")
        assert r.returncode == 2 and "choose one with --deployment" in r.stderr
        r = run("explain", str(source), "-c", str(DGX), "-d", "default/llama-405b", "--no-baselines", "-o", "json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["metadata"]["name"] == "llama-405b"
    r = run("explain", str(records), "-c", str(DGX), "-d", "nope")
    assert r.returncode == 2 and "no deployment 'nope'" in r.stderr


def test_a_batch_gives_the_same_bytes_twice(tmp_path):
    """Two processes (each its own hash seed), so no order that depends on one can hide."""
    records = [tmp_path / "a.yaml", tmp_path / "b.yaml"]
    outs = [run_process("solve", str(FIX / "specs"), str(DGX), "--placement", str(r), "-q") for r in records]
    assert outs[0].stdout == outs[1].stdout and outs[0].stdout
    assert records[0].read_text() == records[1].read_text()


@pytest.mark.parametrize("target", ["coscheduling", "kai", "volcano", "kueue", "grove", "lws", "dra", "dynamo"])
def test_keep_changes_only_the_spec_annotation_of_running_objects(tmp_path, target):
    cluster = DGX
    if target == "dra":  # claims select GPUs by uuid: the cluster as a ResourceSlice import records it
        from test_dra_ids import with_gpu_ids

        cluster = tmp_path / "dgx-ids.yaml"
        ids = with_gpu_ids(load_cluster(DGX)).model_dump(mode="json", by_alias=True, exclude_none=True)
        cluster.write_text(yaml.safe_dump(ids))
    first = run("solve", str(DISAGG), str(cluster), "-q", "-t", target)
    assert first.returncode == 0, first.stderr
    running = tmp_path / "running.yaml"
    running.write_text(first.stdout)
    second = run("solve", str(_two_replicas(tmp_path)), str(cluster), "--keep", str(running), "-q", "-t", target)
    assert second.returncode == 0, second.stderr
    before = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(first.stdout)}
    after = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(second.stdout)}
    assert len(after) > len(before)
    for key, doc in before.items():
        if doc == after[key]:
            continue
        # only the gang's record of the spec and the solver's verdict may differ
        strip = ("placer.dev/spec", "placer.dev/solver-status")
        a, b = json.loads(json.dumps(doc)), json.loads(json.dumps(after[key]))
        for d in (a, b):  # on the gang object, or (kueue) the first pod's controller and its template
            for meta in (d["metadata"], d.get("spec", {}).get("template", {}).get("metadata", {})):
                for k in strip:
                    meta.get("annotations", {}).pop(k, None)
        assert a == b, key


def _two_replicas(tmp_path: Path) -> Path:
    path = tmp_path / "two.yaml"
    path.write_text(DISAGG.read_text().replace("replicas: 1", "replicas: 2"))
    return path


@pytest.mark.parametrize("min_replicas,moves,replicas", [(1, 0, 1), (2, 1, 2)])
def test_plan_moves_first_then_pending_replicas(tmp_path, min_replicas, moves, replicas):
    # "small" (TP4) runs on n1; n2 is whole; n3 has 4 free. Two TP8 replicas need n1 and n2 (one move);
    # one needs no move. Fewest moves come first, so with minReplicas 1 the plan moves nothing.
    cluster = _cluster(tmp_path, {"n3": [0, 1, 2, 3]})
    record = _small_running_on_n1(tmp_path, cluster)
    doc = _spec_doc("pair", 8, 1, replicas=2)
    doc["minReplicas"] = min_replicas
    pending = _write_specs(tmp_path, [doc], "pair.yaml")
    result = plan(load_running([record]), load_specs(pending), build_topology(load_cluster(cluster)), OPTS)
    assert len(result.moves) == moves
    assert len(result.placements[1][1].replicas) == replicas


def _small_running_on_n1(tmp_path: Path, cluster: Path) -> Path:
    """A record of "small" (one TP4 instance) running on GPUs 0-3 of n1, wherever placer would put it."""
    placed = run_fleet([_write_specs(tmp_path, [_spec_doc("small", 4, 1)], "s.yaml")], cluster, OPTS).fleet.placed[0]
    rep = placed.placement.replicas[0]
    inst = replace(rep.instances[0], pods=(Pod("n1", (0, 1, 2, 3)),), domain="node/n1")
    on_n1 = replace(placed.placement, replicas=(replace(rep, instances=(inst,)),))
    record = tmp_path / "small.yaml"
    record.write_text(records_text([(placed.deployment.spec, on_n1)]))
    return record


def test_keep_refuses_two_running_instances_on_one_gpu(tmp_path):
    cluster = _cluster(tmp_path, {})
    first = run_fleet([_write_specs(tmp_path, [_spec_doc("a", 4, 2)], "a.yaml")], cluster, OPTS)
    placed = first.fleet.placed[0]
    rep = placed.placement.replicas[0]
    twin = replace(rep.instances[1], pods=rep.instances[0].pods)  # instance 1 claims instance 0's GPUs
    forged = replace(placed.placement, replicas=(replace(rep, instances=(rep.instances[0], twin)),))
    record = tmp_path / "forged.yaml"
    record.write_text(records_text([(placed.deployment.spec, forged)]))
    r = run(
        "solve", str(_write_specs(tmp_path, [_spec_doc("a", 4, 2)], "a2.yaml")), str(cluster), "--keep", str(record)
    )
    assert r.returncode == 2 and "held by both" in r.stderr and "forged.yaml" in r.stderr


@pytest.mark.parametrize("runner", ["solve", "fleet"])
def test_runs_in_one_process_leave_no_garbage_behind(tmp_path, runner):
    """What a run froze is unfrozen into the oldest generation, where no collection would come for it soon,
    and the next run would freeze it again: without one pass at the end, every run's garbage stayed."""
    import gc

    from placer.pipeline import run_solve

    cluster = _cluster(tmp_path, {})
    specs = _write_specs(tmp_path, [_spec_doc("a", 4, 1)])

    def go():
        if runner == "solve":
            run_solve(specs, cluster, OPTS)
        else:
            run_fleet([specs], cluster, OPTS)

    go()
    one = gc.collect()  # what one run leaves to the caller
    for _ in range(5):
        go()
    assert gc.collect() <= one + 20  # five more runs, and no more garbage than one run's


@pytest.mark.parametrize("runner", ["solve", "fleet"])
def test_a_run_gives_back_what_it_set_aside_from_the_collector(tmp_path, runner, monkeypatch):
    """run_solve and run_fleet pause the cycle collector while the inputs are built and freeze them
    (gc.freeze) so no collection walks them again; the run itself collects as usual (progress is reported
    after the inputs are built). Afterwards nothing stays frozen and the collector is as the caller left it,
    after an input error too, and a process that froze objects itself keeps exactly those frozen."""
    import gc

    from placer.pipeline import run_solve
    from placer.topology import build

    building: list[bool] = []
    real = build.build_topology
    monkeypatch.setattr(build, "build_topology", lambda c: (building.append(gc.isenabled()), real(c))[1])

    def go(specs, progress=lambda _m: None):
        if runner == "solve":
            return run_solve(specs, cluster, OPTS, progress=progress).placement.replicas
        return run_fleet([specs], cluster, OPTS, progress=progress).fleet.placed

    cluster = _cluster(tmp_path, {})
    specs = _write_specs(tmp_path, [_spec_doc("a", 4, 1)])
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    seen: list[tuple[int, bool]] = []
    assert go(specs, lambda _m: seen.append((gc.get_freeze_count(), gc.isenabled())))
    assert seen and min(f for f, _ in seen) > 0  # frozen while it ran
    assert all(on for _, on in seen)  # and collecting the run's own garbage
    assert building == [False]  # but not while the cluster was built
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    bad = _write_specs(tmp_path, [{**_spec_doc("b", 4, 1), "replicas": 0}], "bad.yaml")
    with pytest.raises(InputError):
        go(bad)
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    gc.disable()  # a caller that collects by hand is left so
    try:
        go(specs)
        assert not gc.isenabled()
    finally:
        gc.enable()
    gc.freeze()
    try:
        mine = gc.get_freeze_count()
        go(specs)
        # Not unfrozen (0) and nothing more frozen; a frozen object that the run lets go of (a cache entry
        # evicted, which depends on what ran before in this process) is freed as usual, so fewer is fine.
        assert 0 < gc.get_freeze_count() <= mine
    finally:
        gc.unfreeze()


def test_plan_with_a_running_router_places_every_pending_replica_and_proves_it():
    """A running deployment with a router made the hint of plan's later stages name a variable twice; CP-SAT
    refused the model, the refusal read as "nothing found", and plan kept its first stage's answer: one
    pending replica of three, 'feasible'. Now every replica that fits is placed (as solve --keep does)."""
    data = Path(__file__).parent / "data" / "plan_router"
    topo = build_topology(load_cluster(data / "cluster.yaml"))
    result = plan(load_running([data / "running.yaml"]), load_specs(data / "pending.yaml"), topo, OPTS)
    assert result.moves == [] and result.status == "optimal"
    assert len(result.placements[-1][1].replicas) == 3


def test_a_model_cp_sat_refuses_is_an_error_not_nothing_found():
    """The plan defect above hid behind MODEL_INVALID read as 'no solution': every solve now raises on it."""
    from ortools.sat.python import cp_model

    from placer.solver.options import Budget, configured_solver, run_solver

    model = cp_model.CpModel()
    x = model.new_bool_var("x")
    model.add_hint(x, 1)
    model.add_hint(x, 0)  # the same variable twice: CP-SAT calls the model invalid
    budget = Budget.of(OPTS)
    with pytest.raises(RuntimeError, match="CP-SAT refused the model placer built: .*duplicate"):
        run_solver(configured_solver(OPTS, budget), model, budget)


def test_plan_keeps_a_moved_instance_in_its_preferred_level_before_it_saves_cost():
    """The running TP16 (preferred: rack) must move for an H200-only TP16. h5 + h6 are cheaper but in two
    racks; h3 + h4 share one. The plan's cost stage moved it to h5 + h6 (a preferred-level miss the move table
    did not show); misses now come before cost, as in solve."""
    data = Path(__file__).parent / "data" / "plan_preferred"
    topo = build_topology(load_cluster(data / "cluster.yaml"))
    result = plan(load_running([data / "running.yaml"]), load_specs(data / "pending.yaml"), topo, OPTS)
    (move,) = result.moves
    moved = result.placements[0][1].replicas[0].instances[0]
    assert sorted(p.node for p in moved.pods) == ["h3", "h4"] and result.status == "optimal"
    assert len(result.placements[-1][1].replicas) == 1


def test_keep_and_plan_name_the_cluster_a_record_was_placed_on(tmp_path):
    """Another cluster's record: "runs on node 'pcie-a', which the cluster file does not list" left the user
    to guess that the cluster file was the wrong one; the record says which cluster it was placed on."""
    record = tmp_path / "small.yaml"
    spec = FIX / "specs" / "aggregated-tp8.yaml"
    placed = run("solve", str(spec), str(FIX / "clusters" / "small-mixed.yaml"), "--placement", str(record), "-q")
    assert placed.returncode == 0, placed.stderr
    said = "was placed on cluster 'small-mixed', but the cluster file is 'dgx-h100-1024' (it lists no node"
    for args in (
        ("solve", str(spec), str(DGX), "--keep", str(record)),
        ("plan", "--from", str(record), str(DGX), "--cut", "0.05"),
    ):
        r = run(*args)
        assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_batch_claims_no_bound_once_the_checker_reprices_a_placement(monkeypatch):
    """The batch's lower bound is in the solver's figures; where the checker prices some placement
    differently (a domain's links unlike what the solver assumed), that bound bounds nothing the batch
    reports, so it is dropped with a note, as a single solve's gate drops its own."""
    import placer.check.gate as gate

    specs = [FIX / "specs" / "aggregated-tp8.yaml", FIX / "specs" / "llama-70b-disagg.yaml"]
    honest = run_fleet(specs, DGX, OPTS, keep_paths=[])
    assert honest.fleet.bound is not None and honest.fleet.bound <= honest.fleet.cost
    real = gate.check

    def repriced(spec, topo, placement):
        report = real(spec, topo, placement)
        report.queue_units += 1 if spec.metadata.name == "llama-70b" else 0
        return report

    monkeypatch.setattr(gate, "check", repriced)
    res = run_fleet(specs, DGX, OPTS, keep_paths=[])
    assert res.fleet.cost == honest.fleet.cost + 1
    assert res.fleet.bound is None and res.fleet.gap is None
    assert any("no lower bound claimed" in n for n in res.notes)
