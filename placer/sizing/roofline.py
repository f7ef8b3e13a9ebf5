"""The roofline sizing model: pure functions from a pool's instance (GPU peaks, TP size, communication
figures of its placement), the model and the load to the per-instance capacity that meets the SLO.

Times are in seconds inside, milliseconds at the edges (``*_ms``). docs/SIZING.md derives every formula:

* prefill of ``P`` tokens: ``max(FLOPs / (tp x peak x MFU), weights / (tp x HBM x MBU))`` plus the
  forward pass's all-reduces from placer's cost model (not overlapped: conservative);
  FLOPs = ``2 x params x P + 2 x layers x P^2 x hidden`` (causal attention).
* a decode step over ``B`` sequences of mean context ``C``: ``max((weights + B x C x kv) / (tp x HBM x MBU),
  B x FLOPs per token / (tp x peak x MFU))`` plus the all-reduces of ``B`` tokens.
* queueing: a prefill instance is an M/D/1 queue (Poisson arrivals, near-constant service), mean wait
  ``U x S / (2 (1 - U))``; TTFT = wait + prefill of the p90 prompt + its KV transfer.
* decode concurrency by Little's law: ``B = rate x output tokens x ITL``, so ITL is the least ``x`` with
  ``x (1 - U) >= step(rate x O x x)``; an aggregated instance decodes only while it is not prefilling
  (fraction ``1 - U``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from placer.sizing.gpus import GpuFigures

Role = Literal["prefill", "decode", "aggregated"]
Bottleneck = Literal["compute", "memory bandwidth", "communication", "KV memory", "queueing"]
BISECTION_STEPS = 100


@dataclass(frozen=True)
class Efficiency:
    """Shares of the datasheet peaks an engine reaches (docs/SIZING.md cites the defaults)."""

    mfu: float = 0.5  # model FLOP/s utilisation in prefill
    mbu: float = 0.6  # model bandwidth utilisation in decode
    memory_fraction: float = 0.9  # of GPU memory an engine takes for weights + KV (vLLM's default)

    def __post_init__(self) -> None:
        for name in ("mfu", "mbu", "memory_fraction"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {value}")


@dataclass(frozen=True)
class ModelCost:
    """What the roofline needs of the model."""

    parameters: float
    bytes_per_element: float
    layers: int
    hidden_size: int
    kv_bytes_per_token: float

    @property
    def weight_bytes(self) -> float:
        return self.parameters * self.bytes_per_element

    def prefill_flops(self, tokens: int) -> float:
        """Dense matmuls (2 FLOPs per parameter per token) plus causal attention (QK^T and AV)."""
        return 2 * self.parameters * tokens + 2 * self.layers * tokens * tokens * self.hidden_size

    def decode_flops_per_sequence(self, context: float) -> float:
        """One new token: the matmuls plus attention over ``context`` cached tokens."""
        return 2 * self.parameters + 4 * self.layers * context * self.hidden_size


@dataclass(frozen=True)
class Comm:
    """Communication of the placement placer would make: one forward pass's all-reduces as an affine
    function of its tokens (the ring formula is affine in the message), and the KV path."""

    allreduce_fixed_us: float
    allreduce_per_token_us: float
    kv_bandwidth_gbps: float | None = None  # None: no KV transfer (aggregated, or no transfer pair)
    kv_latency_us: float = 0.0

    def allreduce_s(self, tokens: float) -> float:
        return (self.allreduce_fixed_us + self.allreduce_per_token_us * tokens) * 1e-6

    def kv_s(self, kv_bytes: float) -> float:
        if self.kv_bandwidth_gbps is None:
            return 0.0
        return (kv_bytes / (self.kv_bandwidth_gbps * 1e3) + self.kv_latency_us) * 1e-6


@dataclass(frozen=True)
class Instance:
    """One serving instance: ``tp`` GPUs per stage work on each token; ``gpus`` hold weights and KV."""

    tensor_parallel: int
    gpus: int
    gpu: GpuFigures
    memory_gib: float  # per GPU, from the cluster file


@dataclass(frozen=True)
class Load:
    """What one replica must serve, and the targets."""

    rate: float  # requests per second
    prompt_mean: int
    prompt_p90: int
    output_mean: int
    ttft_ms: float | None
    itl_ms: float | None


@dataclass(frozen=True)
class Terms:
    """One critical time split into its roofline terms (seconds); ``total`` is what the latency counts."""

    compute: float
    memory: float
    communication: float

    @property
    def total(self) -> float:
        return max(self.compute, self.memory) + self.communication

    @property
    def bottleneck(self) -> Bottleneck:
        work = max(self.compute, self.memory)
        if self.communication > work:
            return "communication"
        return "compute" if self.compute >= self.memory else "memory bandwidth"


@dataclass(frozen=True)
class Sizing:
    """A pool's answer: instances per replica, or ``None`` with the reason no count meets the SLO."""

    role: Role
    instances: int | None
    capacity_rps: float  # requests/s one instance takes within the SLO
    bottleneck: Bottleneck | None
    ttft_ms: float | None  # predicted at the chosen count
    itl_ms: float | None
    batch: float | None  # decode sequences in flight per instance
    terms: Terms | None  # the critical time's split at the chosen count
    reason: str = ""

    def headroom(self, rate: float) -> float | None:
        """Capacity beyond the load ``rate`` at the chosen count, as a share of the load."""
        return None if self.instances is None else self.capacity_rps * self.instances / rate - 1


# ---- prefill ----------------------------------------------------------------------------------------


def prefill_terms(tokens: int, inst: Instance, model: ModelCost, comm: Comm, eff: Efficiency) -> Terms:
    """One prompt's prefill on one instance (PP stages run one after another: latency of the TP group)."""
    peak = inst.gpu.peak_flops(model.bytes_per_element)
    return Terms(
        compute=model.prefill_flops(tokens) / (inst.tensor_parallel * peak * eff.mfu),
        memory=model.weight_bytes / (inst.tensor_parallel * inst.gpu.hbm_bytes_per_s * eff.mbu),
        communication=comm.allreduce_s(tokens),
    )


def kv_bytes(model: ModelCost, tokens: int) -> float:
    return model.kv_bytes_per_token * tokens


def ttft_s(rate: float, inst: Instance, model: ModelCost, comm: Comm, load: Load, eff: Efficiency) -> float:
    """Mean M/D/1 wait + prefill of the p90 prompt + its KV transfer; inf when the instance saturates."""
    service = prefill_terms(load.prompt_mean, inst, model, comm, eff).total
    busy = rate * service
    if busy >= 1:
        return math.inf
    wait = busy * service / (2 * (1 - busy))
    p90 = prefill_terms(load.prompt_p90, inst, model, comm, eff).total
    return wait + p90 + comm.kv_s(kv_bytes(model, load.prompt_p90))


def prefill_busy(rate: float, inst: Instance, model: ModelCost, comm: Comm, load: Load, eff: Efficiency) -> float:
    """Share of the time an instance spends prefilling at ``rate``."""
    return rate * prefill_terms(load.prompt_mean, inst, model, comm, eff).total


# ---- decode -----------------------------------------------------------------------------------------


def mean_context(load: Load) -> float:
    """Tokens a decoding sequence holds on average: its prompt plus half its output."""
    return load.prompt_mean + load.output_mean / 2


def decode_step_terms(batch: float, inst: Instance, model: ModelCost, comm: Comm, load: Load, eff: Efficiency) -> Terms:
    context = mean_context(load)
    peak = inst.gpu.peak_flops(model.bytes_per_element)
    read = model.weight_bytes + batch * context * model.kv_bytes_per_token
    return Terms(
        compute=batch * model.decode_flops_per_sequence(context) / (inst.tensor_parallel * peak * eff.mfu),
        memory=read / (inst.tensor_parallel * inst.gpu.hbm_bytes_per_s * eff.mbu),
        communication=comm.allreduce_s(batch),
    )


def itl_s(rate: float, busy: float, inst: Instance, model: ModelCost, comm: Comm, load: Load, eff: Efficiency) -> float:
    """The fixed point of ITL = step(rate x O x ITL) / (1 - busy), in closed form: the step is the max of
    two affine pieces in the batch, so ITL is the largest ``alpha / (1 - busy - beta)`` over them (inf when
    a piece grows as fast as time: the queue of sequences never drains)."""
    zero = decode_step_terms(0, inst, model, comm, load, eff)
    one = decode_step_terms(1, inst, model, comm, load, eff)
    per_seq_rate = rate * load.output_mean
    pieces = (
        (zero.memory + zero.communication, (one.memory - zero.memory + one.communication - zero.communication)),
        (zero.communication, (one.compute + one.communication - zero.communication)),
    )
    worst = 0.0
    for alpha, slope in pieces:
        room = 1 - busy - slope * per_seq_rate
        if room <= 0:
            return math.inf
        worst = max(worst, alpha / room)
    return worst


def kv_capacity_sequences(inst: Instance, model: ModelCost, load: Load, eff: Efficiency) -> float:
    """Sequences of mean context the instance's memory holds beside the weights (<= 0: weights do not fit)."""
    room = inst.gpus * inst.memory_gib * 2**30 * eff.memory_fraction - model.weight_bytes
    return room / (mean_context(load) * model.kv_bytes_per_token)


# ---- per-role checks ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """Predicted latencies of one instance at one request rate."""

    ttft: float | None
    itl: float | None
    batch: float | None
    fits: bool


def predict(
    role: Role, rate: float, inst: Instance, model: ModelCost, comm: Comm, load: Load, eff: Efficiency
) -> Point:
    """Latencies at ``rate`` requests/s per instance and whether they meet the SLO (and fit in memory)."""
    ttft = itl = batch = None
    ok = True
    if role in ("prefill", "aggregated"):
        ttft = ttft_s(rate, inst, model, comm, load, eff)
        ok = ok and load.ttft_ms is not None and ttft * 1e3 <= load.ttft_ms
    if role in ("decode", "aggregated"):
        busy = prefill_busy(rate, inst, model, comm, load, eff) if role == "aggregated" else 0.0
        itl = itl_s(rate, busy, inst, model, comm, load, eff) if busy < 1 else math.inf
        batch = rate * load.output_mean * itl
        ok = ok and load.itl_ms is not None and itl * 1e3 <= load.itl_ms
        ok = ok and batch <= kv_capacity_sequences(inst, model, load, eff)
    return Point(ttft, itl, batch, ok)


def capacity_rps(role: Role, inst: Instance, model: ModelCost, comm: Comm, load: Load, eff: Efficiency) -> float:
    """The largest rate one instance takes within the SLO (0 when not even an idle instance meets it).
    Every latency grows with the rate, so the rates that fit are an interval from 0: bisection finds its end."""
    if not predict(role, 0.0, inst, model, comm, load, eff).fits:
        return 0.0
    hi = 1.0
    while predict(role, hi, inst, model, comm, load, eff).fits:
        hi *= 2
        if hi > 1e9:
            return hi
    lo = 0.0
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        if predict(role, mid, inst, model, comm, load, eff).fits:
            lo = mid
        else:
            hi = mid
    return lo


def instances_needed(
    role: Role,
    inst: Instance,
    model: ModelCost,
    comm: Comm,
    load: Load,
    eff: Efficiency,
    limit: int = 4096,
    cap: float | None = None,
) -> int | None:
    """Fewest instances that meet the SLO when the load is split evenly (None: none up to ``limit``);
    ``cap``: the instance's capacity when the caller has it (a bisection of its own)."""
    cap = capacity_rps(role, inst, model, comm, load, eff) if cap is None else cap
    if cap <= 0:
        return None
    n = max(1, math.ceil(load.rate / cap))
    # The bisection's last bit may be off: settle the count on the predicate itself.
    while n > 1 and predict(role, load.rate / (n - 1), inst, model, comm, load, eff).fits:
        n -= 1
    while n <= limit and not predict(role, load.rate / n, inst, model, comm, load, eff).fits:
        n += 1
    return n if n <= limit else None


def size(role: Role, inst: Instance, model: ModelCost, comm: Comm, load: Load, eff: Efficiency) -> Sizing:
    """A pool's count with what limits it, or why no count meets the SLO."""
    cap = capacity_rps(role, inst, model, comm, load, eff)
    n = instances_needed(role, inst, model, comm, load, eff, cap=cap)
    if n is None:
        return Sizing(role, None, cap, None, None, None, None, None, _why_not(role, inst, model, comm, load, eff))
    point = predict(role, load.rate / n, inst, model, comm, load, eff)
    if role == "prefill":
        terms = prefill_terms(load.prompt_p90, inst, model, comm, eff)
        neck: Bottleneck = terms.bottleneck
        wait = None if point.ttft is None else point.ttft - terms.total - comm.kv_s(kv_bytes(model, load.prompt_p90))
        if wait is not None and wait > terms.total:
            neck = "queueing"
    else:
        terms = decode_step_terms(point.batch or 0.0, inst, model, comm, load, eff)
        neck = terms.bottleneck
        if point.batch is not None and point.batch > 0.9 * kv_capacity_sequences(inst, model, load, eff):
            neck = "KV memory"
    return Sizing(
        role,
        n,
        cap,
        neck,
        None if point.ttft is None else point.ttft * 1e3,
        None if point.itl is None else point.itl * 1e3,
        point.batch,
        terms,
    )


def _why_not(role: Role, inst: Instance, model: ModelCost, comm: Comm, load: Load, eff: Efficiency) -> str:
    """The idle instance's latency against the target: the operator's sentence for exit 1."""
    gpus = f"TP{inst.tensor_parallel} {inst.gpu.product}"
    if role in ("decode", "aggregated") and kv_capacity_sequences(inst, model, load, eff) <= 0:
        need = model.weight_bytes / 2**30
        have = inst.gpus * inst.memory_gib * eff.memory_fraction
        return (
            f"the weights ({need:.0f} GiB) do not fit in {gpus}'s {have:.0f} GiB ({inst.gpus} x "
            f"{inst.memory_gib:g} GiB x memory fraction {eff.memory_fraction:g})"
        )
    if role in ("prefill", "aggregated"):
        terms = prefill_terms(load.prompt_p90, inst, model, comm, eff)
        kv = comm.kv_s(kv_bytes(model, load.prompt_p90))
        floor = (terms.total + kv) * 1e3
        if load.ttft_ms is None or floor > load.ttft_ms:
            return (
                f"prefill of a {load.prompt_p90}-token prompt takes {floor:.1f} ms on an idle {gpus} (compute "
                f"{terms.compute * 1e3:.1f} ms, weights {terms.memory * 1e3:.1f} ms, all-reduce "
                f"{terms.communication * 1e3:.1f} ms, KV transfer {kv * 1e3:.1f} ms), above slo.ttftMs {load.ttft_ms}"
            )
    if role in ("decode", "aggregated"):
        step = decode_step_terms(0, inst, model, comm, load, eff)
        floor = step.total * 1e3
        if load.itl_ms is None or floor > load.itl_ms:
            return (
                f"one decode step takes {floor:.2f} ms on an idle {gpus} (weights {step.memory * 1e3:.2f} ms, "
                f"all-reduce {step.communication * 1e3:.2f} ms), above slo.itlMs {load.itl_ms}"
            )
    return f"more than 4096 instances of {gpus} would be needed"
