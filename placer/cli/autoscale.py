"""``placer autoscale SPEC CLUSTER --keep RUNNING --now T``: one scaling decision on the cluster file's
telemetry, and only the objects it adds or changes on stdout."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from placer.cli.solve import OutputFormat, Target


def autoscale_command(
    spec: Annotated[Path, typer.Argument(metavar="SPEC", help="The ServingTopology with a scaling policy.")],
    cluster: Annotated[
        Path, typer.Argument(metavar="CLUSTER", help="The cluster file with each node's metrics (telemetry).")
    ],
    keep: Annotated[
        list[Path],
        typer.Option(
            "--keep",
            help="What runs (placement records, placer's manifests, or kubectl get pods -A -o json). Repeatable.",
        ),
    ],
    now: Annotated[
        str,
        typer.Option(
            "--now",
            help="The decision's time: seconds since the epoch or RFC 3339 (the telemetry's time). placer reads "
            "no clock, so a recorded trace replays to the same decisions.",
        ),
    ],
    state: Annotated[
        Path | None,
        typer.Option("--state", help="The previous decision record (--decision): last change, time below the line."),
    ] = None,
    decision: Annotated[
        Path | None, typer.Option("--decision", help="Write the decision record (JSON); the next call's --state.")
    ] = None,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Print the whole desired set instead of only new and changed objects: the input of "
            "kubectl apply --prune --applyset, which also deletes what the decision removed.",
        ),
    ] = False,
    placement: Annotated[
        Path | None,
        typer.Option("--placement", help="Write the placement record after the decision (the next --keep)."),
    ] = None,
    allow_moves: Annotated[
        bool,
        typer.Option(
            "--allow-moves",
            help="If the new instances do not fit next to the running ones, re-place the deployment whole "
            "(running instances may move; the record lists them). Off: a running instance never moves.",
        ),
    ] = False,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="Manifest format.")] = OutputFormat.yaml,
    time_limit: Annotated[
        float,
        typer.Option("--time-limit", min=0.1, max=86_400, help="Work budget in deterministic seconds (as for solve)."),
    ] = 30.0,
    target: Annotated[
        Target | None,
        typer.Option(
            "--target",
            "-t",
            help="Output flavour (as for solve); default: the one the --keep manifests were written for, else "
            "coscheduling.",
            show_default=False,
        ),
    ] = None,
    target_version: Annotated[str | None, typer.Option("--target-version", help="As for solve.")] = None,
    nccl: Annotated[bool | None, typer.Option("--nccl/--no-nccl", help="As for solve.", show_default=False)] = None,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", help="The namespace the deployment was placed in (as solve -n gave it)."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Nothing on stderr unless something fails.")] = False,
) -> None:
    """Scale out, scale in, shift an instance between prefill and decode, or do nothing.

    stdout: the new and changed objects only (empty when nothing changes);
    the objects to delete are listed in the decision record (objects.prune)
    and on stderr. Exit 0 with a decision (also "none"), 1 when the
    scale-out cannot be placed, 2 on bad input.

    Examples (T: seconds since the epoch or an RFC 3339 time):

      placer autoscale spec.yaml cluster.yaml --keep run.yaml --now T > new.yaml

      placer autoscale spec.yaml cluster.yaml --keep run.yaml --now T --full

    --state last.json --decision next.json carry the cooldowns from one call
    to the next; README.md shows the whole apply-and-prune loop.
    """
    import json

    from placer.emit.files import Outputs, check_output
    from placer.emit.manifests import records_text, to_json_list, to_yaml
    from placer.model.errors import InputError
    from placer.model.load import check_stdin_once, read_text
    from placer.pipeline import run_autoscale
    from placer.solver.autoscale import State, parse_now, state_of
    from placer.solver.solve import SolveOptions

    inputs = [spec, cluster, *keep, *([state] if state else [])]
    check_stdin_once(inputs)
    for path, option in ((decision, "--decision"), (placement, "--placement")):
        if path is not None:
            check_output(path, option, inputs, stdout_busy="the manifests")
    from placer.model.k8s import check_namespace_option

    check_namespace_option(namespace)
    say = (lambda _m: None) if quiet else (lambda m: print(m, file=sys.stderr))
    when = parse_now(now)
    previous = State()
    if state is not None:
        try:
            data = json.loads(read_text(state))  # '-' is stdin, as for every other input
        except InputError as exc:  # cannot read, not UTF-8, over the size limit
            raise InputError(f"--state {exc}") from None
        except json.JSONDecodeError as exc:
            raise InputError(f"--state {state}:{exc.lineno}: not valid JSON ({exc.msg})") from None
        previous = state_of(data, f"--state {state}", when)
    result = run_autoscale(
        spec,
        cluster,
        keep,
        when,
        previous,
        SolveOptions(time_limit_s=time_limit),
        allow_moves=allow_moves,
        target=None if target is None else target.value,
        nccl=nccl,
        target_version=target_version,
        namespace=namespace,
        progress=say,
    )
    record = result.record()
    docs = result.full if full else result.apply
    with Outputs() as files:  # visible only once stdout is written
        if decision is not None:
            files.add(decision, json.dumps(record, indent=2, sort_keys=False) + "\n", "--decision", inputs)
        if placement is not None and result.placement is not None:
            key = f"{result.spec.metadata.namespace}/{result.spec.metadata.name}"
            text = records_text([(result.spec, result.placement)], {key: result.target}, path=placement)
            files.add(placement, text, "--placement", inputs)
        if docs:
            sys.stdout.write(to_json_list(docs) if output is OutputFormat.json else to_yaml(docs))
            sys.stdout.flush()
        files.commit()
    d = result.decision
    say(
        f"{record['deployment']}: {d.action}{' ' + d.scope if d.scope else ''}; "
        f"{record['gpus']['before']} -> {record['gpus']['after']} GPUs; {len(result.apply)} object(s) to apply, "
        f"{len(result.prune)} to prune"
    )
    for key in record["objects"]["prune"]:
        say(f"  prune {key}")
    if result.moves:
        say(f"  moved (--allow-moves): {', '.join(result.moves)}")
