"""The human view of an explanation: rich renderables, returned and never printed here (the CLI decides
whether they go to stdout or stderr). Times in µs below a millisecond, ms above; bandwidth in GB/s per
link and for the whole path; domains by their ids (``leaf/su1``), link classes in words."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from placer.explain.counterfactuals import PolicyView
from placer.explain.explanation import Explanation
from placer.explain.links import LinkView
from placer.model.levels import LEVEL_WORDS


def fmt_us(us: float | None) -> str:
    if us is None:
        return "-"
    if us < 1000:
        return f"{us:.1f} µs"
    if us < 1_000_000:
        return f"{us / 1000:.2f} ms"
    return f"{us / 1e6:.2f} s"


def fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def gpu_ranges(gpus: list[int]) -> str:
    """[0,1,2,3,6] -> '0-3,6'."""
    out: list[str] = []
    start = prev = None
    for g in sorted(gpus):
        if start is None:
            start = prev = g
        elif g == prev + 1:  # type: ignore[operator]
            prev = g
        else:
            out.append(f"{start}-{prev}" if start != prev else f"{start}")
            start = prev = g
    if start is not None:
        out.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ",".join(out)


def _link_name(link: LinkView | None) -> str:
    if link is None:
        return "one GPU (no all-reduce)"
    return link.label + (f" (measured: {escape(link.measured)})" if link.measured else "")


def render(ex: Explanation) -> RenderableType:
    """The whole explanation, top to bottom: verdict, TP groups, KV paths, routers, cost, SLOs, baselines."""
    parts: list[RenderableType] = [_header(ex)]
    if ex.violations:
        parts.append(
            Panel(
                "\n".join(f"• {escape(v)}" for v in ex.violations),
                title="[bold red]the checker found broken rules[/]",
                border_style="red",
            )
        )
    if ex.instances:
        parts.append(_instances(ex))
    if any(i.nccl for i in ex.instances):
        parts.append(_nccl(ex))
    if ex.transfers:
        parts.append(_transfers(ex))
    if ex.routers:
        parts.append(_routers(ex))
    if ex.terms:
        parts.append(_cost(ex))
    if ex.slos:
        parts.append(_slos(ex))
    if len(ex.policies) > 1:
        parts.append(_policies(ex))
    return Group(*parts)


def _header(ex: Explanation) -> RenderableType:
    gap = "" if ex.gap in (None, 0.0) else f", gap {ex.gap:.2%}"
    # A record written by plan, a batch at scarcity prices or a solve stopped early may carry no bound.
    bound = "no bound" if ex.bound is None else f"bound {ex.bound}"
    verdict = {
        "optimal": "[green]optimal[/] (proven: no placement costs less)",
        "feasible": f"[yellow]feasible[/] (best found; {bound}{gap})",
    }.get(ex.status, ex.status)
    checker = "[green]passed[/]" if not ex.violations else f"[red]{len(ex.violations)} violation(s)[/]"
    lines = [
        f"[bold]{ex.deployment}[/] (namespace {ex.namespace}) on cluster [bold]{ex.cluster}[/]",
        f"solver: {verdict}; {_objective(ex, bound)}",
        f"independent checker: {checker}",
    ]
    lines += [f"note: {escape(n)}" for n in ex.notes]
    return Panel("\n".join(lines), title="placement", border_style="cyan")


def _objective(ex: Explanation, bound: str) -> str:
    """The solver's objective as recorded (the cost table below prices the placement on the cluster given)."""
    if ex.objective is None:
        return f"no objective recorded ({bound})"
    return f"objective {ex.objective} units ({bound}) = {ex.objective / 100:,.1f} weighted µs"


def _ring_gbps(i) -> str:
    """The link's GB/s, or rails x link = the ring's where rings run side by side across nodes."""
    if i.link is None:
        return "-"
    if i.ring_lanes <= 1:
        return f"{i.link.bandwidth_gbps:g}"
    product = i.ring_lanes * i.link.bandwidth_gbps
    capped = "" if product <= i.ring_gbps else f" (capped inside a node at {i.ring_gbps:g})"
    return f"{i.ring_lanes} × {i.link.bandwidth_gbps:g} = {min(product, i.ring_gbps):g}{capped}"


def _instances(ex: Explanation) -> RenderableType:
    t = Table(title="tensor-parallel groups", title_justify="left", show_lines=False)
    for col in ("replica", "instance", "GPUs (node: indices)", "narrowest domain", "bottleneck link"):
        t.add_column(col)
    t.add_column("GB/s", justify="right")
    t.add_column("all-reduce / call", justify="right")
    t.add_column("per forward pass", justify="right")
    t.add_column("preferred")
    for i in ex.instances:
        gpus = "\n".join(f"{p['node']}: {gpu_ranges(p['gpus'])}" for p in i.pods)
        shape = f"TP{i.tensor_parallel}" + (f"×PP{i.pipeline_parallel}" if i.pipeline_parallel > 1 else "")
        pref = (
            "-" if i.preferred is None else ("[green]yes[/]" if i.preferred_met else f"[yellow]no ({i.preferred})[/]")
        )
        t.add_row(
            str(i.replica),
            f"{i.pool}-{i.index} {shape}",
            gpus,
            i.domain,
            _link_name(i.link),
            _ring_gbps(i),
            fmt_us(i.allreduce_us_per_call),
            fmt_us(i.allreduce_us_per_pass),
            pref,
        )
    msg = {i.pool: i.message_bytes for i in ex.instances}
    t.caption = "all-reduce message per call: " + ", ".join(f"{p} {fmt_bytes(b)}" for p, b in sorted(msg.items()))
    return t


def _nccl(ex: Explanation) -> RenderableType:
    """NCCL settings the --target outputs put in each engine's env, grouped where instances share them."""
    groups: dict[tuple, list[str]] = {}
    for i in ex.instances:
        key = tuple((s["name"], s["value"], s["reason"]) for s in i.nccl)
        groups.setdefault(key, []).append(f"r{i.replica} {i.pool}-{i.index}")
    t = Table(title="NCCL settings (set by --target kai|volcano|kueue|grove|lws|dra, or --nccl)", title_justify="left")
    for col in ("instances", "variable", "value", "why"):
        t.add_column(col)
    for key, who in groups.items():
        names = ", ".join(who) if len(who) <= 4 else f"{', '.join(who[:3])} … ({len(who)} instances)"
        for j, (name, value, reason) in enumerate(key):
            t.add_row(names if j == 0 else "", name, escape(value), escape(reason))
    return t


def _transfers(ex: Explanation) -> RenderableType:
    t = Table(title="KV-cache transfer, worst prefill → decode pair per replica", title_justify="left")
    for col in ("replica", "pair", "through", "bottleneck link"):
        t.add_column(col)
    t.add_column("path bandwidth", justify="right")
    t.add_column("KV per prompt", justify="right")
    t.add_column("transfer", justify="right")
    t.add_column("floor")
    for x in ex.transfers:
        floor = "-" if x.floor_gbps is None else ("[green]met[/]" if x.meets_floor else "[red]BROKEN[/]")
        floor += "" if x.floor_gbps is None else f" (≥ {x.floor_gbps:g} GB/s)"
        t.add_row(
            str(x.replica),
            f"{x.source} → {x.target}",
            x.route_domain,
            _link_name(x.link),
            f"{x.lanes} × {x.link.bandwidth_gbps:g} = {x.bandwidth_gbps:g} GB/s",
            f"{fmt_bytes(x.kv_bytes)} ({x.prompt_tokens} tokens)",
            fmt_us(x.transfer_us),
            floor,
        )
    return t


def _routers(ex: Explanation) -> RenderableType:
    t = Table(title="router", title_justify="left")
    for col in ("replica", "node", "shares with its pool", "rule"):
        t.add_column(col)
    for r in ex.routers:
        rule = "anywhere" if r.limit is None else f"within {LEVEL_WORDS[r.limit]} of every {r.near_pool} instance"
        verdict = "[green]ok[/]" if r.ok else "[red]BROKEN[/]"
        t.add_row(str(r.replica), r.node, r.within, f"{rule}: {verdict}")
    return t


TERM_WORDS = {
    "allReduce": "all-reduce time per forward pass (µs, summed over TP groups)",
    "kvTransfer": "KV transfer per typical prompt (µs, worst pair per replica)",
    "queueDepth": "queued requests on the GPUs used",
    "cacheMiss": "KV-cache misses on the GPUs used",
}


def _cost(ex: Explanation) -> RenderableType:
    t = Table(title="objective: what the solver minimised", title_justify="left")
    t.add_column("term")
    t.add_column("weight", justify="right")
    t.add_column("units", justify="right")
    t.add_column("share", justify="right")
    for term in ex.terms:
        words = TERM_WORDS[term.name] + (f" ({term.note})" if term.note else "")
        t.add_row(words, f"{term.weight:g}", f"{term.units:,}", f"{term.share:.1%}")
    t.add_row("[bold]total[/]", "", f"[bold]{ex.total_units:,}[/]", "100%" if ex.total_units else "-")
    t.caption = "1 unit = 0.01 weighted µs; each term rounded on its own, exactly as the solver sums them"
    return t


def _slos(ex: Explanation) -> RenderableType:
    t = Table(title="SLO targets: the communication share of each budget", title_justify="left")
    for col in ("target", "budget", "communication", "share", "verdict", "counted"):
        t.add_column(col)
    for s in ex.slos:
        verdict = "[green]fits[/]" if s.ok else "[red]exceeds the budget on its own[/]"
        t.add_row(
            s.name.upper(), f"{s.target_ms:g} ms", f"{s.communication_ms:.2f} ms", f"{s.share:.1%}", verdict, s.what
        )
    t.caption = "placer models links, not compute: the rest of each budget is left for the GPUs' own work"
    return t


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return ""
    r = value / base
    return "" if abs(r - 1) < 0.005 else f" ({r:.1f}×)"


def _policies(ex: Explanation) -> RenderableType:
    placer = ex.policies[0]
    pools = sorted(placer.allreduce_us_per_pass)
    t = Table(title="counterfactual: the same request under other schedulers", title_justify="left")
    t.add_column("policy")
    t.add_column("outcome")
    for p in pools:
        t.add_column(f"{p} all-reduce / pass", justify="right")
    t.add_column("KV transfer", justify="right")
    t.add_column("cost units", justify="right", no_wrap=True)
    t.add_column("hard rules broken", max_width=60)
    for pol in ex.policies:
        t.add_row(*_policy_row(pol, placer, pools))
    legend = "; ".join(f"{p.name} = {p.title}" for p in ex.policies[1:])
    t.caption = (
        "same cluster, same cost model, same checker; (n×) = times placer's figure; "
        f"* = breaks a hard rule, so a lower cost proves nothing; placer first keeps TP groups within their "
        f"preferred level, then minimises cost.\n{legend}"
    )
    return t


def _policy_row(pol: PolicyView, placer: PolicyView, pools: list[str]) -> list[str]:
    outcome = pol.outcome if pol.outcome != "placed" else f"placed {pol.replicas} replica(s)"
    if pol.preferred_misses:
        outcome += f", {pol.preferred_misses} outside preferred level"
    if pol.outcome != "placed":
        outcome += f": {escape(pol.note)}"
    cells = [pol.name, outcome]
    for p in pools:
        v = pol.allreduce_us_per_pass.get(p)
        cells.append("-" if v is None else fmt_us(v) + _ratio(v, placer.allreduce_us_per_pass.get(p)))
    cells.append(fmt_us(pol.kv_transfer_us) + _ratio(pol.kv_transfer_us, placer.kv_transfer_us))
    if pol.units is None:
        cells.append("-")
    elif pol.violations:
        cells.append(f"{pol.units:,} *")
    else:
        cells.append(f"{pol.units:,}" + _ratio(pol.units, placer.units))
    first = pol.violations[0] if pol.violations else ""
    more = f" (+{len(pol.violations) - 1} more)" if len(pol.violations) > 1 else ""
    cells.append(f"[red]{escape(first)}[/]{more}" if pol.violations else "[green]none[/]")
    return cells


def render_conflicts(message: str, conflicts: list) -> RenderableType:
    """Why nothing fits: each conflicting rule with its numbers and the relaxation a solve confirmed."""
    t = Table(title=f"[bold red]does not fit[/]: {escape(message)}", title_justify="left", show_lines=True)
    t.add_column("rule")
    t.add_column("why")
    t.add_column("what would make it fit")
    for c in conflicts:
        if isinstance(c, str):
            t.add_row("", escape(c), "")
        else:
            t.add_row(escape(c.rule), escape(c.message), escape(c.relax or "-"))
    return t
