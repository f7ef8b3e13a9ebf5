"""A network kind's own figures: ``fabric.network.kind: ethernet`` with no figures is priced as RoCE over
100 GbE, not as InfiniBand. Checked where a user sees it, in explain's link and all-reduce time for a TP16
instance that must span two nodes, and in the import summary (defaults still listed as defaults)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from placer.explain.explanation import explain_placement
from placer.model.cluster import NETWORK_DEFAULTS, ClusterSpec
from placer.model.load import load_cluster, load_spec
from placer.solver.problem import build_problem
from placer.solver.solve import SolveOptions, solve
from placer.topology.build import build_topology

ROOT = Path(__file__).resolve().parent.parent
TP16 = ROOT / "fixtures" / "specs" / "tp16-multinode.yaml"


def _cluster(network: dict, spine: dict | None = None) -> dict:
    """Two 8-GPU H100 nodes in two racks under one leaf: a TP16 instance must cross the network."""
    fabric: dict = {"network": network}
    if spine is not None:
        fabric["spine"] = spine
    return {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "two-nodes"},
        "fabric": fabric,
        "nodeClasses": {
            "dgx": {"gpus": {"count": 8, "product": "NVIDIA-H100-80GB-HBM3", "memoryGiB": 80}, "interconnect": "nvlink"}
        },
        "nodes": [
            {"name": "n1", "class": "dgx", "rack": "r1", "leaf": "su1"},
            {"name": "n2", "class": "dgx", "rack": "r2", "leaf": "su1"},
        ],
    }


def _link(network: dict, spine: dict | None = None):
    topo = build_topology(ClusterSpec.model_validate(_cluster(network, spine)))
    spec = load_spec(TP16)
    (inst,) = explain_placement(spec, topo, solve(build_problem(spec, topo), SolveOptions())).instances
    return inst


def test_ethernet_without_figures_is_priced_as_roce_not_infiniband():
    roce = _link({"kind": "ethernet"})
    ib = _link({"kind": "infiniband"})
    rail, latency, _ = NETWORK_DEFAULTS["ethernet"]
    stated = _link({"kind": "ethernet", "railGBps": rail, "latencyUs": latency})
    assert roce.link.kind == "roce" and ib.link.kind == "infiniband"
    # The defaults are exactly the figures a file could state, and they are not InfiniBand's.
    assert (roce.link.bandwidth_gbps, roce.link.latency_us) == (stated.link.bandwidth_gbps, stated.link.latency_us)
    assert roce.allreduce_us_per_pass == stated.allreduce_us_per_pass
    assert roce.link.bandwidth_gbps < ib.link.bandwidth_gbps and roce.link.latency_us > ib.link.latency_us
    assert roce.allreduce_us_per_pass > 4 * ib.allreduce_us_per_pass


def test_stated_ethernet_figures_win_over_the_defaults():
    measured = _link({"kind": "ethernet", "railGBps": 50, "latencyUs": 3})
    assert (measured.link.bandwidth_gbps, measured.link.latency_us) == (50, 3)


@pytest.mark.parametrize("kind", ["infiniband", "ethernet"])
def test_spine_latency_follows_the_kind_unless_stated(kind):
    fabric = ClusterSpec.model_validate(_cluster({"kind": kind})).fabric
    assert fabric.spine.latency_us == NETWORK_DEFAULTS[kind][2]
    assert fabric.spine.latency_us > fabric.network.latency_us  # the spine is one more switch hop
    stated = ClusterSpec.model_validate(_cluster({"kind": kind}, {"latencyUs": 7, "oversubscription": 2})).fabric
    assert (stated.spine.latency_us, stated.spine.oversubscription) == (7, 2)


def test_filled_defaults_stay_defaults_and_survive_a_round_trip(tmp_path):
    spec = ClusterSpec.model_validate(_cluster({"kind": "ethernet"}))
    assert spec.fabric.network.model_fields_set == {"kind"}  # import summaries list the figures as defaults
    dumped = spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(dumped))
    again = load_cluster(path).fabric
    assert (again.network, again.spine) == (spec.fabric.network, spec.fabric.spine)
