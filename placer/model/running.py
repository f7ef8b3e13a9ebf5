"""What already runs, as plain data: one deployment's instances and routers as read back from a record,
placer's manifests or a kubectl pod list (``placer.emit.readback`` reads them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from placer.model.placement import InstancePlacement, Placement, ReplicaPlacement, SolveStats
from placer.model.spec import ServingTopology


@dataclass
class Running:
    """One deployment as it runs: instances by (replica, pool, index), routers by replica."""

    namespace: str
    name: str
    source: str
    instances: dict[tuple[int, str, int], InstancePlacement] = field(default_factory=dict)
    routers: dict[int, str] = field(default_factory=dict)
    spec: ServingTopology | None = None  # known from records and manifests, not from bare pods
    stats: SolveStats | None = None  # the solve it came from (records, manifests): what its objects carry
    cluster: str = ""  # the cluster it was placed on, where records and manifests say (bare pods do not)
    target: str | None = None  # the --target it was written for, where its record, manifests or pods say
    nccl: bool | None = None  # whether its objects carry placer's NCCL values (manifests say; records do not)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def running_placement(run: Running, cluster: str) -> Placement:
    """A running deployment as a Placement (for the checker and plan's move list)."""
    return as_placement(run.name, run.namespace, cluster, run.instances, run.routers)


def as_placement(
    name: str,
    namespace: str,
    cluster: str,
    instances: dict[tuple[int, str, int], InstancePlacement],
    routers: dict[int, str],
) -> Placement:
    """Instances by (replica, pool, index) and routers by replica, as a Placement."""
    replicas = sorted({k for k, _p, _i in instances} | set(routers))
    return Placement(
        name,
        namespace,
        cluster,
        tuple(
            ReplicaPlacement(k, tuple(instances[key] for key in sorted(instances) if key[0] == k), routers.get(k))
            for k in replicas
        ),
        SolveStats("unknown"),
    )
