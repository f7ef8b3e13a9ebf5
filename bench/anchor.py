"""The anchor search before and after a change, in one run: every fixture spec on generated 10k-GPU DGX H100
and GB200 NVL72 clusters, seeds 0-9, each solve a fresh process.

Per (revision, style, seed, spec): status, objective, gap, the work the solve spent (deterministic seconds:
CP-SAT's deterministic time plus the greedy's and the model builds' counted work, `placer/solver/options.py`),
the solve's wall seconds, the process's CPU seconds and the 1-minute load average at its start. Each
revision is exported with `git archive` into bench/.cache/rev-<sha>/ and imported from there, so the
before and after columns run the same bench code on the same machine minutes apart.

    python bench/anchor.py [--before 33730a1] [--after HEAD|worktree] [--seeds 10] [--time-limit 10]
                           [--specs all|llama-70b-large] [--out bench/ANCHOR.md]

Clusters are cached in bench/.cache/ (gitignored), as bench/scaling.py caches them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "bench" / ".cache"
STYLES = ("dgx-h100", "gb200-nvl72")
GPUS = 10_000
WALL_S = 120.0


def one(spec: str, cluster: str, limit: float) -> dict:
    """One solve in this process (placer imported from PYTHONPATH): the JSON line the parent reads."""
    from placer.check.gate import verify_placement
    from placer.model.errors import InfeasibleError, InputError
    from placer.model.load import load_cluster, load_spec
    from placer.pipeline import SolveOptions, place
    from placer.topology.build import build_topology

    spec_m = load_spec(Path(spec))
    topo = build_topology(load_cluster(Path(cluster)))
    t0 = time.perf_counter()
    try:
        # The wall-clock guard far out: the work budget decides every answer, on a loaded machine too.
        placement = place(spec_m, topo, SolveOptions(time_limit_s=limit, wall_limit_s=WALL_S))
    except InfeasibleError as exc:
        out = {"status": "infeasible" if exc.proven else "timeout"}
    except InputError as exc:  # e.g. a TP8 pod on 4-GPU GB200 trays: refused before solving
        out = {"status": "bad input", "error": str(exc)}
    else:
        verify_placement(spec_m, topo, placement)  # raises if the checker rejects it
        st = placement.stats
        out = {"status": st.status, "objective": st.objective, "bound": st.bound, "gap": st.gap}
        out["clock"] = any("wall-clock guard" in n for n in st.notes)
        out["budget_spent"] = any("budget spent" in n or "time limit hit" in n for n in st.notes)
        if "work" in st.seconds:  # revisions before bench/ANCHOR.md's do not report it
            out["work_s"] = st.seconds["work"]
    out["solve_s"] = time.perf_counter() - t0  # the problem's build included
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out["cpu_s"] = usage.ru_utime + usage.ru_stime
    return out


def export(rev: str) -> tuple[str, Path | None]:
    """(short sha, tree to import placer from); 'worktree' is this checkout as it stands."""
    if rev == "worktree":
        return "worktree", None
    sha = subprocess.run(
        ["git", "rev-parse", "--short", rev], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.strip()
    tree = CACHE / f"rev-{sha}"
    if not (tree / "placer").exists():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", sha, "placer"], capture_output=True, cwd=ROOT, check=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return sha, tree


def cluster(style: str, seed: int) -> str:
    path = CACHE / f"{style}-{GPUS}-s{seed}.yaml"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "placer", "cluster", "generate", "--style", style, "--gpus", str(GPUS)]
        subprocess.run([*cmd, "--seed", str(seed), "-o", str(path)], check=True, capture_output=True, cwd=ROOT)
    return str(path)


def run(tree: Path | None, spec: str, path: str, limit: float) -> dict:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", spec, path, str(limit)]
    load, t0 = os.getloadavg()[0], time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"status": f"exit {proc.returncode}", "error": proc.stderr.strip().splitlines()[-1:], "load": load}
    return json.loads(proc.stdout.strip().splitlines()[-1]) | {"wall": wall, "load": load}


def report(rows: list[dict], args: argparse.Namespace, revs: list[str]) -> str:
    out = [
        "# The anchor search: before and after (issue 14, item 1)",
        "",
        f"`python bench/anchor.py --before {args.before} --after {args.after} --seeds {args.seeds} "
        f"--time-limit {args.time_limit:g}`; {os.cpu_count()} cores, shared with other sessions (load average at "
        f"each run's start beside it; the wall-clock guard at {WALL_S:g} s, so the work budget decides every "
        "answer). Every fixture spec on generated 10,000-GPU clusters (`placer cluster "
        "generate --gpus 10000 --seed S`, 30-60 % busy), one fresh process per solve, the placement checked by "
        "the independent checker. 'work s' is what the solve spent of its work budget (deterministic seconds: "
        "the same on any machine; a revision that does not report it shows it only where it spent the whole "
        "budget: every unproven answer); 'solve s' the wall seconds of building the problem and solving, "
        "'CPU s' the whole process's (imports and loading included).",
        "",
        "## Summary",
        "",
        "| revision | style | spec | proven optimal | proven infeasible | bad input | feasible (gap: median, max) "
        "| work s median (max) | solve s median (max) | CPU s median |",
        "|---|---|---|---:|---:|---:|---|---|---|---:|",
    ]
    keys = sorted({(r["rev"], r["style"], r["spec"]) for r in rows}, key=lambda k: (revs.index(k[0]), k[1], k[2]))
    for rev, style, spec in keys:
        rs = [r for r in rows if (r["rev"], r["style"], r["spec"]) == (rev, style, spec)]
        opt = sum(r["status"] == "optimal" for r in rs)
        inf = sum(r["status"] == "infeasible" for r in rs)
        bad = sum(r["status"] == "bad input" for r in rs)
        gaps = [100 * r["gap"] for r in rs if r["status"] == "feasible" and r.get("gap") is not None]
        feas = sum(r["status"] == "feasible" for r in rs)
        g = f"{feas} ({statistics.median(gaps):.2f} %, {max(gaps):.2f} %)" if gaps else f"{feas}"
        ws = [w for w in (_work(r, args.time_limit) for r in rs) if w is not None]
        ss = [r["solve_s"] for r in rs if "solve_s" in r and r["status"] != "bad input"]
        cs = [r["cpu_s"] for r in rs if "cpu_s" in r]
        out.append(
            f"| {rev} | {style} | {spec} | {opt}/{len(rs) - inf - bad} | {inf} | {bad} | {g} | "
            f"{_median_max(ws)} | {_median_max(ss)} | {_cell(statistics.median(cs) if cs else None)} |"
        )
    out += [
        "",
        "## Every run",
        "",
        "| revision | style | seed | spec | status | objective | gap | work s | solve s | wall s | CPU s | load |",
        "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        gap = "" if r.get("gap") in (None, 0.0) else f"{100 * r['gap']:.2f} %"
        obj = "" if r.get("objective") is None else f"{r['objective']:,}"
        out.append(
            f"| {r['rev']} | {r['style']} | {r['seed']} | {r['spec']} | {r['status']} | {obj} | {gap} | "
            f"{_cell(_work(r, args.time_limit))} | {r.get('solve_s', 0):.2f} | {r.get('wall', 0):.2f} | "
            f"{r.get('cpu_s', 0):.2f} | {r['load']:.2f} |"
        )
    return "\n".join(out) + "\n"


def _work(row: dict, limit: float) -> float | None:
    """Work spent: reported by the solver, or for an older revision known only when it spent the budget."""
    if "work_s" in row:
        return row["work_s"]
    # Short of a proof, the search stops only when the budget is spent: a feasible answer spent all of it.
    return limit if row.get("budget_spent") or row.get("status") == "feasible" else None


def _cell(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def _median_max(xs: list[float]) -> str:
    return "" if not xs else f"{statistics.median(xs):.2f} ({max(xs):.2f})"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2], sys.argv[3], float(sys.argv[4]))))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default="33730a1")
    ap.add_argument("--after", default="worktree")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--styles", default=",".join(STYLES))
    ap.add_argument("--specs", default="all")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "ANCHOR.md")
    ap.add_argument("--render", action="store_true", help="rewrite --out from its .jsonl rows, solving nothing")
    args = ap.parse_args()
    rows_path = args.out.with_suffix(".jsonl")
    if args.render:
        rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
        revs = list(dict.fromkeys(r["rev"] for r in rows))
        args.out.write_text(report(rows, args, revs))
        return
    specs = (
        sorted(p.stem for p in (ROOT / "fixtures" / "specs").glob("*.yaml"))
        if args.specs == "all"
        else args.specs.split(",")
    )
    trees = [export(args.before), export(args.after)]
    rows = []
    for style in args.styles.split(","):
        for seed in range(args.seeds):
            path = cluster(style, seed)
            for spec in specs:
                for sha, tree in trees:  # before and after back to back: the same load on both
                    spec_path = str(ROOT / "fixtures" / "specs" / f"{spec}.yaml")
                    row = run(tree, spec_path, path, args.time_limit)
                    row |= {"rev": sha, "style": style, "seed": seed, "spec": spec}
                    print(json.dumps(row), file=sys.stderr, flush=True)
                    rows.append(row)
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args.out.write_text(report(rows, args, [sha for sha, _ in trees]))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
