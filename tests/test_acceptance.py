"""What placer prints, current upstream accepts: every target's output on every fixture spec x cluster, on a
30-character and a digit-first spec name, passes the served-version, structural-schema, CEL and webhook
checks of tests/k8s_acceptance.py against the CRDs vendored in tests/data/crds/upstream/ (SOURCES names
each repository, path, commit and release). The harness itself is tested first, on small objects whose
verdict is known from the upstream source."""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from pathlib import Path

import pytest
import yaml
from k8s_acceptance import (
    apply_defaults,
    assert_accepted,
    crds,
    grove_bindings,
    grove_name_length,
    kueue_pod_groups,
    made_pods,
    problems,
    sources,
    validate_schema,
)
from test_dra_ids import with_gpu_ids

from placer.emit.manifests import build_manifests
from placer.emit.targets import TARGETS
from placer.importers.document import dump_cluster
from placer.importers.run import ImportOptions, import_cluster
from placer.model.errors import InfeasibleError, InputError
from placer.model.load import load_cluster, load_spec
from placer.pipeline import verify_placement
from placer.solver.problem import build_problem
from placer.solver.solve import SolveOptions, solve
from placer.topology.build import build_topology

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted(p.stem for p in (ROOT / "fixtures" / "specs").glob("*.yaml"))
CLUSTERS = sorted(p.stem for p in (ROOT / "fixtures" / "clusters").glob("*.yaml"))
# Fixture pairs with no placement at all, and how placer says so (nothing is emitted to check).
NOT_PLACED = {
    ("aggregated-tp8", "gb200-nvl72-1008"): InputError,  # TP8 packed in one node; GB200 trays have 4 GPUs
    ("llama-70b-disagg", "small-mixed"): InfeasibleError,  # decode needs 16 GPUs, 14 matching ones are free
    ("llama-70b-large", "dgx-h100-1024"): InfeasibleError,  # 32 whole 8-GPU NVLink domains needed, 24 free
    ("llama-70b-large", "gb200-nvl72-1008"): InfeasibleError,  # the 200 GB/s KV floor; racks join at 100
    ("llama-70b-large", "small-mixed"): InfeasibleError,  # 5 nodes, 29 free GPUs
    ("tp16-multinode", "gb200-nvl72-1008"): InfeasibleError,  # asks for H100s; the cluster has GB200s
    ("tp16-multinode", "small-mixed"): InfeasibleError,  # TP16 needs 16 GPUs, 14 matching ones are free
}


# ---- the harness on objects whose verdict is known ----------------------------------------------------


def _meta(name: str = "x", namespace: str | None = "default") -> dict:
    out: dict = {"name": name, "labels": {"app.kubernetes.io/managed-by": "placer"}}
    if namespace:
        out["namespace"] = namespace
    return out


def _pcs(name: str = "llama-r0", tc: dict | None = None, cliques: list | None = None, groups=None) -> dict:
    pod = {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}]}
    template: dict = {
        "cliques": cliques
        or [{"name": "prefill", "spec": {"roleName": "prefill", "replicas": 1, "minAvailable": 1, "podSpec": pod}}]
    }
    if tc is not None:
        template["topologyConstraint"] = tc
    if groups is not None:
        template["podCliqueScalingGroups"] = groups
    return {
        "apiVersion": "grove.io/v1alpha1",
        "kind": "PodCliqueSet",
        "metadata": _meta(name),
        "spec": {"replicas": 1, "template": template},
    }


def test_every_vendored_crd_is_listed_in_sources_with_a_commit():
    rows = sources()
    files = {r["file"] for r in rows}
    upstream = ROOT / "tests/data/crds/upstream"
    assert files == {str(p.relative_to(upstream)) for p in upstream.rglob("*.yaml")}
    assert all(len(r["commit"]) == 40 and r["repository"].count("/") == 1 for r in rows)
    kinds = {k for _, k in crds()}
    assert {"PodGroup", "Topology", "PodCliqueSet", "LeaderWorkerSet"} <= kinds


def test_harness_refuses_a_version_the_crd_does_not_serve():
    topology = {
        "apiVersion": "kai.scheduler/v1",
        "kind": "Topology",
        "metadata": {"name": "t"},
        "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]},
    }
    assert problems(topology) == [
        "Topology 't': apiVersion: kai.scheduler/v1 is not served; topologies.kai.scheduler serves ['v1alpha1']"
    ]
    assert problems(topology | {"apiVersion": "kai.scheduler/v1alpha1"}) == []


def test_harness_refuses_unknown_fields_wrong_types_and_a_namespace_on_a_cluster_scoped_kind():
    pg = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": _meta("g"),
        "spec": {"minMember": 2, "scheduleTimeoutSeconds": 60},
    }
    assert problems(pg) == []
    bad = copy.deepcopy(pg)
    bad["spec"]["minMembers"] = 2
    bad["spec"]["minMember"] = "2"
    assert problems(bad) == [
        "PodGroup 'g': spec.minMember: must be of type integer, got str",
        "PodGroup 'g': spec.minMembers: unknown field (the API server would prune it)",
    ]
    topology = {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]},
    }
    assert problems(topology) == ["Topology 't': metadata.namespace: not allowed on a cluster-scoped Topology"]


def test_harness_evaluates_cel_rules_as_on_create():
    # kai.scheduler_topologies.yaml: levels unique, hostname last; the oldSelf rule (immutability) is skipped.
    topology = {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": "t"},
        "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "rack"}]},
    }
    assert len(problems(topology)) == 1 and "spec.levels" in problems(topology)[0]
    # grove.io_podcliquesets.yaml: optionalOldSelf rule, evaluated on create with oldSelf absent.
    legacy = _pcs(tc={"packDomain": "rack", "topologyName": "t"})
    assert problems(legacy) == [
        "PodCliqueSet 'llama-r0': spec.template.topologyConstraint.packDomain: packDomain is deprecated and "
        "cannot be used on new workloads; use pack.required"
    ]
    assert problems(_pcs(tc={"pack": {"required": "rack"}, "topologyName": "t"})) == []
    assert any("pack must specify" in m for m in problems(_pcs(tc={"pack": {}, "topologyName": "t"})))


def test_harness_reads_structural_schemas_as_kubernetes_does():
    schema = {
        "type": "object",
        "properties": {
            "surge": {"x-kubernetes-int-or-string": True},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "template": {"type": "object", "x-kubernetes-embedded-resource": True, "properties": {}},
            "ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}}},
            },
            "mode": {
                "type": "string",
                "default": "hard",
                "x-kubernetes-validations": [{"rule": "self == 'hard'", "message": "only hard"}],
            },
        },
    }
    good = {"surge": "50%", "free": {"anything": [1]}, "template": {"apiVersion": "v1", "kind": "Pod"}}
    assert validate_schema(apply_defaults(good, schema), schema) == [] and good["mode"] == "hard"
    assert validate_schema({"surge": True}, schema) == ["surge: must be an integer or a string"]
    dup = {"ports": [{"name": "http"}, {"name": "http"}]}
    assert validate_schema(dup, schema) == ["ports: duplicate map keys ['name']"]
    assert validate_schema({"mode": "soft"}, schema) == ["mode: only hard"]
    assert validate_schema({"template": {"spec": {}}}, schema) == [
        "template.spec: unknown field (the API server would prune it)"
    ]


def test_harness_restates_the_grove_webhook():
    pod = {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}]}

    def clique(name: str, role: str) -> dict:
        return {"name": name, "spec": {"roleName": role, "replicas": 1, "minAvailable": 1, "podSpec": pod}}

    same_role = _pcs(cliques=[clique("a-l", "a"), clique("a-w", "a")])
    assert problems(same_role) == ["PodCliqueSet 'llama-r0': spec.template.cliques[].roleName: duplicate values ['a']"]
    # 45 = len(PodCliqueSet) + len(scaling group) + len(clique): 20 + 12 + 14 = 46 is one too many.
    assert grove_name_length("a" * 20, "b" * 12, "c" * 13) == []
    assert grove_name_length("a" * 20, "b" * 12, "c" * 14)[0].startswith("combined resource name length 46")
    no_name = _pcs(tc={"pack": {"required": "rack"}})
    assert problems(no_name) == [
        "PodCliqueSet 'llama-r0': spec.template.topologyConstraint.topologyName: required when "
        "topologyConstraint is set"
    ]
    ok = _pcs(tc={"pack": {"required": "rack"}, "topologyName": "t"})
    assert problems(ok) == []
    assert problems(ok, grove_tas=False) == [
        "PodCliqueSet 'llama-r0': spec.template.topologyConstraint: not allowed when Topology Aware Scheduling "
        "is disabled"
    ]


def test_harness_refuses_digit_first_service_and_leaderworkerset_names():
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta("70b-llama-r0-router"),
        "spec": {"selector": {"a": "b"}, "ports": [{"name": "http", "port": 8000}]},
    }
    assert problems(svc) == [
        "Service '70b-llama-r0-router': metadata.name: '70b-llama-r0-router' is not a DNS-1035 label "
        "(must start with a letter)"
    ]
    pod_template = {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}]}}
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _meta("70b-llama-r0-a-0"),
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": pod_template}},
    }
    assert [m for m in problems(lws) if "DNS-1035" in m]
    assert problems(lws | {"metadata": _meta("llama-r0-a-0")}) == []


# ---- every target, every fixture ---------------------------------------------------------------------


@cache
def _solved(spec_path: Path, cluster_name: str):
    """(spec, topology, placement, report), or the exception placer refuses the pair with."""
    spec = load_spec(spec_path)
    # GPU uuids and bus ids as a ResourceSlice import records them: what --target dra selects by.
    topo = build_topology(with_gpu_ids(load_cluster(ROOT / "fixtures" / "clusters" / f"{cluster_name}.yaml")))
    try:
        placement = solve(build_problem(spec, topo), SolveOptions(time_limit_s=20, explain=False))
    except (InputError, InfeasibleError) as exc:
        return exc
    return spec, topo, placement, verify_placement(spec, topo, placement)


def _emit(solved, target: str) -> list[dict]:
    return build_manifests(*solved, target=target)


@pytest.mark.parametrize("cluster", CLUSTERS)
@pytest.mark.parametrize("spec", SPECS)
def test_every_target_is_accepted_on_every_fixture(spec, cluster):
    solved = _solved(ROOT / "fixtures" / "specs" / f"{spec}.yaml", cluster)
    if isinstance(solved, Exception):
        assert type(solved) is NOT_PLACED.get((spec, cluster)), solved
        return
    assert (spec, cluster) not in NOT_PLACED
    _accepted(solved)


def _accepted(solved, targets=TARGETS, **kw) -> None:
    """Each object accepted, and across one target's objects: Kueue's pod-group rules, Grove's bindings."""
    for target in targets:
        try:
            docs = _emit(solved, target)
        except InputError as exc:
            # Dynamo gives a component's pods one GPU limit (test_dynamo.py); dra needs GPU uuids or bus ids,
            # which a cluster imported without ResourceSlices lacks (test_dra_ids.py)
            dynamo = target == "dynamo" and "give pools." in str(exc)
            assert dynamo or (target == "dra" and "has no gpuIds" in str(exc)), (target, str(exc))
            continue
        assert_accepted(docs, **kw)
        assert kueue_pod_groups(docs) + grove_bindings(docs) == [], target


def _renamed(tmp_path: Path, spec: str, name: str) -> Path:
    doc = yaml.safe_load((ROOT / "fixtures" / "specs" / f"{spec}.yaml").read_text())
    doc["metadata"]["name"] = name
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


NAME_30 = "llama-70b-disaggregated-servin"


@pytest.mark.parametrize(
    ("spec", "cluster"), [("llama-70b-disagg", "dgx-h100-1024"), ("tp16-multinode", "dgx-h100-1024")]
)
def test_a_30_character_name_is_accepted_or_refused_as_input_by_placer(spec, cluster, tmp_path):
    """A 30-character spec name: every target's output is accepted, or placer refuses it up front (exit 2)
    for the rule upstream would refuse it by (Grove's 45-character pod-name budget)."""
    assert len(NAME_30) == 30
    solved = _solved(_renamed(tmp_path, spec, NAME_30), cluster)
    assert not isinstance(solved, Exception)
    for target in TARGETS:
        try:
            docs = _emit(solved, target)
        except InputError as exc:
            assert target in ("grove", "dynamo") and "allows 45" in str(exc), (target, str(exc))
            continue
        assert_accepted(docs)
        assert kueue_pod_groups(docs) + grove_bindings(docs) == [], target


def test_grove_refuses_names_past_its_45_character_budget(tmp_path):
    solved = _solved(_renamed(tmp_path, "tp16-multinode", NAME_30), "dgx-h100-1024")
    with pytest.raises(InputError) as err:
        build_manifests(*solved, target="grove")
    assert str(err.value) == (
        "--target grove: Grove names pods after the PodCliqueSet, scaling group and clique, and allows 45 "
        "characters for them together; 'llama-70b-disaggregated-servin-r0' (33) + 'aggregated-0' (12) + "
        "'aggregated-0-p0' (15) = 60 (shorten metadata.name or the pool name)"
    )


def test_a_digit_first_name_is_refused_at_load(tmp_path):
    path = _renamed(tmp_path, "llama-70b-disagg", "70b-llama")
    with pytest.raises(InputError, match=r"metadata\.name.*70b-llama.*start with a letter"):
        load_spec(path)


# ---- what the README's table says each scheduler enforces natively ------------------------------------

TWO_LEAVES = """\
apiVersion: placer.dev/v1alpha1
kind: Cluster
metadata: {name: two-leaves}
nodeClasses:
  dgx-h100: {gpus: {count: 8, product: NVIDIA-H100-80GB-HBM3, memoryGiB: 80}, nvlinkGBps: 900, cpu: "224", memory: 2Ti}
nodes:
  - {name: a1, class: dgx-h100, rack: ra1, leaf: la}
  - {name: a2, class: dgx-h100, rack: ra2, leaf: la}
  - {name: b1, class: dgx-h100, rack: rb1, leaf: lb}
  - {name: b2, class: dgx-h100, rack: rb2, leaf: lb}
"""


def _tp16_pair(tmp_path: Path):
    """Two TP16 instances (2 nodes x 8 GPUs, required inside one leaf) on two leaves of two nodes each: each
    instance fills one leaf, so the role spans the spine and only a per-instance rule keeps a TP group whole."""
    doc = yaml.safe_load((ROOT / "fixtures" / "specs" / "tp16-multinode.yaml").read_text())
    doc["pools"]["aggregated"]["instances"] = 2
    spec_path = tmp_path / "pair.yaml"
    spec_path.write_text(yaml.safe_dump(doc))
    (tmp_path / "two-leaves.yaml").write_text(TWO_LEAVES)
    spec = load_spec(spec_path)
    topo = build_topology(load_cluster(tmp_path / "two-leaves.yaml"))
    placement = solve(build_problem(spec, topo), SolveOptions())
    return spec, topo, placement, verify_placement(spec, topo, placement)


def test_kueue_keeps_each_tp16_instance_of_a_pair_inside_its_leaf(tmp_path):
    """README: Kueue holds "TP group inside one domain" natively when instances are uniform (PodSet slices).
    Kueue assigns a PodSet's pods to slices by their pod-group-pod-index rank (kueue pkg/controller/tas/
    topology_ungater.go readRanksForLabels: rank = index - offset; rankToDomainID gives consecutive ranks to
    one slice domain), and each slice of podset-slice-size pods lands in one domain of the slice topology."""
    solved = _tp16_pair(tmp_path)
    spec, topo, placement, _ = solved
    leaves = {tuple(sorted({p.node[0] for p in i.pods})) for r in placement.replicas for i in r.instances}
    assert leaves == {("a",), ("b",)}  # one instance per leaf: the pair spans the spine
    docs = build_manifests(*solved, target="kueue")
    assert_accepted(docs)
    assert kueue_pod_groups(docs) == []
    pods = [d for d in made_pods(docs) if "kueue.x-k8s.io/pod-group-name" in d["metadata"]["labels"]]
    notes = pods[0]["metadata"]["annotations"]
    assert notes["kueue.x-k8s.io/podset-slice-required-topology"] == "placer.dev/leaf"
    assert notes["kueue.x-k8s.io/podset-slice-size"] == "2"
    by_rank = sorted(pods, key=lambda p: int(p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-pod-index"]))
    slices = [by_rank[k : k + 2] for k in range(0, len(by_rank), 2)]
    for piece in slices:  # each slice Kueue keeps in one leaf is exactly one TP16 instance
        assert len({p["metadata"]["labels"]["placer.dev/instance"] for p in piece}) == 1


def _solve_doc(tmp_path: Path, doc: dict, cluster_text: str = TWO_LEAVES):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(doc))
    (tmp_path / "cluster.yaml").write_text(cluster_text)
    spec = load_spec(spec_path)
    topo = build_topology(load_cluster(tmp_path / "cluster.yaml"))
    placement = solve(build_problem(spec, topo), SolveOptions())
    return spec, topo, placement, verify_placement(spec, topo, placement)


def test_kueue_groups_the_two_roles_of_an_uneven_instance(tmp_path):
    """TP12 on 8-GPU nodes: one instance of an 8-GPU and a 4-GPU pod, two Kueue roles of one pod each. They
    form a PodSet group (podset-group-name = the instance) requiring the instance's leaf, and their pod
    indices follow Kueue's group ranking: the first by name at 0, the other after it."""
    doc = yaml.safe_load((ROOT / "fixtures" / "specs" / "tp16-multinode.yaml").read_text())
    pool = doc["pools"]["aggregated"]
    pool["tensorParallel"] = 12
    del pool["nodeCount"], pool["gpusPerNode"]
    pool["template"] = {k: v for k, v in pool["template"].items() if k != "model"} | {"engine": "custom"}
    pool["template"]["args"] = ["--tensor-parallel-size", "12"]  # a custom launcher may split 8 + 4
    solved = _solve_doc(tmp_path, doc)
    docs = build_manifests(*solved, target="kueue")
    assert_accepted(docs)
    assert kueue_pod_groups(docs) == []
    engines = [d for d in made_pods(docs) if "kueue.x-k8s.io/pod-group-name" in d["metadata"]["labels"]]
    pods = {d["metadata"]["annotations"]["kueue.x-k8s.io/role-hash"]: d for d in engines}
    assert sorted(pods) == ["aggregated-g4", "aggregated-g8"]
    for role, index in (("aggregated-g4", "0"), ("aggregated-g8", "1")):
        notes = pods[role]["metadata"]["annotations"]
        assert notes["kueue.x-k8s.io/podset-group-name"] == "aggregated-0"
        assert notes["kueue.x-k8s.io/podset-required-topology"] == "placer.dev/leaf"
        assert pods[role]["metadata"]["labels"]["kueue.x-k8s.io/pod-group-pod-index"] == index


# ---- supported versions (docs/TARGETS.md) ---------------------------------------------------------------

# target -> (oldest release placer supports, the vendored CRDs of that release)
OLDEST = {
    "coscheduling": ("v0.25.7", "scheduler-plugins-v0.25.7"),  # first release with scheduling.x-k8s.io
    "kai": ("v0.15.0", "kai-scheduler-v0.15.0"),
    "volcano": ("1.12", "volcano-v1.12.0"),
    "grove": ("v0.1.0-alpha.10", "grove-v0.1.0-alpha.10"),
    "lws": ("v0.3.0", "lws-v0.3.0"),
}


@pytest.mark.parametrize("target", sorted(OLDEST))
def test_the_oldest_supported_release_accepts_what_placer_prints_for_it(target):
    for spec, cluster in (("llama-70b-disagg", "dgx-h100-1024"), ("tp16-multinode", "dgx-h100-1024")):
        solved = _solved(ROOT / "fixtures" / "specs" / f"{spec}.yaml", cluster)
        version, release = OLDEST[target]
        assert_accepted(build_manifests(*solved, target=target, target_version=version), release=release)


def test_kubernetes_1_29_accepts_the_built_in_kinds_of_every_target_but_dra():
    """DRA's resource.k8s.io/v1 is 1.34 and later; every other target's Pods, Deployments and Services (and
    the pod templates inside custom kinds) are accepted from 1.29 on."""
    for spec, cluster in (("llama-70b-disagg", "gb200-nvl72-1008"), ("tp16-multinode", "dgx-h100-1024")):
        solved = _solved(ROOT / "fixtures" / "specs" / f"{spec}.yaml", cluster)
        _accepted(solved, [t for t in TARGETS if t != "dra"], k8s_version="1.29")


def test_volcano_before_1_14_gets_no_subgroup_policy_and_would_refuse_it():
    solved = _solved(ROOT / "fixtures" / "specs" / "tp16-multinode.yaml", "dgx-h100-1024")
    newest = [d for d in build_manifests(*solved, target="volcano") if d["kind"] == "PodGroup"]
    assert all("subGroupPolicy" in d["spec"] for d in newest)
    assert problems(newest[0], release="volcano-v1.14.0") == []
    assert any("spec.subGroupPolicy: unknown field" in m for m in problems(newest[0], release="volcano-v1.12.0"))
    for version in ("1.12", "v1.13.0"):
        older = [
            d for d in build_manifests(*solved, target="volcano", target_version=version) if d["kind"] == "PodGroup"
        ]
        assert all(
            "subGroupPolicy" not in d["spec"] and "networkTopology" in d["spec"]
            for d in older
            if d["kind"] == "PodGroup"
        )


@pytest.mark.parametrize(
    ("target", "version", "message"),
    [
        (
            "volcano",
            "1.11",
            "Volcano before 1.12.0 has no networkTopology on PodGroups; placer supports Volcano 1.12.0",
        ),
        ("kai", "v0.14.0", "KAI-Scheduler before v0.15.0 has no kai.scheduler/skip-podgrouper"),
        ("grove", "v0.1.0-alpha.9", "Grove before v0.1.0-alpha.10 has no pack.required"),
        ("kueue", "0.12", "Kueue before v0.13.0 has no PodSet slices"),
        ("lws", "v0.2.0", "LeaderWorkerSet before v0.3.0 has no startupPolicy"),
        ("coscheduling", "0.24", "scheduler-plugins before v0.25 serves its PodGroup as scheduling.sigs.k8s.io"),
    ],
)
def test_a_release_older_than_supported_is_refused_naming_the_oldest(target, version, message):
    solved = _solved(ROOT / "fixtures" / "specs" / "tp16-multinode.yaml", "dgx-h100-1024")
    with pytest.raises(InputError, match=re.escape(f"--target-version {version}: {message}")):
        build_manifests(*solved, target=target, target_version=version)


# ---- constraints on the labels the cluster has -------------------------------------------------------


def _gfd_node(name: str, labels: dict[str, str]) -> dict:
    gfd = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}
    gfd |= {"nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0"}
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name} | gfd | labels},
        "status": {
            "capacity": {"cpu": "224", "memory": "2Ti", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "220", "memory": "1900Gi", "nvidia.com/gpu": "8"},
        },
    }


def test_an_imported_topograph_cluster_gets_constraints_on_topograph_keys(tmp_path):
    """Nodes labelled by topograph v1.0 (fabric.topograph.run/tier-0 = the leaf switch) imported with
    `placer cluster import`: the cluster file records that key for the leaf, and every target that names a
    level in its constraints names that key, never placer.dev/leaf."""
    leaf = {"dgx-01": "s1", "dgx-02": "s1", "dgx-03": "s2", "dgx-04": "s2"}
    nodes = [_gfd_node(n, {"fabric.topograph.run/tier-0": s}) for n, s in leaf.items()]
    nodes_json = tmp_path / "nodes.json"
    nodes_json.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
    result = import_cluster(ImportOptions(nodes=nodes_json, name="topograph-lab"))
    assert result.document["topologyLabels"] == {"leaf": "fabric.topograph.run/tier-0"}
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(dump_cluster(result.document))
    spec = load_spec(ROOT / "fixtures" / "specs" / "tp16-multinode.yaml")
    topo = build_topology(load_cluster(cluster))
    placement = solve(build_problem(spec, topo), SolveOptions())
    solved = (spec, topo, placement, verify_placement(spec, topo, placement))
    _accepted(solved)
    # dra needs GPU ids, which this import (nodes only) does not give: it refuses (test_dra_ids.py)
    out = {t: json.dumps(build_manifests(*solved, target=t)) for t in TARGETS if t != "dra"}
    assert not any("placer.dev/leaf" in text or "placer.dev/rack" in text for text in out.values())
    kai = build_manifests(*solved, target="kai")
    topology = next(d for d in kai if d["kind"] == "Topology")
    assert topology["spec"]["levels"] == [
        {"nodeLabel": "fabric.topograph.run/tier-0"},
        {"nodeLabel": "kubernetes.io/hostname"},
    ]
    group = next(d for d in kai if d["kind"] == "PodGroup")
    assert group["spec"]["topologyConstraint"]["requiredTopologyLevel"] == "fabric.topograph.run/tier-0"
    binding = next(d for d in build_manifests(*solved, target="grove") if d["kind"] == "ClusterTopologyBinding")
    assert binding["spec"]["levels"][0] == {"domain": "block", "key": "fabric.topograph.run/tier-0"}
    pod = next(d for d in build_manifests(*solved, target="kueue") if d["kind"] == "Deployment")
    assert (
        pod["spec"]["template"]["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"]
        == "fabric.topograph.run/tier-0"
    )


def test_the_cli_takes_target_version_and_refuses_an_unsupported_release():
    from test_cli import AGG, SMALL, run

    older = run("solve", AGG, SMALL, "--target", "volcano", "--target-version", "1.13")
    assert older.returncode == 0, older.stderr
    groups = [d for d in yaml.safe_load_all(older.stdout) if d and d["kind"] == "PodGroup"]
    assert groups and all("subGroupPolicy" not in g["spec"] for g in groups)
    refused = run("solve", AGG, SMALL, "--target", "volcano", "--target-version", "1.11")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "--target-version 1.11: Volcano before 1.12.0 has no networkTopology on PodGroups" in refused.stderr
    assert "solving" not in refused.stderr  # refused before any work, as is a version that is no number:
    garbage = run("solve", AGG, SMALL, "--target", "volcano", "--target-version", "garbage")
    assert (garbage.returncode, garbage.stdout) == (2, "") and "solving" not in garbage.stderr
    assert "expected a release such as 1.14" in garbage.stderr
