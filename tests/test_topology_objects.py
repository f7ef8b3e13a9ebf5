"""``--topology-objects``: the Kueue Topology + ResourceFlavor and the Volcano HyperNodes a cluster needs for
the constraints placer prints, accepted by the projects' published CRDs (tests/data/crds/upstream), and
describing the same tree the constraints assume: checked here from the printed objects alone."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml
from fixtures_solved import ROOT, solved_fixture
from k8s_acceptance import assert_accepted
from test_acceptance import _gfd_node
from test_cli import AGG, DISAGG, SMALL, run

from placer.emit.manifests import build_manifests, topology_manifests
from placer.importers.document import dump_cluster
from placer.importers.run import ImportOptions, import_cluster
from placer.model.errors import InputError
from placer.model.load import load_cluster, load_spec
from placer.pipeline import verify_placement
from placer.solver.problem import build_problem
from placer.solver.solve import SolveOptions, solve
from placer.topology.build import build_topology

CASES = [
    ("llama-70b-disagg", "dgx-h100-1024"),
    ("llama-70b-disagg", "gb200-nvl72-1008"),
    ("aggregated-tp8", "small-mixed"),
]


@pytest.fixture(scope="module", params=CASES, ids=["/".join(c) for c in CASES])
def solved(request):
    return solved_fixture(*request.param)


def _nodes_under(hypernodes: list[dict]) -> dict[str, set[str]]:
    """HyperNode name -> the node names below it, following members down the printed objects only."""
    by_name = {h["metadata"]["name"]: h for h in hypernodes}

    def below(name: str) -> set[str]:
        out: set[str] = set()
        for m in by_name[name]["spec"]["members"]:
            target = m["selector"]["exactMatch"]["name"]
            out |= {target} if m["type"] == "Node" else below(target)
        return out

    return {name: below(name) for name in by_name}


def test_hypernodes_are_accepted_and_form_one_tree_over_every_node(solved):
    spec, topo, placement, report = solved
    docs = topology_manifests(spec, topo, placement, report, "volcano")
    assert docs and {d["kind"] for d in docs} == {"HyperNode"}
    assert_accepted(docs)
    assert_accepted(docs, release="volcano-v1.12.0")  # the oldest Volcano placer's volcano target supports
    tier = {h["metadata"]["name"]: h["spec"]["tier"] for h in docs}
    node_members = Counter(
        m["selector"]["exactMatch"]["name"] for h in docs for m in h["spec"]["members"] if m["type"] == "Node"
    )
    assert node_members == Counter(n.name for n in topo.nodes)  # every node once, in a lowest-level HyperNode
    parents = Counter(
        m["selector"]["exactMatch"]["name"] for h in docs for m in h["spec"]["members"] if m["type"] == "HyperNode"
    )
    top = max(tier.values())
    assert all(parents[name] == (0 if t == top else 1) for name, t in tier.items())  # a tree
    for h in docs:
        for m in h["spec"]["members"]:
            if m["type"] == "HyperNode":
                assert tier[m["selector"]["exactMatch"]["name"]] < h["spec"]["tier"]


def test_each_podgroup_fits_inside_one_hypernode_of_the_tier_it_allows(solved):
    """What Volcano would do with both: a replica's nodes lie under one HyperNode of ``highestTierAllowed``
    or lower (the DGX and GB200 cases constrain a tier; the small cluster's replicas span its root)."""
    spec, topo, placement, report = solved
    hypernodes = topology_manifests(spec, topo, placement, report, "volcano")
    under = _nodes_under(hypernodes)
    tier_of = {h["metadata"]["name"]: h["spec"]["tier"] for h in hypernodes}
    docs = build_manifests(spec, topo, placement, report, target="volcano")
    for group in (d for d in docs if d["kind"] == "PodGroup"):
        allowed = group["spec"].get("networkTopology", {}).get("highestTierAllowed")
        if allowed is None:
            continue
        replica = group["metadata"]["labels"]["placer.dev/replica"]
        nodes = {p.node for r in placement.replicas if str(r.index) == replica for i in r.instances for p in i.pods}
        assert any(nodes <= members for h, members in under.items() if tier_of[h] <= allowed), group["metadata"]


def test_kueue_topology_names_every_level_its_pods_ask_for(solved):
    spec, topo, placement, report = solved
    topology, flavor = topology_manifests(spec, topo, placement, report, "kueue")
    assert_accepted([topology, flavor])
    assert (topology["kind"], flavor["kind"]) == ("Topology", "ResourceFlavor")
    assert flavor["spec"]["topologyName"] == topology["metadata"]["name"]
    levels = [lv["nodeLabel"] for lv in topology["spec"]["levels"]]
    assert levels[-1] == "kubernetes.io/hostname" and len(set(levels)) == len(levels)
    asked = {
        value
        for d in build_manifests(spec, topo, placement, report, target="kueue")
        for key, value in d.get("spec", {}).get("template", {}).get("metadata", {}).get("annotations", {}).items()
        if key.endswith("required-topology")
    }
    assert asked and asked <= set(levels)


def test_kueue_0_13_gets_its_v1alpha1_topology():
    spec, topo, placement, report = solved_fixture("llama-70b-disagg")
    old = topology_manifests(spec, topo, placement, report, "kueue", target_version="0.13")
    assert old[0]["apiVersion"] == "kueue.x-k8s.io/v1alpha1"
    assert_accepted(old, release="kueue-v0.13.0")
    with pytest.raises(AssertionError, match="not served|does not serve|served"):
        assert_accepted(old)  # main serves v1beta1 and v1beta2 only
    with pytest.raises(AssertionError, match="v1beta1 is not served"):  # so the switch is needed
        assert_accepted(topology_manifests(spec, topo, placement, report, "kueue"), release="kueue-v0.13.0")


def test_the_flavor_selects_a_label_every_node_shares(tmp_path):
    """An imported cluster whose nodes all carry GFD's product label: the flavor selects by it, not by a
    label the nodes may lack."""
    leaf = {"dgx-01": "s1", "dgx-02": "s1", "dgx-03": "s2", "dgx-04": "s2"}
    nodes = [_gfd_node(n, {"fabric.topograph.run/tier-0": s}) for n, s in leaf.items()]
    nodes_json = tmp_path / "nodes.json"
    nodes_json.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(dump_cluster(import_cluster(ImportOptions(nodes=nodes_json, name="lab")).document))
    spec = load_spec(ROOT / "fixtures" / "specs" / "tp16-multinode.yaml")
    topo = build_topology(load_cluster(cluster))
    placement = solve(build_problem(spec, topo), SolveOptions())
    report = verify_placement(spec, topo, placement)
    topology, flavor = topology_manifests(spec, topo, placement, report, "kueue")
    assert topology["spec"]["levels"] == [
        {"nodeLabel": "fabric.topograph.run/tier-0"},
        {"nodeLabel": "kubernetes.io/hostname"},
    ]
    key, value = next(iter(flavor["spec"]["nodeLabels"].items()))
    assert all(n["metadata"]["labels"].get(key) == value for n in nodes)
    assert key != "fabric.topograph.run/tier-0"
    hypernodes = topology_manifests(spec, topo, placement, report, "volcano")
    shape = sorted((h["spec"]["tier"], len(h["spec"]["members"])) for h in hypernodes)
    assert shape == [(1, 2), (1, 2), (2, 2)]  # two leaves of two nodes, under the cluster's spine


def test_a_target_without_topology_objects_is_refused():
    spec, topo, placement, report = solved_fixture("llama-70b-disagg")
    with pytest.raises(InputError, match="refers to no topology object"):
        topology_manifests(spec, topo, placement, report, "lws")
    assert topology_manifests(spec, topo, placement, report, "kai") == []  # kai prints its Topology anyway


def test_cli_prepends_the_objects_and_refuses_other_targets():
    plain = run("solve", AGG, SMALL, "-t", "volcano", "-q")
    both = run("solve", AGG, SMALL, "-t", "volcano", "-q", "--topology-objects")
    assert plain.returncode == both.returncode == 0, both.stderr
    docs = [d for d in yaml.safe_load_all(both.stdout) if d]
    hyper = [d for d in docs if d["kind"] == "HyperNode"]
    assert hyper and docs[: len(hyper)] == hyper
    assert docs[len(hyper) :] == [d for d in yaml.safe_load_all(plain.stdout) if d]
    refused = run("solve", AGG, SMALL, "-t", "lws", "--topology-objects")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "refers to no topology object" in refused.stderr and "Traceback" not in refused.stderr


def test_cli_batch_prints_the_objects_once(tmp_path):
    batch = run("solve", AGG, DISAGG, SMALL, "-t", "kueue", "-q", "--topology-objects")
    assert batch.returncode in (0, 1), batch.stderr
    kinds = Counter(d["kind"] for d in yaml.safe_load_all(batch.stdout) if d)
    assert kinds["Topology"] == kinds["ResourceFlavor"] == 1
