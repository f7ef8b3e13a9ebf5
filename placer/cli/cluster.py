"""``placer cluster generate``: synthetic, seeded, realistically fragmented clusters."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Create and inspect cluster files.", no_args_is_help=True)


@app.command("generate")
def generate_command(
    style: Annotated[str, typer.Option("--style", help="dgx-h100, gb200-nvl72 or mixed.")] = "dgx-h100",
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPU count (rounded up to whole nodes / racks).")] = 1024,
    seed: Annotated[int, typer.Option("--seed", help="Random seed: same seed, same file.")] = 0,
    busy: Annotated[
        float | None,
        typer.Option("--busy", min=0.0, max=1.0, help="Fraction of GPUs busy (default: 0.3-0.6 from the seed)."),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write here (atomically) instead of stdout.")] = None,
) -> None:
    """Generate a cluster file, e.g. the 10,000-GPU benchmark cluster:

    placer cluster generate --style dgx-h100 --gpus 10000 --seed 1 -o dgx-10k.yaml
    """
    from placer.errors import InputError
    from placer.generate import dump_cluster_yaml, generate_cluster

    try:
        text = dump_cluster_yaml(generate_cluster(style, gpus, seed, busy_fraction=busy))
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if out is None:
        sys.stdout.write(text)
    else:
        from placer.emit import write_atomic

        write_atomic(out, text)
        print(f"wrote {out}", file=sys.stderr)
