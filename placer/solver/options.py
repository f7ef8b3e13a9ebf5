"""What every search shares: the options a caller sets, the budget a search spends, the outcome a search
returns before names are attached, and one configured CP-SAT solver (placer's parameters, in one place).

Time is deterministic by default. ``time_limit_s`` is a budget of *work*: CP-SAT's deterministic time
(``max_deterministic_time``, which counts the solver's work, not the clock) plus the greedy's counted work
converted at a fixed rate. Every share of it (decomposition entries, batch deployments, repairs,
explanations) is a share of work too, so the same input gives the same placement and status on a busy or
an idle machine. The wall clock is only the outer guard (``wall_limit_s``, by default twice the budget plus
5 s): if it ever ends a solve, the answer says so, because that answer depends on the machine.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from placer.model.placement import ReplicaPlacement

WALL_FACTOR, WALL_SLACK_S = 2.0, 5.0  # default wall-clock guard: 2 x the work budget + 5 s
GREEDY_SHARE = 0.2  # of the work budget, at most, for the greedy warm start
BUILD_ITEMS_PER_S = 150_000  # model variables + constraints built per deterministic second: 110-230 k/s measured
# Hints, stage changes and decoding around each model, whatever its size: the anchor search solves 100+
# small models, where this was half the CPU time before it was charged (bench/NOTES.md).
MODEL_OVERHEAD_S = 0.05
GREEDY_UNITS_PER_S = 1_000_000  # greedy work units per deterministic second: 0.8-1.4 M/s measured (bench/NOTES.md)
CLOCK_NOTE = (
    "the wall-clock guard ended the search (the machine was slower than the work budget assumes); "
    "this answer may differ between runs"
)


MAX_LIMIT_S = 86_400.0  # a day: the most --time-limit and --wall-limit take
MAX_WORKERS = 64  # as --workers


@dataclass(frozen=True)
class SolveOptions:
    time_limit_s: float = 30.0  # the work budget, in deterministic seconds (about wall seconds on an idle core)
    workers: int = 1  # one worker is deterministic and, on 2 cores, as fast (bench/NOTES.md)
    seed: int = 0
    log: Callable[[str], None] | None = None  # solver progress lines (stderr in the CLI)
    explain: bool = True  # on infeasibility, name the conflicting rules (seconds); an admission loop may skip it
    wall_limit_s: float | None = None  # outer guard; None: WALL_FACTOR x time_limit_s + WALL_SLACK_S

    def __post_init__(self) -> None:
        """The library's callers get the CLI's checks: bad input, not an overflow deep in the solver."""
        from placer.model.errors import InputError

        most_wall = WALL_FACTOR * MAX_LIMIT_S + WALL_SLACK_S  # what the default guard of the longest limit is
        for name, value, most in (
            ("time_limit_s", self.time_limit_s, MAX_LIMIT_S),
            ("wall_limit_s", self.wall_limit_s, most_wall),
        ):
            if value is None and name == "wall_limit_s":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= most:  # also NaN
                raise InputError(f"{name}: expected seconds, more than 0 and at most {most:g}, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not -(2**31) <= self.seed < 2**31:
            raise InputError(f"seed: expected an integer that fits 32 bits (CP-SAT's), got {self.seed!r}")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or not 1 <= self.workers <= MAX_WORKERS:
            raise InputError(
                f"workers: expected 1 to {MAX_WORKERS} (0 would let CP-SAT take every core), got {self.workers!r}"
            )

    def wall_s(self) -> float:
        return self.wall_limit_s if self.wall_limit_s is not None else WALL_FACTOR * self.time_limit_s + WALL_SLACK_S

    def greedy_units(self) -> int:
        """The greedy's share of the whole budget, in its work units (for a fallback after the search)."""
        return int(GREEDY_SHARE * self.time_limit_s * GREEDY_UNITS_PER_S)


class Budget:
    """Work a search may still spend (deterministic seconds) and the wall-clock deadline that guards it.

    A share is a ``child``: what it spends is charged to its parents too, so shares never add up to more
    than the whole. ``clock_cut`` is set on the whole tree when the wall clock, not the work budget, ended a
    solve."""

    def __init__(self, work_s: float, wall_s: float, parent: Budget | None = None):
        self.work_left = max(0.0, work_s)
        self.wall_deadline = time.perf_counter() + max(0.0, wall_s)
        if parent is not None:
            self.wall_deadline = min(self.wall_deadline, parent.wall_deadline)
        self.parent = parent
        self.clock_cut = False

    @classmethod
    def of(cls, options: SolveOptions) -> Budget:
        return cls(options.time_limit_s, options.wall_s())

    def child(self, work_s: float) -> Budget:
        """A share of at most ``work_s`` of what is left."""
        return Budget(min(work_s, self.work_left), self.wall_left(), parent=self)

    def wall_left(self) -> float:
        return self.wall_deadline - time.perf_counter()

    def spend(self, work_s: float) -> None:
        node: Budget | None = self
        while node is not None:
            node.work_left = max(0.0, node.work_left - work_s)
            node = node.parent

    def out(self) -> bool:
        if self.wall_left() <= 0:
            self.cut_by_clock()
            return True
        return self.work_left <= 0

    def cut_by_clock(self) -> None:
        node: Budget | None = self
        while node is not None:
            node.clock_cut = True
            node = node.parent

    def greedy_units(self) -> int:
        """The greedy's share of what is left, in its own work units."""
        return int(GREEDY_SHARE * self.work_left * GREEDY_UNITS_PER_S)

    def spend_greedy(self, units: int) -> None:
        self.spend(units / GREEDY_UNITS_PER_S)

    def spend_build(self, model) -> None:
        """Building a model is work too (searches that build many, such as the anchor search, would
        otherwise overrun the budget in wall time): charged by the model's size."""
        proto = model.proto
        self.spend(MODEL_OVERHEAD_S + (len(proto.variables) + len(proto.constraints)) / BUILD_ITEMS_PER_S)


@dataclass
class Outcome:
    """One search's answer before names are attached: what the decomposition combines."""

    replicas: tuple[ReplicaPlacement, ...]
    misses: int  # instances outside their preferred level
    cost: int
    bound: int | None  # bounds every placement's cost at these misses (never a cut-short stage's conditional one)
    proven: bool
    notes: list[str]
    seconds: dict[str, float]


class Unplaceable(Exception):
    """No placement (``proven``: none exists; else none found in time). solve() turns it into an
    InfeasibleError with the conflict explanation; the decomposition catches it per container."""

    def __init__(self, proven: bool):
        super().__init__("proven infeasible" if proven else "nothing found in time")
        self.proven = proven


def configured_solver(options: SolveOptions, budget: Budget):
    """A CpSolver with placer's parameters, limited to the work left in ``budget`` (deterministic time)
    and, as the outer guard, the wall-clock time left. Run it with ``run_solver`` so the work is charged."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_deterministic_time = max(0.01, budget.work_left)
    p.max_time_in_seconds = max(0.05, budget.wall_left())
    p.num_workers = max(1, options.workers)
    p.random_seed = options.seed
    p.cp_model_probing_level = 0  # probing turns at-most-one rows into millions of clauses (SCALING.md)
    # The model breaks symmetry itself; CP-SAT's own symmetry pass, combined with a hint, spent 10 s
    # of a 11 s solve on the 10k-GPU GB200 cluster (bench/NOTES.md).
    p.symmetry_level = 0
    return solver


def run_solver(solver, model, budget: Budget):
    """Solve, charge the deterministic time spent to ``budget``, and note when the wall clock ended it."""
    from ortools.sat.python import cp_model

    status = solver.solve(model)
    if status == cp_model.MODEL_INVALID:  # placer built a model CP-SAT refuses: a bug, never "nothing found"
        raise RuntimeError(f"CP-SAT refused the model placer built: {model.validate()}")
    work = solver.response_proto.deterministic_time
    budget.spend(work)
    p = solver.parameters
    finished = status in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
    if not finished and work < 0.95 * p.max_deterministic_time and solver.wall_time >= 0.95 * p.max_time_in_seconds:
        budget.cut_by_clock()
    return status


def run_stage(model, options: SolveOptions, budget: Budget):
    """One solve of a joint model (fleet repairs, plan): (solver, status), solver None if nothing was found."""
    from ortools.sat.python import cp_model

    solver = configured_solver(options, budget)
    status = run_solver(solver, model, budget)
    return (solver if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None), status


def _ignore(_line: str) -> None:
    return None


def stderr_log(line: str) -> None:
    print(line, file=sys.stderr)
