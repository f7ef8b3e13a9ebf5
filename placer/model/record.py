"""The placement record (``--placement FILE``): a pydantic model at the edge like every other input (its
JSON Schema is generated from it), and the annotations that carry the same facts on manifests.

Reading a record or manifests back is ``placer.emit.readback``; this module is only the format.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from placer.model.numbers import Float, FloatOrNone, Int, IntOrNone
from placer.model.placement import InstancePlacement, Placement, Pod, ReplicaPlacement, SolveStats
from placer.model.spec import ServingTopology

SPEC_ANNOTATION = "placer.dev/spec"
STATUS_ANNOTATION = "placer.dev/solver-status"
CLUSTER_ANNOTATION = "placer.dev/cluster"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PodRecord(_Record):
    node: str
    gpus: list[Int] = Field(min_length=1)


class InstanceRecord(_Record):
    pool: str
    index: Int = Field(ge=0)
    domain: str
    pods: list[PodRecord] = Field(min_length=1)


class ReplicaRecord(_Record):
    index: Int = Field(ge=0)
    router: str | None = None
    instances: list[InstanceRecord]


class StatusRecord(_Record):
    status: Literal["optimal", "feasible", "infeasible", "unknown", "greedy"]
    objective: IntOrNone = None
    bound: IntOrNone = None
    gap: FloatOrNone = None
    solver: str = "cp-sat"
    notes: list[str] = Field(default_factory=list)
    seconds: dict[str, Float] | None = None

    def to_stats(self) -> SolveStats:
        return SolveStats(self.status, self.objective, self.bound, self.gap, self.solver, notes=list(self.notes))


class RecordMetadata(_Record):
    name: str
    namespace: str = "default"


class PlacementRecord(_Record):
    """``kind: Placement``: what was placed where, the solver's verdict, and the spec it was made for."""

    api_version: Literal["placer.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Placement"]
    metadata: RecordMetadata
    cluster: str = Field(description="metadata.name of the cluster file the placement was made on.")
    target: str | None = Field(
        default=None, description="The --target its manifests were written for (what --keep writes new objects for)."
    )
    status: StatusRecord
    spec: ServingTopology | None = Field(
        default=None, description="The ServingTopology the placement was made for (explain needs it)."
    )
    replicas: list[ReplicaRecord]

    def to_placement(self) -> Placement:
        return Placement(
            deployment=self.metadata.name,
            namespace=self.metadata.namespace,
            cluster=self.cluster,
            replicas=tuple(
                ReplicaPlacement(
                    index=r.index,
                    router=r.router,
                    instances=tuple(
                        InstancePlacement(i.pool, i.index, tuple(Pod(p.node, tuple(p.gpus)) for p in i.pods), i.domain)
                        for i in r.instances
                    ),
                )
                for r in self.replicas
            ),
            stats=self.status.to_stats(),
        )


def spec_record(spec: ServingTopology) -> dict[str, Any]:
    """The spec as plain data, defaults left out (short, and equal to the original when validated again)."""
    return spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)


def status_record(stats: SolveStats) -> dict[str, Any]:
    return {"status": stats.status, "objective": stats.objective, "bound": stats.bound, "gap": stats.gap}
