"""``placer plan --from RUNNING [PENDING...] CLUSTER``: the fewest moves that make room, move by move."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer


def plan_command(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE",
            help="[PENDING_SPEC...] CLUSTER: deployments that should fit (optional), then the cluster file.",
            show_default=False,
        ),
    ],
    running: Annotated[
        list[Path],
        typer.Option("--from", help="What runs now: placement records or placer's manifests. Repeatable."),
    ],
    cut: Annotated[
        float | None,
        typer.Option(
            "--cut",
            min=0.0,
            max=0.99,
            help="Also (or instead) cut the running deployments' total cost by this fraction, e.g. 0.05.",
        ),
    ] = None,
    time_limit: Annotated[
        float, typer.Option("--time-limit", min=0.1, max=86_400, help="Work budget in deterministic seconds.")
    ] = 30.0,
    placement: Annotated[
        Path | None,
        typer.Option("--placement", help="Write the placement records of the state after the moves (for --keep)."),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print nothing on stderr unless something fails.")
    ] = False,
) -> None:
    """Propose a defragmentation: the fewest instance moves that let PENDING deployments fit (or cut cost).

    stdout: the plan as JSON (moves in order, each with its cost before and after); stderr: a table.

    Examples:

      placer plan --from running.yaml pending.yaml cluster.yaml

      placer plan --from running.yaml cluster.yaml --cut 0.05
    """
    from placer.emit.files import check_output
    from placer.emit.manifests import records_text
    from placer.emit.readback import load_running
    from placer.model.errors import InputError
    from placer.model.load import check_stdin_once, load_cluster, load_specs, locate
    from placer.solver.fleet import check_unique_keys
    from placer.solver.plan import plan
    from placer.solver.solve import SolveOptions
    from placer.topology.build import build_topology

    check_stdin_once([*running, *paths])
    if placement is not None:
        check_output(placement, "--placement", [*running, *paths], stdout_busy="the plan")
    *pending_paths, cluster_path = paths
    if not pending_paths and cut is None:
        raise InputError("give pending specs to make room for, or --cut FRACTION, or both")
    pending = [item for p in pending_paths for item in load_specs(p)]
    check_unique_keys([(f"{s.metadata.namespace}/{s.metadata.name}", source) for s, source in pending])
    try:
        topo = build_topology(load_cluster(cluster_path))
    except InputError as exc:
        raise locate(cluster_path, exc) from None
    runs = load_running(running)
    result = plan(runs, pending, topo, SolveOptions(time_limit_s=time_limit), cut)
    doc = {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "Plan",
        "status": result.status,
        "costBefore": result.cost_before,
        "costAfter": result.cost_after,
        "moves": [
            {
                "deployment": m.deployment,
                "replica": m.replica,
                "instance": m.what,
                "from": m.source,
                "to": m.target,
                "unitsBefore": m.units_before,
                "unitsAfter": m.units_after,
            }
            for m in result.moves
        ],
        "notes": result.notes,
        "pending": [
            {"deployment": f"{s.metadata.namespace}/{s.metadata.name}", "replicas": len(pl.replicas)}
            for s, pl in result.placements[len(result.placements) - len(pending) :]
        ]
        if pending
        else [],
    }
    from placer.emit.files import Outputs

    with Outputs() as files:  # visible only once stdout is written
        if placement is not None:
            targets = {r.key: r.target for r in runs if r.target is not None}  # moves keep each one's target
            files.add(
                placement, records_text(result.placements, targets, path=placement), "--placement", [*running, *paths]
            )
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        sys.stdout.flush()
        files.commit()
    if not quiet:
        _table(result)


def _table(result) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"placer plan: {len(result.moves)} move(s), {result.status}",
        title_justify="left",
        show_edge=False,
        pad_edge=False,
    )
    for col in ("#", "deployment", "replica", "instance", "from", "to", "units before", "units after"):
        table.add_column(col)
    for i, m in enumerate(result.moves, 1):
        table.add_row(
            str(i),
            m.deployment,
            str(m.replica),
            m.what,
            m.source,
            m.target,
            "-" if m.units_before is None else str(m.units_before),
            "-" if m.units_after is None else str(m.units_after),
        )
    console = Console(
        file=sys.stderr, width=None if sys.stderr.isatty() else 200, highlight=False, no_color=not sys.stderr.isatty()
    )
    console.print(table)
    change = result.cost_after - result.cost_before
    console.print(
        f"cost of what runs: {result.cost_before} units; after the moves, everything: {result.cost_after} "
        f"units ({change:+d}); {result.seconds:.2f}s"
    )
    for note in result.notes:
        console.print(f"note: {note}")
