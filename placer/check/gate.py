"""The run-time gate: nothing is printed unless the independent checker accepts it. For one placement,
and for a batch, where each placement is checked with every other one's GPUs, CPU and memory taken."""

from __future__ import annotations

from dataclasses import replace

from placer.check.verify import Report, check
from placer.model.errors import VerificationError
from placer.model.placement import Placement
from placer.model.running import Running
from placer.model.spec import ServingTopology
from placer.topology.graph import Topology
from placer.topology.usage import merge_usage, usage


def verify_placement(spec: ServingTopology, topo: Topology, placement: Placement) -> Report:
    """Run the independent checker; refuse to go on if it finds anything. The reported objective becomes
    the checker's recomputation; 'optimal' is kept only if it equals what the solver optimised."""
    report = check(spec, topo, placement)
    if not report.ok:
        raise VerificationError(
            "the independent checker rejected the placement (a bug in placer; nothing was "
            "printed):\n  " + "\n  ".join(report.violations[:20])
        )
    st = placement.stats
    if st.objective is not None and st.objective != report.total_units:
        st.notes.append(
            f"solver cost model {st.objective} units, checker {report.total_units} units (the solver priced a "
            "domain by its figures, not by the GPUs chosen in it); optimality and the bound not claimed"
        )
        if st.status == "optimal":
            st.status = "feasible"
        st.bound = st.gap = None  # in the solver's figures, which are not this placement's: it bounds nothing
    st.objective = report.total_units
    if st.bound is not None and st.objective:
        st.gap = max(0.0, (st.objective - st.bound) / st.objective) if st.status != "optimal" else 0.0
    return report


def verify_fleet(topo: Topology, placed: list[tuple[ServingTopology, Placement]]) -> list[Report]:
    """The checker on every placement with every other one's GPUs, CPU and memory taken: together they
    double-book nothing and each keeps every rule. Order-free, so it does not trust the solve order.
    Raises VerificationError (a bug in placer) on anything; the objective becomes the checker's figure."""
    _claim_once(placed)
    return [verify_placement(spec, t, pl) for (spec, pl), t in zip(placed, _others_taken(topo, placed), strict=True)]


def verify_kept(running: list[Running], placed: list[tuple[ServingTopology, Placement]], topo: Topology) -> None:
    """Under --keep, re-checked from what runs rather than from the solver's keep plan: every running
    instance its spec still has (same replica, pool and index, the same GPUs, a multi-node one in its
    layout) is on exactly the GPUs it runs on, and every running router of a replica the spec still routes
    is on its node, unless that node is unschedulable now (a router then moves). GPUs are compared as sets per
    pod, in pod order. Raises VerificationError (a bug in placer) on anything."""
    by_key = {f"{pl.namespace}/{pl.deployment}": (spec, pl) for spec, pl in placed}
    problems = []
    for run in running:
        if run.key not in by_key:
            continue
        spec, pl = by_key[run.key]
        where = {(rep.index, i.pool, i.index): i.pods for rep in pl.replicas for i in rep.instances}
        for (k, pool, i), inst in sorted(run.instances.items()):
            p = spec.pools.get(pool)
            sizes = [len(pod.gpus) for pod in inst.pods]
            if p is None or k >= spec.replicas or i >= p.instances or sum(sizes) != p.gpus_per_instance:
                continue  # the spec no longer has it: dropped, not kept
            if p.node_count is not None and sizes != [p.gpus_per_node] * p.node_count:
                continue
            if _as_sets(where.get((k, pool, i), ())) != _as_sets(inst.pods):
                problems.append(
                    f"{run.key} replica {k} {pool}-{i} runs on {_pods(inst.pods)}, placed on "
                    f"{_pods(where.get((k, pool, i), ()))}"
                )
        routers = {rep.index: rep.router for rep in pl.replicas}
        for k, node in sorted(run.routers.items()):
            moves = not topo.node_by_name(node).schedulable
            if spec.router is not None and k < spec.replicas and routers.get(k) != node and not moves:
                problems.append(f"{run.key} replica {k}'s router runs on {node}, placed on {routers.get(k)}")
    if problems:
        raise VerificationError(
            "the independent checker rejected the placement (a bug in placer; nothing was printed): a running "
            "instance kept by --keep moved:\n  " + "\n  ".join(problems[:20])
        )


def _as_sets(pods) -> list[tuple[str, frozenset[int]]]:
    return [(p.node, frozenset(p.gpus)) for p in pods]


def _pods(pods) -> str:
    return "; ".join(f"{p.node} GPUs {','.join(map(str, p.gpus))}" for p in pods) or "nothing"


def check_fleet(topo: Topology, placed: list[tuple[ServingTopology, Placement]]) -> list[Report]:
    """verify_fleet's checks without refusing: for states placer did not make (what runs, in plan)."""
    return [check(spec, t, pl) for (spec, pl), t in zip(placed, _others_taken(topo, placed), strict=True)]


def _claim_once(placed: list[tuple[ServingTopology, Placement]]) -> None:
    claims: dict[tuple[str, int], str] = {}
    for _spec, pl in placed:
        me = f"{pl.namespace}/{pl.deployment}"
        for rep in pl.replicas:
            for inst in rep.instances:
                for pod in inst.pods:
                    for g in pod.gpus:
                        owner = claims.setdefault((pod.node, g), me)
                        if owner != me:
                            raise VerificationError(
                                f"the independent checker rejected the batch (a bug in placer; nothing was printed): "
                                f"GPU {g} of {pod.node} is given to both {owner} and {me}"
                            )


def _others_taken(topo: Topology, placed: list[tuple[ServingTopology, Placement]]) -> list[Topology]:
    """Per placement, the cluster with every other placement's GPUs, CPU and memory taken. Built from the
    cluster with everything taken, with only the placement's own nodes redone from ``topo`` (linear in the
    batch); a GPU busy in ``topo`` stays busy, and one claimed twice stays taken for each claimant."""
    taken = [usage(spec, topo, pl) for spec, pl in placed]
    gpus, cpu, mem = merge_usage(taken)
    everything = topo.with_usage(gpus, cpu, mem)
    out = []
    for own_gpus, own_cpu, own_mem in taken:
        nodes = list(everything.nodes)
        for n in set(own_gpus) | set(own_cpu) | set(own_mem):
            others = list(gpus.get(n, ()))
            for g in own_gpus.get(n, ()):
                others.remove(g)  # one claim each: a GPU two placements claim stays taken by the other
            nodes[n] = replace(
                topo.nodes[n],
                busy=topo.nodes[n].busy | frozenset(others),
                cpu_free_m=topo.nodes[n].cpu_free_m - (cpu.get(n, 0) - own_cpu.get(n, 0)),
                memory_free_bytes=topo.nodes[n].memory_free_bytes - (mem.get(n, 0) - own_mem.get(n, 0)),
            )
        out.append(replace(everything, nodes=nodes))
    return out
