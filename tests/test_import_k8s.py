"""Kubernetes: the real kubectl node list, the GFD label catalogue, the five topograph label schemes, the EKS
topology labels, and pods holding GPUs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from placer.importers.k8s_nodes import (
    CLIQUE,
    MEMORY_MIB,
    PRODUCT,
    domains_from_labels,
    kept_labels,
    label_scheme,
    parse_nodes,
)
from placer.importers.k8s_pods import parse_pods
from placer.model.errors import InputError

SAMPLES = Path(__file__).resolve().parent / "data" / "samples"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def node_list(nodes: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes})


def node(name: str, labels: dict[str, str], gpus: int | None = 8, allocatable: int | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {
        "capacity": {"cpu": "224", "memory": "2Ti"},
        "allocatable": {"cpu": "220", "memory": "1900Gi"},
    }
    if gpus is not None:
        status["capacity"]["nvidia.com/gpu"] = str(gpus)
        status["allocatable"]["nvidia.com/gpu"] = str(gpus if allocatable is None else allocatable)
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}, "status": status}


def test_real_kubectl_list_one_vgpu_node_with_gfd_labels() -> None:
    found = parse_nodes(sample("k8s-gpu-node-kubectl-get-nodes.json"), "nodes.json")
    assert found.shape == "List" and found.notes == ()
    (nori,) = found.nodes
    assert (nori.name, nori.gpu_capacity, nori.gpu_allocatable) == ("nori", 1, 1)
    assert (nori.cpu, nori.memory) == ("2", "16367668Ki")
    assert (nori.product, nori.memory_gib, nori.sm) == ("NVIDIA-A16-4Q", 4.0, 86)  # 4096 MiB; compute 8.6
    assert nori.schedulable and nori.taints == ()
    assert nori.provider_id == "rke2://nori" and nori.instance_id is None
    assert kept_labels(nori, label_scheme()) == {
        "kubernetes.io/hostname": "nori",
        "node.kubernetes.io/instance-type": "rke2",
        "nvidia.com/gpu.product": "NVIDIA-A16-4Q",
    }


def test_single_node_document_and_yaml_hint() -> None:
    one = json.loads(sample("k8s-gpu-node-kubectl-get-nodes.json"))["items"][0]
    found = parse_nodes(json.dumps(one), "node.json")
    assert found.shape == "Node" and [n.name for n in found.nodes] == ["nori"]
    with pytest.raises(InputError, match=r"^n.yaml:1: this looks like YAML; run kubectl get nodes -o json$"):
        parse_nodes("apiVersion: v1\nkind: List\n", "n.yaml")


def gfd_examples() -> dict[str, str]:
    """Label -> example value, from the catalogue's table rows."""
    rows = re.findall(r"^\| (nvidia\.com/\S+)\s*\|[^|]*\|[^|]*\|\s*(\S+)\s*\|$", sample("gfd-labels-table.md"), re.M)
    return dict(rows)


def test_gfd_catalogue_examples_give_product_memory_compute_and_nvlink_domain() -> None:
    examples = gfd_examples()
    assert {PRODUCT, MEMORY_MIB, CLIQUE, "nvidia.com/gpu.compute.major", "nvidia.com/gpu.count"} <= set(examples)
    found = parse_nodes(node_list([node("gpu-1", examples, gpus=int(examples["nvidia.com/gpu.count"]))]), "n.json")
    (n,) = found.nodes
    # Tesla-T4, 15360 MiB = 15 GiB, compute 7.5, clique "7b968a6d-....1" names the NVLink domain.
    assert (n.product, n.memory_gib, n.sm, n.gpu_capacity) == ("Tesla-T4", 15.0, 75, 2)
    domains = domains_from_labels(list(found.nodes), label_scheme(), "n.json").domains
    assert domains == {"gpu-1": {"nvlink-domain": "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1"}}


def topograph_eras() -> dict[int, dict[str, str]]:
    eras: dict[int, dict[str, str]] = {}
    era = 0
    for line in sample("topograph-labels.txt").splitlines():
        if m := re.match(r"# --- era (\d)", line):
            era = int(m.group(1))
        elif m := re.match(r"^\s+(\S+): (\S+)$", line):
            eras.setdefault(era, {})[m.group(1)] = m.group(2)
    return eras


@pytest.mark.parametrize(
    ("era", "preset"),
    [(1, "topograph-v1"), (2, "topograph-v2"), (3, "topograph-v3"), (4, "topograph-v4"), (5, "topograph-v5")],
)
def test_each_topograph_label_generation_gives_nvlink_domain_and_leaf(era: int, preset: str) -> None:
    labels = topograph_eras()[era]
    # Two nodes of the documented example, a third in another NVLink domain and leaf, a fourth in another
    # spine tier: the docs' values are nvl1 (accelerator) and s1 (lowest switch tier).
    other = {
        k: (v.replace("nvl1", "nvl2").replace("s1", "s9") if "s2" not in v and "s3" not in v else v)
        for k, v in labels.items()
    }
    upper = {k: (v.replace("s2", "s7") if v == "s2" else v) for k, v in labels.items()}
    nodes = [node("a", labels), node("b", labels), node("c", other), node("d", upper)]
    found = parse_nodes(node_list(nodes), "n.json")
    for scheme in (label_scheme(preset), label_scheme("auto")):
        result = domains_from_labels(list(found.nodes), scheme, "n.json")
        assert result.domains["a"] == {"nvlink-domain": "nvl1", "leaf": "s1"}
        assert result.domains["c"] == {"nvlink-domain": "nvl2", "leaf": "s9"}
        assert result.domains["d"] == {"nvlink-domain": "nvl1", "leaf": "s1"}
        # The spine tier that differs (s2 vs s7) has no placer level: reported, kept as a label.
        assert any("has 2 values: placer has no level for that tier" in n.text for n in result.notes)
        assert set(labels) <= set(kept_labels(found.nodes[0], scheme))


def test_eks_label_dump_leaf_is_the_lowest_network_layer() -> None:
    found = parse_nodes(sample("aws-eks-node-topology-labels-aws-ofi-nccl.json"), "eks.json")
    assert found.shape == "label dump" and len(found.nodes) == 3
    assert [n.instance_id for n in found.nodes] == ["i-1111111111example", "i-2222222222example", "i-3333333333example"]
    assert all(n.gpu_capacity is None for n in found.nodes)
    result = domains_from_labels(list(found.nodes), label_scheme(), "eks.json")
    assert [d["leaf"] for d in result.domains.values()] == [
        "nn-3333333333example",
        "nn-6666666666example",
        "nn-8888888888example",
    ]
    assert result.keys_used["leaf"] == {"topology.k8s.aws/network-node-layer-3": 3}
    # Layers 1 and 2 differ between the nodes (nn-1111/nn-4444, ...): reported.
    assert sum("topology.k8s.aws/network-node-layer" in n.text for n in result.notes) == 2
    zone = domains_from_labels(list(found.nodes), label_scheme("zone"), "eks.json")
    assert [d["leaf"] for d in zone.domains.values()] == ["us-west-2a", "us-west-2b", "us-west-2b"]


def test_gke_and_custom_label_keys() -> None:
    labels = {
        "cloud.google.com/gce-topology-block": "b1",
        "cloud.google.com/gce-topology-subblock": "sb2",
        "cloud.google.com/gce-topology-host": "h3",
        "example.com/rack": "r9",
    }
    found = parse_nodes(node_list([node("g", labels)]), "n.json")
    assert domains_from_labels(list(found.nodes), label_scheme("gke"), "n").domains["g"] == {
        "rack": "sb2",
        "leaf": "b1",
    }
    custom = label_scheme("gke", {"rack": ["example.com/rack"], "leaf": [""]})
    assert domains_from_labels(list(found.nodes), custom, "n").domains["g"] == {"rack": "r9"}
    with pytest.raises(ValueError, match="unknown label preset 'azure'"):
        label_scheme("azure")
    with pytest.raises(ValueError, match="level must be one of nvlink-domain, rack, leaf"):
        label_scheme("auto", {"spine": ["x"]})


def test_cordoned_not_ready_tainted_and_unhealthy_gpus() -> None:
    cordoned = node("c", {}) | {
        "spec": {"unschedulable": True, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}
    }
    not_ready = node("r", {})
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    found = parse_nodes(
        node_list([cordoned, not_ready, node("u", {}, gpus=8, allocatable=7), node("cpu", {}, gpus=None)]), "n"
    )
    c, r, u, cpu = found.nodes
    assert (c.schedulable, c.why_unschedulable, c.taints) == (
        False,
        "cordoned (spec.unschedulable)",
        ("k=v:NoSchedule",),
    )
    assert (r.schedulable, r.why_unschedulable) == (False, "not Ready")
    assert (u.gpu_capacity, u.gpu_allocatable) == (8, 7)
    assert cpu.gpu_capacity is None and cpu.cpu == "220"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("[1, 2]", "expected kubectl get nodes -o json output (kind List or Node), but the file holds a JSON list"),
        ('{"kind": "Pod"}', "expected kubectl get nodes -o json output (kind List or Node), got 'Pod'"),
        (
            '{"kind": "List", "items": [{"metadata": {"name": "Bad_Name"}}]}',
            "items[0].metadata.name: expected a node name (DNS-1123 subdomain), got 'Bad_Name'",
        ),
        (
            '{"kind": "List", "items": [{"metadata": {"labels": {}}}]}',
            "items[0].metadata.name: expected a node name (DNS-1123 subdomain), but it is missing or null",
        ),
        (
            '{"kind": "List", "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "a"}}]}',
            "node 'a' appears twice",
        ),
        ('{"kind": "List",\n "items": [}', "n.json:2: not valid JSON"),
        ("[" * 100_000, "n.json: not usable JSON: nested too deeply"),
    ],
)
def test_bad_node_lists(doc: str, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        parse_nodes(doc, "n.json")


def pod(name: str, node_name: str | None, gpus: int = 0, phase: str = "Running", **extra: Any) -> dict[str, Any]:
    resources = (
        {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": "500m", "memory": "1Gi"}}
        if gpus
        else {"requests": {"cpu": "100m", "memory": "128Mi"}}
    )
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": resources}]}
    if node_name:
        spec["nodeName"] = node_name
    meta: dict[str, Any] = {"name": name, "namespace": "ml"}
    if "annotations" in extra:
        meta["annotations"] = extra.pop("annotations")
    spec.update(extra)
    return {"kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_pods_bound_and_running_hold_gpus_cpu_and_memory() -> None:
    items = [
        pod("train", "nori", gpus=2),
        pod("placed", "nori", gpus=2, annotations={"placer.dev/gpus": "3,5"}),
        pod("done", "nori", gpus=4, phase="Succeeded"),
        pod("failed", "nori", gpus=4, phase="Failed"),
        pod("waiting", None, gpus=1, phase="Pending"),
        pod(
            "init-heavy",
            "other",
            initContainers=[{"name": "i", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}],
        ),
        pod(
            "mig", "other", gpus=0, containers=[{"name": "m", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]
        ),
    ]
    found = parse_pods(json.dumps({"kind": "List", "items": items}), "pods.json")
    assert (found.unbound, found.finished) == (1, 2)
    by_name = {u.pod: u for u in found.usages}
    assert (by_name["ml/train"].gpus, by_name["ml/train"].gpu_indices, by_name["ml/train"].cpu_m) == (2, None, 500)
    assert by_name["ml/placed"].gpu_indices == (3, 5)
    # max(sum of containers 100m/128Mi, the init container 2/4Gi) = 2 cores, 4 GiB.
    assert (by_name["ml/init-heavy"].cpu_m, by_name["ml/init-heavy"].memory_bytes) == (2000, 4 * 2**30)
    assert [n.text for n in found.notes] == [
        "resource 'nvidia.com/mig-1g.10gb' (MIG or another device) is not modelled"
    ]


def test_pod_requests_that_are_not_quantities_are_noted_not_fatal() -> None:
    bad = pod("bad", "nori", gpus=1)
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    half = pod("half", "nori")
    half["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "0.5"}}
    found = parse_pods(json.dumps({"kind": "List", "items": [bad, half]}), "p.json")
    assert found.usages == ()
    assert [n.text.split(":")[0] for n in found.notes] == ["pod 'ml/bad'", "pod 'ml/half'"]
