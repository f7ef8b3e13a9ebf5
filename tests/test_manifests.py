"""Manifests: accepted by the API server (Kubernetes OpenAPI for built-ins, scheduler-plugins' published CRD
for PodGroup; tests/k8s_acceptance.py), node
affinity that admits exactly the chosen node, GPU requests equal to the GPUs placed, a complete gang, and
no way for spec values to inject fields or documents."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml
from k8s_acceptance import assert_accepted

from placer.pipeline import run_solve
from placer.solver.solve import SolveOptions

CASES = [
    ("llama-70b-disagg", "dgx-h100-1024"),
    ("llama-70b-disagg", "gb200-nvl72-1008"),
    ("aggregated-tp8", "small-mixed"),
    ("aggregated-tp8", "dgx-h100-1024"),
    ("tp16-multinode", "dgx-h100-1024"),
]


@pytest.fixture(scope="module", params=CASES, ids=["/".join(c) for c in CASES])
def solved(request):
    spec, cluster = request.param
    return run_solve(
        Path(f"fixtures/specs/{spec}.yaml"), Path(f"fixtures/clusters/{cluster}.yaml"), SolveOptions(time_limit_s=30)
    )


def test_every_document_validates(solved):
    docs = list(yaml.safe_load_all(solved.yaml()))
    assert docs == solved.manifests  # what is printed is what was built
    assert_accepted(docs)


def engine_pods(docs: list[dict]) -> list[dict]:
    """The engine pods the cluster runs: each StatefulSet's template, once per replica (every engine is one)."""
    out = []
    for d in docs:
        if d["kind"] == "StatefulSet":
            t = d["spec"]["template"]
            out += [{"metadata": t["metadata"], "spec": t["spec"]}] * d["spec"]["replicas"]
        assert d["kind"] != "Pod", "an engine must run under a controller"
    return out


def _matches(term: dict, labels: dict[str, str]) -> bool:
    for expr in term["matchExpressions"]:
        assert expr["operator"] == "In"
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def test_affinity_admits_exactly_the_chosen_node(solved):
    topo = solved.topology
    node_labels = {n.name: {"kubernetes.io/hostname": n.name, **n.labels} for n in topo.nodes}
    chosen = {}
    for rep in solved.placement.replicas:
        for inst in rep.instances:
            for j, pod in enumerate(inst.pods):
                chosen[(rep.index, inst.pool, inst.index, j)] = pod
    pods = engine_pods(solved.manifests)
    assert len(pods) == len(chosen)
    for doc in pods:
        labels = doc["metadata"]["labels"]
        key = (
            int(labels["placer.dev/replica"]),
            labels["placer.dev/pool"],
            int(labels["placer.dev/instance"]),
            int(next(e["value"] for e in doc["spec"]["containers"][0]["env"] if e["name"] == "PLACER_POD_RANK")),
        )
        terms = doc["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        admitted = [name for name, lab in node_labels.items() if any(_matches(t, lab) for t in terms)]
        assert admitted == [chosen[key].node]
        gpus = doc["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
        assert int(gpus) == len(chosen[key].gpus)
        assert doc["metadata"]["annotations"]["placer.dev/gpus"] == ",".join(map(str, chosen[key].gpus))


def test_gang_covers_every_pod(solved):
    groups = {d["metadata"]["name"]: d["spec"]["minMember"] for d in solved.manifests if d["kind"] == "PodGroup"}
    members = Counter(d["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] for d in engine_pods(solved.manifests))
    assert groups == dict(members)
    assert len(groups) == len(solved.placement.replicas)


def test_gpu_requests_fit_free_gpus_per_node(solved):
    topo = solved.topology
    asked = Counter()
    for rep in solved.placement.replicas:
        for inst in rep.instances:
            for pod in inst.pods:
                asked[pod.node] += len(pod.gpus)
    for node, count in asked.items():
        assert count <= len(topo.node_by_name(node).free_gpus)


def test_spec_values_cannot_inject_documents(tmp_path):
    spec = yaml.safe_load(Path("fixtures/specs/aggregated-tp8.yaml").read_text())
    evil = "x\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: pwned}"
    spec["pools"]["aggregated"]["template"]["args"] = [evil]
    spec["pools"]["aggregated"]["template"]["env"] = [{"name": "SAFE", "value": evil}]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = run_solve(path, Path("fixtures/clusters/small-mixed.yaml"), SolveOptions(time_limit_s=10))
    docs = list(yaml.safe_load_all(result.yaml()))
    assert "Secret" not in {d["kind"] for d in docs}
    pods = engine_pods(docs)
    assert pods and all(p["spec"]["containers"][0]["args"][-1] == evil for p in pods)  # one arg, verbatim


def test_default_target_is_coscheduling_without_nccl(solved):
    """The default output is the coscheduling target's, with no NCCL env (unchanged since before --target)."""
    from placer.emit.manifests import build_manifests

    explicit = build_manifests(solved.spec, solved.topology, solved.placement, solved.report, target="coscheduling")
    assert solved.manifests == explicit
    env = {e["name"] for d in engine_pods(explicit) for e in d["spec"]["containers"][0]["env"]}
    assert not any(n.startswith(("NCCL_", "CUDA_")) for n in env)
    assert not any("placer.dev/nccl" in d["metadata"].get("annotations", {}) for d in explicit)


ROOT_DIR = Path(__file__).resolve().parent.parent
AGG_SPEC = ROOT_DIR / "fixtures" / "specs" / "aggregated-tp8.yaml"
SMALL_CLUSTER = ROOT_DIR / "fixtures" / "clusters" / "small-mixed.yaml"


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda: run_solve(AGG_SPEC, SMALL_CLUSTER, SolveOptions(time_limit_s=5), namespace="Bad_NS"), "--namespace"),
        (lambda: run_solve(AGG_SPEC, SMALL_CLUSTER, SolveOptions(time_limit_s=5), target="nope"), "is not a --target"),
        (lambda: SolveOptions(time_limit_s=float("inf")), "time_limit_s: expected seconds, more than 0"),
        (lambda: SolveOptions(time_limit_s=-1), "time_limit_s: expected seconds, more than 0"),
        (lambda: SolveOptions(time_limit_s=float("nan")), "time_limit_s: expected seconds, more than 0"),
        (lambda: SolveOptions(workers=0), "workers: expected 1 to 64"),
        (lambda: SolveOptions(workers=1000), "workers: expected 1 to 64"),
        (lambda: SolveOptions(wall_limit_s=0), "wall_limit_s: expected seconds, more than 0 and at most 172805"),
        (lambda: SolveOptions(time_limit_s="5"), "time_limit_s: expected seconds"),
        (lambda: SolveOptions(seed=2**40), "seed: expected an integer that fits 32 bits"),
        (lambda: SolveOptions(seed="x"), "seed: expected an integer that fits 32 bits"),
    ],
    ids=[
        "namespace",
        "target",
        "inf",
        "negative",
        "nan",
        "workers",
        "many-workers",
        "wall",
        "text",
        "seed",
        "seed-text",
    ],
)
def test_the_library_refuses_bad_input_as_the_cli_does(call, said):
    """run_solve printed namespace Bad_NS into the manifests; an unknown target raised ValueError, time_limit_s
    inf an OverflowError, -1 an InfeasibleError telling to raise --time-limit; workers=0 took every core."""
    from placer.model.errors import InputError

    with pytest.raises(InputError, match=re.escape(said)):
        call()


def test_run_fleet_takes_paths_as_strings_as_run_solve_does():
    from placer.pipeline import run_fleet

    res = run_fleet([str(AGG_SPEC)], str(SMALL_CLUSTER), SolveOptions(time_limit_s=5), keep_paths=[])
    assert [p.deployment.key for p in res.fleet.placed] == ["default/llama-70b-agg"]
