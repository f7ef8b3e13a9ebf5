"""A few small benchmark cases as correctness checks (not timed): the benchmark's own code path on small
generated clusters, asserting what the benchmark reports — placer never costs more than a baseline that
keeps every hard rule, every placement it measures passes the checker, and the figures are consistent."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _bench():
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_run"] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "style,gpus,seed,spec",
    [
        ("dgx-h100", 128, 1, "llama-70b-disagg"),
        ("gb200-nvl72", 144, 0, "llama-70b-disagg"),
        ("dgx-h100", 128, 0, "tp16-multinode"),
    ],
)
def test_small_benchmark_case(style, gpus, seed, spec, tmp_path):
    bench = _bench()
    placer, *baselines = bench.one_case(style, gpus, seed, spec, tmp_path, time_limit=20.0)
    assert placer.policy == "placer"
    if placer.outcome not in ("optimal", "feasible"):
        # Then no baseline may have found a rule-keeping placement either.
        assert all(b.outcome != "placed" or b.violations for b in baselines)
        return
    assert placer.violations == 0 and placer.units > 0
    assert placer.nodes >= 1 and placer.racks >= 1 and placer.stranded >= 0
    assert placer.extra["rss_mb"] > 0 and placer.extra["wall"] > 0
    for b in baselines:
        if b.outcome == "placed" and not b.violations:  # lexicographic: preferred-level misses, then cost
            assert (placer.misses, placer.units) <= (b.misses, b.units), (b.policy, b.units, placer.units)
    names = [b.policy for b in baselines]
    assert names == ["count-spread", "count-binpack", "kueue-bestfit", "exhaustive"]


def test_report_renders_the_targets_table(tmp_path):
    bench = _bench()
    figs = bench.one_case("dgx-h100", 128, 0, "tp16-multinode", tmp_path, time_limit=20.0)
    row = {
        "style": "dgx-h100",
        "gpus": 128,
        "seed": 0,
        "spec": "tp16-multinode",
        "placer": figs[0].__dict__,
        "baselines": [f.__dict__ for f in figs[1:]],
    }
    import argparse

    text = bench.report([row], argparse.Namespace(seeds=1, time_limit=20.0))
    assert "| dgx-h100-128 | tp16-multinode | 1 |" in text
    assert "never worse than a baseline that keeps every hard rule" in text


def test_fleet_benchmark_smoke(tmp_path):
    """bench/fleet.py's own path on a small batch: every deployment accounted for, the figures consistent."""
    spec = importlib.util.spec_from_file_location("bench_fleet", ROOT / "bench" / "fleet.py")
    fleet = importlib.util.module_from_spec(spec)
    sys.modules["bench_fleet"] = fleet
    spec.loader.exec_module(fleet)
    row = fleet.one_seed(0, 2048, 20, 20.0, tmp_path, cli=False)
    assert row.error is None
    assert row.placed + row.left_out == row.given == 20
    assert row.checked == row.cost and row.bound is not None and row.bound <= row.cost
    assert sum(placed for placed, _ in row.by_tier.values()) == row.placed
    assert row.solve_cpu_s > 0 and row.deterministic


def test_plan_benchmark_smoke(tmp_path):
    """bench/plan.py's own path on a small batch: the scoped plan finds moves for the pending deployment."""
    spec = importlib.util.spec_from_file_location("bench_plan", ROOT / "bench" / "plan.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_plan"] = bench
    spec.loader.exec_module(bench)
    (row,) = bench.one_seed(0, 2048, 30, 20.0, tmp_path, full=False)
    assert row.error == "" and row.moves is not None and row.deterministic == "yes"
    assert "| 0 | near |" in bench.report([row], argparse.Namespace(time_limit=20.0), "python bench/plan.py")


def test_fleet_relaxation_admits_the_batch(tmp_path):
    """bench/fleet_relax.py's relaxation is a lower bound only if every real joint placement is one of its
    solutions: the batch's own placement, its replicas fixed to the containers they sit in, must be feasible
    there and cost no more than the checker says it does; and the realisation must pass the checker."""
    spec = importlib.util.spec_from_file_location("bench_fleet_relax", ROOT / "bench" / "fleet_relax.py")
    relax_bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_fleet_relax"] = relax_bench
    spec.loader.exec_module(relax_bench)
    from ortools.sat.python import cp_model

    fleet, topo, placed = relax_bench.batch(1, 2048, 20, tmp_path)
    assert placed and fleet.cost is not None
    relax = relax_bench.relaxation(placed, topo)
    where = relax_bench.replicas_by_container(placed, topo)
    assert where, "the batch has deployments with a replica-level rule"
    for name, counts in where.items():
        r = relax.replicas_in[name]
        assert set(counts) <= set(r), f"{name}: a replica sits in a container the relaxation does not offer"
        for container, var in r.items():
            relax.model.add(var == counts.get(container, 0))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 20
    solver.parameters.num_workers = 1
    assert solver.solve(relax.model) in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    assert relax.constant + solver.objective_value <= fleet.cost
    # Realising the batch's own arrangement re-places every deployment through placer's solve, in the same
    # racks: all fit again, and verify_fleet (inside) raises if the set breaks a rule or double-books a GPU.
    chosen = {d: set(c) for d, c in where.items()}
    again, _fallbacks, lost, cost = relax_bench.realise(placed, topo, chosen)
    assert not lost and len(again) == len(placed) and cost > 0


def test_fleet_prices_lagrangian_is_below_the_batch_s_own_priced_cost(tmp_path):
    """bench/fleet_prices.py's L(lam) is a lower bound only if it never exceeds what the batch's own placement
    of the tier (a joint placement) costs under the same prices: cost + sum lam[n] x (used[n] - free[n]).
    Prices are drawn large (up to 20x the dearest GPU's telemetry) on the nodes the tier uses, so a wrong
    price term cannot hide; the subgradient's own values stay under the tier's cost."""
    import random

    spec = importlib.util.spec_from_file_location("bench_fleet_prices", ROOT / "bench" / "fleet_prices.py")
    prices = importlib.util.module_from_spec(spec)
    sys.modules["bench_fleet_prices"] = prices
    spec.loader.exec_module(prices)

    fleet, base, _pairs = prices.fleet_relax.batch(0, 2048, 30, tmp_path)
    rng = random.Random(0)
    for priority in sorted({p.deployment.priority for p in fleet.placed}, reverse=True):
        tier = [p for p in fleet.placed if p.deployment.priority == priority]
        start = prices._state_after(base, [p for p in fleet.placed if p.deployment.priority > priority])
        problems = [
            prices._fixed_replicas(prices._problem(p.deployment, start), len(p.placement.replicas)) for p in tier
        ]
        fewest = [prices.fewest_misses(pb, p.placement) for pb, p in zip(problems, tier, strict=True)]
        cost = sum(p.placement.stats.objective or 0 for p in tier)
        used = [0] * len(start.nodes)
        for p in tier:
            for n, g in prices.gpus_per_node(p.placement, start).items():
                used[n] += g
        dearest = max(max(pb.telemetry_units) for pb in problems)
        lam = [rng.uniform(0, 20 * dearest) if u else 0.0 for u in used]
        value, _ = prices.lagrangian(problems, fewest, start, lam)
        own = cost + sum(round(x) * (u - len(n.free_gpus)) for x, u, n in zip(lam, used, start.nodes, strict=True))
        assert value <= own, (priority, value, own)
        assert 0 < prices.dual(problems, fewest, start, cost, 3)[0] <= cost
