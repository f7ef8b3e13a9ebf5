"""Benchmark ``placer plan``: one pending deployment that fits only if running ones move, among 100 running
deployments on the 10,000-GPU DGX H100 cluster.

    python bench/plan.py                       # 3 seeds, writes bench/PLAN.md
    python bench/plan.py --seeds 1 --full      # also the whole model (every running deployment may move)
    python bench/plan.py --quick --out /tmp/p.md

Per seed: bench/fleet.py's cluster and 100-spec mix, placed by run_fleet (in-process; not timed here);
what it placed is the running state, passed to plan as placement records (load_running). The pending
deployment is one replica of N Llama-70B TP8 instances, each on one node, with its router in their rack
(router.near rack): N whole free nodes in one rack. N is one more than the most whole free nodes any rack
has after the batch, in a rack that had N with only the background jobs: so it fits only if some running
deployment moves. 'plan s' is the plan() call in-process; CPU seconds beside it (process time), and the
1-minute load average before; 'deterministic' says whether the work budget, not the wall clock, ended
every solve (a CLOCK_NOTE in the notes means the clock did).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from fleet import IMAGE, _commit, _NoAliases, _version, spec_mix  # noqa: E402

from placer.emit.manifests import records_text  # noqa: E402
from placer.emit.readback import load_running  # noqa: E402
from placer.model.errors import InfeasibleError  # noqa: E402
from placer.model.load import load_spec  # noqa: E402
from placer.pipeline import SolveOptions, run_fleet, run_plan  # noqa: E402
from placer.topology.generate import dump_cluster_yaml, generate_cluster  # noqa: E402
from placer.topology.usage import merge_usage, usage  # noqa: E402


@dataclass
class Row:
    seed: int
    mode: str  # near (scoped) | full
    running: int
    nodes_needed: int
    scope: str
    moves: int | None
    status: str
    plan_s: float
    cpu_s: float
    load: float
    deterministic: str
    error: str = ""


def pending_doc(n: int) -> dict:
    pool = {
        "instances": n,
        "tensorParallel": 8,
        "placement": {"required": "node"},
        "template": {
            "image": IMAGE,
            "args": ["--model", "meta-llama/Llama-3.3-70B-Instruct", "--tensor-parallel-size", "8"],
            "resources": {"requests": {"cpu": "16", "memory": "128Gi"}},
            "ports": [{"name": "http", "containerPort": 8000}],
        },
    }
    return {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "ServingTopology",
        "metadata": {"name": "pending-rack", "namespace": "chat"},
        "model": {"layers": 80, "hiddenSize": 8192, "kvHeads": 8, "headDim": 128, "bytesPerElement": 2},
        "pools": {"aggregated": pool},
        "router": {"near": {"pool": "aggregated", "level": "rack"}},
        "replicas": 1,
        "scheduling": {"priority": 1000},
    }


def whole_free_by_rack(topo) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for node in topo.nodes:
        if node.schedulable and len(node.free_gpus) == len(node.gpus) == 8:
            out[node.path.get("rack", "")] += 1
    return out


def one_seed(seed: int, gpus: int, count: int, limit: float, tmp: Path, full: bool) -> list[Row]:
    cluster_path = tmp / f"c{seed}.yaml"
    cluster_path.write_text(dump_cluster_yaml(generate_cluster("dgx-h100", gpus, seed)))
    spec_dir = tmp / f"specs{seed}"
    spec_dir.mkdir()
    for doc in spec_mix(seed, count):
        (spec_dir / f"{doc['metadata']['name']}.yaml").write_text(yaml.dump(doc, Dumper=_NoAliases, sort_keys=False))
    res = run_fleet([spec_dir], cluster_path, SolveOptions(time_limit_s=30), keep_paths=[])
    placed = [(p.deployment.spec, p.placement) for p in res.fleet.placed]
    records = tmp / f"running{seed}.yaml"
    records.write_text(records_text(placed))
    base = res.topology
    after = base.with_usage(*merge_usage(usage(s, base, p) for s, p in placed))
    before_racks, after_racks = whole_free_by_rack(base), whole_free_by_rack(after)
    n = max(after_racks.values(), default=0) + 1
    if not any(v >= n for v in before_racks.values()):
        n -= 1  # no rack can be freed further: the pending one then fits without moves
    pending_path = tmp / f"pending{seed}.yaml"
    pending_path.write_text(yaml.dump(pending_doc(n), Dumper=_NoAliases, sort_keys=False))
    pending = [(load_spec(pending_path), str(pending_path))]
    rows = []
    for mode in ("near", "full") if full else ("near",):
        running = load_running([records])
        load = os.getloadavg()[0]
        t, c = time.perf_counter(), time.process_time()
        row = Row(seed, mode, len(running), n, "-", None, "-", 0.0, 0.0, load, "-")
        try:
            result = run_plan(running, pending, base, SolveOptions(time_limit_s=limit), scoped=mode == "near")
        except InfeasibleError as exc:
            row.error = str(exc)
        else:
            row.moves, row.status = len(result.moves), result.status
            scoped = [x for x in result.notes if x.startswith("moves looked for among")]
            row.scope = scoped[0].split(" running")[0].removeprefix("moves looked for among the ") if scoped else "all"
            row.deterministic = "no (wall clock)" if any("wall-clock guard" in x for x in result.notes) else "yes"
        row.plan_s, row.cpu_s = time.perf_counter() - t, time.process_time() - c
        print(f"seed {seed} {mode}: {row}", file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def report(rows: list[Row], args, command: str) -> str:
    lines = [
        "# `placer plan` benchmark",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, OR-Tools "
        f"{_version('ortools')}, placer commit {_commit()}. Run as `{command}` at niceness {os.nice(0)}; "
        f"plan's --time-limit {args.time_limit:g} (deterministic work).",
        "",
        (__doc__ or "").split("\n\n", 2)[2].strip(),
        "",
        "'mode' near = the scoped model (placer.solver.plan_scope: the running deployments holding GPUs in the "
        "pending one's best homes, widened when no plan is found there); full = every running deployment in "
        "one model. 'scope' = running deployments in the model.",
        "",
        "| seed | mode | running | nodes needed in one rack | scope | moves | status | plan s | CPU s "
        "| load avg before | deterministic | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.seed} | {r.mode} | {r.running} | {r.nodes_needed} | {r.scope} | "
            f"{'-' if r.moves is None else r.moves} | {r.status} | {r.plan_s:.1f} | {r.cpu_s:.1f} | {r.load:.2f} "
            f"| {r.deterministic} | {r.error[:80]} |"
        )
    near = sorted(r.plan_s for r in rows if r.mode == "near")
    if near:
        lines += [
            "",
            f"Scoped plan: median {near[len(near) // 2]:.1f} s, max {near[-1]:.1f} s over {len(near)} seed(s) "
            f"(target ≤ 10 s for 100 running deployments).",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--gpus", type=int, default=10_000)
    ap.add_argument("--topologies", type=int, default=100)
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--full", action="store_true", help="also the whole model (slow)")
    ap.add_argument("--quick", action="store_true", help="1 seed, 2,048 GPUs, 30 topologies")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "PLAN.md")
    args = ap.parse_args()
    seeds, gpus, count = args.seeds, args.gpus, args.topologies
    if args.quick:
        seeds, gpus, count = 1, 2048, 30
    rows = []
    with tempfile.TemporaryDirectory(prefix="placer-plan-") as tmp:
        for seed in range(seeds):
            rows += one_seed(seed, gpus, count, args.time_limit, Path(tmp), args.full)
    args.out.write_text(report(rows, args, ("python bench/plan.py " + " ".join(sys.argv[1:])).strip()))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
