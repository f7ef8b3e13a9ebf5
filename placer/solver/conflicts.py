"""Why nothing fits: the smallest set of rules that cannot hold together, in operators' words, and a
relaxation that is proven to make the request fit.

Phase 1 checks each rule on its own against the cluster: a pool's GPU selector, its packing level (how
many of its TP groups fit at that level at all), the total GPU need, each replica-level rule (transfer floor,
router proximity) and the router's own CPU/memory. A rule that fails alone is a conflict by itself and is
reported with the numbers (subject -> count -> limit) and the nearest relaxation. Phase 2, when every rule
fits alone, runs a deletion filter over the relaxable rules (transfer floor, router proximity, spread,
minReplicas): drop a rule, re-solve; if still infeasible the rule was not needed for the conflict. What
remains is a minimal conflicting set; for each of its rules placer searches the mildest relaxation that
makes the request feasible (a lower floor, a broader level, fewer replicas) and reports it only when a
feasibility check confirms it: the greedy's placement, accepted by the checker, or else a CP-SAT solve.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from placer.model.errors import InfeasibleError
from placer.model.levels import LEVEL_RANK, LEVEL_WORDS, LEVELS
from placer.model.spec import ServingTopology
from placer.solver.cells import group_marks, node_group
from placer.solver.figures import free_in
from placer.solver.layout import layout
from placer.solver.options import GREEDY_UNITS_PER_S, WALL_FACTOR, WALL_SLACK_S, Budget, run_solver
from placer.solver.problem import Problem, build_problem


@dataclass(frozen=True)
class Conflict:
    rule: str  # the spec field at stake, e.g. "pools.prefill.placement.required", "transfer.minBandwidthGBps"
    message: str  # subject -> count -> limit
    relax: str | None  # what would make it fit (verified by a feasibility check where it says so)
    relaxable: str | None = None  # one of the deletion filter's rules (``_present``): its relaxation is searched
    widen: tuple[str, str] | None = None  # (pool, level): the broader packing level ``relax`` offers, counted

    def __str__(self) -> str:
        return self.message + (f" Relax: {self.relax}" if self.relax else "")


def explain_infeasible(problem: Problem, seconds: float = 20.0, within: Budget | None = None) -> list[Conflict]:
    """Phase 1, else phase 2; then a verified relaxation for every relaxable rule in the answer.
    ``within``: the budget this explanation is a share of (a batch's, or the guard a solve gives it): its
    work is charged there, its wall-clock deadline ends the explanation too, and a clock that ends a check
    is marked there."""
    # A work budget (deterministic seconds), like the search's: explaining must not take longer than
    # solving (at 10k GPUs one feasibility solve can take seconds), and the same input names the same rules.
    budget = Budget(seconds, WALL_FACTOR * seconds + WALL_SLACK_S, parent=within)
    found = single_rule_conflicts(problem) or deletion_filter(problem, budget)
    if found and all(c.widen is not None for c in found):  # every rule that fails offers a broader level
        found = _widened(problem, found, budget)
    return [_fewer_replicas(problem, _with_relaxation(problem, c, budget), budget) for c in found]


def _without_widen(c: Conflict) -> Conflict:
    """The conflict with its broader packing level no longer offered (a check refuted it)."""
    assert c.widen is not None and c.relax is not None
    rest = [part for part in c.relax.split("; or ") if part != _widen_text(*c.widen)]
    return replace(c, relax="; or ".join(rest) or None, widen=None)


def _widened(problem: Problem, found: list[Conflict], budget: Budget) -> list[Conflict]:
    """The pools whose packing rules fail, each offered a broader level because enough free GPUs lie there
    for it alone (a count that ignores the pods' CPU and memory, the other rules and the other pools): the
    offers stand only if a feasibility check confirms them all at once. Refuted, every pool is lifted to at
    least the next broader level and checked again (one check a level, not a search per pool, whose
    combinations multiply); withdrawn when none fits. When the budget or the clock leaves a check undecided,
    the levels of that check are offered and said to be unconfirmed."""
    offered = dict(c.widen for c in found if c.widen is not None)
    lowest = min(offered.values(), key=LEVEL_RANK.__getitem__)
    tried: list[dict[str, str]] = []
    for floor in [lowest, *_levels(problem, broader_than=lowest)]:
        levels = {name: max(lv, floor, key=LEVEL_RANK.__getitem__) for name, lv in offered.items()}
        if levels in tried:
            continue
        tried.append(levels)
        fits = _feasible(_required_at(problem.spec, levels), problem, budget)
        if fits is None:  # these levels (the counted ones, or broader ones once those were refuted) unconfirmed
            unconfirmed = " (counted; out of time to confirm it)"
            return [_widened_to(c, levels[c.widen[0]], unconfirmed) for c in found if c.widen is not None]
        if fits:
            return [_widened_to(c, levels[c.widen[0]]) for c in found if c.widen is not None]
    return [_without_widen(c) for c in found]


def _widened_to(c: Conflict, level: str, note: str = "") -> Conflict:
    """The conflict offering ``level`` for its pool instead of the level counted (``note`` said after it)."""
    assert c.widen is not None and c.relax is not None
    name, offered = c.widen
    return replace(c, relax=c.relax.replace(_widen_text(name, offered), _widen_text(name, level) + note))


def _required_at(spec: ServingTopology, levels: dict[str, str]) -> ServingTopology:
    """The spec with these pools' ``placement.required`` set to these levels."""
    pools = dict(spec.pools)
    for name, level in levels.items():
        placement = pools[name].placement.model_copy(update={"required": level})
        pools[name] = pools[name].model_copy(update={"placement": placement})
    return spec.model_copy(update={"pools": pools})


def _widen_text(pool: str, level: str) -> str:
    return f"allow pools.{pool}.placement.required: {level}"


def _fewer_replicas(problem: Problem, c: Conflict, budget: Budget) -> Conflict:
    """A pool that cannot be packed for minReplicas replicas may fit for fewer: the most replicas its
    packing allows, and below, until a feasibility check confirms the whole spec fits with them (other rules may bind
    first, so the count alone is not offered)."""
    name = c.rule.removeprefix("pools.").removesuffix(".placement.required")
    if name not in problem.pools or c.rule != f"pools.{name}.placement.required":
        return c
    plan = problem.pools[name]
    most = groups_that_fit(problem, name, plan.required)[0] // max(1, plan.instances)
    for k in range(min(most, problem.spec.replicas_floor - 1), 0, -1):
        fits = _feasible(_with(problem.spec, "minReplicas", k), problem, budget)
        if fits is None:
            break  # out of time: offer nothing unverified
        if fits:
            return replace(c, relax="; or ".join(r for r in (f"lower minReplicas to {k}", c.relax) if r))
    return c


def _with_relaxation(problem: Problem, c: Conflict, budget: Budget) -> Conflict:
    if c.relaxable is None:
        return c
    return replace(c, relax=_relaxation(problem, c.relaxable, budget))


# ---- phase 1: rules that fail on their own ----------------------------------------------------------


def _maximal_domains(problem: Problem, level: str) -> list[str]:
    """The domains that partition the cluster at ``level``: as broad as ``level`` allows (merged domains
    included), never socket domains unless the level is ``socket``."""
    topo = problem.topology
    rank = LEVEL_RANK[level]
    out = []
    for dom in topo.domains.values():
        if LEVEL_RANK[dom.level] > rank or (dom.level == "socket" and level != "socket"):
            continue
        parent = topo.domains[dom.parent] if dom.parent else None
        if parent is None or LEVEL_RANK[parent.level] > rank:
            out.append(dom.id)
    return sorted(out, key=topo.order.__getitem__)


def _free_in(problem: Problem, pool: str, dom_id: str) -> int:
    """Free GPUs in a domain on the nodes whose GPUs match the pool's selector."""
    dom = problem.topology.domains[dom_id]
    return sum(free_in(problem.topology, n, dom) for n in dom.nodes if n in problem.pools[pool].eligible)


def groups_that_fit(problem: Problem, pool: str, level: str) -> tuple[int, list[tuple[int, str]]]:
    """How many instances of ``pool`` fit at ``level`` on their own, and the free blocks (largest first): an
    upper bound where CPU or memory is shared by instances that span nodes, exact otherwise (a multi-node
    instance's pods on distinct nodes, each node holding as many pods as its GPUs, CPU and memory allow)."""
    plan = problem.pools[pool]
    topo = problem.topology
    if LEVEL_RANK[level] > LEVEL_RANK["node"] and _one_node(problem, pool):
        level = "node"  # its engine runs it on one node whatever the level: count (and show) nodes
    if (
        plan.multi_node
        and plan.tensor_parallel <= (plan.gpus_per_node or 0)
        and LEVEL_RANK[level] >= LEVEL_RANK["node"]
    ):
        level = "spine"  # a whole TP group per node: the rules hold per group, the nodes may be anywhere
    total = 0
    blocks = []
    for dom_id in _maximal_domains(problem, level):
        free = _free_in(problem, pool, dom_id)
        if free == 0:
            continue
        blocks.append((free, dom_id))
        if plan.multi_node:
            g = plan.gpus_per_node or 1
            nodes = [n for n in topo.domains[dom_id].nodes if n in plan.eligible]
            slots = [min(len(topo.nodes[n].free_gpus) // g, _pods_room(plan, topo.nodes[n])) for n in nodes]
            total += _distinct_node_groups(slots, plan.node_count or 1)
        elif level in ("node", "socket") or topo.domains[dom_id].level in ("node", "socket"):
            total += _unit_groups(problem, pool, dom_id, level)
        else:
            total += free // plan.size
    blocks.sort(key=lambda b: (-b[0], topo.order[b[1]]))
    return total, blocks


def _distinct_node_groups(slots: list[int], nodes: int) -> int:
    """The most instances of ``nodes`` pods each, no two pods of one instance on one node, that nodes holding
    ``slots`` pods each can host: the largest m with sum(min(slots, m)) >= nodes * m (a node gives each
    instance at most one pod). Counting slots alone took two pods on one node for a two-node instance."""
    most = sum(slots) // nodes
    while most and sum(min(c, most) for c in slots) < nodes * most:
        most -= 1
    return most


def _one_node(problem: Problem, name: str) -> bool:
    """An instance that must sit on one node whatever its required level: an engine preset runs an instance
    that fits the largest matching node on one node (``solver.layout``)."""
    plan = problem.pools[name]
    return not plan.multi_node and layout(problem.topology, problem.spec.pools[name], plan.eligible)[2]


def _unit_groups(problem: Problem, pool: str, dom_id: str, level: str) -> int:
    """Instances that fit one node (or socket) each, inside one domain."""
    plan = problem.pools[pool]
    topo = problem.topology
    dom = topo.domains[dom_id]
    count = 0
    for n in dom.nodes:
        if n not in plan.eligible:
            continue
        node = topo.nodes[n]
        if level == "socket" and len(node.sockets) > 1:
            on_node = 0
            for s in node.sockets:
                if dom.socket is None or dom.socket == s:
                    on_node += sum(1 for g in node.free_gpus if node.gpu(g).socket == s) // plan.size
        else:
            on_node = len(node.free_gpus) // plan.size
        count += min(on_node, _pods_room(plan, node))
    return count


def _pods_room(plan, node) -> int:
    """How many of the pool's pods the node's free CPU and memory hold (the model counts both per node)."""
    room = [node.cpu_free_m // plan.cpu_m] if plan.cpu_m else []
    room += [node.memory_free_bytes // plan.memory_bytes] if plan.memory_bytes else []
    return min(room, default=1 << 30)


def _cpu_text(millicores: int) -> str:
    """A CPU quantity as a request would write it: whole cores, else millicores (never rounded up)."""
    return f"{millicores // 1000}" if millicores % 1000 == 0 else f"{millicores}m"


def _memory_text(size: int) -> str:
    """A memory quantity as a request would write it, rounded down: Gi when whole, else Mi."""
    return f"{size // 2**30}Gi" if size % 2**30 == 0 else f"{size // 2**20}Mi"


def _resource_conflict(problem: Problem, name: str) -> Conflict | None:
    """A pod that no node with room for its GPUs can hold for CPU or memory: the cause, where the packing
    message would blame GPUs ("cannot be packed") for what a resources.requests line did. The relaxation is
    read off one node, the one that asks the mildest cut of the requests, so that node then holds a pod."""
    plan = problem.pools[name]
    topo = problem.topology
    gpus = plan.gpus_per_node if plan.multi_node else plan.slot
    roomy = [topo.nodes[n] for n in sorted(plan.eligible) if len(topo.nodes[n].free_gpus) >= (gpus or 1)]
    if not roomy or any(_pods_room(plan, node) >= 1 for node in roomy):
        return None
    short = []
    if plan.cpu_m:
        most = max(roomy, key=lambda node: (node.cpu_free_m, -node.index))
        if most.cpu_free_m < plan.cpu_m:
            short.append(f"cpu {_cpu_text(plan.cpu_m)} (the most free is {_cpu_text(most.cpu_free_m)}, on {most.name})")
    if plan.memory_bytes:
        most = max(roomy, key=lambda node: (node.memory_free_bytes, -node.index))
        if most.memory_free_bytes < plan.memory_bytes:
            short.append(
                f"memory {_memory_text(plan.memory_bytes)} (the most free is {_memory_text(most.memory_free_bytes)}, "
                f"on {most.name})"
            )
    if not short:  # each fits somewhere, but never both on one node
        short.append(f"cpu {_cpu_text(plan.cpu_m)} and memory {_memory_text(plan.memory_bytes)} together")

    def kept(node) -> float:  # the share of the requests the node lets a pod keep: the larger, the milder
        shares = [node.cpu_free_m / plan.cpu_m] if plan.cpu_m else []
        shares += [node.memory_free_bytes / plan.memory_bytes] if plan.memory_bytes else []
        return min(shares)

    best = max(roomy, key=lambda node: (kept(node), -node.index))
    lower = []
    if plan.cpu_m and best.cpu_free_m < plan.cpu_m:
        lower.append(("cpu", best.cpu_free_m, _cpu_text(best.cpu_free_m)))
    if plan.memory_bytes and best.memory_free_bytes < plan.memory_bytes:
        lower.append(("memory", best.memory_free_bytes // 2**20 * 2**20, _memory_text(best.memory_free_bytes)))
    resources = problem.spec.pools[name].template.resources

    def written(what: str) -> str:  # a limit stands for a missing request: name the field the spec has
        return f"pools.{name}.template.resources.{'requests' if what in resources.requests else 'limits'}.{what}"

    field = written(lower[0][0]).rsplit(".", 1)[0] if lower else f"pools.{name}.template.resources.requests"

    if any(amount <= 0 for _, amount, _ in lower):  # nothing left to lower to on any node
        relax = f"free {' and '.join(what for what, _, _ in lower)} on a node with {gpus} free matching GPUs"
    else:
        relax = (
            "lower "
            + " and ".join(f"{written(what)} to {text}" for what, _, text in lower)
            + f" or less (what {best.name} has free), or free {' and '.join(w for w, _, _ in lower)} on a node"
        )
    return Conflict(
        field,
        f"{name}: each pod requests {' and '.join(short)}; no node with {gpus} free matching GPU"
        f"{'s' if gpus != 1 else ''} has that much free.",
        relax,
    )


def _shape(problem: Problem, pool: str, count: int) -> str:
    plan = problem.pools[pool]
    groups = f"{count} group{'s' if count != 1 else ''}"
    if plan.multi_node:
        return f"{groups} of {plan.node_count} nodes x {plan.gpus_per_node} GPUs"
    return f"{groups} of {plan.size} GPUs"


def _packing_conflict(problem: Problem, name: str) -> Conflict | None:
    plan = problem.pools[name]
    need = plan.instances * problem.min_replicas
    fit, blocks = groups_that_fit(problem, name, plan.required)
    if fit >= need:
        return None
    where = LEVEL_WORDS[plan.required]
    topo = problem.topology
    wider = any(topo.domains[d].level not in ("node", "socket") for d in _maximal_domains(problem, plan.required))
    if wider and _one_node(problem, name):  # its level has domains of several nodes, which it cannot use
        pool = problem.spec.pools[name]
        why = (
            f"its {pool.pipeline_parallel} pipeline stages share one node without nodeCount"
            if pool.pipeline_parallel > 1 and pool.node_count is None
            else f"its engine runs an instance that fits one node, {plan.size} GPUs, on one node"
        )
        where = f"one node ({why}, whatever placement.required says)"
    largest = f"the largest free block is {blocks[0][0]} GPUs ({blocks[0][1]})" if blocks else "no GPU is free"
    message = (
        f"{name} needs {_shape(problem, name, need)}, each inside {where}; "
        f"only {fit} such group{'s' if fit != 1 else ''} fit{'s' if fit == 1 else ''} ({largest})."
    )
    relax = []
    widen = None
    if _one_node(problem, name):  # a broader level changes nothing for it; splitting it over nodes may
        split = _even_split(problem, name, need)
        if split is not None:
            relax.append(f"split each instance over nodes: {split}")
    else:
        for level in _levels(problem, broader_than=plan.required):
            if groups_that_fit(problem, name, level)[0] >= need:
                relax.append(_widen_text(name, level))
                widen = (name, level)
                break
    more = _nearest_room(problem, name)
    if more is not None:
        one_more = " for one more group" if need - fit > 1 else ""
        relax.append(f"free {more[0]} more GPU{'s' if more[0] != 1 else ''} in {more[1]}{one_more}")
    return Conflict(f"pools.{name}.placement.required", message, "; or ".join(relax) or None, widen=widen)


def _fits_with(problem: Problem, name: str, need: int, update: dict) -> bool:
    """Whether ``need`` instances of the pool fit on their own once its spec fields take ``update``: the
    problem is rebuilt (layout and candidates included), so a suggested relaxation is one that counts."""
    pool = problem.spec.pools[name]
    fields = {k: pool.placement.model_copy(update=v) if k == "placement" else v for k, v in update.items()}
    pools = {**problem.spec.pools, name: pool.model_copy(update=fields)}
    try:
        relaxed = build_problem(problem.spec.model_copy(update={"pools": pools}), problem.topology)
    except (InfeasibleError, ValueError):
        return False
    return groups_that_fit(relaxed, name, relaxed.pools[name].required)[0] >= need


def _even_split(problem: Problem, name: str, need: int) -> str | None:
    """The fewest nodes an instance may be split over evenly (each part a multiple of TP, or PP 1), at the
    narrowest level above a node that holds them, for ``need`` instances to fit: what nodeCount /
    gpusPerNode would make its engine run it across nodes. Each try rebuilds the problem (0.1 s at 10k
    GPUs), so a split is tried at the broadest level first and narrowed only when it fits there."""
    pool = problem.spec.pools[name]
    size = pool.gpus_per_instance
    required = pool.placement.required
    levels = [required] if LEVEL_RANK[required] > LEVEL_RANK["node"] else _levels(problem, broader_than="node")
    for nodes in range(2, size + 1):
        per = size // nodes
        if size % nodes or (per % pool.tensor_parallel and pool.pipeline_parallel != 1):
            continue

        def fits(level: str, nodes: int = nodes, per: int = per) -> bool:
            update = {"node_count": nodes, "gpus_per_node": per, "placement": {"required": level}}
            return _fits_with(problem, name, need, update)

        if fits(levels[-1]):
            level = next((lv for lv in levels[:-1] if fits(lv)), levels[-1])
            where = "" if level == required else f", placement.required: {level}"
            return f"pools.{name}.nodeCount: {nodes}, gpusPerNode: {per}{where}"
    return None


def _nearest_room(problem: Problem, name: str) -> tuple[int, str] | None:
    """The fewest GPUs to free on one node for one more instance there (with that node's domain), for a
    pool whose instances each sit on one node; None when they may span nodes or no node could hold another
    (for GPUs, or for the CPU and memory its pods request)."""
    plan = problem.pools[name]
    if plan.multi_node:
        return None  # its pods sit on several nodes: one node's freed GPUs are not one more instance
    levels = {problem.topology.domains[d].level for d in _maximal_domains(problem, plan.required)}
    if levels != {"node"} and not _one_node(problem, name):  # e.g. an NVLink domain that is one DGX node
        return None
    topo = problem.topology
    best = None
    for n in sorted(plan.eligible, key=lambda n: topo.order[topo.node_domain[n]]):
        free = len(topo.nodes[n].free_gpus)
        short = plan.size - free % plan.size
        fits = (free // plan.size + 1) * plan.size <= len(topo.nodes[n].gpus)
        held = free // plan.size < _pods_room(plan, topo.nodes[n])  # its CPU and memory hold one more pod
        if fits and held and (best is None or short < best[0]):
            best = (short, topo.node_domain[n])
    return best


def single_rule_conflicts(problem: Problem) -> list[Conflict]:
    topo = problem.topology
    out: list[Conflict] = []
    total_need = 0
    for name, plan in sorted(problem.pools.items()):
        free = sum(len(topo.nodes[n].free_gpus) for n in plan.eligible)
        need = plan.size * plan.instances * problem.min_replicas
        total_need += need
        if not plan.eligible:
            out.append(Conflict(f"pools.{name}.gpu", no_matching_gpus(problem, name), f"change pools.{name}.gpu"))
            continue
        if need > free:
            out.append(
                Conflict(
                    f"pools.{name}.instances",
                    f"{name} needs {need} GPUs for {problem.min_replicas} replica(s); only {free} matching GPUs "
                    "are free in the whole cluster.",
                    f"lower minReplicas or pools.{name}.instances, or free {need - free} GPUs",
                )
            )
            continue
        found = _resource_conflict(problem, name) or _packing_conflict(problem, name)
        if found is not None:
            out.append(found)
    union = frozenset().union(*(plan.eligible for plan in problem.pools.values()))
    free_any = sum(len(topo.nodes[n].free_gpus) for n in union)
    # Said beside a pool's packing rule (relaxing that alone cannot help), not beside a pool's own shortage or
    # selector, which already imply it.
    short_alone = any(c.rule.endswith((".instances", ".gpu")) for c in out)
    if not short_alone and len(problem.pools) > 1 and total_need > free_any:
        out.append(
            Conflict(
                "replicas",
                f"{problem.min_replicas} replica(s) need {total_need} GPUs across all pools; only {free_any} "
                "matching GPUs are free.",
                f"lower minReplicas or instances, or free {total_need - free_any} GPUs",
            )
        )
    # A pool that can use no GPU at all (its selector, or CPU / memory) leaves its replica-level rules
    # nothing to hold: saying "no domain has room" for them too, and "drop the rule", would mislead.
    starved = {
        c.rule.split(".")[1] for c in out if c.rule.endswith((".gpu", ".resources.requests", ".resources.limits"))
    }
    for coloc in problem.colocations:
        if not coloc.containers and not starved & set(coloc.pools):  # else a consequence, already said
            out.append(_colocation_conflict(problem, coloc))
    if problem.has_router and not problem.router_nodes:
        out.append(
            Conflict(
                "router",
                f"the router needs {problem.router_cpu_m}m CPU and {problem.router_memory_bytes // 2**20} MiB of "
                "memory on one node; no node has that much free.",
                "lower router.cpu / router.memory",
            )
        )
    # Alone, a spread with too few domains is phase 2's to find, with a solve behind each relaxation (and
    # minReplicas beside it). Beside another rule that fails alone, phase 2 never runs: say it here, or the
    # other rule's relaxation is offered as if it made the request fit.
    spread = _spread_conflict(problem, union) if out else None
    return [*out, spread] if spread is not None else out


def _spread_cells(problem: Problem, nodes: frozenset[int], level: str) -> int:
    """How many replicas a spread over ``level`` could keep apart at most: the cells (the checker's
    spread-level domains, placer.solver.cells) holding a free matching GPU. Under socket spread every socket
    of such a node counts, so the figure never undercounts and the conflict below is never false."""
    topo = problem.topology
    cells: set[str] = set()
    for n in nodes:
        if topo.nodes[n].free_gpus:
            cells.update(group_marks(topo, level, node_group(topo, level, n)))
    return len(cells)


def _spread_conflict(problem: Problem, nodes: frozenset[int]) -> Conflict | None:
    """More replicas than the spread level has domains with free matching GPUs: no placement keeps them
    apart, whatever else holds. The packing message alone said nothing of it, and its relaxation could not
    make the request fit."""
    level, need = problem.spread_level, problem.min_replicas
    if level is None or need < 2:
        return None
    have = _spread_cells(problem, nodes, level)
    if have >= need:
        return None
    relax = [
        f"spread across {lv} instead of {level}"
        for lv in _levels(problem, narrower_than=level)
        if _spread_cells(problem, nodes, lv) >= need
    ][:1]
    if have:
        relax.append(f"lower minReplicas to {have}")
    return Conflict(
        "spread.level",
        f"{need} replicas, each in a different {level}; only {have} {level} domain{'s' if have != 1 else ''} "
        f"{'have' if have != 1 else 'has'} free matching GPUs.",
        "; or ".join(relax) or "drop spread",
    )


def no_matching_gpus(problem: Problem, name: str) -> str:
    """What the selector asks for, in the spec's words, and what the cluster's schedulable nodes have."""
    product, memory = problem.pools[name].selector
    asked = " with ".join(
        part for part in (f"product {product}" if product else "", f"at least {memory:g} GiB" if memory else "") if part
    )
    have = sorted({(g.product, g.memory_gib) for node in problem.topology.nodes if node.schedulable for g in node.gpus})
    listed = ", ".join(f"{p} ({m:g} GiB)" for p, m in have) or "none"
    return f"{name}: no schedulable node has GPUs of {asked or 'that kind'}; this cluster has {listed}."


def _colocation_conflict(problem: Problem, coloc) -> Conflict:
    need = sum(problem.pools[p].size * problem.pools[p].instances for p in coloc.pools)
    t = problem.spec.transfer
    message = f"{coloc.rule}: no single domain has the {need} free GPUs this requires."
    if coloc.name == "transfer" and t is not None and t.min_bandwidth_gbps:
        offers = _kv_offers(problem, t.min_bandwidth_gbps)
        if offers:
            bw, dom = offers[0]
            message = (
                f"{coloc.rule}: a replica needs {need} GPUs in one domain whose KV path offers "
                f"{t.min_bandwidth_gbps:g} GB/s; the best domain with room offers {bw:g} GB/s ({dom})."
            )
    return Conflict(_rule_field(coloc.name), message, None, _rule_name(coloc.name))


def _rule_name(colocation: str) -> str:
    return "transfer floor" if colocation == "transfer" else "router proximity"


def _rule_field(colocation: str) -> str:
    return "transfer" if colocation == "transfer" else "router.near.level"


# ---- phase 2: a deletion filter over the relaxable rules ---------------------------------------------


def _with(spec: ServingTopology, rule: str, value) -> ServingTopology:
    """The spec with one rule dropped (value None) or set to a milder value."""
    if rule == "transfer floor":
        assert spec.transfer is not None
        update = {"min_bandwidth_gbps": None, "max_level": None} if value is None else value
        return spec.model_copy(update={"transfer": spec.transfer.model_copy(update=update)})
    if rule == "router proximity":
        assert spec.router is not None and spec.router.near is not None
        near = None if value is None else spec.router.near.model_copy(update={"level": value})
        return spec.model_copy(update={"router": spec.router.model_copy(update={"near": near})})
    if rule == "replica spread":
        spread = None if value is None else spec.spread.model_copy(update={"level": value})  # type: ignore[union-attr]
        return spec.model_copy(update={"spread": spread})
    return spec.model_copy(update={"min_replicas": min(1, spec.replicas_floor) if value is None else value})


def _feasible(spec: ServingTopology, problem: Problem, budget: Budget) -> bool | None:
    """True / False when the checks decide it within the budget (phase 1's counts, the greedy's checked
    placement, a CP-SAT solve); None when they could not."""
    from ortools.sat.python import cp_model

    from placer.solver.cpsat.model import PlacementModel
    from placer.solver.greedy import greedy_counted

    if budget.work_left < 0.2 or budget.out():
        return None
    relaxed = build_problem(spec, problem.topology)
    if single_rule_conflicts(relaxed):
        return False
    # Feasible means "minReplicas whole replicas fit": the optional ones do not change the answer, and
    # 1,024 of them made each check a model of millions of variables.
    relaxed.replicas = max(1, relaxed.min_replicas)
    # The greedy places only what every hard rule allows: where it places them all and the checker agrees,
    # that is the answer without a model (on the large spec at 30k DGX GPUs each model took seconds and
    # most of a why-not's memory: bench/NOTES.md, 2026-11-28). Capped at half a work second, so that a
    # greedy that finds nothing leaves the models their budget (it took 0.05-0.1 s there at 100k GPUs).
    found, work = greedy_counted(relaxed, min(budget.greedy_units(), GREEDY_UNITS_PER_S // 2))
    budget.spend_greedy(work)
    if len(found) >= relaxed.replicas and _checked(relaxed, found):
        return True
    pm = PlacementModel(relaxed)
    budget.spend_build(pm.model)
    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = min(10.0, budget.work_left)
    solver.parameters.max_time_in_seconds = max(0.05, budget.wall_left())
    solver.parameters.num_workers = 1
    solver.parameters.cp_model_probing_level = 0
    solver.parameters.symmetry_level = 0
    status = run_solver(solver, pm.model, budget)
    if status == cp_model.INFEASIBLE:
        return False
    return True if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None


def _checked(problem: Problem, found) -> bool:
    """The independent checker's word on the greedy's placement: a relaxation placer offers as verified
    rests on a placement that keeps every rule."""
    from placer.check.verify import check
    from placer.model.placement import Placement, SolveStats
    from placer.solver.search import greedy_outcome

    spec = problem.spec
    replicas = greedy_outcome(problem, found).replicas
    placement = Placement(
        spec.metadata.name, spec.metadata.namespace, problem.topology.name, replicas, SolveStats("feasible")
    )
    return not check(spec, problem.topology, placement).violations


def _present(spec: ServingTopology) -> list[str]:
    out = []
    if spec.transfer is not None and (spec.transfer.min_bandwidth_gbps or spec.transfer.max_level):
        out.append("transfer floor")
    if spec.router is not None and spec.router.near is not None:
        out.append("router proximity")
    if spec.spread is not None and spec.replicas_floor > 1:  # one replica has no other to keep apart from
        out.append("replica spread")
    if spec.replicas_floor > 1:
        out.append("minReplicas")
    return out


def deletion_filter(problem: Problem, budget: Budget) -> list[Conflict]:
    """Keep only the relaxable rules needed for infeasibility: drop each in turn and keep it dropped when
    the rest is still infeasible. The survivors conflict together; dropping any one of them fits, unless a
    check was left undecided (then a rule it could not rule out stays, and the answer says so)."""
    spec = problem.spec
    present = _present(spec)
    everything_off = spec
    for rule in present:
        everything_off = _with(everything_off, rule, None)
    undecided = 0
    everything = _feasible(everything_off, problem, budget)
    if everything is None:
        return [_UNDECIDED]
    if everything is False:
        return [
            Conflict(
                "pools",
                "the pools' TP groups cannot be packed together on the free GPUs at their required levels "
                "(each pool fits on its own, but not all of them at once).",
                "lower instances or minReplicas, allow broader placement.required levels, or free GPUs",
            )
        ]
    needed = list(present)
    for rule in present:
        keep = [r for r in needed if r != rule]
        trial = spec
        for r in present:
            if r not in keep:
                trial = _with(trial, r, None)
        fits = _feasible(trial, problem, budget)
        if fits is False:
            needed = keep
        elif fits is None:  # unknown (out of time) keeps the rule: safe, but then not shown to be needed
            undecided += 1
    out = [Conflict(_field(rule), _describe(problem, rule), None, rule) for rule in needed]
    if undecided:
        out.append(
            Conflict(
                "",
                f"these rules cannot all hold together; {undecided} check(s) ran out of time, so some of them may "
                "not be needed (raise --time-limit to narrow them down).",
                None,
            )
        )
    elif len(out) > 1:
        out.append(
            Conflict(
                "", "these rules cannot all hold together; relaxing any one of them makes a placement possible.", None
            )
        )
    return out


_UNDECIDED = Conflict(
    "",
    "the explanation ran out of time before a check could say which rules conflict (raise --time-limit).",
    None,
)


def _field(rule: str) -> str:
    return {
        "transfer floor": "transfer",
        "router proximity": "router.near.level",
        "replica spread": "spread.level",
        "minReplicas": "minReplicas",
    }[rule]


def _describe(problem: Problem, rule: str) -> str:
    spec = problem.spec
    if rule == "transfer floor":
        return next(c.rule for c in problem.colocations if c.name == "transfer") + "."
    if rule == "router proximity":
        return next(c.rule for c in problem.colocations if c.name == "router") + "."
    if rule == "replica spread":
        assert spec.spread is not None
        return f"{spec.replicas_floor} replicas, each in a different {spec.spread.level}."
    return f"minReplicas {spec.replicas_floor}: that many complete replicas."


# ---- the mildest relaxation that fits ----------------------------------------------------------------


def _levels(problem: Problem, broader_than: str | None = None, narrower_than: str | None = None) -> list[str]:
    """Levels this cluster has domains at (a level merged away everywhere means the same as its
    neighbour), broader than one level or narrower than another, in the order to try them."""
    present = {d.level for d in problem.topology.domains.values()} | {"spine"}
    if broader_than is not None:
        return [lv for lv in LEVELS[LEVEL_RANK[broader_than] + 1 :] if lv in present]
    assert narrower_than is not None
    return [lv for lv in reversed(LEVELS[: LEVEL_RANK[narrower_than]]) if lv in present and lv != "socket"]


_DROP = {
    "transfer floor": "drop the transfer requirement, or free GPUs so one domain can hold a whole replica",
    "router proximity": "drop router.near",
    "replica spread": "drop spread",
    "minReplicas": "free GPUs",
}


def _relaxation(problem: Problem, rule: str, budget: Budget) -> str | None:
    """The mildest change to one rule that a feasibility check confirms makes the request feasible, values
    tried mildest first. A check left undecided (the budget or the clock ended it) never counts as "does
    not fit": a stronger value confirmed after one says that a milder one could not be checked, and with
    none confirmed the answer is "out of time", not "no milder value fits"."""
    spec = problem.spec
    undecided: list[ServingTopology] = []  # the specs whose check the budget or the clock left undecided

    def fits(changed: ServingTopology) -> bool:
        found = _feasible(changed, problem, budget)
        if found is None:
            undecided.append(changed)
        return found is True

    def offer(text: str, why: str = "") -> str:
        if undecided:
            return f"{text} (a milder value could not be checked in time)"
        return f"{text} ({why})" if why else text

    def otherwise() -> str:
        why = "out of time to verify a milder value" if undecided else "no milder value fits on its own"
        return f"{_DROP[rule]} ({why})"

    if rule == "transfer floor":
        t = spec.transfer
        if t is None:  # the implicit prefill -> decode pairing has no floor to lower
            return "free GPUs so that one domain can hold a whole replica's transfer pools"
        if t.min_bandwidth_gbps:
            for floor in _floor_steps(problem, t.min_bandwidth_gbps):
                if fits(_with(spec, rule, {"min_bandwidth_gbps": floor})):
                    return offer(
                        f"lower transfer.minBandwidthGBps to {floor:g}", "the best path a feasible placement offers"
                    )
        if t.max_level:
            for level in _levels(problem, broader_than=t.max_level):
                if fits(_with(spec, rule, {"max_level": level})):
                    return offer(f"allow transfer.maxLevel: {level}")
        return otherwise()
    if rule == "router proximity":
        assert spec.router is not None and spec.router.near is not None
        for level in _levels(problem, broader_than=spec.router.near.level):
            if fits(_with(spec, rule, level)):
                return offer(f"allow router.near.level: {level}")
        return otherwise()
    if rule == "replica spread":
        assert spec.spread is not None
        for level in _levels(problem, narrower_than=spec.spread.level):
            if fits(_with(spec, rule, level)):
                return offer(f"spread across {level} instead of {spec.spread.level}")
        return otherwise()
    for k in range(spec.replicas_floor - 1, 0, -1):
        if fits(_with(spec, rule, k)):
            return offer(f"lower minReplicas to {k}")
    return otherwise()


def _floor_steps(problem: Problem, floor: float) -> list[float]:
    """Candidate floors below the requested one: the KV bandwidths that domains with room offer, highest
    first (a floor between two of them is equivalent to the lower one)."""
    return sorted({bw for bw, _ in _kv_offers(problem, floor)}, reverse=True)


def _kv_offers(problem: Problem, floor: float) -> list[tuple[float, str]]:
    """(KV bandwidth, domain) for every domain with room for a replica's transfer pools whose path is
    slower than ``floor``, best first."""
    from placer.solver.problem import containers_for

    spec = problem.spec
    relaxed = build_problem(_with(spec, "transfer floor", None), problem.topology)
    pair = relaxed.transfer_pair
    if pair is None:
        return []
    offered: list[tuple[float, str]] = []

    def record(dom, bw: float | None) -> bool:
        if bw is not None and bw < floor:
            offered.append((bw, dom.id))
        return False

    containers_for(relaxed, pair, record, {}, kv=True)
    topo = problem.topology
    return sorted(offered, key=lambda o: (-o[0], topo.order[o[1]]))
