"""Churn simulation (issue 6): a seeded day of serving deployments and small jobs arriving and leaving on a
DGX H100 cluster, replayed with placer and with each baseline, every arrival placed on the state that the
earlier ones left.

    python bench/churn.py             # 1,024- and 10,000-GPU clusters: bench/CHURN.md, bench/churn.png (~5-8 min)
    python bench/churn.py --quick     # a 128-GPU cluster, 6 hours: seconds; writes to /tmp/churn-quick/

Phase 1 draws the trace (``generate_trace``). Arrivals are Poisson with a daily cycle (the rate is the mean
times ``1 + amplitude * cos(2 pi (t - peak) / 24 h)``, drawn by thinning), lifetimes are lognormal. Two
streams: serving deployments of the fixture shapes (``SHAPES``), and a background of 1-, 2-, 4- and 8-GPU
jobs weighted as placer.topology.generate weights them. Rates come from target loads: the mean share of the
cluster's GPUs each stream would keep busy if everything were admitted. The background starts 12 hours
before the serving stream, so that at t = 0 the cluster is as full and as fragmented as it stays.

Phase 2 replays the trace per policy (``replay``) on a cluster that starts empty (placer.topology.generate with
``busy_fraction=0``). Each policy has a world of its own: its decisions change what is free later. Rules
shared by every world:

- A background job is placed by one rule, the same in every world: count-only bin-pack, i.e. on the node
  with the fewest free GPUs that still holds it (ties: the first node by name), the lowest free GPU
  indices, 2 CPUs and 16 GiB per GPU. A background job that does not fit is dropped (counted).
- A serving deployment is placed by the policy on ``Topology.with_usage`` of what is live; one that does
  not fit is rejected, not queued. A baseline placement that breaks a hard rule of its spec (the
  checker's verdict) is admitted anyway, as that scheduler would run it, and counted as a violation.
- Every placement is checked with ``placer.check.verify.check`` against its spec and the state it was placed
  on; placer's must pass (checked here, the run stops otherwise).
- A departure gives back exactly the GPUs, CPU and memory its arrival took (checked: at the end every
  world is drained and must equal the empty cluster).

Phase 3 reports (``report``, ``plot``): per policy and cluster, deployments admitted / offered, GPU-hours
served, predicted all-reduce time per forward pass (mean and p99 over admitted TP groups), KV-transfer
time (over admitted replicas with a prefill -> decode path), hard-rule violations, stranded GPUs over time
(bench/run.py's definition, over every pool shape in the trace) and placement latency.

Placement latency is what each policy takes to decide one arrival on the state given to it: for placer
pipeline.place with SolveOptions(explain=False), as an admission loop would run it (placer's run-time
check of its placement is done by the replay, outside the timing); for a baseline
placer.baselines.run_baseline, which includes checking the placement (a few milliseconds).
"""

# The phases live next to this file: bench/churn_trace.py (phase 1), bench/churn_world.py and
# bench/churn_replay.py (phase 2), bench/churn_report.py (phase 3). This file is the command and the cases.

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.churn_replay import POLICIES, baseline_policy, placer_policy, replay  # noqa: E402
from bench.churn_report import placer_version, plot, report, summary_line  # noqa: E402
from bench.churn_trace import TraceParams, deployment_gpus, generate_trace, load_shapes, rates  # noqa: E402
from placer.model.cluster import ClusterSpec  # noqa: E402
from placer.pipeline import SolveOptions  # noqa: E402
from placer.topology.build import build_topology  # noqa: E402
from placer.topology.generate import generate_cluster  # noqa: E402
from placer.topology.graph import Topology  # noqa: E402

# ---- a cluster's whole run --------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One cluster of the benchmark and the trace and solver budget it gets."""

    gpus: int
    cluster_seed: int
    params: TraceParams
    time_limit_s: float
    policies: tuple[str, ...] = POLICIES


def empty_cluster(gpus: int, seed: int) -> Topology:
    """A generated DGX H100 cluster with nothing running (telemetry on a fifth of the nodes as generated)."""
    return build_topology(ClusterSpec.model_validate(generate_cluster("dgx-h100", gpus, seed, busy_fraction=0.0)))


def run_case(case: Case, seed: int, progress: Callable[[str], None] = lambda _m: None) -> dict:
    """One cluster: the trace, one replay per policy, as plain data (what --raw writes and report reads)."""
    shapes = load_shapes([s for s, _ in case.params.shapes])
    base = empty_cluster(case.gpus, case.cluster_seed)
    trace = generate_trace(case.params, case.gpus, shapes, seed)
    runs = []
    for policy in case.policies:
        place = (
            placer_policy(SolveOptions(time_limit_s=case.time_limit_s, workers=1, explain=False))
            if policy == "placer"
            else baseline_policy(policy)
        )
        run = replay(policy, place, base, trace, shapes, case.params.hours, progress=progress)
        progress(f"{base.name} {policy}: done in {run.seconds:.0f} s")
        runs.append(run)
    serving_rate, bg_rate = rates(case.params, case.gpus, shapes)
    return {
        "cluster": base.name,
        "gpus": sum(len(n.gpus) for n in base.nodes),
        "nodes": len(base.nodes),
        "seed": seed,
        "case": asdict(case),
        "serving_per_h": serving_rate,
        "background_per_h": bg_rate,
        "shape_gpus": {s: deployment_gpus(spec) for s, spec in shapes.items()},
        "offered": {
            "serving": sum(1 for j in trace if j.kind == "serving"),
            "background": sum(1 for j in trace if j.kind == "background" and j.arrive_h >= 0),
            "warmup": sum(1 for j in trace if j.arrive_h < 0),
        },
        "runs": [asdict(r) for r in runs],
    }


# ---- the command ------------------------------------------------------------------------------------

# The 10,000-GPU cluster's deployments live 3.5x longer than the 1,024-GPU one's: the same loads with 1-hour
# lifetimes would offer ~2,100 deployments a day there, more solves (placer's and the exhaustive
# enumerator's, ~0.3-0.5 s each at that size) than a 15-minute run holds; this way it is ~600.
FULL: tuple[Case, ...] = (
    Case(1024, 7, TraceParams(serving_median_h=1.0), time_limit_s=5.0),
    Case(10_000, 1, TraceParams(serving_median_h=3.5), time_limit_s=5.0),
)
QUICK: tuple[Case, ...] = (
    Case(
        128,
        0,
        TraceParams(
            hours=6.0,
            serving_median_h=0.5,
            shapes=(("llama-70b-disagg", 0.5), ("aggregated-tp8", 0.3), ("tp16-multinode", 0.2)),
        ),
        time_limit_s=5.0,
    ),
)


def main(argv: list[str] | None = None) -> None:
    """Run the chosen cases; the report and the plot go to files, progress and a summary to stderr."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a 128-GPU cluster, 6 hours (seconds)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sizes", default="", help="comma-separated GPU counts to keep (default: all)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--out-dir", type=Path, default=None, help="default: bench/ (full), /tmp/churn-quick/ (quick)")
    ap.add_argument("--raw", type=Path, default=None, help="also write every decision and sample as JSON here")
    args = ap.parse_args(argv)
    out = args.out_dir or (Path(tempfile.gettempdir()) / "churn-quick" if args.quick else ROOT / "bench")
    out.mkdir(parents=True, exist_ok=True)
    keep = {int(s) for s in args.sizes.split(",") if s}
    policies = tuple(p for p in args.policies.split(",") if p)
    unknown = sorted(set(policies) - set(POLICIES))
    if unknown:
        ap.error(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
    cases = [c for c in (QUICK if args.quick else FULL) if not keep or c.gpus in keep]
    t0, cpu0 = time.perf_counter(), time.process_time()
    load_start = os.getloadavg()[0]
    version = placer_version()  # before the run: the code imported is the code on disk now
    results = []
    for case in cases:
        case = Case(case.gpus, case.cluster_seed, case.params, case.time_limit_s, policies)
        results.append(run_case(case, args.seed, progress=lambda m: print(m, file=sys.stderr, flush=True)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    cmd = "python bench/churn.py" + (" --quick" if args.quick else "") + (f" --seed {args.seed}" if args.seed else "")
    if args.sizes:
        cmd += f" --sizes {args.sizes}"
    if args.policies != ",".join(POLICIES):
        cmd += f" --policies {args.policies}"
    if args.raw:
        args.raw.write_text(json.dumps(results, sort_keys=True) + "\n")
    (out / "CHURN.md").write_text(report(results, cmd, wall, (load_start, os.getloadavg()[0]), version, cpu))
    plot(results, out / "churn.png")
    for r in results:
        for run in r["runs"]:
            print(summary_line(r["cluster"], run), file=sys.stderr)
    print(f"wrote {out / 'CHURN.md'}, {out / 'churn.png'} in {wall:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
