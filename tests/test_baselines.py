"""Baselines (placer.baselines): every placement they return is structurally sound by the independent
checker's account, never better than placer's optimum under placer's own lexicographic goal (most replicas,
fewest preferred-level misses, least cost), deterministic; the exhaustive enumerator gives up on NVL72 racks
and never passes its cap; and small forcing cases where one rule alone decides the answer.

A baseline may break topology rules (count-only knows none; Kueue knows packing levels and spread but not
transfer floors or router proximity), and the checker says so; it may never double-book a GPU, take a busy
one, get counts wrong or leave a replica incomplete.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placer.baselines import BASELINES, BaselineResult, exhaustive, run_all, run_baseline
from placer.baselines._common import Context, place_replicas
from placer.check.verify import Report, check
from placer.model.cluster import ClusterSpec
from placer.model.errors import InfeasibleError, InputError
from placer.model.levels import LEVEL_RANK
from placer.model.load import load_cluster, load_spec
from placer.model.placement import Placement
from placer.model.spec import ServingTopology
from placer.pipeline import verify_placement
from placer.solver.problem import build_problem
from placer.solver.solve import SolveOptions, solve
from placer.topology.build import build_topology
from placer.topology.generate import generate_cluster
from placer.topology.graph import Topology

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "fixtures" / "specs").glob("*.yaml"))
CLUSTERS = sorted((ROOT / "fixtures" / "clusters").glob("*.yaml"))

# What the checker may say about a baseline: the topology rules. Anything else is a structural defect.
PACKING = re.compile(r"^replica \d+ \S+ stage \d+: TP group spans .*, must pack within ")
TRANSFER = re.compile(r"^replica \d+ \S+ -> \S+: (KV path offers .* GB/s, floor is .* GB/s|apart across .*)$")
ROUTER = re.compile(r"^replica \d+: router on \S+ is not within .* of every \S+ instance$")
SPREAD = re.compile(r"^replicas \d+ and \d+ share \S+ \(spread across \S+\)$")
# Count-based schedulers know nothing of the engine: they may split a preset instance unevenly.
EVEN = re.compile(r"^replica \d+ \S+: engine \S+ needs equal GPUs per node, has \[[\d, ]+\]$")
ALLOWED = {
    "count-spread": (PACKING, TRANSFER, ROUTER, SPREAD, EVEN),
    "count-binpack": (PACKING, TRANSFER, ROUTER, SPREAD, EVEN),
    "kueue-bestfit": (TRANSFER, ROUTER, EVEN),
    "exhaustive": (TRANSFER, ROUTER, EVEN),
}


@functools.cache
def _topology(path: Path) -> Topology:
    return build_topology(load_cluster(path))


@functools.cache
def _spec(path: Path) -> ServingTopology:
    return load_spec(path)


REJECTED = "input rejected"
UNKNOWN = "not solved in time"
SOLVE_SECONDS = 3.0  # enough to prove every small case; a large fixture that needs more is only not compared


def _solve(spec: ServingTopology, topo: Topology) -> tuple[Placement, Report] | str | None:
    """placer's answer, verified the way the CLI verifies it; None when nothing fits (proven); UNKNOWN when
    the time limit ran out first; REJECTED when placer refuses the input as impossible (a baseline may still
    place zero replicas of it). The checker refusing placer's answer (VerificationError) fails the test: these
    properties found one such failure (issue 18: a 1-GPU instance on a pooled rack candidate whose pod's CPU
    the model did not count, on a node with CPU for one pod), fixed by cpsat/pods.py."""
    try:
        placement = solve(build_problem(spec, topo), SolveOptions(time_limit_s=SOLVE_SECONDS))
        return placement, verify_placement(spec, topo, placement)
    except InfeasibleError as exc:
        return UNKNOWN if "not proven" in str(exc) else None
    except InputError:  # e.g. TP4 required within a socket of 2-GPU nodes: placer refuses the spec
        return REJECTED


@functools.cache
def _solve_files(spec_path: Path, cluster_path: Path) -> tuple[Placement, Report] | str | None:
    return _solve(_spec(spec_path), _topology(cluster_path))


def _misses(spec: ServingTopology, topo: Topology, placement: Placement) -> int:
    """Instances whose domain is broader than their pool's preferred level. For the solver the domain is
    the candidate it chose (what it minimised); for a baseline the narrowest domain of its GPUs."""
    out = 0
    for rep in placement.replicas:
        for inst in rep.instances:
            pref = spec.pools[inst.pool].placement.preferred
            if pref and LEVEL_RANK[topo.domains[inst.domain].level] > LEVEL_RANK[pref]:
                out += 1
    return out


def _assert_sound(spec: ServingTopology, topo: Topology, r: BaselineResult) -> None:
    """The structural half of the checker finds nothing; what it finds is a rule this baseline ignores."""
    assert r.name in BASELINES and r.outcome in ("placed", "no-fit", "gave-up"), r
    assert r.seconds >= 0 and r.note and "\n" not in r.note
    if r.outcome == "gave-up":
        assert r.name == "exhaustive"
    if r.outcome != "placed":
        assert r.placement is None and r.report is None
        return
    assert r.placement is not None and r.report is not None
    assert r.placement.stats.solver == r.name
    assert spec.replicas_floor <= len(r.placement.replicas) <= spec.replicas
    fresh = check(spec, topo, r.placement)
    assert fresh.violations == r.report.violations
    assert r.placement.stats.objective == fresh.total_units == r.report.total_units
    assert r.placement.stats.status == ("feasible" if fresh.ok else "infeasible")
    for v in fresh.violations:
        assert any(p.match(v) for p in ALLOWED[r.name]), f"{r.name}: {v}"


def _spans_spread_domains(spec: ServingTopology, topo: Topology, placement: Placement) -> bool:
    """Under ``spread: {level: socket}``, an instance broader than a socket on a node whose sockets are
    domains. The checker asks only which sockets its GPUs sit in; placer's model takes it to use all of the
    node's sockets (placer.solver.cells, conservative there; exact at every other spread level)."""
    if spec.spread is None or spec.spread.level != "socket":
        return False
    socketed = {n.name for n in topo.nodes if topo.domains[topo.node_domain[n.index]].children}
    return any(
        topo.domains[i.domain].level != "socket" and p.node in socketed
        for rep in placement.replicas
        for i in rep.instances
        for p in i.pods
    )


def _alike(spec: ServingTopology, topo: Topology) -> bool:
    """Every pool's matching nodes have the same link figures. placer prices a domain at its worst node,
    exact only then; with unlike nodes it may call a placement optimal while a cheaper one exists, or even
    call a spec infeasible that a baseline places validly (both reported: NVLink and PCIe nodes in one rack,
    pools without a GPU selector; the rack's KV figure is taken from the PCIe node's cross-socket link, so
    a 400 GB/s floor that two NVLink nodes meet over 8 network rails is judged unreachable)."""
    ctx = Context.build(spec, topo)
    for pool in ctx.pools:
        kinds = {(topo.nodes[n].interconnect, topo.nodes[n].sockets, topo.nodes[n].nvlink_gbps) for n in pool.eligible}
        if len(kinds) > 1:
            return False
    return True


def _assert_not_better(
    spec: ServingTopology, topo: Topology, r: BaselineResult, solved: tuple[Placement, Report] | str | None
) -> None:
    """A baseline placement the checker accepts is never better than placer's optimum, in placer's order:
    more replicas first, then fewer preferred-level misses, then less cost."""
    if r.placement is None or r.report is None or not r.report.ok or solved in (REJECTED, UNKNOWN):
        return
    if _spans_spread_domains(spec, topo, r.placement) or not _alike(spec, topo):
        return
    assert isinstance(solved, tuple), f"{r.name} found a valid placement where placer found none"
    placement, report = solved
    if placement.stats.status != "optimal":
        return
    mine = (-len(r.placement.replicas), _misses(spec, topo, r.placement), r.report.total_units)
    best = (-len(placement.replicas), _misses(spec, topo, placement), report.total_units)
    assert mine >= best, f"{r.name} {mine} beats placer {best}"


# --- fixtures ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cluster_path", CLUSTERS, ids=lambda p: p.stem)
@pytest.mark.parametrize("spec_path", SPECS, ids=lambda p: p.stem)
def test_fixtures(spec_path, cluster_path):
    spec, topo = _spec(spec_path), _topology(cluster_path)
    results = run_all(spec, topo)
    assert [r.name for r in results] == list(BASELINES)
    solved = _solve_files(spec_path, cluster_path)
    for r in results:
        _assert_sound(spec, topo, r)
        _assert_not_better(spec, topo, r, solved)
    # Same inputs, same placement.
    again = run_all(spec, topo)
    for a, b in zip(results, again, strict=True):
        assert a.outcome == b.outcome and a.note.split(";")[0] == b.note.split(";")[0]
        if a.placement is not None:
            assert a.placement.to_record() == b.placement.to_record()


def test_exhaustive_gives_up_on_nvl72_racks():
    spec = _spec(ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml")
    r = run_baseline("exhaustive", spec, _topology(ROOT / "fixtures" / "clusters" / "gb200-nvl72-1008.yaml"))
    assert r.outcome == "gave-up" and r.placement is None
    assert r.note.startswith("gave up: ") and r.note.endswith("; cap 2,000,000")
    # One empty NVL72 rack: a TP8 prefill group alone has C(72, 8) = 11,969,016,345 choices.
    empty = build_topology(ClusterSpec.model_validate(generate_cluster("gb200-nvl72", 72, seed=1, busy_fraction=0)))
    r = run_baseline("exhaustive", spec, empty)
    assert r.outcome == "gave-up"
    assert "C(72, 8) = 11,969,016,345" in r.note


def _enumerate(spec: ServingTopology, topo: Topology, cap: int) -> tuple[str, int, int]:
    """(outcome, combinations costed, combinations counted up front) with the cap given."""
    ctx = Context.build(spec, topo)
    total, _words = exhaustive.count_combinations(ctx)
    if total > cap:
        return "gave-up", 0, total
    enum = exhaustive.Enumerator(ctx, cap)
    try:
        place_replicas(ctx, enum)
    except exhaustive.GaveUp:
        return "gave-up", enum.evaluated, total
    return "ran", enum.evaluated, total


def test_exhaustive_never_passes_its_cap():
    spec = _spec(ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml")
    topo = _topology(ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml")
    outcome, evaluated, total = _enumerate(spec, topo, 10**9)
    assert outcome == "ran" and 0 < evaluated <= total
    # A cap one below the up-front count: it gives up before costing anything.
    assert _enumerate(spec, topo, total - 1) == ("gave-up", 0, total)
    r = run_baseline("exhaustive", spec, topo, max_combinations=total - 1)
    assert r.outcome == "gave-up" and r.note.endswith(f"; cap {total - 1:,}")
    # The cap exactly at the count: it runs, and costs no more than that.
    assert _enumerate(spec, topo, total) == ("ran", evaluated, total)


def test_interface():
    assert BASELINES == ("count-spread", "count-binpack", "kueue-bestfit", "exhaustive")
    spec = _spec(ROOT / "fixtures" / "specs" / "aggregated-tp8.yaml")
    topo = _topology(ROOT / "fixtures" / "clusters" / "small-mixed.yaml")
    assert [r.name for r in run_all(spec, topo, names=["exhaustive", "count-spread"])] == [
        "exhaustive",
        "count-spread",
    ]
    with pytest.raises(ValueError, match="unknown baseline 'greedy'"):
        run_baseline("greedy", spec, topo)


# --- forcing cases -------------------------------------------------------------------------------------------
def _pods(r: BaselineResult, instance: int = 0) -> tuple[tuple[str, tuple[int, ...]], ...]:
    assert r.placement is not None, r.note
    return tuple((p.node, p.gpus) for p in r.placement.replicas[0].instances[instance].pods)


def _cluster(nodes: list[dict], **fabric) -> Topology:
    return build_topology(
        ClusterSpec.model_validate(
            {
                "apiVersion": "placer.dev/v1alpha1",
                "kind": "Cluster",
                "metadata": {"name": "forcing"},
                "fabric": fabric,
                "nodes": nodes,
            }
        )
    )


def _node(name: str, gpus: int, busy: list[int], **where) -> dict:
    return {
        "name": name,
        "gpus": {"count": gpus, "product": "H100", "memoryGiB": 80},
        "busy": busy,
        "cpu": "64",
        "memory": "512Gi",
        **where,
    }


def _pool(tp: int, required: str, instances: int = 1, **extra) -> dict:
    return {
        "instances": instances,
        "tensorParallel": tp,
        "placement": {"required": required},
        "template": {"image": "example.com/engine:1", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        **extra,
    }


def _serving(pools: dict, **extra) -> ServingTopology:
    return ServingTopology.model_validate(
        {
            "apiVersion": "placer.dev/v1alpha1",
            "kind": "ServingTopology",
            "metadata": {"name": "forcing"},
            "model": {"layers": 4, "hiddenSize": 1024, "kvHeads": 2, "headDim": 64},
            "pools": pools,
            **extra,
        }
    )


def test_count_spread_breaks_a_transfer_floor_that_placer_meets():
    # Three DGX nodes, each alone in its leaf, 2:1 spine. a has 4 of 8 GPUs busy.
    # Least-allocated, integer score (8 - used_after) * 100 // 8: prefill TP4 scores a 0, b 50, c 50 ->
    # b (name); decode TP4 then scores b 0, c 50 -> c. b and c meet only at the spine: 50 GB/s per rail
    # / 2 oversubscription x 4 rails (one per GPU of a TP4) = 100 GB/s, under the 400 GB/s floor. placer puts
    # both on one node.
    topo = _cluster(
        [
            _node("a", 8, [0, 1, 2, 3], leaf="l1"),
            _node("b", 8, [], leaf="l2"),
            _node("c", 8, [], leaf="l3"),
        ],
        spine={"oversubscription": 2},
    )
    spec = _serving(
        {"prefill": _pool(4, "node"), "decode": _pool(4, "node")},
        transfer={"from": "prefill", "to": "decode", "minBandwidthGBps": 400},
    )
    r = run_baseline("count-spread", spec, topo)
    assert r.outcome == "placed"
    pods = {i.pool: tuple((p.node, p.gpus) for p in i.pods) for i in r.placement.replicas[0].instances}
    assert pods == {"prefill": (("b", (0, 1, 2, 3)),), "decode": (("c", (0, 1, 2, 3)),)}
    assert r.report.violations == ["replica 0 prefill-0 -> decode-0: KV path offers 100 GB/s, floor is 400 GB/s"]
    solved = _solve(spec, topo)
    assert isinstance(solved, tuple)
    placement, report = solved
    assert report.ok and placement.stats.status == "optimal"
    assert report.replicas[0].kv_bandwidth_gbps >= 400


def test_kueue_best_fit_takes_the_tightest_last_domain():
    # KEP 2724's example in GPUs: one rack of four 4-GPU nodes with 3, 3, 2 and 1 free, a TP7 group required
    # within the rack. No node holds 7; the rack holds 9. Most free first: n1 (3), n2 (3), leaving 1, and
    # the last node is the tightest that holds 1: n4 (exactly 1), not n3 (2).
    topo = _cluster(
        [
            _node("n1", 4, [0], rack="r"),
            _node("n2", 4, [0], rack="r"),
            _node("n3", 4, [0, 1], rack="r"),
            _node("n4", 4, [0, 1, 2], rack="r"),
        ]
    )
    r = run_baseline("kueue-bestfit", _serving({"aggregated": _pool(7, "rack")}), topo)
    assert r.outcome == "placed" and r.report.ok
    assert _pods(r) == (("n1", (1, 2, 3)), ("n2", (1, 2, 3)), ("n4", (3,)))


def test_kueue_takes_the_smallest_level_and_the_tightest_domain():
    # TP2: no socket has room for it on n1 (GPUs 0-1 on socket 0, 2-3 on socket 1, GPU 0 and 2 busy), so the
    # node level decides; n1 (2 free) and n2 (4 free) both hold it, and best fit takes the tightest, n1.
    pcie = {"interconnect": "pcie", "sockets": 2}
    topo = _cluster([_node("n1", 4, [0, 2], **pcie), _node("n2", 4, [], rack="r2")])
    r = run_baseline("kueue-bestfit", _serving({"aggregated": _pool(2, "spine")}), topo)
    assert _pods(r) == (("n1", (1, 3)),)
    # With GPU 0 free as well, socket 0 of n1 holds it whole: the socket level comes first.
    topo = _cluster([_node("n1", 4, [2], **pcie), _node("n2", 4, [], rack="r2")])
    r = run_baseline("kueue-bestfit", _serving({"aggregated": _pool(2, "spine")}), topo)
    assert _pods(r) == (("n1", (0, 1)),)


def test_count_only_takes_the_lowest_indices_where_topology_wants_others():
    # A PCIe node, GPUs 0-1 on socket 0 and 2-3 on socket 1, GPU 0 busy. A TP2 pod gets the lowest free
    # indices, 1 and 2, across the sockets (32 GB/s); the exhaustive enumerator costs (1,2), (1,3), (2,3)
    # and takes 2 and 3 on one socket (64 GB/s), as does Kueue (socket 1 holds 2, socket 0 only 1).
    topo = _cluster([_node("p", 4, [0], interconnect="pcie", sockets=2)])
    spec = _serving({"aggregated": _pool(2, "node")})
    got = {name: run_baseline(name, spec, topo) for name in BASELINES}
    assert _pods(got["count-spread"]) == (("p", (1, 2)),)
    assert got["count-spread"].report.instances[0].bottleneck.bandwidth_gbps == 32
    for name in ("exhaustive", "kueue-bestfit"):
        assert _pods(got[name]) == (("p", (2, 3)),)
        assert got[name].report.instances[0].bottleneck.bandwidth_gbps == 64
    assert got["exhaustive"].report.total_units < got["count-spread"].report.total_units


def test_replicas_are_all_or_nothing():
    # Two replicas of prefill TP2 + decode TP2 on one 6-GPU node: the second replica's decode has 0 GPUs
    # left after its prefill took 2 of the last 2, so it is rolled back; minReplicas 1 keeps the outcome.
    topo = _cluster([_node("n", 6, [])])
    spec = _serving({"prefill": _pool(2, "node"), "decode": _pool(2, "node")}, replicas=2, minReplicas=1)
    for name in BASELINES:
        r = run_baseline(name, spec, topo)
        assert r.outcome == "placed" and len(r.placement.replicas) == 1, (name, r.note)
        assert "replica 1: " in r.note
    spec = _serving({"prefill": _pool(2, "node"), "decode": _pool(2, "node")}, replicas=2)
    for name in BASELINES:
        r = run_baseline(name, spec, topo)
        assert r.outcome == "no-fit" and r.note.startswith("placed 1 of 2 replica(s), minReplicas 2: replica 1: ")


# --- generated and random clusters ---------------------------------------------------------------------------
@pytest.mark.parametrize(("style", "gpus"), [("dgx-h100", 128), ("gb200-nvl72", 144), ("mixed", 64)])
@pytest.mark.parametrize("seed", [1, 2])
def test_generated_clusters(style, gpus, seed):
    topo = build_topology(ClusterSpec.model_validate(generate_cluster(style, gpus, seed)))
    for spec_path in SPECS:
        spec = _spec(spec_path)
        solved = _solve(spec, topo)
        for r in run_all(spec, topo):
            _assert_sound(spec, topo, r)
            _assert_not_better(spec, topo, r, solved)


LEVELS = ["socket", "node", "nvlink-domain", "rack", "leaf", "spine"]
EXAMPLES = int(os.environ.get("BASELINE_EXAMPLES", "50"))  # raise for a soak run


@st.composite
def clusters(draw) -> dict:
    nodes = []
    for i in range(draw(st.integers(2, 5))):
        pcie = draw(st.booleans())
        count = draw(st.sampled_from([2, 4]))
        node = {
            "name": f"n{i}",
            "rack": f"r{draw(st.integers(0, 2))}",
            "gpus": {"count": count, "product": "A100-PCIE" if pcie else "H100", "memoryGiB": 80},
            "interconnect": "pcie" if pcie else "nvlink",
            "sockets": 2 if pcie else 1,
            "busy": sorted(draw(st.sets(st.integers(0, count - 1), max_size=count // 2))),
            "cpu": draw(st.sampled_from(["1", "3", "16"])),  # room for 0, 1 or 8 pods of 2 CPUs
            "memory": draw(st.sampled_from(["1Gi", "64Gi"])),
            "schedulable": draw(st.sampled_from([True, True, True, False])),
        }
        if draw(st.booleans()):
            node["metrics"] = {"queueDepth": draw(st.integers(0, 5)), "kvCacheHit": draw(st.sampled_from([0.0, 0.5]))}
        nodes.append(node)
    racks = sorted({n["rack"] for n in nodes})
    leaf_of = {rack: f"l{draw(st.integers(0, 1))}" for rack in racks}
    for n in nodes:
        n["leaf"] = leaf_of[n["rack"]]
    return {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "random"},
        "nodes": nodes,
        "fabric": {
            "network": {"railsPerNode": draw(st.sampled_from([1, 8]))},
            "spine": {"oversubscription": draw(st.sampled_from([1, 2]))},
        },
    }


def _random_pool(draw, role: str) -> dict:
    required = draw(st.sampled_from(LEVELS))
    pool: dict = {
        "role": role,
        "instances": draw(st.integers(1, 2)),
        "placement": {"required": required},
        "template": {"image": "example.com/engine:1", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
    }
    pref = draw(st.sampled_from([None] + [lv for lv in LEVELS if LEVEL_RANK[lv] <= LEVEL_RANK[required]]))
    if pref:
        pool["placement"]["preferred"] = pref
    if draw(st.integers(0, 4)) == 0:  # multi-node: 2 nodes x 1 or 2 GPUs
        per_node = draw(st.sampled_from([1, 2]))
        pool |= {"tensorParallel": 2 * per_node, "nodeCount": 2, "gpusPerNode": per_node}
    else:
        pool["tensorParallel"] = draw(st.sampled_from([1, 2, 2, 4]))
    if draw(st.booleans()):
        pool["gpu"] = {"product": draw(st.sampled_from(["H100", "A100-PCIE"]))}
    return pool


@st.composite
def serving_specs(draw) -> dict:
    disagg = draw(st.booleans())
    roles = ["prefill", "decode"] if disagg else ["aggregated"]
    pools = {role: _random_pool(draw, role) for role in roles}
    spec: dict = {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "ServingTopology",
        "metadata": {"name": "t"},
        "model": {"layers": 4, "hiddenSize": 1024, "kvHeads": 2, "headDim": 64},
        "pools": pools,
        "replicas": draw(st.integers(1, 3)),
    }
    spec["minReplicas"] = draw(st.integers(0, spec["replicas"]))
    if disagg and draw(st.booleans()):
        spec["transfer"] = {"minBandwidthGBps": draw(st.sampled_from([30, 100, 400]))}
    if draw(st.booleans()):
        spec["router"] = {
            "cpu": "1",
            "memory": "1Gi",
            "near": {"pool": roles[-1], "level": draw(st.sampled_from(["node", "rack", "leaf"]))},
        }
    if spec["replicas"] > 1 and draw(st.booleans()):
        spec["spread"] = {"level": draw(st.sampled_from(["node", "rack"]))}
    return spec


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(clusters(), serving_specs())
def test_random_clusters(cluster_d, spec_d):
    spec = ServingTopology.model_validate(spec_d)
    try:
        topo = build_topology(ClusterSpec.model_validate(cluster_d))
    except InputError:
        return
    solved = _solve(spec, topo)
    for r in run_all(spec, topo):
        _assert_sound(spec, topo, r)
        _assert_not_better(spec, topo, r, solved)
    # The up-front count bounds what the enumerator costs, so the cap can never be passed mid-run.
    outcome, evaluated, total = _enumerate(spec, topo, 10**7)
    assert evaluated <= total
