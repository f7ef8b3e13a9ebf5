"""How far could a joint fleet placement get? A rack-aware integer relaxation of a batch, measured.

A probe of the solver's internals (its problems, slot sizes and one-deployment solve), not a measure of what
users run, so tests/test_layout.py lists it among the bench scripts allowed past the public surface.

bench/FLEET.md reports a gap of 2-3 % on the saturated seeds between the batch's cost (deployments placed
one after another) and `fleet_bound` (every instance at its cheapest place, telemetry from the cheapest free
GPUs, racks ignored). This script asks which side the gap is on, for the same placed replicas:

1. *The relaxation.* One integer model of the whole batch by domain profile: r[d, C] = replicas of
   deployment d whose replica-level rule (router near / KV transfer, the one with the narrowest domains)
   sits in container C (relaxed to its rack when narrower); per rack, nodes grouped by (free GPUs,
   telemetry per GPU) give slots of each instance size (nested: GPUs for sizes >= s fit floor(free/s)
   slots of s per node); per domain D and size s, the GPUs wanted by replicas in containers inside D are at
   most the slots inside D (Hall's condition, exact for nested domains and one size). Pools outside the
   narrow rule sit in its broadest valid ancestor, or anywhere. Spread over racks: at most one replica per
   rack. Cost: the narrow rule's container cost per replica, the other rules' cheapest, every instance's
   cheapest all-reduce, and telemetry per GPU drawn. Every real joint placement of these replicas is a
   solution of it, so its optimum is a lower bound on the joint cost; the best solution it finds in the
   time limit is an *upper* limit on any bound of this family.
2. *Realisation.* Each deployment re-placed in the same order, its narrow rule's containers restricted to
   the racks the relaxation chose (falling back to all when that does not fit): a real placement, checked
   like any other, that says whether the relaxation's arrangement is reachable.

Not placer's own code path: a measurement (bench/NOTES.md, DESIGN.md "Known limits"). Rerun:

    nice -n 19 .venv/bin/python bench/fleet_relax.py --seeds 0,2 --time-limit 20
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import fleet as fleet_bench  # noqa: E402
from ortools.sat.python import cp_model  # noqa: E402

from placer.check.gate import verify_fleet  # noqa: E402
from placer.model.errors import InfeasibleError  # noqa: E402
from placer.model.levels import LEVEL_RANK  # noqa: E402
from placer.model.load import load_cluster  # noqa: E402
from placer.model.placement import Placement  # noqa: E402
from placer.model.spec import ServingTopology  # noqa: E402
from placer.solver.fleet import _fixed_replicas  # noqa: E402
from placer.solver.fleet_one import place_one  # noqa: E402
from placer.solver.options import Budget, SolveOptions  # noqa: E402
from placer.solver.problem import Colocation, Problem, build_problem  # noqa: E402
from placer.topology.build import build_topology  # noqa: E402
from placer.topology.graph import Topology  # noqa: E402
from placer.topology.usage import usage  # noqa: E402


@dataclass
class Relaxation:
    """The model, what is constant in its cost, and the r[d, C] variables by deployment."""

    model: cp_model.CpModel
    constant: int
    replicas_in: dict[str, dict[str, cp_model.IntVar]]  # deployment -> rack/leaf/... -> r[d, C]


def _rack_or_wider(topo: Topology, domain: str) -> str:
    """A container narrower than a rack is relaxed to its rack (node groups are kept per rack)."""
    return topo.domain_at(domain, "rack") or domain


def _narrowest_first(problem: Problem) -> list[Colocation]:
    topo = problem.topology
    return sorted(
        problem.colocations,
        key=lambda c: (max(LEVEL_RANK[topo.domains[k.domain].level] for k in c.containers), c.name),
    )


def relaxation(placed: list[tuple[ServingTopology, Placement]], topo: Topology) -> Relaxation:
    """The integer relaxation described in the module docstring, for these placed replicas on ``topo``."""
    model = cp_model.CpModel()
    constant = 0
    cost: list[tuple[cp_model.IntVar, int]] = []
    wants: dict[tuple[str, int], list[tuple[object, int]]] = defaultdict(list)  # (domain, size) -> (r, GPUs)
    replicas_in: dict[str, dict[str, cp_model.IntVar]] = {}
    tele = None
    for spec, placement in placed:
        problem = build_problem(spec, topo)
        n = len(placement.replicas)
        if tele is not None and problem.telemetry_units != tele:
            raise SystemExit("deployments with different telemetry weights: not handled by this probe")
        tele = problem.telemetry_units
        for plan in problem.pools.values():
            if len(plan.eligible) != len(topo.nodes):
                raise SystemExit(f"{spec.metadata.name}: a GPU selector narrower than the cluster: not handled")
            constant += n * plan.instances * min(c.units for c in plan.candidates)
        rules = _narrowest_first(problem)
        if not rules:
            for plan in problem.pools.values():
                wants[(topo.root, plan.slot)].append((n, plan.instances * plan.size))
            continue
        narrow, others = rules[0], rules[1:]
        units: dict[str, int] = {}
        for c in narrow.containers:
            key = _rack_or_wider(topo, c.domain)
            units[key] = min(units.get(key, c.units), c.units)
        mine = replicas_in[spec.metadata.name] = {}
        for container, own in sorted(units.items()):
            where = dict.fromkeys(narrow.pools, container)
            extra, ok = 0, True
            for rule in others:
                valid = {_rack_or_wider(topo, c.domain) for c in rule.containers}
                above = [a for a in topo.ancestors(container) if a in valid]
                shares = bool(set(rule.pools) & set(narrow.pools))
                if shares and not above:
                    ok = False  # the wider rule has no container around this one
                    break
                extra += min(c.units for c in rule.containers)
                for pool in rule.pools:
                    where.setdefault(pool, above[-1] if shares else topo.root)
            if not ok:
                continue
            r = model.new_int_var(0, n, f"r[{spec.metadata.name},{container}]")
            mine[container] = r
            cost.append((r, own + extra))
            for pool, plan in problem.pools.items():
                wants[(where.get(pool, topo.root), plan.slot)].append((r, plan.instances * plan.size))
        model.add(sum(mine.values()) == n)
        if problem.spread_level == "rack":
            for container, r in mine.items():
                if topo.domains[container].level == "rack":
                    model.add(r <= 1)
    sizes = sorted({s for _, s in wants})
    groups: dict[tuple[str, int, int], int] = defaultdict(int)
    for node in topo.nodes:
        if node.free_gpus:
            groups[(_rack_or_wider(topo, topo.node_domain[node.index]), len(node.free_gpus), tele[node.index])] += 1
    slots_in: dict[tuple[str, int], list] = defaultdict(list)  # (domain, size) -> slot-count variables
    for (rack, free, per_gpu), count in sorted(groups.items()):
        fits = [s for s in sizes if free >= s]
        t = {s: model.new_int_var(0, count * (free // s), f"t[{rack},{free},{per_gpu},{s}]") for s in fits}
        for s in t:  # GPUs for instances of size >= s fit floor(free / s) slots of s per node
            model.add(sum(s2 * t[s2] for s2 in t if s2 >= s) <= count * (free // s) * s)
        cost += [(t[s], s * per_gpu) for s in t]
        for s in t:
            for up in topo.ancestors(rack):
                slots_in[(up, s)].append(t[s])
    wanted_in: dict[tuple[str, int], list] = defaultdict(list)
    for (domain, s), terms in wants.items():
        for up in topo.ancestors(domain):
            wanted_in[(up, s)] += terms
    for (domain, s), terms in sorted(wanted_in.items()):
        model.add(sum(g * r for r, g in terms) <= s * sum(slots_in.get((domain, s), [])))
    model.minimize(sum(c * v for v, c in cost))
    return Relaxation(model, constant, replicas_in)


def realise(
    placed: list[tuple[ServingTopology, Placement]], topo: Topology, chosen: dict[str, set[str]]
) -> tuple[list[tuple[ServingTopology, Placement]], int, list[str], int]:
    """Re-place each deployment in the batch's order, its narrow rule restricted to the chosen containers
    (all of them when that does not fit). Returns the placements, how many fell back, the ones lost, and the
    checker's cost of what was placed (the whole set checked together: it raises on any broken rule)."""
    options = SolveOptions(time_limit_s=30)
    budget = Budget.of(options)
    state, out, fallbacks, lost = topo, [], 0, []
    for spec, placement in placed:
        problem = _fixed_replicas(build_problem(spec, state), len(placement.replicas))
        tries = [problem]
        rules = _narrowest_first(problem)
        if rules and spec.metadata.name in chosen:
            keep = tuple(c for c in rules[0].containers if _rack_or_wider(topo, c.domain) in chosen[spec.metadata.name])
            narrowed = [replace(c, containers=keep) if c is rules[0] else c for c in problem.colocations]
            tries.insert(0, replace(problem, colocations=narrowed))
        for i, attempt in enumerate(tries):
            try:
                again = place_one(attempt, options, budget.child(0.5))
            except InfeasibleError:
                continue
            fallbacks += i > 0
            out.append((spec, again))
            state = state.with_usage(*usage(spec, state, again))
            break
        else:
            lost.append(spec.metadata.name)
    return out, fallbacks, lost, sum(r.total_units for r in verify_fleet(topo, out))


def batch(seed: int, gpus: int, count: int, tmp: Path):
    """bench/fleet.py's batch for ``seed``: (the fleet result, the cluster before it, its placed pairs)."""
    cluster_path = tmp / f"cluster-{seed}.yaml"
    cluster_path.write_text(fleet_bench.dump_cluster_yaml(fleet_bench.generate_cluster("dgx-h100", gpus, seed)))
    spec_dir = tmp / f"specs-{seed}"
    spec_dir.mkdir()
    for doc in fleet_bench.spec_mix(seed, count):
        (spec_dir / f"{doc['metadata']['name']}.yaml").write_text(
            fleet_bench.yaml.dump(doc, Dumper=fleet_bench._NoAliases, sort_keys=False)
        )
    res = fleet_bench.run_fleet([spec_dir], cluster_path, SolveOptions(time_limit_s=30), keep_paths=[])
    placed = [(p.deployment.spec, p.placement) for p in res.fleet.placed]
    return res.fleet, build_topology(load_cluster(cluster_path)), placed


def replicas_by_container(placed: list[tuple[ServingTopology, Placement]], topo: Topology) -> dict[str, dict[str, int]]:
    """Where the batch put each replica, in the relaxation's terms: deployment -> container -> replicas
    (the narrowest domain holding the narrow rule's instances and router, relaxed to its rack)."""
    out: dict[str, dict[str, int]] = {}
    for spec, placement in placed:
        rules = _narrowest_first(build_problem(spec, topo))
        if not rules:
            continue
        counts = out[spec.metadata.name] = defaultdict(int)
        for rep in placement.replicas:
            doms = [
                topo.node_domain[topo.node_by_name(pod.node).index]
                for i in rep.instances
                if i.pool in rules[0].pools
                for pod in i.pods
            ]
            if rules[0].router and rep.router is not None:
                doms.append(topo.node_domain[topo.node_by_name(rep.router).index])
            counts[_rack_or_wider(topo, topo.lowest_common(doms))] += 1
    return out


def hint_with_batch(relax: Relaxation, placed: list[tuple[ServingTopology, Placement]], topo: Topology) -> None:
    """Start the search from the batch's own placement: its replicas' containers and the slots it uses."""
    where = replicas_by_container(placed, topo)
    for name, per_container in relax.replicas_in.items():
        for container, r in per_container.items():
            relax.model.add_hint(r, where.get(name, {}).get(container, 0))
    used: dict[str, int] = defaultdict(int)
    for spec, placement in placed:
        problem = build_problem(spec, topo)
        for rep in placement.replicas:
            for inst in rep.instances:
                size = problem.pools[inst.pool].slot
                for pod in inst.pods:
                    node = topo.node_by_name(pod.node)
                    rack = _rack_or_wider(topo, topo.node_domain[node.index])
                    name = f"t[{rack},{len(node.free_gpus)},{problem.telemetry_units[node.index]},{size}]"
                    used[name] += len(pod.gpus) // size
    for i, var in enumerate(relax.model.proto.variables):
        if var.name.startswith("t["):
            relax.model.add_hint(relax.model.get_int_var_from_proto_index(i), used.get(var.name, 0))


def one_seed(seed: int, limit: float, tmp: Path, hint: bool = False) -> dict:
    res, topo, placed = batch(seed, 10_000, 100, tmp)
    row = {"seed": seed, "placed": len(placed), "cost": res.cost, "bound": res.bound}
    t, cpu = time.perf_counter(), time.process_time()
    relax = relaxation(placed, topo)
    if hint:
        hint_with_batch(relax, placed, topo)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = limit
    solver.parameters.num_workers = 2
    status = solver.solve(relax.model)
    row["relax_status"] = solver.status_name(status)
    row["relax_s"], row["relax_cpu_s"] = time.perf_counter() - t, time.process_time() - cpu
    row["relax_vars"] = len(relax.model.proto.variables)
    row["relax_bound"] = relax.constant + int(solver.best_objective_bound)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return row
    row["relax_best"] = relax.constant + int(solver.objective_value)
    chosen = {d: {c for c, r in rs.items() if solver.value(r) > 0} for d, rs in relax.replicas_in.items()}
    _again, row["fallbacks"], row["lost"], row["realised"] = realise(placed, topo, chosen)
    # What the lost ones cost in the batch: realised + this is indicative only (they did not fit there).
    row["lost_cost"] = sum(p.stats.objective or 0 for s, p in placed if s.metadata.name in row["lost"])
    return row


def _pct(a: int | None, b: int | None) -> str:
    return "-" if a is None or b is None else f"{(a - b) / a:.2%}"


def report(rows: list[dict], limit: float, hint: bool = False) -> str:
    lines = [
        "# Fleet: a rack-aware integer relaxation of the batch (bench/fleet_relax.py)",
        "",
        f"`nice -n 19 python bench/fleet_relax.py --seeds {','.join(str(r['seed']) for r in rows)} "
        f"--time-limit {limit:g}{' --hint' if hint else ''}` at placer {fleet_bench._commit()}; 2 cores, "
        f"load {os.getloadavg()[0]:.2f} at the "
        "end. The relaxation is searched with 2 workers under a wall-clock limit, so its figures vary from run to "
        "run (the batch's do not: they are bench/FLEET.md's). Batches as in "
        "bench/FLEET.md (DGX H100 10k, 100 specs). The model and its meaning: the script's docstring. Costs "
        "in the solver's units; 'best' is the best solution CP-SAT found for the relaxation in the limit (an "
        "upper limit on what any bound of this family can prove), 'its bound' CP-SAT's lower bound on it (a "
        "valid lower bound on the joint cost); 'realised' the checker's cost of re-placing each deployment in "
        "the racks the relaxation chose (of the deployments that still fit: compare only where none was lost).",
        "",
        "| seed | placed | batch cost | fleet_bound | gap | relaxation vars | status | s (CPU s) | best | its bound "
        "| gap to its bound | realised | fell back / lost | lost (their cost in the batch) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['placed']} | {r['cost']} | {r['bound']} | {_pct(r['cost'], r['bound'])} "
            f"| {r['relax_vars']} | {r['relax_status']} | {r['relax_s']:.1f} ({r['relax_cpu_s']:.1f}) "
            f"| {r.get('relax_best', '-')} | {r['relax_bound']} | {_pct(r['cost'], r['relax_bound'])} "
            f"| {r.get('realised', '-')} | {r.get('fallbacks', '-')} / {len(r.get('lost', []))} "
            f"| {', '.join(r.get('lost', [])) or '-'} ({r.get('lost_cost', 0)}) |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0,2")
    ap.add_argument("--time-limit", type=float, default=20.0, help="CP-SAT seconds for the relaxation")
    ap.add_argument("--hint", action="store_true", help="start the relaxation from the batch's placement")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "FLEET_RELAX.md")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in (int(s) for s in args.seeds.split(",")):
            rows.append(one_seed(seed, args.time_limit, Path(tmp), args.hint))
            print(rows[-1], file=sys.stderr, flush=True)
    text = report(rows, args.time_limit, args.hint)
    args.out.write_text(text)
    print(text, file=sys.stderr)


if __name__ == "__main__":
    main()
