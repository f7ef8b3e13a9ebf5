"""The result of a solve, with names again (nodes by name, GPUs by index): what emit, explain and the
checker read, and what ``--placement FILE`` writes (placer.model.record reads it back)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class InstancePlacement:
    pool: str
    index: int
    pods: tuple[Pod, ...]
    domain: str  # the domain the solver placed it in (its GPUs may sit in a narrower one)


@dataclass(frozen=True)
class ReplicaPlacement:
    index: int
    instances: tuple[InstancePlacement, ...]
    router: str | None = None


@dataclass
class SolveStats:
    status: str  # optimal | feasible | infeasible | unknown
    objective: int | None = None  # cost units of the placement (the checker's recomputation)
    bound: int | None = None
    gap: float | None = None
    solver: str = "cp-sat"
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class Placement:
    deployment: str
    namespace: str
    cluster: str
    replicas: tuple[ReplicaPlacement, ...]
    stats: SolveStats

    def to_record(self, spec: dict[str, Any] | None = None, target: str | None = None) -> dict[str, Any]:
        """Plain data for the placement file (read back by placer.model.record); timings are left out so that
        output is reproducible. ``spec`` (record.spec_record) makes the file self-contained for explain;
        ``target``, the --target its manifests were written for, lets a later --keep follow it."""
        stats = asdict(self.stats)
        stats.pop("seconds")
        extra = {} if spec is None else {"spec": spec}
        written = {} if target is None else {"target": target}
        return {
            "apiVersion": "placer.dev/v1alpha1",
            "kind": "Placement",
            "metadata": {"name": self.deployment, "namespace": self.namespace},
            "cluster": self.cluster,
            **written,
            "status": stats,
            **extra,
            "replicas": [
                {
                    "index": r.index,
                    "router": r.router,
                    "instances": [
                        {
                            "pool": i.pool,
                            "index": i.index,
                            "domain": i.domain,
                            "pods": [{"node": p.node, "gpus": list(p.gpus)} for p in i.pods],
                        }
                        for i in r.instances
                    ],
                }
                for r in self.replicas
            ],
        }
