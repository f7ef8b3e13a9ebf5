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


class Target(StrEnum):
    coscheduling = "coscheduling"
    kai = "kai"
    volcano = "volcano"
    kueue = "kueue"
    grove = "grove"
    lws = "lws"
    dra = "dra"


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
    target: Annotated[
        Target,
        typer.Option(
            "--target",
            "-t",
            help="Output flavour: coscheduling (default), kai, volcano, kueue, grove, lws, dra (docs/TARGETS.md).",
        ),
    ] = Target.coscheduling,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Namespace of every object (overrides the spec's).")
    ] = None,
    nccl: Annotated[
        bool | None,
        typer.Option(
            "--nccl/--no-nccl",
            help="Add NCCL env chosen from each instance's links. Default: on for every target but coscheduling.",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the placement summary, NCCL settings and the objects instead of manifests (text, stdout).",
        ),
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Stream the solver log to stderr.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print nothing on stderr unless something fails.")
    ] = False,
) -> None:
    """Solve for an atomic, cost-minimal placement and print Kubernetes manifests.

    Examples:

      placer solve spec.yaml cluster.yaml | kubectl apply -f -

      placer solve spec.yaml cluster.yaml --target kai -n serving | kubectl apply -f -

      placer solve spec.yaml cluster.yaml --target grove --dry-run
    """
    from placer.errors import InputError
    from placer.pipeline import run_solve
    from placer.solve import SolveOptions, stderr_log

    if placement is not None and not placement.parent.resolve().is_dir():
        raise InputError(f"--placement {placement}: directory {placement.parent} does not exist")
    if namespace is not None:
        from placer import k8s

        try:
            k8s.check_dns_label(namespace, "--namespace")
        except ValueError as exc:
            raise InputError(str(exc)) from None
    say = (lambda _m: None) if quiet else (lambda m: print(m, file=sys.stderr))
    t0 = time.perf_counter()
    result = run_solve(
        spec,
        cluster,
        SolveOptions(time_limit_s=time_limit, workers=workers, log=stderr_log if verbose else None),
        progress=say,
        target=target.value,
        nccl=nccl,
        namespace=namespace,
    )
    if dry_run:
        _print_plan(result, target.value, nccl)
        say(result.summary(time.perf_counter() - t0))
        return
    text = result.json() if output is OutputFormat.json else result.yaml()
    if placement is not None:
        from placer.emit import placement_text, write_atomic

        write_atomic(placement, placement_text(result.placement, placement, result.spec))
    sys.stdout.write(text)
    sys.stdout.flush()
    say(result.summary(time.perf_counter() - t0))


def _print_plan(result, target: str, nccl: bool | None) -> None:
    """The dry run: explain's summary (no baselines), NCCL choices, the objects; plain text on stdout."""
    from rich.console import Console

    from placer.explain import explain_placement
    from placer.explain_view import render
    from placer.targets import DEFAULT_TARGET
    from placer.targets.plan import render_plan

    ex = render(explain_placement(result.spec, result.topology, result.placement))
    with_nccl = (target != DEFAULT_TARGET) if nccl is None else nccl
    view = render_plan(ex, result.spec, result.topology, result.placement, target, result.manifests, with_nccl)
    tty = sys.stdout.isatty()
    Console(file=sys.stdout, width=None if tty else 160, highlight=False, no_color=not tty).print(view)
