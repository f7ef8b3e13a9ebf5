"""Runtime settings and options of ``--target``: NCCL values chosen from the links an instance got (each
case is a hand-made placement where one fact decides), the user's overrides, DRA's CEL selectors evaluated
against driver-shaped devices, the LWS refusal, explain reading target manifests back, and the CLI
(``--target``, ``--namespace``, ``--dry-run``, ``-o json``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_in_process import run
from test_cli import AGG, SMALL

from placer.emit.manifests import build_manifests, to_yaml
from placer.emit.readback import load_placed
from placer.emit.targets import TARGETS, dra
from placer.emit.targets.nccl import channel_settings, instance_settings
from placer.model.errors import InputError
from placer.model.load import load_cluster, load_spec
from placer.model.placement import InstancePlacement, Placement, Pod, ReplicaPlacement, SolveStats
from placer.model.spec import ServingTopology
from placer.pipeline import verify_placement
from placer.topology.build import build_topology

ROOT = Path(__file__).resolve().parent.parent
CLUSTERS = ROOT / "fixtures" / "clusters"
DGX = build_topology(load_cluster(CLUSTERS / "dgx-h100-1024.yaml"))
GB200 = build_topology(load_cluster(CLUSTERS / "gb200-nvl72-1008.yaml"))
SMALL_TOPO = build_topology(load_cluster(SMALL))


def _spec(**changes) -> ServingTopology:
    data = yaml.safe_load((ROOT / "fixtures" / "specs" / "tp16-multinode.yaml").read_text())
    data.update(changes)
    return ServingTopology.model_validate(data)


def _inst(*pods: tuple[str, list[int]], pool: str = "aggregated") -> InstancePlacement:
    return InstancePlacement(pool, 0, tuple(Pod(n, tuple(g)) for n, g in pods), "")


def _values(spec, topo, inst) -> dict[str, str]:
    return {s.name: s.value for s in instance_settings(spec, topo, inst)}


def _free_node(topo, gpus: int, skip: tuple[str, ...] = ()) -> str:
    return next(n.name for n in topo.nodes if len(n.free_gpus) >= gpus and n.name not in skip and n.gpus)


def test_one_gpu_needs_no_nccl():
    assert _values(_spec(), DGX, _inst((_free_node(DGX, 1), [0]))) == {}


def test_one_h100_node_uses_nvlink_and_nvlink_sharp():
    node = _free_node(DGX, 8)
    got = _values(_spec(), DGX, _inst((node, list(range(8)))))
    assert got == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "NCCL_P2P_LEVEL": "NVL", "NCCL_NVLS_ENABLE": "2"}  # 1: no check


def test_a100_pcie_across_sockets_sets_no_p2p_level_but_one_socket_does():
    # pcie-a: 8 A100 PCIe GPUs, 0-3 on socket 0 and 4-7 on socket 1; no NVSwitch, so no NVLink SHARP either.
    across = _values(_spec(), SMALL_TOPO, _inst(("pcie-a", [0, 1, 2, 3, 4, 5, 6, 7])))
    within = _values(_spec(), SMALL_TOPO, _inst(("pcie-a", [0, 1, 2, 3])))
    assert "NCCL_P2P_LEVEL" not in across and "NCCL_NVLS_ENABLE" not in across
    assert within["NCCL_P2P_LEVEL"] == "PXB"


def _two_dgx_in_one_rack() -> InstancePlacement:
    same_rack = [n for n in DGX.nodes if n.path["rack"] == "r001"][:2]  # NCCL reads links, not free GPUs
    assert len(same_rack) == 2
    return _inst(*((n.name, list(range(8))) for n in same_rack))


def _cluster_with(tmp_path, **network) -> Path:
    data = yaml.safe_load(SMALL.read_text())
    data["fabric"]["network"] = {k: v for k, v in {**data["fabric"]["network"], **network}.items() if v is not None}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_two_dgx_nodes_under_one_rack_stay_on_their_rails():
    got = _values(_spec(), DGX, _two_dgx_in_one_rack())
    # 8 rails of 50 GB/s for 8 GPUs: GPUDirect RDMA through the shared PCIe switch (PIX); a rail-optimised
    # fabric under one leaf keeps each ring on its rail (NCCL docs' 0, not source 003's 1).
    assert got["NCCL_IB_HCA"] == "mlx5" and got["NCCL_NET_GDR_LEVEL"] == "PIX"
    assert got["NCCL_CROSS_NIC"] == "0"
    assert "NCCL_IB_GID_INDEX" not in got  # InfiniBand, not RoCE


def test_serving_and_training_profiles_take_source_003s_channel_ranges():
    """Serving (the default): 2 channels at least, at most 4 raised to the 8 rails so no rail idles;
    training: 8-16."""
    inst = _two_dgx_in_one_rack()
    serving = _values(_spec(), DGX, inst)
    training = _values(_spec(nccl={"profile": "training"}), DGX, inst)
    assert (serving["NCCL_MIN_NCHANNELS"], serving["NCCL_MAX_NCHANNELS"]) == ("2", "8")
    assert (training["NCCL_MIN_NCHANNELS"], training["NCCL_MAX_NCHANNELS"]) == ("8", "16")
    assert {k: v for k, v in serving.items() if "NCHANNELS" not in k} == {
        k: v for k, v in training.items() if "NCHANNELS" not in k
    }


@pytest.mark.parametrize("profile", ["serving", "training"])
@pytest.mark.parametrize("rails", [1, 2, 4, 8, 16, 64])
def test_channel_ranges_are_ordered_and_within_nccls_limit(profile, rails):
    got = {s.name: int(s.value) for s in channel_settings(profile, rails)}
    low, high = got["NCCL_MIN_NCHANNELS"], got["NCCL_MAX_NCHANNELS"]
    assert 1 <= low <= high <= 32
    assert high >= min(rails, 32)  # every rail can carry a ring
    assert low == (2 if profile == "serving" else 8)  # source 003's floor, whatever the rails


def test_every_setting_cites_its_source():
    inst = _two_dgx_in_one_rack()
    for spec in (_spec(), _spec(nccl={"profile": "training"})):
        for s in instance_settings(spec, DGX, inst):
            assert s.reason.startswith(("NCCL 2.30 docs", "source 003", "CUDA docs")), s


def test_nodes_in_different_leaves_leave_the_rail_choice_to_nccl():
    a = next(n for n in DGX.nodes if n.path["leaf"] == "su01")
    b = next(n for n in DGX.nodes if n.path["leaf"] == "su02")
    assert _values(_spec(), DGX, _inst((a.name, list(range(8))), (b.name, list(range(8)))))["NCCL_CROSS_NIC"] == "2"


def test_nics_on_one_switch_may_cross_and_one_nic_has_nothing_to_cross(tmp_path):
    inst = _inst(("dgx-a", [0, 1]), ("dgx-b", [0, 1]))
    shared = build_topology(load_cluster(_cluster_with(tmp_path, railOptimized=False)))
    assert _values(_spec(), shared, inst)["NCCL_CROSS_NIC"] == "1"
    single = build_topology(load_cluster(_cluster_with(tmp_path, railsPerNode=1)))
    assert "NCCL_CROSS_NIC" not in _values(_spec(), single, inst)


def test_roce_leaves_the_gid_index_to_nccl(tmp_path):
    topo = build_topology(load_cluster(_cluster_with(tmp_path, kind="ethernet")))
    got = _values(_spec(), topo, _inst(("dgx-a", [0, 1]), ("dgx-b", [0, 1])))
    # NCCL >= 2.21 picks the RoCEv2 IPv4 GID itself; source 003's fixed 3 breaks when a pod's GID table differs.
    assert "NCCL_IB_GID_INDEX" not in got and got["NCCL_IB_HCA"] == "mlx5"
    reasons = {s.name: s.reason for s in instance_settings(_spec(), topo, _inst(("dgx-a", [0, 1]), ("dgx-b", [0, 1])))}
    assert "over RoCE" in reasons["NCCL_IB_HCA"]


def test_gb200_trays_of_one_rack_use_multi_node_nvlink_only_with_an_imex_channel():
    trays = [n for n in GB200.nodes if n.path["nvlink-domain"] == "nvl-r001"][:2]
    inst = _inst(*((n.name, [0, 1, 2, 3]) for n in trays))
    got = {s.name: s.value for s in instance_settings(_spec(), GB200, inst, imex=True)}
    assert got["NCCL_MNNVL_ENABLE"] == "1" and got["NCCL_NVLS_ENABLE"] == "2" and "NCCL_IB_HCA" not in got
    # Without the channel (every target but dra's ComputeDomain) an explicit MNNVL request makes NCCL fail
    # (src/init.cc): the trays are set up as nodes on the network instead.
    plain = _values(_spec(), GB200, inst)
    assert "NCCL_MNNVL_ENABLE" not in plain and plain["NCCL_IB_HCA"] == "mlx5"


def test_only_the_dra_target_asks_for_multi_node_nvlink(tmp_path):
    spec, cluster = ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml", ROOT / "fixtures" / "clusters"
    for target in ("kai", "grove", "dynamo"):
        out = run("solve", spec, cluster / "gb200-nvl72-1008.yaml", "-q", "-t", target)
        assert out.returncode == 0, out.stderr
        assert "NCCL_MNNVL_ENABLE" not in out.stdout, target


def test_spec_overrides_win_and_the_template_wins_over_both():
    node = _free_node(DGX, 8)
    spec = _spec(nccl={"env": {"NCCL_NVLS_ENABLE": "0", "NCCL_DEBUG": "WARN"}})
    got = {s.name: s for s in instance_settings(spec, DGX, _inst((node, list(range(8)))))}
    assert got["NCCL_NVLS_ENABLE"].value == "0" and got["NCCL_NVLS_ENABLE"].reason == "set by the spec (nccl.env)"
    assert got["NCCL_DEBUG"].value == "WARN" and got["NCCL_P2P_LEVEL"].value == "NVL"
    data = yaml.safe_load((ROOT / "fixtures" / "specs" / "tp16-multinode.yaml").read_text())
    data["pools"]["aggregated"]["template"]["env"] = [{"name": "NCCL_P2P_LEVEL", "value": "SYS"}]
    data["nccl"] = {"auto": False, "env": {"NCCL_DEBUG": "INFO"}}
    only_user = instance_settings(ServingTopology.model_validate(data), DGX, _inst((node, list(range(8)))))
    assert [(s.name, s.value) for s in only_user] == [("NCCL_DEBUG", "INFO")]


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("topologyLabels", {"rack": "bad key!"}, "label key"),
        ("volcanoTiers", {"rack": 2, "leaf": 1}, "a broader level needs a higher tier"),
        ("queue", "Not_A_Label", "DNS-1123"),
        ("dra", {"deviceClass": "GPU Class"}, "DNS-1123 subdomain"),
    ],
)
def test_bad_scheduling_options_are_rejected(field, value, message):
    with pytest.raises(ValueError, match=message):
        _spec(scheduling={field: value})


# ---- DRA: the CEL selector admits exactly the chosen GPUs ----------------------------------------------------


def test_dra_selector_admits_exactly_the_planned_gpus():
    from test_dra_ids import _cel

    uuids = [f"GPU-{i:08x}-0000-0000-0000-000000000000" for i in range(8)]
    expr = dra.selector("gpu.nvidia.com", "uuid", [uuids[1], uuids[2], uuids[5]])
    devices = [{"type": "gpu", "uuid": u} for u in uuids] + [{"type": "mig", "uuid": uuids[1]}]
    chosen = [d for d in devices if _cel(expr, {"gpu.nvidia.com": d})]
    assert chosen == [{"type": "gpu", "uuid": uuids[i]} for i in (1, 2, 5)]


# ---- whole outputs -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def agg_small():
    spec = load_spec(AGG)
    from placer.solver.problem import build_problem
    from placer.solver.solve import SolveOptions, solve

    placement = solve(build_problem(spec, SMALL_TOPO), SolveOptions())
    return spec, placement, verify_placement(spec, SMALL_TOPO, placement)


@pytest.mark.parametrize("target", TARGETS)
def test_explain_reads_target_manifests_back(agg_small, target, tmp_path):
    spec, placement, report = agg_small
    path = tmp_path / "m.yaml"
    path.write_text(to_yaml(build_manifests(spec, SMALL_TOPO, placement, report, target=target)))
    placed = load_placed(path)
    assert placed.spec == spec and placed.placement.replicas == placement.replicas


def test_nccl_is_off_by_default_only_for_coscheduling(agg_small):
    spec, placement, report = agg_small
    env = {
        t: {
            e["name"]
            for d in build_manifests(spec, SMALL_TOPO, placement, report, target=t)
            if d["kind"] == "StatefulSet"
            for e in d["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        for t in ("coscheduling", "kai")
    }
    assert "CUDA_DEVICE_ORDER" not in env["coscheduling"] and "CUDA_DEVICE_ORDER" in env["kai"]
    forced = build_manifests(spec, SMALL_TOPO, placement, report, target="coscheduling", nccl=True)
    assert any("placer.dev/nccl" in d["metadata"].get("annotations", {}) for d in forced)


def test_lws_refuses_workers_of_unequal_size(agg_small):
    spec, placement, report = agg_small
    odd = InstancePlacement("aggregated", 0, (Pod("dgx-b", (0,)), Pod("pcie-a", (0, 1)), Pod("pcie-b", (1, 2, 3))), "")
    bent = Placement(
        placement.deployment,
        placement.namespace,
        placement.cluster,
        (ReplicaPlacement(0, (odd,), None),),
        SolveStats("feasible"),
    )
    from placer.check.verify import check

    with pytest.raises(InputError, match=r"pods asking for \[1, 2, 3\] GPUs"):
        build_manifests(spec, SMALL_TOPO, bent, check(spec, SMALL_TOPO, bent), target="lws")


def test_cli_target_namespace_and_json():
    done = run("solve", AGG, SMALL, "--target", "volcano", "--namespace", "prod", "-o", "json", "-q")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["kind"] == "List" and {d["metadata"]["namespace"] for d in doc["items"]} == {"prod"}
    assert {d["kind"] for d in doc["items"]} == {"PodGroup", "StatefulSet", "Deployment", "Service"}
    spec = json.loads(doc["items"][0]["metadata"]["annotations"]["placer.dev/spec"])
    assert spec["metadata"]["namespace"] == "prod"


def test_cli_dry_run_prints_the_plan_not_manifests():
    done = run("solve", AGG, SMALL, "--target", "kai", "--dry-run", "-q")
    assert done.returncode == 0, done.stderr
    assert "tensor-parallel groups" in done.stdout and "NCCL_P2P_LEVEL=NVL" in done.stdout
    assert "objects --target kai would create" in done.stdout and "apiVersion:" not in done.stdout


def test_cli_bad_target_and_bad_namespace_are_bad_input():
    assert run("solve", AGG, SMALL, "--target", "slurm").returncode == 2
    done = run("solve", AGG, SMALL, "--namespace", "Bad_NS")
    assert done.returncode == 2 and "--namespace" in done.stderr and done.stdout == ""


def _with(spec: ServingTopology, **changes) -> ServingTopology:
    data = spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    for key, value in changes.items():
        data[key] = data.get(key, {}) | value
    return ServingTopology.model_validate(data)


def test_scheduling_options_reach_the_objects(agg_small):
    from test_targets import validate

    spec, placement, report = agg_small
    spec = _with(
        spec,
        scheduling={"queue": "team-a", "topology": "site-topology", "topologyLabels": {"rack": "example.com/rack"}},
        router={"startFirst": True, "kind": "custom", "image": "registry.example.com/team/router:1"},
    )
    kai = build_manifests(spec, SMALL_TOPO, placement, report, target="kai")
    assert "Topology" not in {d["kind"] for d in kai}  # the named one is referenced, not emitted
    group = next(d for d in kai if d["kind"] == "PodGroup")
    assert group["spec"]["queue"] == "team-a"
    # small-mixed's replicas sit in racks r1 and r2 of leaf su1, and each on one node.
    assert group["spec"]["topologyConstraint"] == {"topology": "site-topology", "requiredTopologyLevel": HOST_LABEL}
    own = _with(spec, scheduling={"topology": None})
    (topology,) = [
        d for d in build_manifests(own, SMALL_TOPO, placement, report, target="kai") if d["kind"] == "Topology"
    ]
    validate(topology)
    assert topology["spec"]["levels"] == [
        {"nodeLabel": "placer.dev/leaf"},
        {"nodeLabel": "example.com/rack"},
        {"nodeLabel": HOST_LABEL},
    ]
    grove = build_manifests(spec, SMALL_TOPO, placement, report, target="grove")
    pcs = next(d for d in grove if d["kind"] == "PodCliqueSet")
    validate(pcs)
    assert pcs["spec"]["template"]["cliqueStartupType"] == "CliqueStartupTypeExplicit"
    assert [c["spec"].get("startsAfter") for c in pcs["spec"]["template"]["cliques"]] == [None, ["router"]]
    volcano = build_manifests(
        _with(spec, scheduling={"volcanoTiers": {"leaf": 3}}), SMALL_TOPO, placement, report, "volcano"
    )
    assert all("networkTopology" not in d["spec"] for d in volcano if d["kind"] == "PodGroup")  # one node: no tier


HOST_LABEL = "kubernetes.io/hostname"


def test_explain_shows_the_nccl_settings_of_the_target_that_printed_the_manifests(tmp_path):
    """Only dra's pods get an IMEX channel, so only its manifests ask for multi-node NVLink; explain, reading
    them back, must show the same settings the pods carry."""
    from test_dra_ids import with_gpu_ids

    cluster = tmp_path / "gb200.yaml"
    spec_path, plain = ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml", ROOT / "fixtures" / "clusters"
    data = with_gpu_ids(load_cluster(plain / "gb200-nvl72-1008.yaml"))
    cluster.write_text(yaml.safe_dump(data.model_dump(mode="json", by_alias=True, exclude_none=True)))
    for target, mnnvl in (("dra", True), ("kai", False)):
        out = run("solve", spec_path, cluster, "-q", "-t", target)
        assert out.returncode == 0, out.stderr
        printed = tmp_path / f"{target}.yaml"
        printed.write_text(out.stdout)
        assert ("NCCL_MNNVL_ENABLE" in out.stdout) == mnnvl
        shown = run("explain", printed, "-c", cluster, "-o", "json")
        assert shown.returncode == 0, shown.stderr
        names = {s["name"] for inst in json.loads(shown.stdout)["instances"] for s in inst["nccl"]}
        assert ("NCCL_MNNVL_ENABLE" in names) == mnnvl, target


def test_trays_of_one_nvlink_domain_without_an_imex_channel_are_warned_about(tmp_path):
    """Under a target other than dra, a GB200 instance over trays (and a KV transfer between them) runs over
    the network, not the NVLink placer costed: the run says so on stderr, for one spec and in a batch."""
    spec = ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml"
    gb200 = ROOT / "fixtures" / "clusters" / "gb200-nvl72-1008.yaml"
    kai = run("solve", spec, gb200, "-t", "kai")
    assert kai.returncode == 0, kai.stderr
    assert "prefill-0 spans 2 trays of NVLink domain" in kai.stderr and "--target dra gives" in kai.stderr
    assert "prefill->decode transfer crosses trays of one NVLink domain (replica 0 in nvl-" in kai.stderr
    # One line per kind of finding, however many instances it holds for (a fleet-sized run printed dozens).
    warned = [line for line in kai.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 2 and warned[0].count(" spans 2 trays ") == 2, warned
    other = tmp_path / "other.yaml"
    doc = yaml.safe_load(spec.read_text())
    doc["metadata"]["name"] = "other"
    other.write_text(yaml.safe_dump(doc))
    batch = run("solve", spec, other, gb200, "-t", "kai")
    assert batch.returncode == 0, batch.stderr
    assert "serving/other: warning: replica 0 prefill-0 spans 2 trays" in batch.stderr
    dgx = run("solve", spec, ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml", "-t", "kai")
    assert dgx.returncode == 0 and "IMEX" not in dgx.stderr  # no NVLink domain over nodes there


def test_many_like_warnings_are_cut_to_a_few_and_a_count():
    from placer.pipeline import _listed

    assert _listed(["a", "b"]) == "a, b"
    assert _listed([f"i{k}" for k in range(32)]) == "i0, i1, i2 and 29 more like it"
