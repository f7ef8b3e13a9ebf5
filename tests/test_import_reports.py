"""Damaged or odd inputs are refused with words that say what is wrong and where, and what an importer
drops or reads in part is reported, never silent. Inputs are copies of the real samples, cut or changed
where the test says."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from placer.importers.k8s_nodes import domains_from_labels, label_scheme, parse_nodes
from placer.importers.run import ImportOptions, ImportResult, import_cluster
from placer.model.errors import InputError

SAMPLES = Path(__file__).resolve().parent / "data" / "samples"
GCP = SAMPLES / "nccl-tests-allreduce-gcp-a3mega-h100-2node.txt"
H200 = SAMPLES / "hgx-h200-12nic-topo-m.txt"


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def refused(options: ImportOptions) -> str:
    with pytest.raises(InputError) as info:
        import_cluster(options)
    return str(info.value)


def notes(result: ImportResult) -> list[str]:
    return [str(n) for n in result.report.notes]


def kubectl_nodes(tmp: Path, labels: dict[str, str], names: tuple[str, ...] = ("nori",)) -> Path:
    """The real kubectl node list, its one node copied under ``names`` with ``labels`` added."""
    doc = json.loads((SAMPLES / "k8s-gpu-node-kubectl-get-nodes.json").read_text())
    base = doc["items"][0]
    items = []
    for name in names:
        node = copy.deepcopy(base)
        node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        node["metadata"]["labels"] |= labels
        items.append(node)
    doc["items"] = items
    return write(tmp, "nodes.json", json.dumps(doc))


# --- 8. refusals that say what is wrong, with the line --------------------------------------------------------


def test_an_nccl_tests_log_cut_after_its_header_says_so_with_the_line(tmp_path: Path) -> None:
    lines = GCP.read_text().split("\n")
    header = next(i for i, ln in enumerate(lines) if "busbw" in ln and "size" in ln)
    cut = write(tmp_path, "cut.txt", "\n".join(lines[: header + 1]) + "\n# ")
    message = refused(ImportOptions(topo=(f"n={H200}",), nccl_tests=(cut,)))
    assert message == f"{cut}:{header + 1}: the results table has no rows: the log ends after its header (cut short?)"
    quoted = SAMPLES / "nccl-tests-header-old-vs-new-aws-parallelcluster.txt"  # rows behind '#': still that reason
    assert "is the output quoted inside another file?" in refused(
        ImportOptions(topo=(f"n={H200}",), nccl_tests=(quoted,))
    )


def test_an_unreadable_pci_class_is_named_with_its_line(tmp_path: Path) -> None:
    text = (SAMPLES / "azure-ndv2-topo.xml").read_text().replace('class="0x030200"', 'class="0xZZ"')
    bad = write(tmp_path, "ndv2.xml", text)
    line = next(i for i, ln in enumerate(text.split("\n"), start=1) if "0xZZ" in ln)
    assert refused(ImportOptions(nccl_xml=(str(bad),))) == (
        f"{bad}:{line}: no GPU found: its 8 <pci> device(s) have no usable class (class='0xZZ' at line {line} is not "
        "a hex PCI class code such as 0x030200), so GPUs and NICs cannot be told apart"
    )


def test_a_numaid_that_is_no_number_is_named(tmp_path: Path) -> None:
    text = (SAMPLES / "azure-ndv5-topo.xml").read_text().replace('numaid="1"', 'numaid="one"')
    line = next(i for i, ln in enumerate(text.split("\n"), start=1) if 'numaid="one"' in ln)
    bad = write(tmp_path, "ndv5.xml", text)
    result = import_cluster(ImportOptions(nccl_xml=(str(bad),)))
    assert f"{bad}:{line}: <cpu> numaid='one' is not a NUMA node number: its devices get no NUMA node" in notes(result)


def test_a_topology_yaml_cut_inside_its_switches_names_the_line(tmp_path: Path) -> None:
    text = (SAMPLES / "slurm-topology.yaml").read_text()
    cut = write(tmp_path, "topology.yaml", text[: text.index("- switch:") + len("- sw")])
    line = cut.read_text().count("\n") + 1
    assert refused(ImportOptions(slurm=cut)) == (
        f"{cut}:{line}: tree.switches[0]: expected a mapping such as 'switch: NAME' with nodes, got 'sw' (the file "
        "ends there, without a newline: cut short?)"
    )


def test_a_topology_conf_that_may_be_cut_inside_a_hostlist_says_so(tmp_path: Path) -> None:
    """Cut after 'Nodes=srv': read as written it is a node named srv beside srv1101...srv3108. Said, not
    refused: a complete file without a final newline can end the same way (gpu1 beside gpu10...)."""
    text = (SAMPLES / "topograph-generated-slurm-block.conf").read_text()
    end = text.index("BlockName=rack32 Nodes=srv") + len("BlockName=rack32 Nodes=srv")
    cut = write(tmp_path, "block.conf", text[:end])
    line = text[:end].count("\n") + 1
    assert (
        f"{cut}:{line}: the file ends without a newline at node 'srv', which is only the start of other node names "
        "(srv1101, ...): if the copy was cut short, export it again"
    ) in notes(import_cluster(ImportOptions(slurm=cut)))
    mid_key = write(tmp_path, "key.conf", text[: text.index("BlockName=rack32") + len("BlockName=rack32 Node")])
    assert refused(ImportOptions(slurm=mid_key)).endswith(
        "expected Key=Value, found 'Node' (the last line, without a newline: is the file cut short?)"
    )
    whole = import_cluster(ImportOptions(slurm=SAMPLES / "topograph-generated-slurm-block.conf"))
    assert len(whole.document["nodes"]) == 96  # the whole file, newline and all, still imports


@pytest.mark.parametrize(("last", "nodes"), [("gpu[1-8]", 16), ("gpu1", 9), ("gpu[1-7],gpu8", 16)])
def test_a_complete_topology_conf_without_a_final_newline_imports(tmp_path: Path, last: str, nodes: int) -> None:
    """A review found these refused: names that grow a digit (gpu1 beside gpu10) on a last line without a
    newline, as printf or a ConfigMap writes them. A closed bracket cannot be cut mid-name; a plain name is
    noted only when it is the start of other names."""
    conf = write(tmp_path, "t.conf", f"SwitchName=s0 Nodes=gpu[10-17]\nSwitchName=s1 Nodes={last}")
    result = import_cluster(ImportOptions(slurm=conf))
    assert len(result.document["nodes"]) == nodes
    assert any("only the start of other node names" in n for n in notes(result)) == (last == "gpu1")


# --- 9. what was dropped or read in part is reported ---------------------------------------------------------


def test_a_gpu_memory_label_that_is_no_number_is_reported(tmp_path: Path) -> None:
    nodes = kubectl_nodes(tmp_path, {"nvidia.com/gpu.memory": "lots"})
    result = import_cluster(ImportOptions(nodes=nodes))
    assert f"{nodes}: nori: label nvidia.com/gpu.memory='lots' is not a size in MiB; ignored" in notes(result)


def test_instances_without_network_nodes_are_reported(tmp_path: Path) -> None:
    doc = json.loads((SAMPLES / "aws-describe-instance-topology-cli-example.json").read_text())
    doc["Instances"][1]["NetworkNodes"] = None
    path = write(tmp_path, "topology.json", json.dumps(doc))
    result = import_cluster(ImportOptions(aws_topology=path))
    iid = doc["Instances"][1]["InstanceId"]
    assert f"{path}: 1 instance(s) without NetworkNodes (null or empty), e.g. {iid}: they get no leaf" in notes(result)
    assert "leaf" not in next(n for n in result.document["nodes"] if n["name"] == iid)


def test_nccl_tests_rank_lines_name_the_product_no_other_source_gave() -> None:
    topo = (f"ztan-mig-235z={H200}", f"ztan-mig-gq73={H200}")
    named = import_cluster(ImportOptions(topo=topo, nccl_tests=(GCP,)))
    assert {g.product for n in named.topology.nodes for g in n.gpus} == {"NVIDIA-H100-80GB-HBM3"}
    assert named.report.provenance["product"] == {f"nccl-tests rank lines ({GCP})": 2}
    assert {g.memory_gib for n in named.topology.nodes for g in n.gpus} == {80.0}  # from that name
    given = import_cluster(ImportOptions(topo=topo, nccl_tests=(GCP,), gpu_product="NVIDIA-H200"))
    assert given.report.provenance["product"] == {"--gpu-product": 2}  # the user's word comes first


def test_a_matrix_cut_before_its_nic_legend_says_the_nics_are_unnamed(tmp_path: Path) -> None:
    text = H200.read_text()
    cut = write(tmp_path, "h200.txt", text[: text.index("NIC Legend:")])
    result = import_cluster(ImportOptions(topo=(f"n={cut}",)))
    assert (
        f"{cut}: 12 NIC column(s) (NIC0...) not named by a NIC Legend (the copy ends before it?): kept as their "
        "column labels"
    ) in notes(result)
    whole = import_cluster(ImportOptions(topo=(f"n={H200}",)))
    assert not any("NIC Legend" in n or "no Legend" in n for n in notes(whole))
    legendless = write(tmp_path, "h200-nolegend.txt", text[: text.index("Legend:")])
    assert f"{legendless}: no Legend after the matrix (the copy ends before it?)" in notes(
        import_cluster(ImportOptions(topo=(f"n={legendless}",)))
    )


def test_replicas_zero_is_not_gpu_sharing(tmp_path: Path) -> None:
    """GFD writes gpu.replicas=0 for MIG devices: nothing is shared. Time-slicing's replicas=4 still is."""
    for replicas, shared in (("0", False), ("4", True)):
        labels = {"nvidia.com/gpu.replicas": replicas, "nvidia.com/gpu.sharing-strategy": "none"}
        result = import_cluster(ImportOptions(nodes=kubectl_nodes(tmp_path, labels)))
        assert any("GPUs shared" in n for n in notes(result)) is shared, replicas


def topograph_era(era: int) -> dict[str, str]:
    block = re.split(r"^# --- era \d.*$", (SAMPLES / "topograph-labels.txt").read_text(), flags=re.M)[era]
    return dict(re.findall(r"^\s+(\S+): (\S+)$", block, re.M))


@pytest.mark.parametrize("era", [4, 5])
def test_a_sub_domain_is_reported_as_a_tier_inside_the_nvlink_domain(era: int) -> None:
    labels = topograph_era(era)
    key = next(k for k in labels if k.endswith("/sub-domain"))
    other = labels | {key: labels[key] + "b"}
    items = [{"kind": "Node", "metadata": {"name": n, "labels": ls}} for n, ls in (("a", labels), ("b", other))]
    found = parse_nodes(json.dumps({"kind": "List", "items": items}), "n.json")
    said = [n.text for n in domains_from_labels(list(found.nodes), label_scheme(), "n.json").notes]
    assert said == [
        f"label {key} has 2 values: a tier inside the NVLink domain, which placer does not split (its nodes are one "
        "NVLink domain), so it is kept as a node label only"
    ]
