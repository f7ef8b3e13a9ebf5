"""``placer cluster import`` and ``placer cluster show`` through a real subprocess: the cluster YAML goes to
--out or stdout (and loads), the summary to stderr, bad input exits 2 with the file and reason and no
traceback, and the same inputs give the same bytes."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from cli_in_process import run
from test_cli import run as run_process

from placer.model.load import load_cluster

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "tests" / "data" / "samples"


def test_import_writes_the_file_and_the_summary_goes_to_stderr(tmp_path: Path) -> None:
    out = tmp_path / "cluster.yaml"
    args = [
        "cluster", "import",
        "--slurm", SAMPLES / "topograph-generated-slurm-block.conf",
        "--topo", f"srv*={SAMPLES / 'hgx-h200-12nic-topo-m.txt'}",
        "--gpu-product", "NVIDIA-H200", "--gpu-memory-gib", "141",
        "--name", "gb-lab",
    ]  # fmt: skip
    proc = run(*args, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    for fragment in (
        "slurm topology",
        "block: 96 nodes",
        "768: 0 busy, 768 free",
        "NVIDIA-H200",
        "12 named, 12 in the solver's tree",
        "where each field came from",
        "BlockSizes=8,16,32: aggregated blocks have no placer level",
        f"wrote {out}",
    ):
        assert fragment in proc.stderr, fragment
    spec = load_cluster(out)
    assert spec.metadata.name == "gb-lab" and len(spec.nodes) == 96
    again = run_process(*args, "-q")  # another process: another hash seed
    assert again.returncode == 0 and again.stderr == ""
    assert again.stdout == out.read_text()  # same inputs, same bytes; without -o the YAML is on stdout


def test_show_prints_a_summary_and_json(tmp_path: Path) -> None:
    out = tmp_path / "c.yaml"
    assert (
        run("cluster", "import", "--nccl-xml", f"p4d={SAMPLES / 'aws-p4d-24xl-topo.xml'}", "-q", "-o", out).returncode
        == 0
    )
    table = run("cluster", "show", out)
    assert table.returncode == 0 and "nvidia-a100-sxm4-40gb-x8" in table.stdout and "8: 0 busy, 8 free" in table.stdout
    data = json.loads(run("cluster", "show", out, "--json").stdout)
    assert (data["nodes"], data["gpus"], data["gpusByProduct"]) == (1, 8, {"NVIDIA-A100-SXM4-40GB": 8})
    assert data["classes"][0]["nics"] == 4 and "fabric.network.railGBps" in data["defaults"]
    fixture = json.loads(
        run("cluster", "show", ROOT / "fixtures" / "clusters" / "gb200-nvl72-1008.yaml", "--json").stdout
    )
    assert fixture["domainsInTree"]["nvlink-domain"] == 14 and fixture["gpus"] == 1008


def test_show_counts_gpus_of_cordoned_nodes_free_per_product_and_every_defaulted_spine_field(tmp_path: Path) -> None:
    """'GPUs 24: 3 busy, 13 free' left a cordoned node's 8 GPUs out of every figure; per product only totals
    were given; a spine given without latencyUs (which explain then takes from the network kind) was not
    listed as left at its default."""
    path = tmp_path / "c.yaml"
    path.write_text(
        "apiVersion: placer.dev/v1alpha1\nkind: Cluster\nmetadata: {name: tiny}\n"
        "fabric: {network: {kind: ethernet, railGBps: 12.5, railsPerNode: 8, latencyUs: 50},\n"
        "         spine: {oversubscription: 2}}\n"
        "nodeClasses:\n  dgx: {gpus: {count: 8, product: NVIDIA-H100-80GB-HBM3, memoryGiB: 80}}\n"
        "  a100: {gpus: {count: 8, product: NVIDIA-A100-SXM4-80GB, memoryGiB: 80}}\n"
        "nodes:\n  - {name: n1, class: dgx, rack: r1, leaf: l1, busy: [0, 1]}\n"
        "  - {name: n2, class: dgx, rack: r1, leaf: l1, schedulable: false}\n"
        "  - {name: n3, class: a100, rack: r2, leaf: l2, busy: [7]}\n"
    )
    table = run("cluster", "show", path)
    assert table.returncode == 0, table.stderr
    assert "24: 3 busy, 13 free, 8 on unschedulable nodes" in table.stdout
    data = json.loads(run("cluster", "show", path, "--json").stdout)
    assert (data["apiVersion"], data["kind"]) == ("placer.dev/v1alpha1", "ClusterSummary")
    assert data["busyGpus"] + data["freeGpus"] + data["unschedulableGpus"] == data["gpus"] == 24
    assert data["freeGpusByProduct"] == {"NVIDIA-A100-SXM4-80GB": 7, "NVIDIA-H100-80GB-HBM3": 6}
    assert {c["name"]: c["gpusPerNode"] for c in data["classes"]} == {"a100": 8, "dgx": 8}
    assert data["domainsInTree"]["nvlink-domain"] >= 0  # level names are data: they keep their spelling
    snake = [k for k in data if "_" in k] + [k for c in data["classes"] for k in c if "_" in k]
    assert snake == []
    assert "fabric.spine.latencyUs" in data["defaults"] and "fabric.spine.oversubscription" not in data["defaults"]


def test_bad_input_exits_2_with_the_reason_and_nothing_on_stdout(tmp_path: Path) -> None:
    proc = run("cluster", "import", "--nccl-xml", SAMPLES / "azure-ncv4-graph.xml")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"error: {SAMPLES / 'azure-ncv4-graph.xml'}:2: this is an NCCL graph file")
    strict = run(
        "cluster", "import", "--strict",
        "--nodes", SAMPLES / "k8s-gpu-node-kubectl-get-nodes.json",
        "--topo", f"nori={SAMPLES / 'a100-pcie-2gpu-topo-m.txt'}",
    )  # fmt: skip
    assert strict.returncode == 2 and "conflicting sources (--strict)" in strict.stderr and strict.stdout == ""
    missing = run("cluster", "show", tmp_path / "nope.yaml")
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_show_reads_what_import_printed(tmp_path: Path) -> None:
    proc = run("cluster", "import", "--nodes", SAMPLES / "k8s-gpu-node-kubectl-get-nodes.json", "-q")
    assert proc.returncode == 0
    doc = yaml.safe_load(proc.stdout)
    assert doc["nodes"] == [
        {
            "name": "nori",
            "class": "nvidia-a16-4q-x1",
            "labels": {
                "kubernetes.io/hostname": "nori",
                "node.kubernetes.io/instance-type": "rke2",
                "nvidia.com/gpu.product": "NVIDIA-A16-4Q",
            },
        }
    ]
