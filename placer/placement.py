"""The result of a solve, with names again (nodes by name, GPUs by index): what emit, explain and the
checker read, and what ``--placement FILE`` writes and later commands load back."""

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

    def to_record(self, include_timing: bool = False) -> dict[str, Any]:
        """Plain data for the placement file; timings are left out by default so output is reproducible."""
        stats = asdict(self.stats)
        if not include_timing:
            stats.pop("seconds")
        return {
            "apiVersion": "placer.dev/v1alpha1",
            "kind": "Placement",
            "metadata": {"name": self.deployment, "namespace": self.namespace},
            "cluster": self.cluster,
            "status": stats,
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

    @staticmethod
    def from_record(data: dict[str, Any]) -> Placement:
        st = data["status"]
        return Placement(
            deployment=data["metadata"]["name"],
            namespace=data["metadata"]["namespace"],
            cluster=data["cluster"],
            replicas=tuple(
                ReplicaPlacement(
                    index=r["index"],
                    router=r.get("router"),
                    instances=tuple(
                        InstancePlacement(
                            i["pool"],
                            i["index"],
                            tuple(Pod(p["node"], tuple(p["gpus"])) for p in i["pods"]),
                            i["domain"],
                        )
                        for i in r["instances"]
                    ),
                )
                for r in data["replicas"]
            ),
            stats=SolveStats(
                status=st["status"],
                objective=st.get("objective"),
                bound=st.get("bound"),
                gap=st.get("gap"),
                solver=st.get("solver", "cp-sat"),
                notes=list(st.get("notes", [])),
            ),
        )
