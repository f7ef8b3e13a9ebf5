"""``--target``: golden manifests per target and bundled spec, every object accepted by current upstream (the
vendored CRDs, CEL rules and webhook rules of tests/k8s_acceptance.py; tests/test_acceptance.py covers every
fixture pair and the oldest supported releases), and a coherent object graph: every engine pod in exactly
one gang, the gang's minimum equal to a complete replica (Grove: one instance per pool, by design), every
referenced name present, and node affinity admitting exactly the nodes placer chose.
Regenerate the golden files with PLACER_UPDATE_GOLDEN=1."""

from __future__ import annotations

import json
import os
import string
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from cli_in_process import run
from hypothesis import given, settings
from hypothesis import strategies as st
from k8s_acceptance import assert_accepted, made_pods
from test_dra_ids import with_gpu_ids

from placer.emit.manifests import build_manifests, placement_text, to_json_list, to_yaml
from placer.emit.readback import load_placed
from placer.emit.targets import TARGETS
from placer.explain.explanation import explain_placement, to_json
from placer.model.errors import InputError
from placer.model.load import load_cluster, load_spec
from placer.pipeline import verify_placement
from placer.solver.problem import build_problem
from placer.solver.solve import SolveOptions, solve
from placer.topology.build import build_topology

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "targets"
CASES = [
    ("aggregated-tp8", "small-mixed"),
    ("llama-70b-disagg", "dgx-h100-1024"),
    ("llama-70b-disagg", "gb200-nvl72-1008"),
    ("tp16-multinode", "dgx-h100-1024"),
]
CLUSTER_SCOPED = {("kai.scheduler/v1alpha1", "Topology"), ("grove.io/v1alpha1", "ClusterTopologyBinding")}
HOST = "kubernetes.io/hostname"


@pytest.fixture(scope="module", params=CASES, ids=["/".join(c) for c in CASES])
def solved(request):
    spec = load_spec(ROOT / "fixtures" / "specs" / f"{request.param[0]}.yaml")
    # GPU uuids and bus ids as a ResourceSlice import records them: what --target dra selects by.
    topo = build_topology(with_gpu_ids(load_cluster(ROOT / "fixtures" / "clusters" / f"{request.param[1]}.yaml")))
    placement = solve(build_problem(spec, topo), SolveOptions())
    report = verify_placement(spec, topo, placement)
    docs = {}
    for t in TARGETS:
        try:
            docs[t] = build_manifests(spec, topo, placement, report, target=t)
        except InputError:  # dynamo refuses a pool whose pods differ in GPU count (GB200 trays; test_dynamo.py)
            if t != "dynamo" or request.param[1] != "gb200-nvl72-1008":
                raise
    return request.param, spec, topo, placement, docs


def test_golden_manifests(solved):
    case, *_, docs = solved
    for target, built in docs.items():
        path = GOLDEN / target / f"{case[0]}-{case[1]}.yaml"
        got = to_yaml(built)
        if os.environ.get("PLACER_UPDATE_GOLDEN"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(got)
        assert got == path.read_text(), f"{target}: {path} differs (PLACER_UPDATE_GOLDEN=1 regenerates)"
        assert list(yaml.safe_load_all(got)) == built


def test_the_python_emitter_writes_the_same_bytes(solved, monkeypatch):
    """to_yaml uses libyaml's emitter where PyYAML has it and the Python one where not: the same manifests
    must give the same bytes either way."""
    import placer.emit.manifests as manifests

    *_, docs = solved
    with_libyaml = {target: to_yaml(built) for target, built in docs.items()}
    monkeypatch.setattr(manifests, "_FastDumper", manifests._PlainDumper)
    assert {target: to_yaml(built) for target, built in docs.items()} == with_libyaml


_TEXT = (
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
    | st.text(st.sampled_from("ab -:#'\"\\\n\té\x85\u2028\U00010000"), min_size=900, max_size=1500)
    | st.text(st.sampled_from("ab -:#'\""), min_size=60, max_size=300)  # printable ASCII: libyaml's, folded at 80
)
# Keys built from st.text rather than st.from_regex: the same strings, drawn some 20x faster.
_NAME = string.ascii_letters + string.digits + "._-"
_LOWER = string.ascii_lowercase + string.digits
_KEY = (
    st.builds(  # label keys, env names, fields: [A-Za-z0-9._-]{1,20}(/[A-Za-z0-9._-]{1,20})?
        lambda a, b: a if b is None else f"{a}/{b}",
        st.text(_NAME, min_size=1, max_size=20),
        st.none() | st.text(_NAME, min_size=1, max_size=20),
    )
    | st.builds(  # around the emitters' simple-key limit: [a-z0-9.]{100,124}/[a-z0-9]{1,5}
        lambda a, b: f"{a}/{b}",
        st.text(_LOWER + ".", min_size=100, max_size=124),
        st.text(_LOWER, min_size=1, max_size=5),
    )
    | st.text(string.ascii_letters + "'\"", min_size=118, max_size=130)  # ... with quotes: the repr escapes them
)
_VALUE = st.recursive(
    st.one_of(
        _TEXT, st.integers(), st.booleans(), st.none(), st.floats(), st.sampled_from(["yes", "1e3", "0x1F", "~", "- a"])
    ),
    # int keys among str ones cannot be sorted: both emitters then keep the dict's order
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEY | st.integers(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEY, _VALUE, max_size=5))
def test_placement_records_are_the_same_bytes_with_or_without_libyaml(record):
    """Placement records (--placement) are written at PyYAML's default 80 columns, where both emitters fold
    long strings: libyaml's must fold them where the Python one does, or the record's bytes would depend
    on how PyYAML was built."""
    import placer.emit.manifests as manifests

    assert manifests._dump(record) == yaml.dump(
        record, Dumper=manifests._PlainDumper, sort_keys=True, default_flow_style=False
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(_KEY, _VALUE, max_size=5), max_size=3))
def test_manifests_are_the_same_bytes_with_or_without_libyaml(docs):
    """Manifests carry user text (env values, arguments, a chat template): every string must come out as the
    Python emitter writes it, long ones with newlines or non-ASCII characters included. Keys are field
    names, label keys or environment variable names, all checked at the edge (the emitters differ on keys
    no manifest can have: empty, or with control characters)."""
    import placer.emit.manifests as manifests

    python_only = "".join(
        "---\n" + yaml.dump(d, Dumper=manifests._PlainDumper, sort_keys=True, default_flow_style=False, width=1000)
        for d in docs
    )
    assert to_yaml(docs) == python_only


# ---- schemas -------------------------------------------------------------------------------------------


def validate(doc: dict) -> None:
    """Accepted on create by the project's current CRD (served version, structural schema, CEL) and webhook."""
    assert_accepted([doc])


def test_every_object_validates_against_its_schema(solved):
    *_, docs = solved
    for built in docs.values():
        for doc in built:
            validate(doc)
            meta = doc["metadata"]
            if (doc["apiVersion"], doc["kind"]) not in CLUSTER_SCOPED:
                assert meta["namespace"]
                assert meta["labels"]["app.kubernetes.io/managed-by"] == "placer"
                assert meta["labels"]["app.kubernetes.io/part-of"] and meta["labels"]["app.kubernetes.io/component"]


# ---- the object graph ----------------------------------------------------------------------------------


@dataclass
class Unit:
    """``count`` identical pods as the cluster will run them, and the object that makes them."""

    count: int
    labels: dict
    annotations: dict
    spec: dict
    owner: dict


def units(docs: list[dict]) -> list[Unit]:
    out = []
    for d in docs:
        meta = d["metadata"]
        if d["kind"] == "Pod":
            out.append(Unit(1, meta["labels"], meta.get("annotations", {}), d["spec"], d))
        elif d["kind"] in ("Deployment", "StatefulSet"):
            t = d["spec"]["template"]
            notes = t["metadata"].get("annotations", {})
            out.append(Unit(d["spec"]["replicas"], t["metadata"]["labels"], notes, t["spec"], d))
        elif d["kind"] == "LeaderWorkerSet":
            lwt = d["spec"]["leaderWorkerTemplate"]  # no leaderTemplate: the leader is made from the worker's
            made = [(lwt["workerTemplate"], lwt["size"])]
            if "leaderTemplate" in lwt:
                made = [(lwt["leaderTemplate"], 1), (lwt["workerTemplate"], lwt["size"] - 1)]
            for t, n in made:
                out.append(Unit(n, t["metadata"]["labels"], t["metadata"]["annotations"], t["spec"], d))
        elif d["kind"] == "PodCliqueSet":
            for c in d["spec"]["template"]["cliques"]:
                out.append(Unit(c["spec"]["replicas"], c["labels"], c["annotations"], c["spec"]["podSpec"], d))
        elif d["kind"] == "DynamoGraphDeployment":  # a component: replicas x nodeCount pods of one template
            for c in d["spec"]["components"]:
                t, n = c["podTemplate"], c["replicas"] * c.get("multinode", {}).get("nodeCount", 1)
                out.append(Unit(n, t["metadata"]["labels"], t["metadata"]["annotations"], t["spec"], d))
    return out


def admitted(spec: dict) -> list[str]:
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    (expr,) = term["matchExpressions"]
    assert expr["key"] == HOST and expr["operator"] == "In"
    return expr["values"]


def gang_of(target: str, u: Unit) -> str:
    if target == "kai":
        return u.annotations["pod-group-name"]
    if target == "volcano":
        return u.annotations["scheduling.k8s.io/group-name"]
    if target == "kueue":
        return u.labels["kueue.x-k8s.io/pod-group-name"]
    if target in ("grove", "dynamo"):
        return u.owner["metadata"]["name"]
    return u.labels["scheduling.x-k8s.io/pod-group"]


def test_every_engine_pod_is_in_one_gang_of_a_complete_replica(solved):
    _, spec, topo, placement, docs = solved
    for target, built in docs.items():
        engines = [u for u in units(built) if u.labels["app.kubernetes.io/component"] != "router"]
        members: Counter = Counter()
        for u in engines:
            members[gang_of(target, u)] += u.count
        expected = {
            f"{spec.metadata.name}-r{r.index}": sum(len(i.pods) for i in r.instances) for r in placement.replicas
        }
        assert dict(members) == expected, target  # each pod counted once, in its own replica's gang
        gangs = {
            d["metadata"]["name"]: d
            for d in built
            if d["kind"] in ("PodGroup", "PodCliqueSet", "DynamoGraphDeployment")
        }
        for name, pods in expected.items():
            if target == "kueue":
                totals = {
                    u.annotations["kueue.x-k8s.io/pod-group-total-count"] for u in engines if gang_of(target, u) == name
                }
                assert totals == {str(pods)}
            elif target == "grove":
                _grove_gang(gangs[name], spec)
            elif target == "dynamo":  # Grove's base gang: every component's minAvailable (default 1) replica
                assert {c["name"] for c in gangs[name]["spec"]["components"]} >= set(spec.pools)
                assert all("minAvailable" not in c for c in gangs[name]["spec"]["components"])
            else:
                assert gangs[name]["spec"]["minMember"] == pods, target


def _grove_gang(pcs: dict, spec) -> None:
    """Grove's base gang: every clique's minAvailable, every scaling group whole; one instance per pool."""
    t = pcs["spec"]["template"]
    names = [c["name"] for c in t["cliques"]]
    assert len(set(names)) == len(names)
    grouped = [n for g in t.get("podCliqueScalingGroups", []) for n in g["cliqueNames"]]
    assert len(set(grouped)) == len(grouped) and set(grouped) <= set(names)
    for c in t["cliques"]:
        assert set(c["spec"].get("startsAfter", [])) <= set(names)
        assert c["spec"]["minAvailable"] == 1
    pools_in_gang = {c["labels"].get("placer.dev/pool") for c in t["cliques"] if c["name"] not in grouped}
    pools_in_gang |= {g["name"].rsplit("-", 1)[0] for g in t.get("podCliqueScalingGroups", [])}
    assert set(spec.pools) <= pools_in_gang


def test_affinity_admits_exactly_the_chosen_nodes(solved):
    _, spec, topo, placement, docs = solved
    host = {n.name: n.labels.get(HOST, n.name) for n in topo.nodes}
    for target, built in docs.items():
        for rep in placement.replicas:
            for pool in spec.pools:
                chosen = Counter(host[p.node] for i in rep.instances if i.pool == pool for p in i.pods)
                mine = [
                    u
                    for u in units(built)
                    if u.labels.get("placer.dev/pool") == pool and u.labels["placer.dev/replica"] == str(rep.index)
                ]
                assert sum(u.count for u in mine) == sum(chosen.values()), target
                admitted_union = {h for u in mine for h in admitted(u.spec)}
                assert admitted_union == set(chosen), target
                for u in mine:  # no unit admits more nodes than it has pods to spread over, in the pinned targets
                    if target in ("coscheduling", "kai", "volcano", "dra"):
                        assert u.count == 1 and len(admitted(u.spec)) == 1
                    if target in ("lws", "grove") and u.count > 1 and "placer.dev/instance" in u.labels:
                        assert len(admitted(u.spec)) == u.count and "podAntiAffinity" in u.spec["affinity"]


def test_referenced_names_exist(solved):
    *_, docs = solved
    for target, built in docs.items():
        names = Counter((d["kind"], d["metadata"]["name"]) for d in built)
        assert max(names.values()) == 1, target  # no two objects of a kind share a name
        routers = [u for u in units(built) if u.labels["app.kubernetes.io/component"] == "router"]
        channels = {
            d["spec"]["channel"]["resourceClaimTemplate"]["name"] for d in built if d["kind"] == "ComputeDomain"
        }
        for svc in (d for d in built if d["kind"] == "Service"):
            sel = svc["spec"]["selector"].items()
            if svc["metadata"]["labels"]["app.kubernetes.io/component"] == "router":
                assert sum(u.count for u in routers if sel <= u.labels.items()) == 1, target
            else:  # a pool's headless Service selects exactly that pool's pods of that replica
                pool = svc["metadata"]["labels"]["placer.dev/pool"]
                replica = svc["metadata"]["labels"]["placer.dev/replica"]
                selected = [u for u in units(built) if sel <= u.labels.items()]
                assert selected and all(
                    u.labels["placer.dev/pool"] == pool and u.labels["placer.dev/replica"] == replica for u in selected
                ), target
        for d in built:
            pod_spec = d["spec"]["template"]["spec"] if d["kind"] == "StatefulSet" else d["spec"]
            for claim in pod_spec.get("resourceClaims", []) if d["kind"] in ("Pod", "StatefulSet") else []:
                assert ("ResourceClaimTemplate", claim["resourceClaimTemplateName"]) in names or (
                    claim["resourceClaimTemplateName"] in channels  # made by the ComputeDomain's controller
                )
            if (d["apiVersion"], d["kind"]) == ("scheduling.run.ai/v2alpha2", "PodGroup"):
                _kai_references(d, built)
            if (d["apiVersion"], d["kind"]) == ("scheduling.volcano.sh/v1beta1", "PodGroup"):
                _volcano_subgroups(d, units(built))


def _kai_references(pg: dict, built: list[dict]) -> None:
    subs = {s["name"]: s for s in pg["spec"]["subGroups"]}
    topologies = {d["metadata"]["name"] for d in built if d["kind"] == "Topology"}
    leaves = {n for n, s in subs.items() if "minMember" in s}
    assert all(s.get("parent") in (None, *subs) for s in subs.values())
    assert sum(subs[n]["minMember"] for n in leaves) == pg["spec"]["minMember"]
    constraints = [pg["spec"].get("topologyConstraint")] + [s.get("topologyConstraint") for s in subs.values()]
    assert {c["topology"] for c in constraints if c} <= topologies
    levels = {lv["nodeLabel"] for d in built if d["kind"] == "Topology" for lv in d["spec"]["levels"]}
    assert {
        c[k] for c in constraints if c for k in ("requiredTopologyLevel", "preferredTopologyLevel") if k in c
    } <= levels
    pods: Counter = Counter()
    for u in units(built):
        if u.annotations.get("pod-group-name") == pg["metadata"]["name"]:
            pods[u.labels["kai.scheduler/subgroup-name"]] += u.count
            # KAI's pod-grouper leaves the pod to this PodGroup only when the pod and its owner say so
            assert u.annotations["kai.scheduler/skip-podgrouper"] == "true"
            assert u.owner["metadata"]["annotations"]["kai.scheduler/skip-podgrouper"] == "true"
    assert dict(pods) == {n: subs[n]["minMember"] for n in leaves}


def _volcano_subgroups(pg: dict, all_units: list[Unit]) -> None:
    mine = [u for u in all_units if u.annotations.get("scheduling.k8s.io/group-name") == pg["metadata"]["name"]]
    for policy in pg["spec"]["subGroupPolicy"]:
        sel = policy["labelSelector"]["matchLabels"].items()
        groups = Counter(tuple(u.labels[k] for k in policy["matchLabelKeys"]) for u in mine if sel <= u.labels.items())
        assert len(groups) == policy["minSubGroups"] and set(groups.values()) == {policy["subGroupSize"]}


def test_kueue_podsets_follow_the_documented_rules(solved):
    *_, docs = solved
    pods = [p for p in made_pods(docs["kueue"]) if "kueue.x-k8s.io/pod-group-name" in p["metadata"]["labels"]]
    assert pods and not any(d["kind"] == "Pod" for d in docs["kueue"])  # every engine under a controller
    podsets: dict[tuple[str, str], list[dict]] = {}
    for p in pods:
        a = p["metadata"]["annotations"]
        podsets.setdefault(
            (p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"], a["kueue.x-k8s.io/role-hash"]), []
        ).append(p)
    for members in podsets.values():
        a = members[0]["metadata"]["annotations"]
        modes = [k for k in ("required", "preferred", "unconstrained") if f"kueue.x-k8s.io/podset-{k}-topology" in a]
        assert len(modes) == 1
        if "kueue.x-k8s.io/podset-slice-size" in a:
            size = int(a["kueue.x-k8s.io/podset-slice-size"])
            assert "kueue.x-k8s.io/podset-slice-required-topology" in a and 1 <= size <= len(members)
            assert len(members) % size == 0
        shape = {
            json.dumps([m["spec"]["affinity"], m["spec"]["containers"][0]["resources"]], sort_keys=True)
            for m in members
        }
        assert len(shape) == 1  # one role hash, one shape: what Kueue's PodSet template assumes
        for m in members:
            kueue_keys = {
                k: v for k, v in m["metadata"]["annotations"].items() if k.startswith("kueue.x-k8s.io/podset")
            }
            assert kueue_keys == {k: v for k, v in a.items() if k.startswith("kueue.x-k8s.io/podset")}


# ---- explain reads every target back ----------------------------------------------------------------------


def _explain_json(placed, topo) -> str:
    """What ``placer explain -o json`` prints (baselines depend on spec and cluster only, so they are left out)."""
    return json.dumps(to_json(explain_placement(placed.spec, topo, placed.placement, [])), indent=2, sort_keys=True)


def test_explain_reads_every_target_back(solved, tmp_path):
    """solve -> manifests (YAML stream and JSON List) -> explain gives what explain gives on the record."""
    _, spec, topo, placement, docs = solved
    record = tmp_path / "placed.json"
    record.write_text(placement_text(placement, record, spec))
    from_record = load_placed(record)
    expected = _explain_json(from_record, topo)
    for target, built in docs.items():
        for name, text in (("m.yaml", to_yaml(built)), ("m.json", to_json_list(built))):
            path = tmp_path / f"{target}-{name}"
            path.write_text(text)
            placed = load_placed(path)
            assert placed.source == "manifests" and placed.spec == spec, (target, name)
            assert placed.placement.replicas == from_record.placement.replicas, (target, name)
            assert placed.placement.stats == from_record.placement.stats, (target, name)
            assert _explain_json(placed, topo) == expected, (target, name)


def _built(spec_name: str) -> dict[str, list[dict]]:
    spec = load_spec(ROOT / "fixtures" / "specs" / f"{spec_name}.yaml")
    topo = build_topology(with_gpu_ids(load_cluster(ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml")))
    placement = solve(build_problem(spec, topo), SolveOptions())
    report = verify_placement(spec, topo, placement)
    return {t: build_manifests(spec, topo, placement, report, target=t) for t in TARGETS}


@pytest.fixture(scope="module")
def multinode():
    return _built("tp16-multinode") | {"disagg": _built("llama-70b-disagg")["coscheduling"]}


def _read(tmp_path, docs: list[dict]) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(to_yaml(docs))
    load_placed(path)


def _is_instance(doc: dict, pool: str, index: str) -> bool:
    labels = doc["metadata"].get("labels", {})
    return labels.get("placer.dev/pool") == pool and labels.get("placer.dev/instance") == index


def _drop(docs: list[dict], kind: str, index: int = 0) -> list[dict]:
    found = [i for i, d in enumerate(docs) if d["kind"] == kind]
    return [d for i, d in enumerate(docs) if i != found[index]]


def test_foreign_or_broken_manifests_name_the_file_and_what_is_missing(multinode, tmp_path):
    cos, kueue, grove, lws, disagg = (multinode[t] for t in ("coscheduling", "kueue", "grove", "lws", "disagg"))
    m = str(tmp_path / "m.yaml")
    foreign = [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {}}]
    with pytest.raises(
        InputError, match=rf"^{m}: no PodGroup, PodCliqueSet, StatefulSet or Pod carries the placer.dev/spec"
    ):
        _read(tmp_path, foreign)
    with pytest.raises(InputError, match=r"not manifests placer emitted"):  # the pod that carries the spec is gone
        _read(tmp_path, [d for d in kueue if "placer.dev/spec" not in d["metadata"].get("annotations", {})])
    with pytest.raises(InputError, match=r"replica 0 has decode instances \[0, 2, 3\]; the spec places 4 \(0-3\)"):
        _read(tmp_path, [d for d in disagg if not _is_instance(d, "decode", "1")])
    with pytest.raises(InputError, match=r"the gang is there but not its pods"):
        _read(tmp_path, [d for d in cos if d["kind"] != "StatefulSet"])
    bare = json.loads(json.dumps(cos))
    pod = next(d for d in bare if d["kind"] == "StatefulSet")
    del pod["metadata"]["annotations"]["placer.dev/instance-gpus"]
    with pytest.raises(
        InputError, match=rf"StatefulSet '{pod['metadata']['name']}': no placer.dev/instance-gpus annotation"
    ):
        _read(tmp_path, bare)
    with pytest.raises(InputError, match=r"replica 0 has no router object with a placer.dev/node annotation"):
        _read(tmp_path, _drop(disagg, "Deployment"))
    odd = json.loads(json.dumps(lws))
    lws_doc = next(d for d in odd if d["kind"] == "LeaderWorkerSet")
    lws_doc["metadata"]["labels"]["placer.dev/pool"] = "nope"
    with pytest.raises(InputError, match=r"LeaderWorkerSet '.*': label placer.dev/pool 'nope' is not a pool"):
        _read(tmp_path, odd)
    torn = json.loads(json.dumps(grove))
    cliques = next(d for d in torn if d["kind"] == "PodCliqueSet")["spec"]["template"]["cliques"]
    worker = next(c for c in cliques if c["name"].endswith("-p1"))
    worker["annotations"]["placer.dev/instance-gpus"] = "elsewhere:0,1,2,3,4,5,6,7"
    with pytest.raises(InputError, match=r"clique '.*-p1' puts aggregated-0 of replica 0 on other GPUs"):
        _read(tmp_path, torn)
    other = json.loads(json.dumps(cos))
    for d in other:
        notes = d["metadata"].get("annotations", {})
        if "placer.dev/spec" in notes:  # the same deployment emitted for another namespace
            changed = json.loads(notes["placer.dev/spec"])
            changed["metadata"]["namespace"] = "prod"
            notes["placer.dev/spec"] = json.dumps(changed)
    with pytest.raises(InputError, match=r"different placer.dev/spec annotations: give one placement"):
        _read(tmp_path, cos + other)


@pytest.mark.parametrize("target", [t for t in TARGETS if t != "dra"])
def test_a_token_stays_in_its_secret(target, tmp_path):
    """env valueFrom (secretKeyRef) and envFrom (secretRef) reach every engine container as references,
    accepted by upstream; no value is copied anywhere, placer's spec annotation included."""
    doc = yaml.safe_load((ROOT / "fixtures" / "specs" / "aggregated-tp8.yaml").read_text())
    template = doc["pools"]["aggregated"]["template"]
    template["env"] = [
        *template.get("env", []),
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token-secret", "key": "token"}}},
    ]
    template["envFrom"] = [{"secretRef": {"name": "engine-env", "optional": True}}]
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc))
    out = run("solve", spec, ROOT / "fixtures" / "clusters" / "small-mixed.yaml", "-q", "-t", target)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert_accepted(docs)
    engines = [c for d in docs for c in _containers(d) if _gpus(c)]
    assert engines
    for c in engines:
        assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token-secret", "key": "token"}}} in c[
            "env"
        ]
        assert c["envFrom"] == [{"secretRef": {"name": "engine-env", "optional": True}}]


def _containers(value) -> list[dict]:
    """Every container anywhere in an object (pod templates, LWS leader/worker templates, Grove cliques,
    Dynamo components)."""
    if isinstance(value, list):
        return [c for v in value for c in _containers(v)]
    if not isinstance(value, dict):
        return []
    here = (
        [c for c in value.get("containers", []) if isinstance(c, dict)]
        if isinstance(value.get("containers"), list)
        else []
    )
    return here + [c for k, v in value.items() if k != "containers" for c in _containers(v)]


def _pod_specs(value) -> list[dict]:
    """Every pod spec anywhere in an object (any dict holding a list of containers)."""
    if isinstance(value, list):
        return [p for v in value for p in _pod_specs(v)]
    if not isinstance(value, dict):
        return []
    here = [value] if isinstance(value.get("containers"), list) else []
    return here + [p for v in value.values() for p in _pod_specs(v)]


@pytest.mark.parametrize("target", [t for t in TARGETS if t != "dra"])
def test_every_engine_gets_a_memory_backed_dev_shm(target, tmp_path):
    """The runtime's /dev/shm is 64 MiB; vLLM's guide mounts a Memory emptyDir there. template.shmSize sets
    its size, '0' leaves the runtime's."""
    doc = yaml.safe_load((ROOT / "fixtures" / "specs" / "tp16-multinode.yaml").read_text())
    cluster = ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml"
    for size in ("8Gi", "0"):
        doc["pools"]["aggregated"]["template"]["shmSize"] = size
        spec = tmp_path / f"spec-{size}.yaml"
        spec.write_text(yaml.safe_dump(doc))
        out = run("solve", spec, cluster, "-q", "-t", target)
        assert out.returncode == 0, out.stderr
        docs = [d for d in yaml.safe_load_all(out.stdout) if d]
        assert_accepted(docs)
        if target == "dynamo":  # the operator mounts its own /dev/shm, sized by the component's field
            workers = [c for d in docs for c in d["spec"]["components"] if c["type"] != "frontend"]
            assert workers and all(c["sharedMemorySize"] == size for c in workers)
            assert not any("volumes" in p for d in docs for p in _pod_specs(d))
            continue
        pods = [p for d in docs for p in _pod_specs(d) if any(_gpus(c) for c in p["containers"])]
        assert pods
        for pod in pods:
            mounts = [m for c in pod["containers"] for m in c.get("volumeMounts", []) if m["mountPath"] == "/dev/shm"]
            volumes = {v["name"]: v for v in pod.get("volumes", [])}
            if size == "0":
                assert not mounts
                continue
            assert len(mounts) == 1
            assert volumes[mounts[0]["name"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": size}


def test_dynamo_workers_run_in_dynamos_runtime_image(tmp_path):
    """`python3 -m dynamo.vllm` is not in vLLM's own image: a preset engine run as a Dynamo worker (--target
    dynamo, or router.kind dynamo under any target) gets Dynamo's runtime image for its engine; an image
    that is neither vLLM's nor SGLang's upstream one (a Dynamo runtime, one built on it) stays."""
    from placer.model.engines import DYNAMO_RUNTIME

    cluster = ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml"
    disagg = ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml"
    out = run("solve", disagg, cluster, "-q", "-t", "dynamo")
    assert out.returncode == 0, out.stderr
    workers = [
        c
        for d in yaml.safe_load_all(out.stdout)
        if d
        for c in _containers(d)
        if c.get("command", [])[:2] == ["python3", "-m"]
    ]
    assert workers and {c["image"] for c in workers} == {DYNAMO_RUNTIME["vllm"]}
    doc = yaml.safe_load(disagg.read_text())
    doc["router"]["kind"] = "dynamo"
    for pool in doc["pools"].values():
        pool["template"]["image"] = "registry.example.com/team/dynamo-vllm:1.5.0-patched"
    own = tmp_path / "own.yaml"
    own.write_text(yaml.safe_dump(doc))
    kept = run("solve", own, cluster, "-q")  # coscheduling, router.kind dynamo: engines are Dynamo workers
    assert kept.returncode == 0, kept.stderr
    engines = [
        c for d in yaml.safe_load_all(kept.stdout) if d for c in _containers(d) if "dynamo.vllm" in c.get("command", [])
    ]
    assert engines and {c["image"] for c in engines} == {"registry.example.com/team/dynamo-vllm:1.5.0-patched"}


@pytest.mark.parametrize(
    ("engine", "upstream"),
    [("sglang", "lmsysorg/sglang:v0.5.5"), ("trtllm", "nvcr.io/nvidia/tensorrt-llm/release:1.1.0")],
)
def test_dynamo_workers_of_every_engine_leave_its_upstream_image(engine, upstream, tmp_path):
    """SGLang's and TensorRT-LLM's own images have no `dynamo.<engine>` module either: as Dynamo workers
    they run in Dynamo's runtime image for that engine."""
    from placer.model.engines import DYNAMO_RUNTIME

    doc = yaml.safe_load((ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml").read_text())
    for pool in doc["pools"].values():
        pool["template"] |= {"engine": engine, "image": upstream}
    doc["router"]["kind"] = "dynamo"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc))
    out = run("solve", spec, ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml", "-q", "-t", "dynamo")
    assert out.returncode == 0, out.stderr
    workers = [
        c for d in yaml.safe_load_all(out.stdout) if d for c in _containers(d) if f"dynamo.{engine}" in c["command"]
    ]
    assert workers and {c["image"] for c in workers} == {DYNAMO_RUNTIME[engine]}
    graphs = [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "DynamoGraphDeployment"]
    assert graphs and {g["spec"]["backendFramework"] for g in graphs} == {engine}


def _gpus(container: dict) -> bool:
    """An engine container: it asks for GPUs (routers and frontends do not)."""
    resources = container.get("resources", {})
    return "nvidia.com/gpu" in resources.get("limits", {}) or "nvidia.com/gpu" in resources.get("requests", {})


def _engine_envs(node) -> list[dict[str, str]]:
    """Every engine container's env, found anywhere in the objects (placer's PLACER_* variables mark them)."""
    out = []
    if isinstance(node, dict):
        env = node.get("env")
        if isinstance(env, list) and any(str(e.get("name", "")).startswith("PLACER_") for e in env):
            out.append({e["name"]: e.get("value") for e in env})
        for v in node.values():
            out += _engine_envs(v)
    elif isinstance(node, list):
        for v in node:
            out += _engine_envs(v)
    return out


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("nccl", [None, False])
def test_the_specs_nccl_env_reaches_every_engine_on_every_target(target, nccl):
    """A spec's nccl.env was dropped where placer chooses no NCCL values (coscheduling's default, --no-nccl)."""
    spec = load_spec(ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml")
    decode = spec.pools["decode"]
    template = decode.template.model_copy(
        update={"env": [*decode.template.env, type(decode.template.env[0])(name="NCCL_ALGO", value="Tree")]}
    )
    spec = spec.model_copy(
        update={
            "nccl": spec.nccl.model_copy(update={"env": {"NCCL_DEBUG": "WARN", "NCCL_ALGO": "Ring"}}),
            "pools": spec.pools | {"decode": decode.model_copy(update={"template": template})},
        }
    )
    topo = build_topology(with_gpu_ids(load_cluster(ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml")))
    placement = solve(build_problem(spec, topo), SolveOptions())
    docs = build_manifests(spec, topo, placement, verify_placement(spec, topo, placement), target=target, nccl=nccl)
    envs = _engine_envs(docs)
    assert envs and all(env["NCCL_DEBUG"] == "WARN" for env in envs)
    assert {env["NCCL_ALGO"] for env in envs} == {"Tree", "Ring"}  # the decode template's own value wins there


def _env_lists(node) -> list[list[dict]]:
    if isinstance(node, dict):
        env = node.get("env")
        own = [env] if isinstance(env, list) and any(str(e.get("name", "")).startswith("PLACER_") for e in env) else []
        return own + [x for v in node.values() for x in _env_lists(v)]
    if isinstance(node, list):
        return [x for v in node for x in _env_lists(v)]
    return []


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_an_engine_env_names_each_variable_once_when_nccl_env_repeats_a_presets(target):
    """nccl.env naming a variable the vLLM preset sets (the NIXL side-channel host) gave the engine it twice."""
    spec = load_spec(ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml")
    spec = spec.model_copy(
        update={
            "nccl": spec.nccl.model_copy(update={"env": {"VLLM_NIXL_SIDE_CHANNEL_HOST": "x", "NCCL_DEBUG": "WARN"}})
        }
    )
    topo = build_topology(with_gpu_ids(load_cluster(ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml")))
    placement = solve(build_problem(spec, topo), SolveOptions())
    docs = build_manifests(spec, topo, placement, verify_placement(spec, topo, placement), target=target)
    lists = _env_lists(docs)
    assert lists
    for env in lists:
        names = [e["name"] for e in env]
        assert len(names) == len(set(names)), names
        assert "NCCL_DEBUG" in names
        nixl = [e for e in env if e["name"] == "VLLM_NIXL_SIDE_CHANNEL_HOST"]
        assert nixl == [{"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "value": "x"}]  # the spec's, not the preset's
        # in the preset's place, before the template's entries, which may reference it as $(NAME)
        assert names.index("VLLM_NIXL_SIDE_CHANNEL_HOST") < names.index("HF_HOME")
