"""What every search shares: the options a caller sets, the outcome a search returns before names are
attached, and one configured CP-SAT solver (placer's parameters, in one place)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from placer.model.placement import ReplicaPlacement


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


def _ignore(_line: str) -> None:
    return None


def stderr_log(line: str) -> None:
    print(line, file=sys.stderr)
