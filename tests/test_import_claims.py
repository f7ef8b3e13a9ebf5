"""An import claims no interconnect, bandwidth or figure its sources do not support: GPU products read from
labels or hint files are NVLink nodes only on NVSwitch boards, a product has one memory figure whatever the
source, a measurement cut short is not attached, a network kind is read where the file says it and kept
when another file of the node does not, and ``topo -mp`` output is not taken as "no NVLink". Inputs are the
real samples, or copies of them changed where the test says."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from placer.importers import gpus
from placer.importers.run import ImportOptions, ImportResult, import_cluster
from placer.model.errors import InputError

SAMPLES = Path(__file__).resolve().parent / "data" / "samples"
GCP = SAMPLES / "nccl-tests-allreduce-gcp-a3mega-h100-2node.txt"
H200 = SAMPLES / "hgx-h200-12nic-topo-m.txt"
TWO_NODES = (f"ztan-mig-235z={H200}", f"ztan-mig-gq73={H200}")


def gfd_nodes(tmp: Path, labels: dict[str, str], gpus_per_node: int, drop: tuple[str, ...] = ()) -> Path:
    """The real kubectl node (GFD labels, vGPU A16), relabelled as another GPU product."""
    doc = json.loads((SAMPLES / "k8s-gpu-node-kubectl-get-nodes.json").read_text())
    node = copy.deepcopy(doc["items"][0])
    node["metadata"].pop("managedFields", None)
    merged = node["metadata"]["labels"] | labels
    node["metadata"]["labels"] = {k: v for k, v in merged.items() if k not in drop and "vgpu" not in k}
    for key in ("capacity", "allocatable"):
        node["status"][key]["nvidia.com/gpu"] = str(gpus_per_node)
    doc["items"] = [node]
    path = tmp / "nodes.json"
    path.write_text(json.dumps(doc))
    return path


def gfd(product: str, mib: str, sm: str) -> dict[str, str]:
    major, minor = sm.split(".")
    return {
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": mib,
        "nvidia.com/gpu.compute.major": major,
        "nvidia.com/gpu.compute.minor": minor,
    }


def only_class(result: ImportResult) -> dict:
    (cls,) = result.document["nodeClasses"].values()
    return cls


def notes(result: ImportResult) -> list[str]:
    return [str(n) for n in result.report.notes]


# --- 1. GPU products from labels: NVLink only on NVSwitch boards ---------------------------------------------


@pytest.mark.parametrize(
    ("product", "mib", "sm", "count"),
    [
        ("NVIDIA-A10G", "23028", "8.6", 8),  # sm86 maps to the A40 bridge generation; an A10G has no NVLink
        ("Tesla-T4", "15360", "7.5", 2),  # the GFD catalogue's own example
        ("NVIDIA-A16", "15356", "8.6", 4),
        ("NVIDIA-L40S", "46068", "8.9", 8),
        ("NVIDIA-H100-NVL", "95830", "9.0", 8),  # NVL cards are bridged in pairs
        ("Tesla-V100-SXM2-16GB", "16384", "7.0", 8),  # hybrid cube mesh: not every pair
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "4864", "8.0", 7),  # MIG slices have no peer-to-peer
    ],
)
def test_cards_meshes_and_mig_from_labels_are_pcie(tmp_path: Path, product: str, mib: str, sm: str, count: int) -> None:
    result = import_cluster(ImportOptions(nodes=gfd_nodes(tmp_path, gfd(product, mib, sm), count)))
    cls = only_class(result)
    assert cls["interconnect"] == "pcie" and "nvlinkGBps" not in cls
    assert result.spec.node_classes[next(iter(result.spec.node_classes))].interconnect == "pcie"
    (said,) = [n for n in notes(result) if n.startswith(f"product table: {product} x{count}:")]
    assert "interconnect taken as pcie from the product table" in said and "--topo" in said


@pytest.mark.parametrize(
    ("product", "mib", "sm", "count", "gbps", "board"),
    [
        ("NVIDIA-H100-80GB-HBM3", "81559", "9.0", 8, 900.0, "HGX H100/H200/H20"),
        ("NVIDIA-A100-SXM4-80GB", "81920", "8.0", 8, 600.0, "HGX A100"),
        ("NVIDIA-A800-SXM4-80GB", "81920", "8.0", 8, 400.0, "HGX A800"),  # 8 links, not the A100's 12
        ("NVIDIA-B200", "183359", "10.0", 8, 1800.0, "HGX B200/B300"),
        ("NVIDIA-GB200", "189471", "10.0", 4, 1800.0, "GB200/GB300 compute tray"),
    ],
)
def test_nvswitch_products_from_labels_keep_their_generation(
    tmp_path: Path, product: str, mib: str, sm: str, count: int, gbps: float, board: str
) -> None:
    result = import_cluster(ImportOptions(nodes=gfd_nodes(tmp_path, gfd(product, mib, sm), count)))
    cls = only_class(result)
    assert (cls["interconnect"], cls["nvlinkGBps"]) == ("nvlink", gbps)
    assert result.report.provenance["nvlinkGBps"] == {f"product table ({board})": 1}
    assert any(f"nvlink at {gbps:g} GB/s assumed from the product table ({board}" in n for n in notes(result))


@pytest.mark.parametrize("count_label", [True, False])
def test_time_sliced_replicas_do_not_make_a_board_bigger(tmp_path: Path, count_label: bool) -> None:
    """A review found an 8-GPU HGX H100 shared 2 ways (capacity 16) imported as pcie, "more GPUs than one
    board holds": the board's own GPUs (GFD's gpu.count, else capacity / replicas) decide the links."""
    labels = gfd("NVIDIA-H100-80GB-HBM3-SHARED", "81559", "9.0") | {
        "nvidia.com/gpu.replicas": "2",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
    }
    labels["nvidia.com/gpu.count"] = "8"
    drop = () if count_label else ("nvidia.com/gpu.count",)
    cls = only_class(import_cluster(ImportOptions(nodes=gfd_nodes(tmp_path, labels, 16, drop))))
    assert (cls["interconnect"], cls["nvlinkGBps"]) == ("nvlink", 900)


def test_four_sxm_gpus_get_the_lower_of_the_two_boards_figures(tmp_path: Path) -> None:
    """4 H100 SXM GPUs: a 4-GPU HGX board (NV6 between every pair, no NVSwitch) or half an 8-GPU NVSwitch
    board (900): every pair is NVLinked either way, at 300 GB/s at least."""
    result = import_cluster(ImportOptions(nodes=gfd_nodes(tmp_path, gfd("NVIDIA-H100-80GB-HBM3", "81559", "9.0"), 4)))
    assert (only_class(result)["interconnect"], only_class(result)["nvlinkGBps"]) == ("nvlink", 300.0)
    assert any("NV6 (300 GB/s) on a 4-GPU board" in n and "the lower figure" in n for n in notes(result))


def test_an_unknown_product_is_pcie_and_the_report_says_how_to_override(tmp_path: Path) -> None:
    drop = ("nvidia.com/gpu.product", "nvidia.com/gpu.memory")
    result = import_cluster(ImportOptions(nodes=gfd_nodes(tmp_path, {}, 8, drop=drop)))
    assert only_class(result)["interconnect"] == "pcie"
    assert result.report.provenance["interconnect"] == {"conservative default (product not in the table)": 1}
    (said,) = [n for n in notes(result) if n.startswith("product table: unknown x8:")]
    assert "taken as pcie (conservative); give --gpu-product, or nvidia-smi topo -m (--topo)" in said


# --- 2. NCCL hint files: the product decides, and the report says so ----------------------------------------


@pytest.mark.parametrize(
    ("xml", "product", "expected"),
    [
        ("azure-ndv5-topo.xml", "NVIDIA-H100-80GB-HBM3", ("nvlink", 900.0)),
        ("azure-ndv4-topo.xml", "NVIDIA-A100-SXM4-40GB", ("nvlink", 600.0)),
        ("azure-ndv2-topo.xml", "Tesla-V100-SXM2-32GB", ("pcie", None)),
        ("azure-ndv5-topo.xml", None, ("pcie", None)),  # no product: nothing says NVLink
    ],
)
def test_hint_files_get_the_products_interconnect_never_the_fabric_default(
    xml: str, product: str | None, expected: tuple[str, float | None]
) -> None:
    result = import_cluster(ImportOptions(nccl_xml=(f"vm={SAMPLES / xml}",), gpu_product=product))
    cls = only_class(result)
    assert (cls["interconnect"], cls.get("nvlinkGBps")) == expected
    assert any(n.startswith(f"product table: {product or 'unknown'} x8:") for n in notes(result))
    assert any("the interconnect follows the GPU product" in n for n in notes(result))


# --- 3. nccl-tests cut short: no figure ----------------------------------------------------------------------


def cut_gcp_log(tmp: Path, last_size: str, tail: str) -> Path:
    """The real log up to the row of ``last_size``, then ``tail`` (a row cut mid-line), without a newline."""
    lines = GCP.read_text().split("\n")
    end = next(i for i, ln in enumerate(lines) if ln.split()[:1] == [last_size])
    path = tmp / "cut.txt"
    path.write_text("\n".join(lines[: end + 1]) + "\n" + tail)
    return path


def test_a_log_cut_before_its_largest_size_attaches_no_figure_and_strict_refuses_it(tmp_path: Path) -> None:
    cut = cut_gcp_log(tmp_path, "16384", "       32768")
    options = ImportOptions(topo=TWO_NODES, nccl_tests=(cut,), gpu_product="NVIDIA-H100-80GB-HBM3")
    result = import_cluster(options)
    assert "overrides" not in result.document  # was 0.028 GB/s per rail: a 16 KiB message's figure
    assert (
        f"{cut}: the file ends before the '# Avg bus bandwidth' line: the run was cut short at 16384 bytes of "
        "the 8589934592 its header asks for; no figure is taken from it"
    ) in notes(result)
    with pytest.raises(InputError, match=r"nccl-tests run\(s\) cut short \(--strict\)") as info:
        import_cluster(ImportOptions(**{**options.__dict__, "strict": True}))
    assert f"{cut}: the run was cut short at 16384 bytes" in str(info.value)


def test_a_log_that_reached_its_largest_size_but_lost_its_trailer_still_counts(tmp_path: Path) -> None:
    lines = GCP.read_text().split("\n")
    avg = next(i for i, ln in enumerate(lines) if "Avg bus bandwidth" in ln)
    path = tmp_path / "no-trailer.txt"
    path.write_text("\n".join(lines[:avg]))
    options = ImportOptions(topo=TWO_NODES, nccl_tests=(path,), gpu_product="NVIDIA-H100-80GB-HBM3", strict=True)
    assert import_cluster(options).document["overrides"][0]["bandwidthGBps"] == 42.352


# --- 4. one memory figure per product ------------------------------------------------------------------------


def test_labels_and_the_product_table_give_one_memory_figure(tmp_path: Path) -> None:
    """GFD reports 81559 MiB (79.65 GiB) for an H100 80GB; the PCI id table and the name say 80: a spec's
    minMemoryGiB: 80 must fit the same GPU however the cluster was imported."""
    by_labels = import_cluster(
        ImportOptions(nodes=gfd_nodes(tmp_path, gfd("NVIDIA-H100-80GB-HBM3", "81559", "9.0"), 8))
    )
    by_hint = import_cluster(
        ImportOptions(nccl_xml=(f"vm={SAMPLES / 'azure-ndv5-topo.xml'}",), gpu_product="NVIDIA-H100-80GB-HBM3")
    )
    figures = {g.memory_gib for r in (by_labels, by_hint) for n in r.topology.nodes for g in n.gpus}
    assert figures == {gpus.PCI_DEVICES[0x2330][1]} == {80.0}
    assert by_labels.report.provenance["memoryGiB"] == {"product name (labels report 79.65)": 1}
    assert any("79.65 GiB reported, the nominal 80 GiB of the product name used" in n for n in notes(by_labels))


def test_a_large_mismatch_keeps_the_reported_memory_and_says_so(tmp_path: Path) -> None:
    result = import_cluster(ImportOptions(nodes=gfd_nodes(tmp_path, gfd("NVIDIA-A100-SXM4-80GB", "40960", "8.0"), 8)))
    assert only_class(result)["gpus"]["memoryGiB"] == 40.0
    assert any(
        "40 GiB reported but the product name says 80GB; the reported figure is kept" in n for n in notes(result)
    )


def test_a_mig_slice_is_never_given_the_boards_nominal_memory(tmp_path: Path) -> None:
    labels = gfd("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "4864", "8.0")
    reported = import_cluster(ImportOptions(nodes=gfd_nodes(tmp_path, labels, 7)))
    assert only_class(reported)["gpus"]["memoryGiB"] == 4.75  # 4864 MiB, as GFD reports the slice
    unreported = import_cluster(ImportOptions(nodes=gfd_nodes(tmp_path, labels, 7, drop=("nvidia.com/gpu.memory",))))
    assert only_class(unreported)["gpus"]["memoryGiB"] == 1.0  # not the board's 40: no source gave the slice's


def test_a_gh200_is_not_given_the_superchips_480gb(tmp_path: Path) -> None:
    """NVIDIA-GH200-480GB names the superchip's CPU and GPU memory together; its GPU has 96 GB of HBM3."""
    labels = gfd("NVIDIA-GH200-480GB", "97871", "9.0")
    result = import_cluster(ImportOptions(nodes=gfd_nodes(tmp_path, labels, 1)))
    assert only_class(result)["gpus"]["memoryGiB"] == 95.58
    unreported = import_cluster(ImportOptions(nodes=gfd_nodes(tmp_path, labels, 1, drop=("nvidia.com/gpu.memory",))))
    assert only_class(unreported)["gpus"]["memoryGiB"] == 1.0


# --- 5. what a per-rail figure from nccl-tests is ------------------------------------------------------------


def test_the_per_rail_figure_is_said_to_be_a_collective_figure_not_a_line_rate() -> None:
    result = import_cluster(ImportOptions(topo=TWO_NODES, nccl_tests=(GCP,), gpu_product="NVIDIA-H100-80GB-HBM3"))
    assert (
        f"{GCP}: leaf/default: 42.352 GB/s per rail is the test's bus bandwidth (busbw) over the 8 rail(s) each "
        "node drove: what a collective like the one tested gets per rail, not a NIC's line rate"
    ) in "\n".join(notes(result))


# --- 6. network kind -----------------------------------------------------------------------------------------


def test_an_ethernet_interface_without_pci_class_is_ethernet() -> None:
    result = import_cluster(ImportOptions(nccl_xml=(f"nc96ads={SAMPLES / 'azure-ncv4-topo.xml'}",)))
    assert result.document["fabric"]["network"]["kind"] == "ethernet"
    assert result.spec.fabric.network.kind == "ethernet"
    assert (
        f"{SAMPLES / 'azure-ncv4-topo.xml'}:10: NIC 'eth0': no PCI class; taken as Ethernet from its interface name"
        in notes(result)
    )


def matrix_without_nics(tmp: Path) -> Path:
    """The DGX A100 matrix without its NIC columns and rows (what nvidia-smi shows where it lists no NIC)."""
    lines = (SAMPLES / "dgx-a100-topo-m.txt").read_text().split("\n")
    header = lines[0].split("\t")
    keep = [k for k, name in enumerate(header) if not name.startswith("mlx5")]
    out = ["\t".join(header[k] for k in keep)]
    for line in lines[1:]:
        if line.startswith("mlx5"):
            continue
        fields = line.split("\t")
        out.append("\t".join(fields[k] for k in keep if k < len(fields)) if line.startswith("GPU") else line)
    path = tmp / "a100-no-nics.txt"
    path.write_text("\n".join(out))
    return path


def test_a_matrix_without_nics_keeps_the_hint_files_efa_nics_and_their_kind(tmp_path: Path) -> None:
    result = import_cluster(
        ImportOptions(
            nccl_xml=(f"p4d-01={SAMPLES / 'aws-p4d-24xl-topo.xml'}",), topo=(f"p4d-01={matrix_without_nics(tmp_path)}",)
        )
    )
    assert result.document["fabric"]["network"] == {"kind": "ethernet", "railsPerNode": 4}
    assert only_class(result)["interconnect"] == "nvlink"  # NV12 from the matrix


def test_nics_the_files_count_differently_are_not_given_the_hint_files_kind() -> None:
    """The docs' example: a p4d hint file (4 EFA) and a DGX A100 matrix (12 mlx5) for one node. Which mlx5 is
    which EFA NIC cannot be known, so no kind is carried over, and the report says the kind is unknown."""
    result = import_cluster(
        ImportOptions(
            nccl_xml=(f"p4d-01={SAMPLES / 'aws-p4d-24xl-topo.xml'}",),
            topo=(f"p4d-01={SAMPLES / 'dgx-a100-topo-m.txt'}",),
        )
    )
    assert "kind" not in result.document["fabric"]["network"]
    assert any(n.startswith("fabric.network.kind: no source says whether the rail NICs") for n in notes(result))


# --- 7. nvidia-smi topo -mp shows no NVLink ----------------------------------------------------------------


def test_topo_mp_output_leaves_nvlink_to_the_product() -> None:
    mp = SAMPLES / "dgx1-v100-topo-mp-pcie-only.txt"
    said = (
        f"{mp}: the legend has no NV# line: this is nvidia-smi topo -mp output, which shows PCIe paths only, not "
        "NVLink; the interconnect follows the GPU product instead (give nvidia-smi topo -m for the NVLinks)"
    )
    hgx = import_cluster(ImportOptions(topo=(f"n={mp}",), gpu_product="NVIDIA-H100-80GB-HBM3"))
    assert (only_class(hgx)["interconnect"], only_class(hgx)["nvlinkGBps"]) == ("nvlink", 900.0)
    dgx1 = import_cluster(ImportOptions(topo=(f"n={mp}",), gpu_product="Tesla-V100-SXM2-16GB"))
    assert only_class(dgx1)["interconnect"] == "pcie"  # a hybrid cube mesh: pcie, now from the product table
    assert said in notes(hgx) and said in notes(dgx1)
    full = import_cluster(ImportOptions(topo=(f"n={H200}",)))
    assert not any("topo -mp" in n for n in notes(full))


@pytest.mark.parametrize(
    ("edit", "complete"),
    [
        ({"maxBytes 8589934592": "maxBytes 10737418240"}, True),  # -e 10G -f 2 ends at 8 GiB: the next is 16
        ({"maxBytes 8589934592": "maxBytes 17179869184"}, False),  # 16 GiB asked: the 16 GiB row is missing
        ({"step: 2(factor)": "step: 1073741824(bytes)", "maxBytes 8589934592": "maxBytes 9663676415"}, True),
        (
            {"step: 2(factor)": "step: 1073741824(bytes)", "maxBytes 8589934592": "maxBytes 9663676416"},
            False,
        ),  # 9 GiB is a size too
    ],
)
def test_a_run_is_complete_when_its_next_step_would_pass_max_bytes(tmp_path: Path, edit: dict, complete: bool) -> None:
    """A review found finished runs that lost only their trailer refused: sizes need not end at maxBytes
    itself (-e 10G with -f 2 ends at 8 GiB; all_gather rounds sizes down to a multiple of 4 x ranks)."""
    lines = GCP.read_text().split("\n")
    text = "\n".join(lines[: next(i for i, ln in enumerate(lines) if "Avg bus bandwidth" in ln)])
    for old, new in edit.items():
        assert old in text
        text = text.replace(old, new, 1)
    path = tmp_path / "run.txt"
    path.write_text(text)
    options = ImportOptions(topo=TWO_NODES, nccl_tests=(path,), gpu_product="NVIDIA-H100-80GB-HBM3")
    assert ("overrides" in import_cluster(options).document) == complete


def test_an_all_gather_ending_below_max_bytes_by_its_rounding_is_complete(tmp_path: Path) -> None:
    lines = GCP.read_text().split("\n")
    text = "\n".join(lines[: next(i for i, ln in enumerate(lines) if "Avg bus bandwidth" in ln)])
    last = next(ln for ln in reversed(text.split("\n")) if ln.split()[:1] == ["8589934592"])
    text = text.replace(last, last.replace("8589934592", "8589934464", 1), 1)  # 24 ranks: a multiple of 96
    path = tmp_path / "allgather.txt"
    path.write_text(text)
    options = ImportOptions(topo=TWO_NODES, nccl_tests=(path,), gpu_product="NVIDIA-H100-80GB-HBM3", strict=True)
    assert import_cluster(options).document["overrides"]
