"""Rules the independent checker once let through (or refused wrongly), each on a placement placer produced
and then changed in exactly one way, so the test fails if the checker stops seeing that rule."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from cli_in_process import run

from placer.check.verify import check
from placer.emit.readback import load_running
from placer.model.errors import VerificationError
from placer.model.placement import Pod
from placer.pipeline import run_fleet, run_solve
from placer.solver.options import SolveOptions

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
SMALL = FIX / "clusters" / "small-mixed.yaml"
MODEL = {"layers": 32, "hiddenSize": 4096, "kvHeads": 8, "headDim": 128}


def _write(path: Path, doc: dict) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _spec(name: str, pools: dict, **extra) -> dict:
    return {"apiVersion": "placer.dev/v1alpha1", "kind": "ServingTopology", "metadata": {"name": name},
            "model": MODEL, "pools": pools, **extra}  # fmt: skip


def _with_pods(placement, replica: int, pods) -> object:
    """The placement with the first instance of ``replica`` on ``pods`` instead."""
    reps = list(placement.replicas)
    first, *rest = reps[replica].instances
    reps[replica] = replace(reps[replica], instances=(replace(first, pods=tuple(pods)), *rest))
    return replace(placement, replicas=tuple(reps))


@pytest.fixture(scope="module")
def agg():
    return run_solve(FIX / "specs" / "aggregated-tp8.yaml", SMALL, SolveOptions())


def test_a_router_on_an_unschedulable_node_is_refused(tmp_path):
    doc = yaml.safe_load(SMALL.read_text())
    doc["nodes"].append({"name": "cpu-b", "rack": "r2", "leaf": "su1", "cpu": "32", "memory": "128Gi",
                         "schedulable": False})  # fmt: skip
    res = run_solve(FIX / "specs" / "aggregated-tp8.yaml", _write(tmp_path / "c.yaml", doc), SolveOptions())
    assert all(rep.router != "cpu-b" for rep in res.placement.replicas)
    reps = list(res.placement.replicas)
    reps[-1] = replace(reps[-1], router="cpu-b")
    report = check(res.spec, res.topology, replace(res.placement, replicas=tuple(reps)))
    assert report.violations == [f"replica {reps[-1].index}: router on cpu-b, which is unschedulable"]


def test_a_router_the_spec_does_not_ask_for_is_refused(agg):
    spec = agg.spec.model_copy(update={"router": None})
    assert check(spec, agg.topology, agg.placement).violations == [
        f"replica {r.index} has a router on {r.router}; the spec asks for none" for r in agg.placement.replicas
    ]


def test_a_pod_without_a_gpu_is_refused(agg):
    inst = agg.placement.replicas[0].instances[0]
    bad = _with_pods(agg.placement, 0, [*inst.pods, Pod("cpu-a", ())])
    assert "replica 0 aggregated-0: a pod with no GPU" in check(agg.spec, agg.topology, bad).violations


def test_pipeline_stages_without_node_count_share_one_node(tmp_path):
    """A custom engine may spread TP freely, but PP stages are cut at pods: without nodeCount a PP instance
    is one node (DESIGN's rule). The solver split one over two nodes, and the checker let it through."""
    doc = yaml.safe_load(SMALL.read_text())
    next(n for n in doc["nodes"] if n["name"] == "dgx-b")["busy"] = [0, 1, 2, 3]
    cluster = _write(tmp_path / "frag.yaml", doc)
    pool = {"instances": 1, "tensorParallel": 4, "pipelineParallel": 2, "gpu": {"product": "NVIDIA-H100-80GB-HBM3"},
            "template": {"image": "example.com/engine:1"}}  # fmt: skip
    spec = _write(tmp_path / "pp.yaml", _spec("pp", {"aggregated": pool}))
    out = run("solve", spec, cluster)
    assert out.returncode == 1, out.stderr
    assert "its 2 pipeline stages share one node without nodeCount" in out.stderr
    res = run_solve(spec, SMALL, SolveOptions())  # dgx-b whole: one node holds it
    assert [len(i.pods) for r in res.placement.replicas for i in r.instances] == [1]
    split = _with_pods(res.placement, 0, [Pod("dgx-a", (0, 1, 3, 4, 6, 7)), Pod("dgx-b", (4, 5))])
    assert "replica 0 aggregated-0: 2 pipeline stages without nodeCount must share one node" in (
        check(res.spec, res.topology, split).violations
    )


@pytest.mark.parametrize("level", ["node", "socket"])
def test_max_level_is_where_the_instances_are_not_the_route_their_bytes_take(tmp_path, level):
    """On a two-socket PCIe node the fastest KV route leaves through the NIC rails; the checker read that
    route's level as the instances' distance and refused every placement under maxLevel node (exit 3)."""
    pool = {"instances": 1, "tensorParallel": 2, "gpu": {"product": "NVIDIA-A100-PCIE-40GB"},
            "placement": {"required": "socket"}, "template": {"image": "example.com/engine:1"}}  # fmt: skip
    transfer = {"from": "prefill", "to": "decode", "maxLevel": level}
    doc = _spec("pcie-kv", {"prefill": pool, "decode": copy.deepcopy(pool)}, transfer=transfer)
    out = run("solve", _write(tmp_path / "s.yaml", doc), SMALL, "--placement", tmp_path / "p.json")
    assert out.returncode == 0, out.stderr
    res = run_solve(tmp_path / "s.yaml", SMALL, SolveOptions())
    (prefill,), (decode,) = (
        [i for i in res.placement.replicas[0].instances if i.pool == p] for p in ("prefill", "decode")
    )
    assert prefill.pods[0].node == decode.pods[0].node
    # Moved to another node, the pair is apart across a rack (or more): refused.
    other = "pcie-b" if prefill.pods[0].node == "pcie-a" else "pcie-a"
    reps = list(res.placement.replicas)
    moved = tuple(replace(i, pods=(Pod(other, (0, 1)),)) if i.pool == "decode" else i for i in reps[0].instances)
    far = replace(res.placement, replicas=(replace(reps[0], instances=moved),))
    assert any(f"limit is {level}" in v for v in check(res.spec, res.topology, far).violations)


def test_a_kept_instance_that_moved_is_refused(tmp_path):
    """--keep's promise, re-checked from what runs: the batch gate did not know what was kept."""
    from placer.check.gate import verify_kept

    doc = yaml.safe_load((FIX / "specs" / "aggregated-tp8.yaml").read_text())
    doc["replicas"] = 1
    doc.pop("spread", None)
    record = tmp_path / "running.json"
    out = run("solve", _write(tmp_path / "one.yaml", doc), SMALL, "--placement", record, "-q")
    assert out.returncode == 0, out.stderr
    doc["replicas"] = 2
    res = run_fleet([_write(tmp_path / "two.yaml", doc)], SMALL, SolveOptions(), keep_paths=[record])
    placed = res.fleet.placed[0]
    running = load_running([record])
    verify_kept(running, [(placed.deployment.spec, placed.placement)], res.topology)  # kept where it runs
    r0, r1 = placed.placement.replicas
    swapped = replace(
        placed.placement,
        replicas=(
            replace(r0, instances=r1.instances, router=r1.router),
            replace(r1, instances=r0.instances, router=r0.router),
        ),
    )
    with pytest.raises(VerificationError, match="replica 0 aggregated-0 runs on"):
        verify_kept(running, [(placed.deployment.spec, swapped)], res.topology)


def test_a_kept_instance_whose_gpus_are_listed_in_another_order_has_not_moved(tmp_path):
    """The record lists a pod's GPUs as it likes; the solve writes them sorted: the same pod."""
    record = tmp_path / "running.yaml"
    assert run("solve", FIX / "specs" / "aggregated-tp8.yaml", SMALL, "--placement", record, "-q").returncode == 0
    doc = yaml.safe_load(record.read_text())
    doc["replicas"][0]["instances"][0]["pods"][0]["gpus"].reverse()
    record.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = run("solve", FIX / "specs" / "aggregated-tp8.yaml", SMALL, "--keep", record)
    assert out.returncode == 0, out.stderr


def test_a_kept_router_on_a_node_cordoned_since_moves(tmp_path):
    """A router holds no GPU: on a node cordoned since it was placed, it is placed again (said), not pinned
    there (which the checker refuses) and not a reason to leave the deployment out."""
    record = tmp_path / "running.yaml"
    assert run("solve", FIX / "specs" / "aggregated-tp8.yaml", SMALL, "--placement", record, "-q").returncode == 0
    routers = [r["router"] for r in yaml.safe_load(record.read_text())["replicas"]]
    doc = yaml.safe_load(SMALL.read_text())
    next(n for n in doc["nodes"] if n["name"] == routers[1])["schedulable"] = False
    out = run("solve", FIX / "specs" / "aggregated-tp8.yaml", _write(tmp_path / "c.yaml", doc), "--keep", record,
              "--placement", tmp_path / "after.yaml")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"router of replica 1 ({routers[1]} is unschedulable)" in out.stderr
    after = [r["router"] for r in yaml.safe_load((tmp_path / "after.yaml").read_text())["replicas"]]
    assert after[0] == routers[0] and after[1] != routers[1]


def test_a_cost_the_checker_reprices_claims_no_bound(tmp_path):
    """TP4 x PP2 on a two-socket PCIe node: the solver prices each stage's ring across the sockets, the
    checker each stage on its own socket (cheaper). The record said "bound 3947035" beside an objective of
    2326171, a lower bound above the cost; now it claims neither optimality nor a bound there."""
    pool = {"instances": 1, "tensorParallel": 4, "pipelineParallel": 2, "gpu": {"product": "NVIDIA-A100-PCIE-40GB"},
            "placement": {"required": "node"}, "template": {"image": "example.com/engine:1"}}  # fmt: skip
    spec = _write(tmp_path / "pp.yaml", _spec("pp-pcie", {"aggregated": pool}))
    res = run_solve(spec, SMALL, SolveOptions())
    st = res.placement.stats
    assert st.objective == check(res.spec, res.topology, res.placement).total_units
    assert st.status == "feasible" and st.bound is None and st.gap is None
    assert any("optimality and the bound not claimed" in n for n in st.notes)


def _moved(placement, replica: int, **changes):
    reps = list(placement.replicas)
    reps[replica] = replace(reps[replica], **changes)
    return replace(placement, replicas=tuple(reps))


def _mutations(agg) -> dict[str, tuple[object, object, str]]:
    """One change each to the placement placer produced (or to its spec), and the sentence it must draw."""
    spec, pl = agg.spec, agg.placement
    first = pl.replicas[0].instances[0]
    (pod,) = first.pods
    g = list(pod.gpus)
    two_nodes = spec.pools["aggregated"].model_copy(update={"node_count": 2, "gpus_per_node": 4})
    return {
        "one GPU for two instances": (
            spec,
            _with_pods(pl, 1, first.pods),
            f"replica 1 aggregated-0: GPU {g[0]} on {pod.node} is also used by replica 0 aggregated-0",
        ),
        "too few GPUs": (spec, _with_pods(pl, 0, [Pod(pod.node, tuple(g[:4]))]), "has 4 GPUs, needs TP x PP = 8"),
        "two pods on one node": (
            spec,
            _with_pods(pl, 0, [Pod(pod.node, tuple(g[:4])), Pod(pod.node, tuple(g[4:]))]),
            "replica 0 aggregated-0: two pods on one node",
        ),
        "a GPU that does not exist": (
            spec,
            _with_pods(pl, 0, [Pod(pod.node, (*g[:7], 99))]),
            f"replica 0 aggregated-0: GPU 99 does not exist on {pod.node}",
        ),
        "not the spec's nodes x GPUs": (
            spec.model_copy(update={"pools": {"aggregated": two_nodes}}),
            pl,
            "replica 0 aggregated-0: needs 2 nodes x 4 GPUs",
        ),
        "a replica more than asked": (
            spec,
            replace(pl, replicas=(*pl.replicas, replace(pl.replicas[0], index=2))),
            "3 replicas placed; the spec asks for 2-2",
        ),
        "replica indices out of order": (
            spec,
            replace(pl, replicas=tuple(reversed(pl.replicas))),
            "replica indices are not 0..n-1",
        ),
        "a replica without its router": (spec, _moved(pl, 0, router=None), "replica 0 has no router"),
        "a router on a node the cluster lacks": (
            spec,
            _moved(pl, 0, router="nowhere"),
            "replica 0: router on unknown node 'nowhere'",
        ),
        "a pod on a node the cluster lacks": (
            spec,
            _with_pods(pl, 0, [Pod("nowhere", pod.gpus)]),
            "replica 0 aggregated-0: unknown node 'nowhere'",
        ),
    }


@pytest.mark.parametrize(
    "change",
    [
        "one GPU for two instances",
        "too few GPUs",
        "two pods on one node",
        "a GPU that does not exist",
        "not the spec's nodes x GPUs",
        "a replica more than asked",
        "replica indices out of order",
        "a replica without its router",
        "a router on a node the cluster lacks",
        "a pod on a node the cluster lacks",
    ],
)
def test_each_structural_rule_refuses_its_one_change(agg, change):
    """The checker's structural rules, each shown the one wrong placement it exists for (the solver and the
    brute force never produce these, so nothing else in the suite would notice a rule that stopped looking)."""
    assert check(agg.spec, agg.topology, agg.placement).violations == []
    spec, placement, sentence = _mutations(agg)[change]
    violations = check(spec, agg.topology, placement).violations
    assert any(sentence in v for v in violations), violations


def test_a_placement_the_checker_refuses_is_never_printed(tmp_path, monkeypatch):
    """Exit 3: a solver bug (here: the second replica put on the first one's GPUs) is caught by the gate
    before anything is printed or written, and the message names the broken rule."""
    import placer.solver.solve as solve_module

    real = solve_module.solve

    def double_booked(problem, *args, **kwargs):
        placement = real(problem, *args, **kwargs)
        return _with_pods(placement, 1, placement.replicas[0].instances[0].pods)

    monkeypatch.setattr(solve_module, "solve", double_booked)
    record = tmp_path / "placement.json"
    out = run("solve", FIX / "specs" / "aggregated-tp8.yaml", SMALL, "--placement", record)
    assert out.returncode == 3, out.stderr
    assert out.stdout == "" and not record.exists() and list(tmp_path.iterdir()) == []
    assert "independent checker rejected" in out.stderr and "is also used by" in out.stderr
    assert "Traceback" not in out.stderr
