"""A running (kept) spanning instance holds GPUs inside domains narrower than its own candidate; the laminar
supply rule must count them there, or the model promises those GPUs to a new spanning instance placed in
such a domain and the decoder cannot give them (found while checking the spread fix's kept instances).

Toy: rack r1 (node a with 4 free GPUs, node a2 full) and node b in the same leaf. Instance 0 (TP4) runs on
a:0,1 + b:0,1. Instance 1 prefers a rack: the model put it in r1 (4 free GPUs on paper), but two of them
are instance 0's, so the decoder stopped on its "supply constraints guarantee the draw" assertion. It must
go over the leaf instead (a:2,3 + b:2,3).
"""

from __future__ import annotations

from test_solver_properties import cluster_document

from placer.check.verify import check
from placer.model.cluster import ClusterSpec
from placer.model.placement import InstancePlacement, Pod
from placer.model.spec import ServingTopology
from placer.solver.problem import Kept, build_problem, with_kept
from placer.solver.solve import SolveOptions, solve
from placer.topology.build import build_topology


def _node(name: str, rack: str, busy: list[int]) -> dict:
    gpus = {"count": 4, "product": "H100", "memoryGiB": 80}
    return {"name": name, "rack": rack, "leaf": "su1", "gpus": gpus, "busy": busy, "cpu": "64", "memory": "512Gi"}


def test_a_kept_spanning_instance_keeps_its_gpus_in_the_rack_below_its_candidate() -> None:
    nodes = [_node("a", "r1", []), _node("a2", "r1", [0, 1, 2, 3]), _node("b", "r2", [])]
    topo = build_topology(ClusterSpec.model_validate(cluster_document("keep", nodes, 8)))
    pool = {
        "instances": 2,
        "tensorParallel": 4,
        "placement": {"required": "spine", "preferred": "rack"},
        "template": {"image": "example.com/engine:1", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
    }
    spec = ServingTopology.model_validate(
        {
            "apiVersion": "placer.dev/v1alpha1",
            "kind": "ServingTopology",
            "metadata": {"name": "keep"},
            "model": {"layers": 4, "hiddenSize": 1024, "kvHeads": 2, "headDim": 64},
            "pools": {"aggregated": pool},
        }
    )
    running = InstancePlacement("aggregated", 0, (Pod("a", (0, 1)), Pod("b", (0, 1))), "-")
    problem = with_kept(build_problem(spec, topo), Kept({(0, "aggregated", 0): running}, {}))
    placement = solve(problem, SolveOptions(time_limit_s=10))
    first, second = placement.replicas[0].instances
    assert first.pods == running.pods
    assert second.pods == (Pod("a", (2, 3)), Pod("b", (2, 3)))
    assert check(spec, topo, placement).violations == []
