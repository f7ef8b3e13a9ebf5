"""What other policies would have done on the same cluster (count-only, Kueue-style best fit, capped
exhaustive), costed by the same checker, beside placer's own outcome: the "compared with what?" of explain."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from placer.check import verify
from placer.model.levels import LEVEL_RANK
from placer.model.spec import ServingTopology
from placer.topology.graph import Topology


@dataclass(frozen=True)
class PolicyView:
    """One placement policy's result on the same cluster: placer's or a baseline's."""

    name: str
    title: str
    outcome: str  # placed | no-fit | gave-up
    note: str
    replicas: int
    allreduce_us_per_pass: dict[str, float]  # pool -> mean over its instances
    kv_transfer_us: float | None  # worst replica
    kv_bandwidth_gbps: float | None  # worst replica
    units: int | None
    violations: list[str]
    vs_placer: float | None  # units / placer's units
    preferred_misses: int = 0  # TP groups broader than their pool's preferred level (placer minimises these first)


def policy_view(name: str, title: str, outcome: str, note: str, report: verify.Report) -> PolicyView:
    by_pool: dict[str, list[float]] = {}
    for c in report.instances:
        by_pool.setdefault(c.pool, []).append(c.allreduce_us)
    kv = [r for r in report.replicas if r.kv_path is not None]
    return PolicyView(
        name=name,
        title=title,
        outcome=outcome,
        note=note,
        replicas=len(report.replicas),
        allreduce_us_per_pass={p: sum(v) / len(v) for p, v in sorted(by_pool.items())},
        kv_transfer_us=max((r.kv_us for r in kv), default=None),
        kv_bandwidth_gbps=min((r.kv_bandwidth_gbps or 0.0 for r in kv), default=None),
        units=report.total_units,
        violations=list(report.violations),
        vs_placer=None,
    )


def preferred_misses(spec: ServingTopology, topo: Topology, report: verify.Report) -> int:
    """TP groups placed broader than their pool's preferred level: the solver's second objective, before
    cost, so a policy that ignores preferences may be cheaper without being better."""
    out = 0
    for c in report.instances:
        preferred = spec.pools[c.pool].placement.preferred
        if preferred is not None and LEVEL_RANK[topo.domains[c.domain].level] > LEVEL_RANK[preferred]:
            out += 1
    return out


def _baseline_view(spec: ServingTopology, topo: Topology, result: Any, placer_units: int) -> PolicyView:
    """A baseline's result (placer.baselines.BaselineResult) in the same terms as placer's."""
    if result.placement is None or result.report is None:
        return PolicyView(result.name, result.title, result.outcome, result.note, 0, {}, None, None, None, [], None)
    view = policy_view(result.name, result.title, result.outcome, result.note, result.report)
    ratio = view.units / placer_units if placer_units and view.units is not None else None
    misses = preferred_misses(spec, topo, result.report)
    return PolicyView(**(asdict(view) | {"vs_placer": ratio, "preferred_misses": misses}))
