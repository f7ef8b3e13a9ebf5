"""solve(problem, options) -> Placement: which search answers (one model, by domain, by anchor domain) and
the answer with names attached.

The objective is lexicographic, solved in stages because one weighted sum of very different magnitudes
proves slowly: (1) as many complete replicas as fit, (2) fewest instances outside their preferred level,
(3) least weighted cost. The default is one search worker: among equal optima it returns the same one on
every run, where racing workers need not. A stage is skipped when
the greedy warm start already meets its best possible value. Each stage is hinted with the previous
answer; the greedy hint is permuted into the symmetry-breaking order so the solver does not repair it.
"""

from __future__ import annotations

import time
from dataclasses import replace

from placer.model.errors import InfeasibleError
from placer.model.placement import Placement, SolveStats
from placer.solver.anchor import anchor_of, solve_by_anchor
from placer.solver.anchor_bound import applies
from placer.solver.decompose import solve_by_domain, split_of
from placer.solver.greedy import GreedyReplica, greedy_counted
from placer.solver.options import CLOCK_NOTE, WALL_FACTOR, WALL_SLACK_S, Budget, Outcome, SolveOptions, Unplaceable
from placer.solver.problem import Problem
from placer.solver.search import search

ONE_MODEL_SHARE = 0.4  # of the work budget, for the one model before the anchor search (where it applies)
# Past this many (replica, candidate) pairs the one model neither proves nor bounds better than the anchor
# search, and at 100k GPUs it alone took ~300 MB (631 MB peak against 318 MB without it; bench/NOTES.md).
ONE_MODEL_MAX_CANDIDATES = 10_000
__all__ = ["SolveOptions", "solve"]  # SolveOptions lives in options; callers import both from here


def solve(
    problem: Problem,
    options: SolveOptions = SolveOptions(),  # noqa: B008 (frozen)
    budget: Budget | None = None,
    start: list[GreedyReplica] | None = None,
) -> Placement:
    """Place as many replicas as fit (at least minReplicas) at least cost; raise InfeasibleError otherwise.

    When every replica must sit inside one of several disjoint domains (a KV-transfer floor that only a rack
    meets, say), the problem separates by domain and placer.solver.decompose solves it domain by domain, exactly;
    otherwise one CP-SAT model is searched. ``start``: the greedy's placement of this very problem, when the
    caller already ran it (a batch does), so it is not run again."""
    budget = Budget.of(options) if budget is None else budget
    work_at_start = budget.work_left
    try:
        outcome = _search(problem, options, budget, start)
    except Unplaceable as exc:
        if not options.explain:
            what = "no placement satisfies every hard constraint" if exc.proven else "no placement found in time"
            raise InfeasibleError(what, proven=exc.proven) from None
        raise _infeasible(problem, exc.proven, options, budget) from None
    notes = list(outcome.notes)
    n = len(outcome.replicas)
    wanted = max(problem.replicas, problem.spec.replicas)  # the spec's count, also when some were counted out
    if n < wanted:
        notes.append(f"placed {n} of {wanted} replicas")
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
        # "work": the deterministic seconds of the budget spent (CP-SAT's plus the counted work), the same
        # on any machine; the others are wall seconds.
        seconds=outcome.seconds | {"work": round(work_at_start - budget.work_left, 6)},
        notes=notes,
    )
    spec = problem.spec
    return Placement(spec.metadata.name, spec.metadata.namespace, problem.topology.name, outcome.replicas, stats)


def _search(
    problem: Problem, options: SolveOptions, budget: Budget, start: list[GreedyReplica] | None = None
) -> Outcome:
    """By domain when the problem separates exactly, by anchor domain when part of each replica is tied to
    one of several domains, else one model."""
    split = split_of(problem)
    if split is not None:
        return solve_by_domain(problem, split, options, budget)
    anchor = anchor_of(problem)
    if anchor is None:
        return search(problem, options, budget, start)
    # Where the flow bound applies (every candidate one whole node), the anchor search goes first: it proved
    # the large spec on 10 of 10 10k DGX seeds in 0.26-1.94 work seconds, where the one model first (40 % of
    # the budget) and then the walk proved 2 of 10 in 10 (bench/ANCHOR.md); the one model gets what it
    # leaves. Elsewhere the one model goes first, where it is small enough to be worth it: on smaller
    # clusters it proves the optimum outright, and short of a proof the anchor search gets the rest. The
    # answer is the better placement, with the better of the two bounds.
    t0 = time.perf_counter()
    if start is None:
        start, work = greedy_counted(problem, budget.greedy_units())  # shared by both searches
        budget.spend_greedy(work)
    t_greedy = time.perf_counter()
    small = problem.replicas * sum(len(plan.candidates) for plan in problem.pools.values()) <= ONE_MODEL_MAX_CANDIDATES
    anchor_first = applies(problem)
    whole: Outcome | None = None
    by_anchor: Outcome | None = None
    if anchor_first:
        by_anchor = solve_by_anchor(problem, anchor, options, budget, start)
        if by_anchor is not None and by_anchor.proven:
            return replace(by_anchor, seconds={"greedy": t_greedy - t0, "search": time.perf_counter() - t_greedy})
    if small and not budget.out():
        try:
            share = budget.work_left if anchor_first else ONE_MODEL_SHARE * budget.work_left
            whole = search(problem, options, budget.child(share), start)
        except Unplaceable as exc:
            if exc.proven:
                raise
    if whole is not None and whole.proven:
        return whole
    if not anchor_first:
        by_anchor = solve_by_anchor(problem, anchor, options, budget, start)
    if whole is None and by_anchor is None:
        return search(problem, options, budget, start)  # what is left, for one model
    if by_anchor is None or (whole is not None and (whole.misses, whole.cost) <= (by_anchor.misses, by_anchor.cost)):
        assert whole is not None
        best, other = whole, by_anchor
    else:
        best, other = by_anchor, whole
    # The time split of the whole: the greedy, then both searches (their model builds included).
    best = replace(best, seconds={"greedy": t_greedy - t0, "search": time.perf_counter() - t_greedy})
    # Each search's bound is a bound on the same optimum when it holds at the same misses: keep the better.
    bounds = [best.bound] + ([other.bound] if other is not None and other.misses == best.misses else [])
    known = [b for b in bounds if b is not None]
    if not known:
        return best
    bound = max(known)
    return replace(best, bound=bound, proven=best.proven or bound >= best.cost)


def _infeasible(problem: Problem, proven: bool, options: SolveOptions, within: Budget | None = None) -> InfeasibleError:
    """The error for a request nothing satisfies, with its conflicts. The explanation has a work budget of
    its own (the time limit, 5-30 s) and its own wall-clock guard, unless ``--wall-limit`` was given: that
    bounds the whole run (``within``, the search's budget). A clock that ended a check is noted."""
    from placer.solver.conflicts import explain_infeasible

    if not proven:
        return InfeasibleError(
            "no placement found within the time limit (not proven impossible); raise --time-limit", [], proven=False
        )
    seconds = max(5.0, min(30.0, options.time_limit_s))
    run = within if options.wall_limit_s is not None else None
    guard = Budget(seconds, WALL_FACTOR * seconds + WALL_SLACK_S, parent=run)
    conflicts = explain_infeasible(problem, seconds=seconds, within=guard)
    notes = [CLOCK_NOTE] if guard.clock_cut else []
    return InfeasibleError(
        "no placement satisfies every hard constraint", [str(c) for c in conflicts] + notes, conflicts, notes=notes
    )
