"""A bundled spec solved on a bundled cluster and checked, as the CLI would: what the emit tests start from."""

from __future__ import annotations

from pathlib import Path

from placer.model.load import load_cluster, load_spec
from placer.pipeline import verify_placement
from placer.solver.problem import build_problem
from placer.solver.solve import SolveOptions, solve
from placer.topology.build import build_topology

ROOT = Path(__file__).resolve().parent.parent


def solved_fixture(spec: str, cluster: str = "dgx-h100-1024", time_limit_s: float = 10):
    """(spec, topology, placement, report) of ``fixtures/specs/<spec>.yaml`` on ``fixtures/clusters/<cluster>``."""
    served = load_spec(ROOT / "fixtures" / "specs" / f"{spec}.yaml")
    topo = build_topology(load_cluster(ROOT / "fixtures" / "clusters" / f"{cluster}.yaml"))
    placement = solve(build_problem(served, topo), SolveOptions(time_limit_s=time_limit_s))
    return served, topo, placement, verify_placement(served, topo, placement)
