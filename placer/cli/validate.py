"""``placer validate SPEC CLUSTER``: check the inputs only, without solving."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer


def validate_command(
    spec: Annotated[Path, typer.Argument(help="ServingTopology spec (YAML).")],
    cluster: Annotated[Path, typer.Argument(help="Cluster file (YAML).")],
) -> None:
    """Validate both files and their consistency (selectors, packing levels); exit 2 on bad input."""
    from placer.model.load import check_stdin_once, load_cluster, load_spec
    from placer.pipeline import build_inputs

    check_stdin_once([spec, cluster])
    s = load_spec(spec)
    topo, problem = build_inputs(spec, s, cluster, load_cluster(cluster))
    free = sum(len(n.free_gpus) for n in topo.nodes)
    gpus = sum(len(n.gpus) for n in topo.nodes)
    print(
        f"{spec}: ServingTopology {s.metadata.name!r} is valid ({len(s.pools)} pool(s), {s.replicas} replica(s))",
        file=sys.stderr,
    )
    print(
        f"{cluster}: Cluster {topo.name!r} is valid ({len(topo.nodes)} nodes, {gpus} GPUs, {free} free, "
        f"{len(topo.domains)} domains)",
        file=sys.stderr,
    )
    for name, plan in problem.pools.items():
        print(f"  pool {name}: {len(plan.candidates)} candidate place(s) per instance", file=sys.stderr)
