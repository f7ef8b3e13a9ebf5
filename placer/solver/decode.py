"""Turn solved CP-SAT values back into named pods: instance counts per candidate become concrete GPUs, with
running (kept) instances given their own GPUs first."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from placer.model.placement import InstancePlacement, Pod, ReplicaPlacement
from placer.solver.cpsat.draws import solved_draws
from placer.solver.cpsat.pods import solved_pieces
from placer.solver.greedy import Lazy
from placer.solver.problem import Candidate, Problem, kept_candidate


def decode(problem: Problem, solver, pm, n_replicas: int) -> tuple[ReplicaPlacement, ...]:
    """Turn one problem's solver values into concrete GPUs (see decode_joint)."""
    kept = problem.kept.instances if problem.kept is not None and problem.kept.hard else {}
    return decode_joint([Part(problem, pm, n_replicas, kept)], solver)[0]


@dataclass
class Part:
    """One problem of a (possibly joint) model to decode; ``pinned`` instances get their own GPUs back."""

    problem: Problem
    pm: object  # placer.solver.cpsat.model.PlacementModel
    n_replicas: int
    pinned: dict[tuple[int, str, int], InstancePlacement]


def decode_joint(parts: list[Part], solver) -> list[tuple[ReplicaPlacement, ...]]:
    """Turn solver values into concrete GPUs: pinned instances first (their own GPUs), then socket-bound
    instances, whole-node ones, multi-node pods, and spanning instances deepest domain first, across every
    problem at once (the laminar order that always fits, since capacity was shared). A spanning candidate
    counted per spread-level group (cpsat.draws) draws each group's GPUs in that group, in the same order,
    into a bank its instances then share."""
    topo = parts[0].problem.topology
    free = Lazy(lambda n: list(topo.nodes[n].free_gpus))  # read per node when first touched: few are
    pods: list[dict[tuple, list[tuple[int, list[int]]]]] = [{} for _ in parts]
    chosen: list[dict[tuple, tuple[int, Candidate]]] = [{} for _ in parts]
    supply: list[dict[tuple, int]] = []
    pieces: list[dict[tuple, list[dict[int, int]]]] = []
    banks: dict[tuple, list[tuple[int, list[int]]]] = {}  # (part, counted key, candidate) -> drawn GPUs
    draws: dict[tuple, tuple[tuple, str, int]] = {}  # (part, draw key) -> (counted key and candidate, group, GPUs)
    for pi, part in enumerate(parts):
        problem, v = part.problem, part.pm.vars  # type: ignore[attr-defined]
        kept_at: dict[tuple, int] = defaultdict(int)  # (replica, pool, candidate) -> pinned instances there
        drawn: dict[tuple, int] = defaultdict(int)  # (selector, node) -> GPUs pinned spanning instances hold
        held: dict[tuple, dict[int, int]] = defaultdict(lambda: defaultdict(int))  # pinned ones', per candidate
        for (k, pool, i), inst in part.pinned.items():
            plan = problem.pools[pool]
            ci = kept_candidate(problem, inst)
            assert ci is not None, "the model refuses a kept instance without a candidate"
            chosen[pi][(k, pool, i)] = (ci, plan.candidates[ci])
            kept_at[(k, pool, ci)] += 1
            pods[pi][(k, pool, i)] = []
            for pod in inst.pods:
                n = topo.node_by_name(pod.node).index
                free[n] = [g for g in free[n] if g not in pod.gpus]
                pods[pi][(k, pool, i)].append((n, list(pod.gpus)))
                if plan.candidates[ci].kind == "pooled":
                    drawn[(plan.selector, n)] += len(pod.gpus)
                    if n not in v.span.tight:
                        held[((k, pool, 0), ci)][n] += len(pod.gpus)
        for (k, pool, i), lits in v.choice.items():
            plan = problem.pools[pool]
            if k >= part.n_replicas or (plan.multi_node and (k, pool, i) in part.pinned):
                continue  # (a counted key stands for all of the pool's instances, pinned or not)
            # counted instances are numbered in candidate order, skipping pinned indices; multi-node ones
            # are already told apart
            taken = sorted(
                (plan.candidates[ci].order, ci)
                for ci, lit in lits.items()
                for _ in range(solver.value(lit) - (0 if plan.multi_node else kept_at[(k, pool, ci)]))
            )
            indices = [i] if plan.multi_node else [j for j in range(plan.instances) if (k, pool, j) not in part.pinned]
            for j, (_order, ci) in zip(indices, taken, strict=True):
                chosen[pi][(k, pool, j)] = (ci, plan.candidates[ci])
        # tight nodes' spanning GPUs are the instances' own pieces (cpsat.pods), given out below
        supply.append(
            {key: 0 if key[1] in v.span.tight else solver.value(p) - drawn[key] for key, p in v.pooled.items()}
        )
        pieces.append(_pieces(problem, v.span, solver, part.pinned))
        for sk in v.draws.by:
            if sk[0][0] >= part.n_replicas:
                continue
            banks[(pi, *sk)] = []
            for g, count in solved_draws(part.pm, solver, sk, held.get(sk, {})).items():
                draws[(pi, (sk[0][0], sk[0][1], -1 - len(draws)))] = (sk, g, count)

    def take(node: int, count: int, socket: int | None = None) -> list[int]:
        avail = [g for g in free[node] if socket is None or topo.nodes[node].gpu(g).socket == socket]
        got = avail[:count]
        assert len(got) == count, "capacity constraints guarantee enough free GPUs"
        free[node] = [g for g in free[node] if g not in got]
        return got

    def rank(item):
        pi, key, cand = item
        kind_rank = {"unit": 0 if cand.level == "socket" else 1, "container": 2, "pooled": 3}[cand.kind]
        return (kind_rank, -topo.domains[cand.domain].depth, cand.order, pi, key)

    todo = [
        (pi, key, cand)
        for pi in range(len(parts))
        for key, (_ci, cand) in chosen[pi].items()
        if key not in parts[pi].pinned
    ]
    todo += [(pi, key, _group_candidate(topo, g)) for (pi, key), (_sk, g, _count) in draws.items()]

    def draw(pi: int, sel: tuple, dom, need: int) -> list[tuple[int, list[int]]]:
        """``need`` spanning GPUs of one selector from the domain's roomy supply, fullest node first."""
        have, got = supply[pi], []
        nodes = sorted(
            (n for n in dom.nodes if have.get((sel, n), 0) > 0),
            key=lambda n: (-have[(sel, n)], topo.order[topo.node_domain[n]]),
        )
        for n in nodes:
            if need == 0:
                break
            k = min(need, have[(sel, n)])
            have[(sel, n)] -= k
            need -= k
            got.append((n, take(n, k)))
        assert need == 0, "pooled supply constraints guarantee the draw"
        return got

    for pi, key, cand in sorted(todo, key=rank):
        part = parts[pi]
        plan = part.problem.pools[key[1]]
        dom = topo.domains[cand.domain]
        if (pi, key) in draws:
            sk, _g, count = draws[(pi, key)]
            banks[(pi, *sk)] += draw(pi, plan.selector, dom, count)
            continue
        if cand.kind == "unit":
            n = dom.nodes[0]
            pods[pi][key] = [(n, take(n, plan.size, dom.socket if dom.level == "socket" else None))]
        elif cand.kind == "container":
            g = plan.gpus_per_node or 0
            nodes = [n for n, y in part.pm.vars.node_of[key].items() if solver.value(y)]  # type: ignore[attr-defined]
            pods[pi][key] = [(n, take(n, g)) for n in sorted(nodes)]
        else:
            sk = ((key[0], key[1], 0), chosen[pi][key][0])
            need, got = plan.size, []
            mine = pieces[pi].get(sk) or [{}]
            for n, g in sorted(mine.pop(0).items()):  # its pods on tight nodes, as the model counted them
                got.append((n, take(n, g)))
                need -= g
            bank = banks.get((pi, *sk))
            got += draw(pi, plan.selector, dom, need) if bank is None else _from_bank(bank, need)
            pods[pi][key] = _merged(got)
    return [_replicas(part, solver, pods[pi], chosen[pi]) for pi, part in enumerate(parts)]


def _group_candidate(topo, group: str) -> Candidate:
    """A group's draw, ranked in the decoder's order like a spanning instance placed in the group."""
    dom = topo.domains[group]
    return Candidate(group, "pooled", dom.level, 0.0, 0, False, topo.order[group])


def _from_bank(bank: list[tuple[int, list[int]]], need: int) -> list[tuple[int, list[int]]]:
    """``need`` GPUs off the front of a candidate's bank (what its groups drew), fullest node first."""
    bank.sort(key=lambda item: -len(item[1]))
    got = []
    while need:
        n, gpus = bank[0]
        k = min(need, len(gpus))
        got.append((n, gpus[:k]))
        if k == len(gpus):
            bank.pop(0)
        else:
            bank[0] = (n, gpus[k:])
        need -= k
    return got


def _merged(got: list[tuple[int, list[int]]]) -> list[tuple[int, list[int]]]:
    """One pod per node, sorted."""
    per: dict[int, list[int]] = defaultdict(list)
    for n, gpus in got:
        per[n] += gpus
    return sorted(per.items())


def _pieces(problem: Problem, span, solver, pinned) -> dict[tuple, list[dict[int, int]]]:
    """Per (counted key, candidate) the tight-node pods of its instances, less those of pinned instances
    (which get their own GPUs back first)."""
    out = {sk: solved_pieces(span, solver, sk) for sk in [*span.slots, *span.singles]}
    topo = problem.topology
    for (k, pool, _i), inst in pinned.items():
        ci = kept_candidate(problem, inst)
        mine = {topo.node_by_name(p.node).index: len(p.gpus) for p in inst.pods}
        mine = {n: g for n, g in mine.items() if n in span.tight}
        if mine and mine in out.get(((k, pool, 0), ci), []):
            out[((k, pool, 0), ci)].remove(mine)
    return out


def _replicas(part: Part, solver, pods, chosen) -> tuple[ReplicaPlacement, ...]:
    topo, v = part.problem.topology, part.pm.vars  # type: ignore[attr-defined]
    out = []
    for k in range(part.n_replicas):
        router = None
        if k in v.router:
            router = topo.nodes[next(n for n, r in v.router[k].items() if solver.value(r))].name
        instances = tuple(
            InstancePlacement(
                pool,
                i,
                tuple(Pod(topo.nodes[n].name, tuple(sorted(g))) for n, g in pods[(k, pool, i)]),
                chosen[(k, pool, i)][1].domain,
            )
            for pool, plan in sorted(part.problem.pools.items())
            for i in range(plan.instances)
        )
        out.append(ReplicaPlacement(k, instances, router))
    return tuple(out)
