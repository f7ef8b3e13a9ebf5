"""``placer validate SPEC... CLUSTER``: check the inputs only, without solving."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer


def validate_command(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="FILE",
            help="SPEC... CLUSTER: one or more ServingTopology specs (files, multi-document files or directories, "
            "as solve takes them), then the cluster file.",
        ),
    ],
) -> None:
    """Validate the specs, the cluster file and their consistency (selectors, packing levels); exit 2 on bad
    input, 1 when a pool's GPU selector matches no schedulable node of the cluster (nothing can be placed
    until one is).
    Takes what 'placer solve' takes, so a batch is checked before it is solved."""
    from placer.model.errors import InputError
    from placer.model.load import check_stdin_once, load_cluster, load_specs, locate
    from placer.pipeline import build_inputs
    from placer.solver.conflicts import no_matching_gpus
    from placer.solver.fleet import check_unique_keys
    from placer.solver.problem import build_problem

    check_stdin_once(paths)
    if len(paths) < 2:
        raise InputError("give at least one spec and then the cluster file: placer validate SPEC... CLUSTER")
    *spec_paths, cluster = paths
    specs = [loaded for path in spec_paths for loaded in load_specs(path)]
    check_unique_keys([(f"{s.metadata.namespace}/{s.metadata.name}", source) for s, source in specs])
    cluster_spec = load_cluster(cluster)
    (first, first_source), rest = specs[0], specs[1:]
    topo, problem = build_inputs(first_source, first, cluster, cluster_spec)
    checked = [(first, first_source, problem)]
    for spec, source in rest:  # the cluster's topology is built once, as a batch solve builds it
        try:
            spec.check_router_kind()
            checked.append((spec, source, build_problem(spec, topo)))
        except InputError as exc:
            raise locate(source, exc) from None
    for spec, source, _problem in checked:
        print(
            f"{source}: ServingTopology {spec.metadata.name!r} is valid ({len(spec.pools)} pool(s), "
            f"{spec.replicas} replica(s))",
            file=sys.stderr,
        )
    free = sum(len(n.free_gpus) for n in topo.nodes)
    gpus = sum(len(n.gpus) for n in topo.nodes)
    print(
        f"{cluster}: Cluster {topo.name!r} is valid ({len(topo.nodes)} nodes, {gpus} GPUs, {free} free, "
        f"{len(topo.domains)} domains)",
        file=sys.stderr,
    )
    unmatched = []
    for spec, source, problem in checked:
        prefix = f"{spec.metadata.namespace}/{spec.metadata.name} " if len(checked) > 1 else ""
        for name, plan in problem.pools.items():
            print(f"  {prefix}pool {name}: {len(plan.candidates)} candidate place(s) per instance", file=sys.stderr)
            if not plan.eligible:
                unmatched.append(f"{source}: pools.{no_matching_gpus(problem, name)}")
    if unmatched:  # valid files that can never go together: solve would exit 1 on any state of this cluster
        print("\n".join(f"error: {line}" for line in unmatched), file=sys.stderr)
        raise typer.Exit(1)
