"""Why nothing fits (placer.solver.conflicts): each named rule, and each relaxation offered, is one that
matters; cases a differential audit against a brute force found misleading."""

from __future__ import annotations

from cli_in_process import run

_MODEL = "model: {layers: 4, hiddenSize: 1024, kvHeads: 4, headDim: 64}\n"


def _why_not(tmp_path, nodes: str, pools: str):
    """``placer solve`` of a spec with these pools on a cluster of these nodes (YAML list items)."""
    cluster = tmp_path / "c.yaml"
    cluster.write_text("apiVersion: placer.dev/v1alpha1\nkind: Cluster\nmetadata: {name: c}\nnodes:\n" + nodes)
    spec = tmp_path / "s.yaml"
    spec.write_text("apiVersion: placer.dev/v1alpha1\nkind: ServingTopology\nmetadata: {name: t}\n" + _MODEL + pools)
    return run("solve", spec, cluster)


def test_a_gpu_shortage_across_pools_is_named_beside_a_packing_rule(tmp_path):
    """A differential audit found why-not naming only the packing rule ('allow required: rack'), which alone
    cannot help: 3 free GPUs for a replica of 4. Both are named now."""
    nodes = "".join(
        f"  - {{name: n{i}, rack: r{min(i, 1)}, gpus: {{count: 2, product: H100, memoryGiB: 80}}, busy: [0]}}\n"
        for i in range(3)
    )
    pool = "{{role: aggregated, instances: 1, tensorParallel: 2, {}template: {{image: example.com/engine:1}}}}"
    pools = f"pools:\n  small: {pool.format('')}\n  big: {pool.format('placement: {required: node}, ')}\n"
    done = _why_not(tmp_path, nodes, pools)
    assert done.returncode == 1
    assert "big needs 1 group of 2 GPUs, each inside one node" in done.stderr
    assert "1 replica(s) need 4 GPUs across all pools; only 3 matching GPUs are free" in done.stderr


def test_why_not_offers_no_gpus_to_free_on_one_node_for_a_multi_node_instance(tmp_path):
    """A differential audit found 'free 4 more GPUs in node/n0' for a 2-node instance needing two nodes in one
    rack, where each rack holds one node: freeing GPUs there never helps."""
    done = _why_not(
        tmp_path,
        "  - {name: n0, rack: r0, gpus: {count: 8, product: H100, memoryGiB: 80}, busy: [0, 1, 2, 3]}\n"
        "  - {name: n1, rack: r1, gpus: {count: 8, product: H100, memoryGiB: 80}}\n",
        "pools:\n  aggregated: {instances: 1, tensorParallel: 8, nodeCount: 2, gpusPerNode: 4, "
        "placement: {required: rack}, template: {image: example.com/engine:1}}\n",
    )
    assert done.returncode == 1
    assert "allow pools.aggregated.placement.required: leaf" in done.stderr
    assert "more GPU" not in done.stderr


def test_a_broader_packing_level_is_offered_only_when_it_fits(tmp_path):
    """A differential audit found 'allow required: leaf' offered where no level helps: the count of free
    GPUs at a level ignores the pods' CPU (n1 has none left). Offered now only when a feasibility check
    confirms it (the multi-node case above still gets its level, confirmed)."""
    done = _why_not(
        tmp_path,
        "  - {name: n0, gpus: {count: 4, product: H100, memoryGiB: 80}, cpu: '32'}\n"
        "  - {name: n1, gpus: {count: 4, product: H100, memoryGiB: 80}, cpu: '1', used: {cpu: '1'}}\n",
        "pools:\n  aggregated: {instances: 2, tensorParallel: 4, placement: {required: node}, "
        "template: {image: example.com/engine:1, resources: {requests: {cpu: '1', memory: 1Gi}}}}\n",
    )
    assert done.returncode == 1
    assert "aggregated needs 2 groups of 4 GPUs, each inside one node; only 1 such group fits" in done.stderr
    assert "placement.required:" not in done.stderr


def _two_pools_on_half_free_nodes(tmp_path, cpus: list[str], racks: list[int] | None = None):
    """Pools a and b, one TP4 instance each inside one node, on 4-GPU nodes of one leaf with 2 GPUs free
    each (these CPUs left; one rack unless given): each rule fails on its own, and a rack of two nodes
    holds 4 free GPUs for each."""
    racks = racks or [0] * len(cpus)
    nodes = "".join(
        f"  - {{name: n{i}, rack: r{racks[i]}, leaf: l0, gpus: {{count: 4, product: H100, memoryGiB: 80}}, "
        f"busy: [0, 1], cpu: '{cpu}'}}\n"
        for i, cpu in enumerate(cpus)
    )
    pool = (
        "{role: aggregated, instances: 1, tensorParallel: 4, placement: {required: node}, "
        "template: {image: example.com/engine:1, resources: {requests: {cpu: '1', memory: 1Gi}}}}"
    )
    return _why_not(tmp_path, nodes, f"pools:\n  a: {pool}\n  b: {pool}\n")


def test_several_broader_levels_are_offered_when_they_fit_together(tmp_path):
    done = _two_pools_on_half_free_nodes(tmp_path, ["8", "8", "8", "8"])
    assert done.returncode == 1
    assert "allow pools.a.placement.required: rack" in done.stderr
    assert "allow pools.b.placement.required: rack" in done.stderr


def test_several_broader_levels_are_withdrawn_when_together_they_do_not_fit(tmp_path):
    """Each pool alone fits in the rack (an instance there is two pods on two nodes), but only three nodes
    have a CPU for a pod: both together need four. Each offer was counted alone, so both were made."""
    done = _two_pools_on_half_free_nodes(tmp_path, ["1", "1", "1", "0"])
    assert done.returncode == 1
    assert "a needs 1 group of 4 GPUs, each inside one node" in done.stderr
    assert "b needs 1 group of 4 GPUs, each inside one node" in done.stderr
    assert "placement.required:" not in done.stderr  # no broader level helps: the cluster is one rack
    assert done.stderr.count("Relax: free 2 more GPUs in node/n0") == 2  # what else each was offered stays


def test_several_broader_levels_are_lifted_together_until_they_fit(tmp_path):
    """A review found the offers withdrawn where a broader level for both fits: in racks of two nodes, only
    r0 has a CPU on both (one pool's instance), but the leaf holds both pools' instances."""
    done = _two_pools_on_half_free_nodes(tmp_path, ["1", "1", "1", "0", "1", "0"], racks=[0, 0, 1, 1, 2, 2])
    assert done.returncode == 1
    assert "allow pools.a.placement.required: leaf" in done.stderr
    assert "allow pools.b.placement.required: leaf" in done.stderr
    assert "required: rack" not in done.stderr


def _pair_problem(tmp_path, racks: tuple[str, str], tp: int, rules: str):
    """The problem of a prefill and a decode pool (one TPn instance each) with these extra spec lines, on two
    4-GPU nodes in these racks."""
    from placer.model.load import load_cluster, load_specs
    from placer.solver.problem import build_problem
    from placer.topology.build import build_topology

    nodes = "".join(
        f"  - {{name: n{i}, rack: {rack}, gpus: {{count: 4, product: H100, memoryGiB: 80}}}}\n"
        for i, rack in enumerate(racks)
    )
    cluster = tmp_path / "c.yaml"
    cluster.write_text("apiVersion: placer.dev/v1alpha1\nkind: Cluster\nmetadata: {name: c}\nnodes:\n" + nodes)
    pool = f"{{{{role: {{}}, instances: 1, tensorParallel: {tp}, template: {{{{image: example.com/engine:1}}}}}}}}"
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "apiVersion: placer.dev/v1alpha1\nkind: ServingTopology\nmetadata: {name: t}\n"
        + _MODEL
        + f"pools:\n  p: {pool.format('prefill')}\n  d: {pool.format('decode')}\n"
        + rules
    )
    [(loaded, _)] = load_specs(spec)
    return build_problem(loaded, build_topology(load_cluster(cluster)))


def _floor_conflict(tmp_path):
    """Prefill and decode of TP4 each, joined by 500 GB/s, on two 4-GPU nodes in two racks: only a node
    offers that much and none holds both, so the floor conflicts; lowering it to what the racks' link
    offers fits (a feasibility check confirms it)."""
    return _pair_problem(tmp_path, ("r0", "r1"), 4, "transfer: {from: p, to: d, minBandwidthGBps: 500}\n")


def test_an_explanation_the_clock_ends_says_out_of_time_and_marks_the_run(tmp_path):
    """A determinism audit found that under load the explanation's own wall-clock guard left its checks
    undecided and the text then claimed "no milder value fits on its own"; it also ignored the run's
    guard and charged nothing to the run's budget. The run's budget is its parent now: its work is charged
    there, its clock ends the explanation, and an undecided check is said as out of time."""
    from placer.solver.conflicts import explain_infeasible
    from placer.solver.options import Budget

    problem = _floor_conflict(tmp_path)
    roomy = Budget(100.0, 100.0)
    [fits] = explain_infeasible(problem, seconds=5.0, within=roomy)
    assert fits.relax is not None and fits.relax.startswith("lower transfer.minBandwidthGBps to ")
    assert roomy.work_left < 100.0 and not roomy.clock_cut  # its checks were charged to the run
    no_wall = Budget(100.0, 0.0)  # the run's wall-clock guard has already passed
    [cut] = explain_infeasible(problem, seconds=5.0, within=no_wall)
    assert cut.rule == fits.rule
    assert cut.relax is not None and cut.relax.endswith("(out of time to verify a milder value)")
    assert no_wall.clock_cut


def test_an_infeasible_solve_notes_when_the_clock_ended_its_explanation(tmp_path):
    """The solve's error carries the clock note, as reasons (printed on exit 1) and as notes (explain
    --why-not -o json's `notes`), when a guard ended the explanation. The explanation has a guard of its
    own, unless --wall-limit was given: that bounds the whole run."""
    from placer.solver.options import CLOCK_NOTE, Budget, SolveOptions
    from placer.solver.solve import _infeasible

    problem = _floor_conflict(tmp_path)
    cut = _infeasible(problem, True, SolveOptions(time_limit_s=5.0, wall_limit_s=1.0), Budget(100.0, 0.0))
    assert cut.notes == [CLOCK_NOTE] and cut.reasons[-1] == CLOCK_NOTE
    own = _infeasible(problem, True, SolveOptions(time_limit_s=5.0), Budget(100.0, 0.0))  # the default guard
    assert own.notes == [] and CLOCK_NOTE not in own.reasons and len(own.conflicts) == len(cut.conflicts)
    assert own.conflicts[0].relax.startswith("lower transfer.minBandwidthGBps to ")


def test_rules_left_unchecked_are_not_called_a_minimal_conflict(tmp_path):
    """A review found that with every check left undecided (the run's clock had passed) the deletion filter
    kept every rule, a transfer floor that always holds among them, and still said "relaxing any one of
    them makes a placement possible"; with no rule to keep it named nothing at all. Now it says the checks
    ran out of time, and with a budget the floor is not named."""
    from placer.solver.conflicts import explain_infeasible
    from placer.solver.options import Budget

    rules = "transfer: {from: p, to: d, minBandwidthGBps: 1}\nreplicas: 2\nspread: {level: rack}\n"
    problem = _pair_problem(tmp_path, ("r0", "r0"), 2, rules)
    checked = explain_infeasible(problem, seconds=5.0, within=Budget(100.0, 100.0))
    assert {c.rule for c in checked} >= {"spread.level"} and "transfer" not in {c.rule for c in checked}
    unchecked = explain_infeasible(problem, seconds=5.0, within=Budget(100.0, 0.0))
    said = " ".join(str(c) for c in unchecked)
    assert unchecked and "ran out of time" in said
    assert "relaxing any one of them makes a placement possible" not in said


def _answers(monkeypatch, answers: list):
    """conflicts._feasible answering these in turn (None: a check the budget or the clock left undecided;
    "real": the real check), then the real check."""
    from placer.solver import conflicts

    real, left = conflicts._feasible, list(answers)

    def feasible(spec, problem, budget):
        answer = left.pop(0) if left else "real"
        return real(spec, problem, budget) if answer == "real" else answer

    monkeypatch.setattr(conflicts, "_feasible", feasible)


def _three_replicas(tmp_path):
    return _pair_problem(tmp_path, ("r0", "r1"), 2, "replicas: 3\nminReplicas: 3\nspread: {level: rack}\n")


def test_a_relaxation_confirmed_after_an_undecided_milder_one_says_so(tmp_path, monkeypatch):
    """A review found that a milder value whose check was left undecided counted as "does not fit", so a
    stronger one confirmed next was offered as if it were the mildest."""
    from placer.solver.conflicts import _relaxation
    from placer.solver.options import Budget

    problem = _three_replicas(tmp_path)
    _answers(monkeypatch, [False, True])
    assert _relaxation(problem, "minReplicas", Budget(100.0, 100.0)) == "lower minReplicas to 1"
    _answers(monkeypatch, [None, True])
    said = _relaxation(problem, "minReplicas", Budget(100.0, 100.0))
    assert said == "lower minReplicas to 1 (a milder value could not be checked in time)"
    _answers(monkeypatch, [None, False])
    assert (
        _relaxation(problem, "minReplicas", Budget(100.0, 100.0)) == "free GPUs (out of time to verify a milder value)"
    )


def test_a_rule_the_deletion_filter_could_not_rule_out_is_said_to_be_unconfirmed(tmp_path, monkeypatch):
    """With everything relaxed it fits; dropping the spread could not be checked, dropping minReplicas still
    does not fit: the spread stays, and the answer says a check ran out of time."""
    from placer.solver.conflicts import deletion_filter
    from placer.solver.options import Budget

    problem = _three_replicas(tmp_path)
    _answers(monkeypatch, [True, None, False])
    found = deletion_filter(problem, Budget(100.0, 100.0))
    assert [c.rule for c in found] == ["spread.level", ""]
    assert found[-1].message.startswith("these rules cannot all hold together; 1 check(s) ran out of time")


def test_a_broader_level_left_undecided_after_a_refuted_one_is_offered_unconfirmed(tmp_path, monkeypatch):
    """A review found the refuted levels offered again, as unconfirmed, when the check of the next broader
    level was left undecided: that broader level is what is offered now, and it says it is unconfirmed."""
    _answers(monkeypatch, ["real", None])  # rack for both: refuted by the real check; leaf: undecided
    done = _two_pools_on_half_free_nodes(tmp_path, ["1", "1", "1", "0", "1", "0"], racks=[0, 0, 1, 1, 2, 2])
    assert done.returncode == 1
    for pool in ("a", "b"):
        assert f"allow pools.{pool}.placement.required: leaf (counted; out of time to confirm it)" in done.stderr
    assert "required: rack" not in done.stderr
