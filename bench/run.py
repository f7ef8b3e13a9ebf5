"""Benchmark: build time, solve time, status and objective for each fixture size, including generated
10,000-GPU clusters. Run: python bench/run.py [--seeds N] > bench/RESULTS.md (progress on stderr)."""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from placer.generate import dump_cluster_yaml, generate_cluster  # noqa: E402

SPECS = ["llama-70b-disagg", "aggregated-tp8", "tp16-multinode"]


def clusters(seeds: int, tmp: Path) -> list[tuple[str, Path]]:
    out = [(p.stem, p) for p in sorted((ROOT / "fixtures/clusters").glob("*.yaml"))]
    for style, gpus in (("dgx-h100", 10_000), ("gb200-nvl72", 10_008)):
        for seed in range(seeds):
            path = tmp / f"{style}-{gpus}-s{seed}.yaml"
            path.write_text(dump_cluster_yaml(generate_cluster(style, gpus, seed)))
            out.append((f"{style}-{gpus} seed {seed}", path))
    return out


def run_one(spec: Path, cluster: Path) -> dict:
    """One whole `placer solve` process, so that wall time and peak RSS include imports and loading."""
    code = (
        "import json,resource,sys,time;t=time.perf_counter();"
        "from pathlib import Path;from placer.pipeline import run_solve;from placer.solve import SolveOptions;"
        "from placer.errors import PlacerError\n"
        "try:\n r=run_solve(Path(sys.argv[1]),Path(sys.argv[2]),SolveOptions(time_limit_s=60));"
        "s=r.placement.stats;d=dict(status=s.status,objective=s.objective,bound=s.bound,gap=s.gap,"
        "seconds=s.seconds,replicas=len(r.placement.replicas))\n"
        "except PlacerError as e:\n d=dict(status=type(e).__name__,seconds={})\n"
        "d['wall']=time.perf_counter()-t;d['rss_mb']=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024;"
        "print(json.dumps(d))"
    )
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, str(spec), str(cluster)], capture_output=True, text=True)
    import json

    if proc.returncode != 0:
        return {
            "status": "crash: " + proc.stderr.strip().splitlines()[-1],
            "wall": time.perf_counter() - t,
            "seconds": {},
        }
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for cname, cpath in clusters(args.seeds, Path(tmp)):
            for spec in SPECS:
                res = run_one(ROOT / f"fixtures/specs/{spec}.yaml", cpath)
                s = res.get("seconds", {})
                row = (
                    f"| {cname} | {spec} | {res['status']} | {res.get('objective', '-')} | {res.get('bound', '-')} | "
                    f"{s.get('load', 0):.2f} | {s.get('model', 0) + s.get('build', 0) + s.get('greedy', 0):.2f} | "
                    f"{s.get('solve', 0):.2f} | {s.get('verify', 0):.2f} | {res['wall']:.2f} | "
                    f"{res.get('rss_mb', 0):.0f} |"
                )
                print(row, file=sys.stderr)
                rows.append(row)
    cpu = platform.processor() or platform.machine()
    print(
        f"# Benchmark results\n\nMachine: {cpu}, {__import__('os').cpu_count()} cores, Python "
        f"{platform.python_version()}; `python bench/run.py --seeds {args.seeds}`. Times in seconds; "
        "'build' = topology + candidates + greedy + CP-SAT model; 'solve' = all CP-SAT stages; 'wall' = the "
        "whole process including imports; RSS in MB. Objective and bound in cost units (0.01 us).\n"
    )
    print("| cluster | spec | status | objective | bound | load | build | solve | verify | wall | RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
