"""The whole ``placer solve`` pipeline as one function the CLI, the library and the benchmark share:
load -> topology -> problem -> solve -> verify -> emit. Nothing reaches stdout from here.

This module is placer's public Python surface for solving (``__all__``); the stages' own modules are
free to change shape behind it.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from placer.check.gate import verify_fleet, verify_kept, verify_placement
from placer.check.verify import Report
from placer.model.placement import Placement
from placer.model.running import Running
from placer.model.spec import ServingTopology
from placer.solver.autoscale import Decision, Observed, Shape, State, decide, observe, scaled_spec, shape_of
from placer.solver.problem import Problem
from placer.solver.solve import SolveOptions
from placer.topology.graph import Topology

__all__ = [
    "AutoscaleResult",
    "FleetSolveResult",
    "Observed",
    "SolveOptions",
    "Shape",
    "SolveResult",
    "State",
    "build_inputs",
    "decide",
    "observe",
    "place",
    "run_autoscale",
    "run_fleet",
    "run_plan",
    "run_solve",
    "scaled_spec",
    "shape_of",
    "verify_fleet",
    "verify_placement",
]


def place(spec: ServingTopology, topo: Topology, options: SolveOptions = SolveOptions()) -> Placement:  # noqa: B008
    """One spec on an in-memory cluster: compile and solve, nothing else (an admission loop's call).
    Raises InfeasibleError; the placement is not yet checked: pass it to ``verify_placement``."""
    from placer.solver.problem import build_problem
    from placer.solver.solve import solve

    return solve(build_problem(spec, topo), options)


@dataclass
class SolveResult:
    spec: ServingTopology
    topology: Topology
    placement: Placement
    report: Report
    manifests: list[dict]
    target: str | None = None  # the --target the manifests are for

    def yaml(self) -> str:
        from placer.emit.manifests import to_yaml

        return to_yaml(self.manifests)

    def json(self) -> str:
        from placer.emit.manifests import to_json_list

        return to_json_list(self.manifests)

    def summary(self, wall_s: float) -> str:
        st = self.placement.stats
        gap = "" if st.gap in (None, 0.0) else f", gap {st.gap:.2%}"
        gpus = sum(len(p.gpus) for r in self.placement.replicas for i in r.instances for p in i.pods)
        lines = [
            f"placed {len(self.placement.replicas)}/{self.spec.replicas} replica(s), {gpus} GPUs, "
            f"{len(self.manifests)} objects; {st.status}, cost {st.objective} units (bound {st.bound}{gap}) "
            f"in {wall_s:.2f}s"
        ]
        lines += [f"note: {n}" for n in st.notes]
        lines += slo_warnings(self.spec, self.topology, self.placement)
        lines += imex_warnings(self.spec, self.topology, self.placement, self.target)
        return "\n".join(lines)


def slo_warnings(spec: ServingTopology, topo: Topology, placement: Placement) -> list[str]:
    """An SLO the links alone already break: the placement is still the best there is, so this is no
    failure, but a run that looked clean must not hide it (placer explain shows every budget's split)."""
    if spec.slo.ttft_ms is None and spec.slo.itl_ms is None:
        return []
    from placer.explain.explanation import explain_placement

    return [
        f"warning: slo.{c.name}Ms {c.target_ms:g} ms: communication alone takes {c.communication_ms:.1f} ms of it "
        f"({c.what}; placer explain shows the split)"
        for c in explain_placement(spec, topo, placement).slos
        if not c.ok
    ]


def imex_warnings(spec: ServingTopology, topo: Topology, placement: Placement, target: str | None) -> list[str]:
    """Trays of one NVLink domain (GB200 NVL72) reach each other over NVLink only through an IMEX channel,
    which only ``--target dra`` gives the pods (a ComputeDomain per instance). Under any other target NCCL
    and the KV transfer run over the network there, slower than the NVLink figures placer costed and
    checked the transfer floor with: said, so a clean run does not hide it."""
    from placer.check.verify import transfer_pair

    if target == "dra" or target is None:
        return []

    def domain(nodes: set[str]) -> str | None:
        found = {topo.node_by_name(n).path.get("nvlink-domain") for n in nodes}
        return found.pop() if len(nodes) > 1 and len(found) == 1 and None not in found else None

    spans, crossings = [], []
    pair = transfer_pair(spec)
    for rep in placement.replicas:
        for inst in rep.instances:
            shared = domain({p.node for p in inst.pods})
            if shared is not None:
                trays = f"{len(inst.pods)} trays of NVLink domain {shared}"
                spans.append(f"replica {rep.index} {inst.pool}-{inst.index} spans {trays}")
        if pair is not None:
            ends = [{p.node for i in rep.instances if i.pool == pool for p in i.pods} for pool in pair]
            shared = domain(ends[0] | ends[1]) if ends[0] != ends[1] else None
            if shared is not None:
                crossings.append(f"replica {rep.index} in {shared}")
    out = []
    if spans:
        out.append(
            f"warning: {_listed(spans)}: --target {target} gives "
            f"{'its' if len(spans) == 1 else 'their'} pods no IMEX channel, so NCCL runs "
            f"{'it' if len(spans) == 1 else 'them'} over the network, not the NVLink placer costed; --target dra "
            "gives each instance a ComputeDomain"
        )
    if crossings:
        out.append(
            f"warning: the {pair[0]}->{pair[1]} transfer crosses trays of one NVLink domain ({_listed(crossings)}): "
            "without an IMEX channel (--target dra) it runs over the network, not the NVLink placer checked "
            "transfer.minBandwidthGBps against"
        )
    return out


def _listed(items: list[str], shown: int = 3) -> str:
    """A few of many like findings on one line: a fleet-sized run would otherwise print one per instance."""
    head = ", ".join(items[:shown])
    return head if len(items) <= shown else f"{head} and {len(items) - shown} more like it"


def run_solve(
    spec_path: Path,
    cluster_path: Path,
    options: SolveOptions,
    progress: Callable[[str], None] = lambda _m: None,
    target: str | None = None,
    nccl: bool | None = None,
    namespace: str | None = None,
    target_version: str | None = None,
) -> SolveResult:
    """``target`` / ``nccl`` choose the manifests (emit.build_manifests; default: coscheduling);
    ``namespace`` replaces the spec's, so objects, the record and the spec annotation all carry it."""
    from placer.emit.manifests import build_manifests
    from placer.emit.targets import DEFAULT_TARGET
    from placer.emit.targets.versions import check_version
    from placer.model.load import load_cluster, load_spec
    from placer.solver.solve import solve

    check_version(target or DEFAULT_TARGET, target_version)  # bad input before any work
    with LongLived() as long_lived:
        times: dict[str, float] = {}
        t = started = time.perf_counter()
        spec = load_spec(spec_path)
        if namespace is not None:
            spec = in_namespace(spec, namespace)
        cluster = load_cluster(cluster_path)
        times["load"] = time.perf_counter() - t
        topo, problem = build_inputs(spec_path, spec, cluster_path, cluster, times)
        long_lived.keep()  # the cluster, the spec and the problem outlive the solve
        free = sum(len(n.free_gpus) for n in topo.nodes)
        progress(
            f"cluster {topo.name}: {len(topo.nodes)} nodes, {free} free GPUs; solving {spec.metadata.name} "
            f"({sum(p.instances for p in spec.pools.values())} instances x {spec.replicas} replica(s))..."
        )
        _count_out_replicas(problem, progress)
        t = time.perf_counter()
        placement = solve(problem, _wall_left(options, started))
        times["solve"] = time.perf_counter() - t
        t = time.perf_counter()
        report = verify_placement(spec, topo, placement)
        times["verify"] = time.perf_counter() - t
        t = time.perf_counter()
        manifests = named(
            spec_path,
            build_manifests,
            spec,
            topo,
            placement,
            report,
            target=target or DEFAULT_TARGET,
            nccl=nccl,
            target_version=target_version,
        )
        times["emit"] = time.perf_counter() - t
        placement.stats.seconds |= times
        return SolveResult(spec, topo, placement, report, manifests, target or DEFAULT_TARGET)


def named(source, build: Callable[..., list[dict]], *args, **kwargs) -> list[dict]:
    """``build(*args, **kwargs)``, where an object name over its limit is bad input at the spec's
    metadata.name line (the file and line a user can fix)."""
    from placer.model.errors import InputError, NameTooLong
    from placer.model.load import locate

    try:
        return build(*args, **kwargs)
    except NameTooLong as exc:
        raise locate(source, InputError(f"metadata.name: {exc}")) from None


def _count_out_replicas(problem: Problem, progress: Callable[[str], None]) -> None:
    """Replicas beyond what the free matching GPUs can hold are not modelled: a GPU count proves they cannot
    be placed, and modelling 1,024 of them took minutes or ran out of memory."""
    per_replica = sum(p.size * p.instances for p in problem.pools.values())
    eligible = frozenset().union(*(p.eligible for p in problem.pools.values()))
    free = sum(len(problem.topology.nodes[i].free_gpus) for i in eligible)
    fit = free // per_replica if per_replica else problem.replicas
    if fit >= problem.replicas:
        return
    with_gpus = sum(1 for node in problem.topology.nodes if node.gpus)  # a CPU-only node is never eligible
    matching = "" if len(eligible) == with_gpus else " matching the pools' GPU selectors"
    progress(
        f"at most {fit} of {problem.replicas} replica(s) can fit: {free} free GPUs{matching}, {per_replica} per replica"
    )
    problem.replicas = max(fit, problem.min_replicas)


def build_inputs(
    spec_path: Path | str, spec: ServingTopology, cluster_path: Path, cluster, times: dict[str, float] | None = None
) -> tuple[Topology, Problem]:
    """Topology and problem (their build times into ``times``); input errors found here are attributed to
    their file and line."""
    from placer.model.errors import InputError
    from placer.model.load import locate
    from placer.solver.problem import build_problem
    from placer.topology.build import build_topology

    times = {} if times is None else times
    t = time.perf_counter()
    try:
        topo = build_topology(cluster)
    except InputError as exc:
        raise locate(cluster_path, exc) from None
    times["topology"] = time.perf_counter() - t
    t = time.perf_counter()
    try:
        spec.check_router_kind()
        problem = build_problem(spec, topo)
    except InputError as exc:
        raise locate(spec_path, exc) from None
    times["problem"] = time.perf_counter() - t
    return topo, problem


@dataclass
class FleetSolveResult:
    """A batch: what was placed (with the checker's report and manifests each) and what was not."""

    fleet: object  # placer.solver.fleet.FleetResult
    topology: Topology  # the cluster as the solver saw it (kept GPUs free, untouched deployments busy)
    reports: list[Report]  # per placed deployment, in fleet.placed order
    manifests: list[dict]  # every placed deployment's objects, deployments by namespace/name
    notes: list[str]
    targets: dict[str, str]  # namespace/name -> the --target of its manifests (what runs, else given/default)

    @property
    def target(self) -> str | None:
        """The one --target every deployment's manifests are for; None when they differ."""
        found = set(self.targets.values())
        return found.pop() if len(found) == 1 else None

    def yaml(self) -> str:
        from placer.emit.manifests import to_yaml

        return to_yaml(self.manifests)

    def json(self) -> str:
        from placer.emit.manifests import to_json_list

        return to_json_list(self.manifests)

    def slo_warnings(self) -> list[str]:
        """slo_warnings of every placed deployment, each named."""
        return [
            f"{p.deployment.key}: {w}"
            for p in self.fleet.placed  # type: ignore[attr-defined]
            for w in [
                *slo_warnings(p.deployment.spec, self.topology, p.placement),
                *imex_warnings(p.deployment.spec, self.topology, p.placement, self.targets.get(p.deployment.key)),
            ]
        ]


def run_fleet(
    spec_paths: list[Path],
    cluster_path: Path,
    options: SolveOptions,
    keep_paths: Sequence[Path] = (),
    progress: Callable[[str], None] = lambda _m: None,
    target: str | None = None,
    nccl: bool | None = None,
    namespace: str | None = None,
    target_version: str | None = None,
    one_target: Callable[[dict[str, str]], None] | None = None,
) -> FleetSolveResult:
    """Several specs (files, multi-document files, directories) and what already runs (``keep_paths``)
    placed on one cluster: load -> topology -> keep -> fleet solve -> verify all together -> emit.
    ``one_target`` checks each deployment's --target (namespace/name -> target) before anything is solved:
    a batch whose targets cannot be printed together is bad input, found before the solve, not after."""
    with LongLived() as long_lived:
        return _run_fleet(
            spec_paths,
            cluster_path,
            options,
            keep_paths,
            progress,
            target,
            nccl,
            namespace,
            target_version,
            long_lived,
            one_target,
        )


def _run_fleet(
    spec_paths: list[Path],
    cluster_path: Path,
    options: SolveOptions,
    keep_paths: Sequence[Path],
    progress: Callable[[str], None],
    target: str | None,
    nccl: bool | None,
    namespace: str | None,
    target_version: str | None,
    long_lived: LongLived,
    one_target: Callable[[dict[str, str]], None] | None = None,
) -> FleetSolveResult:
    from placer.emit.manifests import build_manifests, without_repeats
    from placer.emit.readback import load_running
    from placer.emit.targets.versions import check_version
    from placer.model.errors import InputError
    from placer.model.load import load_cluster, load_specs, locate
    from placer.solver.fleet import Deployment, check_unique, solve_fleet
    from placer.solver.keep import plan_keep
    from placer.topology.build import build_topology

    started = time.perf_counter()
    spec_paths, cluster_path, keep_paths = (
        [Path(p) for p in spec_paths],
        Path(cluster_path),
        [Path(p) for p in keep_paths],
    )
    given = [item for p in spec_paths for item in load_specs(p)]
    if namespace is not None:
        given = [(in_namespace(s, namespace), src) for s, src in given]
    cluster = load_cluster(cluster_path)
    try:
        topo = build_topology(cluster)
    except InputError as exc:
        raise locate(cluster_path, exc) from None
    notes: list[str] = []
    kept: dict = {}
    base = topo
    running = load_running(keep_paths) if keep_paths else []
    if keep_paths:
        plan = plan_keep(running, [s for s, _ in given], topo)
        base, kept = plan.topology, plan.kept
        notes += [
            f"{key}: not kept (gone from the spec, its shape changed, or its node is unschedulable): {', '.join(v)}"
            for key, v in plan.dropped.items()
        ]
        notes += [f"{r.key}: running, not given as a spec: left as it is" for r in plan.untouched]
    deployments = [Deployment(s, src, kept.get(f"{s.metadata.namespace}/{s.metadata.name}")) for s, src in given]
    check_unique(deployments)
    targets = targets_for(target, [d.key for d in deployments], running)
    for chosen in sorted(set(targets.values())):  # bad input before any solving
        check_version(chosen, target_version)
    if one_target is not None:
        one_target(targets)
    for d in deployments:  # input errors first, attributed to their file, before any solving
        _check_buildable(d, base)
    long_lived.keep()  # the cluster and the specs outlive the batch
    progress(
        f"cluster {topo.name}: {len(topo.nodes)} nodes, {sum(len(n.free_gpus) for n in base.nodes)} free GPUs; "
        f"placing {len(deployments)} deployment(s)"
        + (f", {sum(1 for d in deployments if d.kept)} with running instances kept" if keep_paths else "")
        + "..."
    )
    result = solve_fleet(deployments, base, _wall_left(options, started), progress=progress)
    priced = [p.placement.stats.objective for p in result.placed]
    reports = verify_fleet(base, [(p.deployment.spec, p.placement) for p in result.placed])
    verify_kept(running, [(p.deployment.spec, p.placement) for p in result.placed], topo)
    result.cost = sum(r.total_units for r in reports)  # the checker's figure, as for a single spec
    if result.bound is not None and priced != [r.total_units for r in reports]:
        # the bound is in the solver's figures, which some placement's own links did not match: it bounds
        # nothing the checker priced (the single-solve gate does the same)
        result.bound = None
        notes.append("the solver's figures differ from the checker's for some placement: no lower bound claimed")
    by_key = {p.deployment.key: (p, r) for p, r in zip(result.placed, reports, strict=True)}
    built: dict[str, list[dict]] = {}
    # By namespace/name, not as given: `placer solve specs/*.yaml` gets its files in the shell's collation
    # order, which follows the locale, and the same specs must print the same bytes (the record is in
    # placement order, which does not depend on how the specs were given either).
    for d in sorted(deployments, key=lambda d: (d.spec.metadata.namespace, d.spec.metadata.name)):
        if d.key in by_key:
            p, report = by_key[d.key]
            built[d.key] = named(
                d.source, build_manifests, d.spec, base, p.placement, report, targets[d.key], nccl, target_version
            )
    notes += _grove_refusals(running, built, targets, base)
    manifests = [doc for docs in built.values() for doc in docs]
    return FleetSolveResult(result, base, reports, without_repeats(manifests), notes, targets)


def _clock_notes(*results) -> list[str]:
    """The clock note, once, when the wall-clock guard ended anything in these batch solves (their reasons
    included): what was said then depends on the machine."""
    from placer.solver.options import CLOCK_NOTE

    return [CLOCK_NOTE] if any(CLOCK_NOTE in r.notes for r in results) else []


def run_plan(running, pending, topo: Topology, options: SolveOptions, cut: float | None = None, scoped: bool = True):
    """``placer plan`` on loaded inputs: a placer.solver.plan.PlanResult. ``scoped=False`` puts every running
    deployment in the model from the start (what the benchmark compares the scoped model with)."""
    from placer.solver.plan import plan

    return plan(running, pending, topo, options, cut, scoped=scoped)


def _check_buildable(d, topo: Topology) -> None:
    from placer.model.errors import InputError
    from placer.model.load import locate
    from placer.solver.problem import check_pool_fits, eligible_nodes

    try:
        d.spec.check_router_kind()
        for name, pool in d.spec.pools.items():
            check_pool_fits(topo, name, pool, eligible_nodes(topo, pool))
    except InputError as exc:
        raise locate(d.source, exc) from None


class LongLived:
    """Python's cycle collector kept off what outlives a run. Loading and building make millions of objects
    that live as long as the run and almost no garbage, and every full collection walks every live object:
    a solve on 100k GPUs spent ~2 of 9 CPU s in collections walking the cluster, a batch made hundreds of
    collections (bench/NOTES.md). So collection is paused from entry to ``keep`` (the inputs are being
    built), what is alive at ``keep`` is set aside (gc.freeze) and collection resumes for the run's
    short-lived objects; at the end everything is given back and, where the caller collects, collected once
    (a full pass, 0.1-0.5 s at 100k GPUs, which the CLI, collecting nothing, does not pay), so the caller's
    process keeps nothing frozen and no garbage of the run. A process that freezes objects itself is left
    alone."""

    def __enter__(self) -> LongLived:
        self.owned = not gc.get_freeze_count()
        self.collecting = gc.isenabled()
        if self.owned:
            gc.freeze()
            gc.disable()
        return self

    def keep(self) -> None:
        """What is alive now outlives the run: set aside, and collection resumes."""
        if self.owned:
            gc.freeze()
            if self.collecting:
                gc.enable()

    def __exit__(self, *_exc) -> None:
        if self.owned:
            gc.unfreeze()
            if self.collecting:
                gc.enable()
                # Unfrozen objects join the oldest generation uncounted, so no collection would come for
                # the run's garbage soon, and the next run would freeze it again: one pass now.
                gc.collect()


def in_namespace(spec: ServingTopology, namespace: str) -> ServingTopology:
    """``--namespace``: the spec with its namespace replaced, so objects, records and the spec annotation all
    carry it. A namespace that is no DNS label is bad input here too (model_copy does not validate)."""
    from placer.model.k8s import check_namespace_option

    check_namespace_option(namespace)
    return spec.model_copy(update={"metadata": spec.metadata.model_copy(update={"namespace": namespace})})


def _grove_refusals(
    running: Sequence[Running], built: dict[str, list[dict]], targets: dict[str, str], topo: Topology
) -> list[str]:
    """Under --keep with grove, a running replica's PodCliqueSet whose immutable fields the re-solve changes:
    Grove's update webhook will refuse it at apply time, so say so now, with what to do. What ran is
    rebuilt from its record or manifests (a bare pod list does not say which cliques its pods came from)."""
    from placer.emit.manifests import build_manifests
    from placer.emit.targets.grove import refused_updates
    from placer.model.running import running_placement

    out = []
    for run in running:
        if run.key not in built or targets.get(run.key) != "grove" or run.spec is None:
            continue
        before_pl = running_placement(run, topo.name)
        before = build_manifests(run.spec, topo, before_pl, check_fleet_one(topo, run.spec, before_pl), "grove")
        out += [f"{run.key}: {c}" for c in refused_updates(before, built[run.key])]
    return out


def targets_for(given: str | None, keys: Sequence[str], running: Sequence[Running]) -> dict[str, str]:
    """The --target of each deployment to print (by namespace/name): what its running objects were written
    for, so new objects never start beside another scheduler's; else the one given, else the default.
    Running deployments not printed do not count. A --target that differs from what one of them runs is
    refused: its old objects would keep running beside the new ones."""
    from placer.emit.targets import DEFAULT_TARGET
    from placer.model.errors import InputError

    written = {r.key: r for r in running if r.target is not None}
    out = {}
    for key in keys:
        run = written.get(key)
        if given is not None and run is not None and run.target != given:
            raise InputError(
                f"--target {given}: {key} runs from objects written for --target {run.target} ({run.source}); "
                f"the new objects would run beside the old ones under another scheduler. Give -t {run.target} "
                "(or leave --target out to follow what runs), or place it anew without --keep"
            )
        out[key] = given or (run.target if run is not None else DEFAULT_TARGET)
    return out


def _wall_left(options: SolveOptions, started: float) -> SolveOptions:
    """The wall-clock guard counts from the start of the run, loading and model building included, so the
    whole process stays within it (plus checking and printing)."""
    return replace(options, wall_limit_s=max(0.05, options.wall_s() - (time.perf_counter() - started)))


@dataclass
class AutoscaleResult:
    """One ``placer autoscale`` decision and what applying it takes. ``apply``: the objects that are new or
    changed (the incremental stream); ``full``: the whole desired set (for ``kubectl apply --prune
    --applyset``); ``prune``: identities (kind.group, namespace, name) of the objects to delete."""

    spec: ServingTopology  # with the decided counts
    decision: Decision
    observed: dict[str, Observed]
    apply: list[dict]
    full: list[dict]
    prune: list[tuple[str, str, str]]
    moves: list[str]
    placement: Placement | None  # the new placement; None when nothing changed
    target: str  # the --target of the objects (what runs was written for, else the one given, else the default)

    def record(self) -> dict:
        from placer.solver.autoscale import decision_record

        objects = {
            "apply": ["/".join(k for k in _key(d) if k) for d in self.apply],
            "prune": ["/".join(k for k in key if k) for key in self.prune],
            "unchanged": [],
        }
        changed = {_key(d) for d in self.apply}
        objects["unchanged"] = ["/".join(k for k in _key(d) if k) for d in self.full if _key(d) not in changed]
        return decision_record(self.spec, self.decision, self.observed, objects, self.moves)


def run_autoscale(
    spec_path: Path,
    cluster_path: Path,
    keep_paths: Sequence[Path],
    now: float,
    state: State,
    options: SolveOptions,
    allow_moves: bool = False,
    target: str | None = None,
    nccl: bool | None = None,
    target_version: str | None = None,
    progress: Callable[[str], None] = lambda _m: None,
    namespace: str | None = None,
) -> AutoscaleResult:
    """Decide (placer.solver.autoscale.decide) on the telemetry of the cluster file, then place what the
    decision adds with the ``--keep`` machinery: running instances pinned, new ones placed next to them,
    instances past the new counts dropped. Raises InfeasibleError when the scale-out does not fit without
    moving what runs (and, with ``allow_moves``, not even re-placing the deployment whole)."""
    from placer.emit.manifests import build_manifests
    from placer.emit.readback import load_running
    from placer.emit.targets.versions import check_version
    from placer.model.errors import InfeasibleError, InputError
    from placer.model.load import load_cluster, load_spec, locate
    from placer.model.running import running_placement
    from placer.solver.fleet import Deployment, solve_fleet
    from placer.solver.keep import plan_keep
    from placer.topology.build import build_topology

    started = time.perf_counter()
    spec = load_spec(spec_path)
    if namespace is not None:  # as solve -n placed it
        spec = in_namespace(spec, namespace)
    key = f"{spec.metadata.namespace}/{spec.metadata.name}"
    if spec.scaling is None and all(p.scaling is None for p in spec.pools.values()):
        raise InputError(f"{spec_path}: {key} has no scaling policy (scaling, or pools.<name>.scaling)")
    if state.deployment is not None and state.deployment != key:
        raise InputError(f"--state: the decision record is of {state.deployment}, not of {key} ({spec_path})")
    cluster = load_cluster(cluster_path)
    try:
        topo = build_topology(cluster)
    except InputError as exc:
        raise locate(cluster_path, exc) from None
    running = load_running(keep_paths)
    mine = next((r for r in running if r.key == key), None)
    if mine is None or not mine.instances:
        elsewhere = sorted(r.key for r in running if r.key.split("/")[1] == spec.metadata.name and r.instances)
        if elsewhere:  # placed with solve -n: say where, rather than send them to place it twice
            where = ", ".join(elsewhere)
            raise InputError(
                f"--keep: nothing of {key} runs there, but {where} does: give its namespace with -n "
                f"(-n {elsewhere[0].split('/')[0]})"
            )
        raise InputError(f"--keep: nothing of {key} runs there; place it first with placer solve")
    metrics = {n.name: n.metrics for n in cluster.nodes}
    shape = shape_of(mine.instances, spec)
    observed = observe(mine.instances, metrics)
    decision = decide(spec, shape, observed, state, now)
    what = " ".join(part for part in (decision.action, decision.scope) if part)
    progress(f"{key}: {what} ({decision.reason})".replace(" ()", ""))
    before_spec, after_spec = scaled_spec(spec, shape), scaled_spec(spec, decision.after)
    emit = {"target": targets_for(target, [key], [mine])[key], "nccl": nccl, "target_version": target_version}
    check_version(emit["target"], target_version)
    keep = plan_keep(running, [before_spec], topo)
    before_pl = running_placement(mine, topo.name)
    if mine.stats is not None:  # regenerate the objects as they were printed, solver status included
        before_pl = replace(before_pl, stats=mine.stats)
    # As they were printed: with or without placer's NCCL values as the running manifests say (a record does
    # not), so that asking for the other now shows every engine object as changed.
    as_printed = emit if mine.nccl is None else emit | {"nccl": mine.nccl}
    before = build_manifests(
        before_spec, keep.topology, before_pl, check_fleet_one(keep.topology, before_spec, before_pl), **as_printed
    )
    if decision.action == "none":
        return AutoscaleResult(before_spec, decision, observed, [], before, [], [], None, emit["target"])
    # The instances the decision drops give their GPUs back (a shift's new instance may take them): the
    # cluster file may list them busy when it was imported from the running pods.
    dropped = [
        inst
        for (k, pool, i), inst in mine.instances.items()
        if k >= decision.after.replicas or i >= decision.after.instances.get(pool, 0)
    ]
    freed: dict[int, list[int]] = {}
    for inst in dropped:
        for pod in inst.pods:
            freed.setdefault(topo.node_by_name(pod.node).index, []).extend(pod.gpus)
    keep = plan_keep(running, [after_spec], topo.with_released(freed))
    result = solve_fleet(
        [Deployment(after_spec, str(spec_path), keep.kept.get(key))], keep.topology, _wall_left(options, started)
    )
    pinned = not result.unplaced
    if result.unplaced and allow_moves:
        progress(f"{key}: does not fit with every running instance pinned; re-placing it whole (--allow-moves)")
        result = solve_fleet(
            [Deployment(after_spec, str(spec_path), None)], keep.topology, _wall_left(options, started)
        )
    if result.unplaced and not allow_moves:  # would moving its running instances help? Say so only if it would
        moved = solve_fleet([Deployment(after_spec, str(spec_path), None)], keep.topology, _wall_left(options, started))
        hint = ["--allow-moves lets running instances of this deployment move to make room"]
        reasons = [*result.unplaced[0].reasons, *hint] if moved.placed else moved.unplaced[0].reasons
        clock = _clock_notes(result, moved)
        raise InfeasibleError(f"{key}: the {decision.action} of {decision.scope} cannot be placed", reasons + clock)
    if result.unplaced:
        raise InfeasibleError(
            f"{key}: the {decision.action} of {decision.scope} cannot be placed",
            result.unplaced[0].reasons + _clock_notes(result),
        )
    placement = result.placed[0].placement
    report = verify_fleet(keep.topology, [(after_spec, placement)])[0]
    if pinned:
        verify_kept(running, [(after_spec, placement)], topo)
    after = named(spec_path, build_manifests, after_spec, keep.topology, placement, report, **emit)
    if emit["target"] == "grove":
        from placer.emit.targets.grove import refused_updates

        for refused in refused_updates(before, after):
            progress(f"{key}: warning: {refused}")
    moves = _moves(mine.instances, placement)
    return AutoscaleResult(after_spec, decision, observed, *_diff(before, after), moves, placement, emit["target"])


def check_fleet_one(topo: Topology, spec: ServingTopology, placement: Placement) -> Report:
    """The checker's report on what runs (not refused: placer did not place it in this call)."""
    from placer.check.gate import check_fleet

    return check_fleet(topo, [(spec, placement)])[0]


def _key(doc: dict) -> tuple[str, str, str]:
    from placer.emit.applyset import identity

    return identity(doc)


def _diff(before: list[dict], after: list[dict]) -> tuple[list[dict], list[dict], list[tuple[str, str, str]]]:
    """(new or changed objects, in output order; the whole desired set; identities gone, sorted)."""
    import json

    old = {_key(d): json.dumps(d, sort_keys=True) for d in before}
    apply = [d for d in after if old.get(_key(d)) != json.dumps(d, sort_keys=True)]
    gone = sorted(set(old) - {_key(d) for d in after})
    return apply, after, gone


def _moves(instances: dict, placement: Placement) -> list[str]:
    """Running instances that the new placement puts elsewhere (only ever with --allow-moves)."""
    now = {(r.index, i.pool, i.index): i.pods for r in placement.replicas for i in r.instances}
    return [
        f"replica {k} {pool}-{i}"
        for (k, pool, i), inst in sorted(instances.items())
        if (k, pool, i) in now and now[(k, pool, i)] != inst.pods
    ]
