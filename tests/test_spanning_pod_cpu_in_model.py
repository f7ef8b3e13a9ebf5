"""Issue 18: the CPU and memory of a spanning instance's pods are in the model, so a CPU-tight node makes
placer choose another node instead of stopping with exit 3 (the checker refusing the decoded placement).

Before the fix the model counted only the GPUs a spanning (pooled) instance draws from each node; the pods
those GPUs became were checked after solving, by the decoder and the checker.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from placer.check.verify import check
from placer.model.cluster import ClusterSpec
from placer.model.spec import ServingTopology
from placer.solver.problem import build_problem
from placer.solver.solve import SolveOptions, solve
from placer.topology.build import build_topology


def _cluster(nodes: list[dict]) -> dict:
    return {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "tight"},
        "nodes": nodes,
        "fabric": {"network": {"railsPerNode": 8}},
    }


def _node(name: str, cpu: str, busy: list[int], queue: int, memory: str = "64Gi") -> dict:
    return {
        "name": name,
        "rack": "r0",
        "gpus": {"count": 4, "product": "H100", "memoryGiB": 80},
        "cpu": cpu,
        "memory": memory,
        "busy": busy,
        "metrics": {"queueDepth": queue},
    }


def _spec(tp: int, instances: int, cpu: str = "2", memory: str = "1Gi") -> dict:
    return {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "ServingTopology",
        "metadata": {"name": "span"},
        "model": {"layers": 4, "hiddenSize": 1024, "kvHeads": 2, "headDim": 64},
        "pools": {
            "aggregated": {
                "instances": instances,
                "tensorParallel": tp,
                "placement": {"required": "rack"},
                "template": {
                    "image": "example.com/engine:1",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                },
            }
        },
    }


# TP4 on three nodes with 2 free GPUs each: every instance spans two nodes. n0 has no queue (the cheapest
# GPUs: queue weight 100 x depth, in units of 0.01, is 0 per GPU against 10,000 on n1 and 20,000 on n2),
# but 1 CPU free and each pod asks 2: no pod fits there. The only valid placement takes n1 + n2
# (2 x 10,000 + 2 x 20,000 = 60,000 queue units).
SPANNING = _cluster(
    [
        _node("n0", "1", [0, 1], 0),
        _node("n1", "16", [0, 1], 1),
        _node("n2", "16", [0, 1], 2),
    ]
)


def _solve(spec_d: dict, cluster_d: dict):
    spec = ServingTopology.model_validate(spec_d)
    topo = build_topology(ClusterSpec.model_validate(cluster_d))
    placement = solve(build_problem(spec, topo), SolveOptions(time_limit_s=10))
    return spec, topo, placement


def test_spanning_instance_avoids_a_cpu_tight_cheapest_node():
    spec, topo, placement = _solve(_spec(4, 1), SPANNING)
    report = check(spec, topo, placement)
    assert report.ok, report.violations
    (inst,) = placement.replicas[0].instances
    assert sorted(p.node for p in inst.pods) == ["n1", "n2"]
    assert placement.stats.status == "optimal"
    assert placement.stats.objective == report.total_units
    assert report.queue_units == 60_000


def test_spanning_pods_per_node_are_counted_not_just_gpus():
    # n0 has 4 free GPUs and CPU for one 2-CPU pod (3 free); n1 has 4 free GPUs and plenty of CPU but a
    # queue. Two TP1 instances cost 0 all-reduce anywhere, so the cheapest GPUs are n0's: drawing both from
    # n0's pool would make two pods there (4 CPU > 3). The best valid placement is one on n0, one on n1.
    cluster = _cluster([_node("n0", "3", [], 0), _node("n1", "16", [], 1)])
    spec, topo, placement = _solve(_spec(1, 2), cluster)
    report = check(spec, topo, placement)
    assert report.ok, report.violations
    assert sorted(p.node for i in placement.replicas[0].instances for p in i.pods) == ["n0", "n1"]


def test_spanning_pods_memory_is_counted():
    # As the first test, with n0 short of memory instead of CPU (1Gi free, pods ask 2Gi).
    cluster = _cluster(
        [
            _node("n0", "16", [0, 1], 0, memory="1Gi"),
            _node("n1", "16", [0, 1], 1),
            _node("n2", "16", [0, 1], 2),
        ]
    )
    spec, topo, placement = _solve(_spec(4, 1, cpu="1", memory="2Gi"), cluster)
    report = check(spec, topo, placement)
    assert report.ok, report.violations
    assert sorted(p.node for p in placement.replicas[0].instances[0].pods) == ["n1", "n2"]


def test_spanning_pieces_must_add_up_per_instance():
    # Two TP3 instances (6 GPUs). n0, n1, n2 have 2 free GPUs each, no queue, and CPU for one 2-CPU pod
    # (3 free); n3 has 4 free GPUs, a queue (10,000 units per GPU) and room. The 6 cheap GPUs would be 2+2+2,
    # which no two instances of 3 can split without two pods on one node. So the optimum takes 5 cheap
    # GPUs and 1 of n3 (2+1 and 2+1 over distinct nodes): 10,000 queue units, one pod per tight node.
    cluster = _cluster(
        [
            _node("n0", "3", [0, 1], 0),
            _node("n1", "3", [0, 1], 0),
            _node("n2", "3", [0, 1], 0),
            _node("n3", "16", [], 1),
        ]
    )
    spec, topo, placement = _solve(_spec(3, 2), cluster)
    report = check(spec, topo, placement)
    assert report.ok, report.violations
    pods = [(p.node, len(p.gpus)) for i in placement.replicas[0].instances for p in i.pods]
    assert sum(g for n, g in pods if n == "n3") == 1
    assert sorted(n for n, _g in pods if n != "n3") == ["n0", "n1", "n2"]
    assert placement.stats.status == "optimal" and report.queue_units == 10_000


def test_cli_exits_0_not_3_on_a_cpu_tight_node(tmp_path: Path):
    spec_file, cluster_file = tmp_path / "spec.yaml", tmp_path / "cluster.yaml"
    spec_file.write_text(yaml.safe_dump(_spec(4, 1)))
    cluster_file.write_text(yaml.safe_dump(SPANNING))
    out = subprocess.run(
        [sys.executable, "-m", "placer", "solve", str(spec_file), str(cluster_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "n0" not in [
        d["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ][0]["matchExpressions"][0]["values"][0]
        for d in yaml.safe_load_all(out.stdout)
        if d and d["kind"] == "StatefulSet"
    ]


def test_joint_models_count_every_peers_pods_on_tight_nodes():
    # One model for two deployments (placer plan, a batch's repair): n0 has 2 free GPUs and 3 CPUs. For
    # deployment a alone (1-CPU pods) it is roomy (2 pods x 1 = 2 <= 3); for b (3-CPU pods) it is tight. In
    # the joint model one pod of each (1 + 3 = 4 > 3) must be seen, so n0 is tight for both. All 8 free GPUs
    # are needed (two TP4 instances), so n0's two GPUs go to one instance (a pod of 1 or 3 CPUs), never split.
    from placer.solver.cpsat.model import PlacementModel
    from placer.solver.plan import plan

    cluster = _cluster([_node(f"n{i}", "3" if i == 0 else "64", [0, 1], min(i, 1)) for i in range(4)])
    topo = build_topology(ClusterSpec.model_validate(cluster))
    a = ServingTopology.model_validate(_spec(4, 1, cpu="1") | {"metadata": {"name": "a"}})
    b = ServingTopology.model_validate(_spec(4, 1, cpu="3") | {"metadata": {"name": "b"}})
    problems = [build_problem(a, topo), build_problem(b, topo)]
    assert 0 not in PlacementModel(problems[0]).vars.span.tight
    assert 0 in PlacementModel(problems[1]).vars.span.tight
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    assert 0 in PlacementModel(problems[0], model=model, joint=True, peers=problems).vars.span.tight
    result = plan([], [(a, "a.yaml"), (b, "b.yaml")], topo, SolveOptions(time_limit_s=10))
    for spec, placement in result.placements:
        others = [p for s, p in result.placements if p is not placement]
        assert len(placement.replicas) == 1
        n0 = [p for i in placement.replicas[0].instances for p in i.pods if p.node == "n0"]
        assert len(n0) <= 1 and (not n0 or len(n0[0].gpus) == 2), (spec.metadata.name, n0, others)
