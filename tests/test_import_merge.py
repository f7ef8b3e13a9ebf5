"""Merging sources into one cluster: what each source contributes, provenance, conflicts (reported, or fatal
with --strict), nesting, busy GPUs from pods, measured figures from nccl-tests, determinism and a round trip
through the real loader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from placer.importers.document import dump_cluster
from placer.importers.run import ImportOptions, ImportResult, import_cluster
from placer.model.errors import InputError
from placer.model.load import load_cluster

SAMPLES = Path(__file__).resolve().parent / "data" / "samples"
H200 = str(SAMPLES / "hgx-h200-12nic-topo-m.txt")
GCP = SAMPLES / "nccl-tests-allreduce-gcp-a3mega-h100-2node.txt"

H100_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
}


def k8s_node(name: str, labels: dict[str, str], gpus: int = 8, allocatable: int | None = None) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {
            "capacity": {"cpu": "224", "memory": "2Ti", "nvidia.com/gpu": str(gpus)},
            "allocatable": {
                "cpu": "220",
                "memory": "1900Gi",
                "nvidia.com/gpu": str(gpus if allocatable is None else allocatable),
            },
        },
    }


def write(tmp: Path, name: str, items: list[dict[str, Any]]) -> Path:
    path = tmp / name
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def gpu_pod(name: str, node: str, gpus: int, indices: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml"}
    if indices:
        meta["annotations"] = {"placer.dev/gpus": indices}
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": "4", "memory": "32Gi"}}
    return {
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": "Running"},
    }


@pytest.fixture()
def dgx(tmp_path: Path) -> ImportResult:
    """Four H100 nodes in two topograph (v5) leaves, the HGX matrix for all of them, and three kinds of busy."""
    leaf = {"dgx-01": "s1", "dgx-02": "s1", "dgx-03": "s2", "dgx-04": "s2"}
    nodes = [
        k8s_node(n, H100_LABELS | {"fabric.topograph.run/tier-0": s}, allocatable=7 if n == "dgx-03" else None)
        for n, s in leaf.items()
    ]
    pods = [gpu_pod("train", "dgx-01", 2), gpu_pod("placed", "dgx-02", 4, "4,5,6,7")]
    return import_cluster(
        ImportOptions(
            nodes=write(tmp_path, "nodes.json", nodes),
            pods=write(tmp_path, "pods.json", pods),
            topo=(f"dgx-*={H200}",),
            name="lab",
        )
    )


def test_kubernetes_inventory_topo_matrix_and_pods_make_one_class(dgx: ImportResult) -> None:
    doc = dgx.document
    assert list(doc["nodeClasses"]) == ["nvidia-h100-80gb-hbm3-x8"]
    cls = doc["nodeClasses"]["nvidia-h100-80gb-hbm3-x8"]
    # GFD memory 81559 MiB = 79.65 GiB, within 5 % of the name's 80GB: the nominal 80, as the product table gives
    # it; sockets are the NUMA affinity column (GPU0-3 on 0, GPU4-7 on 1).
    assert cls["gpus"][0] == {"index": 0, "product": "NVIDIA-H100-80GB-HBM3", "memoryGiB": 80.0, "socket": 0}
    assert [g["socket"] for g in cls["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    # NV18 between every pair, Hopper (compute 9.0 from GFD): 18 x 50 GB/s.
    assert (cls["interconnect"], cls["nvlinkGBps"], cls["sockets"]) == ("nvlink", 900.0, 2)
    assert len(cls["nics"]) == 12 and cls["nics"][0] == {"name": "mlx5_0", "socket": 0, "gpus": [0]}
    assert (cls["cpu"], cls["memory"]) == ("220", "1900Gi")
    assert doc["fabric"] == {"network": {"railsPerNode": 8}}
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert [nodes[n]["leaf"] for n in ("dgx-01", "dgx-02", "dgx-03", "dgx-04")] == ["s1", "s1", "s2", "s2"]
    assert nodes["dgx-01"]["busy"] == [0, 1]  # an unannotated 2-GPU pod: the lowest free indices
    assert nodes["dgx-02"]["busy"] == [4, 5, 6, 7]  # placer.dev/gpus says which
    assert nodes["dgx-03"]["busy"] == [7]  # capacity 8, allocatable 7: one GPU the plugin does not offer
    assert "busy" not in nodes["dgx-04"]
    assert nodes["dgx-01"]["used"] == {"cpu": "4", "memory": str(32 * 2**30)}


def test_provenance_names_every_source_and_default(dgx: ImportResult) -> None:
    prov = dgx.report.provenance
    assert list(prov["gpus"].values()) == [4] and next(iter(prov["gpus"])).startswith("kubernetes (")
    assert list(prov["product"]) == [f"node labels ({dgx.report.sources[0].file})"]
    assert prov["nvlinkGBps"] == {"NV18 x NVLink 4 (Hopper H100/H200/GH200, sm90)": 4}
    assert prov["leaf"] == {f"node labels ({dgx.report.sources[0].file})": 4}
    assert prov["fabric.network.railsPerNode"] == {"NICs of the hardware files": 4}
    assert dgx.report.conflicts == []
    assert [s.kind for s in dgx.report.sources] == ["kubernetes nodes", "kubernetes pods", "nvidia-smi topo -m"]


def test_the_solver_sees_nvlink_inside_and_the_leaf_split(dgx: ImportResult) -> None:
    topo = dgx.topology
    assert {d for d in topo.domains if d.startswith("leaf/")} == {"leaf/s1", "leaf/s2"}
    assert topo.crossing["node/dgx-01"] == (900.0, 1.0)
    assert sum(len(n.free_gpus) for n in topo.nodes) == 32 - 7


def test_round_trip_through_the_loader_and_same_bytes_twice(dgx: ImportResult, tmp_path: Path) -> None:
    text = dump_cluster(dgx.document)
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert load_cluster(path) == dgx.spec
    again = import_cluster(
        ImportOptions(nodes=tmp_path / "nodes.json", pods=tmp_path / "pods.json", topo=(f"dgx-*={H200}",), name="lab")
    )
    assert dump_cluster(again.document) == text


def test_nccl_tests_figure_attaches_to_the_domain_the_test_spanned() -> None:
    result = import_cluster(
        ImportOptions(
            topo=(f"ztan-mig-235z={H200}", f"ztan-mig-gq73={H200}"),
            nccl_tests=(GCP,),
            gpu_product="NVIDIA-H100-80GB-HBM3",
        )
    )
    # Two nodes with no leaf share the default leaf: the test crossed it, driving all 8 rails of each node,
    # so the figure per rail (what every network figure is) is the bus bandwidth over the rails.
    assert result.topology.rails_per_node == 8
    assert result.document["overrides"] == [
        {
            "domain": "leaf/default",
            "bandwidthGBps": 42.352,
            "source": "nccl-tests (nccl-tests-allreduce-gcp-a3mega-h100-2node.txt): busbw 338.82 GB/s at "
            "8589934592 B, 16 ranks on 2 node(s), over 8 rail(s) per node: 42.352 GB/s per rail",
        }
    ]
    assert result.topology.crossing["leaf/default"] == (42.352, 2.0)
    # A KV transfer between the two nodes stripes over the rails: the measured node bandwidth, not 8 times it.
    from placer.topology.cost import PathFigures, kv_bandwidth_gbps

    path = PathFigures(*result.topology.crossing["leaf/default"], "leaf")
    assert kv_bandwidth_gbps(path, 8, 8, result.topology.rails_per_node) == pytest.approx(338.82, abs=0.01)
    # 80GB from the product name given with --gpu-product.
    assert result.report.provenance["memoryGiB"] == {"product name": 2}


def test_nccl_tests_on_unknown_hosts_is_noted_not_attached() -> None:
    result = import_cluster(ImportOptions(topo=(f"ztan-mig-235z={H200}",), nccl_tests=(GCP,)))
    assert "overrides" not in result.document
    assert any("host(s) ztan-mig-gq73 are not cluster nodes" in n.text for n in result.report.notes)


def test_gpu_count_conflict_is_reported_and_kubernetes_wins() -> None:
    result = import_cluster(
        ImportOptions(
            nodes=SAMPLES / "k8s-gpu-node-kubectl-get-nodes.json",
            topo=(f"nori={SAMPLES / 'a100-pcie-2gpu-topo-m.txt'}",),
        )
    )
    (conflict,) = result.report.conflicts
    assert conflict.startswith("node nori: gpus is 2 from nvidia-smi topo -m (") and conflict.endswith(
        "k8s-gpu-node-kubectl-get-nodes.json)"
    )
    cls = result.document["nodeClasses"]["nvidia-a16-4q-x1"]
    assert cls == {
        "gpus": {"count": 1, "product": "NVIDIA-A16-4Q", "memoryGiB": 4.0},
        "cpu": "2",
        "memory": "16367668Ki",
    }
    with pytest.raises(InputError, match=r"^conflicting sources \(--strict\):\n  node nori: gpus is 2"):
        import_cluster(
            ImportOptions(
                nodes=SAMPLES / "k8s-gpu-node-kubectl-get-nodes.json",
                topo=(f"nori={SAMPLES / 'a100-pcie-2gpu-topo-m.txt'}",),
                strict=True,
            )
        )


def test_slurm_and_labels_that_group_nodes_differently_conflict(tmp_path: Path) -> None:
    # topology.conf puts dev0-dev5 under switch s0; the labels split them into two leaves.
    nodes = [k8s_node(f"dev{i}", {"topology.kubernetes.io/zone": "z-a" if i < 3 else "z-b"}) for i in range(6)]
    result = import_cluster(  # the zone preset chosen: under auto the coarse zone never beats Slurm's leaf
        ImportOptions(
            nodes=write(tmp_path, "n.json", nodes), slurm=SAMPLES / "slurm-topology-tree.conf", label_preset="zone"
        )
    )
    assert result.report.conflicts == [
        f"leaf: slurm ({SAMPLES / 'slurm-topology-tree.conf'}) puts dev0 and dev3 together ('s0') but node labels "
        f"({tmp_path / 'n.json'}) separates them ('z-a', 'z-b'); using node labels ({tmp_path / 'n.json'})"
    ]
    assert [n["leaf"] for n in result.document["nodes"]] == ["z-a", "z-a", "z-a", "z-b", "z-b", "z-b"]
    assert any(n.text == "12 Slurm node(s) are not cluster nodes, e.g. dev6" for n in result.report.notes)


def test_same_grouping_under_other_names_is_no_conflict(tmp_path: Path) -> None:
    nodes = [k8s_node(f"dev{i}", {"topology.kubernetes.io/zone": f"z{i // 6}"}) for i in range(18)]
    result = import_cluster(
        ImportOptions(
            nodes=write(tmp_path, "n.json", nodes), slurm=SAMPLES / "slurm-topology-tree.conf", label_preset="zone"
        )
    )
    assert result.report.conflicts == []
    assert result.document["nodes"][17]["leaf"] == "z2"


def test_an_nvlink_domain_across_two_leaves_is_refused(tmp_path: Path) -> None:
    clique = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1"
    nodes = [
        k8s_node("gb-1", {"nvidia.com/gpu.clique": clique, "fabric.topograph.run/tier-0": "s1"}, gpus=4),
        k8s_node("gb-2", {"nvidia.com/gpu.clique": clique, "fabric.topograph.run/tier-0": "s2"}, gpus=4),
    ]
    with pytest.raises(InputError) as info:
        import_cluster(ImportOptions(nodes=write(tmp_path, "n.json", nodes)))
    origin = f"node labels ({tmp_path / 'n.json'})"
    assert str(info.value) == (
        f"nvlink-domain '{clique}' ({origin}) spans leaves 's1' (node gb-1) and 's2' (node gb-2, {origin}): "
        "placer's levels must nest; choose other label keys with --level-label or --label-preset"
    )


def test_multi_node_nvlink_domains_get_a_rack_and_blocks_become_leaves() -> None:
    result = import_cluster(
        ImportOptions(
            slurm=SAMPLES / "topograph-generated-slurm-block.conf",
            topo=(f"*={H200}",),
            gpu_product="NVIDIA-H200",
            gpu_memory_gib=141,
        )
    )
    first = result.document["nodes"][0]
    assert first == {
        "name": "srv1101",
        "class": "nvidia-h200-x8",
        "rack": "nvl-1-1",
        "leaf": "rack11",
        "nvlinkDomain": "nvl-1-1",
    }
    assert len(result.document["nodes"]) == 96
    # 12 blocks, each one NVLink domain of 8 nodes: the solver keeps the NVLink domains (rack and leaf merge away).
    levels = [d.level for d in result.topology.domains.values()]
    assert (levels.count("nvlink-domain"), levels.count("rack"), levels.count("leaf")) == (12, 0, 0)
    assert result.report.provenance["memoryGiB"] == {"--gpu-memory-gib": 96}


def test_defaults_are_counted_when_nothing_names_the_gpu() -> None:
    result = import_cluster(ImportOptions(topo=(str(SAMPLES / "legacy-k40-soc-topo-m.txt"),)))
    prov = result.report.provenance
    assert prov["product"] == {"default": 1} and prov["memoryGiB"] == {"default": 1}
    assert prov["cpu"] == {"default": 1}
    (node,) = result.document["nodes"]
    assert node == {"name": "legacy-k40-soc-topo-m", "class": "unknown-x4"}
    cls = result.document["nodeClasses"]["unknown-x4"]
    assert (cls["interconnect"], cls["sockets"], [g["socket"] for g in cls["gpus"]]) == ("pcie", 2, [0, 0, 1, 1])
    assert cls["gpus"][0]["memoryGiB"] == 1.0
    assert "nvlinkGBps" not in cls
    # PCIe with two sockets: the solver gets one socket domain per CPU.
    assert {d for d in result.topology.domains if d.startswith("socket/")} == {
        "socket/legacy-k40-soc-topo-m/0",
        "socket/legacy-k40-soc-topo-m/1",
    }


def test_power9_islands_are_recorded_and_the_node_is_modelled_as_pcie() -> None:
    result = import_cluster(
        ImportOptions(topo=(f"p9={SAMPLES / 'power9-v100-nv3-topo-m.txt'}",), gpu_product="Tesla-V100-SXM2-16GB")
    )
    cls = result.document["nodeClasses"]["tesla-v100-sxm2-16gb-x4"]
    assert cls["nvlinkIslands"] == [[0, 1], [2, 3]] and cls["interconnect"] == "pcie"
    assert [g["socket"] for g in cls["gpus"]] == [0, 0, 8, 8] and cls["sockets"] == 2
    assert result.spec.node_classes["tesla-v100-sxm2-16gb-x4"].nvlink_islands == [[0, 1], [2, 3]]


def test_hint_file_and_matrix_for_one_node_complement_each_other() -> None:
    result = import_cluster(
        ImportOptions(
            nccl_xml=(f"p4d={SAMPLES / 'aws-p4d-24xl-topo.xml'}",),
            topo=(f"p4d={SAMPLES / 'dgx-a100-topo-m.txt'}",),
        )
    )
    # The hint file names the GPU (device 0x20b0); the matrix, applied later, gives NVLink and NUMA. The two
    # files come from different machines (a p4d: 2 NUMA nodes, 4 EFA NICs; a DGX A100: NPS4, 8 IB rails):
    # where both know the sockets and the rails they disagree, and that is said (it passed --strict before).
    xml, matrix = SAMPLES / "aws-p4d-24xl-topo.xml", SAMPLES / "dgx-a100-topo-m.txt"
    assert result.report.conflicts == [
        f"node p4d: {xml} and {matrix} put the GPUs on different sockets "
        f"(0,1,2,3 | 4,5,6,7 and 0,1 | 2,3 | 4,5 | 6,7); using {matrix}",
        f"node p4d: {xml} and {matrix} find 4 and 8 network rails; using {matrix}",
    ]
    cls = result.document["nodeClasses"]["nvidia-a100-sxm4-40gb-x8"]
    assert (cls["interconnect"], cls["nvlinkGBps"], cls["gpus"][0]["memoryGiB"]) == ("nvlink", 600.0, 40.0)
    # The bus ids are the hint file's (topo -m has none): the summary credits them to it, not to the matrix.
    assert result.report.provenance["gpuIds"] == {f"{SAMPLES / 'aws-p4d-24xl-topo.xml'} (bus ids)": 1}


def test_aws_instance_topology_alone_and_matched_through_provider_ids(tmp_path: Path) -> None:
    alone = import_cluster(ImportOptions(aws_topology=SAMPLES / "aws-describe-instance-topology-cli-example.json"))
    # Natural order: i-444444444example (nine 4s) sorts before i-1111111111example (ten 1s).
    assert [(n["name"], n["leaf"]) for n in alone.document["nodes"]] == [
        ("i-444444444example", "nn-1235301234example"),
        ("i-1111111111example", "nn-3333333333example"),
        ("i-2222222222example", "nn-3333333333example"),
        ("i-3333333333example", "nn-1311133311example"),
    ]
    assert alone.document["nodes"][1]["labels"] == {"node.kubernetes.io/instance-type": "p4d.24xlarge"}
    node = k8s_node("ip-10-0-0-1.ec2.internal", H100_LABELS)
    node["spec"] = {"providerID": "aws:///us-west-2a/i-2222222222example"}
    matched = import_cluster(
        ImportOptions(
            nodes=write(tmp_path, "n.json", [node]),
            aws_topology=SAMPLES / "aws-describe-instance-topology-cli-example.json",
        )
    )
    assert matched.document["nodes"][0]["leaf"] == "nn-3333333333example"
    assert any(n.text == "3 instance(s) match no node, e.g. i-1111111111example" for n in matched.report.notes)


def test_nothing_to_import_and_unmatched_patterns(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nothing to import"):
        import_cluster(ImportOptions())
    with pytest.raises(InputError, match=r"^no nodes found in the sources \(an empty node list\?\)$"):
        import_cluster(ImportOptions(nodes=write(tmp_path, "empty.json", [])))
    with pytest.raises(InputError, match=r"pattern 'gpu-\*' needs --nodes, --slurm or --aws-topology"):
        import_cluster(ImportOptions(topo=(f"gpu-*={H200}",)))
    result = import_cluster(ImportOptions(slurm=SAMPLES / "slurm-topology-tree.conf", topo=(f"gpu-*={H200}",)))
    assert any(n.text == "pattern 'gpu-*' matches no node; file not used" for n in result.report.notes)
    assert sum(len(n.gpus) for n in result.topology.nodes) == 0


def test_files_without_an_inventory_each_make_their_own_node() -> None:
    result = import_cluster(ImportOptions(topo=(H200, str(SAMPLES / "dgx-a100-topo-m.txt"))))
    assert [n["name"] for n in result.document["nodes"]] == ["dgx-a100-topo-m", "hgx-h200-12nic-topo-m"]
    assert result.report.conflicts == []
    assert sorted(result.report.provenance["sockets"].values()) == [1, 1]
    with pytest.raises(InputError, match=r"'Node_1' is not a node name \(lower-case DNS-1123"):
        import_cluster(ImportOptions(topo=(f"Node_1={H200}",)))


def test_names_reach_nodes_through_short_names_and_ambiguous_ones_do_not(tmp_path: Path) -> None:
    nodes = [k8s_node(n, H100_LABELS) for n in ("gpu-1.rack-a.example", "gpu-2.rack-a.example", "gpu-2.rack-b.example")]
    result = import_cluster(
        ImportOptions(
            nodes=write(tmp_path, "n.json", nodes),
            topo=(f"gpu-1={SAMPLES / 'dgx-a100-topo-m.txt'}", f"gpu-2={SAMPLES / 'dgx-a100-topo-m.txt'}"),
        )
    )
    assert result.report.provenance["sockets"] == {
        f"nvidia-smi topo -m ({SAMPLES / 'dgx-a100-topo-m.txt'}), NUMA affinity": 1,
        "default": 2,
    }
    assert any(n.text == "pattern 'gpu-2' matches no node; file not used" for n in result.report.notes)


def test_a_test_with_one_rank_per_node_drove_one_rail(tmp_path) -> None:
    """Ranks drive their own rails: 2 ranks on 2 nodes used one rail each, so the figure stays the busbw
    (dividing by all 8 rails would make the network look 8 times slower)."""
    lines = GCP.read_text().splitlines(keepends=True)
    kept = [ln for ln in lines if not ln.startswith("#  Rank") or ln.split()[2] in ("0", "8")]
    one = tmp_path / "one-rank-per-node.txt"
    one.write_text("".join(kept))
    result = import_cluster(
        ImportOptions(
            topo=(f"ztan-mig-235z={H200}", f"ztan-mig-gq73={H200}"),
            nccl_tests=(one,),
            gpu_product="NVIDIA-H100-80GB-HBM3",
        )
    )
    (override,) = result.document["overrides"]
    assert override["bandwidthGBps"] == 338.82
    assert "2 ranks on 2 node(s), over 1 rail(s) per node" in override["source"]


def test_two_files_of_one_node_conflict_only_where_both_know_and_disagree() -> None:
    from dataclasses import replace

    from placer.importers.hardware import conflicts
    from placer.importers.topo_matrix import parse_topo_matrix

    text = (SAMPLES / "dgx-a100-topo-m.txt").read_text()
    a = parse_topo_matrix(text, "a.txt").to_hardware()
    b = parse_topo_matrix(text, "b.txt").to_hardware()
    assert conflicts(a, b) == []  # the same node twice
    ib = replace(a, nics=tuple(replace(n, kind="infiniband") for n in a.nics))
    eth = replace(b, nics=tuple(replace(n, kind="ethernet") for n in b.nics))
    assert conflicts(ib, eth) == ["name different networks (infiniband and ethernet)"]
    assert conflicts(ib, b) == []  # b does not say which network: nothing to disagree with
    fewer = replace(b, gpus=b.gpus[:4])
    assert conflicts(a, fewer) == ["describe different GPU counts (8 and 4)"]
