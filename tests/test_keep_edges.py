"""What runs, at its edges: running GPUs are nobody else's, pins charge the sockets they sit in, changed
shapes and unusable nodes are reported (exit 1 or 2, never an internal error), repairs and plans on such
states still answer. Each case was found by a review of the batch / --keep / plan change."""

from __future__ import annotations

from pathlib import Path

import yaml
from cli_in_process import run
from test_fleet import OPTS, _cluster, _spec_doc, _write_specs, leaf_cluster

from placer.emit.manifests import records_text
from placer.emit.readback import load_running
from placer.model.load import load_cluster, load_specs
from placer.model.spec import ServingTopology
from placer.pipeline import run_fleet
from placer.solver.plan import plan
from placer.topology.build import build_topology


def _record(tmp_path: Path, cluster: Path, doc: dict, name: str = "rec.yaml") -> Path:
    first = run_fleet([_write_specs(tmp_path, [doc], f"first-{name}")], cluster, OPTS)
    path = tmp_path / name
    path.write_text(records_text([(p.deployment.spec, p.placement) for p in first.fleet.placed]))
    return path


def _gpus(res, key: str) -> set[tuple[str, int]]:
    placed = next(p for p in res.fleet.placed if p.deployment.key == key)
    return {(pod.node, g) for r in placed.placement.replicas for i in r.instances for pod in i.pods for g in pod.gpus}


def test_a_running_deployments_gpus_are_not_given_to_a_higher_priority_one(tmp_path):
    for tp in (4, 8):
        cluster = _cluster(tmp_path, {})
        record = _record(tmp_path, cluster, _spec_doc("old", tp, 1), f"old{tp}.yaml")
        held = {
            (p.node, g) for r in load_running([record]) for i in r.instances.values() for p in i.pods for g in p.gpus
        }
        specs = _write_specs(tmp_path, [_spec_doc("old", tp, 1), _spec_doc("hi", tp, 1, priority=5)], f"b{tp}.yaml")
        res = run_fleet([specs], cluster, OPTS, keep_paths=[record])
        assert not res.fleet.unplaced
        assert _gpus(res, "default/old") == held
        assert not _gpus(res, "default/hi") & held


def test_scaling_one_of_two_deployments_on_a_shared_node_leaves_the_other_alone(tmp_path):
    # a runs on n1 GPUs 0-3, b on n1 GPUs 4-7; n2 and n3 are full. a asks for a second instance: nowhere.
    cluster = _cluster(tmp_path, {"n2": list(range(8)), "n3": list(range(8))})
    free = _cluster(tmp_path / "free" if (tmp_path / "free").mkdir() is None else tmp_path, {})
    records = []
    for name, gpus in (("a", [0, 1, 2, 3]), ("b", [4, 5, 6, 7])):
        rec = yaml.safe_load(_record(tmp_path, free, _spec_doc(name, 4, 1), f"{name}.yaml").read_text())
        rec["replicas"][0]["instances"][0]["pods"] = [{"node": "n1", "gpus": gpus}]
        rec["replicas"][0]["instances"][0]["domain"] = "node/n1"
        records.append(rec)
    running = tmp_path / "running.yaml"
    running.write_text(yaml.safe_dump_all(records))
    specs = _write_specs(tmp_path, [_spec_doc("a", 4, 2), _spec_doc("b", 4, 1)], "both.yaml")
    res = run_fleet([specs], cluster, OPTS, keep_paths=[running])
    assert _gpus(res, "default/b") == {("n1", g) for g in (4, 5, 6, 7)}
    [left] = res.fleet.unplaced
    assert left.deployment.key == "default/a"
    assert "stay where they are" in left.reasons[0] and "only 4 matching GPUs" in left.reasons[1]


def _socket_cluster(tmp_path: Path, name: str, busy: list[int]) -> Path:
    node = {"name": "p1", "class": "p", "leaf": "l1", **({"busy": busy} if busy else {})}
    doc = {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "s"},
        "nodeClasses": {
            "p": {
                "gpus": {"count": 8, "product": "A100", "memoryGiB": 40},
                "interconnect": "pcie",
                "sockets": 2,
                "cpu": "128",
                "memory": "1Ti",
            }
        },
        "nodes": [node],
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def _pool(tp: int, required: str, **extra) -> dict:
    return {
        "role": "aggregated",
        "instances": 1,
        "tensorParallel": tp,
        "placement": {"required": required},
        "template": {"image": "x:1", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        **extra,
    }


def _spec(tmp_path: Path, name: str, pools: dict) -> Path:
    doc = {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "ServingTopology",
        "metadata": {"name": "d"},
        "model": {"layers": 4, "hiddenSize": 1024, "kvHeads": 2, "headDim": 64},
        "pools": pools,
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_kept_instance_holds_the_sockets_its_gpus_are_in(tmp_path):
    # Placed at node level on GPUs 2-5 (0, 1, 7 busy then), it holds two GPUs of each socket: a new
    # socket-level TP4 does not fit beside it (only 0, 1, 6, 7 are left), and placer says so (exit 1).
    record = tmp_path / "r.yaml"
    first = run(
        "solve",
        _spec(tmp_path, "w1.yaml", {"a": _pool(4, "node")}),
        _socket_cluster(tmp_path, "d0.yaml", [0, 1, 7]),
        "-q",
        "--placement",
        record,
    )
    assert first.returncode == 0 and "2,3,4,5" in first.stdout
    r = run(
        "solve",
        _spec(tmp_path, "w2.yaml", {"a": _pool(4, "node"), "b": _pool(4, "socket")}),
        _socket_cluster(tmp_path, "d1.yaml", []),
        "--keep",
        record,
    )
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "not placed" in r.stderr


def test_a_multi_node_instance_whose_layout_changed_is_replaced_not_kept(tmp_path):
    cluster = tmp_path / "c.yaml"
    nodes = [
        {"name": f"n{i}", "leaf": "l1", "gpus": {"count": 8, "product": "H100", "memoryGiB": 80}} for i in range(4)
    ]
    cluster.write_text(
        yaml.safe_dump(
            {"apiVersion": "placer.dev/v1alpha1", "kind": "Cluster", "metadata": {"name": "t"}, "nodes": nodes}
        )
    )
    two_by_eight = _spec(tmp_path, "m1.yaml", {"a": _pool(16, "leaf", nodeCount=2, gpusPerNode=8)})
    four_by_four = _spec(tmp_path, "m2.yaml", {"a": _pool(16, "leaf", nodeCount=4, gpusPerNode=4)})
    record = tmp_path / "r.yaml"
    assert run("solve", two_by_eight, cluster, "-q", "--placement", record).returncode == 0
    r = run("solve", four_by_four, cluster, "--keep", record)
    assert r.returncode == 0, r.stderr
    assert "not kept (gone from the spec, its shape changed, or its node is unschedulable): replica 0 a-0" in r.stderr


def test_a_kept_spanning_instance_on_a_cordoned_node_is_reported(tmp_path):
    nodes = [
        {"name": n, "rack": rack, "leaf": "l1", "gpus": {"count": 8, "product": "H100", "memoryGiB": 80}}
        for n, rack in (("a", "r1"), ("d", "r2"), ("e", "r2"), ("f", "r2"))
    ]
    doc = {"apiVersion": "placer.dev/v1alpha1", "kind": "Cluster", "metadata": {"name": "t"}, "nodes": nodes}
    c0 = tmp_path / "c0.yaml"
    c0.write_text(yaml.safe_dump(doc))
    spec = _spec(tmp_path, "s.yaml", {"a": _pool(16, "rack")})
    record = tmp_path / "r.yaml"
    assert run("solve", spec, c0, "-q", "--placement", record).returncode == 0
    node = load_running([record])[0].instances[(0, "a", 0)].pods[-1].node
    for n in nodes:
        n["schedulable"] = n["name"] != node
    c1 = tmp_path / "c1.yaml"
    c1.write_text(yaml.safe_dump(doc))
    r = run("solve", spec, c1, "--keep", record)
    # rack r2 can still hold it, but not on the node it runs on
    assert r.returncode == 1 and "may no longer use" in r.stderr and "Traceback" not in r.stderr


def test_a_cordoned_node_makes_keep_report_and_plan_move(tmp_path):
    cluster = _cluster(tmp_path, {})
    record = _record(tmp_path, cluster, _spec_doc("old", 4, 1))
    node = load_running([record])[0].instances[(0, "aggregated", 0)].pods[0].node
    doc = yaml.safe_load(cluster.read_text())
    for n in doc["nodes"]:
        n["schedulable"] = n["name"] != node
    cluster.write_text(yaml.safe_dump(doc))
    # a batch with a new deployment still places the new one and says why old cannot be kept
    specs = _write_specs(tmp_path, [_spec_doc("old", 4, 1), _spec_doc("big", 8, 2)], "both.yaml")
    res = run_fleet([specs], cluster, OPTS, keep_paths=[record])
    assert [p.deployment.key for p in res.fleet.placed] == ["default/big"]
    assert "cannot be kept" in res.fleet.unplaced[0].reasons[0]
    # plan moves it off the cordoned node and notes what the checker says of the state as it runs
    result = plan(load_running([record]), [], build_topology(load_cluster(cluster)), OPTS, cut=0.0)
    assert [(m.deployment, m.source.split(":")[0]) for m in result.moves] == [("default/old", node)]
    assert any("busy" in n or "schedulable" in n for n in result.notes)


def test_a_repaired_deployment_gets_as_many_replicas_as_fit(tmp_path):
    # n1, n2 (4 free each) report cache hits, n3..n6 (2 free each) misses (an unknown hit rate would be
    # neutral, docs/DESIGN.md). "wide" (4 x TP2, placed first) alone takes n1 + n2, so "half" (2 replicas of
    # one TP4) has no node with 4 free; no node is wholly free, so no scarcity price steers wide: the repair
    # re-arranges the two and gives half both replicas.
    rows = [("n1", [0, 1, 2, 3], 0.9), ("n2", [0, 1, 2, 3], 0.9)]
    rows += [(f"n{i}", [0, 1, 2, 3, 4, 5], 0.0) for i in range(3, 7)]
    cluster = leaf_cluster(tmp_path, rows, "rep.yaml")
    half = _spec_doc("half", 4, 1, replicas=2)
    half["minReplicas"] = 1
    specs = _write_specs(tmp_path, [_spec_doc("wide", 2, 4), half], "specs.yaml")
    res = run_fleet([specs], cluster, OPTS)
    assert any("re-arranging" in n for n in res.fleet.notes)
    by_key = {p.deployment.key: p.placement for p in res.fleet.placed}
    assert len(by_key["default/half"].replicas) == 2


def test_plan_refuses_a_pending_spec_that_already_runs(tmp_path):
    cluster = _cluster(tmp_path, {})
    record = _record(tmp_path, cluster, _spec_doc("small", 4, 1))
    again = _write_specs(tmp_path, [_spec_doc("small", 4, 2)], "again.yaml")
    r = run("plan", "--from", record, again, cluster)
    assert r.returncode == 2 and "already runs" in r.stderr and "--keep" in r.stderr
    assert load_specs(again)  # the file itself is fine


ROOT = Path(__file__).resolve().parent.parent


def test_a_grove_rescale_that_changes_a_podcliquesets_cliques_is_flagged_before_apply(tmp_path):
    """Grove's update webhook refuses a PodCliqueSet whose cliques, scaling groups or topology constraints
    change. A second TP16 instance adds a scaling group and two cliques to the running replica's
    PodCliqueSet: placer says so, with what to do, before kubectl finds out. The same re-solve of an
    unchanged spec, or under a target with objects per instance, says nothing of the kind."""
    spec = ROOT / "fixtures" / "specs" / "tp16-multinode.yaml"
    cluster = ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml"
    record = tmp_path / "running.json"
    assert run("solve", spec, cluster, "-t", "grove", "--placement", record, "-q").returncode == 0
    doc = yaml.safe_load(spec.read_text())
    doc["pools"]["aggregated"]["instances"] = 2
    two = tmp_path / "two.yaml"
    two.write_text(yaml.safe_dump(doc))
    out = run("solve", two, cluster, "--keep", record, "-t", "grove")
    assert out.returncode == 0, out.stderr
    said = " ".join(out.stderr.split())
    assert "PodCliqueSet llama-405b-r0 changes its cliques, scaling groups," in said
    assert "kubectl delete podcliqueset llama-405b-r0" in said
    same = run("solve", spec, cluster, "--keep", record, "-t", "grove")
    assert same.returncode == 0 and "does not allow" not in same.stderr
    other = tmp_path / "other.json"
    assert run("solve", spec, cluster, "--placement", other, "-q").returncode == 0
    per_pod = run("solve", two, cluster, "--keep", other)
    assert per_pod.returncode == 0 and "does not allow" not in per_pod.stderr


def test_grove_refuses_exactly_the_fields_its_webhook_holds_immutable():
    """Read from Grove's podcliqueset.go: a clique's replicas and pod template may change on an update; its
    topology constraint, minAvailable, startsAfter and the startup type may not."""
    import copy

    from fixtures_solved import solved_fixture

    from placer.emit.manifests import build_manifests
    from placer.emit.targets.grove import refused_updates

    spec, topo, placement, report = solved_fixture("llama-70b-disagg")
    before = build_manifests(spec, topo, placement, report, target="grove")
    (pcs,) = [d for d in before if d["kind"] == "PodCliqueSet"]

    def changed(edit) -> list[str]:
        doc = copy.deepcopy(pcs)
        edit(doc["spec"]["template"])
        return refused_updates(before, [doc])

    def grow(t):
        t["cliques"][-1]["spec"]["replicas"] += 1
        t["cliques"][-1]["spec"]["podSpec"]["containers"][0]["image"] = "example.com/other:2"

    assert changed(grow) == []
    assert "topology constraint" in changed(lambda t: t["topologyConstraint"]["pack"].update(required="zone"))[0]
    assert "clique settings" in changed(lambda t: t["cliques"][-1]["spec"].update(minAvailable=2))[0]
    assert "startup order" in changed(lambda t: t.update(cliqueStartupType="CliqueStartupTypeExplicit"))[0]
    assert "cliques" in changed(lambda t: t["cliques"].pop())[0]


def test_an_unequal_split_is_not_kept_for_an_engine_preset():
    """A custom engine may run TP8 as 6 + 2 GPUs on two nodes; an engine preset splits evenly (vLLM's
    --nnodes), and the checker refuses anything else. A spec that switched such a deployment to a preset
    pinned the running 6 + 2 instance anyway, and the checker then refused placer's own answer (exit 3):
    it is now dropped from what is kept (re-placed), and said so."""
    from placer.model.placement import InstancePlacement, Pod
    from placer.model.running import Running
    from placer.solver.keep import plan_keep

    topo = build_topology(load_cluster(ROOT / "fixtures" / "clusters" / "small-mixed.yaml"))
    doc = yaml.safe_load((ROOT / "fixtures" / "specs" / "aggregated-tp8.yaml").read_text())
    doc["replicas"] = 1
    doc.pop("spread", None)
    doc["pools"]["aggregated"]["placement"] = {"required": "rack"}
    split = InstancePlacement("aggregated", 0, (Pod("dgx-a", (0, 1, 3, 4, 6, 7)), Pod("dgx-b", (0, 1))), "rack/r1")
    for engine, kept in (("custom", True), ("vllm", False)):
        doc["pools"]["aggregated"]["template"]["engine"] = engine
        spec = ServingTopology.model_validate(doc)
        run = Running("default", "llama-70b-agg", "test", {(0, "aggregated", 0): split}, spec=spec)
        plan = plan_keep([run], [spec], topo)
        assert (list(plan.kept["default/llama-70b-agg"].instances) == [(0, "aggregated", 0)]) == kept
        assert ("default/llama-70b-agg" in plan.dropped) != kept
