"""``placer plan``: the fewest instance moves that let pending deployments fit, or that cut the running
deployments' total cost by a given fraction (defragmentation), listed move by move.

One joint CP-SAT model holds every running deployment (each instance *soft-kept*: it may stay where it
runs or move) and every pending one (at least minReplicas whole replicas). Capacity is shared. Stage 1
minimises the moves (instances and routers that would leave where they run); keeping that number, stage 2
places as many pending replicas as fit and stage 3 minimises the total cost. Instances that stay get their
own GPUs back; the result is verified like any batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from placer.model.errors import InfeasibleError, InputError
from placer.model.placement import InstancePlacement, Placement, SolveStats
from placer.model.running import Running, running_placement
from placer.model.spec import ServingTopology
from placer.solver.decode import Part, decode_joint
from placer.solver.keep import plan_keep
from placer.solver.options import CLOCK_NOTE, Budget, SolveOptions
from placer.solver.problem import Problem, build_problem, with_kept
from placer.topology.graph import Topology


@dataclass(frozen=True)
class Move:
    deployment: str  # namespace/name
    replica: int
    what: str  # "decode-3", "router"
    source: str  # "node:gpus;..." or a node
    target: str
    units_before: int | None  # the instance's all-reduce + telemetry cost units (None for a router)
    units_after: int | None


@dataclass
class PlanResult:
    moves: list[Move]
    placements: list[tuple[ServingTopology, Placement]]  # the state after the moves, pending included
    cost_before: int  # running deployments, as they are
    cost_after: int  # every deployment after the moves
    topology: Topology
    status: str  # optimal | feasible
    seconds: float
    notes: list[str]  # what the checker says of the state as it runs


def plan(
    running: list[Running],
    pending: list[tuple[ServingTopology, str]],
    topo: Topology,
    options: SolveOptions,
    cut: float | None = None,
    scoped: bool = True,
) -> PlanResult:
    """Fewest moves such that every pending deployment is placed and, with ``cut``, the running ones'
    total cost drops by at least that fraction.

    With many running deployments and something pending (no ``cut``), the model first holds only the
    running deployments near the pending ones (placer.solver.plan_scope): the rest stay where they run.
    A scope with no plan is widened, up to every running deployment, so a plan is found whenever the
    whole model finds one; the moves are then the fewest among the deployments in that scope."""
    from placer.solver.plan_scope import scopes

    t0 = time.perf_counter()
    _check_inputs(running, pending)
    budget = Budget.of(options)
    tried = scopes(running, pending, topo) if scoped and pending and cut is None else []
    for scope in tried:
        try:
            result = _plan(running, pending, topo, options, cut, budget, scope)
        except InfeasibleError:
            continue
        result.notes.append(
            f"moves looked for among the {len(scope)} of {len(running)} running deployment(s) near the pending "
            "one(s); the others stay where they run"
        )
        return _finish(result, budget, t0)
    try:
        return _finish(_plan(running, pending, topo, options, cut, budget, None), budget, t0)
    except InfeasibleError as exc:
        if not exc.proven or exc.reasons or not options.explain:
            raise
        raise InfeasibleError(str(exc), _why_not(running, pending, topo, options), proven=True) from None


def _why_not(
    running: list[Running], pending: list[tuple[ServingTopology, str]], topo: Topology, options: SolveOptions
) -> list[str]:
    """Why no moves make room, in solve's words, on the cluster with every running instance gone (what no
    move can change): the pending deployments placed there as a batch would be, each one left out with its
    conflicts (its own rules, or the GPUs the pending ones before it took); if all of them fit there, that
    they fit only without what runs, which keeps its replicas. (Explaining each one alone said nothing
    true of two that fit only one at a time: a rule of one that holds was blamed.)"""
    from placer.solver.fleet import Deployment, solve_fleet

    base = plan_keep(running, [r.spec for r in running if r.spec is not None], topo).topology
    reasons, batch, clocked = [], [], False
    for spec, source in pending:
        try:
            build_problem(spec, base)
        except InputError as exc:
            reasons.append(f"{spec.metadata.namespace}/{spec.metadata.name}: {exc}")
        else:
            batch.append(Deployment(spec, source))
    if batch:
        budget = replace(options, time_limit_s=min(options.time_limit_s, 10.0), wall_limit_s=None)  # a reason, briefly
        result = solve_fleet(batch, base, budget)
        reasons += [f"{u.deployment.key}: {r}" for u in result.unplaced for r in u.reasons]
        clocked = CLOCK_NOTE in result.notes  # what the reasons say then depends on the machine
    if not reasons and pending:
        reasons.append(
            "each pending deployment fits on the cluster with every running instance gone, but not beside what "
            "runs: the running deployments keep the replicas they have (scale them in with placer solve --keep)"
        )
    if clocked:
        reasons.append(CLOCK_NOTE)
    return reasons


def _finish(result: PlanResult, budget: Budget, t0: float) -> PlanResult:
    if budget.clock_cut:
        result.notes.append(CLOCK_NOTE)
    result.seconds = time.perf_counter() - t0
    return result


def _check_inputs(running: list[Running], pending: list[tuple[ServingTopology, str]]) -> None:
    for r in running:
        if r.spec is None:
            raise InputError(
                f"{r.source}: {r.key}: plan needs the spec each running deployment was placed for; give "
                "placement records or placer's manifests, not bare pods"
            )
    running_keys = {r.key: r.source for r in running}
    for spec, source in pending:
        key = f"{spec.metadata.namespace}/{spec.metadata.name}"
        if key in running_keys:
            raise InputError(
                f"{source}: {key} already runs ({running_keys[key]}); plan places new deployments next to what "
                "runs. To scale a running one, use placer solve --keep"
            )


def _plan(
    running: list[Running],
    pending: list[tuple[ServingTopology, str]],
    topo: Topology,
    options: SolveOptions,
    cut: float | None,
    budget: Budget,
    scope: frozenset[str] | None,
) -> PlanResult:
    """The joint model over the running deployments in ``scope`` (None: all) and the pending ones; the
    running deployments outside it hold their GPUs, CPU and memory and do not move."""
    from ortools.sat.python import cp_model

    from placer.check.gate import check_fleet, verify_fleet
    from placer.solver.cpsat.model import PlacementModel, post_capacity

    t0 = time.perf_counter()
    all_specs = [r.spec for r in running if r.spec is not None]
    base = plan_keep(running, all_specs, topo).topology  # every running deployment's GPUs free
    movable = [r for r in running if scope is None or r.key in scope]
    specs = [r.spec for r in movable if r.spec is not None]
    keep = plan_keep(running, specs, topo)
    model_base = keep.topology  # the movable ones' GPUs free, the fixed ones' taken
    before = [(r.spec, running_placement(r, topo.name)) for r in running if r.spec is not None]
    # What runs was not placed by this call: the checker reports on it instead of refusing it (a node
    # cordoned since, say, is the reason to plan).
    reports_before = check_fleet(base, before)
    cost_before = sum(rep.total_units for rep in reports_before)
    notes = [
        f"{pl.namespace}/{pl.deployment} as it runs: {v}"
        for (_s, pl), rep in zip(before, reports_before, strict=True)
        for v in rep.violations
    ]
    problems: list[Problem] = []
    for spec in specs:
        key = f"{spec.metadata.namespace}/{spec.metadata.name}"
        problems.append(with_kept(build_problem(spec, model_base), replace(keep.kept[key], hard=False)))
    for spec, source in pending:
        try:
            problems.append(build_problem(spec, model_base))
        except InputError as exc:
            raise InputError(f"{source}: {exc}") from None
    model = cp_model.CpModel()
    pms = [PlacementModel(p, model=model, joint=True, peers=problems) for p in problems]
    post_capacity(model, model_base, [pm.capacity for pm in pms])
    for pm in pms[: len(movable)]:  # running deployments keep the replicas they have (the model sees to
        # that) and get no new ones: a plan moves what runs, it does not scale it
        kept_replicas = pm.problem.kept.replicas if pm.problem.kept is not None else set()
        for k, lit in enumerate(pm.vars.placed):
            if k not in kept_replicas:
                model.add(lit == 0)
    cost = sum((pm.cost_expr() for pm in pms), start=cp_model.LinearExpr.constant(0))  # type: ignore[arg-type]
    running_cost = sum((pm.cost_expr() for pm in pms[: len(movable)]), start=cp_model.LinearExpr.constant(0))  # type: ignore[arg-type]
    if cut is not None:
        model.add(running_cost <= int((1.0 - cut) * cost_before))
    moves = sum((pm.moves_expr() for pm in pms), start=cp_model.LinearExpr.constant(0))  # type: ignore[arg-type]
    model.minimize(moves)
    solver, status = _run(model, options, budget, want=_want(pending, cut))
    fewest = int(round(solver.objective_value))
    # Fewest moves among the deployments in the scope; no fewer than none whatever the scope.
    proven = status == cp_model.OPTIMAL and (scope is None or fewest == 0)
    model.add(moves <= fewest)
    # With those moves: as many replicas of the pending deployments as fit (minReplicas may allow fewer
    # than all), then the fewest preferred-level misses (as solve ranks them: a moved instance must not
    # leave its preferred level where an equal move keeps it), then the least total cost; each stage
    # starts from the previous answer.
    pending_replicas = sum(
        (x for pm in pms[len(movable) :] for x in pm.vars.placed), start=cp_model.LinearExpr.constant(0)
    )
    misses = sum((pm.misses_expr() for pm in pms), start=cp_model.LinearExpr.constant(0))  # type: ignore[arg-type]
    for sense, objective in (("max", pending_replicas), ("min", misses), ("min", cost)):
        model.clear_objective()
        model.clear_hints()
        for var in [x for pm in pms for x in pm.all_vars()]:
            model.add_hint(var, solver.value(var))
        model.maximize(objective) if sense == "max" else model.minimize(objective)
        better, status2 = _run(model, options, budget, allow_cut=True)
        if better is None:
            proven = False
            break
        solver, proven = better, proven and status2 == cp_model.OPTIMAL
        best = int(round(solver.objective_value))
        model.add(objective >= best) if sense == "max" else model.add(objective <= best)
    parts = [Part(pm.problem, pm, _placed(solver, pm), _stayers(pm, solver)) for pm in pms]
    decoded = decode_joint(parts, solver)
    after = []
    for pm, replicas in zip(pms, decoded, strict=True):
        spec = pm.problem.spec
        n = _placed(solver, pm)
        after.append(
            (
                spec,
                Placement(
                    spec.metadata.name,
                    spec.metadata.namespace,
                    topo.name,
                    replicas[:n],
                    SolveStats("optimal" if proven else "feasible"),
                ),
            )
        )
    if scope is not None:  # the fixed ones as they run, in the order of ``running``; then the pending ones
        solved = {f"{sp.metadata.namespace}/{sp.metadata.name}": (sp, pl) for sp, pl in after}
        unmoved = SolveStats("optimal" if proven else "feasible")
        fixed = {
            f"{sp.metadata.namespace}/{sp.metadata.name}": (sp, replace(pl, stats=replace(unmoved)))
            for sp, pl in before
        }
        after = [solved.get(k, fixed[k]) for k in fixed] + after[len(movable) :]
    reports = verify_fleet(base, after)  # the whole state after the moves, whatever the scope
    for (_s, pl), rep in zip(after, reports, strict=True):
        pl.stats.objective = rep.total_units
    listed = _moves(base, before, reports_before, after[: len(before)], reports[: len(before)])
    return PlanResult(
        listed,
        after,
        cost_before,
        sum(r.total_units for r in reports),
        base,
        "optimal" if proven else "feasible",
        time.perf_counter() - t0,
        notes,
    )


def _want(pending, cut: float | None) -> str:
    parts = ["the pending deployments fit"] if pending else []
    if cut is not None:
        parts.append(f"the running deployments' cost drop by {cut * 100:g}%")
    return " and ".join(parts)


def _run(model, options: SolveOptions, budget: Budget, allow_cut: bool = False, want: str = ""):
    from ortools.sat.python import cp_model

    from placer.solver.options import run_stage

    solver, status = run_stage(model, options, budget)
    if solver is not None or allow_cut:
        return solver, status
    raise InfeasibleError(
        f"no set of moves makes {want}, even with every running instance free to move"
        if status == cp_model.INFEASIBLE
        else "no plan found within the time limit; raise --time-limit",
        proven=status == cp_model.INFEASIBLE,
    )


def _placed(solver, pm) -> int:
    return sum(int(solver.value(x)) for x in pm.vars.placed)


def _stayers(pm, solver) -> dict[tuple[int, str, int], InstancePlacement]:
    """The soft-kept instances the solution leaves where they run (they get their own GPUs back)."""
    from placer.solver.problem import kept_candidate

    kept = pm.problem.kept
    if kept is None:
        return {}
    out = {}
    room: dict[tuple, int] = {}
    for (kind, *rest), var in pm.stays.items():
        if kind == "n":
            key, ci = rest
            room[(key, ci)] = int(solver.value(var))
        elif kind == "m" and solver.value(var):
            out[rest[0]] = kept.instances[rest[0]]
    for (k, pool, i), inst in sorted(kept.instances.items()):
        plan_ = pm.problem.pools[pool]
        if plan_.multi_node:
            continue
        slot = ((k, pool, 0), kept_candidate(pm.problem, inst))
        if room.get(slot, 0) > 0:
            room[slot] -= 1
            out[(k, pool, i)] = inst
    return out


def _moves(topo: Topology, before, reports_before, after, reports_after) -> list[Move]:
    units_before = _instance_units(topo, before, reports_before)
    units_after = _instance_units(topo, after, reports_after)
    out = []
    for (spec, old), (_s, new) in zip(before, after, strict=True):
        key = f"{spec.metadata.namespace}/{spec.metadata.name}"
        new_by = {(r.index, i.pool, i.index): i for r in new.replicas for i in r.instances}
        for rep in old.replicas:
            for inst in rep.instances:
                moved = new_by[(rep.index, inst.pool, inst.index)]
                if moved.pods != inst.pods:
                    ident = (key, rep.index, inst.pool, inst.index)
                    out.append(
                        Move(
                            key,
                            rep.index,
                            f"{inst.pool}-{inst.index}",
                            _pods(inst),
                            _pods(moved),
                            units_before.get(ident),
                            units_after.get(ident),
                        )
                    )
            new_router = next((r.router for r in new.replicas if r.index == rep.index), None)
            if rep.router is not None and new_router != rep.router:
                out.append(Move(key, rep.index, "router", rep.router, str(new_router), None, None))
    return out


def _instance_units(topo: Topology, placed, reports) -> dict[tuple, int]:
    """All-reduce units (the checker's) plus the telemetry units of the instance's GPUs."""
    from placer.topology import cost

    out = {}
    for (spec, pl), rep in zip(placed, reports, strict=True):
        key = f"{spec.metadata.namespace}/{spec.metadata.name}"
        w = spec.objective
        gpus = {(r.index, i.pool, i.index): i for r in pl.replicas for i in r.instances}
        for ic in rep.instances:
            inst = gpus[(ic.replica, ic.pool, ic.index)]
            tele = 0
            for pod in inst.pods:
                node = topo.node_by_name(pod.node)
                tele += len(pod.gpus) * cost.telemetry_per_gpu_units(
                    node.queue_depth, node.kv_cache_hit, w.queue_depth, w.cache_miss
                )
            out[(key, ic.replica, ic.pool, ic.index)] = ic.units + tele
    return out


def _pods(inst: InstancePlacement) -> str:
    return ";".join(f"{p.node}:{','.join(map(str, p.gpus))}" for p in inst.pods)
