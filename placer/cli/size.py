"""``placer size SPEC CLUSTER [-o SPEC_OUT]``: how many instances of each pool meet the spec's SLO for its
workload, with a roofline model and the communication of the placement placer would make (docs/SIZING.md).
The sizing and its reasoning go to stderr; the spec with the new counts to stdout or ``-o``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def size_command(
    spec: Annotated[
        Path, typer.Argument(metavar="SPEC", help="ServingTopology spec (YAML) with workload.requestRate and slo.")
    ],
    cluster: Annotated[Path, typer.Argument(metavar="CLUSTER", help="Cluster file (YAML).")],
    output: Annotated[
        str,
        typer.Option(
            "-o",
            "--output",
            help="Write the sized spec here ('-': stdout); JSON when the name ends in .json, else YAML.",
        ),
    ] = "-",
    time_limit: Annotated[
        float,
        typer.Option("--time-limit", min=0.1, max=86_400, help="Work budget per placement (deterministic seconds)."),
    ] = 10.0,
    mfu: Annotated[float, typer.Option("--mfu", help="Prefill FLOP/s utilisation (0-1].")] = 0.5,
    mbu: Annotated[float, typer.Option("--mbu", help="Decode bandwidth utilisation (0-1].")] = 0.6,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Nothing on stderr unless something fails.")] = False,
) -> None:
    """Size the pools for the SLO; exit 1 when no count meets it, 2 on bad input."""
    import sys

    from rich.console import Console

    from placer.emit.files import check_output, write_output
    from placer.model.errors import InputError
    from placer.model.load import check_stdin_once, load_cluster, load_spec
    from placer.pipeline import SolveOptions, build_inputs, place
    from placer.sizing.plan import size_spec
    from placer.sizing.roofline import Efficiency
    from placer.sizing.view import reasoning, spec_text, table

    check_stdin_once([spec, cluster])
    check_output(output, "--output", [spec, cluster])
    try:
        efficiency = Efficiency(mfu=mfu, mbu=mbu)
    except ValueError as exc:
        raise InputError(f"--mfu/--mbu: {exc}") from None
    s = load_spec(spec)
    topo, _problem = build_inputs(spec, s, cluster, load_cluster(cluster))
    err = Console(file=sys.stderr, width=None if sys.stderr.isatty() else 160, highlight=False)
    options = SolveOptions(time_limit_s=time_limit, explain=False)
    try:
        say = (lambda _m: None) if quiet else (lambda m: err.print(m, markup=False))
        result = size_spec(s, topo, place, options, efficiency, progress=say)
    except InputError as exc:
        from placer.model.load import locate

        raise locate(spec, exc) from None
    if not quiet:
        err.print(table(result))
        for line in reasoning(result):
            err.print(line)
    write_output(output, spec_text(result.spec, as_json=output.lower().endswith(".json")), "--output", [spec, cluster])
