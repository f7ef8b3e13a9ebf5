"""The churn simulation (bench/churn.py) on a tiny trace: a 128-GPU cluster, two hours, a handful of serving
deployments among a few dozen background jobs. What the benchmark reports must rest on real behaviour:
placer breaks no rule, every admitted deployment is what the checker saw, no GPU is held by two live jobs,
departures give back exactly what arrivals took, and the same seed gives the same numbers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from placer.check.verify import check
from placer.solver.solve import SolveOptions

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench/ is scripts, not an installed package: import it as its scripts do

from bench import churn, churn_replay, churn_report, churn_trace, churn_world  # noqa: E402

# Overloaded on purpose (serving alone would want 120 % of the GPUs, at the daily peak) so that some
# deployments are admitted and some rejected: 10 serving arrivals, 33 background ones after the warm-up.
PARAMS = churn_trace.TraceParams(
    hours=2.0,
    serving_load=1.2,
    peak_hour=1.0,
    shapes=(("llama-70b-disagg", 0.5), ("aggregated-tp8", 0.3), ("tp16-multinode", 0.2)),
)
CASE = churn.Case(128, 0, PARAMS, time_limit_s=10.0, policies=("placer", "count-spread", "kueue-bestfit"))
SEED = 0


@pytest.fixture(scope="module")
def result():
    return churn.run_case(CASE, SEED)


@pytest.fixture(scope="module")
def shapes():
    return churn_trace.load_shapes([s for s, _ in PARAMS.shapes])


def test_the_trace_is_a_handful_of_events(shapes):
    trace = churn_trace.generate_trace(PARAMS, 128, shapes, SEED)
    serving = [j for j in trace if j.kind == "serving"]
    background = [j for j in trace if j.kind == "background"]
    assert 3 <= len(serving) <= 20 and 10 <= len(background) <= 300
    assert [j.arrive_h for j in trace] == sorted(j.arrive_h for j in trace)
    assert all(0 <= j.arrive_h < PARAMS.hours for j in serving)
    assert all(-churn_trace.WARMUP_H <= j.arrive_h < PARAMS.hours for j in background)
    assert all(j.depart_h > j.arrive_h for j in trace)
    # A serving job asks for its shape's GPUs: llama-70b-disagg is 2 x TP8 + 4 x TP4 = 32.
    assert {j.gpus for j in serving if j.shape == "llama-70b-disagg"} <= {32}
    assert all(j.gpus in (1, 2, 4, 8) for j in background)


def test_placer_breaks_no_rule_and_what_it_admits_is_what_the_checker_passed(shapes):
    base = churn.empty_cluster(128, 0)
    trace = churn_trace.generate_trace(PARAMS, 128, shapes, SEED)
    seen = []
    inner = churn_replay.placer_policy(SolveOptions(time_limit_s=10.0))

    def place(spec, topo):
        outcome, pl, rep = inner(spec, topo)
        seen.append((spec, topo, pl))
        return outcome, pl, rep

    run = churn_replay.replay("placer", place, base, trace, shapes, PARAMS.hours)
    admitted = [d for d in run.decisions if d.admitted]
    assert admitted and len(admitted) < len(run.decisions), "the tiny trace should admit some, reject some"
    assert all(not d.violations for d in admitted)
    assert len(seen) == len(run.decisions)
    for (spec, topo, pl), d in zip(seen, run.decisions, strict=True):
        assert (pl is not None) == d.admitted
        if pl is None:
            continue
        # Re-checked here, on the very state it was placed on: no busy GPU taken, every rule kept.
        rep = check(spec, topo, pl)
        assert rep.ok, rep.violations
        held: dict[str, list[int]] = {}
        for r in pl.replicas:
            for i in r.instances:
                for p in i.pods:
                    held.setdefault(p.node, []).extend(p.gpus)
        assert {n: sorted(g) for n, g in held.items()} == d.held
        assert d.gpus == churn_trace.deployment_gpus(spec)
        assert len(d.allreduce_us) == len(rep.instances)


def test_every_policy_admits_only_checked_placements_and_counts_their_violations(result):
    for run in result["runs"]:
        for d in run["decisions"]:
            if not d["admitted"]:
                assert d["gpus"] == 0 and not d["held"]
                continue
            assert d["units"] is not None and d["allreduce_us"], (run["policy"], d["job"])
        s = churn_report.summarize(run)
        assert s["broke"] == sum(1 for d in run["decisions"] if d["admitted"] and d["violations"])
        if run["policy"] == "placer":
            assert s["broke"] == 0 and s["floor"] == 0 and s["violations"] == 0


def _jobs(run: dict) -> list[tuple[str, float, float, dict]]:
    serving = [(d["job"], d["arrive_h"], d["depart_h"], d["held"]) for d in run["decisions"] if d["admitted"]]
    return serving + [tuple(b) for b in run["background_held"]]


def test_no_gpu_is_held_by_two_live_jobs(result):
    for run in result["runs"]:
        jobs = _jobs(run)
        assert jobs
        # Sweep: at each arrival, the jobs still live (departed strictly later) hold none of its GPUs.
        for job, start, _end, held in jobs:
            mine = {(n, g) for n, gs in held.items() for g in gs}
            assert len(mine) == sum(len(gs) for gs in held.values())
            for other, s2, e2, h2 in jobs:
                if other != job and s2 <= start < e2:
                    theirs = {(n, g) for n, gs in h2.items() for g in gs}
                    assert not mine & theirs, (run["policy"], job, other, sorted(mine & theirs))


def test_gpus_add_up_at_every_sample(result):
    total = result["gpus"]
    for run in result["runs"]:
        assert len(run["samples"]) == int(PARAMS.hours / 0.25) + 1
        for s in run["samples"]:
            assert s["free"] + s["serving_gpus"] + s["background_gpus"] == total
            assert 0 <= s["stranded"] <= s["free"]
            assert s["admitted_ok"] <= s["admitted"] <= s["offered"]


def test_departures_free_exactly_what_arrivals_took():
    base = churn.empty_cluster(128, 0)
    world = churn_world.World(base)
    before = ([set(f) for f in world.free], list(world.cpu), list(world.mem))
    a = world.background_fit(4)
    assert a is not None and a.gpu_count == 4
    world.take("a", "background", a)
    (node,) = a.gpus
    b = world.background_fit(2)
    # Bin-pack: the 2-GPU job goes to the node the 4-GPU job left with 4 free GPUs, onto other GPUs.
    assert b is not None and list(b.gpus) == [node] and not set(b.gpus[node]) & set(a.gpus[node])
    world.take("b", "background", b)
    with pytest.raises(AssertionError, match="not free"):
        world.take("c", "background", a)  # the same GPUs again: double booking
    assert world.release("a") == a
    assert world.release("b") == b
    assert ([set(f) for f in world.free], world.cpu, world.mem) == before
    assert not world.live and world.topology().nodes[0].free_gpus == base.nodes[0].free_gpus


def test_the_same_seed_gives_the_same_numbers(result):
    again = churn.run_case(CASE, SEED)

    def strip(r: dict) -> dict:
        runs = [
            {k: v for k, v in run.items() if k != "seconds"}
            | {"decisions": [{k: v for k, v in d.items() if k != "seconds"} for d in run["decisions"]]}
            for run in r["runs"]
        ]
        return r | {"runs": runs}

    assert strip(again) == strip(result)


def test_another_seed_gives_another_trace(shapes):
    one, two = (churn_trace.generate_trace(PARAMS, 128, shapes, seed) for seed in (SEED, SEED + 1))
    assert [j.arrive_h for j in one] != [j.arrive_h for j in two]


def test_a_shorter_trace_is_a_prefix_of_a_longer_one(shapes):
    # Times, sizes and lifetimes draw from separate generators: asking for fewer hours keeps what is kept.
    long = churn_trace.generate_trace(churn_trace.TraceParams(hours=4.0, shapes=PARAMS.shapes), 128, shapes, SEED)
    short = churn_trace.generate_trace(churn_trace.TraceParams(hours=2.0, shapes=PARAMS.shapes), 128, shapes, SEED)
    assert short == [j for j in long if j.arrive_h < 2.0]
