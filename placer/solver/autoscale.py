"""``placer autoscale``'s decision: from what runs, the telemetry and the spec's ``scaling`` policy, one
action — scale a pool out or in, shift an instance between prefill and decode, add or remove a replica, or
nothing — and the state the next decision needs.

Pure functions over plain data: no clock, no files. Time enters only as ``now`` and the previous
decision's :class:`State`, so a recorded trace replays to the same decisions (tests, the simulation).
Placing what a decision adds is the ``--keep`` machinery's job (``placer.pipeline.run_autoscale``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from placer.model.cluster import Metrics
from placer.model.placement import InstancePlacement
from placer.model.spec import PoolScaling, Scaling, ServingTopology

REPLICAS = "replicas"  # the scope of spec.scaling; a pool's scope is "pool/<name>"


@dataclass(frozen=True)
class Shape:
    """What runs, as counts: replicas, and instances per replica of each pool."""

    replicas: int
    instances: Mapping[str, int]

    def gpus(self, spec: ServingTopology) -> int:
        return self.replicas * sum(spec.pools[p].gpus_per_instance * n for p, n in self.instances.items())


@dataclass(frozen=True)
class Observed:
    """A pool's telemetry over the GPUs its running instances hold. ``None``: no node reported it."""

    gpus: int
    queue_depth_per_gpu: float | None  # mean over the pool's GPUs
    ttft_p90_ms: float | None  # max over the pool's nodes


@dataclass(frozen=True)
class State:
    """What a decision remembers for the next one (the ``state`` of the decision record)."""

    at: float | None = None  # the previous decision's now
    last_scale_at: float | None = None  # the deployment's last change (any scope)
    cold_since: Mapping[str, float] = field(default_factory=dict)  # scope -> below the scale-in line since
    deployment: str | None = None  # namespace/name of the deployment the record decided for


@dataclass(frozen=True)
class Signal:
    scope: str  # "replicas" or "pool/<name>"
    level: str  # hot | cold | steady
    why: str


@dataclass(frozen=True)
class Decision:
    action: str  # none | scale-out | scale-in | shift
    scope: str  # the scope acted on ("" for none)
    reason: str
    before: Shape
    after: Shape
    signals: tuple[Signal, ...]
    state: State


def shape_of(instances: Mapping[tuple[int, str, int], InstancePlacement], spec: ServingTopology) -> Shape:
    """Counts from what runs: replicas = highest replica index + 1, instances per pool = highest index + 1
    (object names come from indices, so a hole is an instance the next solve places again)."""
    replicas = 1 + max((k for k, _p, _i in instances), default=-1)
    per_pool: dict[str, int] = {p: 0 for p in spec.pools}
    for _k, pool, i in instances:
        if pool in per_pool:
            per_pool[pool] = max(per_pool[pool], i + 1)
    return Shape(replicas, per_pool)


def observe(
    instances: Mapping[tuple[int, str, int], InstancePlacement], metrics: Mapping[str, Metrics]
) -> dict[str, Observed]:
    """Per pool: queue depth is the mean over the GPUs the pool's instances hold (a per-GPU figure where the
    node gives one, else the node's), because the router spreads requests over the pool and adding an
    instance divides that mean; TTFT p90 is the max over the pool's nodes, because the SLO is a tail bound and
    one slow node breaks it for the requests it serves (p90s do not average). A node shared by two pools
    reports one TTFT for both."""
    queues: dict[str, list[float]] = defaultdict(list)
    gpus: dict[str, int] = defaultdict(int)
    ttft: dict[str, list[float]] = defaultdict(list)
    for (_k, pool, _i), inst in sorted(instances.items()):
        for pod in inst.pods:
            m = metrics.get(pod.node, Metrics())
            gpus[pool] += len(pod.gpus)
            for g in pod.gpus:
                q = m.queue_depth.get(g) if isinstance(m.queue_depth, dict) else m.queue_depth
                if q is not None:
                    queues[pool].append(q)
            if m.ttft_p90_ms is not None:
                ttft[pool].append(m.ttft_p90_ms)
    return {
        pool: Observed(
            gpus[pool],
            round(sum(queues[pool]) / len(queues[pool]), 6) if queues[pool] else None,
            max(ttft[pool]) if ttft[pool] else None,
        )
        for pool in sorted(gpus)
    }


def one_fewer(queue_per_gpu: float, gpus_per_unit: float, units: int) -> float:
    """The queue depth per GPU with one unit fewer. A serving engine is a queue: read each unit as M/M/1,
    whose mean number in system L = rho / (1 - rho) gives its utilisation rho = L / (1 + L); the same load on
    one unit fewer is rho x n / (n - 1), and its queue grows like 1 / (1 - rho), not linearly (a linear
    projection let a scale-in be followed by the next scale-out). Saturated: infinite."""
    per_unit = queue_per_gpu * gpus_per_unit
    rho = per_unit / (1 + per_unit) * units / (units - 1)
    return float("inf") if rho >= 1 else rho / (1 - rho) / gpus_per_unit


def _judge(
    scope: str,
    policy: Scaling | PoolScaling,
    seen: list[tuple[str, Observed]],
    units: int,
    per_instance: Mapping[str, int],
) -> Signal:
    """Hot when any known signal is over its scaleUpWhen threshold; cold when every signal the policy names
    is known and, with one unit (replica or instance) fewer, would stay under scaleDownBelow x threshold."""
    up, frac = policy.scale_up_when, policy.scale_down_below
    over, high = [], []
    for pool, o in seen:
        if up.queue_depth_per_gpu is not None and o.queue_depth_per_gpu is not None:
            q = o.queue_depth_per_gpu
            if q > up.queue_depth_per_gpu:
                over.append(f"{pool} queueDepthPerGPU {q:g} > {up.queue_depth_per_gpu:g}")
            # one unit fewer (a replica, or an instance in every replica) loads each remaining instance
            # n/(n-1) more: the queue is an instance's (its GPUs'), whatever the scope counts
            after = one_fewer(q, per_instance[pool], units) if units > 1 else float("inf")
            if after >= frac * up.queue_depth_per_gpu:
                high.append(f"{pool} queueDepthPerGPU with one fewer {after:g} >= {frac * up.queue_depth_per_gpu:g}")
        elif up.queue_depth_per_gpu is not None:
            high.append(f"{pool} queueDepthPerGPU not reported")
        if up.ttft_p90_ms is not None and o.ttft_p90_ms is not None:
            t = o.ttft_p90_ms
            if t > up.ttft_p90_ms:
                over.append(f"{pool} ttftP90Ms {t:g} > {up.ttft_p90_ms:g}")
            if t >= frac * up.ttft_p90_ms:
                high.append(f"{pool} ttftP90Ms {t:g} >= {frac * up.ttft_p90_ms:g}")
        elif up.ttft_p90_ms is not None:
            high.append(f"{pool} ttftP90Ms not reported")
    if over:
        return Signal(scope, "hot", "; ".join(over))
    if not high and units > 1:
        return Signal(scope, "cold", "every signal would stay under the scale-in line with one fewer")
    return Signal(scope, "steady", "; ".join(high) if high else "at the minimum of one")


def signals(spec: ServingTopology, shape: Shape, observed: Mapping[str, Observed]) -> list[Signal]:
    """One signal per scope the spec gives a policy: the replicas (over every pool), then each pool."""
    out = []
    per_instance = {name: pool.gpus_per_instance for name, pool in spec.pools.items()}
    if spec.scaling is not None:
        seen = [(p, observed[p]) for p in sorted(observed)]
        out.append(_judge(REPLICAS, spec.scaling, seen, shape.replicas, per_instance))
    for name in sorted(spec.pools):
        policy = spec.pools[name].scaling
        if policy is not None and name in observed:
            seen = [(name, observed[name])]
            out.append(_judge(f"pool/{name}", policy, seen, shape.instances.get(name, 0), per_instance))
    return out


def _policy(spec: ServingTopology, scope: str) -> Scaling | PoolScaling:
    if scope == REPLICAS:
        assert spec.scaling is not None
        return spec.scaling
    policy = spec.pools[scope.removeprefix("pool/")].scaling
    assert policy is not None
    return policy


def _bounds(spec: ServingTopology, scope: str) -> tuple[int, int]:
    policy = _policy(spec, scope)
    if isinstance(policy, Scaling):
        return policy.min_replicas, policy.max_replicas
    return policy.min_instances, policy.max_instances


def _count(shape: Shape, scope: str) -> int:
    return shape.replicas if scope == REPLICAS else shape.instances[scope.removeprefix("pool/")]


def _with(shape: Shape, scope: str, delta: int) -> Shape:
    if scope == REPLICAS:
        return replace(shape, replicas=shape.replicas + delta)
    pool = scope.removeprefix("pool/")
    return replace(shape, instances={**shape.instances, pool: shape.instances[pool] + delta})


def _opposite(spec: ServingTopology, a: str, b: str) -> bool:
    roles = {spec.role_of(a.removeprefix("pool/")), spec.role_of(b.removeprefix("pool/"))}
    return roles == {"prefill", "decode"}


def decide(spec: ServingTopology, shape: Shape, observed: Mapping[str, Observed], state: State, now: float) -> Decision:
    """One action per call, finest first: a shift (one instance moved between prefill and decode: no new GPUs
    when their instances are the same size) before a pool scale-out before a replica
    scale-out; scale-in only when nothing is hot, after ``scaleDownAfter`` below the line, replicas before
    pools. Any scope waits out its ``cooldown`` after the deployment's last change, whatever changed: every
    change moves every pool's load. Bounds are the policies' min/max; a pool never goes below one instance.
    A shape outside its bounds (the spec's bounds changed, or it was placed by hand) is first brought back to
    the nearest bound, in one step."""
    sigs = signals(spec, shape, observed)
    level = {s.scope: s.level for s in sigs}
    cold_since = {s.scope: state.cold_since.get(s.scope, now) for s in sigs if s.level == "cold"}
    waited = {s: now - t for s, t in cold_since.items()}

    def cooling(scope: str) -> bool:
        return state.last_scale_at is not None and now - state.last_scale_at < _policy(spec, scope).cooldown

    def room(scope: str, delta: int) -> bool:
        lo, hi = _bounds(spec, scope)
        return lo <= _count(shape, scope) + delta <= hi

    def act(action: str, scope: str, after: Shape, reason: str) -> Decision:
        return Decision(action, scope, reason, shape, after, tuple(sigs), State(now, now, {}))

    for scope in sorted(level, key=lambda s: (s != REPLICAS, s)):  # outside its bounds: back to the nearest
        lo, hi = _bounds(spec, scope)
        n = _count(shape, scope)
        if not lo <= n <= hi:  # (a bound is the policy's, as a HorizontalPodAutoscaler's: no signal or cooldown)
            goal = min(max(n, lo), hi)
            word = "Replicas" if scope == REPLICAS else "Instances"
            limit = f"min{word} {lo}" if goal > n else f"max{word} {hi}"
            why = f"{n} running, {'below' if goal > n else 'above'} {limit}"
            return act("scale-out" if goal > n else "scale-in", scope, _with(shape, scope, goal - n), why)
    hot = [s for s in sigs if s.level == "hot"]
    blocked: list[str] = []
    for sig in hot:
        if sig.scope == REPLICAS:
            continue
        for donor in sorted(s for s, lv in level.items() if lv == "cold" and s != REPLICAS):
            if _opposite(spec, sig.scope, donor) and room(sig.scope, 1) and room(donor, -1):
                if cooling(sig.scope) or cooling(donor):
                    blocked.append(f"shift {donor} -> {sig.scope}: in cooldown")
                    continue
                after = _with(_with(shape, donor, -1), sig.scope, 1)
                return act("shift", f"{donor}->{sig.scope}", after, f"{sig.why}; {donor} is cold")
    for sig in hot:  # pools first (sorted after REPLICAS in sigs, so look at them first)
        if sig.scope == REPLICAS:
            continue
        if not room(sig.scope, 1):
            blocked.append(f"{sig.scope} hot ({sig.why}) but at maxInstances {_bounds(spec, sig.scope)[1]}")
        elif cooling(sig.scope):
            blocked.append(f"{sig.scope} hot ({sig.why}) but in cooldown")
        else:
            return act("scale-out", sig.scope, _with(shape, sig.scope, 1), sig.why)
    if level.get(REPLICAS) == "hot":
        why = next(s.why for s in sigs if s.scope == REPLICAS)
        if not room(REPLICAS, 1):
            blocked.append(f"replicas hot ({why}) but at maxReplicas {_bounds(spec, REPLICAS)[1]}")
        elif cooling(REPLICAS):
            blocked.append(f"replicas hot ({why}) but in cooldown")
        else:
            return act("scale-out", REPLICAS, _with(shape, REPLICAS, 1), why)
    if not hot:
        for scope in sorted(cold_since, key=lambda s: (s != REPLICAS, s)):
            after_s = _policy(spec, scope).scale_down_after
            if waited[scope] < after_s:
                blocked.append(f"{scope} cold for {waited[scope]:g}s of scaleDownAfter {after_s:g}s")
            elif not room(scope, -1):
                blocked.append(f"{scope} cold but at its minimum {_bounds(spec, scope)[0]}")
            elif cooling(scope):
                blocked.append(f"{scope} cold but in cooldown")
            else:
                why = f"cold for {waited[scope]:g}s >= scaleDownAfter {after_s:g}s"
                return act("scale-in", scope, _with(shape, scope, -1), why)
    if blocked:
        reason = "; ".join(blocked)
    elif not any(o.queue_depth_per_gpu is not None or o.ttft_p90_ms is not None for o in observed.values()):
        # Not "all is well": a metrics pipeline that stopped reporting must not read as a quiet deployment.
        reason = "no telemetry: the cluster file reports no queueDepth or ttftP90Ms on this deployment's GPUs"
    else:
        reason = "every signal between the scale-in and scale-out lines"
    return Decision("none", "", reason, shape, shape, tuple(sigs), State(now, state.last_scale_at, cold_since))


def scaled_spec(spec: ServingTopology, shape: Shape) -> ServingTopology:
    """The spec with the decided counts: what ``--keep`` solves (kept instances pinned, new ones placed,
    instances past the counts dropped). ``minReplicas`` is cleared: a decided replica is all or nothing."""
    pools = {name: pool.model_copy(update={"instances": shape.instances[name]}) for name, pool in spec.pools.items()}
    return spec.model_copy(update={"pools": pools, "replicas": shape.replicas, "min_replicas": None})


def parse_now(text: str) -> float:
    """``--now``: seconds since the epoch, or an RFC 3339 time (``2025-06-01T12:00:00Z``)."""
    from datetime import datetime

    from placer.model.errors import InputError

    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise InputError(f"--now: {text!r} is not a time (give seconds since the epoch or an RFC 3339 time)")
        return seconds
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"--now: {text!r} is neither seconds since the epoch nor an RFC 3339 time") from None
    if stamp.tzinfo is None:
        raise InputError(f"--now: {text!r} has no time zone (add Z for UTC)")
    return stamp.timestamp()


def state_of(record: Mapping, source: str, now: float) -> State:
    """The state a previous decision record carries; time must not run backwards."""
    from placer.model.errors import InputError

    state = record.get("state") if isinstance(record, Mapping) else None
    if not isinstance(state, Mapping) or record.get("kind") != "AutoscaleDecision":
        raise InputError(f"{source}: not a decision record of placer autoscale (kind: AutoscaleDecision)")
    try:
        at = None if state.get("at") is None else float(state["at"])
        last = None if state.get("lastScaleAt") is None else float(state["lastScaleAt"])
        cold = {str(k): float(v) for k, v in dict(state.get("coldSince") or {}).items()}
    except (TypeError, ValueError):
        raise InputError(f"{source}: state.at, state.lastScaleAt and state.coldSince must be numbers") from None
    if not all(math.isfinite(x) for x in (at or 0.0, last or 0.0, *cold.values())):
        raise InputError(f"{source}: state.at, state.lastScaleAt and state.coldSince must be finite numbers")
    if at is not None and now < at:
        raise InputError(f"{source}: --now {now:g} is before the previous decision's {at:g}")
    deployment = record.get("deployment")
    return State(at, last, cold, deployment if isinstance(deployment, str) else None)


def decision_record(
    spec: ServingTopology,
    decision: Decision,
    observed: Mapping[str, Observed],
    objects: Mapping[str, list[str]],
    moves: list[str],
) -> dict:
    """The JSON record: what was seen, against which lines, what was done and why, which objects to apply
    and prune; its ``state`` is the next call's ``--state``."""
    thresholds = {}
    for scope in [s.scope for s in decision.signals]:
        policy = _policy(spec, scope)
        lo, hi = _bounds(spec, scope)
        thresholds[scope] = {
            "min": lo,
            "max": hi,
            "scaleUpWhen": policy.scale_up_when.model_dump(by_alias=True, exclude_none=True),
            "scaleDownBelow": policy.scale_down_below,
            "scaleDownAfterSeconds": policy.scale_down_after,
            "cooldownSeconds": policy.cooldown,
        }
    shape = {
        "before": {"replicas": decision.before.replicas, "instances": dict(sorted(decision.before.instances.items()))},
        "after": {"replicas": decision.after.replicas, "instances": dict(sorted(decision.after.instances.items()))},
    }
    return {
        "apiVersion": "placer.dev/v1alpha1",
        "kind": "AutoscaleDecision",
        "deployment": f"{spec.metadata.namespace}/{spec.metadata.name}",
        "now": decision.state.at,
        "action": decision.action,
        "scope": decision.scope,
        "reason": decision.reason,
        "shape": shape,
        "gpus": {"before": decision.before.gpus(spec), "after": decision.after.gpus(spec)},
        "observed": {
            pool: {
                "gpus": o.gpus,
                "queueDepthPerGPU": o.queue_depth_per_gpu,
                "ttftP90Ms": o.ttft_p90_ms,
            }
            for pool, o in sorted(observed.items())
        },
        "aggregation": {"queueDepthPerGPU": "mean over the pool's GPUs", "ttftP90Ms": "max over the pool's nodes"},
        "thresholds": thresholds,
        "signals": [{"scope": s.scope, "level": s.level, "why": s.why} for s in decision.signals],
        "objects": dict(objects),
        "moves": moves,
        "state": {
            "at": decision.state.at,
            "lastScaleAt": decision.state.last_scale_at,
            "coldSince": dict(sorted(decision.state.cold_since.items())),
        },
    }
