"""Every real sample in tests/data/samples either imports into a cluster (checked: nodes, GPUs, products,
sockets, interconnect, domains) or is refused with a message saying why. A sample missing from the table
fails the first test, so a new sample cannot be skipped silently. (Details per format are in the other
test_import_*.py files; this is the whole-pipeline view.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from placer.importers.run import ImportOptions, import_cluster
from placer.model.errors import InputError

SAMPLES = Path(__file__).resolve().parent / "data" / "samples"
H200 = SAMPLES / "hgx-h200-12nic-topo-m.txt"


def s(name: str) -> Path:
    return SAMPLES / name


# sample -> (options, expected facts). Facts: nodes, gpus, classes {name: (interconnect, sockets)}, leaves.
IMPORTS: dict[str, tuple[ImportOptions, dict[str, Any]]] = {
    "hgx-h200-12nic-topo-m.txt": (
        ImportOptions(topo=(f"h200={H200}",), gpu_product="NVIDIA-H200"),
        {"nodes": 1, "gpus": 8, "classes": {"nvidia-h200-x8": ("nvlink", 2, 900.0, 12)}},
    ),
    "dgx-a100-topo-m.txt": (
        ImportOptions(topo=(f"a100={s('dgx-a100-topo-m.txt')}",), gpu_product="NVIDIA-A100-SXM4-80GB"),
        {"nodes": 1, "gpus": 8, "classes": {"nvidia-a100-sxm4-80gb-x8": ("nvlink", 4, 600.0, 12)}},
    ),
    "dgx1-v100-topo-mp-pcie-only.txt": (
        ImportOptions(topo=(f"dgx1={s('dgx1-v100-topo-mp-pcie-only.txt')}",), gpu_product="Tesla-V100-SXM2-16GB"),
        {"nodes": 1, "gpus": 8, "classes": {"tesla-v100-sxm2-16gb-x8": ("pcie", 2, None, 4)}},
    ),
    "a100-pcie-2gpu-topo-m.txt": (
        ImportOptions(topo=(f"della-i14g20={s('a100-pcie-2gpu-topo-m.txt')}",), gpu_product="NVIDIA-A100-PCIE-40GB"),
        {"nodes": 1, "gpus": 2, "classes": {"nvidia-a100-pcie-40gb-x2": ("pcie", 2, None, 2)}},
    ),
    "power9-v100-nv3-topo-m.txt": (
        ImportOptions(topo=(f"traverse={s('power9-v100-nv3-topo-m.txt')}",)),
        {"nodes": 1, "gpus": 4, "classes": {"unknown-x4": ("pcie", 2, None, 4)}},
    ),
    "legacy-k40-soc-topo-m.txt": (
        ImportOptions(topo=(f"k40={s('legacy-k40-soc-topo-m.txt')}",), gpu_product="Tesla-K40m"),
        {"nodes": 1, "gpus": 4, "classes": {"tesla-k40m-x4": ("pcie", 2, None, 1)}},
    ),
    "azure-ndv5-topo.xml": (
        ImportOptions(nccl_xml=(f"nd96isr={s('azure-ndv5-topo.xml')}",), gpu_product="NVIDIA-H100-80GB-HBM3"),
        {"nodes": 1, "gpus": 8, "classes": {"nvidia-h100-80gb-hbm3-x8": ("nvlink", 2, 900.0, 8)}},
    ),
    "azure-ndv4-topo.xml": (
        ImportOptions(nccl_xml=(f"nd96asr={s('azure-ndv4-topo.xml')}",), gpu_product="NVIDIA-A100-SXM4-40GB"),
        {"nodes": 1, "gpus": 8, "classes": {"nvidia-a100-sxm4-40gb-x8": ("nvlink", 4, 600.0, 8)}},
    ),
    "azure-ndv2-topo.xml": (
        ImportOptions(nccl_xml=(f"nd40rs={s('azure-ndv2-topo.xml')}",), gpu_product="Tesla-V100-SXM2-32GB"),
        # V100 SXM2 boards are a hybrid cube mesh (not every pair NVLinked) and the hint file shows no links
        {"nodes": 1, "gpus": 8, "classes": {"tesla-v100-sxm2-32gb-x8": ("pcie", 2, None, 1)}},
    ),
    "azure-ncv4-topo.xml": (
        ImportOptions(nccl_xml=(f"nc96ads={s('azure-ncv4-topo.xml')}",)),
        {"nodes": 1, "gpus": 4, "classes": {"nvidia-a100-80gb-pcie-x4": ("pcie", 4, None, 1)}},
    ),
    "aws-p4d-24xl-topo.xml": (
        ImportOptions(nccl_xml=(f"p4d={s('aws-p4d-24xl-topo.xml')}",)),
        {"nodes": 1, "gpus": 8, "classes": {"nvidia-a100-sxm4-40gb-x8": ("nvlink", 2, 600.0, 4)}},
    ),
    "aws-p4de-24xl-topo.xml": (
        ImportOptions(nccl_xml=(f"p4de={s('aws-p4de-24xl-topo.xml')}",)),
        {"nodes": 1, "gpus": 8, "classes": {"nvidia-a100-sxm4-80gb-x8": ("nvlink", 2, 600.0, 4)}},
    ),
    "k8s-gpu-node-kubectl-get-nodes.json": (
        ImportOptions(nodes=s("k8s-gpu-node-kubectl-get-nodes.json")),
        {"nodes": 1, "gpus": 1, "classes": {"nvidia-a16-4q-x1": ("nvlink", 1, None, None)}},
    ),
    "aws-eks-node-topology-labels-aws-ofi-nccl.json": (
        ImportOptions(nodes=s("aws-eks-node-topology-labels-aws-ofi-nccl.json")),
        {"nodes": 3, "gpus": 0, "leaves": 3},
    ),
    "aws-describe-instance-topology-cli-example.json": (
        ImportOptions(aws_topology=s("aws-describe-instance-topology-cli-example.json")),
        {"nodes": 4, "gpus": 0, "leaves": 3},
    ),
    "aws-describe-instance-topology-userguide-example1.json": (
        ImportOptions(aws_topology=s("aws-describe-instance-topology-userguide-example1.json")),
        {"nodes": 2, "gpus": 0, "leaves": 2},
    ),
    "nccl-tests-allreduce-gcp-a3mega-h100-2node.txt": (
        ImportOptions(
            topo=(f"ztan-mig-235z={H200}", f"ztan-mig-gq73={H200}"),
            nccl_tests=(s("nccl-tests-allreduce-gcp-a3mega-h100-2node.txt"),),
            gpu_product="NVIDIA-H100-80GB-HBM3",
        ),
        {"nodes": 2, "gpus": 16, "overrides": {"leaf/default": 42.352}},  # busbw 338.82 GB/s over 8 rails
    ),
    "slurm-topology-tree.conf": (
        ImportOptions(slurm=s("slurm-topology-tree.conf")),
        {"nodes": 18, "gpus": 0, "leaves": 3},
    ),
    "slurm-topology-block.conf": (
        ImportOptions(slurm=s("slurm-topology-block.conf")),
        {"nodes": 128, "gpus": 0, "leaves": 4},
    ),
    "slurm-topology.yaml": (ImportOptions(slurm=s("slurm-topology.yaml")), {"nodes": 4, "gpus": 0, "leaves": 2}),
    "slurm-topology-doc-multiparent.conf": (  # every leaf switch under four parents (Slurm's own example)
        ImportOptions(slurm=s("slurm-topology-doc-multiparent.conf")),
        {"nodes": 16, "gpus": 0, "leaves": 4},
    ),
    "topograph-generated-slurm-block.conf": (
        ImportOptions(
            slurm=s("topograph-generated-slurm-block.conf"), topo=(f"srv*={H200}",), gpu_product="NVIDIA-H200"
        ),
        {"nodes": 96, "gpus": 768, "leaves": 12, "nvlink-domains": 12},
    ),
    "topograph-generated-slurm-tree.conf": (
        ImportOptions(slurm=s("topograph-generated-slurm-tree.conf")),
        {"nodes": 96, "gpus": 0, "leaves": 12},
    ),
    # The slice's node is given its hardware by a 2-GPU PCIe A100 matrix; the slice adds GPU 0's identifiers.
    "dra-resourceslices-nvidia-driver-docs.json": (
        ImportOptions(
            topo=(f"ipp1-0033={s('a100-pcie-2gpu-topo-m.txt')}",),
            resourceslices=s("dra-resourceslices-nvidia-driver-docs.json"),
        ),
        {"nodes": 1, "gpus": 2, "uuids": 1},
    ),
}

# Samples that are not a topology by nature, with the option they would be given to and the reason.
REFUSED: dict[str, tuple[ImportOptions, str]] = {
    "azure-ncv4-graph.xml": (
        ImportOptions(nccl_xml=(str(s("azure-ncv4-graph.xml")),)),
        "azure-ncv4-graph.xml:2: this is an NCCL graph file (<graphs>: the rings and trees NCCL searched, "
        "NCCL_GRAPH_FILE), not a topology",
    ),
    "aws-g5.48xl-topo.xml": (
        ImportOptions(nccl_xml=(str(s("aws-g5.48xl-topo.xml")),)),
        "aws-g5.48xl-topo.xml:13: no GPU found: its 9 <pci> device(s) carry no class attribute",
    ),
    "nccl-tests-header-old-vs-new-aws-parallelcluster.txt": (
        ImportOptions(topo=(f"n={H200}",), nccl_tests=(s("nccl-tests-header-old-vs-new-aws-parallelcluster.txt"),)),
        "nccl-tests-header-old-vs-new-aws-parallelcluster.txt:12: the results table has no rows (every line is a "
        "'#' comment: is the output quoted inside another file?)",
    ),
    # Label catalogues (documentation): their labels are imported in test_import_k8s.py; as a node list, no.
    "gfd-labels-table.md": (
        ImportOptions(nodes=s("gfd-labels-table.md")),
        "gfd-labels-table.md:1: not valid JSON: Expecting value (column 1)",
    ),
    "topograph-labels.txt": (
        ImportOptions(nodes=s("topograph-labels.txt")),
        "topograph-labels.txt:1: not valid JSON: Expecting value (column 1)",
    ),
}


def test_every_sample_is_covered() -> None:
    names = {p.name for p in SAMPLES.iterdir()} - {"README.md"}
    assert names == set(IMPORTS) | set(REFUSED)


@pytest.mark.parametrize("name", sorted(IMPORTS))
def test_sample_imports(name: str) -> None:
    options, facts = IMPORTS[name]
    result = import_cluster(options)
    topo = result.topology
    assert len(topo.nodes) == facts["nodes"]
    assert sum(len(n.gpus) for n in topo.nodes) == facts["gpus"]
    for cname, (interconnect, sockets, nvlink, nics) in facts.get("classes", {}).items():
        cls = result.spec.node_classes[cname]
        assert (cls.interconnect, cls.nvlink_gbps) == (interconnect, nvlink), cname
        members = [n for n in topo.nodes if result.spec.nodes[n.index].node_class == cname]
        assert {len(n.sockets) for n in members} == {sockets}
        assert (len(cls.nics) if cls.nics is not None else None) == nics
    if "leaves" in facts:
        assert len({n.leaf for n in result.spec.nodes}) == facts["leaves"]
    if "nvlink-domains" in facts:
        assert len({n.nvlink_domain for n in result.spec.nodes}) == facts["nvlink-domains"]
    if "uuids" in facts:
        assert sum(1 for n in topo.nodes for g in n.gpus if g.uuid) == facts["uuids"]
    if "overrides" in facts:
        assert {o.domain: o.bandwidth_gbps for o in result.spec.overrides} == facts["overrides"]


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_sample_refused_with_the_reason(name: str) -> None:
    options, message = REFUSED[name]
    with pytest.raises(InputError) as info:
        import_cluster(options)
    text = re.sub(r"^\S*/", "", str(info.value))  # the path as given; compare from the file name on
    assert text.startswith(message), text
