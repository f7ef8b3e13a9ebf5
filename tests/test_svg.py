"""``placer.explain.svg.render_svg``: well-formed, every placed GPU drawn once in its instance's colour (a shade of
its pool's hue), busy GPUs grey, routers marked, one KV-path highlight per replica with a transfer (labelled
with the report's link class and GB/s), hostile names escaped, same bytes twice, and big clusters summarised
so the file stays small."""

from __future__ import annotations

import colorsys
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from placer.check.verify import check
from placer.explain import svg, svg_layout
from placer.explain.svg import instance_colours, pool_colour, render_svg
from placer.model.cluster import ClusterSpec
from placer.model.load import load_spec
from placer.model.placement import InstancePlacement, Placement, Pod, ReplicaPlacement, SolveStats
from placer.pipeline import SolveResult, run_solve
from placer.solver.solve import SolveOptions
from placer.topology.build import build_topology
from placer.topology.generate import dump_cluster_yaml, generate_cluster

ROOT = Path(__file__).resolve().parent.parent
SPECS, CLUSTERS = ROOT / "fixtures" / "specs", ROOT / "fixtures" / "clusters"
NS = "{http://www.w3.org/2000/svg}"
GPU_TITLE = re.compile(r"^(?P<node>\S+) GPU (?P<gpu>\d+): (?P<what>[^(]*[^( ])( \(socket \d+\))?$")

# Fits small-mixed (dgx-a has 6 free GPUs, dgx-b 8, pcie-a 8, pcie-b 7): 2 replicas x (TP4 + 2 x TP2).
SMALL_DISAGG = """\
apiVersion: placer.dev/v1alpha1
kind: ServingTopology
metadata: {name: small-disagg}
model: {layers: 32, hiddenSize: 4096, kvHeads: 8, headDim: 128}
pools:
  prefill: {instances: 1, tensorParallel: 4, placement: {required: node}, template: {image: vllm/vllm-openai:v0.11.0}}
  decode: {instances: 2, tensorParallel: 2, placement: {required: node}, template: {image: vllm/vllm-openai:v0.11.0}}
router: {near: {pool: decode, level: rack}}
replicas: 2
"""


def _solve(spec: Path, cluster: Path) -> SolveResult:
    return run_solve(spec, cluster, SolveOptions())


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> SolveResult:
    path = tmp_path_factory.mktemp("specs") / "small-disagg.yaml"
    path.write_text(SMALL_DISAGG)
    return _solve(path, CLUSTERS / "small-mixed.yaml")


@pytest.fixture(scope="module")
def small_aggregated() -> SolveResult:
    return _solve(SPECS / "aggregated-tp8.yaml", CLUSTERS / "small-mixed.yaml")


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> SolveResult:
    """The 1,024-GPU fixture with three disaggregated replicas, so several KV paths are drawn."""
    path = tmp_path_factory.mktemp("specs") / "disagg-3.yaml"
    path.write_text((SPECS / "llama-70b-disagg.yaml").read_text().replace("\nreplicas: 1\n", "\nreplicas: 3\n"))
    return _solve(path, CLUSTERS / "dgx-h100-1024.yaml")


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> SolveResult:
    path = tmp_path_factory.mktemp("clusters") / "dgx-h100-10000.yaml"
    path.write_text(dump_cluster_yaml(generate_cluster("dgx-h100", 10000, 1)))
    return _solve(SPECS / "llama-70b-disagg.yaml", path)


SOLVED = ["small", "small_aggregated", "big", "huge"]


def _render(result: SolveResult) -> str:
    return render_svg(result.spec, result.topology, result.placement, result.report)


def _cells(root: ET.Element) -> dict[tuple[str, int], list[tuple[str, str]]]:
    """(node, GPU) -> [(fill, what)] for every element titled like a GPU."""
    out: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for el in root.iter():
        title = el.find(f"{NS}title")
        m = GPU_TITLE.match(title.text or "") if title is not None else None
        if m:
            out.setdefault((m["node"], int(m["gpu"])), []).append((el.get("fill", ""), m["what"]))
    return out


def _groups(root: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{NS}g") if g.get("class") == cls]


def _summarised_gpus(title: str) -> int:
    found = re.search(r" nodes?, (\d+) GPUs: ", title)
    assert found, title
    return int(found[1])


def _hue(colour: str) -> float:
    r, g, b = (int(colour[k : k + 2], 16) / 255 for k in (1, 3, 5))
    return colorsys.rgb_to_hls(r, g, b)[0] * 360


@pytest.mark.parametrize("name", SOLVED)
def test_well_formed_svg_with_its_size(name: str, request: pytest.FixtureRequest) -> None:
    text = _render(request.getfixturevalue(name))
    assert text.isascii()
    root = ET.fromstring(text)
    assert root.tag == f"{NS}svg"
    width, height = int(root.attrib["width"]), int(root.attrib["height"])
    assert root.attrib["viewBox"] == f"0 0 {width} {height}"
    assert 0 < width < 10_000 and 0 < height < 10_000
    assert "href" not in text and "<style" not in text and "<script" not in text  # self-contained, inert


@pytest.mark.parametrize("name", SOLVED)
def test_every_placed_gpu_once_in_its_instance_shade_of_the_pool_hue(name: str, request: pytest.FixtureRequest) -> None:
    result = request.getfixturevalue(name)
    cells = _cells(ET.fromstring(_render(result)))
    colours = instance_colours(result.spec, result.placement)
    placed = 0
    for rep in result.placement.replicas:
        for inst in rep.instances:
            fill = colours[(rep.index, inst.pool, inst.index)]
            assert abs(_hue(fill) - _hue(pool_colour(result.spec, inst.pool))) < 2  # rounding to 8 bits
            for pod in inst.pods:
                for g in pod.gpus:
                    assert cells[(pod.node, g)] == [(fill, f"replica {rep.index} {inst.pool}-{inst.index}")]
                    placed += 1
    assert sum(what.startswith("replica ") for found in cells.values() for _, what in found) == placed


@pytest.mark.parametrize("name", SOLVED)
def test_other_gpus_drawn_once_busy_grey_free_light(name: str, request: pytest.FixtureRequest) -> None:
    result = request.getfixturevalue(name)
    cells = _cells(ET.fromstring(_render(result)))
    assert all(len(found) == 1 for found in cells.values())
    busy = free = 0
    for node in result.topology.nodes:
        for gpu in node.gpus:
            found = cells.get((node.name, gpu.index))
            if found is None or found[0][1].startswith("replica "):
                continue
            if gpu.index in node.busy:
                assert found == [(svg.BUSY, "busy")]
                busy += 1
            else:
                assert found == [(svg.FREE, "free")]
                free += 1
    assert busy and free


@pytest.mark.parametrize("name", ["small", "small_aggregated", "big"])
def test_clusters_up_to_the_budget_are_drawn_whole(name: str, request: pytest.FixtureRequest) -> None:
    result = request.getfixturevalue(name)
    root = ET.fromstring(_render(result))
    assert set(_cells(root)) == {(n.name, g.index) for n in result.topology.nodes for g in n.gpus}
    assert not _groups(root, "summary")


@pytest.mark.parametrize("name", SOLVED)
def test_router_nodes_marked(name: str, request: pytest.FixtureRequest) -> None:
    result = request.getfixturevalue(name)
    badges = [g.findtext(f"{NS}title") or "" for g in _groups(ET.fromstring(_render(result)), "router")]
    hosts: dict[str, list[int]] = {}
    for rep in result.placement.replicas:
        if rep.router is not None:
            hosts.setdefault(rep.router, []).append(rep.index)
    assert hosts
    assert sorted(badges) == sorted(
        f"router of replica {', '.join(map(str, reps))} on node {node}" for node, reps in hosts.items()
    )


@pytest.mark.parametrize("name", SOLVED)
def test_one_kv_highlight_per_replica_with_a_transfer(name: str, request: pytest.FixtureRequest) -> None:
    result = request.getfixturevalue(name)
    paths = _groups(ET.fromstring(_render(result)), "kv-path")
    transfers = [rc for rc in result.report.replicas if rc.kv_path is not None]
    assert len(paths) == len(transfers)
    for g, rc in zip(paths, transfers, strict=True):
        assert g.get("id") == f"kv-r{rc.replica}"
        label = next(t.text for t in g.iter(f"{NS}text"))
        assert label is not None and label.startswith(f"r{rc.replica} \u00b7 ")
        assert label.endswith(f" \u00b7 {rc.kv_bandwidth_gbps:g} GB/s")
        assert g.find(f"{NS}path") is not None


def test_kv_labels_name_the_link_class(small: SolveResult, big: SolveResult) -> None:
    # small-mixed: replica 0 keeps prefill and decode inside DGX node dgx-b (NVLink, measured 820 GB/s x
    # min(4, 2) GPU pairs = 1640 GB/s); replica 1 goes from dgx-a in rack r1 to the PCIe nodes of rack r2,
    # across the leaf: min(4, 2) rails, one per GPU of the smaller instance, x 32 GB/s (the PCIe nodes'
    # cross-socket edge is the bottleneck) = 64 GB/s.
    # dgx-h100-1024: every replica stays under one leaf: a TP4 decode's 4 rails x 50 GB/s = 200 GB/s.
    def labels(result: SolveResult) -> list[str]:
        root = ET.fromstring(_render(result))
        return [next(g.iter(f"{NS}text")).text or "" for g in _groups(root, "kv-path")]

    assert labels(small) == ["r0 \u00b7 NVLink \u00b7 1640 GB/s", "r1 \u00b7 IB leaf \u00b7 64 GB/s"]
    assert labels(big) == [f"r{k} \u00b7 IB leaf \u00b7 200 GB/s" for k in range(3)]


def test_no_highlight_without_a_transfer(small_aggregated: SolveResult) -> None:
    assert not _groups(ET.fromstring(_render(small_aggregated)), "kv-path")


@pytest.mark.parametrize("name", SOLVED)
def test_same_bytes_every_time_and_report_optional(name: str, request: pytest.FixtureRequest) -> None:
    result = request.getfixturevalue(name)
    first = _render(result)
    assert _render(result) == first
    assert render_svg(result.spec, result.topology, result.placement) == first  # report recomputed alike


def test_sizes_bounded(big: SolveResult, huge: SolveResult) -> None:
    assert len(_render(big)) < 1_000_000
    assert len(_render(huge)) < 2_000_000


def test_10k_cluster_summarises_unused_domains(huge: SolveResult) -> None:
    root = ET.fromstring(_render(huge))
    cells = _cells(root)
    topo = huge.topology
    assert sum(len(n.gpus) for n in topo.nodes) >= 10_000
    assert len(cells) < 1_000  # the used racks only
    summaries = [g.findtext(f"{NS}title") or "" for g in _groups(root, "summary")]
    assert any(t.startswith("leaf/") for t in summaries) and any(t.startswith("rack/") for t in summaries)
    # Every GPU is either drawn or counted in exactly one summary: the summaries' GPU counts add up.
    counted = sum(_summarised_gpus(t) for t in summaries)
    assert counted + len(cells) == sum(len(n.gpus) for n in topo.nodes)
    # Drawn nodes are exactly the nodes of the racks that hold a placed GPU or a router.
    used = {pod.node for r in huge.placement.replicas for i in r.instances for pod in i.pods}
    used |= {r.router for r in huge.placement.replicas if r.router}
    racks = {topo.domains[topo.node_domain[topo.node_by_name(n).index]].parent for n in used}
    assert {n for n, _ in cells} == {topo.nodes[k].name for r in racks for k in topo.domains[r].nodes}  # type: ignore[index]


def test_unused_nodes_collapse_when_the_detail_budget_is_exceeded(
    big: SolveResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(svg_layout, "DETAIL_GPUS", 64)  # the 96 placed GPUs already exceed it
    root = ET.fromstring(_render(big))
    used = {pod.node for r in big.placement.replicas for i in r.instances for pod in i.pods}
    used |= {r.router for r in big.placement.replicas if r.router}
    assert {n for n, _ in _cells(root)} == used
    summaries = [g.findtext(f"{NS}title") or "" for g in _groups(root, "summary")]
    counted = sum(_summarised_gpus(t) for t in summaries)
    assert counted + len(_cells(root)) == 1024


HOSTILE = "n<&>\"'\x01]]></title><script>alert(1)</script>"


def test_names_are_escaped() -> None:
    """Names are validated at load, but a render must be safe for any string (placement records, tools)."""
    cluster = ClusterSpec.model_validate(
        {
            "apiVersion": "placer.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "tiny"},
            "nodeClasses": {"g": {"gpus": {"count": 4, "product": "H100", "memoryGiB": 80}}},
            "nodes": [
                {"name": "gpu-a.example.com", "class": "g", "rack": "r1"},
                {"name": "gpu-b.example.com", "class": "g", "rack": "r1", "busy": [1]},
                {"name": "gpu-c.example.com", "class": "g", "rack": "r1", "busy": [0], "schedulable": False},
            ],
        }
    )
    # Bypass validation (model_copy does not validate) to reach the renderer with a hostile node name.
    cluster = cluster.model_copy(
        update={"nodes": [cluster.nodes[0].model_copy(update={"name": HOSTILE}), *cluster.nodes[1:]]}
    )
    topo = build_topology(cluster)
    spec = load_spec(SPECS / "llama-70b-disagg.yaml")
    pre, dec = "pre<&>\"'", "dec'</text>&amp;"
    spec = spec.model_copy(
        update={
            "pools": {
                pre: spec.pools["prefill"].model_copy(update={"role": "prefill", "tensor_parallel": 4, "instances": 1}),
                dec: spec.pools["decode"].model_copy(update={"role": "decode", "tensor_parallel": 2, "instances": 1}),
            },
            "transfer": None,
            "router": None,
        }
    )
    placement = Placement(
        "dep<x>&",
        "ns\"'",
        "tiny",
        (
            ReplicaPlacement(
                0,
                (
                    InstancePlacement(pre, 0, (Pod(HOSTILE, (0, 1, 2, 3)),), f"node/{HOSTILE}"),
                    InstancePlacement(dec, 0, (Pod("gpu-b.example.com", (0, 2)),), "node/gpu-b.example.com"),
                ),
            ),
        ),
        SolveStats("feasible"),
    )
    assert check(spec, topo, placement).ok
    text = render_svg(spec, topo, placement)
    root = ET.fromstring(text)  # well-formed despite the names
    assert not [el for el in root.iter() if el.tag in (f"{NS}script", "script")]
    shown = HOSTILE.replace("\x01", "\ufffd")  # XML 1.0 cannot carry U+0001
    cells = _cells(root)
    assert cells[(shown, 0)][0][1] == f"replica 0 {pre}-0"
    assert cells[("gpu-b.example.com", 2)][0][1] == f"replica 0 {dec}-0"
    assert cells[("gpu-b.example.com", 1)] == [(svg.BUSY, "busy")]
    assert cells[("gpu-c.example.com", 0)] == [(svg.BUSY, "busy")]
    assert cells[("gpu-c.example.com", 1)] == [(svg.CORDONED, "node unschedulable")]
    texts = {t.text for t in root.iter(f"{NS}title")} | {t.text for t in root.iter(f"{NS}text")}
    assert "placement of dep<x>& on tiny" in texts
    assert any(t and shown in t for t in texts)
    assert len(_groups(root, "kv-path")) == 1


def test_unknown_pool_is_refused(small: SolveResult) -> None:
    rep = small.placement.replicas[0]
    renamed = InstancePlacement("nope", 0, rep.instances[0].pods, rep.instances[0].domain)
    placement = Placement(
        small.placement.deployment,
        small.placement.namespace,
        small.placement.cluster,
        (ReplicaPlacement(0, (renamed, *rep.instances[1:]), rep.router),),
        small.placement.stats,
    )
    with pytest.raises(ValueError, match="names pool 'nope', which is not in the spec"):
        render_svg(small.spec, small.topology, placement, small.report)


def test_unknown_node_is_refused(small: SolveResult) -> None:
    rep = small.placement.replicas[0]
    moved = InstancePlacement(rep.instances[0].pool, rep.instances[0].index, (Pod("no-such-node", (0,)),), "node/x")
    placement = Placement(
        small.placement.deployment,
        small.placement.namespace,
        small.placement.cluster,
        (ReplicaPlacement(0, (moved, *rep.instances[1:]), rep.router),),
        small.placement.stats,
    )
    with pytest.raises(ValueError, match="names node 'no-such-node', which is not in cluster 'small-mixed'"):
        render_svg(small.spec, small.topology, placement, small.report)
