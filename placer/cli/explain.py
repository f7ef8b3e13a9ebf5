"""``placer explain``: why a placement is what it is, or (``--why-not``) why none exists.

The human view goes to stdout when stdout is a terminal or ``--output text`` asks for it; otherwise to
stderr, so that ``placer explain … | tool`` never feeds a table to a tool. ``--output json`` prints the
machine form on stdout.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer


class ExplainFormat(StrEnum):
    text = "text"
    json = "json"


def explain_command(
    placed: Annotated[
        Path,
        typer.Argument(
            metavar="PLACED",
            help="Placement record (--placement FILE of placer solve) or the manifests it printed; "
            "with --why-not: the ServingTopology spec.",
            show_default=False,
        ),
    ],
    cluster_arg: Annotated[
        Path | None, typer.Argument(metavar="CLUSTER", help="Cluster file (or use --cluster).", show_default=False)
    ] = None,
    cluster: Annotated[
        Path | None, typer.Option("--cluster", "-c", help="Cluster file the placement was made on.")
    ] = None,
    why_not: Annotated[
        bool, typer.Option("--why-not", help="Explain why SPEC does not fit CLUSTER (or show how it fits).")
    ] = False,
    output: Annotated[
        ExplainFormat | None,
        typer.Option(
            "--output", "-o", help="text (human, to stdout) or json. Default: text, to stdout only on a terminal."
        ),
    ] = None,
    svg: Annotated[
        Path | None, typer.Option("--svg", help="Also draw racks -> nodes -> GPUs into this SVG file.")
    ] = None,
    baselines: Annotated[
        bool, typer.Option("--baselines/--no-baselines", help="Compare with count-only and Kueue-style schedulers.")
    ] = True,
    time_limit: Annotated[
        float,
        typer.Option(
            "--time-limit", min=0.1, max=86_400, help="Work budget (deterministic seconds), for --why-not's solve."
        ),
    ] = 30.0,
    deployment: Annotated[
        str | None,
        typer.Option("--deployment", "-d", help="NAME or NAMESPACE/NAME, when PLACED holds a batch."),
    ] = None,
) -> None:
    """Explain a placement: where every TP group sits, its bottleneck link and all-reduce time, the
    prefill -> decode path, the router, each cost term, SLO checks, and what other schedulers would do.

    Examples:

      placer solve spec.yaml cluster.yaml --placement placed.yaml > objects.yaml

      placer explain placed.yaml --cluster cluster.yaml

      placer explain --why-not spec.yaml cluster.yaml
    """
    from placer.model.errors import InputError

    cluster_path = cluster or cluster_arg
    if cluster_path is None:
        raise InputError("explain: give the cluster file (--cluster cluster.yaml)")
    if cluster is not None and cluster_arg is not None:
        raise InputError("explain: give the cluster file once (either positional or --cluster)")
    from placer.emit.files import check_output
    from placer.model.load import check_stdin_once

    check_stdin_once([placed, cluster_path])
    if svg is not None:
        text_to_stdout = output is ExplainFormat.text or (output is None and sys.stdout.isatty())
        busy = "the JSON" if output is ExplainFormat.json else "the text view" if text_to_stdout else ""
        check_output(svg, "--svg", [placed, cluster_path], stdout_busy=busy)
    if why_not and deployment is not None:
        raise InputError("explain: --deployment picks one deployment of placed output; --why-not takes a spec")
    if why_not and placed.is_dir():
        raise InputError(f"--why-not {placed}: a directory; --why-not explains one spec (give its file)")
    if why_not:
        _why_not(placed, cluster_path, output, svg, baselines, time_limit)
    else:
        _explain(placed, cluster_path, output, svg, baselines, deployment)


def _explain(
    placed_path: Path, cluster_path: Path, output, svg: Path | None, baselines: bool, deployment: str | None = None
) -> None:
    from placer.emit.checks import check_against_cluster
    from placer.emit.readback import load_placed
    from placer.model.errors import InputError
    from placer.model.load import load_cluster, locate
    from placer.topology.build import build_topology

    placed = load_placed(placed_path, deployment)
    cluster = load_cluster(cluster_path)
    if placed.placement.cluster and placed.placement.cluster != cluster.metadata.name:
        raise InputError(
            f"{placed_path}: the placement was made on cluster {placed.placement.cluster!r}, "
            f"but {cluster_path} is {cluster.metadata.name!r}"
        )
    try:
        topo = build_topology(cluster)
    except InputError as exc:
        raise locate(cluster_path, exc) from None
    check_against_cluster(placed_path, placed.placement, topo)
    _show(placed.spec, topo, placed.placement, output, svg, baselines, placed.target)


def _show(spec, topo, placement, output, svg: Path | None, baselines: bool, target: str | None = None) -> None:
    from placer.baselines import run_all
    from placer.explain.explanation import explain_placement, to_json

    compared = run_all(spec, topo) if baselines else []
    ex = explain_placement(spec, topo, placement, compared, target)
    from placer.emit.files import Outputs

    with Outputs() as files:  # the picture appears only once the explanation is printed
        if svg is not None:
            from placer.explain.svg import render_svg
            from placer.model.errors import InputError

            try:
                picture = render_svg(spec, topo, placement)
            except ValueError as exc:  # a hand-edited placement naming nodes or pools that do not exist
                raise InputError(f"--svg: cannot draw this placement: {exc}") from None
            files.add(svg, picture, "--svg")
        if output is ExplainFormat.json:
            sys.stdout.write(json.dumps(to_json(ex), indent=2, sort_keys=True) + "\n")
        else:
            from placer.explain.view import render

            _console(output).print(render(ex))
        sys.stdout.flush()
        files.commit()


def _console(output):
    """stdout when it is a terminal or text was asked for; stderr otherwise (pipes stay clean)."""
    from rich.console import Console

    to_stdout = output is ExplainFormat.text or sys.stdout.isatty()
    stream = sys.stdout if to_stdout else sys.stderr
    return Console(file=stream, width=None if stream.isatty() else 160, highlight=False)


def _why_not(spec_path: Path, cluster_path: Path, output, svg: Path | None, baselines: bool, time_limit: float) -> None:
    from placer.model.errors import InfeasibleError
    from placer.pipeline import run_solve
    from placer.solver.solve import SolveOptions

    try:
        result = run_solve(spec_path, cluster_path, SolveOptions(time_limit_s=time_limit))
    except InfeasibleError as exc:
        if output is ExplainFormat.json:
            conflicts = [{"rule": c.rule, "message": c.message, "relax": c.relax} for c in exc.conflicts]
            if not conflicts:
                conflicts = [{"rule": "", "message": r, "relax": None} for r in exc.reasons if r not in exc.notes]
            doc = {"apiVersion": "placer.dev/v1alpha1", "kind": "WhyNot", "fits": False, "message": str(exc)}
            if exc.notes:  # the answer depends on the machine (the wall-clock guard ended a check)
                doc["notes"] = exc.notes
            sys.stdout.write(json.dumps(doc | {"conflicts": conflicts}, indent=2, sort_keys=True) + "\n")
            raise typer.Exit(1) from None
        from placer.explain.view import render_conflicts

        _console(output).print(
            render_conflicts(str(exc), [*exc.conflicts, *exc.notes] if exc.conflicts else exc.reasons)
        )
        raise typer.Exit(1) from None
    _show(result.spec, result.topology, result.placement, output, svg, baselines)
