"""How ``placer cluster import`` scales with the node count, per input format (1k, 10k, 100k nodes).

Each format gets a generated input of N nodes (slim kubectl node objects, so that 100k nodes stay under the
64 MiB input limit; a pod per node; Slurm ``topology.conf`` with 32 nodes per leaf switch; AWS instance
topology with 32 instances per network node) and is imported in-process, whole: read, parse, merge,
validate (the same models and topology build ``placer solve`` uses) and write the YAML. Linear means the
seconds per 1,000 nodes stay flat as N grows.

Run: nice python bench/import_scaling.py [--sizes 1000,10000,100000] >> bench/IMPORT.md   (progress on stderr)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from placer.importers.document import dump_cluster  # noqa: E402
from placer.importers.run import ImportOptions, import_cluster  # noqa: E402


def _node(i: int) -> dict:
    name = f"gpu-{i:06d}"
    return {
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.memory": "81559",
                "fabric.topograph.run/tier-0": f"leaf-{i // 32:05d}",
            },
        },
        "spec": {"providerID": f"aws:///us-east-1a/i-{i:017x}"},
        "status": {
            "capacity": {"nvidia.com/gpu": "8", "cpu": "224", "memory": "2113488Mi"},
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "224", "memory": "2113488Mi"},
        },
    }


def nodes_file(n: int, tmp: Path) -> Path:
    path = tmp / f"nodes-{n}.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [_node(i) for i in range(n)]}))
    return path


def pods_file(n: int, tmp: Path) -> Path:
    pods = [
        {
            "kind": "Pod",
            "metadata": {"name": f"job-{i}", "namespace": "ml"},
            "spec": {
                "nodeName": f"gpu-{i:06d}",
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(1 + i % 8)}}}],
            },
            "status": {"phase": "Running"},
        }
        for i in range(n)
    ]
    path = tmp / f"pods-{n}.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    return path


def slurm_file(n: int, tmp: Path) -> Path:
    lines = []
    leaves = (n + 31) // 32
    for leaf in range(leaves):
        lo, hi = leaf * 32, min(n, leaf * 32 + 32) - 1
        lines.append(f"SwitchName=leaf{leaf} Nodes=gpu-[{lo:06d}-{hi:06d}]")
    lines.append(f"SwitchName=spine Switches=leaf[0-{leaves - 1}]")
    path = tmp / f"topology-{n}.conf"
    path.write_text("\n".join(lines) + "\n")
    return path


def aws_file(n: int, tmp: Path) -> Path:
    instances = [
        {
            "InstanceId": f"i-{i:017x}",
            "InstanceType": "p5.48xlarge",
            "NetworkNodes": ["nn-top", f"nn-mid-{i // 1024}", f"nn-leaf-{i // 32}"],
            "AvailabilityZone": "us-east-1a",
            "ZoneId": "use1-az1",
        }
        for i in range(n)
    ]
    path = tmp / f"aws-{n}.json"
    path.write_text(json.dumps({"Instances": instances}))
    return path


FORMATS: dict[str, Callable[[int, Path], ImportOptions]] = {
    "kubectl get nodes": lambda n, t: ImportOptions(nodes=nodes_file(n, t)),
    "nodes + kubectl get pods": lambda n, t: ImportOptions(nodes=nodes_file(n, t), pods=pods_file(n, t)),
    "Slurm topology.conf": lambda n, t: ImportOptions(slurm=slurm_file(n, t), gpu_product="NVIDIA-H100-80GB-HBM3"),
    "AWS instance topology": lambda n, t: ImportOptions(aws_topology=aws_file(n, t)),
}


def measure(n: int, make: Callable[[int, Path], ImportOptions]) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        options = make(n, tmp)
        size = sum(p.stat().st_size for p in (options.nodes, options.pods, options.slurm, options.aws_topology) if p)
        start, cpu = time.perf_counter(), time.process_time()
        result = import_cluster(options)
        dump_cluster(result.document)
        return time.perf_counter() - start, time.process_time() - cpu, size / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    sizes = [int(s) for s in ap.parse_args().sizes.split(",")]
    rows = []
    for name, make in FORMATS.items():
        cells = []
        for n in sizes:
            seconds, cpu, mib = measure(n, make)
            print(f"{name}: {n} nodes, {mib:.1f} MiB, {seconds:.2f} s, CPU {cpu:.2f} s", file=sys.stderr, flush=True)
            cells.append(f"{seconds:.2f} s, CPU {cpu:.2f} s ({1000 * cpu / n:.3f} CPU s/1k, {mib:.1f} MiB)")
        rows.append((name, cells))
    print("\n## Scaling with the node count, per format\n")
    print(
        f"`python bench/import_scaling.py --sizes {','.join(map(str, sizes))}` on {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}: one in-process import (read, parse, merge, "
        "validate, write the YAML) of a generated input; wall and CPU seconds (the machine is shared: wall time "
        f"includes waiting for a core; load average {os.getloadavg()[0]:.1f} at the end), CPU seconds per 1,000 nodes "
        "and input size. Linear means the per-1,000 figure stays flat.\n"
    )
    print("| format | " + " | ".join(f"{n:,} nodes" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for name, cells in rows:
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
