"""placer explain: the numbers it prints are the ones the solver optimised, it reads back both the placement
record and the manifests, its JSON is stable (golden files), its links are named correctly, and
``--why-not`` names the constraint that actually conflicts, with a relaxation a solve confirms."""

from __future__ import annotations

import copy
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placer.check.verify import check
from placer.emit.manifests import build_manifests, placement_text, to_yaml
from placer.emit.readback import load_placed
from placer.explain.explanation import explain_placement, to_json
from placer.explain.view import gpu_ranges, render
from placer.model.errors import InfeasibleError, InputError
from placer.model.load import load_cluster, load_spec
from placer.model.placement import Pod
from placer.model.spec import ServingTopology
from placer.solver.conflicts import explain_infeasible, single_rule_conflicts
from placer.solver.problem import build_problem
from placer.solver.solve import SolveOptions, solve
from placer.topology import cost
from placer.topology.build import build_topology

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "fixtures" / "specs"
CLUSTERS = ROOT / "fixtures" / "clusters"
GOLDEN = ROOT / "tests" / "golden"
CASES = [
    ("llama-70b-disagg", "dgx-h100-1024"),
    ("llama-70b-disagg", "gb200-nvl72-1008"),
    ("aggregated-tp8", "small-mixed"),
    ("tp16-multinode", "dgx-h100-1024"),
]


def _inputs(spec_name: str, cluster_name: str):
    spec = load_spec(SPECS / f"{spec_name}.yaml")
    topo = build_topology(load_cluster(CLUSTERS / f"{cluster_name}.yaml"))
    return spec, topo


@pytest.fixture(scope="module", params=CASES, ids=["/".join(c) for c in CASES])
def solved(request):
    spec, topo = _inputs(*request.param)
    placement = solve(build_problem(spec, topo), SolveOptions())
    return request.param, spec, topo, placement


def test_cost_terms_add_up_to_the_solver_objective(solved):
    _, spec, topo, placement = solved
    solver_objective = placement.stats.objective  # straight from CP-SAT, before the checker
    ex = explain_placement(spec, topo, placement)
    assert not ex.violations
    assert sum(t.units for t in ex.terms) == ex.total_units == solver_objective
    assert sum(i.units for i in ex.instances) == next(t.units for t in ex.terms if t.name == "allReduce")
    assert sum(x.units for x in ex.transfers) == next(t.units for t in ex.terms if t.name == "kvTransfer")
    assert sum(t.share for t in ex.terms) == pytest.approx(1.0)


def test_instance_figures_follow_the_cost_model(solved):
    _, spec, topo, placement = solved
    ex = explain_placement(spec, topo, placement)
    for inst in ex.instances:
        pool = spec.pools[inst.pool]
        assert sum(len(p["gpus"]) for p in inst.pods) == pool.gpus_per_instance
        if inst.link is None:
            continue
        # the ring runs at its bottleneck link, times the rings side by side across nodes (one per rail)
        assert inst.ring_gbps <= inst.ring_lanes * inst.link.bandwidth_gbps
        assert inst.ring_lanes == 1 or len(inst.pods) > 1
        if inst.ring_lanes == 1:
            assert inst.ring_gbps == inst.link.bandwidth_gbps
        per_call = cost.ring_allreduce_us(
            pool.tensor_parallel, inst.message_bytes, inst.ring_gbps, inst.link.latency_us
        )
        if pool.pipeline_parallel == 1:
            assert inst.allreduce_us_per_call == pytest.approx(per_call)
            assert inst.allreduce_us_per_pass == pytest.approx(2 * spec.model.layers * per_call)
        assert inst.units == cost.to_units(spec.objective.all_reduce * inst.allreduce_us_per_pass)


def test_manifests_and_record_explain_identically(solved, tmp_path):
    _, spec, topo, placement = solved
    report = check(spec, topo, placement)
    record = tmp_path / "placed.yaml"
    record.write_text(placement_text(placement, record, spec))
    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(to_yaml(build_manifests(spec, topo, placement, report)))
    from_record, from_manifests = load_placed(record), load_placed(manifests)
    assert from_record.spec == from_manifests.spec == spec
    assert from_record.placement.replicas == from_manifests.placement.replicas == placement.replicas
    a = to_json(explain_placement(spec, topo, from_record.placement))
    b = to_json(explain_placement(spec, topo, from_manifests.placement))
    assert a == b


@pytest.mark.parametrize("case", [CASES[0], CASES[2]], ids=["llama-dgx1024", "aggregated-small"])
def test_explain_json_golden(case):
    """The JSON explain prints, baselines included, is stable: regenerate with PLACER_UPDATE_GOLDEN=1."""
    from placer.baselines import run_all

    spec, topo = _inputs(*case)
    placement = solve(build_problem(spec, topo), SolveOptions())
    from placer.pipeline import verify_placement

    verify_placement(spec, topo, placement)
    got = json.dumps(to_json(explain_placement(spec, topo, placement, run_all(spec, topo))), indent=2, sort_keys=True)
    path = GOLDEN / f"explain-{case[0]}-{case[1]}.json"
    if os.environ.get("PLACER_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(got + "\n")
    assert got + "\n" == path.read_text()


def test_links_are_named_by_class_and_measured_figures_are_credited():
    spec, topo = _inputs("aggregated-tp8", "small-mixed")
    placement = solve(build_problem(spec, topo), SolveOptions())
    ex = explain_placement(spec, topo, placement)
    by_node = {i.pods[0]["node"]: i for i in ex.instances}
    # dgx-b's NVLink carries a measured override (820 GB/s from nccl-tests); the A100 PCIe node's TP8 ring
    # crosses between its two CPU sockets at 32 GB/s.
    assert by_node["dgx-b"].link.kind == "nvlink"
    assert by_node["dgx-b"].link.bandwidth_gbps == 820
    assert "nccl-tests" in by_node["dgx-b"].link.measured
    assert by_node["pcie-a"].link.kind == "cross-socket"
    assert by_node["pcie-a"].link.bandwidth_gbps == 32
    # 25.6x less bandwidth, twice the latency: with decode-sized messages (4 MiB) the pass is ~11x slower.
    assert by_node["pcie-a"].allreduce_us_per_pass > 10 * by_node["dgx-b"].allreduce_us_per_pass


def test_gb200_prefill_spans_trays_and_kv_path_is_named():
    spec, topo = _inputs("llama-70b-disagg", "gb200-nvl72-1008")
    ex = explain_placement(spec, topo, solve(build_problem(spec, topo), SolveOptions()))
    prefill = [i for i in ex.instances if i.pool == "prefill"]
    # TP8 on 4-GPU trays spans trays of one NVL72 rack (from free fragments, where they are).
    assert all(len(i.pods) >= 2 and i.link.kind == "nvlink-domain" for i in prefill)
    assert all(i.link.bandwidth_gbps == 600 and i.domain.startswith("nvlink-domain/") for i in prefill)
    (transfer,) = ex.transfers
    assert transfer.meets_floor and transfer.bandwidth_gbps >= 400
    assert transfer.link.kind in ("nvlink", "nvlink-domain")


def test_slo_checks_add_prompt_allreduce_and_kv_transfer():
    spec, topo = _inputs("llama-70b-disagg", "dgx-h100-1024")
    spec = spec.model_copy(update={"slo": spec.slo.model_copy(update={"ttft_ms": 20.0, "itl_ms": 1.0})})
    ex = explain_placement(spec, topo, solve(build_problem(spec, topo), SolveOptions()))
    ttft, itl = ex.slos
    prefill_pass = max(i.allreduce_us_per_pass for i in ex.instances if i.pool == "prefill")
    kv = ex.transfers[0].transfer_us
    # Prefill tokens in flight default to the prompt, so the prefill pass is the prompt's forward pass.
    assert ttft.communication_ms == pytest.approx((prefill_pass + kv) / 1000)
    assert ttft.ok and ttft.share == pytest.approx(ttft.communication_ms / 20.0)
    decode_pass = max(i.allreduce_us_per_pass for i in ex.instances if i.pool == "decode")
    assert itl.communication_ms == pytest.approx(decode_pass / 1000)
    assert not itl.ok  # 2.08 ms of all-reduce per decode step cannot fit a 1 ms ITL budget


def test_a_broken_placement_is_explained_not_hidden():
    spec, topo = _inputs("aggregated-tp8", "small-mixed")
    placement = solve(build_problem(spec, topo), SolveOptions())
    rep = placement.replicas[0]
    inst = rep.instances[0]
    # Move the instance onto dgx-a, whose GPUs 2 and 5 are busy.
    moved = replace(inst, pods=(Pod("dgx-a", tuple(range(8))),))
    broken = replace(placement, replicas=(replace(rep, instances=(moved,)), *placement.replicas[1:]))
    ex = explain_placement(spec, topo, broken)
    assert any("GPU 2 on dgx-a is busy" in v for v in ex.violations)
    text = _render_text(ex)
    assert "the checker found broken rules" in text and "GPU 2 on dgx-a is busy" in text


def test_the_checker_names_the_instances_a_replica_lacks_or_should_not_have():
    """It said "has 1 of 1 instances" for a replica whose one instance was of an unknown pool."""
    from placer.check.verify import check

    spec, topo = _inputs("aggregated-tp8", "small-mixed")
    placement = solve(build_problem(spec, topo), SolveOptions())
    rep = placement.replicas[0]
    inst = rep.instances[0]
    for instances, said in [
        ((replace(inst, pool="nosuch"),), "lacks aggregated-0; has nosuch-0, which the spec does not place"),
        ((inst, inst), "lists aggregated-0 twice"),
        ((), "lacks aggregated-0"),
    ]:
        bent = replace(placement, replicas=(replace(rep, instances=instances), *placement.replicas[1:]))
        violations = check(spec, topo, bent).violations
        assert f"replica 0 does not hold the spec's instances: {said}" in violations


def _render_text(ex) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render(ex))
    return console.export_text()


def test_a_record_without_a_bound_says_so():
    """A plan's record, or one solved at scarcity prices, carries no bound: the header printed 'bound None'."""
    spec, topo = _inputs("aggregated-tp8", "small-mixed")
    placement = solve(build_problem(spec, topo), SolveOptions())
    unbounded = replace(placement, stats=replace(placement.stats, status="feasible", bound=None, gap=None))
    text = _render_text(explain_placement(spec, topo, unbounded))
    assert "feasible (best found; no bound)" in text and "units (no bound)" in text and "None" not in text


def test_rendered_view_names_what_a_platform_engineer_looks_for():
    from placer.baselines import run_all

    spec, topo = _inputs("llama-70b-disagg", "dgx-h100-1024")
    ex = explain_placement(spec, topo, solve(build_problem(spec, topo), SolveOptions()), run_all(spec, topo))
    text = _render_text(ex)
    for words in (
        "tensor-parallel groups",
        "NVLink (NVSwitch) in node",
        "KV-cache transfer",
        "InfiniBand leaf",
        "4 × 50 = 200 GB/s",
        "met (≥ 200 GB/s)",
        "router",
        "objective",
        "counterfactual",
        "kube-scheduler",
        "Kueue",
    ):
        assert words in text, words


def test_gpu_ranges():
    assert gpu_ranges([0, 1, 2, 3, 6]) == "0-3,6"
    assert gpu_ranges([7]) == "7"
    assert gpu_ranges([1, 3, 4, 5, 7]) == "1,3-5,7"


# ---- reading back ------------------------------------------------------------------------------------


def test_record_without_spec_and_foreign_manifests_are_bad_input(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text(
        "apiVersion: placer.dev/v1alpha1\nkind: Placement\nmetadata: {name: x}\ncluster: c\n"
        "status: {status: optimal}\nreplicas: []\n"
    )
    with pytest.raises(InputError, match="carries no spec"):
        load_placed(old)
    foreign = tmp_path / "pod.yaml"
    foreign.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n")
    with pytest.raises(InputError, match="not manifests placer emitted"):
        load_placed(foreign)
    typo = tmp_path / "typo.yaml"
    typo.write_text(old.read_text().replace("replicas: []", "replicaz: []"))
    with pytest.raises(InputError, match="replicaz"):
        load_placed(typo)


def _edited_record(tmp_path: Path, edit) -> Path:
    """A record placer wrote for the small cluster, edited by ``edit`` (a function of the plain data)."""
    import yaml

    from placer.model.record import spec_record

    spec, topo = _inputs("aggregated-tp8", "small-mixed")
    data = solve(build_problem(spec, topo), SolveOptions()).to_record(spec=spec_record(spec))
    edit(data)
    path = tmp_path / "edited.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _line_with(path: Path, text: str, nth: int = 1) -> int:
    """The line of the ``nth`` line reading ``text`` (a list item's dash left out), counted from ``replicas:``
    on where it occurs there (the spec the record carries says "pool: aggregated" too)."""
    lines = path.read_text().splitlines()
    found = [n for n, line in enumerate(lines, 1) if line.strip().removeprefix("- ") == text]
    after = [n for n in found if n > lines.index("replicas:")]
    return (after or found)[nth - 1]


def _set(where: str, value):
    def edit(data):
        replica, key = data["replicas"][0], where
        if key == "router":
            replica["router"] = value
        elif key == "instances":
            replica["instances"] = value(replica["instances"])
        else:
            replica["instances"][0][key] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "said", "line_text"),
    [
        (_set("pool", "nosuch"), "replicas[0].instances[0].pool: 'nosuch' is not a pool of the spec", "pool: nosuch"),
        (_set("index", 3), "replicas[0].instances[0].index: pool 'aggregated' has 1 instance(s)", "index: 3"),
        (
            _set("instances", lambda insts: insts + copy.deepcopy(insts)),
            "aggregated instance 0 of replica 0 is listed twice",
            ("pool: aggregated", 2),  # the second item of replica 0's instances
        ),
        (_set("instances", lambda insts: []), "replica 0 lacks aggregated instance(s) [0]", "instances: []"),
        (_set("router", None), "replicas[0].router: the spec asks for a router per replica", "router: null"),
        (lambda d: d["status"].update(status="great"), "status.status: Input should be", "status: great"),
    ],
    ids=["unknown-pool", "index-out-of-range", "instance-twice", "instance-missing", "no-router", "bad-status"],
)
def test_an_edited_record_that_is_no_placement_of_its_spec_is_bad_input_with_its_line(tmp_path, edit, said, line_text):
    """Before, an unknown pool or instance index reached the checker, which said "has 1 of 1 instances" and
    explain exited 0; a record's validation errors had no line."""
    path = _edited_record(tmp_path, edit)
    with pytest.raises(InputError) as info:
        load_placed(path)
    message = str(info.value)
    assert said in message
    text, nth = line_text if isinstance(line_text, tuple) else (line_text, 1)
    assert message.startswith(f"{path}:{_line_with(path, text, nth)}: "), message


# ---- why not -----------------------------------------------------------------------------------------


def _spec(text: str) -> ServingTopology:
    import yaml

    base = {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "ServingTopology",
        "metadata": {"name": "t"},
        "model": {"layers": 80, "hiddenSize": 8192, "kvHeads": 8, "headDim": 128},
    }
    return ServingTopology.model_validate(base | yaml.safe_load(text))


def _conflicts(spec: ServingTopology, cluster: str = "small-mixed"):
    topo = build_topology(load_cluster(CLUSTERS / f"{cluster}.yaml"))
    problem = build_problem(spec, topo)
    with pytest.raises(InfeasibleError):
        solve(problem, SolveOptions(time_limit_s=10))
    return explain_infeasible(problem)


T = "template: {image: 'vllm/vllm-openai:v0.11.0'}"


def test_why_not_packing_level_names_the_largest_block_and_a_broader_level():
    spec = _spec(
        f"pools: {{aggregated: {{instances: 2, tensorParallel: 7, gpu: {{product: NVIDIA-H100-80GB-HBM3}}, "
        f"placement: {{required: node}}, {T}}}}}"
    )
    (c,) = _conflicts(spec)
    assert c.rule == "pools.aggregated.placement.required"
    assert c.message == (
        "aggregated needs 2 groups of 7 GPUs, each inside one node; only 1 such group fits "
        "(the largest free block is 8 GPUs (node/dgx-b))."
    )
    # dgx-a has 6 of its 8 GPUs free: one more makes room for a second TP7 there
    assert c.relax == "allow pools.aggregated.placement.required: rack; or free 1 more GPU in node/dgx-a"


@pytest.mark.parametrize(
    "requests, said, relax",
    [
        ('{cpu: "500"}', "each pod requests cpu 500 (the most free is 224, on dgx-b)", "requests.cpu to 224 or less"),
        ("{memory: 3Ti}", "each pod requests memory 3072Gi (the most free is 2048Gi, on dgx-b)", "memory to 2048Gi"),
    ],
)
def test_why_not_names_a_cpu_or_memory_request_no_node_can_hold(requests: str, said: str, relax: str):
    """It was blamed on GPU packing ("the pools' TP groups cannot be packed together") with one pool."""
    spec = _spec(
        f"pools: {{aggregated: {{instances: 1, tensorParallel: 8, placement: {{required: node}}, "
        f"template: {{image: 'vllm/vllm-openai:v0.11.0', resources: {{requests: {requests}}}}}}}}}"
    )
    (c,) = _conflicts(spec)
    assert c.rule == "pools.aggregated.template.resources.requests"
    assert said in c.message and "no node with 8 free matching GPUs has that much free" in c.message
    assert relax in c.relax


def test_why_not_says_an_engine_instance_sits_on_one_node_and_offers_a_split_that_fits():
    """A vLLM TP8 instance that fits one node runs on one node even under required: leaf; offering
    "required: leaf" (as before) did not fit. The split it offers makes the pool fit on its own."""
    pools = (
        "pools: {aggregated: {instances: 1, tensorParallel: 8, placement: {required: %s}, "
        "template: {engine: vllm, model: m, image: 'vllm/vllm-openai:v0.11.0'}}}\nreplicas: 3"
    )
    for level in ("node", "leaf"):
        (c,) = _conflicts(_spec(pools % level))
        assert c.rule == "pools.aggregated.placement.required"
        assert "only 2 such groups fit (the largest free block is 8 GPUs (node/dgx-b))" in c.message
        assert ("whatever placement.required says" in c.message) == (level == "leaf")
        assert "allow pools.aggregated.placement.required" not in (c.relax or "")
        assert "split each instance over nodes: pools.aggregated.nodeCount: 2, gpusPerNode: 4" in c.relax
        assert c.relax.endswith("or free 1 more GPU in node/pcie-b")  # pcie-b has 7 of 8 free
    split = _spec(
        "pools: {aggregated: {instances: 1, tensorParallel: 8, nodeCount: 2, gpusPerNode: 4, "
        "placement: {required: leaf}, template: {engine: vllm, model: m, image: 'vllm/vllm-openai:v0.11.0'}}}"
        "\nreplicas: 3"
    )
    topo = build_topology(load_cluster(CLUSTERS / "small-mixed.yaml"))
    assert single_rule_conflicts(build_problem(split, topo)) == []


_DGX_CLUSTER = """apiVersion: placer.dev/v1alpha1
kind: Cluster
metadata: {name: toy}
fabric:
  nvlink: {bandwidthGBps: 900, latencyUs: 1.0}
  network: {kind: infiniband, railGBps: 50, railsPerNode: 8, latencyUs: 2}
nodeClasses:
  dgx:
    gpus: {count: 8, product: H100, memoryGiB: 80}
    cpu: "224"
    memory: 2Ti
nodes:
"""


def _toy(tmp_path: Path, nodes: str):
    path = tmp_path / "cluster.yaml"
    path.write_text(_DGX_CLUSTER + nodes)
    return build_topology(load_cluster(path))


def _tp8(requests: str = "{}", extra: str = "", instances: int = 1) -> ServingTopology:
    return _spec(
        f"pools: {{aggregated: {{instances: {instances}, tensorParallel: 8, {extra}placement: {{required: node}}, "
        f"template: {{image: 'vllm/vllm-openai:v0.11.0', resources: {{requests: {requests}}}}}}}}}"
    )


def _why_not(spec: ServingTopology, topo):
    problem = build_problem(spec, topo)
    with pytest.raises(InfeasibleError):
        solve(problem, SolveOptions(time_limit_s=10))
    return explain_infeasible(problem)


def test_why_not_cpu_and_memory_relaxation_is_read_off_one_node_and_then_fits(tmp_path: Path):
    """CPU is most free on one node and memory on another: the relaxation offered the best of each, which no
    node holds together (applied, still infeasible). It now names one node, and applied, the pod fits."""
    topo = _toy(
        tmp_path,
        '  - {name: a, class: dgx, rack: r1, used: {cpu: "192", memory: 2032Gi}}\n'
        '  - {name: b, class: dgx, rack: r1, used: {cpu: "220", memory: 1848Gi}}\n',
    )
    (c,) = _why_not(_tp8('{cpu: "64", memory: 256Gi}'), topo)
    assert c.rule == "pools.aggregated.template.resources.requests"
    assert "cpu 64 (the most free is 32, on a) and memory 256Gi (the most free is 200Gi, on b)" in c.message
    field = "pools.aggregated.template.resources.requests"
    lower = f"lower {field}.cpu to 32 and {field}.memory to 16Gi or less (what a has free)"
    assert c.relax == f"{lower}, or free cpu and memory on a node"
    relaxed = build_problem(_tp8('{cpu: "32", memory: 16Gi}'), topo)
    assert solve(relaxed, SolveOptions(time_limit_s=10)).replicas


def test_why_not_offers_no_request_of_zero_when_a_resource_is_used_up(tmp_path: Path):
    """With every node's memory taken it said 'the most free is 5.1409e-07Gi' and 'lower ... memory to 0Gi'."""
    topo = _toy(tmp_path, '  - {name: a, class: dgx, rack: r1, used: {memory: "2199023255000"}}\n')
    (c,) = _why_not(_tp8("{memory: 1Gi}"), topo)
    assert "memory 1Gi (the most free is 0Mi, on a)" in c.message and "e-0" not in c.message
    assert c.relax == "free memory on a node with 8 free matching GPUs"


def test_why_not_split_over_nodes_counts_distinct_nodes_and_fits(tmp_path: Path):
    """Two 2-node halves were counted on one node with 8 free GPUs (pod slots, not distinct nodes), so
    'nodeCount: 2, gpusPerNode: 4, placement.required: rack' was offered and did not fit; leaf does."""
    topo = _toy(
        tmp_path,
        "  - {name: a, class: dgx, rack: r1, leaf: su1}\n"
        "  - {name: c, class: dgx, rack: r2, leaf: su1, busy: [0, 1, 2, 3]}\n"
        "  - {name: d, class: dgx, rack: r2, leaf: su1, busy: [0, 1, 2, 3]}\n",
    )
    spec = _spec(
        "pools: {aggregated: {instances: 2, tensorParallel: 8, placement: {required: node}, "
        "template: {engine: vllm, model: m, image: 'vllm/vllm-openai:v0.11.0'}}}"
    )
    (c,) = _why_not(spec, topo)
    assert (
        "split each instance over nodes: pools.aggregated.nodeCount: 2, gpusPerNode: 4, placement.required: leaf"
        in c.relax
    )
    split = _spec(
        "pools: {aggregated: {instances: 2, tensorParallel: 8, nodeCount: 2, gpusPerNode: 4, "
        "placement: {required: leaf}, template: {engine: vllm, model: m, image: 'vllm/vllm-openai:v0.11.0'}}}"
    )
    assert solve(build_problem(split, topo), SolveOptions(time_limit_s=10)).replicas
    at_rack = _spec(  # what was offered before: it does not fit
        "pools: {aggregated: {instances: 2, tensorParallel: 8, nodeCount: 2, gpusPerNode: 4, "
        "placement: {required: rack}, template: {engine: vllm, model: m, image: 'vllm/vllm-openai:v0.11.0'}}}"
    )
    with pytest.raises(InfeasibleError):
        solve(build_problem(at_rack, topo), SolveOptions(time_limit_s=10))


def test_why_not_free_gpus_only_on_a_node_whose_cpu_holds_the_pod(tmp_path: Path):
    """Node c is one GPU short of a TP8 but has 4 of its 224 CPUs free for pods of 16: freeing its GPU was
    offered and changed nothing. Node a (two GPUs short, CPU to spare) is named instead."""
    topo = _toy(
        tmp_path,
        "  - {name: a, class: dgx, rack: r1, busy: [0, 1]}\n"
        "  - {name: b, class: dgx, rack: r1}\n"
        '  - {name: c, class: dgx, rack: r2, busy: [0], used: {cpu: "220"}}\n',
    )
    (c,) = _why_not(_tp8('{cpu: "16"}', instances=2), topo)
    assert c.relax.endswith("free 2 more GPUs in node/a")


def test_why_not_names_a_spread_that_has_too_few_domains_beside_the_packing():
    """Three replicas spread over racks on a cluster of two racks: only the packing line was given, and
    freeing the GPU it offered still left the request infeasible. The spread rule is named too."""
    spec = _spec(
        f"pools: {{aggregated: {{instances: 1, tensorParallel: 8, placement: {{required: node}}, {T}}}}}\n"
        "replicas: 3\nminReplicas: 3\nspread: {level: rack}"
    )
    conflicts = _conflicts(spec)
    (spread,) = [c for c in conflicts if c.rule == "spread.level"]
    assert spread.message == "3 replicas, each in a different rack; only 2 rack domains have free matching GPUs."
    assert spread.relax.endswith("or lower minReplicas to 2")
    assert any(c.rule == "pools.aggregated.placement.required" for c in conflicts)
    narrower = spread.relax.split(" instead of")[0].removeprefix("spread across ")
    relaxed = _spec(
        f"pools: {{aggregated: {{instances: 1, tensorParallel: 8, placement: {{required: node}}, {T}}}}}\n"
        f"replicas: 3\nminReplicas: 3\nspread: {{level: {narrower}}}"
    )
    topo = build_topology(load_cluster(CLUSTERS / "small-mixed.yaml"))
    assert all(c.rule != "spread.level" for c in single_rule_conflicts(build_problem(relaxed, topo)))


def test_why_not_a_selector_nothing_matches_is_the_only_conflict():
    """Its router rule has no domain with room either, but only because the pool has no GPUs: "drop
    router.near" would not help, so it is not said."""
    spec = _spec(
        f"pools: {{aggregated: {{instances: 1, tensorParallel: 8, gpu: {{product: NVIDIA-B200}}, {T}}}}}\n"
        "router: {near: {pool: aggregated, level: rack}}"
    )
    (c,) = _conflicts(spec)
    assert c.rule == "pools.aggregated.gpu"


def test_why_not_transfer_floor_offers_the_best_feasible_floor():
    pools = f"""
pools:
  prefill: {{instances: 1, tensorParallel: 4, {T}}}
  decode: {{instances: 1, tensorParallel: 4, {T}}}
"""
    spec = _spec(pools + "\ntransfer: {minBandwidthGBps: 5000}")
    (c,) = _conflicts(spec)
    assert c.rule == "transfer"
    # Best: both on dgx-b, 4 GPU pairs over its measured 820 GB/s NVLink = 3280 GB/s.
    assert "the best domain with room offers 3280 GB/s (node/dgx-b)" in c.message
    assert c.relax.startswith("lower transfer.minBandwidthGBps to 3280")


def test_why_not_spread_and_min_replicas_conflict_together():
    spec = _spec(
        f"pools: {{aggregated: {{instances: 1, tensorParallel: 4, gpu: {{product: NVIDIA-H100-80GB-HBM3}}, "
        f"placement: {{required: node}}, {T}}}}}\nreplicas: 2\nspread: {{level: rack}}"
    )
    conflicts = _conflicts(spec)
    rules = [c.rule for c in conflicts if c.rule]
    assert rules == ["spread.level", "minReplicas"]
    assert conflicts[0].relax == "spread across node instead of rack"
    assert conflicts[1].relax == "lower minReplicas to 1"
    assert "cannot all hold together" in conflicts[-1].message


def test_why_not_never_tries_dropping_a_spread_that_one_replica_cannot_break(monkeypatch):
    import placer.solver.conflicts as conflicts
    from placer.solver.options import Budget

    pools = f"""
pools:
  prefill: {{instances: 1, tensorParallel: 4, {T}}}
  decode: {{instances: 1, tensorParallel: 4, {T}}}
"""
    spec = _spec(pools + "\ntransfer: {minBandwidthGBps: 5000}\nreplicas: 2\nminReplicas: 1\nspread: {level: rack}")
    dropped = []
    real = conflicts._with

    def spy(spec, rule, value):
        dropped.append(rule)
        return real(spec, rule, value)

    monkeypatch.setattr(conflicts, "_with", spy)
    topo = build_topology(load_cluster(CLUSTERS / "small-mixed.yaml"))
    options = SolveOptions(time_limit_s=10)
    (c,) = conflicts.deletion_filter(build_problem(spec, topo), Budget.of(options))
    assert c.rule == "transfer"
    assert "transfer floor" in dropped and "replica spread" not in dropped


def test_why_not_router_proximity_finds_the_level_that_fits():
    spec = _spec("""
pools:
  aggregated:
    instances: 1
    tensorParallel: 8
    placement: {required: node}
    template: {image: 'vllm/vllm-openai:v0.11.0', resources: {requests: {cpu: '16'}}}
router: {cpu: '220', near: {pool: aggregated, level: node}}
""")
    (c,) = _conflicts(spec)
    assert c.rule == "router.near.level"
    assert c.relax == "allow router.near.level: leaf"


def test_why_not_gpu_selector():
    spec = _spec(f"pools: {{aggregated: {{instances: 1, tensorParallel: 8, gpu: {{product: NVIDIA-B200}}, {T}}}}}")
    (c,) = _conflicts(spec)
    assert c.rule == "pools.aggregated.gpu"
    assert "GPUs of product NVIDIA-B200; this cluster has NVIDIA-A100-PCIE-40GB (40 GiB)," in c.message


def test_infeasible_solve_says_whether_it_is_proven_and_explains_only_when_asked():
    spec = _spec(
        f"pools: {{aggregated: {{instances: 2, tensorParallel: 7, gpu: {{product: NVIDIA-H100-80GB-HBM3}}, "
        f"placement: {{required: node}}, {T}}}}}"
    )
    problem = build_problem(spec, build_topology(load_cluster(CLUSTERS / "small-mixed.yaml")))
    with pytest.raises(InfeasibleError) as explained:
        solve(problem, SolveOptions(time_limit_s=10))
    assert explained.value.proven and explained.value.conflicts
    with pytest.raises(InfeasibleError) as quiet:  # an admission loop's choice: the verdict without the why
        solve(problem, SolveOptions(time_limit_s=10, explain=False))
    assert quiet.value.proven and not quiet.value.conflicts and not quiet.value.reasons


@given(st.lists(st.integers(0, 3), min_size=1, max_size=5), st.integers(1, 4))
@settings(max_examples=200, deadline=None)
def test_distinct_node_groups_is_the_most_instances_a_search_finds(slots: list[int], nodes: int):
    """The count of multi-node instances (one pod per node each) against an exhaustive search."""
    from functools import cache
    from itertools import combinations

    from placer.solver.conflicts import _distinct_node_groups

    @cache
    def most(left: tuple[int, ...]) -> int:
        best = 0
        for chosen in combinations([i for i, c in enumerate(left) if c], nodes):
            rest = list(left)
            for i in chosen:
                rest[i] -= 1
            best = max(best, 1 + most(tuple(sorted(rest))))
        return best

    assert _distinct_node_groups(slots, nodes) == most(tuple(sorted(slots)))


def test_why_not_packing_offers_the_fewer_replicas_a_solve_confirms():
    """The large spec asks 4 replicas (32 TP8 prefill groups) on the 1,024-GPU fixture, where 24 fit: that
    packs 3 replicas' prefill, but the decode pools' leaf rule then binds; 2 is what a solve confirms. Only
    "free 1 more GPU ... for one more group" was offered, which cannot make it fit."""
    spec = load_spec(SPECS / "llama-70b-large.yaml")
    assert spec.transfer is not None  # 100 GB/s: met through the spine, as this case was written for
    spec = spec.model_copy(update={"transfer": spec.transfer.model_copy(update={"min_bandwidth_gbps": 100})})
    topo = build_topology(load_cluster(CLUSTERS / "dgx-h100-1024.yaml"))
    (c,) = explain_infeasible(build_problem(spec, topo))
    assert c.rule == "pools.prefill.placement.required" and "only 24 such groups fit" in c.message
    assert c.relax is not None and c.relax.startswith("lower minReplicas to 2; or ")
    for k, fits in ((2, True), (3, False)):
        fewer = build_problem(spec.model_copy(update={"min_replicas": k}), topo)
        try:
            placed = solve(fewer, SolveOptions(time_limit_s=20))
        except InfeasibleError:
            placed = None
        assert (placed is not None) is fits


def test_a_why_not_at_scale_names_one_rule_and_a_relaxation_a_solve_confirms():
    """The large spec on a 10k-GPU DGX cluster (seed 0) where no leaf holds a replica's 200 GB/s transfer:
    even on a two-second budget the why-not names the floor alone and the mildest floor that fits, because
    checking that a relaxed spec fits takes the greedy's witness rather than a model of the whole cluster
    (before, the budget ran out and the floor came without a verified relaxation). The relaxation is then
    confirmed by a real solve and the independent checker."""
    from placer.model.cluster import ClusterSpec
    from placer.topology.generate import generate_cluster

    topo = build_topology(ClusterSpec.model_validate(generate_cluster("dgx-h100", 10_000, 0)))
    spec = load_spec(ROOT / "fixtures" / "specs" / "llama-70b-large.yaml")
    (conflict,) = explain_infeasible(build_problem(spec, topo), seconds=2.0)
    assert conflict.rule == "transfer" and "200 GB/s" in conflict.message
    assert conflict.relax is not None and conflict.relax.startswith("lower transfer.minBandwidthGBps to 100 ")
    relaxed = spec.model_copy(update={"transfer": spec.transfer.model_copy(update={"min_bandwidth_gbps": 100.0})})
    placement = solve(build_problem(relaxed, topo), SolveOptions(time_limit_s=10))
    assert len(placement.replicas) >= spec.replicas_floor and check(relaxed, topo, placement).violations == []


def test_a_tp16_over_two_nodes_is_priced_at_every_rail():
    """The fixture's TP16 (nodeCount 2 x 8 GPUs) on DGX H100: its all-reduce crosses the network on 8 rings
    side by side (placer's own NCCL settings give each of the 8 rails a channel), so a call costs the ring
    formula at 8 x 50 GB/s, not at one rail's 50 (8x slower, as priced before). The solver priced it the
    same way: the run is still proven optimal after the checker's recomputation."""
    spec = load_spec(ROOT / "fixtures" / "specs" / "tp16-multinode.yaml")
    topo = build_topology(load_cluster(ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml"))
    placement = solve(build_problem(spec, topo), SolveOptions())
    ex = explain_placement(spec, topo, placement)
    assert placement.stats.status == "optimal" and ex.objective == placement.stats.objective
    (inst,) = ex.instances
    assert len(inst.pods) == 2 and inst.link is not None and inst.link.bandwidth_gbps == 50
    assert inst.ring_lanes == 8 and inst.ring_gbps == 400
    msg = inst.message_bytes
    assert inst.allreduce_us_per_call == pytest.approx(cost.ring_allreduce_us(16, msg, 400.0, inst.link.latency_us))


def test_a_ring_across_two_socket_pcie_nodes_is_priced_alike_by_solver_and_checker(tmp_path):
    """A TP4 over two PCIe nodes (nodeCount 2 x 2 GPUs) on small-mixed: the rings cross the rails twice side
    by side, but every node's own links, the socket crossing included, are the solver's cap; the checker
    took only the GPUs' own socket and multiplied the socket crossing by the rails, so the two disagreed
    and the run lost its proof. Now they agree, and the run is optimal."""
    import yaml

    doc = {
        "apiVersion": "placer.dev/v1alpha1", "kind": "ServingTopology", "metadata": {"name": "pcie-tp4"},
        "model": {"layers": 32, "hiddenSize": 4096, "kvHeads": 8, "headDim": 128},
        "pools": {"aggregated": {
            "instances": 1, "tensorParallel": 4, "nodeCount": 2, "gpusPerNode": 2,
            "gpu": {"product": "NVIDIA-A100-PCIE-40GB"}, "placement": {"required": "spine"},
            "template": {"image": "example.com/engine:1"},
        }},
    }  # fmt: skip
    path = tmp_path / "pcie.yaml"
    path.write_text(yaml.safe_dump(doc))
    spec = load_spec(path)
    topo = build_topology(load_cluster(ROOT / "fixtures" / "clusters" / "small-mixed.yaml"))
    placement = solve(build_problem(spec, topo), SolveOptions())
    report = check(spec, topo, placement)
    assert report.violations == [] and report.total_units == placement.stats.objective
    assert placement.stats.status == "optimal"
    (inst,) = explain_placement(spec, topo, placement).instances
    assert len(inst.pods) == 2 and inst.ring_lanes == 2
