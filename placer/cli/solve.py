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
    dynamo = "dynamo"


def solve_command(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE",
            help="SPEC... CLUSTER: one or more ServingTopology specs (files, multi-document files or directories), "
            "then the cluster file.",
            show_default=False,
        ),
    ],
    keep: Annotated[
        list[Path] | None,
        typer.Option(
            "--keep",
            help="What already runs (placement records, placer's manifests, or kubectl get pods -A -o json): "
            "its instances stay where they are; only new ones are placed. Repeatable.",
        ),
    ] = None,
    placement: Annotated[
        Path | None, typer.Option("--placement", help="Also write the placement record (.json or .yaml).")
    ] = None,
    output: Annotated[
        OutputFormat, typer.Option("--output", "-o", help="Manifest format on stdout.")
    ] = OutputFormat.yaml,
    time_limit: Annotated[
        float,
        typer.Option(
            "--time-limit",
            min=0.1,
            max=86_400,  # a day; inf overflowed the solver's budget (exit 3)
            help="Work budget in deterministic seconds (about wall seconds on an idle core): the same input gives "
            "the same answer on a busy or idle machine. The best complete placement found is returned when hit.",
        ),
    ] = 30.0,
    wall_limit: Annotated[
        float | None,
        typer.Option(
            "--wall-limit",
            min=0.1,
            max=86_400,
            help="Wall-clock guard in seconds (default: 2 x --time-limit + 5). Hitting it is noted: that answer "
            "depends on the machine.",
        ),
    ] = None,
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
        Target | None,
        typer.Option(
            "--target",
            "-t",
            help="Output flavour: coscheduling (default), kai, volcano, kueue, grove, lws, dra, dynamo "
            "(docs/TARGETS.md). With --keep, the default is the target the running manifests were written for.",
            show_default=False,
        ),
    ] = None,
    target_version: Annotated[
        str | None,
        typer.Option(
            "--target-version",
            help="Release of the --target's scheduler or operator (e.g. 1.13 for Volcano); default: the newest "
            "placer supports. Older releases get what they accept, or exit 2 naming the oldest supported.",
        ),
    ] = None,
    topology_objects: Annotated[
        Path | None,
        typer.Option(
            "--topology-objects",
            help="Also write the cluster-scoped objects the --target's constraints refer to, for a cluster that "
            "lacks them (Kueue Topology + ResourceFlavor, Volcano HyperNodes; kai's Topology and grove's "
            "ClusterTopologyBinding, otherwise in the stream, move here), to this file, or with '-' in front of "
            "the manifests on stdout. Apply them once, outside any deployment's ApplySet.",
        ),
    ] = None,
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

    With several specs, each deployment is placed whole or not at all, higher
    scheduling.priority first; the placed ones are printed and the exit code
    is 1 if any was left out (stderr says why).

    Examples:

      placer solve spec.yaml cluster.yaml | kubectl apply -f -

      placer solve specs/ cluster.yaml --placement running.yaml > objects.yaml

      placer solve specs/ cluster.yaml --keep running.yaml   # move nothing

      placer solve spec.yaml cluster.yaml --target kai -n serving | kubectl apply -f -

      placer solve spec.yaml cluster.yaml --target grove --dry-run
    """
    from placer.emit.files import check_output
    from placer.model.errors import InputError
    from placer.model.load import check_stdin_once
    from placer.pipeline import run_solve
    from placer.solver.options import stderr_log
    from placer.solver.solve import SolveOptions

    inputs = [*paths, *(keep or [])]
    check_stdin_once(inputs)
    if quiet and verbose:
        raise InputError(
            "-q and -v contradict each other: -q prints nothing on stderr, -v streams the solver log there"
        )
    if dry_run and placement is not None:
        raise InputError("--dry-run writes no files: drop --placement (or --dry-run)")
    if dry_run and output is OutputFormat.json:
        raise InputError("--dry-run prints a text plan; -o json is for the manifests: drop one of them")
    if placement is not None:
        check_output(placement, "--placement", inputs, stdout_busy="the manifests")
    if topology_objects is not None:
        check_output(topology_objects, "--topology-objects", [*inputs, *([placement] if placement else [])])
    from placer.model.k8s import check_namespace_option

    check_namespace_option(namespace)
    say = (lambda _m: None) if quiet else (lambda m: print(m, file=sys.stderr))
    if len(paths) < 2:
        raise InputError("give at least one spec and then the cluster file: placer solve SPEC... CLUSTER")
    *specs, cluster = paths
    from placer.emit.targets import DEFAULT_TARGET

    chosen = None if target is None else target.value
    if topology_objects is not None and not keep:
        _check_topology_target(chosen or DEFAULT_TARGET)  # with --keep, from what runs (run_fleet, before solving)
    options = SolveOptions(
        time_limit_s=time_limit, workers=workers, log=stderr_log if verbose else None, wall_limit_s=wall_limit
    )
    if keep or len(specs) > 1 or specs[0].is_dir() or _documents(specs[0]) > 1:
        _solve_fleet(
            specs,
            cluster,
            options,
            keep or [],
            placement,
            output,
            chosen,
            nccl,
            namespace,
            dry_run,
            quiet,
            say,
            target_version,
            topology_objects,
        )
        return
    spec = specs[0]
    single = chosen or DEFAULT_TARGET  # no --keep: the target given, else the default
    t0 = time.perf_counter()
    result = run_solve(
        spec,
        cluster,
        options,
        progress=say,
        target=single,
        nccl=nccl,
        namespace=namespace,
        target_version=target_version,
    )
    if topology_objects is not None:
        from placer.emit.manifests import topology_manifests

        r = result
        docs = topology_manifests([(r.spec, r.placement, r.report)], r.topology, single, target_version)
        r.manifests = _with_topology(r.manifests, docs, topology_objects)
    if dry_run:
        apart = topology_objects is not None and str(topology_objects) != "-"
        _print_plan(result, single, nccl, (str(topology_objects), docs) if apart else None)
        say(result.summary(time.perf_counter() - t0))
        return
    text = result.json() if output is OutputFormat.json else result.yaml()
    from placer.emit.files import Outputs

    with Outputs() as files:  # visible only once stdout is written
        if placement is not None:
            from placer.emit.manifests import placement_text

            record = placement_text(result.placement, placement, result.spec, single)
            files.add(placement, record, "--placement", paths)
        if topology_objects is not None and str(topology_objects) != "-":
            _add_topology(files, topology_objects, docs, output, paths)
        sys.stdout.write(text)
        sys.stdout.flush()
        files.commit()
    say(result.summary(time.perf_counter() - t0))


def _print_plan(result, target: str, nccl: bool | None, topology_file: tuple[str, list[dict]] | None) -> None:
    """The dry run: explain's summary (no baselines), NCCL choices, the objects (and those --topology-objects
    would write to its file); plain text on stdout."""
    from rich.console import Console

    from placer.emit.targets import DEFAULT_TARGET
    from placer.emit.targets.plan import render_plan
    from placer.explain.explanation import explain_placement
    from placer.explain.view import render

    ex = render(explain_placement(result.spec, result.topology, result.placement, target=target))
    with_nccl = (target != DEFAULT_TARGET) if nccl is None else nccl
    view = render_plan(
        ex, result.spec, result.topology, result.placement, target, result.manifests, with_nccl, topology_file
    )
    tty = sys.stdout.isatty()
    Console(file=sys.stdout, width=None if tty else 160, highlight=False, no_color=not tty).print(view)


def _documents(path: Path) -> int:
    from placer.model.load import read_text
    from placer.model.yaml_text import parse_documents

    return len(parse_documents(read_text(path), str(path)))


def _solve_fleet(
    specs,
    cluster,
    options,
    keep,
    placement,
    output,
    target,
    nccl,
    namespace,
    dry_run,
    quiet,
    say,
    target_version=None,
    topology_objects=None,
):
    """Several deployments and/or --keep: the placed ones on stdout, a table of all of them on stderr."""
    from placer.emit.files import Outputs
    from placer.emit.manifests import records_text
    from placer.pipeline import run_fleet
    from placer.solver.options import CLOCK_NOTE

    t0 = time.perf_counter()
    res = run_fleet(
        specs,
        cluster,
        options,
        keep,
        progress=say,
        target=target,
        nccl=nccl,
        namespace=namespace,
        target_version=target_version,
        one_target=None if topology_objects is None else _one_topology_target,
    )
    if topology_objects is not None and res.fleet.placed:  # once for the cluster, agreed by every deployment
        from placer.emit.manifests import topology_manifests

        placed = [(p.deployment.spec, p.placement, r) for p, r in zip(res.fleet.placed, res.reports, strict=True)]
        docs = topology_manifests(placed, res.topology, res.target, target_version)
        res.manifests = _with_topology(res.manifests, docs, topology_objects)
    seconds = time.perf_counter() - t0
    file = topology_objects is not None and str(topology_objects) != "-" and res.fleet.placed
    apart = (str(topology_objects), len(docs)) if file else None  # objects the stream does not hold
    if dry_run:
        _console(sys.stdout).print(_fleet_table(res, seconds, apart))
    else:
        with Outputs() as files:  # visible only once stdout is written
            if placement is not None:
                text = records_text(
                    [(p.deployment.spec, p.placement) for p in res.fleet.placed], res.targets, path=placement
                )
                files.add(placement, text, "--placement", [*specs, cluster, *keep])
            if topology_objects is not None and str(topology_objects) != "-" and res.fleet.placed:
                _add_topology(files, topology_objects, docs, output, [*specs, cluster, *keep])
            sys.stdout.write(res.json() if output is OutputFormat.json else res.yaml())
            sys.stdout.flush()
            files.commit()
        if not quiet:  # with -q the table is not built at all (rich's tables cost 0.06 s to import)
            _console(sys.stderr).print(_fleet_table(res, seconds, apart))
            for line in res.slo_warnings():
                print(line, file=sys.stderr)
        else:  # a failure is said even with -q: which deployments were left out, and why
            for u in res.fleet.unplaced:
                print(f"{u.deployment.key} ({u.deployment.source}) not placed:", file=sys.stderr)
                for reason in u.reasons:
                    print(f"  - {reason}", file=sys.stderr)
            if res.fleet.unplaced and CLOCK_NOTE in res.fleet.notes:  # those reasons depend on the machine
                print(f"note: {CLOCK_NOTE}", file=sys.stderr)
    if res.fleet.unplaced:
        raise typer.Exit(1)


def _with_topology(manifests: list[dict], docs: list[dict], topology_objects: Path) -> list[dict]:
    """The stream with the topology objects first (``-``), or without them when they go to their own file
    (the kai and grove targets carry theirs in the stream already)."""
    from placer.emit.manifests import split_off, without_repeats

    return without_repeats([*docs, *manifests]) if str(topology_objects) == "-" else split_off(manifests, docs)


def _one_topology_target(targets: dict[str, str]) -> None:
    """--topology-objects describes the cluster once for every deployment printed: they must share a target
    that has topology objects. Checked on every deployment given (before the solve, which may leave some out)."""
    from placer.model.errors import InputError

    if len(set(targets.values())) > 1:
        which = ", ".join(f"{k}: {t}" for k, t in sorted(targets.items()))
        raise InputError(f"--topology-objects: the deployments' objects are for different targets ({which})")
    for target in set(targets.values()):
        _check_topology_target(target)


def _check_topology_target(target: str) -> None:
    from placer.emit.targets import TOPOLOGY_TARGETS
    from placer.model.errors import InputError

    if target not in TOPOLOGY_TARGETS:
        raise InputError(
            f"--topology-objects: the {target} target refers to no topology object (choose --target "
            f"{', '.join(TOPOLOGY_TARGETS)})"
        )


def _fleet_table(res, seconds: float, apart: tuple[str, int] | None = None):
    from placer.explain.fleet_view import fleet_table

    return fleet_table(res, seconds, apart)


def _add_topology(files, path: Path, docs: list[dict], output, inputs) -> None:
    from placer.emit.manifests import to_json_list, to_yaml

    text = to_json_list(docs) if output is OutputFormat.json else to_yaml(docs)
    files.add(path, text, "--topology-objects", inputs)


def _console(stream):
    from rich.console import Console

    tty = stream.isatty()
    return Console(file=stream, width=None if tty else 160, highlight=False, no_color=not tty)
