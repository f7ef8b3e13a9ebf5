"""Phase 3 of the churn simulation (bench/churn.py): the runs (plain data, as the raw JSON holds them)
summarized per policy, written up as bench/CHURN.md and plotted as bench/churn.png."""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Sequence
from pathlib import Path

from bench.churn_trace import WARMUP_H, lognormal_mean

ROOT = Path(__file__).resolve().parent.parent


def pct(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0-100)."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def mean(values: Sequence[float]) -> float | None:
    """None for no values, so that an empty column shows "-" rather than failing."""
    return sum(values) / len(values) if values else None


def _us(v: float | None) -> str:
    return "-" if v is None else (f"{v:.0f} µs" if v < 1000 else f"{v / 1000:.2f} ms")


def _s(v: float | None) -> str:
    return "-" if v is None else (f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s")


def _n(v: float | None, fmt: str = ".0f") -> str:
    return "-" if v is None else format(v, fmt)


RULES: tuple[tuple[str, str], ...] = (
    ("floor", "floor is"),
    ("max level", "limit is"),
    ("router", "router on"),
    ("spread", "spread across"),
    ("packing", "must pack within"),
)


def rule_of(violation: str) -> str:
    """The hard rule a checker sentence is about (placer.check.verify words them)."""
    return next((name for name, words in RULES if words in violation), "other")


def summarize(run: dict) -> dict:
    """The table's figures for one policy's run (a PolicyRun as plain data)."""
    ds = run["decisions"]
    ok = [d for d in ds if d["admitted"]]
    broke = [d for d in ok if d["violations"]]
    floor = [d for d in ok if any("floor is" in v for v in d["violations"])]
    ar = [x for d in ok for x in d["allreduce_us"]]
    kv = [x for d in ok for x in d["kv_us"]]
    lat = [d["seconds"] for d in ds]
    stranded = [s["stranded"] for s in run["samples"] if s["t_h"] > 0]
    return {
        "policy": run["policy"],
        "offered": len(ds),
        "admitted": len(ok),
        "broke": len(broke),
        "floor": len(floor),
        "rules": {
            name: n
            for name in [*(r for r, _ in RULES), "other"]
            if (n := sum(1 for d in broke if any(rule_of(v) == name for v in d["violations"])))
        },
        "violations": sum(len(d["violations"]) for d in ok),
        "gpu_hours": sum(d["gpu_hours"] for d in ok),
        "ar_mean": mean(ar),
        "ar_p99": pct(ar, 99),
        "kv_mean": mean(kv),
        "kv_p99": pct(kv, 99),
        "stranded_mean": mean(stranded),
        "stranded_max": max(stranded, default=None),
        "lat_mean": mean(lat),
        "lat_p99": pct(lat, 99),
        "lat_max": max(lat, default=None),
        "lat_admitted_mean": mean([d["seconds"] for d in ok]),
        "lat_rejected_mean": mean([d["seconds"] for d in ds if not d["admitted"]]),
        "timeouts": sum(1 for d in ds if d["outcome"] in ("timeout", "gave-up")),
        "not_optimal": sum(1 for d in ok if d["outcome"] == "feasible"),
        "bg": f"{run['background_placed']}/{run['background_offered']}",
        "bg_gpu_hours": run["background_gpu_hours"],
    }


def report(
    results: list[dict],
    cmd: str,
    wall_s: float,
    load: tuple[float, float] | None = None,
    version: str = "",
    cpu_s: float | None = None,
) -> str:
    """bench/CHURN.md: how the run was made, the trace, then the results, per shape and per solve."""
    p = results[0]["case"]["params"]
    lines = [
        *_header(cmd, wall_s, load, version, cpu_s),
        *_trace_section(results, p),
        *_results_section(results),
        *_per_shape_section(results, p),
        *_solves_section(results),
    ]
    return "\n".join(lines) + "\n"


def _header(
    cmd: str, wall_s: float, load: tuple[float, float] | None, version: str, cpu_s: float | None = None
) -> list[str]:
    """The machine and the command, so that a reader can judge the latencies and rerun it."""
    cpu = "" if cpu_s is None else f", {cpu_s / 60:.1f} min of CPU"
    return [
        "# Churn simulation",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}, "
        f"OR-Tools {_ortools()}{', ' + version if version else ''}. Reproduce: `{cmd}` ({wall_s / 60:.1f} min "
        f"for the whole run{cpu}). The script and its rules are described in `bench/churn.py`; `bench/churn.png` "
        "plots admitted deployments and stranded GPUs over time."
        + (
            f" The machine is shared: 1-minute load average {load[0]:.1f} at the start, {load[1]:.1f} at the end "
            "(latencies are inflated by whatever else ran)."
            if load
            else ""
        ),
        "",
    ]


def _trace_section(results: list[dict], p: dict) -> list[str]:
    """What was offered, from the first cluster's trace parameters, and one row per cluster."""
    lines = [
        "## Trace",
        "",
        f"- {p['hours']:g} hours of serving arrivals; a background of small jobs starting {WARMUP_H:g} h earlier. "
        f"Poisson arrivals with a daily cycle: rate = mean × (1 + {p['amplitude']:g} cos(2π (t − "
        f"{p['peak_hour']:g} h) / 24 h)), so the rate peaks at hour {p['peak_hour']:g}.",
        f"- Serving lifetimes lognormal, σ {p['serving_sigma']:g}, median per cluster below (mean "
        f"{lognormal_mean(1.0, p['serving_sigma']):.2f} × the median); background lifetimes "
        f"lognormal, median {p['background_median_h']:g} h, σ {p['background_sigma']:g} (mean "
        f"{lognormal_mean(p['background_median_h'], p['background_sigma']):.1f} h).",
        f"- Rates from target loads: serving deployments would keep {p['serving_load']:.0%} of the GPUs busy on "
        f"average if all were admitted, background jobs {p['background_load']:.0%}; the daily peak offers "
        f"about {1 + p['amplitude']:g}× that.",
        "- Serving shapes (weight, GPUs): "
        + ", ".join(f"{s} ({w:g}, {results[0]['shape_gpus'][s]})" for s, w in p["shapes"])
        + ". Background: 1/2/4/8 GPUs weighted 4/3/2/1 (placer.topology.generate's mix), 2 CPUs and 16 GiB per GPU, "
        "placed in every policy's world by one rule: count-only bin-pack on one node (fewest free GPUs that "
        "fit, first by name, lowest GPU indices).",
        "- A serving deployment that does not fit is rejected, not queued. A baseline placement that breaks "
        "a hard rule is admitted (that scheduler would run it) and counted in 'broke a rule'. Every "
        "placement is checked by `placer.check.verify.check` on the state it was placed on.",
        "- Clusters: generated DGX H100 (`placer.topology.generate`, 8 GPUs per node, 4 nodes per rack, 32 per leaf, "
        "2:1 spine), empty at the start (busy_fraction 0), telemetry on a fifth of the nodes.",
        "",
        "| cluster | seed | serving lifetime median | serving / h (mean) | background / h (mean) | serving offered "
        "| background offered (+ warm-up) | placer time limit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['cluster']} | {r['seed']} | {r['case']['params']['serving_median_h']:g} h "
            f"| {r['serving_per_h']:.1f} | {r['background_per_h']:.0f} "
            f"| {r['offered']['serving']} | {r['offered']['background']} (+ {r['offered']['warmup']}) "
            f"| {r['case']['time_limit_s']:g} s |"
        )
    return lines


def _results_section(results: list[dict]) -> list[str]:
    """The main table: one row per cluster and policy."""
    lines = [
        "",
        "## Results",
        "",
        "All-reduce: predicted time per forward pass of each admitted TP group (mean / p99 over TP groups). "
        "KV transfer: worst prefill → decode pair per admitted replica, one typical prompt. Stranded: free "
        "GPUs no TP group of any shape in the trace could use (bench/run.py's `stranded_gpus`), sampled every "
        "15 min (mean / max over the day). Latency: one arrival's decision (placer: build + solve, and on a "
        "rejection, unless explain=False, its explanation; baselines: their run and its check), mean / p99 / max "
        "over all serving arrivals.",
        "",
        "| cluster | policy | admitted / offered | admitted keeping every rule | broke a rule: which (deployments) "
        "| GPU-hours served | all-reduce / pass mean / p99 | KV transfer mean / p99 | stranded GPUs mean / max "
        "| background placed | latency mean / p99 / max |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for run in r["runs"]:
            s = summarize(run)
            lines.append(
                f"| {r['cluster']} | {s['policy']} | {s['admitted']} / {s['offered']} | {s['admitted'] - s['broke']} "
                f"| {s['broke']}"
                + (": " + ", ".join(f"{k} {v}" for k, v in s["rules"].items()) if s["rules"] else "")
                + " "
                f"| {s['gpu_hours']:,.0f} | {_us(s['ar_mean'])} / {_us(s['ar_p99'])} "
                f"| {_us(s['kv_mean'])} / {_us(s['kv_p99'])} | {_n(s['stranded_mean'])} / {_n(s['stranded_max'])} "
                f"| {s['bg']} | {_s(s['lat_mean'])} / {_s(s['lat_p99'])} / {_s(s['lat_max'])} |"
            )
    return lines


def _per_shape_section(results: list[dict], p: dict) -> list[str]:
    """One table per cluster, a column per shape (the first cluster's shapes, as the trace section lists)."""
    lines = [
        "",
        "## Per shape",
        "",
        "Admitted / offered, admitted with a broken rule, and mean all-reduce per forward pass per TP group.",
        "",
    ]
    for r in results:
        names = [s for s, _ in p["shapes"]]
        lines += [f"**{r['cluster']}**", "", "| policy | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for run in r["runs"]:
            cells = []
            for shape in names:
                ds = [d for d in run["decisions"] if d["shape"] == shape]
                ok = [d for d in ds if d["admitted"]]
                ar = mean([x for d in ok for x in d["allreduce_us"]])
                broke = sum(1 for d in ok if d["violations"])
                cells.append(f"{len(ok)}/{len(ds)}, broke {broke}, {_us(ar)}")
            lines.append(f"| {run['policy']} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _solves_section(results: list[dict]) -> list[str]:
    """How each policy's decisions ended (placer: proven, cut short or infeasible) and what they took."""
    lines = ["## Rejections and placer's solves", ""]
    for r in results:
        for run in r["runs"]:
            s = summarize(run)
            outcomes: dict[str, int] = {}
            for d in run["decisions"]:
                outcomes[d["outcome"]] = outcomes.get(d["outcome"], 0) + 1
            words = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            lines.append(
                f"- {r['cluster']} {run['policy']}: {words}; decision latency admitted {_s(s['lat_admitted_mean'])}, "
                f"rejected {_s(s['lat_rejected_mean'])} (mean); replay {run['seconds']:.0f} s."
            )
    return lines


def summary_line(cluster: str, run: dict) -> str:
    """One policy's run in a line, for the command's progress on stderr."""
    s = summarize(run)
    return (
        f"{cluster} {s['policy']}: {s['admitted']}/{s['offered']} admitted, broke {s['broke']} "
        f"(floor {s['floor']}), stranded mean {_n(s['stranded_mean'])}, latency mean {_s(s['lat_mean'])}"
    )


def plot(results: list[dict], path: Path) -> None:
    """bench/churn.png: per cluster, admissions over time above and stranded GPUs below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(6.5 * len(results), 7), squeeze=False, sharex="col")
    for col, r in enumerate(results):
        top, bottom = axes[0][col], axes[1][col]
        for run in r["runs"]:
            t = [s["t_h"] for s in run["samples"]]
            (line,) = top.step(t, [s["admitted"] for s in run["samples"]], where="post", label=run["policy"])
            if any(s["admitted_ok"] != s["admitted"] for s in run["samples"]):
                top.step(t, [s["admitted_ok"] for s in run["samples"]], where="post", ls=":", color=line.get_color())
            bottom.plot(t, _moving_mean([s["stranded"] for s in run["samples"]], 4), label=run["policy"])
        first = r["runs"][0]["samples"]
        top.step(
            [s["t_h"] for s in first],
            [s["offered"] for s in first],
            where="post",
            color="0.6",
            ls="--",
            label="offered",
        )
        top.set_title(f"{r['cluster']}: deployments admitted (cumulative; dotted: without a broken rule)", fontsize=10)
        bottom.set_title(
            f"{r['cluster']}: stranded GPUs (free, no TP group of the trace fits; 1-hour moving mean)", fontsize=10
        )
        bottom.set_xlabel("hour of the trace")
        top.legend(fontsize=8)
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _moving_mean(values: list[float], width: int) -> list[float]:
    """Mean of each value and the ``width - 1`` before it (15-minute samples are noisy to the eye)."""
    return [sum(values[max(0, i - width + 1) : i + 1]) / (i + 1 - max(0, i - width + 1)) for i in range(len(values))]


def placer_version() -> str:
    """The commit the run's placer came from, and whether placer/ differed from it (others may be editing)."""
    import subprocess

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return "placer (not a git checkout)"
    return f"placer at {head}" + (
        " with uncommitted changes in placer/" if git("status", "--porcelain", "placer") else ""
    )


def _ortools() -> str:
    from importlib.metadata import version

    return version("ortools")
