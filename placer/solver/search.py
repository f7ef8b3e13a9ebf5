"""One CP-SAT model for the whole problem, searched in lexicographic stages from the greedy warm start.

The objective is lexicographic, solved in stages because one weighted sum of very different magnitudes
proves slowly: (1) as many complete replicas as fit, (2) fewest instances outside their preferred level,
(3) least weighted cost. A stage is skipped when the greedy warm start already meets its best possible
value. Each stage is hinted with the previous answer; the greedy hint is permuted into the
symmetry-breaking order so the solver does not repair it.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import replace

from placer.model.levels import LEVEL_RANK
from placer.model.placement import InstancePlacement, Pod, ReplicaPlacement
from placer.solver.cells import inside_one, node_marks
from placer.solver.cpsat.draws import hint_draws
from placer.solver.cpsat.pods import hint_pieces
from placer.solver.decode import decode
from placer.solver.greedy import GreedyReplica, greedy_counted
from placer.solver.options import (
    CLOCK_NOTE,
    Budget,
    Outcome,
    SolveOptions,
    Unplaceable,
    _ignore,
    configured_solver,
    run_solver,
)
from placer.solver.problem import Problem


def search(
    problem: Problem, options: SolveOptions, budget: Budget, start: list[GreedyReplica] | None = None
) -> Outcome:
    """One CP-SAT model for the whole problem, solved in lexicographic stages; raises Unplaceable.

    When the time limit cuts a stage short, the best complete placement known so far (the previous
    stage's, else the greedy warm start's) is returned as feasible: never a partial gang, never nothing
    when something valid was in hand. The greedy may spend ``GREEDY_SHARE`` of the budget; the rest is
    CP-SAT's; a caller that already ran it passes its ``start``."""
    from ortools.sat.python import cp_model

    from placer.solver.cpsat.model import PlacementModel

    t0 = time.perf_counter()
    # The greedy knows nothing of running instances; with some kept, the search starts from scratch.
    if start is None:
        start = []
        if problem.kept is None and not problem.pins:  # the greedy knows neither
            start, work = greedy_counted(problem, budget.greedy_units())
            budget.spend_greedy(work)
    t_greedy = time.perf_counter()
    pm = PlacementModel(problem)
    budget.spend_build(pm.model)
    t_build = time.perf_counter()
    model, v = pm.model, pm.vars
    if start:
        _hint(pm, problem, start)
    notes: list[str] = []
    best: Outcome | None = greedy_outcome(problem, start) if len(start) >= problem.min_replicas else None

    def timings() -> dict[str, float]:
        return {"greedy": t_greedy - t0, "build": t_build - t_greedy, "search": time.perf_counter() - t_build}

    def run(stage: str) -> tuple[cp_model.CpSolver, cp_model.CpSolverStatus]:
        solver = configured_solver(options, budget)
        p = solver.parameters
        # Logging is always on (to a callback, never stdout) because it changes the search: -v must not
        # change the placement.
        p.log_search_progress = True
        p.log_to_stdout = False
        log = options.log
        solver.log_callback = (lambda line: log(f"[{stage}] {line}") if line.strip() else None) if log else _ignore
        status = run_solver(solver, model, budget)
        if budget.clock_cut and CLOCK_NOTE not in notes:
            notes.append(CLOCK_NOTE)
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
        # A fixed-anchor model (placer.solver.anchor) places every replica or none: no replicas stage.
        if problem.pins and problem.min_replicas == problem.replicas:
            best_n = problem.replicas
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
        can_miss = any(c.preferred_miss for p in problem.pools.values() for c in p.candidates)
        if can_miss or (any(p.preferred for p in problem.pools.values()) and not problem.pins):
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
        # A cost bound holds only for the replicas and misses fixed by the earlier stages: when one of them
        # was cut short (a note), it bounds nothing about the true optimum, and a merge must not use it
        bound=None if notes else int(solver.best_objective_bound),
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
    spanning: dict = defaultdict(list)  # (counted key, candidate) -> each spanning instance's (node, GPUs)
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
                    spanning[((k, pool, 0), g.candidate)].append([(n, len(gpus)) for n, gpus in g.pods])
        if problem.spread_level:
            used_spread[k] = _touched(pm, problem, rep)
        for name, j in rep.containers.items():
            values[v.container[(k, name)][j]] = 1
        if rep.router is not None and k in v.router:
            values[v.router[k][rep.router]] = 1
    for key, var in v.pooled.items():
        values[var] = pooled.get(key, 0)
    for sk, instances in spanning.items():
        hint_pieces(v.span, sk, instances, values)
        hint_draws(pm, sk, instances, values)
    for (k, dom), var in v.spread.items():  # an incomplete hint is repaired slowly, or not at all in time
        values[var] = int(dom in used_spread.get(k, set()))
    for lits in [*v.choice.values(), *v.node_of.values(), *v.container.values(), *v.router.values()]:
        for lit in lits.values():
            pm.model.add_hint(lit, values.get(lit, 0))
    for var in [*v.pooled.values(), *v.placed, *v.spread.values(), *v.span.all_vars(), *v.draws.all_vars()]:
        pm.model.add_hint(var, values.get(var, 0))


def _touched(pm, problem: Problem, rep: GreedyReplica) -> set[str]:
    """The spread-level domains a greedy replica uses, as the model marks them (cpsat.model._replicas_spread):
    its candidate's for one inside the spread level, else those of the nodes it took GPUs from."""
    level = problem.spread_level
    assert level is not None
    rank = LEVEL_RANK[level]
    out: set[str] = set()
    for g in rep.instances:
        plan = problem.pools[g.pool]
        cand = plan.candidates[g.candidate]
        if inside_one(level, cand) and not plan.multi_node:
            out.add(pm.spread_of(cand.domain, rank))
        else:
            out.update(d for n, _gpus in g.pods for d in node_marks(problem.topology, level, n))
    return out
