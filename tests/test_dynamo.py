"""``--target dynamo``: a DynamoGraphDeployment (``nvidia.com/v1beta1``) per replica, valid against the operator's
v1beta1 API (the acceptance harness with the operator's published CRD, tests/data/crds/upstream/), with TP =
nodeCount x GPUs per pod, node sets that admit exactly the nodes placer chose, and read back by explain."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import kubernetes_validate
import pytest
from cli_in_process import run
from k8s_acceptance import assert_accepted, sources

from placer.emit.manifests import build_manifests
from placer.emit.targets import dynamo
from placer.model.errors import InputError
from placer.model.load import load_cluster, load_spec
from placer.model.spec import ServingTopology
from placer.pipeline import verify_placement
from placer.solver.problem import build_problem
from placer.solver.solve import SolveOptions, solve
from placer.topology.build import build_topology

ROOT = Path(__file__).resolve().parent.parent
CASES = [("aggregated-tp8", "small-mixed"), ("llama-70b-disagg", "dgx-h100-1024"), ("tp16-multinode", "dgx-h100-1024")]
HOST = "kubernetes.io/hostname"


def _solve(spec: ServingTopology, cluster: str):
    topo = build_topology(load_cluster(ROOT / "fixtures" / "clusters" / f"{cluster}.yaml"))
    placement = solve(build_problem(spec, topo), SolveOptions())
    return topo, placement, verify_placement(spec, topo, placement)


@pytest.fixture(scope="module", params=CASES, ids=["/".join(c) for c in CASES])
def built(request):
    spec = load_spec(ROOT / "fixtures" / "specs" / f"{request.param[0]}.yaml")
    topo, placement, report = _solve(spec, request.param[1])
    return spec, topo, placement, build_manifests(spec, topo, placement, report, target="dynamo")


def test_one_dgd_per_replica_valid_against_the_v1beta1_api(built):
    spec, _, placement, docs = built
    assert [d["kind"] for d in docs] == ["DynamoGraphDeployment"] * len(placement.replicas)
    assert_accepted(docs)  # served version, schema, CEL rules; podTemplates as Pods
    for doc in docs:
        assert doc["metadata"]["annotations"]["nvidia.com/enable-grove"] == "true"
        names = [c["name"].lower() for c in doc["spec"]["components"]]
        assert len(set(names)) == len(names)  # CEL: component names unique case-insensitively
        assert all("minAvailable" not in c for c in doc["spec"]["components"])  # CEL: minAvailable <= replicas holds
        for c in doc["spec"]["components"]:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "x"} | c["podTemplate"]["metadata"],
                "spec": c["podTemplate"]["spec"],
            }
            kubernetes_validate.validate(pod, "1.33", strict=True)
            assert [k["name"] for k in c["podTemplate"]["spec"]["containers"]] == ["main"]


def test_the_published_crd_is_what_the_harness_checks(built):
    """The vendored file is the operator's published CRD (SOURCES names its commit): its CEL rules refuse
    what the operator's API server would, so an accepted DGD is not placer agreeing with itself."""
    row = next(r for r in sources() if r["file"] == "dynamo__nvidia.com_dynamographdeployments.yaml")
    assert (row["repository"], len(row["commit"])) == ("ai-dynamo/dynamo", 40)
    doc = copy.deepcopy(built[3][0])
    first = doc["spec"]["components"][0]
    doc["spec"]["components"].append(copy.deepcopy(first) | {"name": first["name"].upper()})
    with pytest.raises(AssertionError, match="unique case-insensitively"):
        assert_accepted([doc])
    doc = copy.deepcopy(built[3][0])
    doc["spec"]["components"][0] |= {"replicas": 1, "minAvailable": 2}
    with pytest.raises(AssertionError, match="minAvailable must be less than or equal"):
        assert_accepted([doc])
    doc = copy.deepcopy(built[3][0])
    doc["spec"]["restart"] = {"id": "now"}
    with pytest.raises(AssertionError, match="restart must be unset on create"):
        assert_accepted([doc])


def test_tp_is_node_count_times_gpus_per_pod_and_the_engine_is_told(built):
    spec, _, _, docs = built
    for doc in docs:
        for c in doc["spec"]["components"]:
            if c["type"] == "frontend":
                continue
            main = c["podTemplate"]["spec"]["containers"][0]
            gpus = int(main["resources"]["limits"]["nvidia.com/gpu"])
            nodes = c.get("multinode", {}).get("nodeCount", 1)
            tp = spec.pools[c["name"]].tensor_parallel
            assert gpus * nodes == tp
            args = main.get("args", [])
            assert args[args.index("--tensor-parallel-size") + 1] == str(tp)  # vllm images in every fixture
            assert c["replicas"] == spec.pools[c["name"]].instances


def test_each_component_admits_exactly_the_nodes_placer_chose_for_its_pool(built):
    _, topo, placement, docs = built
    for rep, doc in zip(placement.replicas, docs, strict=True):
        for c in doc["spec"]["components"]:
            terms = c["podTemplate"]["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
            (expr,) = terms[0]["matchExpressions"]
            assert expr["key"] == HOST and expr["operator"] == "In"
            if c["type"] == "frontend":
                want = {topo.node_by_name(rep.router).labels.get(HOST, rep.router)}
                assert c["podTemplate"]["metadata"]["annotations"]["placer.dev/node"] == rep.router
            else:
                pods = [p for i in rep.instances if i.pool == c["name"] for p in i.pods]
                want = {topo.node_by_name(p.node).labels.get(HOST, p.node) for p in pods}
                if len(want) == len(pods) > 1:  # one pod per node: N pods on exactly N admitted nodes
                    assert "podAntiAffinity" in c["podTemplate"]["spec"]["affinity"]
            assert set(expr["values"]) == want


def test_multinode_pool_becomes_a_multinode_component():
    spec = load_spec(ROOT / "fixtures" / "specs" / "tp16-multinode.yaml")
    topo, placement, report = _solve(spec, "dgx-h100-1024")
    (doc,) = build_manifests(spec, topo, placement, report, target="dynamo")[:1]
    multi = [c for c in doc["spec"]["components"] if "multinode" in c]
    assert multi and all(c["multinode"]["nodeCount"] == 2 for c in multi)


def test_the_queue_goes_where_dynamo_reads_it():
    spec = load_spec(ROOT / "fixtures" / "specs" / "aggregated-tp8.yaml")
    data = spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    data["scheduling"] = data.get("scheduling", {}) | {"queue": "team-a"}
    queued = ServingTopology.model_validate(data)
    topo, placement, report = _solve(queued, "small-mixed")
    doc = build_manifests(queued, topo, placement, report, target="dynamo")[0]
    assert doc["metadata"]["annotations"]["nvidia.com/kai-scheduler-queue"] == "team-a"


def test_grove_name_limit_is_checked_before_the_webhook_refuses_it():
    spec = load_spec(ROOT / "fixtures" / "specs" / "tp16-multinode.yaml")
    data = spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    data["metadata"]["name"] = "a" * 30  # a 30-character spec name
    long = ServingTopology.model_validate(data)
    topo, placement, report = _solve(long, "dgx-h100-1024")
    with pytest.raises(InputError, match=r"Grove allows 45"):
        build_manifests(long, topo, placement, report, target="dynamo")


@pytest.mark.parametrize(
    ("image", "framework"),
    [
        ("vllm/vllm-openai:v0.11.0", "vllm"),
        ("nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.6.0", "sglang"),
        ("nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.6.0", "trtllm"),
        ("busybox", None),
    ],
)
def test_backend_is_read_from_the_image_name(image, framework):
    assert dynamo.backend(image)[0] == framework


def test_cli_dynamo_prints_only_manifests():
    done = run(
        "solve",
        ROOT / "fixtures" / "specs" / "aggregated-tp8.yaml",
        ROOT / "fixtures" / "clusters" / "small-mixed.yaml",
        "--target",
        "dynamo",
    )
    assert done.returncode == 0, done.stderr
    assert re.match(r"(---\n)?apiVersion: nvidia.com/v1beta1\nkind: DynamoGraphDeployment\n", done.stdout)
