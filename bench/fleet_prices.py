"""Does coordinating a tier by node prices help? A Lagrangian probe of a batch's priority tiers, measured.

A probe of the solver's internals (its problems and one-deployment solve), not a measure of what users run,
so tests/test_layout.py lists it among the bench scripts allowed past the public surface.

bench/FLEET.md's saturated seeds keep a gap of 2-3 % to `fleet_bound`. For one priority tier of a batch,
on the state the higher tiers left (the batch never makes a higher tier worse for a lower one), with the
tier's placed deployments and their replica counts fixed:

1. *The bound side.* Relax what the deployments of a tier compete for, each node's free GPUs, with a
   price lam[n] >= 0 per GPU (CPU and memory are shared too; leaving them out keeps it a bound):
   L(lam) = sum over deployments of its optimum alone with telemetry raised by lam (or its solve's, or
   the greedy certificate's, proven bound where that is all it has) - sum of lam[n] x free[n]. Every
   L(lam) is a lower bound on the tier's joint cost (every joint placement is a placement of each
   deployment alone); its best over lam (the Lagrangian dual) is the strongest bound that coordinates
   deployments only through node capacity, and the best of the iterations run is a lower estimate of it.
   lam follows the subgradient (GPUs asked beyond free per node), step theta x (tier cost - L) / |g|^2,
   theta shrinking each iteration.
2. *The placement side.* The tier re-placed one after another in the batch's order, each deployment
   solved with telemetry raised by m x lam (the final prices, for a few multipliers m): the classic
   Lagrangian heuristic. Its true cost (prices taken off) against the batch's says what price coordination
   could recover; 'lost' counts deployments that no longer fit.

Not placer's own code path: a measurement (bench/NOTES.md, DESIGN.md "Known limits"). Rerun:

    nice -n 19 .venv/bin/python bench/fleet_prices.py --seeds 0,2 --iterations 30
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import fleet_relax  # noqa: E402
from fleet_relax import _pct  # noqa: E402

from placer.model.errors import InfeasibleError  # noqa: E402
from placer.model.placement import Placement  # noqa: E402
from placer.solver.fleet import Placed, _fixed_replicas, _problem, _state_after  # noqa: E402
from placer.solver.fleet_bound import _combine, fleet_bound, problem_terms  # noqa: E402
from placer.solver.fleet_one import place_one  # noqa: E402
from placer.solver.options import Budget, SolveOptions  # noqa: E402
from placer.solver.problem import Problem  # noqa: E402
from placer.solver.scarcity import at_prices  # noqa: E402
from placer.solver.search import _forced_misses  # noqa: E402
from placer.topology.graph import Topology  # noqa: E402
from placer.topology.usage import usage  # noqa: E402

SOLVE = SolveOptions(time_limit_s=20)  # per deployment; its work budget, so runs repeat exactly
MULTIPLIERS = (0, 1, 2, 4)  # 0: the same re-pass without prices, to tell their effect from the re-pass
SKIP_BELOW = 0.005  # a tier already this close to fleet_bound is listed, not probed


def priced(problem: Problem, lam: list[float]) -> Problem:
    """The problem with each node's telemetry per GPU raised by its price, rounded to cost units."""
    return at_prices(problem, tuple(round(p) for p in lam))


def gpus_per_node(placement: Placement, topo: Topology) -> dict[int, int]:
    out: dict[int, int] = {}
    for rep in placement.replicas:
        for inst in rep.instances:
            for pod in inst.pods:
                n = topo.node_by_name(pod.node).index
                out[n] = out.get(n, 0) + len(pod.gpus)
    return out


def fewest_misses(problem: Problem, placement: Placement) -> bool:
    """Whether the batch's placement has the fewest preferred-level misses: then every arrangement compared
    has them too, and each deployment's lexicographic optimum (misses, then cost) bounds its cost."""
    misses = 0
    for rep in placement.replicas:
        for inst in rep.instances:
            cand = next((c for c in problem.pools[inst.pool].candidates if c.domain == inst.domain), None)
            misses += bool(cand is None or cand.preferred_miss)
    return misses <= _forced_misses(problem, len(placement.replicas))


def problem_terms_bound(problem: Problem, n: int) -> int:
    """A lower bound on ``n`` replicas of the problem at any number of misses: each instance at its cheapest
    candidate at any level, each replica at its cheapest container, the cheapest free GPUs."""
    return _combine([problem_terms(problem, n, fewest=False)], problem.topology)


def lagrangian(problems: list[Problem], fewest: list[bool], start: Topology, lam: list[float]) -> tuple[int, list[int]]:
    """L(lam), and the GPUs per node the deployments take when each is solved alone under the prices."""
    value, used = 0, [0] * len(start.nodes)
    for problem, least in zip(problems, fewest, strict=True):
        pl = place_one(priced(problem, lam), SOLVE, Budget.of(SOLVE))
        stats = pl.stats
        assert stats.status == "optimal" or stats.bound is not None, "no proven bound: L would not be one"
        own = stats.objective if stats.status == "optimal" else stats.bound
        # Its optimum has the fewest misses; where the batch's placement has more, a cheaper one may too.
        value += own if least else problem_terms_bound(priced(problem, lam), len(pl.replicas))
        for n, g in gpus_per_node(pl, start).items():
            used[n] += g
    return value - sum(round(p) * len(node.free_gpus) for p, node in zip(lam, start.nodes, strict=True)), used


def dual(
    problems: list[Problem], fewest: list[bool], start: Topology, upper: int, iterations: int
) -> tuple[int, list[float], int]:
    """The best L(lam) over the subgradient's iterations, the final prices, and how many iterations ran."""
    free = [len(n.free_gpus) for n in start.nodes]
    lam = [0.0] * len(free)
    best, theta = 0, 0.05
    for it in range(iterations):
        value, used = lagrangian(problems, fewest, start, lam)
        best = max(best, value)
        grad = [u - f for u, f in zip(used, free, strict=True)]
        norm = sum(g * g for g, p in zip(grad, lam, strict=True) if g > 0 or p > 0)
        if norm == 0:
            return best, lam, it + 1  # no node over-asked and no price to lower: the subgradient is 0
        step = theta * (upper - value) / norm
        lam = [max(0.0, p + step * g) for p, g in zip(lam, grad, strict=True)]
        theta *= 0.97
    return best, lam, iterations


def priced_pass(tier: list[Placed], start: Topology, lam: list[float]) -> tuple[int, int]:
    """The tier re-placed in order with prices on telemetry: (true cost of those placed, deployments lost)."""
    state, cost, lost = start, 0, 0
    for p in tier:
        try:
            problem = _fixed_replicas(_problem(p.deployment, state), len(p.placement.replicas))
            pl = place_one(priced(problem, lam), SOLVE, Budget.of(SOLVE))
        except InfeasibleError:
            lost += 1
            continue
        cost += (pl.stats.objective or 0) - sum(round(lam[n]) * g for n, g in gpus_per_node(pl, start).items())
        state = state.with_usage(*usage(p.deployment.spec, state, pl))
    return cost, lost


def one_seed(seed: int, iterations: int, tmp: Path) -> list[dict]:
    fleet, base, _pairs = fleet_relax.batch(seed, 10_000, 100, tmp)
    rows = []
    for priority in sorted({p.deployment.priority for p in fleet.placed}, reverse=True):
        tier = [p for p in fleet.placed if p.deployment.priority == priority]
        start = _state_after(base, [p for p in fleet.placed if p.deployment.priority > priority])
        problems = [_fixed_replicas(_problem(p.deployment, start), len(p.placement.replicas)) for p in tier]
        cost = sum(p.placement.stats.objective or 0 for p in tier)
        row = {"seed": seed, "priority": priority, "placed": len(tier), "cost": cost}
        fewest = [fewest_misses(pb, p.placement) for pb, p in zip(problems, tier, strict=True)]
        row["fewest"] = sum(fewest)
        row["fleet_bound"] = fleet_bound([(p.deployment.spec, p.placement) for p in tier], start)
        if (cost - row["fleet_bound"]) <= SKIP_BELOW * cost:
            rows.append(row)  # nothing to recover worth the solves
            continue
        t, cpu = time.perf_counter(), time.process_time()
        row["dual"], lam, row["iterations"] = dual(problems, fewest, start, cost, iterations)
        row["dual_s"], row["dual_cpu_s"] = time.perf_counter() - t, time.process_time() - cpu
        row["passes"] = {}
        for m in MULTIPLIERS:
            t, cpu = time.perf_counter(), time.process_time()
            again, lost = priced_pass(tier, start, [m * p for p in lam])
            row["passes"][m] = (again, lost, time.perf_counter() - t, time.process_time() - cpu)
        rows.append(row)
        print(row, file=sys.stderr, flush=True)
    return rows


def report(rows: list[dict], iterations: int) -> str:
    seeds = ",".join(sorted({str(r["seed"]) for r in rows}))
    lines = [
        "# Fleet: node prices for a priority tier (bench/fleet_prices.py)",
        "",
        f"`nice -n 19 python bench/fleet_prices.py --seeds {seeds} --iterations {iterations}` at placer "
        f"{fleet_relax.fleet_bench._commit()}; 2 cores, load {os.getloadavg()[0]:.2f} at the end. Batches as in "
        "bench/FLEET.md (DGX H100 10k, 100 specs); each tier on the state the higher tiers left, its placed "
        "deployments and replica counts fixed. Every solve runs on its deterministic work budget, so the figures "
        "repeat. Costs in the solver's units. 'fewest' counts deployments whose batch placement has the fewest "
        "misses (for the others the dual counts their any-miss bound). 'dual' is the best "
        "L(lam) (a valid lower bound on the tier's joint cost); 'priced x m' the true cost of re-placing the "
        "tier in order with telemetry raised by m x the final prices, its change against the batch, and the "
        "deployments it lost (a lost one's cost is missing from its figure).",
        "",
        "| seed | priority | placed | fewest | batch cost | fleet_bound | gap | dual (iterations) | gap to dual "
        "| dual s (CPU s) | " + " | ".join(f"priced x {m}: cost, change, lost, s" for m in MULTIPLIERS) + " |",
        "|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(MULTIPLIERS),
    ]
    for r in rows:
        if "dual" not in r:
            lines.append(
                f"| {r['seed']} | {r['priority']} | {r['placed']} | {r['fewest']} | {r['cost']} | {r['fleet_bound']} "
                f"| {_pct(r['cost'], r['fleet_bound'])} | not probed (gap <= {SKIP_BELOW:.1%}) | | |"
                + " |"
                * len(MULTIPLIERS)
            )
            continue
        passes = " | ".join(
            f"{c}, {(c - r['cost']) / r['cost']:+.2%}, {lost}, {s:.1f}" for c, lost, s, _cpu in r["passes"].values()
        )
        lines.append(
            f"| {r['seed']} | {r['priority']} | {r['placed']} | {r['fewest']} | {r['cost']} | {r['fleet_bound']} "
            f"| {_pct(r['cost'], r['fleet_bound'])} | {r['dual']} ({r['iterations']}) | {_pct(r['cost'], r['dual'])} "
            f"| {r['dual_s']:.1f} ({r['dual_cpu_s']:.1f}) | {passes} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0,2")
    ap.add_argument("--iterations", type=int, default=30, help="subgradient iterations per tier")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "FLEET_PRICES.md")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in (int(s) for s in args.seeds.split(",")):
            rows += one_seed(seed, args.iterations, Path(tmp))
    text = report(rows, args.iterations)
    args.out.write_text(text)
    print(text, file=sys.stderr)


if __name__ == "__main__":
    main()
