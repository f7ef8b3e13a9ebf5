"""How placer scales with the cluster: 1k / 10k / 30k / 100k GPUs, DGX H100 and GB200 NVL72 styles.

Per (style, size): `placer cluster generate` as a fresh process (wall, CPU), once as YAML and once as JSON
(`-o cluster.json`, what a tool writing a 100k-GPU cluster would choose); loading each (a fresh process
running `placer.model.load.load_cluster`, CPU seconds); then per spec one whole `placer solve` of the
JSON file as a fresh process (bench/solve_once.py: load, build, solve, verify, emit manifests, write
the record), reporting wall and CPU seconds, peak RSS, the 1-minute load average at its start, the outcome
and what limited it ("work": the deterministic budget, the same on any machine; "clock": the wall guard),
and where the time went: load, topology, problem, solve (of which greedy, model build and search; an anchor
search builds many models, counted in its search), verify, emit.

    python bench/scaling.py [--sizes 1000,10000,30000,100000] [--time-limit 10] [--out bench/SCALING.md]

Clusters are cached in bench/.cache/ (gitignored) between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "bench" / ".cache"
sys.path.insert(0, str(ROOT / "bench"))

from machine import machine_speed  # noqa: E402

STYLES = ("dgx-h100", "gb200-nvl72")
SPECS = ("llama-70b-disagg", "llama-70b-large")
PARTS = ("load", "topology", "problem", "solve", "greedy", "build", "search", "verify", "emit")


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def generate(style: str, gpus: int, seed: int, fmt: str) -> dict:
    """A cluster file (``fmt``: yaml or json) from a fresh `placer cluster generate` process, timed (cached:
    timed once), and the CPU seconds a fresh process takes to load it."""
    path = CACHE / f"{style}-{gpus}-s{seed}.{fmt}"
    meta = CACHE / f"{style}-{gpus}-s{seed}.{fmt}.timing"
    if path.exists() and meta.exists():
        out = json.loads(meta.read_text())
    else:
        CACHE.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "placer", "cluster", "generate", "--style", style, "--gpus", str(gpus)]
        cpu0, load, t0 = _child_cpu(), os.getloadavg()[0], time.perf_counter()
        subprocess.run([*cmd, "--seed", str(seed), "-o", str(path)], check=True, capture_output=True, cwd=ROOT)
        out = {"wall": time.perf_counter() - t0, "cpu": _child_cpu() - cpu0, "load": load}
        meta.write_text(json.dumps(out))
    return out | {"path": str(path), "format": fmt, "load_cpu": _load_cpu(path)}


def _load_cpu(path: Path) -> float:
    """CPU seconds of placer.model.load.load_cluster on ``path`` in a fresh process (imports not counted)."""
    code = (
        "import sys, time; from pathlib import Path; from placer.model.load import load_cluster; "
        "c = time.process_time(); load_cluster(Path(sys.argv[1])); print(time.process_time() - c)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], check=True, capture_output=True, text=True, cwd=ROOT)
    return float(proc.stdout.strip())


def solve(spec: str, cluster: str, limit: float) -> dict:
    record = CACHE / "record.json"
    cmd = [sys.executable, str(ROOT / "bench" / "solve_once.py"), str(ROOT / "fixtures" / "specs" / f"{spec}.yaml")]
    load, t0 = os.getloadavg()[0], time.perf_counter()
    proc = subprocess.run([*cmd, cluster, str(limit), str(record)], capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"status": f"exit {proc.returncode}", "wall": wall, "load": load, "seconds": {}}
    return json.loads(proc.stdout.strip().splitlines()[-1]) | {"wall": wall, "load": load}


def report(rows: list[dict], gens: list[dict], args: argparse.Namespace) -> str:
    head = [
        "# Scaling: 1k to 100k GPUs",
        "",
        f"`python bench/scaling.py --sizes {args.sizes} --time-limit {args.time_limit:g}` at "
        f"{_commit()}; {os.cpu_count()} cores, shared machine (the load average at each run's start is beside "
        "it; CPU seconds are the process's own). Solver limit: "
        f"{args.time_limit:g} deterministic seconds (the work budget), wall guard 2x + 5 s. Seed 0 clusters "
        "(30-60 % busy). 'limited by' says whether the work budget or the wall clock ended the search "
        "('work' answers are the same on any machine). Machine speed before / after the runs: "
        f"{args.speed_before:.2f} / {machine_speed():.2f} CPU s per 10 M steps of a loop in a Python function "
        "(compare times across tables only at a like speed).",
        "",
        "## Cluster files (`placer cluster generate`, one process; then loading the file, another)",
        "",
        "'load CPU s' is `load_cluster` alone (read, parse, validate), in a fresh process. A file written with "
        "`-o cluster.json` is read by the json module; YAML by libyaml and PyYAML's node builder.",
        "",
        "| style | GPUs | format | MB | generate wall s | generate CPU s | load avg | load CPU s |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for g in gens:
        size = Path(g["path"]).stat().st_size / 1e6
        head.append(
            f"| {g['style']} | {g['gpus']:,} | {g['format']} | {size:.2f} | {g['wall']:.2f} | {g['cpu']:.2f} | "
            f"{g['load']:.2f} | {g['load_cpu']:.2f} |"
        )
    head += [
        "",
        "## `placer solve` of the JSON file (one process: import, load, build, solve, check, emit, write the record)",
        "",
        "| style | GPUs | spec | outcome | limited by | gap | wall s | CPU s | RSS MB | load avg | "
        + " | ".join(PARTS)
        + " |",
        "|---|---:|---|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(PARTS),
    ]
    for r in rows:
        sec = r.get("seconds") or {}
        gap = "" if r.get("gap") in (None, 0.0) else f"{100 * r['gap']:.2f} %"
        parts = " | ".join(f"{sec[p]:.2f}" if p in sec else "" for p in PARTS)
        head.append(
            f"| {r['style']} | {r['gpus']:,} | {r['spec']} | {r['status']} | {r.get('limited_by', '')} | {gap} | "
            f"{r['wall']:.2f} | {r.get('cpu_s', 0):.2f} | {r.get('rss_mb', 0):.0f} | {r['load']:.2f} | {parts} |"
        )
    return "\n".join(head) + "\n"


def _commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return proc.stdout.strip() or "an uncommitted tree"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,30000,100000")
    ap.add_argument("--styles", default=",".join(STYLES))
    ap.add_argument("--specs", default=",".join(SPECS))
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "SCALING.md")
    args = ap.parse_args()
    args.speed_before = machine_speed()
    rows, gens = [], []
    for style in args.styles.split(","):
        for gpus in [int(s) for s in args.sizes.split(",")]:
            for fmt in ("yaml", "json"):
                gen = generate(style, gpus, args.seed, fmt) | {"style": style, "gpus": gpus}
                gens.append(gen)
            for spec in args.specs.split(","):
                row = solve(spec, gen["path"], args.time_limit) | {"style": style, "gpus": gpus, "spec": spec}
                print(json.dumps(row), file=sys.stderr)
                rows.append(row)
    args.out.write_text(report(rows, gens, args))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
