"""``placer solve SPEC CLUSTER``: place the serving topology and print manifests to stdout."""

from __future__ import annotations

import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer


class OutputFormat(StrEnum):
    yaml = "yaml"
    json = "json"


def solve_command(
    spec: Annotated[Path, typer.Argument(help="ServingTopology spec (YAML).")],
    cluster: Annotated[Path, typer.Argument(help="Cluster file (YAML).")],
    placement: Annotated[
        Path | None, typer.Option("--placement", help="Also write the placement record (.json or .yaml).")
    ] = None,
    output: Annotated[
        OutputFormat, typer.Option("--output", "-o", help="Manifest format on stdout.")
    ] = OutputFormat.yaml,
    time_limit: Annotated[
        float,
        typer.Option("--time-limit", min=0.1, help="Seconds; the best complete placement found is returned when hit."),
    ] = 30.0,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=1,
            max=64,
            help="CP-SAT search workers. 1 (default) is reproducible; more may pick another equal-cost optimum.",
        ),
    ] = 1,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Stream the solver log to stderr.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print nothing on stderr unless something fails.")
    ] = False,
) -> None:
    """Solve for an atomic, cost-minimal placement and print Kubernetes manifests.

    Example: placer solve spec.yaml cluster.yaml | kubectl apply -f -
    """
    from placer.errors import InputError
    from placer.pipeline import run_solve
    from placer.solve import SolveOptions, stderr_log

    if placement is not None and not placement.parent.resolve().is_dir():
        raise InputError(f"--placement {placement}: directory {placement.parent} does not exist")
    say = (lambda _m: None) if quiet else (lambda m: print(m, file=sys.stderr))
    t0 = time.perf_counter()
    result = run_solve(
        spec,
        cluster,
        SolveOptions(time_limit_s=time_limit, workers=workers, log=stderr_log if verbose else None),
        progress=say,
    )
    text = result.json() if output is OutputFormat.json else result.yaml()
    if placement is not None:
        from placer.emit import placement_text, write_atomic

        write_atomic(placement, placement_text(result.placement, placement, result.spec))
    sys.stdout.write(text)
    sys.stdout.flush()
    say(result.summary(time.perf_counter() - t0))
