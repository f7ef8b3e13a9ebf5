"""solve(problem, options) -> Placement: the only caller of placer.solver.cpsat.

The objective is lexicographic, solved in stages because one weighted sum of very different magnitudes
proves slowly: (1) as many complete replicas as fit, (2) fewest instances outside their preferred level,
(3) least weighted cost. The default is one search worker: among equal optima it returns the same one on
every run, where racing workers need not. A stage is skipped when
the greedy warm start already meets its best possible value. Each stage is hinted with the previous
answer; the greedy hint is permuted into the symmetry-breaking order so the solver does not repair it.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

from placer.model.errors import InfeasibleError
from placer.model.levels import LEVEL_RANK
from placer.model.placement import InstancePlacement, Placement, Pod, ReplicaPlacement, SolveStats
from placer.solver.greedy import GreedyReplica, greedy
from placer.solver.problem import Candidate, Problem, kept_candidate


@dataclass(frozen=True)
class SolveOptions:
    time_limit_s: float = 30.0
    workers: int = 1  # one worker is deterministic and, on 2 cores, as fast (bench/NOTES.md)
    seed: int = 0
    log: Callable[[str], None] | None = None  # solver progress lines (stderr in the CLI)
    explain: bool = True  # on infeasibility, name the conflicting rules (seconds); an admission loop may skip it


@dataclass
class Outcome:
    """One search's answer before names are attached: what the decomposition combines."""

    replicas: tuple[ReplicaPlacement, ...]
    misses: int  # instances outside their preferred level
    cost: int
    bound: int | None
    proven: bool
    notes: list[str]
    seconds: dict[str, float]


class Unplaceable(Exception):
    """No placement (``proven``: none exists; else none found in time). solve() turns it into an
    InfeasibleError with the conflict explanation; the decomposition catches it per container."""

    def __init__(self, proven: bool):
        super().__init__("proven infeasible" if proven else "nothing found in time")
        self.proven = proven


def solve(problem: Problem, options: SolveOptions = SolveOptions()) -> Placement:
    """Place as many replicas as fit (at least minReplicas) at least cost; raise InfeasibleError otherwise.

    When every replica must sit inside one of several disjoint domains (a KV-transfer floor that only a rack
    meets, say), the problem separates by domain and placer.solver.decompose solves it domain by domain, exactly;
    otherwise one CP-SAT model is searched."""
    from placer.solver.decompose import solve_by_domain, split_of

    deadline = time.perf_counter() + options.time_limit_s
    try:
        split = split_of(problem)
        outcome = (
            search(problem, options, deadline) if split is None else solve_by_domain(problem, split, options, deadline)
        )
    except Unplaceable as exc:
        if not options.explain:
            what = "no placement satisfies every hard constraint" if exc.proven else "no placement found in time"
            raise InfeasibleError(what, proven=exc.proven) from None
        raise _infeasible(problem, exc.proven, options.time_limit_s) from None
    notes = list(outcome.notes)
    n = len(outcome.replicas)
    if n < problem.replicas:
        notes.append(f"placed {n} of {problem.replicas} replicas")
    proven, bound = outcome.proven, outcome.bound
    if problem.unlike_domains:
        # The model priced these domains at their slowest node: its optimum and bound hold for that
        # pricing, not for the real links, so neither is claimed.
        worst = ", ".join(problem.unlike_domains[:3]) + (" ..." if len(problem.unlike_domains) > 3 else "")
        notes.append(f"optimality not claimed: {worst} mix nodes with unlike links (priced at the slowest)")
        proven, bound = False, None
    stats = SolveStats(
        status="optimal" if proven else "feasible",
        objective=outcome.cost,
        bound=bound,
        gap=0.0 if proven else (None if bound is None else (outcome.cost - bound) / max(1, outcome.cost)),
        seconds=outcome.seconds,
        notes=notes,
    )
    spec = problem.spec
    return Placement(spec.metadata.name, spec.metadata.namespace, problem.topology.name, outcome.replicas, stats)


def search(problem: Problem, options: SolveOptions, deadline: float) -> Outcome:
    """One CP-SAT model for the whole problem, solved in lexicographic stages; raises Unplaceable.

    When the time limit cuts a stage short, the best complete placement known so far (the previous
    stage's, else the greedy warm start's) is returned as feasible: never a partial gang, never nothing
    when something valid was in hand."""
    from ortools.sat.python import cp_model

    from placer.solver.cpsat.model import PlacementModel

    t0 = time.perf_counter()
    # The greedy knows nothing of running instances; with some kept, the search starts from scratch.
    start = greedy(problem) if problem.kept is None else []
    t_greedy = time.perf_counter()
    pm = PlacementModel(problem)
    t_build = time.perf_counter()
    model, v = pm.model, pm.vars
    if start:
        _hint(pm, problem, start)
    notes: list[str] = []
    best: Outcome | None = greedy_outcome(problem, start) if len(start) >= problem.min_replicas else None

    def timings() -> dict[str, float]:
        return {"greedy": t_greedy - t0, "build": t_build - t_greedy, "solve": time.perf_counter() - t_build}

    def run(stage: str) -> tuple[cp_model.CpSolver, cp_model.CpSolverStatus]:
        solver = configured_solver(options, deadline)
        p = solver.parameters
        # Logging is always on (to a callback, never stdout) because it changes the search: -v must not
        # change the placement.
        p.log_search_progress = True
        p.log_to_stdout = False
        log = options.log
        solver.log_callback = (lambda line: log(f"[{stage}] {line}") if line.strip() else None) if log else _ignore
        status = solver.solve(model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if status != cp_model.INFEASIBLE and best is not None:
                raise _Cut(stage)
            raise Unplaceable(status == cp_model.INFEASIBLE)
        return solver, status

    def answer(solver: cp_model.CpSolver, n: int) -> Outcome:
        return Outcome(
            decode(problem, solver, pm, n),
            int(solver.value(pm.misses_expr())),
            int(solver.value(pm.cost_expr())),
            None,
            False,
            notes,
            {},
        )

    try:
        best_n = len(start)
        if best_n < problem.replicas:
            model.maximize(sum(v.placed))
            solver, status = run("replicas")
            best_n = int(round(solver.objective_value))
            if status != cp_model.OPTIMAL:
                notes.append("time limit hit while maximising replicas; more might fit")
            if best_n >= problem.min_replicas:
                best = answer(solver, best_n)
            _rehint(model, solver, pm)
        if best_n < problem.min_replicas:
            raise Unplaceable(True)
        for k, lit in enumerate(v.placed):
            model.add(lit == (1 if k < best_n else 0))
        misses = 0
        if any(p.preferred for p in problem.pools.values()):
            greedy_misses = sum(
                problem.pools[g.pool].candidates[g.candidate].preferred_miss for r in start for g in r.instances
            )
            if len(start) == best_n and greedy_misses == _forced_misses(problem, best_n):
                model.add(pm.misses_expr() <= greedy_misses)
                misses = greedy_misses
            else:
                model.clear_objective()
                model.minimize(pm.misses_expr())
                solver, status = run("preferred")
                misses = int(round(solver.objective_value))
                if status != cp_model.OPTIMAL:
                    notes.append("time limit hit while minimising preferred-level misses")
                best = answer(solver, best_n)
                model.add(pm.misses_expr() <= misses)
                _rehint(model, solver, pm)
        cost = pm.cost_expr()
        model.clear_objective()
        model.minimize(cost)
        solver, status = run("cost")
    except _Cut as cut:
        assert best is not None
        notes.append(f"time limit hit in the {cut.stage} stage; the best complete placement found so far is returned")
        return replace(best, notes=notes, seconds=timings())
    return Outcome(
        replicas=decode(problem, solver, pm, best_n),
        misses=misses,
        cost=int(round(solver.objective_value)),
        bound=int(solver.best_objective_bound),
        proven=status == cp_model.OPTIMAL and not notes,
        notes=notes,
        seconds=timings(),
    )


class _Cut(Exception):
    """A stage stopped at the time limit with nothing new; the best placement so far stands."""

    def __init__(self, stage: str):
        super().__init__(stage)
        self.stage = stage


def greedy_outcome(problem: Problem, start: list[GreedyReplica]) -> Outcome:
    """The greedy warm start as a complete placement: what a cut-short search falls back to."""
    topo = problem.topology
    tele = problem.telemetry_units
    replicas = []
    misses = cost = 0
    for k, rep in enumerate(start):
        by_pool: dict[str, list] = defaultdict(list)
        for g in rep.instances:
            by_pool[g.pool].append(g)
        instances = []
        for pool, items in sorted(by_pool.items()):
            plan = problem.pools[pool]
            for i, g in enumerate(sorted(items, key=lambda g: plan.candidates[g.candidate].order)):
                cand = plan.candidates[g.candidate]
                misses += cand.preferred_miss
                cost += cand.units + sum(len(gpus) * tele[n] for n, gpus in g.pods)
                pods = tuple(Pod(topo.nodes[n].name, tuple(sorted(gpus))) for n, gpus in sorted(g.pods))
                instances.append(InstancePlacement(pool, i, pods, cand.domain))
        for coloc in problem.colocations:
            if coloc.name in rep.containers:
                cost += coloc.containers[rep.containers[coloc.name]].units
        router = None if rep.router is None else topo.nodes[rep.router].name
        replicas.append(ReplicaPlacement(k, tuple(instances), router))
    return Outcome(tuple(replicas), misses, cost, None, False, [], {})


def _forced_misses(problem: Problem, replicas: int) -> int:
    """Instances that must miss their preferred level: their pool has no candidate at that level."""
    return replicas * sum(
        plan.instances
        for plan in problem.pools.values()
        if plan.preferred and plan.candidates and all(c.preferred_miss for c in plan.candidates)
    )


def _rehint(model, solver, pm) -> None:
    model.clear_hints()
    for var in pm.all_vars():
        model.add_hint(var, solver.value(var))


def _hint(pm, problem: Problem, start: list[GreedyReplica]) -> None:
    """Hint the greedy placement, permuted into the symmetry-breaking order."""
    v = pm.vars
    order = lambda g: problem.pools[g.pool].candidates[g.candidate].order  # noqa: E731
    first = min(problem.pools)

    def replica_key(r: GreedyReplica) -> int:  # the model's PlacementModel._instance_key of the first pool
        mine = [order(g) + 1 for g in r.instances if g.pool == first]
        return min(mine) if problem.pools[first].multi_node else sum(mine)

    reps = sorted(start, key=replica_key)
    values: dict = {}
    pooled: dict = defaultdict(int)
    used_spread: dict[int, set[str]] = {}
    for k, rep in enumerate(reps):
        values[v.placed[k]] = 1
        by_pool: dict[str, list] = defaultdict(list)
        for g in rep.instances:
            by_pool[g.pool].append(g)
        for pool, items in by_pool.items():
            plan = problem.pools[pool]
            for i, g in enumerate(sorted(items, key=order)):
                lits = v.choice[(k, pool, i if plan.multi_node else 0)]
                if g.candidate not in lits:
                    return  # greedy used a place the model filtered out; no hint rather than a wrong one
                values[lits[g.candidate]] = values.get(lits[g.candidate], 0) + 1
                if plan.multi_node:
                    for n, _gpus in g.pods:
                        values[v.node_of[(k, pool, i)][n]] = 1
                elif plan.candidates[g.candidate].kind == "pooled":
                    for n, gpus in g.pods:
                        pooled[(plan.selector, n)] += len(gpus)
        if problem.spread_level:
            rank = LEVEL_RANK[problem.spread_level]
            doms = [problem.pools[g.pool].candidates[g.candidate].domain for g in rep.instances]
            doms += [
                problem.topology.node_domain[n]
                for g in rep.instances
                for n, _ in g.pods
                if problem.pools[g.pool].multi_node
            ]
            used_spread[k] = {pm.spread_of(d, rank) for d in doms}
        for name, j in rep.containers.items():
            values[v.container[(k, name)][j]] = 1
        if rep.router is not None and k in v.router:
            values[v.router[k][rep.router]] = 1
    for key, var in v.pooled.items():
        values[var] = pooled.get(key, 0)
    for (k, dom), var in v.spread.items():  # an incomplete hint is repaired slowly, or not at all in time
        values[var] = int(dom in used_spread.get(k, set()))
    for lits in [*v.choice.values(), *v.node_of.values(), *v.container.values(), *v.router.values()]:
        for lit in lits.values():
            pm.model.add_hint(lit, values.get(lit, 0))
    for var in [*v.pooled.values(), *v.placed, *v.spread.values()]:
        pm.model.add_hint(var, values.get(var, 0))


def decode(problem: Problem, solver, pm, n_replicas: int) -> tuple[ReplicaPlacement, ...]:
    """Turn one problem's solver values into concrete GPUs (see decode_joint)."""
    kept = problem.kept.instances if problem.kept is not None and problem.kept.hard else {}
    return decode_joint([Part(problem, pm, n_replicas, kept)], solver)[0]


@dataclass
class Part:
    """One problem of a (possibly joint) model to decode; ``pinned`` instances get their own GPUs back."""

    problem: Problem
    pm: object  # placer.solver.cpsat.model.PlacementModel
    n_replicas: int
    pinned: dict[tuple[int, str, int], InstancePlacement]


def decode_joint(parts: list[Part], solver) -> list[tuple[ReplicaPlacement, ...]]:
    """Turn solver values into concrete GPUs: pinned instances first (their own GPUs), then socket-bound
    instances, whole-node ones, multi-node pods, and spanning instances deepest domain first, across every
    problem at once (the laminar order that always fits, since capacity was shared)."""
    topo = parts[0].problem.topology
    free = {n.index: list(n.free_gpus) for n in topo.nodes}
    pods: list[dict[tuple, list[tuple[int, list[int]]]]] = [{} for _ in parts]
    chosen: list[dict[tuple, tuple[int, Candidate]]] = [{} for _ in parts]
    supply: list[dict[tuple, int]] = []
    for pi, part in enumerate(parts):
        problem, v = part.problem, part.pm.vars  # type: ignore[attr-defined]
        kept_at: dict[tuple, int] = defaultdict(int)  # (replica, pool, candidate) -> pinned instances there
        drawn: dict[tuple, int] = defaultdict(int)  # (selector, node) -> GPUs pinned spanning instances hold
        for (k, pool, i), inst in part.pinned.items():
            plan = problem.pools[pool]
            ci = kept_candidate(problem, inst)
            assert ci is not None, "the model refuses a kept instance without a candidate"
            chosen[pi][(k, pool, i)] = (ci, plan.candidates[ci])
            kept_at[(k, pool, ci)] += 1
            pods[pi][(k, pool, i)] = []
            for pod in inst.pods:
                n = topo.node_by_name(pod.node).index
                free[n] = [g for g in free[n] if g not in pod.gpus]
                pods[pi][(k, pool, i)].append((n, list(pod.gpus)))
                if plan.candidates[ci].kind == "pooled":
                    drawn[(plan.selector, n)] += len(pod.gpus)
        for (k, pool, i), lits in v.choice.items():
            plan = problem.pools[pool]
            if k >= part.n_replicas or (plan.multi_node and (k, pool, i) in part.pinned):
                continue  # (a counted key stands for all of the pool's instances, pinned or not)
            # counted instances are numbered in candidate order, skipping pinned indices; multi-node ones
            # are already told apart
            taken = sorted(
                (plan.candidates[ci].order, ci)
                for ci, lit in lits.items()
                for _ in range(solver.value(lit) - (0 if plan.multi_node else kept_at[(k, pool, ci)]))
            )
            indices = [i] if plan.multi_node else [j for j in range(plan.instances) if (k, pool, j) not in part.pinned]
            for j, (_order, ci) in zip(indices, taken, strict=True):
                chosen[pi][(k, pool, j)] = (ci, plan.candidates[ci])
        supply.append({key: solver.value(p) - drawn[key] for key, p in v.pooled.items()})

    def take(node: int, count: int, socket: int | None = None) -> list[int]:
        avail = [g for g in free[node] if socket is None or topo.nodes[node].gpu(g).socket == socket]
        got = avail[:count]
        assert len(got) == count, "capacity constraints guarantee enough free GPUs"
        free[node] = [g for g in free[node] if g not in got]
        return got

    def rank(item):
        pi, key, cand = item
        kind_rank = {"unit": 0 if cand.level == "socket" else 1, "container": 2, "pooled": 3}[cand.kind]
        return (kind_rank, -topo.domains[cand.domain].depth, cand.order, pi, key)

    todo = [
        (pi, key, cand)
        for pi in range(len(parts))
        for key, (_ci, cand) in chosen[pi].items()
        if key not in parts[pi].pinned
    ]
    for pi, key, cand in sorted(todo, key=rank):
        part = parts[pi]
        plan = part.problem.pools[key[1]]
        dom = topo.domains[cand.domain]
        if cand.kind == "unit":
            n = dom.nodes[0]
            pods[pi][key] = [(n, take(n, plan.size, dom.socket if dom.level == "socket" else None))]
        elif cand.kind == "container":
            g = plan.gpus_per_node or 0
            nodes = [n for n, y in part.pm.vars.node_of[key].items() if solver.value(y)]  # type: ignore[attr-defined]
            pods[pi][key] = [(n, take(n, g)) for n in sorted(nodes)]
        else:
            have = supply[pi]
            need, got = plan.size, []
            nodes = sorted(
                (n for n in dom.nodes if have.get((plan.selector, n), 0) > 0),
                key=lambda n: (-have[(plan.selector, n)], topo.order[topo.node_domain[n]]),
            )
            for n in nodes:
                if need == 0:
                    break
                k = min(need, have[(plan.selector, n)])
                have[(plan.selector, n)] -= k
                need -= k
                got.append((n, take(n, k)))
            assert need == 0, "pooled supply constraints guarantee the draw"
            pods[pi][key] = sorted(got)
    return [_replicas(part, solver, pods[pi], chosen[pi]) for pi, part in enumerate(parts)]


def _replicas(part: Part, solver, pods, chosen) -> tuple[ReplicaPlacement, ...]:
    topo, v = part.problem.topology, part.pm.vars  # type: ignore[attr-defined]
    out = []
    for k in range(part.n_replicas):
        router = None
        if k in v.router:
            router = topo.nodes[next(n for n, r in v.router[k].items() if solver.value(r))].name
        instances = tuple(
            InstancePlacement(
                pool,
                i,
                tuple(Pod(topo.nodes[n].name, tuple(sorted(g))) for n, g in pods[(k, pool, i)]),
                chosen[(k, pool, i)][1].domain,
            )
            for pool, plan in sorted(part.problem.pools.items())
            for i in range(plan.instances)
        )
        out.append(ReplicaPlacement(k, instances, router))
    return tuple(out)


def configured_solver(options: SolveOptions, deadline: float):
    """A CpSolver with placer's parameters, for whatever time is left until ``deadline``."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = max(0.05, deadline - time.perf_counter())
    p.num_workers = max(1, options.workers)
    p.random_seed = options.seed
    p.cp_model_probing_level = 0  # probing turns at-most-one rows into millions of clauses (SCALING.md)
    # The model breaks symmetry itself; CP-SAT's own symmetry pass, combined with a hint, spent 10 s
    # of a 11 s solve on the 10k-GPU GB200 cluster (bench/NOTES.md).
    p.symmetry_level = 0
    return solver


def run_stage(model, options: SolveOptions, deadline: float):
    """One solve of a joint model (fleet repairs, plan): (solver, status), solver None if nothing was found."""
    from ortools.sat.python import cp_model

    solver = configured_solver(options, deadline)
    status = solver.solve(model)
    return (solver if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None), status


def _infeasible(problem: Problem, proven: bool, time_limit_s: float = 20.0) -> InfeasibleError:
    from placer.solver.conflicts import explain_infeasible

    if not proven:
        return InfeasibleError(
            "no placement found within the time limit (not proven impossible); raise --time-limit", [], proven=False
        )
    conflicts = explain_infeasible(problem, seconds=max(5.0, min(30.0, time_limit_s)))
    return InfeasibleError("no placement satisfies every hard constraint", [str(c) for c in conflicts], conflicts)


def _ignore(_line: str) -> None:
    return None


def stderr_log(line: str) -> None:
    print(line, file=sys.stderr)
