"""The schedulers placer is measured against, run on the same inputs and judged by the same checker.

Each baseline is a small strategy module (PyVRP style) that places replica after replica, each
all-or-nothing, on ``Topology`` directly; this module runs it, turns its pods into a ``Placement`` in the
solver's form, and hands that to ``placer.check.verify.check`` for its violations and its cost under the shared
cost model (placer.topology.cost). So a baseline's cost and placer's are comparable exactly, and what a baseline
breaks (a transfer floor, a packing level) is said in the checker's words.

============== ================================================= ==========================================
name           what it is                                        module
============== ================================================= ==========================================
count-spread   kube-scheduler, ``nvidia.com/gpu: N``, spread     :mod:`placer.baselines.count_only`
count-binpack  kube-scheduler, ``nvidia.com/gpu: N``, bin-pack   :mod:`placer.baselines.count_only`
kueue-bestfit  Kueue TAS BestFit, one TP group at a time         :mod:`placer.baselines.kueue_bestfit`
exhaustive     every GPU combination per domain, capped          :mod:`placer.baselines.exhaustive`
============== ================================================= ==========================================

Nothing here prints; results are values. Baselines are deterministic: ties go to node name or canonical
domain order.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from placer.baselines import count_only, exhaustive, kueue_bestfit
from placer.baselines._common import Context, PlaceReplica, place_replicas
from placer.check.verify import Report, check
from placer.model.placement import Placement, SolveStats
from placer.model.spec import ServingTopology
from placer.topology.graph import Topology

DEFAULT_MAX_COMBINATIONS = 2_000_000


@dataclass(frozen=True)
class BaselineResult:
    """One baseline's answer.

    Attributes
    ----------
    name : str
        Stable id: ``count-spread``, ``count-binpack``, ``kueue-bestfit`` or ``exhaustive``.
    title : str
        For people, e.g. ``kube-scheduler, count-only (least-allocated)``.
    outcome : str
        ``placed`` (at least ``minReplicas`` replicas), ``no-fit`` (fewer), or ``gave-up`` (the exhaustive
        enumerator would pass its cap).
    placement : Placement or None
        When placed: the solver's form, ``stats.solver`` = ``name``, ``stats.status`` ``feasible`` when the
        checker finds nothing wrong and ``infeasible`` when it does, ``stats.objective`` the checker's cost.
    report : Report or None
        When placed: ``placer.check.verify.check(spec, topo, placement)``, its violations and its cost.
    note : str
        One line: why no-fit or gave-up, or what it did.
    seconds : float
        Time the baseline took to place (the check excluded).
    """

    name: str
    title: str
    outcome: str
    placement: Placement | None
    report: Report | None
    note: str
    seconds: float


_TITLES: dict[str, str] = {
    "count-spread": "kube-scheduler, count-only (least-allocated)",
    "count-binpack": "kube-scheduler, count-only (most-allocated)",
    "kueue-bestfit": "Kueue TAS BestFit, one TP group at a time",
    "exhaustive": "exhaustive GPU combinations per domain (Dynamo write-up)",
}
_STRATEGIES: dict[str, tuple[PlaceReplica, str]] = {
    "count-spread": (count_only.spread, "pods on the least-allocated nodes, lowest free GPU indices"),
    "count-binpack": (count_only.binpack, "pods on the most-allocated nodes, lowest free GPU indices"),
    "kueue-bestfit": (kueue_bestfit.place, "each TP group in the tightest domain that holds it"),
}

BASELINES: tuple[str, ...] = ("count-spread", "count-binpack", "kueue-bestfit", "exhaustive")
"""Every baseline, in display order."""


def _placed_note(spec: ServingTopology, n: int, stopped: str | None, report: Report, what: str) -> str:
    words = f"placed {n} of {spec.replicas} replica(s), {what}"
    if stopped is not None:
        words += f"; {stopped}"
    if report.violations:
        words += f"; {len(report.violations)} violation(s), first: {report.violations[0]}"
    return words


def run_baseline(
    name: str, spec: ServingTopology, topo: Topology, *, max_combinations: int = DEFAULT_MAX_COMBINATIONS
) -> BaselineResult:
    """Run one baseline and check its placement.

    Parameters
    ----------
    name : str
        One of :data:`BASELINES`.
    spec, topo
        The same inputs placer solves.
    max_combinations : int
        The exhaustive enumerator's cap; past it the outcome is ``gave-up`` (the others ignore it).
    """
    if name not in _TITLES:
        raise ValueError(f"unknown baseline {name!r}; choose one of {', '.join(BASELINES)}")
    title = _TITLES[name]
    t0 = time.perf_counter()
    ctx = Context.build(spec, topo)
    enum: exhaustive.Enumerator | None = None
    if name == "exhaustive":
        total, words = exhaustive.count_combinations(ctx)
        if total > max_combinations:
            note = f"gave up: {words}; cap {max_combinations:,}"
            return BaselineResult(name, title, "gave-up", None, None, note, time.perf_counter() - t0)
        enum = exhaustive.Enumerator(ctx, max_combinations)
        strategy: PlaceReplica = enum
    else:
        strategy, what = _STRATEGIES[name]
    try:
        replicas, stopped = place_replicas(ctx, strategy)
    except exhaustive.GaveUp as exc:
        return BaselineResult(name, title, "gave-up", None, None, f"gave up: {exc}", time.perf_counter() - t0)
    if enum is not None:
        what = f"costed {enum.evaluated:,} GPU combinations of at most {exhaustive.big(total)} counted up front"
    seconds = time.perf_counter() - t0
    if len(replicas) < spec.replicas_floor:
        note = f"placed {len(replicas)} of {spec.replicas} replica(s), minReplicas {spec.replicas_floor}: {stopped}"
        return BaselineResult(name, title, "no-fit", None, None, note, seconds)
    stats = SolveStats(status="feasible", solver=name, seconds={"baseline": seconds})
    placement = Placement(spec.metadata.name, spec.metadata.namespace, topo.name, tuple(replicas), stats)
    t1 = time.perf_counter()
    report = check(spec, topo, placement)
    stats.seconds["verify"] = time.perf_counter() - t1
    stats.objective = report.total_units
    if not report.ok:
        stats.status = "infeasible"
    note = _placed_note(spec, len(replicas), stopped, report, what)
    stats.notes.append(note)
    return BaselineResult(name, title, "placed", placement, report, note, seconds)


def run_all(spec: ServingTopology, topo: Topology, names: Sequence[str] = BASELINES) -> list[BaselineResult]:
    """Every named baseline, in the order given."""
    return [run_baseline(name, spec, topo) for name in names]
