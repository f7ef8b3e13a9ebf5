"""The batch as a person reads it: one row per deployment (placed or not, and why), then the totals."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from placer.solver.scarcity import SCARCITY_NOTE


def at_scarcity_prices(placement) -> bool:
    """Whether a deployment of a batch was solved at non-zero scarcity prices (placer.solver.scarcity):
    then its solve was optimal at the prices, not proven alone."""
    return any(n.startswith(SCARCITY_NOTE) for n in placement.stats.notes)


def fleet_table(res, wall_s: float, apart: tuple[str, int] | None = None) -> Group:
    """``res`` is a pipeline.FleetSolveResult."""
    fleet = res.fleet
    table = Table(title="placer: batch", title_justify="left", show_edge=False, pad_edge=False)
    for col, justify in (
        ("deployment", "left"),
        ("priority", "right"),
        ("replicas", "right"),
        ("GPUs", "right"),
        ("cost units", "right"),
        ("result", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for p in fleet.placed:
        spec, pl = p.deployment.spec, p.placement
        gpus = sum(len(pod.gpus) for r in pl.replicas for i in r.instances for pod in i.pods)
        kept = p.deployment.kept
        what = pl.stats.status + (f", {len(kept.instances)} instance(s) kept in place" if kept else "")
        if at_scarcity_prices(pl):
            what += ", at scarcity prices"
        table.add_row(
            p.deployment.key,
            str(p.deployment.priority),
            f"{len(pl.replicas)}/{spec.replicas}",
            str(gpus),
            str(pl.stats.objective),
            what,
        )
    for u in fleet.unplaced:
        spec = u.deployment.spec
        table.add_row(
            u.deployment.key,
            str(u.deployment.priority),
            f"0/{spec.replicas}",
            "0",
            "-",
            "not placed" + ("" if u.proven else " (none found in time)"),
        )
    parts: list = [table]
    for u in fleet.unplaced:
        parts.append(Text(f"{u.deployment.key} ({u.deployment.source}) not placed:"))
        parts += [Text(f"  - {r}") for r in u.reasons]
    gap = "" if fleet.gap is None else f", lower bound {fleet.bound} (gap {fleet.gap:.2%})"
    parts.append(
        Text(
            f"placed {len(fleet.placed)}/{len(fleet.placed) + len(fleet.unplaced)} deployments, "
            f"{len(res.manifests)} objects{'' if apart is None else f' (and {apart[1]} in {apart[0]})'}; "
            f"cost {fleet.cost} units{gap}; {wall_s:.2f}s"
        )
    )
    parts += [Text(f"note: {n}") for n in [*res.notes, *fleet.notes]]
    return Group(*parts)
