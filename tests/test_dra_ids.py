"""DRA that allocates: GPU identifiers from real sources into the cluster file, and ``--target dra`` claims that
name only attributes the NVIDIA DRA driver publishes (tests/data/dra/ says which, per release, from where).

The ResourceSlice sample is assembled from the driver's documentation (tests/data/samples/README.md); where a
test needs more GPUs than it has, it copies the sample's GPU entry and changes only the name, uuid and bus id,
and says so."""

from __future__ import annotations

import copy
import json
import re
import uuid as uuidlib
from pathlib import Path

import jsonschema
import pytest
import yaml
from cli_in_process import run
from k8s_acceptance import made_pods

from placer.emit.manifests import build_manifests
from placer.emit.targets import dra
from placer.importers.resourceslices import normalize_bus_id, parse_resourceslices
from placer.importers.run import ImportOptions, import_cluster
from placer.model.cluster import ClusterSpec
from placer.model.errors import InputError
from placer.model.load import load_cluster, load_spec
from placer.pipeline import verify_placement
from placer.solver.problem import build_problem
from placer.solver.solve import SolveOptions, solve
from placer.topology.build import build_topology

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "tests" / "data" / "samples"
SLICES = SAMPLES / "dra-resourceslices-nvidia-driver-docs.json"
ATTRIBUTES = json.loads((ROOT / "tests" / "data" / "dra" / "nvidia-gpu-device-attributes.json").read_text())
CD_CRD = (
    ROOT / "tests" / "data" / "crds" / "upstream" / "dra-driver-nvidia-gpu__resource.nvidia.com_computedomains.yaml"
)
SPECS = ROOT / "fixtures" / "specs"
CLUSTERS = ROOT / "fixtures" / "clusters"


def with_gpu_ids(cluster: ClusterSpec) -> ClusterSpec:
    """The cluster as a ResourceSlice import would record it: a uuid and bus id per GPU. Synthetic values
    (uuid5 of node and index), for the synthetic fixture clusters; nodes that have ids keep them."""
    data = cluster.model_dump(mode="json", by_alias=True, exclude_none=True)
    topo = build_topology(cluster)
    for node in data["nodes"]:
        if node.get("gpuIds"):
            continue
        gpus = topo.node_by_name(node["name"]).gpus
        node["gpuIds"] = [
            {
                "index": g.index,
                "uuid": "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"{node['name']}/{g.index}")),
                "pciBusID": f"0000:{0x18 + 0x10 * g.index:02x}:00.0",
            }
            for g in gpus
        ]
    return ClusterSpec.model_validate(data)


# ---- ResourceSlices --------------------------------------------------------------------------------------


def test_the_driver_docs_slice_gives_one_gpu_with_uuid_and_bus_id_and_skips_the_mig_device():
    s = parse_resourceslices(SLICES.read_text(), str(SLICES))
    assert [(g.node, g.device, g.uuid, g.bus_id) for g in s.gpus] == [
        ("ipp1-0033", "gpu-0", "GPU-2fa81118-5a5f-aa66-7660-471eed407181", "0000:65:00.0")
    ]
    assert [n.text for n in s.notes] == ["1 device(s) of type mig are not whole NVIDIA GPUs; not used"]
    assert s.by_node()["ipp1-0033"][0].index == 0


def _slice_with(devices: list[dict]) -> str:
    doc = json.loads(SLICES.read_text())
    doc["items"][0]["spec"]["devices"] = devices
    return json.dumps(doc)


def _gpu(name: str, uuid: str, bus: str | None, **extra: dict) -> dict:
    """The sample's GPU entry with another name, uuid and bus id (and old-driver attributes in ``extra``)."""
    dev = copy.deepcopy(json.loads(SLICES.read_text())["items"][0]["spec"]["devices"][0])
    dev["name"] = name
    dev["attributes"]["uuid"]["string"] = uuid
    if bus is None:
        del dev["attributes"]["resource.kubernetes.io/pciBusID"]
    else:
        dev["attributes"]["resource.kubernetes.io/pciBusID"]["string"] = bus
    dev["attributes"] |= extra
    return dev


U = [f"GPU-{i:08x}-5a5f-aa66-7660-471eed407181" for i in range(3)]


def test_gpus_are_numbered_in_pci_bus_order_as_nvidia_smi_does():
    # Device names follow /dev/nvidia minors; nvidia-smi numbers by bus id: 0a < 65 < c1.
    text = _slice_with(
        [_gpu("gpu-0", U[0], "0000:c1:00.0"), _gpu("gpu-1", U[1], "0000:0a:00.0"), _gpu("gpu-2", U[2], "0000:65:00.0")]
    )
    ids = parse_resourceslices(text, "s.json").by_node()["ipp1-0033"]
    assert [(g.index, g.uuid) for g in ids] == [(0, U[1]), (1, U[2]), (2, U[0])]


def test_a_v25_3_driver_slice_uses_its_index_and_pcieBusID_attributes():
    # v25.3.x published `index` and the driver's own `pcieBusID` (tests/data/dra/nvidia-gpu-device-attributes.json).
    old = [
        _gpu(f"gpu-{i}", U[i], None, index={"int": 1 - i}, pcieBusID={"string": f"0000:{0x20 + i:02x}:00.0"})
        for i in range(2)
    ]
    assert set(ATTRIBUTES["releases"]["v25.3.0"]["always"]) >= {"index", "pcieBusID", "uuid"}
    ids = parse_resourceslices(_slice_with(old), "s.json").by_node()["ipp1-0033"]
    assert [(g.index, g.uuid, g.bus_id) for g in ids] == [(0, U[1], "0000:21:00.0"), (1, U[0], "0000:20:00.0")]


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("00000000:65:00.0", "0000:65:00.0"),
        ("0000:0A:00.0", "0000:0a:00.0"),
        ("65:00.0", "0000:65:00.0"),
        ("gpu0", None),
    ],
)
def test_bus_ids_are_normalised_to_the_drivers_form(raw, norm):
    assert normalize_bus_id(raw) == norm


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["items"][0].update(apiVersion="resource.k8s.io/v1alpha3"), "items[0].apiVersion: expected one of"),
        (
            lambda d: d["items"][0]["spec"]["devices"][0]["attributes"]["uuid"].update(string="2fa81118"),
            "items[0].spec.devices[0].attributes.uuid: expected GPU-",
        ),
        (
            lambda d: d["items"][0]["spec"]["devices"][0]["attributes"]["resource.kubernetes.io/pciBusID"].update(
                string="slot 3"
            ),
            "is not a PCI address",
        ),
    ],
)
def test_broken_slices_are_bad_input_naming_file_and_field(change, message):
    doc = json.loads(SLICES.read_text())
    change(doc)
    with pytest.raises(InputError, match=re.escape(message)) as err:
        parse_resourceslices(json.dumps(doc), "slices.json")
    assert str(err.value).startswith("slices.json: ")


def test_a_uuid_twice_and_a_broken_file_are_refused_by_the_cli_with_exit_2(tmp_path):
    twice = tmp_path / "twice.json"
    twice.write_text(_slice_with([_gpu("gpu-0", U[0], "0000:0a:00.0"), _gpu("gpu-1", U[0], "0000:0b:00.0")]))
    done = run(
        "cluster", "import", "--nccl-xml", f"ipp1-0033={SAMPLES / 'azure-ncv4-topo.xml'}", "--resourceslices", twice
    )
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert f"{twice}: uuid '{U[0]}' appears twice (on nodes ipp1-0033 and ipp1-0033)" in done.stderr
    (tmp_path / "bad.json").write_text('{"items": [')
    done = run(
        "cluster",
        "import",
        "--nccl-xml",
        f"x={SAMPLES / 'azure-ncv4-topo.xml'}",
        "--resourceslices",
        tmp_path / "bad.json",
    )
    assert done.returncode == 2 and "bad.json:1: not valid JSON" in done.stderr


def test_cluster_import_records_gpu_ids_from_resourceslices(tmp_path):
    # The real kubectl node sample (one 1-GPU node), renamed to the node the slice sample describes.
    nodes = json.loads((SAMPLES / "k8s-gpu-node-kubectl-get-nodes.json").read_text())
    item = nodes["items"][0]
    item["metadata"]["name"] = item["metadata"]["labels"]["kubernetes.io/hostname"] = "ipp1-0033"
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    out = tmp_path / "c.yaml"
    done = run("cluster", "import", "--nodes", tmp_path / "nodes.json", "--resourceslices", SLICES, "-o", out)
    assert done.returncode == 0, done.stderr
    (node,) = yaml.safe_load(out.read_text())["nodes"]
    assert node["gpuIds"] == [
        {"index": 0, "uuid": "GPU-2fa81118-5a5f-aa66-7660-471eed407181", "pciBusID": "0000:65:00.0"}
    ]
    assert "ResourceSlices" in done.stderr and "gpuIds" in done.stderr
    assert load_cluster(out).nodes[0].gpu_ids[0].pci_bus_id == "0000:65:00.0"


def test_nccl_xml_bus_ids_are_carried_into_the_cluster_file():
    res = import_cluster(ImportOptions(nccl_xml=(f"nc96ads={SAMPLES / 'azure-ncv4-topo.xml'}",)))
    (node,) = res.document["nodes"]
    assert node["gpuIds"] == [{"index": i, "pciBusID": f"000{i + 1}:00:00.0"} for i in range(4)]


# ---- --target dra --------------------------------------------------------------------------------------------


def _cel(expression: str, attrs: dict) -> bool:
    """Evaluate placer's selector grammar (``a == "s" && b in ["x", "y"]``) over one device's attributes; an
    attribute the device lacks raises KeyError, as a CEL runtime error aborts the scheduler's allocation."""
    for clause in expression.split(" && "):
        m = re.fullmatch(r'device\.attributes\["([a-z0-9./]+)"\]\.(\w+) (==|in) (.+)', clause)
        assert m, clause
        value = attrs[m.group(1)][m.group(2)]
        wanted = json.loads(m.group(4))
        if (m.group(3) == "==" and value != wanted) or (m.group(3) == "in" and value not in wanted):
            return False
    return True


def _solve(spec_name: str, cluster: ClusterSpec):
    spec = load_spec(SPECS / f"{spec_name}.yaml")
    topo = build_topology(cluster)
    placement = solve(build_problem(spec, topo), SolveOptions())
    return spec, topo, placement, verify_placement(spec, topo, placement)


def _published(release: str) -> set[str]:
    r = ATTRIBUTES["releases"][release]
    return {name.rpartition("/")[2] for name in r["always"] + r.get("when_available", [])}


def test_claims_select_the_chosen_gpus_by_uuid_and_name_only_published_attributes():
    spec, topo, placement, report = _solve("aggregated-tp8", load_cluster(CLUSTERS / "small-mixed.yaml"))
    docs = build_manifests(spec, topo, placement, report, target="dra")
    claims = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
    assert claims
    for claim in claims:
        expr = claim["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"]
        named = set(re.findall(r'device\.attributes\["[^"]+"\]\.(\w+)', expr))
        assert named == {"type", "uuid"} and named <= _published("v25.3.0") and named <= _published("main")
        node = topo.node_by_name(claim["metadata"]["annotations"]["placer.dev/node"])
        chosen = [int(g) for g in claim["metadata"]["annotations"]["placer.dev/gpus"].split(",")]
        # The node's devices as the driver publishes them: a GPU per index, plus a MIG device of GPU 0.
        devices = [{"type": "gpu", "uuid": g.uuid} for g in node.gpus] + [{"type": "mig", "uuid": "MIG-x"}]
        admitted = [d["uuid"] for d in devices if _cel(expr, {"gpu.nvidia.com": d})]
        assert admitted == [node.gpu(i).uuid for i in chosen]


def test_bus_ids_are_the_fallback_and_select_through_the_standard_attribute():
    cluster = with_gpu_ids(load_cluster(CLUSTERS / "small-mixed.yaml"))
    data = cluster.model_dump(mode="json", by_alias=True, exclude_none=True)
    for node in data["nodes"]:
        for g in node.get("gpuIds", []):
            g.pop("uuid", None)
    spec, topo, placement, report = _solve("aggregated-tp8", ClusterSpec.model_validate(data))
    docs = build_manifests(spec, topo, placement, report, target="dra")
    expr = next(d for d in docs if d["kind"] == "ResourceClaimTemplate")["spec"]["spec"]["devices"]["requests"][0][
        "exactly"
    ]["selectors"][0]["cel"]["expression"]
    assert 'device.attributes["resource.kubernetes.io"].pciBusID in [' in expr
    assert "resource.kubernetes.io/pciBusID" in ATTRIBUTES["releases"]["main"]["always"]


def test_a_gpu_without_identifiers_is_bad_input_that_names_the_import(tmp_path):
    data = yaml.safe_load((CLUSTERS / "small-mixed.yaml").read_text())
    for node in data["nodes"]:
        node.pop("gpuIds", None)
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(data))
    done = run("solve", SPECS / "aggregated-tp8.yaml", bare, "--target", "dra")
    assert done.returncode == 2 and done.stdout == ""
    assert re.search(r"--target dra: node \S+ GPU\(s\) [0-9,]+: the cluster file has no gpuIds", done.stderr)
    assert "placer cluster import --resourceslices" in done.stderr and "Traceback" not in done.stderr
    # Other targets do not need identifiers.
    assert run("solve", SPECS / "aggregated-tp8.yaml", bare, "--target", "kai", "-q").returncode == 0


def _crd_schema(path: Path, version: str) -> dict:
    crd = yaml.safe_load(path.read_text())
    (v,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    assert v["served"] and v["storage"]
    return v["schema"]["openAPIV3Schema"]


def _strict(schema: dict) -> dict:
    """Unknown fields are errors: the API server prunes them from a structural schema, placer should emit none."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def test_trays_of_one_nvl72_share_a_compute_domain_validated_against_the_drivers_crd():
    spec, topo, placement, report = _solve(
        "llama-70b-disagg", with_gpu_ids(load_cluster(CLUSTERS / "gb200-nvl72-1008.yaml"))
    )
    docs = build_manifests(spec, topo, placement, report, target="dra")
    domains = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ComputeDomain"}
    spanning = [i for r in placement.replicas for i in r.instances if len({p.node for p in i.pods}) > 1]
    # GB200 trays hold 4 GPUs: every TP8 prefill instance spans two trays of one NVL72 rack.
    assert spanning and len(domains) == len(spanning)
    schema = _strict(_crd_schema(CD_CRD, "v1beta1"))
    for domain in domains.values():
        jsonschema.validate(domain, schema)
        assert domain["apiVersion"] == "resource.nvidia.com/v1beta1" and domain["spec"]["numNodes"] == 0
    channels = {d["spec"]["channel"]["resourceClaimTemplate"]["name"] for d in domains.values()}
    pods = [d for d in made_pods(docs) if d["metadata"]["labels"].get("placer.dev/pool") == "prefill"]
    assert pods
    for pod in pods:
        refs = {c["name"]: c["resourceClaimTemplateName"] for c in pod["spec"]["resourceClaims"]}
        assert refs.keys() == {"gpus", "imex-channel"} and refs["imex-channel"] in channels
        assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpus"}, {"name": "imex-channel"}]
    # The pods of one instance share one channel.
    by_instance: dict[str, set[str]] = {}
    for pod in pods:
        key = pod["metadata"]["labels"]["placer.dev/instance"]
        by_instance.setdefault(key, set()).add(
            {c["name"]: c["resourceClaimTemplateName"] for c in pod["spec"]["resourceClaims"]}["imex-channel"]
        )
    assert all(len(v) == 1 for v in by_instance.values())


def test_single_node_instances_get_no_compute_domain():
    spec, topo, placement, report = _solve("aggregated-tp8", load_cluster(CLUSTERS / "small-mixed.yaml"))
    docs = build_manifests(spec, topo, placement, report, target="dra")
    assert "ComputeDomain" not in {d["kind"] for d in docs}
    assert all(len(p["spec"]["resourceClaims"]) == 1 for p in made_pods(docs) if "resourceClaims" in p["spec"])


def test_selector_function_quotes_values():
    assert dra.selector("gpu.nvidia.com", "uuid", ["GPU-a", "GPU-b"]) == (
        'device.attributes["gpu.nvidia.com"].type == "gpu" && '
        'device.attributes["gpu.nvidia.com"].uuid in ["GPU-a", "GPU-b"]'
    )


def test_disagreeing_bus_ids_and_unknown_nodes_are_reported_not_guessed():
    # The NCCL dump gives node ipp1-0033 four GPUs at 0001:00:00.0...; the slice says GPU 0 is at 0000:65:00.0.
    doc = json.loads(SLICES.read_text())
    ghost = copy.deepcopy(doc["items"][0])
    ghost["spec"]["nodeName"] = ghost["spec"]["pool"]["name"] = "ghost-1"
    ghost["spec"]["devices"] = [_gpu("gpu-0", U[1], "0000:65:00.0")]
    doc["items"].append(ghost)
    res = import_cluster(
        ImportOptions(nccl_xml=(f"ipp1-0033={SAMPLES / 'azure-ncv4-topo.xml'}",), resourceslices=_write(doc))
    )
    (node,) = res.document["nodes"]
    assert node["gpuIds"][0] == {
        "index": 0,
        "pciBusID": "0000:65:00.0",
        "uuid": "GPU-2fa81118-5a5f-aa66-7660-471eed407181",
    }
    assert node["gpuIds"][1] == {"index": 1, "pciBusID": "0002:00:00.0"}
    notes = [n.text for n in res.report.notes]
    assert (
        "node ipp1-0033 GPU 0: bus id 0001:00:00.0 from the topology file but 0000:65:00.0 in the ResourceSlices; "
        "using the ResourceSlices'" in notes
    )
    assert "node 'ghost-1' is in no other source; its 1 GPU(s) not used" in notes


def _write(doc: dict) -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp()) / "slices.json"
    path.write_text(json.dumps(doc))
    return path


def test_kubernetes_before_1_34_is_refused_naming_the_version():
    args = ("solve", SPECS / "aggregated-tp8.yaml", CLUSTERS / "small-mixed.yaml", "--target", "dra", "-q")
    done = run(*args, "--target-version", "1.33")
    assert done.returncode == 2 and done.stdout == ""
    assert "--target-version 1.33: Kubernetes before 1.34 serves no resource.k8s.io/v1" in done.stderr
    assert run(*args, "--target-version", "1.34").returncode == 0
