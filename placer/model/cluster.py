"""The cluster file as the user writes it (``kind: Cluster``).

Designed to be written by hand: ``nodeClasses`` hold what many nodes share (GPU count and product,
interconnect, CPU, memory), nodes name their class and say where they sit (rack, leaf, NVLink domain) and
what is busy. A GPU list may replace the compact ``gpus: {count: 8, ...}`` form when GPUs differ.
``fabric`` gives one bandwidth/latency figure per link class; ``overrides`` replace them for one domain with
measured figures (nccl-tests, the unit those tests measure). ``nics`` and ``nvlinkIslands`` record what
``placer cluster import`` found in a node's topology; they are descriptive, the solver does not read them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from placer.model import k8s
from placer.model.k8s import CpuQuantity, MemoryQuantity, field_alias
from placer.model.numbers import Bool, Float, FloatOrNone, Int, IntKey, IntOrNone

MAX_NODES = 100_000  # nodes in one cluster file: 100k GPUs of the largest style and more

HOSTNAME = "kubernetes.io/hostname"  # what the manifests pin pods to


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=field_alias, frozen=True)


# The slowest link a file may state: 1 MB/s. Slower figures (1e-300 was accepted) make transfer times, and
# so the model's integer costs, too large for CP-SAT, which then refused the model (exit 3, not 2).
MIN_GBPS = 0.001


class Link(_Model):
    bandwidth_gbps: Float = Field(ge=MIN_GBPS, le=100_000, description="Per GPU, one direction, GB/s.")
    latency_us: Float = Field(ge=0, le=100_000)


# Figures a network kind gets when the file gives none: (rail GB/s, leaf latency us, spine latency us).
# InfiniBand NDR: 400 Gb/s = 50 GB/s a port, ~2 us under one leaf, ~5 us through the spine. RoCEv2 over
# 100 GbE: 12.5 GB/s and ~50 us (source 003's interconnect table and ../shared/README.md); the spine adds
# source 003's +3 us for the extra switch hop (its InfiniBand 2 -> 5 us). docs/DESIGN.md has the choice.
NETWORK_DEFAULTS: dict[str, tuple[float, float, float]] = {
    "infiniband": (50.0, 2.0, 5.0),
    "ethernet": (12.5, 50.0, 53.0),
}
_NETWORK_FIELDS = {"rail_gbps": 0, "latency_us": 1}


class Network(_Model):
    """The scale-out network: one rail (NIC) per GPU on rail-optimised nodes. Figures left out take the
    kind's own defaults (``NETWORK_DEFAULTS``): ethernet must not silently borrow InfiniBand's."""

    kind: Literal["infiniband", "ethernet"] = "infiniband"
    rail_gbps: Float = Field(
        default=50.0,
        ge=MIN_GBPS,
        le=10_000,
        description="One NIC port, GB/s. Default by kind: infiniband 50 (NDR 400G), ethernet 12.5 (100GbE).",
    )
    rails_per_node: Int = Field(default=8, ge=1, le=64)
    latency_us: Float = Field(
        default=2.0,
        ge=0,
        le=100_000,
        description="Between nodes under one leaf. Default by kind: infiniband 2, ethernet 50 (RoCEv2 100GbE).",
    )
    rail_optimized: Bool = Field(
        default=True,
        description=(
            "NIC i of every node goes to its own leaf switch (rail i), as in NVIDIA's reference fabrics; "
            "false when all of a node's NICs share one switch. Decides NCCL_CROSS_NIC."
        ),
    )

    @model_validator(mode="after")
    def _kind_defaults(self) -> Network:
        """Figures the file left out take the kind's defaults; they stay out of ``model_fields_set`` so
        import summaries still list them as defaults to measure."""
        figures = NETWORK_DEFAULTS[self.kind]
        for name, i in _NETWORK_FIELDS.items():
            if name not in self.model_fields_set:
                object.__setattr__(self, name, figures[i])  # frozen model, still being built
        return self


class Spine(_Model):
    oversubscription: Float = Field(
        default=1.0, ge=1, le=64, description="Leaf uplink oversubscription, e.g. 2 for 2:1."
    )
    latency_us: Float = Field(
        default=5.0, ge=0, le=100_000, description="Default by network kind: infiniband 5, ethernet 53."
    )


class Fabric(_Model):
    """Figures per link class (defaults: vendor figures in docs/DESIGN.md; the network's and the spine's
    latency follow ``network.kind``)."""

    nvlink: Link = Link(bandwidth_gbps=900, latency_us=1.0)
    pcie: Link = Link(bandwidth_gbps=64, latency_us=1.5)
    cross_socket: Link = Link(bandwidth_gbps=32, latency_us=2.0)
    nvlink_domain: Link = Link(bandwidth_gbps=600, latency_us=1.5)
    network: Network = Network()
    spine: Spine = Spine()

    @model_validator(mode="after")
    def _spine_defaults(self) -> Fabric:
        """A spine latency left out follows the network kind (an ethernet spine is not InfiniBand's)."""
        latency = NETWORK_DEFAULTS[self.network.kind][2]
        if "latency_us" in self.spine.model_fields_set or self.spine.latency_us == latency:
            return self
        spine = Spine.model_construct(
            _fields_set=set(self.spine.model_fields_set),
            oversubscription=self.spine.oversubscription,
            latency_us=latency,
        )
        object.__setattr__(self, "spine", spine)  # a new Spine: the shared default is never changed
        return self


class GpuSpec(_Model):
    index: Int = Field(ge=0, le=255)
    product: str
    memory_gib: Float = Field(gt=0)
    socket: Int = Field(default=0, ge=0, le=15, description="CPU socket / NUMA node the GPU hangs off.")


class GpuGroup(_Model):
    """Compact form: ``count`` identical GPUs, indices 0..count-1, split evenly over ``sockets``."""

    count: Int = Field(ge=0, le=256)
    product: str
    memory_gib: Float = Field(gt=0)


class Nic(_Model):
    """A network adapter seen in a node's topology (``placer cluster import``). Recorded for people and
    future use: the solver reads only ``fabric.network.railsPerNode``."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
    socket: IntOrNone = Field(default=None, ge=0, le=255, description="NUMA node the NIC hangs off.")
    gpus: list[Int] = Field(
        default_factory=list, description="GPU indices behind the same PCIe switch (PIX/PXB): its rail."
    )
    bandwidth_gbps: FloatOrNone = Field(default=None, ge=MIN_GBPS, le=10_000, description="Port speed, GB/s.")


_ISLANDS = (
    "GPU index groups joined by NVLink when not every GPU pair of the node is (e.g. POWER9 NV3 pairs). "
    "Recorded, not used by the solver: such a node is modelled as PCIe."
)


class NodeClass(_Model):
    gpus: GpuGroup | list[GpuSpec] | None = None
    interconnect: Literal["nvlink", "pcie"] = "nvlink"
    nvlink_gbps: FloatOrNone = Field(
        default=None, ge=MIN_GBPS, le=100_000, description="Per-GPU NVLink bandwidth inside the node."
    )
    sockets: Int = Field(default=1, ge=1, le=16)
    cpu: CpuQuantity = "64"
    memory: MemoryQuantity = "512Gi"
    nics: list[Nic] | None = None
    nvlink_islands: list[list[Int]] | None = Field(default=None, description=_ISLANDS)


class GpuId(_Model):
    """Identifiers of one GPU, as its DRA driver publishes them: what ``--target dra`` selects GPUs by.

    ``placer cluster import`` writes them from ResourceSlices (``--resourceslices``: uuid and bus id) and
    NCCL topology dumps (``--nccl-xml``: bus id). Per node, because a uuid belongs to one physical GPU."""

    index: Int = Field(ge=0, le=255)
    uuid: str | None = Field(default=None, pattern=r"^GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")
    pci_bus_id: str | None = Field(
        default=None,
        alias="pciBusID",
        pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$",
        description="PCI address, domain:bus:device.function, lower case (0000:65:00.0).",
    )

    @model_validator(mode="after")
    def _some(self) -> GpuId:
        if self.uuid is None and self.pci_bus_id is None:
            raise ValueError(f"GPU {self.index}: give uuid, pciBusID or both")
        return self


class Used(_Model):
    cpu: CpuQuantity = "0"
    memory: MemoryQuantity = "0"


MAX_QUEUE_DEPTH = 1_000_000  # queued requests per GPU; times the objective weight it must stay an integer


class Metrics(_Model):
    """Serving telemetry; a number applies to every GPU of the node, a mapping gives it per GPU index."""

    queue_depth: Float | dict[IntKey, Float] | None = None
    kv_cache_hit: Float | dict[IntKey, Float] | None = None
    ttft_p90_ms: FloatOrNone = Field(
        default=None,
        ge=0,
        le=1e7,
        description="90th percentile time to first token of the engines on this node, in ms (autoscaling trigger).",
    )

    @field_validator("queue_depth", "kv_cache_hit")
    @classmethod
    def _range(cls, v: float | dict[int, float] | None, info: ValidationInfo) -> float | dict[int, float] | None:
        values = v.values() if isinstance(v, dict) else [] if v is None else [v]
        if info.field_name == "queue_depth" and not all(0 <= x <= MAX_QUEUE_DEPTH for x in values):
            raise ValueError(f"expected finite numbers from 0 to {MAX_QUEUE_DEPTH} (queued requests per GPU)")
        if info.field_name == "kv_cache_hit" and any(not 0 <= x <= 1 for x in values):
            raise ValueError("kvCacheHit is a fraction between 0 and 1")
        return v


class NodeSpec(_Model):
    name: str
    node_class: str | None = Field(default=None, alias="class")
    labels: dict[str, str] = Field(default_factory=dict)
    rack: str | None = None
    leaf: str | None = None
    nvlink_domain: str | None = None
    gpus: GpuGroup | list[GpuSpec] | None = None
    interconnect: Literal["nvlink", "pcie"] | None = None
    nvlink_gbps: FloatOrNone = Field(default=None, ge=MIN_GBPS, le=100_000)
    sockets: IntOrNone = Field(default=None, ge=1, le=16)
    cpu: CpuQuantity | None = None
    memory: MemoryQuantity | None = None
    nics: list[Nic] | None = None
    nvlink_islands: list[list[Int]] | None = Field(default=None, description=_ISLANDS)
    busy: list[Int] = Field(default_factory=list)
    gpu_ids: list[GpuId] | None = Field(default=None, description="Per GPU index: uuid and PCI bus id (DRA).")
    used: Used = Used()
    metrics: Metrics = Metrics()
    schedulable: Bool = True

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if len(v) > 253 or not k8s.DNS1123_SUBDOMAIN.fullmatch(v):
            raise ValueError(f"node name {v!r} is not a DNS-1123 subdomain (lower-case, digits, '-', '.')")
        return v

    @field_validator("rack", "leaf", "nvlink_domain")
    @classmethod
    def _domain(cls, v: str | None) -> str | None:
        if v is not None:
            k8s.check_label_value(v)
            if not v:
                raise ValueError("must not be empty")
        return v

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            k8s.check_label_key(key)
            k8s.check_label_value(value)
        return v

    @field_validator("busy")
    @classmethod
    def _busy(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError("busy lists a GPU index twice")
        return v

    @field_validator("gpu_ids")
    @classmethod
    def _gpu_ids(cls, v: list[GpuId] | None) -> list[GpuId] | None:
        indices = [g.index for g in v or []]
        if len(set(indices)) != len(indices):
            raise ValueError("gpuIds lists a GPU index twice")
        return v


class Override(_Model):
    """Measured figures for links that cross between the children of one domain (``level/name``)."""

    domain: str = Field(description="Domain id, e.g. node/dgx-001, rack/r07, leaf/su1.")
    bandwidth_gbps: FloatOrNone = Field(default=None, ge=MIN_GBPS, le=100_000)
    latency_us: FloatOrNone = Field(default=None, ge=0, le=100_000)
    source: str | None = Field(default=None, description="Where the figure came from (free text).")


class ClusterMetadata(_Model):
    name: str

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return k8s.check_dns_label(v, "metadata.name")


class ClusterSpec(_Model):
    api_version: Literal["placer.dev/v1alpha1"]
    kind: Literal["Cluster"]
    metadata: ClusterMetadata
    fabric: Fabric = Fabric()
    node_classes: dict[str, NodeClass] = Field(default_factory=dict)
    nodes: list[NodeSpec] = Field(min_length=1, max_length=MAX_NODES)
    overrides: list[Override] = Field(default_factory=list)
    topology_labels: dict[Literal["nvlink-domain", "rack", "leaf"], str] = Field(
        default_factory=dict,
        description="Node label key that carries each level on these nodes (written by `placer cluster import`); "
        "every --target's topology constraints use these keys.",
    )

    @field_validator("topology_labels")
    @classmethod
    def _label_keys(cls, v: dict[str, str]) -> dict[str, str]:
        return {level: k8s.check_label_key(key) for level, key in v.items()}

    @model_validator(mode="after")
    def _consistent(self) -> ClusterSpec:
        seen: set[str] = set()
        uuids: dict[str, str] = {}
        hosts: dict[str, str] = {}  # kubernetes.io/hostname (the node name without the label) -> node
        for i, node in enumerate(self.nodes):
            for g in node.gpu_ids or []:
                if g.uuid is not None and g.uuid in uuids:
                    raise ValueError(
                        f"nodes[{i}].gpuIds: uuid {g.uuid} is also a GPU of node {uuids[g.uuid]!r} "
                        "(a uuid names one GPU)"
                    )
                if g.uuid is not None:
                    uuids[g.uuid] = node.name
            if node.name in seen:
                raise ValueError(f"nodes[{i}].name: node {node.name!r} appears twice")
            seen.add(node.name)
            host = node.labels.get(HOSTNAME, node.name)
            if host in hosts:
                where = "labels" if HOSTNAME in node.labels else "name"
                raise ValueError(
                    f"nodes[{i}].{where}: kubernetes.io/hostname {host!r} is also the hostname of node "
                    f"{hosts[host]!r}; pods pinned to it could land on either"
                )
            hosts[host] = node.name
            if node.node_class is not None and node.node_class not in self.node_classes:
                raise ValueError(
                    f"nodes[{i}].class: {node.node_class!r} is not in nodeClasses {sorted(self.node_classes)}"
                )
            for level, key in self.topology_labels.items():
                named = {"nvlink-domain": node.nvlink_domain, "rack": node.rack, "leaf": node.leaf}[level]
                if named is not None and node.labels.get(key) != named:
                    raise ValueError(
                        f"nodes[{i}].labels: topologyLabels says {key} carries the {level}, but node {node.name!r} "
                        f"has {level} {named!r} and {key}={node.labels.get(key)!r}"
                    )
        return self
