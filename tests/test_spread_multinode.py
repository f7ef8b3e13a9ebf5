"""Issue 18, a known limit that ended in the wrong exit code: a spread level narrower than a multi-node
instance (``spread: node`` with ``nodeCount: 2``) was reported infeasible, although spread only has to keep
replicas apart and a placement exists.

Toy: four free 8-GPU H100 nodes in one rack; two replicas of one TP16 instance on two nodes each
(nodeCount 2 x gpusPerNode 8), spread over nodes. Replica 0 takes two nodes and replica 1 the other two:
2 x 2 = 4 nodes, each used by one replica, so the spread rule holds and both replicas fit."""

from __future__ import annotations

from pathlib import Path

import yaml

from placer.check.verify import check
from placer.model.cluster import ClusterSpec
from placer.model.spec import ServingTopology
from placer.pipeline import place
from placer.topology.build import build_topology

ROOT = Path(__file__).resolve().parent.parent

CLUSTER = {
    "apiVersion": "placer.dev/v1alpha1",
    "kind": "Cluster",
    "metadata": {"name": "four"},
    "nodeClasses": {
        "dgx-h100": {"gpus": {"count": 8, "product": "NVIDIA-H100-80GB-HBM3", "memoryGiB": 80}, "cpu": "224"}
    },
    "nodes": [{"name": f"dgx-{c}", "class": "dgx-h100", "rack": "r1", "leaf": "su1"} for c in "abcd"],
}


def test_spread_over_nodes_with_two_node_instances_is_placed() -> None:
    spec_data = yaml.safe_load((ROOT / "fixtures" / "specs" / "tp16-multinode.yaml").read_text())
    spec_data["replicas"] = 2
    spec_data["spread"] = {"level": "node"}
    spec = ServingTopology.model_validate(spec_data)
    topo = build_topology(ClusterSpec.model_validate(CLUSTER))
    placement = place(spec, topo)
    assert len(placement.replicas) == 2
    nodes = [{pod.node for inst in rep.instances for pod in inst.pods} for rep in placement.replicas]
    assert [len(n) for n in nodes] == [2, 2] and not nodes[0] & nodes[1]
    assert check(spec, topo, placement).violations == []
