"""Phase 1 of the churn simulation (bench/churn.py): the seeded trace of serving deployments and background
jobs arriving and leaving. Kept apart so that what is offered can be read, and tested, without the replay."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from placer.model.load import load_spec
from placer.model.spec import ServingTopology
from placer.topology.generate import JOB_SIZES, JOB_WEIGHTS

ROOT = Path(__file__).resolve().parent.parent

# Serving shapes: name -> (fixture spec, replicas override). The large spec's four 128-GPU replicas would
# be half the 1,024-GPU cluster, so the trace offers one replica of it.
SHAPES: dict[str, tuple[str, int | None]] = {
    "llama-70b-disagg": ("llama-70b-disagg", None),  # 2 x TP8 prefill + 4 x TP4 decode, 400 GB/s floor: 32 GPUs
    "aggregated-tp8": ("aggregated-tp8", None),  # 2 replicas x TP8 on one node each, spread across racks
    "tp16-multinode": ("tp16-multinode", None),  # TP16 over two nodes of one leaf
    "llama-70b-large-1r": ("llama-70b-large", 1),  # 8 x TP8 + 16 x TP4, 200 GB/s floor: 128 GPUs
}
WARMUP_H = 12.0  # the background runs this long before t = 0


@dataclass(frozen=True)
class TraceParams:
    """What the trace is drawn from. Loads are shares of the cluster's GPUs kept busy on average."""

    hours: float = 24.0
    serving_load: float = 0.55
    background_load: float = 0.35
    amplitude: float = 0.5  # rate swings between (1 - a) and (1 + a) times its mean over a day
    peak_hour: float = 15.0
    serving_median_h: float = 1.0
    serving_sigma: float = 1.0
    background_median_h: float = 1.0
    background_sigma: float = 1.0
    shapes: tuple[tuple[str, float], ...] = (
        ("llama-70b-disagg", 0.4),
        ("aggregated-tp8", 0.25),
        ("tp16-multinode", 0.2),
        ("llama-70b-large-1r", 0.15),
    )


@dataclass(frozen=True)
class Job:
    """One arrival of the trace; the same trace is replayed under every policy."""

    id: str  # s0001 (serving) or b00001 (background)
    kind: str  # serving | background
    arrive_h: float
    depart_h: float
    gpus: int  # GPUs asked for (serving: all replicas)
    shape: str | None = None


def lognormal_mean(median: float, sigma: float) -> float:
    """Lifetimes are given by their median; rates need the mean."""
    return median * math.exp(sigma**2 / 2)


def rate_factor(t_h: float, p: TraceParams) -> float:
    """The daily cycle: 1 + a cos(2 pi (t - peak) / 24), mean 1 over a day."""
    return 1.0 + p.amplitude * math.cos(2 * math.pi * (t_h - p.peak_hour) / 24.0)


def _poisson(rng: random.Random, mean_per_h: float, start_h: float, end_h: float, p: TraceParams) -> list[float]:
    """Arrival times of a Poisson process with the daily cycle, by thinning (Lewis-Shedler)."""
    top = mean_per_h * (1 + p.amplitude)
    out, t = [], start_h
    while top > 0:
        t += rng.expovariate(top)
        if t >= end_h:
            break
        if rng.random() * (1 + p.amplitude) <= rate_factor(t, p):
            out.append(t)
    return out


def rates(p: TraceParams, cluster_gpus: int, shapes: dict[str, ServingTopology]) -> tuple[float, float]:
    """Mean arrivals per hour (serving, background) that keep the target loads busy if all were admitted."""
    total = sum(w for _, w in p.shapes)
    mean_gpus = sum(w * deployment_gpus(shapes[s]) for s, w in p.shapes) / total
    serving = p.serving_load * cluster_gpus / (mean_gpus * lognormal_mean(p.serving_median_h, p.serving_sigma))
    bg_gpus = sum(s * w for s, w in zip(JOB_SIZES, JOB_WEIGHTS, strict=True)) / sum(JOB_WEIGHTS)
    bg_life = lognormal_mean(p.background_median_h, p.background_sigma)
    return serving, p.background_load * cluster_gpus / (bg_gpus * bg_life)


def generate_trace(p: TraceParams, cluster_gpus: int, shapes: dict[str, ServingTopology], seed: int) -> list[Job]:
    """Serving arrivals in [0, hours), background arrivals in [-WARMUP_H, hours), sorted by arrival.

    Arrival times, sizes and lifetimes each draw from their own seeded generator per stream, so a shorter
    trace is a prefix of a longer one and one stream's parameters do not move the other stream."""
    serving_rate, bg_rate = rates(p, cluster_gpus, shapes)
    jobs: list[Job] = []
    times, sizes, lives = (random.Random(f"churn/{seed}/serving/{what}") for what in ("time", "size", "life"))
    names, weights = [s for s, _ in p.shapes], [w for _, w in p.shapes]
    for i, t in enumerate(_poisson(times, serving_rate, 0.0, p.hours, p)):
        shape = sizes.choices(names, weights=weights)[0]
        life = lives.lognormvariate(math.log(p.serving_median_h), p.serving_sigma)
        jobs.append(Job(f"s{i:04d}", "serving", t, t + life, deployment_gpus(shapes[shape]), shape))
    times, sizes, lives = (random.Random(f"churn/{seed}/background/{what}") for what in ("time", "size", "life"))
    for i, t in enumerate(_poisson(times, bg_rate, -WARMUP_H, p.hours, p)):
        size = sizes.choices(JOB_SIZES, weights=JOB_WEIGHTS)[0]
        life = lives.lognormvariate(math.log(p.background_median_h), p.background_sigma)
        jobs.append(Job(f"b{i:05d}", "background", t, t + life, size))
    return sorted(jobs, key=lambda j: (j.arrive_h, j.id))


def load_shapes(names: Sequence[str]) -> dict[str, ServingTopology]:
    """The fixture specs behind the named shapes, with SHAPES' replica overrides applied."""
    out = {}
    for name in names:
        fixture, replicas = SHAPES[name]
        spec = load_spec(ROOT / "fixtures" / "specs" / f"{fixture}.yaml")
        if replicas is not None:
            spec = ServingTopology.model_validate(spec.model_dump(by_alias=True) | {"replicas": replicas})
        out[name] = spec
    return out


def deployment_gpus(spec: ServingTopology) -> int:
    """GPUs a whole deployment asks for (every replica), which sets the serving rate."""
    return spec.replicas * sum(p.gpus_per_instance * p.instances for p in spec.pools.values())
