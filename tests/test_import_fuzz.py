"""Property tests: no input makes a parser (or the whole import) crash. Arbitrary text, text built from each
format's own vocabulary, arbitrary JSON, and real samples with random damage all end in a parsed result or an
InputError naming the file, never in another exception."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placer.importers.aws_topology import parse_instance_topology
from placer.importers.k8s_nodes import parse_nodes
from placer.importers.k8s_pods import parse_pods
from placer.importers.merge import HardwareFile, Sources
from placer.importers.nccl_tests import parse_nccl_tests
from placer.importers.nccl_xml import parse_nccl_xml
from placer.importers.run import ImportOptions, merge_sources
from placer.importers.slurm import parse_slurm
from placer.importers.topo_matrix import parse_topo_matrix
from placer.model.errors import InputError

SAMPLES = Path(__file__).resolve().parent / "data" / "samples"
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PARSERS: dict[str, Callable[[str, str], Any]] = {
    "topo": parse_topo_matrix,
    "xml": parse_nccl_xml,
    "nodes": parse_nodes,
    "pods": parse_pods,
    "nccl-tests": parse_nccl_tests,
    "slurm": parse_slurm,
    "aws": parse_instance_topology,
}
SAMPLE_OF = {
    "topo": ["hgx-h200-12nic-topo-m.txt", "legacy-k40-soc-topo-m.txt", "power9-v100-nv3-topo-m.txt"],
    "xml": ["azure-ncv4-topo.xml", "aws-p4d-24xl-topo.xml", "azure-ndv4-topo.xml"],
    "nodes": ["k8s-gpu-node-kubectl-get-nodes.json", "aws-eks-node-topology-labels-aws-ofi-nccl.json"],
    "pods": ["k8s-gpu-node-kubectl-get-nodes.json"],
    "nccl-tests": ["nccl-tests-allreduce-gcp-a3mega-h100-2node.txt"],
    "slurm": ["slurm-topology-tree.conf", "topograph-generated-slurm-block.conf", "slurm-topology.yaml"],
    "aws": ["aws-describe-instance-topology-cli-example.json"],
}


def survives(kind: str, text: str) -> Any:
    """Parse or refuse cleanly; the message starts with the file name."""
    try:
        return PARSERS[kind](text, "fuzz.in")
    except InputError as exc:
        assert str(exc).startswith("fuzz.in"), str(exc)
        return None


@FUZZ
@given(kind=st.sampled_from(sorted(PARSERS)), text=st.text(max_size=400))
def test_arbitrary_text(kind: str, text: str) -> None:
    survives(kind, text)


TOPO_WORDS = ["GPU0", "GPU1", "GPU2", "NIC0", "mlx5_0", " X ", "X", "NV12", "NV4", "SYS", "SOC", "PIX", "PXB",
              "PHB", "NODE", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID", "0-63", "N/A", "1", "", "Legend:",
              "NIC Legend:", "  NIC0: mlx5_0", "GPU", "NV18NV18"]  # fmt: skip
SEPARATORS = ["\t", "\t", "  ", " ", "\n", "\t\t"]


@st.composite
def worded(draw: st.DrawFn, words: list[str], max_words: int = 80) -> str:
    parts = draw(st.lists(st.tuples(st.sampled_from(words), st.sampled_from(SEPARATORS)), max_size=max_words))
    return "".join(w + s for w, s in parts)


@FUZZ
@given(worded(TOPO_WORDS))
def test_topo_matrix_from_its_own_vocabulary(text: str) -> None:
    survives("topo", text)


XML_TAGS = ["system", "cpu", "pci", "gpu", "nvlink", "nic", "net", "graphs", "channel"]
XML_ATTRS = ["busid", "class", "numaid", "dev", "sm", "target", "count", "tclass", "speed", "name", "vendor", "device"]
XML_VALUES = ["0", "1", "0x030200", "0x020700", "0x068000", "0x068001", "0x060400", "0000:01:00.0", "0000:02:00.0",
              "80", "90", "12", "400000", "x", "", "-1", "0x10de", "0x20b0", "99999999999999999999999"]  # fmt: skip


@st.composite
def xml_tree(draw: st.DrawFn, depth: int = 0) -> str:
    tag = draw(st.sampled_from(XML_TAGS))
    attrs = draw(st.dictionaries(st.sampled_from(XML_ATTRS), st.sampled_from(XML_VALUES), max_size=4))
    inner = "" if depth > 3 else "".join(draw(st.lists(xml_tree(depth + 1), max_size=3)))
    text = " ".join(f'{k}="{v}"' for k, v in attrs.items())
    return f"<{tag} {text}>{inner}</{tag}>"


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(xml_tree(), min_size=1, max_size=3))
def test_nccl_xml_from_its_own_vocabulary(trees: list[str]) -> None:
    survives("xml", '<system version="1">' + "".join(trees) + "</system>")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)
K8S_KEYS = ["kind", "items", "metadata", "name", "labels", "status", "capacity", "allocatable", "spec", "nodeName",
            "containers", "resources", "limits", "requests", "nvidia.com/gpu", "cpu", "memory", "phase", "Nodes",
            "Name", "Topology", "Instances", "InstanceId", "NetworkNodes", "annotations", "initContainers"]  # fmt: skip
k8s_values = st.recursive(
    st.sampled_from(
        [
            "List",
            "Node",
            "Pod",
            "Running",
            "Failed",
            "8",
            "0.5",
            "2Gi",
            "abc",
            "n1",
            "1e999999",
            "-1",
            "",
            "0,1",
            "aws:///z/i-1",
            "True",
            "NoSchedule",
            "1.2.3",
            "99999999999999Ei",
        ]
    )
    | st.integers(-3, 10)
    | st.none(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(K8S_KEYS), inner, max_size=5),
    max_leaves=40,
)


@FUZZ
@given(kind=st.sampled_from(["nodes", "pods", "aws"]), value=json_values)
def test_arbitrary_json(kind: str, value: Any) -> None:
    survives(kind, json.dumps(value))


def base_documents() -> dict[str, Any]:
    """A realistic document per JSON format: the real node list, a pod list on its node, the AWS example."""
    node = json.loads((SAMPLES / "k8s-gpu-node-kubectl-get-nodes.json").read_text())
    meta = node["items"][0]["metadata"]
    meta.pop("managedFields", None)  # places the importer never reads
    meta["annotations"] = {}
    meta["labels"] = {k: v for k, v in meta["labels"].items() if k.startswith(("nvidia.com/gpu", "kubernetes.io"))}
    node["items"][0]["status"] = {k: node["items"][0]["status"][k] for k in ("capacity", "allocatable")}
    node["items"][0]["spec"]["taints"] = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    node["items"][0]["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    node["items"].append(node["items"][0] | {"metadata": {"name": "other", "labels": {"nvidia.com/gpu.clique": "c.1"}}})
    container = {"resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "1", "memory": "1Gi"}}}
    pod = {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "annotations": {"placer.dev/gpus": "0"}},
        "spec": {
            "nodeName": "nori",
            "containers": [container],
            "initContainers": [container],
            "overhead": {"cpu": "1"},
        },
        "status": {"phase": "Running"},
    }
    return {
        "nodes": node,
        "pods": {"kind": "List", "items": [pod, pod]},
        "aws": json.loads((SAMPLES / "aws-describe-instance-topology-cli-example.json").read_text()),
    }


BASES = base_documents()


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document, as the keys and indices leading to it."""
    out = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            out += paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            out += paths(inner, (*prefix, i))
    return out


def replaced(value: Any, path: tuple[Any, ...], replacement: Any) -> Any:
    if not path:
        return replacement
    if isinstance(value, dict) and path[0] in value:
        return {**value, path[0]: replaced(value[path[0]], path[1:], replacement)}
    if isinstance(value, list) and isinstance(path[0], int) and path[0] < len(value):
        k = path[0]
        return [*value[:k], replaced(value[k], path[1:], replacement), *value[k + 1 :]]
    return value


PATHS = {kind: paths(doc) for kind, doc in BASES.items()}


NASTY: list[Any] = [None, True, 0, 5, -1, 1e300, "", "x", "1e999999", "99999999999999999999Ei", [], [1], {}, {"a": 1}]


@pytest.mark.parametrize("kind", ["nodes", "pods", "aws"])
def test_every_place_in_a_real_json_document_with_every_wrong_type(kind: str) -> None:
    """Exhaustive over single edits: each place of the document, each kind of wrong value."""
    for path in PATHS[kind]:
        for value in NASTY:
            try:
                survives(kind, json.dumps(replaced(BASES[kind], path, value)))
            except AssertionError:
                raise
            except Exception as exc:  # name the edit, not just the exception
                raise AssertionError(f"{kind}: {path} = {value!r}: {type(exc).__name__}: {exc}") from exc


@pytest.mark.parametrize("kind", ["nodes", "pods", "aws"])
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_real_json_documents_with_random_values_deep_inside(kind: str, data: st.DataObject) -> None:
    doc = BASES[kind]
    for _ in range(data.draw(st.integers(1, 3))):
        doc = replaced(doc, data.draw(st.sampled_from(PATHS[kind])), data.draw(json_values | k8s_values))
    survives(kind, json.dumps(doc))


def damage(text: str, seed: int) -> str:
    """Delete, duplicate, swap or truncate a few random spans of a real sample."""
    rnd = random.Random(seed)
    chars = list(text)
    for _ in range(rnd.randint(1, 4)):
        if not chars:
            break
        i = rnd.randrange(len(chars))
        j = min(len(chars), i + rnd.randint(1, 40))
        action = rnd.randrange(4)
        if action == 0:
            del chars[i:j]
        elif action == 1:
            chars[i:i] = chars[i:j]
        elif action == 2:
            chars[i:j] = list(rnd.choice(["\t", " ", "\n", "NV", "[", "]", "<", ">", '"', "=", "#", "-", "0", "{"]))
        else:
            del chars[i:]
    return "".join(chars)


@pytest.mark.parametrize("kind", sorted(PARSERS))
@FUZZ
@given(seed=st.integers(0, 2**32), pick=st.integers(0, 10))
def test_damaged_real_samples(kind: str, seed: int, pick: int) -> None:
    names = SAMPLE_OF[kind]
    survives(kind, damage((SAMPLES / names[pick % len(names)]).read_text(), seed))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32))
def test_whole_import_of_damaged_node_lists_and_matrices(seed: int) -> None:
    """Damaged inventory + damaged matrix, merged: a valid cluster or an InputError."""
    nodes = survives("nodes", damage((SAMPLES / "k8s-gpu-node-kubectl-get-nodes.json").read_text(), seed))
    matrix = survives("topo", damage((SAMPLES / "power9-v100-nv3-topo-m.txt").read_text(), seed + 1))
    hardware = (HardwareFile("*", matrix.to_hardware()),) if matrix is not None else ()
    if nodes is None and not hardware:
        return
    try:
        result = merge_sources(Sources(nodes=nodes, hardware=hardware), ImportOptions())
    except InputError:
        return
    assert result.spec.nodes


TOKENS = ["", "X", "NV0", "NV999", "GPU0", "N/A", "-1", "99999", "SYS SYS", "NV18NV18", "é", "\x00"]


def test_every_field_of_a_real_matrix_with_every_wrong_token() -> None:
    lines = (SAMPLES / "power9-v100-nv3-topo-m.txt").read_text().split("\n")
    for n, line in enumerate(lines[:9]):
        fields = line.split("\t")
        for k in range(len(fields)):
            for token in TOKENS:
                edited = "\t".join([*fields[:k], token, *fields[k + 1 :]])
                survives("topo", "\n".join([*lines[:n], edited, *lines[n + 1 :]]))


ATTR_VALUE = re.compile(r'(\w+)="([^"]*)"')
XML_NASTY = ["", "x", "-1", "0x", "0xffffffffffffffffffff", "99999999999999999999999", "0000:00:00.0", "&amp;"]


@pytest.mark.parametrize("name", ["azure-ncv4-topo.xml", "azure-ndv4-topo.xml"])
def test_every_attribute_of_a_real_xml_file_with_every_wrong_value(name: str) -> None:
    text = (SAMPLES / name).read_text()
    for match in ATTR_VALUE.finditer(text):
        for value in XML_NASTY:
            survives("xml", text[: match.start(2)] + value + text[match.end(2) :])
