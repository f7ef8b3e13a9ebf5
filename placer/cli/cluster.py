"""``placer cluster generate | import | show``: synthetic clusters, clusters built from real topology sources,
and a summary of any cluster file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Create and inspect cluster files.", no_args_is_help=True)


@app.command("generate")
def generate_command(
    style: Annotated[str, typer.Option("--style", help="dgx-h100, gb200-nvl72 or mixed.")] = "dgx-h100",
    gpus: Annotated[
        int,
        typer.Option(
            "--gpus", min=1, help="GPU count (rounded up to whole nodes / racks); at most 400000 and 100000 nodes."
        ),
    ] = 1024,
    seed: Annotated[int, typer.Option("--seed", help="Random seed: same seed, same file.")] = 0,
    busy: Annotated[
        float | None,
        typer.Option("--busy", min=0.0, max=1.0, help="Fraction of GPUs busy (default: 0.3-0.6 from the seed)."),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write here (atomically) instead of stdout.")] = None,
) -> None:
    """Generate a synthetic cluster file (DGX H100, GB200 NVL72 or mixed racks), as the benchmarks use.

    The 10,000-GPU benchmark cluster:

      placer cluster generate --style dgx-h100 --gpus 10000 --seed 1 -o dgx-10k.yaml

    An --out ending in .json is written as JSON, one node per line: the same cluster, read several times
    faster (at 100,000 GPUs, seconds less per solve).
    """
    from placer.emit.files import check_output
    from placer.model.errors import InputError
    from placer.topology.generate import MAX_GPUS, dump_cluster, generate_cluster

    if gpus > MAX_GPUS:
        raise InputError(f"--gpus {gpus} is over the limit of {MAX_GPUS} GPUs")
    if out is not None:
        check_output(out, "--out")
    try:
        text = dump_cluster(generate_cluster(style, gpus, seed, busy_fraction=busy), out)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if out is None:
        sys.stdout.write(text)
    else:
        from placer.emit.files import write_output

        write_output(out, text, "--out")
        if str(out) != "-":
            print(f"wrote {out}", file=sys.stderr)


@app.command("import")
def import_command(
    nodes: Annotated[
        Path | None, typer.Option("--nodes", help="kubectl get nodes -o json (a List or one Node).")
    ] = None,
    pods: Annotated[
        Path | None, typer.Option("--pods", help="kubectl get pods -A -o json: busy GPUs, used CPU/memory.")
    ] = None,
    topo: Annotated[
        list[str] | None,
        typer.Option("--topo", help="[PATTERN=]FILE: nvidia-smi topo -m output for the nodes matching PATTERN."),
    ] = None,
    nccl_xml: Annotated[
        list[str] | None, typer.Option("--nccl-xml", help="[PATTERN=]FILE: NCCL topology XML (dump or hint file).")
    ] = None,
    nccl_tests: Annotated[
        list[Path] | None, typer.Option("--nccl-tests", help="nccl-tests output: measured bus bandwidth.")
    ] = None,
    slurm: Annotated[Path | None, typer.Option("--slurm", help="Slurm topology.conf or topology.yaml.")] = None,
    aws_topology: Annotated[
        Path | None, typer.Option("--aws-topology", help="aws ec2 describe-instance-topology output (JSON).")
    ] = None,
    resourceslices: Annotated[
        Path | None,
        typer.Option("--resourceslices", help="kubectl get resourceslices -o json: GPU uuids and bus ids (DRA)."),
    ] = None,
    metrics: Annotated[
        list[str] | None,
        typer.Option(
            "--metrics",
            help="[NODE=]FILE: Prometheus API JSON (/api/v1/query[_range]) or /metrics text of vLLM, SGLang, "
            "Dynamo or DCGM: queue depth, KV-cache hit, TTFT p90 per node (NODE: where unlabelled series belong).",
        ),
    ] = None,
    label_preset: Annotated[
        str,
        typer.Option(
            "--label-preset",
            help="Topology label keys: auto, none, topograph-v1..v5, aws, gke, zone (see docs/IMPORT.md).",
        ),
    ] = "auto",
    level_label: Annotated[
        list[str] | None,
        typer.Option(
            "--level-label", help="LEVEL=KEY: node label naming a level's domain (nvlink-domain, rack, leaf)."
        ),
    ] = None,
    gpu_product: Annotated[
        str | None, typer.Option("--gpu-product", help="GPU product for nodes no source names (GFD style).")
    ] = None,
    gpu_memory_gib: Annotated[
        float | None, typer.Option("--gpu-memory-gib", min=0.001, help="GPU memory for nodes no source reports.")
    ] = None,
    name: Annotated[str, typer.Option("--name", help="metadata.name of the cluster.")] = "imported",
    strict: Annotated[bool, typer.Option("--strict", help="Fail on conflicting sources instead of reporting.")] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write here (atomically) instead of stdout.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No summary on stderr.")] = False,
) -> None:
    """Build a cluster file from real topology sources and report what could not be used.

    Example: placer cluster import --nodes nodes.json --pods pods.json --topo 'dgx-*=topo.txt' -o cluster.yaml

    Telemetry: --metrics m.json (curl 'http://prom:9090/api/v1/query?query=vllm:num_requests_waiting'), or
    --metrics dgx-001=engine.txt (curl dgx-001:8000/metrics).

    The cluster YAML goes to --out (or stdout); the summary goes to stderr. See docs/IMPORT.md.
    """
    from placer.emit.files import check_output
    from placer.importers.document import dump_cluster
    from placer.importers.run import ImportOptions, import_cluster
    from placer.model.load import check_stdin_once

    inputs = [p for p in (nodes, pods, slurm, aws_topology, *(nccl_tests or ())) if p is not None]
    inputs += [Path(v.rpartition("=")[2]) for v in (*(topo or ()), *(nccl_xml or ()))]
    inputs += [Path(v.partition("=")[2] or v) for v in metrics or ()]
    check_stdin_once(inputs)
    if out is not None:
        check_output(out, "--out", inputs)
    options = ImportOptions(
        nodes=nodes,
        pods=pods,
        topo=tuple(topo or ()),
        nccl_xml=tuple(nccl_xml or ()),
        nccl_tests=tuple(nccl_tests or ()),
        slurm=slurm,
        aws_topology=aws_topology,
        resourceslices=resourceslices,
        metrics=tuple(metrics or ()),
        label_preset=label_preset,
        level_labels=tuple(level_label or ()),
        gpu_product=gpu_product,
        gpu_memory_gib=gpu_memory_gib,
        name=name,
        strict=strict,
    )
    result = import_cluster(options)
    text = dump_cluster(result.document)
    if not quiet:
        from rich.console import Console

        from placer.importers.summary import console_width, render_import, summarize

        Console(stderr=True, highlight=False, width=console_width(sys.stderr)).print(
            render_import(result.report, summarize(result.spec, result.topology)), crop=False
        )
    if out is None:
        sys.stdout.write(text)
    else:
        from placer.emit.files import write_output

        write_output(out, text, "--out", inputs)
        if not quiet and str(out) != "-":
            print(f"wrote {out}", file=sys.stderr)


@app.command("show")
def show_command(
    cluster: Annotated[Path, typer.Argument(metavar="CLUSTER", help="Cluster file (YAML).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON instead of tables.")] = False,
) -> None:
    """Summarise a cluster file on stdout: nodes, GPUs, node classes, domains per level, defaults.

    Busy and free GPUs per product, domains as named in the file and as the solver keeps them, measured
    overrides, and the fields left at their defaults; --json for machine output.
    """
    from placer.importers.summary import console_width, render_summary, summarize
    from placer.model.errors import InputError
    from placer.model.load import load_cluster, locate
    from placer.topology.build import build_topology

    spec = load_cluster(cluster)
    try:
        topo = build_topology(spec)
    except InputError as exc:
        raise locate(cluster, exc) from None
    summary = summarize(spec, topo)
    if as_json:
        sys.stdout.write(json.dumps(summary.to_dict(), indent=2, sort_keys=True) + "\n")
        return
    from rich.console import Console

    Console(highlight=False, width=console_width(sys.stdout)).print(render_summary(summary), crop=False)
