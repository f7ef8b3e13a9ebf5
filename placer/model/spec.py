"""The serving-topology spec as the user writes it (``kind: ServingTopology``).

Pydantic models at the edge: unknown fields are rejected, names that reach manifests are checked against
Kubernetes rules, and cross-field rules (``nodeCount x gpusPerNode == TP x PP``, pool references) are
checked here so that the rest of placer never sees an impossible spec. The JSON Schema in ``schemas/`` is
generated from these classes (``placer schema``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from placer.model import API_VERSION, engines, k8s, placeholders
from placer.model.errors import InputError
from placer.model.k8s import CpuQuantity, MemoryQuantity, field_alias
from placer.model.levels import LEVEL_RANK, Level
from placer.model.numbers import Bool, BoolOrNone, Float, FloatOrNone, Int, IntOrNone

Role = Literal["prefill", "decode", "aggregated"]
Engine = Literal["vllm", "sglang", "trtllm", "custom"]
RouterKind = Literal["sglang", "vllm", "dynamo", "custom"]
# Router placeholders (router.args, router.command): lists of the replica's engine endpoints, or one value.
ROUTER_PLACEHOLDERS = (
    "prefill_urls",
    "decode_urls",
    "worker_urls",
    "prefill_hosts",
    "decode_hosts",
    "worker_hosts",
    "port",
)
DEFAULT_DECODE_TOKENS = 256  # a decode batch's tokens per forward pass when the spec does not say


MAX_TP = 72  # GPUs in one tensor-parallel group: a GB200 NVL72 rack


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=field_alias, frozen=True)


class Metadata(_Model):
    name: str = Field(
        description="DNS-1035 label (starts with a letter), at most 40 characters; prefixes every emitted object's "
        "name.",
        json_schema_extra={"maxLength": 40, "pattern": "^[a-z]([-a-z0-9]*[a-z0-9])?$"},
    )
    namespace: str = Field(
        default="default", json_schema_extra={"maxLength": 63, "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        # Object names are "<name>-r<k>-<pool>-<i>-<j>", so keep the deployment name short. Services and
        # LeaderWorkerSets named after it must be DNS-1035 labels, which start with a letter.
        k8s.check_dns_label(v, "metadata.name", max_len=40)
        if not v[0].isalpha():
            raise ValueError(
                f"metadata.name {v!r} must start with a letter: the router's Service and LeaderWorkerSets are "
                f"named after it, and Kubernetes requires DNS-1035 names for those (e.g. llama-{v})"
            )
        return v

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        return k8s.check_dns_label(v, "metadata.namespace")


class ModelShape(_Model):
    """The model's shape: all the cost model needs to size all-reduce messages and KV caches."""

    layers: Int = Field(ge=1, le=1024)
    hidden_size: Int = Field(ge=1, le=1 << 20)
    kv_heads: Int = Field(ge=1, le=1024)
    head_dim: Int = Field(ge=1, le=4096)
    bytes_per_element: Float = Field(default=2, gt=0, le=8, description="2 for bf16/fp16, 1 for fp8.")
    parameters: FloatOrNone = Field(
        default=None,
        gt=0,
        le=1e13,
        description="Total parameter count (e.g. 7.06e+10); `placer size` derives FLOPs and weight bytes from it. "
        "Default: derived from intermediateSize (docs/SIZING.md).",
    )
    intermediate_size: IntOrNone = Field(
        default=None,
        ge=1,
        le=1 << 22,
        description="MLP width (gated, 3 matrices); sizes the parameter count when parameters is not given.",
    )


class Workload(_Model):
    """Request shape used to turn link figures into times (defaults documented in docs/DESIGN.md), and the
    load ``placer size`` sizes the pools for (docs/SIZING.md). Every field is optional, so a spec written
    for placement alone still loads."""

    prompt_tokens: Int = Field(default=2048, ge=1, le=10_000_000, description="Typical (mean) prompt length.")
    prompt_tokens_p90: IntOrNone = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="90th-percentile prompt length: `placer size` meets ttftMs for it (default: promptTokens).",
    )
    output_tokens: Int = Field(default=256, ge=1, le=10_000_000, description="Mean generated tokens per request.")
    request_rate: FloatOrNone = Field(
        default=None,
        gt=0,
        le=1e7,
        description="Requests per second the whole deployment (all replicas) must serve; `placer size` needs it.",
    )

    @model_validator(mode="after")
    def _p90(self) -> Workload:
        if self.prompt_tokens_p90 is not None and self.prompt_tokens_p90 < self.prompt_tokens:
            raise ValueError(
                f"promptTokensP90: {self.prompt_tokens_p90} is below the mean promptTokens {self.prompt_tokens}"
            )
        return self

    @property
    def prompt_p90(self) -> int:
        """The prompt length the TTFT target is met for."""
        return self.prompt_tokens if self.prompt_tokens_p90 is None else self.prompt_tokens_p90


class GpuSelector(_Model):
    product: str | None = Field(default=None, description="Exact GPU product (GFD nvidia.com/gpu.product).")
    min_memory_gib: FloatOrNone = Field(default=None, gt=0)


class Placement(_Model):
    required: Level = Field(default="spine", description="Each TP group must sit inside one domain of this level.")
    preferred: Level | None = Field(default=None, description="Soft: groups placed broader than this count as misses.")

    @model_validator(mode="after")
    def _order(self) -> Placement:
        if self.preferred and LEVEL_RANK[self.preferred] > LEVEL_RANK[self.required]:
            raise ValueError(f"preferred level {self.preferred!r} is broader than required {self.required!r}")
        return self


RESERVED_ENV_PREFIX = "PLACER_"  # placer.model.engines: RANK_ENV, PODS_ENV, LEADER_ENV
ObjectName = Annotated[str, AfterValidator(lambda v: k8s.check_object_name(v, "name"))]  # a Secret or ConfigMap


class _ManifestPart(_Model):
    """A piece of the spec printed into the container as Kubernetes spells it."""

    def manifest(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class KeyRef(_Model):
    """One key of a Secret or ConfigMap in the deployment's namespace."""

    name: ObjectName
    key: str
    optional: BoolOrNone = None

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        if len(v) > 253 or not k8s.CONFIG_KEY.fullmatch(v):
            raise ValueError(f"key {v!r} must match [-._a-zA-Z0-9]+ (at most 253)")
        return v


class EnvSource(_Model):
    """Where an env value comes from, so that a token is a reference in the manifests (and in placer's spec
    annotation), never its value."""

    secret_key_ref: KeyRef | None = None
    config_map_key_ref: KeyRef | None = None

    @model_validator(mode="after")
    def _one(self) -> EnvSource:
        if (self.secret_key_ref is None) == (self.config_map_key_ref is None):
            raise ValueError("give exactly one of secretKeyRef and configMapKeyRef")
        return self


class NameRef(_Model):
    name: ObjectName
    optional: BoolOrNone = None


class EnvFrom(_ManifestPart):
    """Every key of a Secret or ConfigMap as env (``envFrom``), e.g. an ``hf-token-secret`` holding HF_TOKEN."""

    secret_ref: NameRef | None = None
    config_map_ref: NameRef | None = None
    prefix: str | None = None

    @model_validator(mode="after")
    def _one(self) -> EnvFrom:
        if (self.secret_ref is None) == (self.config_map_ref is None):
            raise ValueError("give exactly one of secretRef and configMapRef")
        if self.prefix is not None and not k8s.ENV_NAME.fullmatch(self.prefix):
            raise ValueError(f"prefix {self.prefix!r} must match [-._a-zA-Z][-._a-zA-Z0-9]*")
        if self.prefix is not None and self.prefix.startswith(RESERVED_ENV_PREFIX):
            raise ValueError(f"prefix {self.prefix!r} is reserved: placer sets the {RESERVED_ENV_PREFIX}* variables")
        return self


class EnvVar(_ManifestPart):
    name: str
    value: str | None = None
    value_from: EnvSource | None = Field(
        default=None, description="secretKeyRef or configMapKeyRef {name, key}: a token stays in its Secret."
    )

    @model_validator(mode="after")
    def _one(self) -> EnvVar:
        if (self.value is None) == (self.value_from is None):
            raise ValueError(f"env {self.name}: give exactly one of value and valueFrom")
        return self

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not k8s.ENV_NAME.fullmatch(v):
            raise ValueError(f"env name {v!r} must match [-._a-zA-Z][-._a-zA-Z0-9]*")
        if v.startswith(RESERVED_ENV_PREFIX):
            # placer sets these per pod (rank, pods, leader address); a second entry of the same name wins
            # in the container and would give every pod the same rank
            raise ValueError(f"env name {v!r} is reserved: placer sets the {RESERVED_ENV_PREFIX}* variables itself")
        return v


OVERCOMMITTED = ("cpu", "memory", "ephemeral-storage")  # requests below limits; every other resource: equal


class Resources(_Model):
    """CPU/memory requests and limits per pod; placer adds ``nvidia.com/gpu`` itself."""

    requests: dict[str, k8s.QuantityText] = Field(default_factory=dict)
    limits: dict[str, k8s.QuantityText] = Field(default_factory=dict)

    @property
    def scheduled(self) -> dict[str, str]:
        """What the scheduler counts: the requests, and a limit's value where its request is not given (the
        API server copies it there)."""
        return self.requests | {k: v for k, v in self.limits.items() if k not in self.requests}

    @model_validator(mode="after")
    def _as_the_api_server_takes(self) -> Resources:
        for key, request in self.requests.items():
            limit = self.limits.get(key)
            if key in OVERCOMMITTED:
                if limit is not None and k8s.parse_quantity(request) > k8s.parse_quantity(limit):
                    raise ValueError(
                        f"requests.{key}: {request} is more than limits.{key} {limit} (the API refuses it)"
                    )
            elif limit is None or k8s.parse_quantity(request) != k8s.parse_quantity(limit):
                raise ValueError(
                    f"requests.{key}: Kubernetes does not overcommit {key}: give limits.{key} equal to its request"
                )
        return self

    @field_validator("requests", "limits")
    @classmethod
    def _quantities(cls, v: dict[str, str]) -> dict[str, str]:
        for key, qty in v.items():
            if key == "nvidia.com/gpu":
                raise ValueError("nvidia.com/gpu is set by placer from the placement; remove it")
            k8s.check_label_key(key)
            try:  # the message names the key: the field path ends at requests / limits
                k8s.parse_quantity(qty)
                {"cpu": k8s.check_cpu, "memory": k8s.check_memory}.get(key, str)(qty)
            except ValueError as exc:
                raise ValueError(f"{key} {exc}") from None
        return v


class Port(_Model):
    name: str = "http"
    container_port: Int = Field(ge=1, le=65535)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return k8s.check_dns_label(v, "port name", max_len=15)


class ContainerTemplate(_Model):
    engine: Engine = Field(
        default="custom",
        description="vllm, sglang or trtllm: placer writes the command and the flags that follow from the spec "
        "and the placement (parallel sizes, role, KV transfer, port, multi-node rendezvous) and refuses args "
        "contradicting them; custom: command and args as given (docs/TARGETS.md, engine presets).",
    )
    model: str | None = Field(
        default=None, description="Model the engine serves (Hugging Face id or path in the pod); presets need it."
    )
    image: str = Field(json_schema_extra={"pattern": k8s.IMAGE_REF.pattern, "maxLength": 512})
    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    env: list[EnvVar] = Field(default_factory=list)
    env_from: list[EnvFrom] = Field(default_factory=list)
    resources: Resources = Field(default_factory=Resources)
    ports: list[Port] = Field(default_factory=list)
    shm_size: MemoryQuantity = Field(
        default="2Gi",
        description="A memory-backed /dev/shm for the engine (the container runtime's default is 64 MiB; vLLM's "
        "and NCCL's shared-memory transports need more). '0' leaves the runtime's default.",
    )

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if len(v) > 512 or not k8s.IMAGE_REF.fullmatch(v):
            raise ValueError(f"image {v!r} is not an image reference like registry/org/name:tag")
        return v

    @field_validator("model")
    @classmethod
    def _model(cls, v: str | None) -> str | None:
        if v is not None and (not v or len(v) > 512 or any(c.isspace() or not c.isprintable() for c in v)):
            raise ValueError(f"model {v[:60]!r} must be a Hugging Face id or a path, without spaces (at most 512)")
        return v

    @model_validator(mode="after")
    def _preset(self) -> ContainerTemplate:
        if self.engine != "custom" and self.model is None:
            raise ValueError(
                f"model: engine {self.engine} needs the model to serve (e.g. meta-llama/Llama-3.3-70B-Instruct)"
            )
        return self


class Pool(_Model):
    """One pool of identical serving instances (one engine process group each)."""

    role: Role | None = Field(default=None, description="Defaults to the pool's name when that is a role.")
    instances: Int = Field(ge=1, le=4096)
    tensor_parallel: Int = Field(ge=1, le=MAX_TP, description="GPUs per TP group (one pipeline stage).")
    pipeline_parallel: Int = Field(default=1, ge=1, le=64)
    node_count: IntOrNone = Field(default=None, ge=1, le=1024, description="Nodes per instance (multi-node).")
    gpus_per_node: IntOrNone = Field(default=None, ge=1, le=72)
    gpu: GpuSelector = Field(default_factory=GpuSelector)
    placement: Placement = Field(default_factory=Placement)
    tokens_in_flight: IntOrNone = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="Tokens per forward pass, sizes the all-reduce message (default: prompt for prefill, 256).",
    )
    template: ContainerTemplate
    scaling: PoolScaling | None = Field(
        default=None, description="placer autoscale: instances per replica of this pool, between min and max."
    )

    @property
    def gpus_per_instance(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel

    @model_validator(mode="after")
    def _multi_node(self) -> Pool:
        nodes, per_node = self.node_count, self.gpus_per_node
        if (nodes is None) != (per_node is None):
            raise ValueError("nodeCount and gpusPerNode go together: give both or neither")
        if nodes is not None and per_node is not None:
            total = self.gpus_per_instance
            if nodes * per_node != total:
                raise ValueError(
                    f"nodeCount x gpusPerNode = {nodes} x {per_node} = {nodes * per_node}, but "
                    f"tensorParallel x pipelineParallel = {self.tensor_parallel} x {self.pipeline_parallel} = {total}"
                )
            if self.pipeline_parallel > 1 and self.tensor_parallel > per_node:
                raise ValueError(
                    "with pipelineParallel > 1 each TP group must fit on one node "
                    f"(tensorParallel {self.tensor_parallel} > gpusPerNode {per_node})"
                )
            if self.pipeline_parallel > 1 and per_node % self.tensor_parallel:
                raise ValueError(f"gpusPerNode {per_node} must be a multiple of tensorParallel {self.tensor_parallel}")
        return self


class Transfer(_Model):
    """What the KV-cache path from one pool to another must offer, within every replica."""

    source: str = Field(alias="from", default="prefill")
    target: str = Field(alias="to", default="decode")
    min_bandwidth_gbps: FloatOrNone = Field(default=None, gt=0)
    max_level: Level | None = None


class RouterNear(_Model):
    pool: str
    level: Level = "rack"


ROUTER_KIND_NEEDED = (
    "router.kind: give sglang, vllm, dynamo, or custom with router.image, so that the manifests start a real "
    "router (placer infers it only when every pool runs one engine, sglang or vllm, by template.engine or by "
    "its image's name)"
)


class Router(_Model):
    """The request router (one per replica): a real router image started with its command, told the
    replica's prefill and decode endpoints, placed near a pool, with probes and a Service in front."""

    kind: RouterKind | None = Field(
        default=None,
        description="sglang (SGLang's router, PD mode), vllm (vLLM's router, PD mode), dynamo (Dynamo's "
        "frontend, which discovers its workers), custom (image required; args may use {prefill_urls}, "
        "{decode_urls}, {worker_urls}, {prefill_hosts}, {decode_hosts}, {worker_hosts}, {port}). Default: the "
        "engine every pool runs (sglang or vllm); manifests need it.",
    )
    image: str | None = Field(
        default=None,
        description="Overrides the kind's pinned image; required for custom.",
        json_schema_extra={"pattern": k8s.IMAGE_REF.pattern, "maxLength": 512},
    )
    command: list[str] = Field(default_factory=list, description="custom only: the router's command.")
    args: list[str] = Field(default_factory=list, description="Added after the preset's flags (placeholders expanded).")
    env: list[EnvVar] = Field(default_factory=list)
    port: Int = Field(default=8000, ge=1, le=65535)
    cpu: CpuQuantity = "2"
    memory: MemoryQuantity = "4Gi"
    near: RouterNear | None = None
    start_first: Bool = Field(
        default=False,
        description="Start the router before the engines (Grove: every engine clique startsAfter it). Not for "
        "kinds sglang and vllm, whose routers take a fixed list of engines when they start.",
    )

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        return None if v is None else ContainerTemplate._image(v)

    @model_validator(mode="after")
    def _custom(self) -> Router:
        if self.kind == "custom" and self.image is None:
            raise ValueError("image: router kind custom needs the router's image")
        if self.command and self.kind is None:
            raise ValueError("kind: a router with its own command is kind: custom (with image)")
        if self.command and self.kind != "custom":
            raise ValueError(f"command: router kind {self.kind} writes the command; remove it or use kind: custom")
        if self.start_first and self.kind in ("sglang", "vllm"):
            raise ValueError(
                f"startFirst: {self.kind}'s router takes its engines from a fixed list of URLs when it starts "
                "(vLLM's opens its port only once every engine answers; SGLang's registers an engine only if it "
                "answers within about 35 s), so engines held back until the router is ready would never be "
                "served; remove startFirst, or use kind: dynamo (its workers register themselves)"
            )
        for where, values in (("args", self.args), ("command", self.command)):
            for k, arg in enumerate(values):
                unknown = [p for p in placeholders.placeholders(arg) if p not in ROUTER_PLACEHOLDERS]
                if unknown:
                    raise ValueError(
                        f"{where}[{k}]: unknown placeholder {{{unknown[0]}}}; known: "
                        + ", ".join("{" + p + "}" for p in ROUTER_PLACEHOLDERS)
                    )
        return self


class Spread(_Model):
    level: Level


class Objective(_Model):
    """Weights of the cost terms; docs/DESIGN.md gives their units."""

    all_reduce: Float = Field(default=1.0, ge=0, le=1e6, description="per us of all-reduce time per forward pass")
    kv_transfer: Float = Field(default=1.0, ge=0, le=1e6, description="per us of KV transfer per typical prompt")
    queue_depth: Float = Field(default=100.0, ge=0, le=1e6, description="per queued request per GPU")
    cache_miss: Float = Field(default=1000.0, ge=0, le=1e6, description="per GPU at 100 % KV-cache miss")


class Slo(_Model):
    """Latency targets. `placer explain` compares the communication share with them; `placer size` sizes
    the pools to meet them (ttftMs for the p90 prompt after the mean queueing wait, itlMs for the mean
    decode step; docs/SIZING.md)."""

    ttft_ms: FloatOrNone = Field(default=None, gt=0, le=3.6e6, description="Time to first token, ms.")
    itl_ms: FloatOrNone = Field(default=None, gt=0, le=3.6e6, description="Inter-token latency, ms.")


class Dra(_Model):
    """Which DRA driver publishes the GPUs (``placer solve --target dra``)."""

    device_class: str = Field(default="gpu.nvidia.com", description="DeviceClass of whole GPUs.")
    driver: str = Field(default="gpu.nvidia.com", description="Driver name: the domain of its device attributes.")

    @field_validator("device_class", "driver")
    @classmethod
    def _subdomain(cls, v: str) -> str:
        if len(v) > 253 or not k8s.DNS1123_SUBDOMAIN.fullmatch(v):
            raise ValueError(f"{v!r} is not a DNS-1123 subdomain like gpu.nvidia.com")
        return v


class Scheduling(_Model):
    """How the gang is handed to the cluster's scheduler; docs/TARGETS.md says which target reads what."""

    scheduler_name: str = Field(
        default="scheduler-plugins-scheduler",
        description="Pods' schedulerName; when not given, each --target uses its scheduler's own name.",
    )
    schedule_timeout_seconds: Int = Field(default=600, ge=1, le=86400)
    priority: Int = Field(
        default=0,
        ge=-(10**9),
        le=10**9,
        description="When several specs are placed together, higher goes first and is never left out or made "
        "worse for a lower one (like a PriorityClass value).",
    )
    queue: str | None = Field(default=None, description="KAI / Volcano queue or Kueue LocalQueue (target default).")
    topology: str | None = Field(
        default=None, description="KAI Topology to reference; placer emits one named placer-<cluster> otherwise."
    )
    topology_labels: dict[Level, str] = Field(
        default_factory=dict,
        description="Node label key per placer level (defaults: kubernetes.io/hostname, nvidia.com/gpu.clique, "
        "placer.dev/rack, placer.dev/leaf).",
    )
    volcano_tiers: dict[Level, Int] = Field(
        default_factory=dict, description="Volcano HyperNode tier per level (default: numbered from the cluster)."
    )
    dra: Dra = Field(default_factory=Dra)

    @field_validator("scheduler_name")
    @classmethod
    def _sched(cls, v: str) -> str:
        return k8s.check_dns_label(v, "schedulerName")

    @field_validator("queue", "topology")
    @classmethod
    def _names(cls, v: str | None) -> str | None:
        return None if v is None else k8s.check_dns_label(v, "scheduling queue/topology name")

    @field_validator("topology_labels")
    @classmethod
    def _label_keys(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v.values():
            k8s.check_label_key(key)
        return v

    @field_validator("volcano_tiers")
    @classmethod
    def _tiers(cls, v: dict[str, int]) -> dict[str, int]:
        if any(not 1 <= t <= 64 for t in v.values()):
            raise ValueError("volcanoTiers: tiers are 1-64")
        ordered = [v[lv] for lv in LEVEL_RANK if lv in v]
        if ordered != sorted(ordered) or len(set(ordered)) != len(ordered):
            raise ValueError("volcanoTiers: a broader level needs a higher tier")
        return v


class Nccl(_Model):
    """NCCL environment: placer picks values from the placement; ``env`` wins over them, and a pool's
    template env wins over both."""

    auto: Bool = Field(default=True, description="Let placer choose NCCL settings from each instance's links.")
    profile: Literal["serving", "training"] = Field(
        default="serving",
        description=(
            "Workload the channel counts are tuned for: serving (2-4 channels, small latency-bound messages) "
            "or training (8-16 channels, large gradient all-reduces); docs/TARGETS.md has the sources."
        ),
    )
    env: dict[str, str] = Field(default_factory=dict, description="Values that replace placer's choices.")

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not k8s.ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if name.startswith(RESERVED_ENV_PREFIX):
                raise ValueError(f"{name!r} is reserved: placer sets the {RESERVED_ENV_PREFIX}* variables")
        return v


_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(s|m|h)?$")


def _seconds(value: Any) -> Any:
    """A duration as seconds: a number, or a string such as ``300s``, ``5m``, ``1h`` (the source's
    ``scaleDownDelay: 300s`` spelling)."""
    if isinstance(value, bool):
        raise ValueError(f"expected seconds, got {str(value).lower()}")
    if isinstance(value, str):
        found = _DURATION.fullmatch(value)  # the JSON Schema's pattern
        if found is None:
            raise ValueError(f"{value!r} is not a duration (seconds, or a number with s, m or h: 300s, 5m)")
        return float(found[1]) * {"s": 1, "m": 60, "h": 3600}[found[2] or "s"]
    return value


MAX_DURATION_S = 7 * 86400
Duration = Annotated[
    float,
    BeforeValidator(_seconds),
    Field(ge=0, le=MAX_DURATION_S),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0, "maximum": MAX_DURATION_S},
                {"type": "string", "pattern": _DURATION.pattern},
            ],
            "description": f"seconds, or a number with s, m or h (300s, 5m, 1h); at most {MAX_DURATION_S} s (a week)",
        }
    ),
]


class ScaleUpWhen(_Model):
    """Scale out when a pool's observed value exceeds one of these (set them below the SLO: the point is to
    add capacity before the SLO is broken, and a new instance takes minutes to load its weights)."""

    queue_depth_per_gpu: FloatOrNone = Field(
        default=None, gt=0, le=1e6, alias="queueDepthPerGPU", description="mean queued requests per GPU"
    )
    ttft_p90_ms: FloatOrNone = Field(default=None, gt=0, le=1e7, description="worst node's p90 TTFT, ms")

    @model_validator(mode="after")
    def _one(self) -> ScaleUpWhen:
        if self.queue_depth_per_gpu is None and self.ttft_p90_ms is None:
            raise ValueError("scaleUpWhen: give queueDepthPerGPU, ttftP90Ms or both")
        return self


class _ScalingPolicy(_Model):
    scale_up_when: ScaleUpWhen
    scale_down_below: Float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="Scale in only when, with one unit fewer, every signal would stay below this fraction of its "
        "scaleUpWhen threshold (hysteresis: a scale-in must not trigger the next scale-out).",
    )
    scale_down_after: Duration = Field(
        default=300.0, description="Below the scale-in line this long before scaling in."
    )
    cooldown: Duration = Field(default=120.0, description="No scaling this long after the deployment's last change.")


class Scaling(_ScalingPolicy):
    """``placer autoscale``: whole replicas (every pool and the router) added or removed."""

    min_replicas: Int = Field(default=1, ge=1, le=1024)
    max_replicas: Int = Field(ge=1, le=1024)

    @model_validator(mode="after")
    def _bounds(self) -> Scaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"scaling: minReplicas {self.min_replicas} is more than maxReplicas {self.max_replicas}")
        return self


class PoolScaling(_ScalingPolicy):
    """``placer autoscale`` per pool: instances per replica. At least one, so every replica keeps a complete
    instance of every pool (the hierarchical minimum)."""

    min_instances: Int = Field(default=1, ge=1, le=4096)
    max_instances: Int = Field(ge=1, le=4096)

    @model_validator(mode="after")
    def _bounds(self) -> PoolScaling:
        if self.min_instances > self.max_instances:
            raise ValueError(
                f"scaling: minInstances {self.min_instances} is more than maxInstances {self.max_instances}"
            )
        return self


class ServingTopology(_Model):
    api_version: Literal["placer.dev/v1alpha1"] = Field(description=f"Always {API_VERSION}.")
    kind: Literal["ServingTopology"]
    metadata: Metadata
    model: ModelShape
    workload: Workload = Field(default_factory=Workload)
    pools: Annotated[
        dict[str, Pool],
        Field(
            min_length=1,
            max_length=16,
            # object names append -<instance>[-<pod>] to the pool's: a DNS label of at most 12, no -<number> end
            json_schema_extra={
                "propertyNames": {"maxLength": 12, "pattern": "^(?!.*-[0-9]+$)[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}
            },
        ),
    ]
    transfer: Transfer | None = None
    router: Router | None = None
    replicas: Int = Field(default=1, ge=1, le=1024)
    min_replicas: IntOrNone = Field(default=None, ge=0, le=1024)
    spread: Spread | None = None
    objective: Objective = Field(default_factory=Objective)
    slo: Slo = Field(default_factory=Slo)
    scheduling: Scheduling = Field(default_factory=Scheduling)
    nccl: Nccl = Field(default_factory=Nccl)
    scaling: Scaling | None = Field(default=None, description="placer autoscale: replicas between min and max.")

    @field_validator("pools")
    @classmethod
    def _pool_names(cls, pools: dict[str, Pool]) -> dict[str, Pool]:
        for name, pool in pools.items():
            k8s.check_dns_label(name, "pool name", max_len=12)
            if re.search(r"-\d+$", name):  # objects are named <name>-r<k>-<pool>-<instance>[-<pod>]
                raise ValueError(
                    f"pool name {name!r} ends in -<number>, which object names append for instances and pods: "
                    f"pool {name!r} instance 0 would share names with another pool's instances (e.g. "
                    f"{name.rsplit('-', 1)[0] + 'x'!r} or {name.replace('-', '')!r})"
                )
            if pool.role is None and name not in ("prefill", "decode", "aggregated"):
                raise ValueError(f"pool {name!r}: give role (prefill, decode or aggregated)")
        return pools

    @model_validator(mode="before")
    @classmethod
    def _router_kind(cls, data: Any) -> Any:
        """router.kind when not given: the router of the engine every pool runs (its preset, else the
        engine image's name: vllm or sglang), so a spec naming one engine gets that engine's router."""
        if not isinstance(data, dict) or not isinstance(data.get("router"), dict):
            return data
        if data["router"].get("kind") is not None:  # given, even as "" or {}: validation says what is wrong
            return data
        pools = data.get("pools")
        if not isinstance(pools, dict) or not pools:
            return data
        found = {_engine_family(pool) for pool in pools.values()}
        if len(found) == 1 and (kind := found.pop()) in ("sglang", "vllm"):
            data = dict(data)
            data["router"] = dict(data["router"], kind=kind)
        return data

    @property
    def router_kind(self) -> RouterKind | None:
        return None if self.router is None else self.router.kind

    def check_router_kind(self) -> None:
        """Every target's manifests start the router, so a router whose kind was neither given nor inferred
        is bad input, said before any solve by the commands that read files (a library caller that only
        places may leave it out: placement does not need it)."""
        if self.router is not None and self.router.kind is None:
            raise InputError(ROUTER_KIND_NEEDED)

    @model_validator(mode="after")
    def _presets(self) -> ServingTopology:
        for name in self.pools:
            engines.check_pool(self, name)
            if engines.preset(self, name) is not None:
                self._check_kv_heads(name)
        if self.router is not None and "router" in self.pools:  # its Service and Grove clique are <gang>-router
            raise ValueError(
                "pools.router: the router's objects are named 'router' (its Service, Grove's clique): rename the pool"
            )
        kind = self.router_kind
        if kind in ("sglang", "vllm"):
            roles = {self.role_of(p) for p in self.pools}
            if "prefill" in roles and "decode" not in roles or "decode" in roles and "prefill" not in roles:
                raise ValueError(
                    f"router.kind: {kind}'s router in PD mode needs both a prefill and a decode pool (roles here: "
                    f"{sorted(roles)})"
                )
            other = sorted(p for p, pool in self.pools.items() if pool.template.engine not in ("custom", kind))
            if other:
                raise ValueError(
                    f"router.kind: {kind}'s router speaks to {kind} engines, but pools {other} run "
                    f"{self.pools[other[0]].template.engine}: use that engine's router kind, or custom"
                )
        return self

    def _check_kv_heads(self, pool_name: str) -> None:
        """vLLM, SGLang and TensorRT-LLM split the KV heads over the tensor-parallel ranks, or copy them: a
        size that neither divides them nor is a multiple of them does not start (the attention heads are
        not checked: hiddenSize / headDim is not their count for every model)."""
        tp, kv = self.pools[pool_name].tensor_parallel, self.model.kv_heads
        if tp % kv and kv % tp:
            fits = sorted(
                n for n in {*range(1, kv + 1), kv * 2, kv * 4} if n <= MAX_TP and (kv % n == 0 or n % kv == 0)
            )
            raise ValueError(
                f"pools.{pool_name}.tensorParallel: {self.pools[pool_name].template.engine} splits the model's {kv} "
                f"KV heads (model.kvHeads) over the tensor-parallel ranks, or copies them, so {tp} must divide {kv} "
                f"or be a multiple of it (e.g. {', '.join(map(str, fits))}); the engine would not start"
            )

    @model_validator(mode="after")
    def _references(self) -> ServingTopology:
        if self.min_replicas is not None and self.min_replicas > self.replicas:
            raise ValueError(f"minReplicas: {self.min_replicas} is more than replicas {self.replicas}")
        refs: list[tuple[str, str]] = []
        if self.transfer:
            refs += [("transfer.from", self.transfer.source), ("transfer.to", self.transfer.target)]
            if self.transfer.source == self.transfer.target:
                raise ValueError("transfer.to: transfer.from and transfer.to name the same pool")
        if self.router and self.router.near:
            refs.append(("router.near.pool", self.router.near.pool))
        for where, pool in refs:
            if pool not in self.pools:
                raise ValueError(f"{where}: names pool {pool!r}, but the pools are {sorted(self.pools)}")
        return self

    def role_of(self, pool: str) -> Role:
        declared = self.pools[pool].role
        return declared if declared is not None else pool  # type: ignore[return-value]

    def tokens_in_flight(self, pool: str) -> int:
        """Tokens per forward pass of a pool: its own figure, else the typical prompt for prefill."""
        given = self.pools[pool].tokens_in_flight
        if given is not None:
            return given
        return self.workload.prompt_tokens if self.role_of(pool) == "prefill" else DEFAULT_DECODE_TOKENS

    @property
    def replicas_floor(self) -> int:
        """Fewest complete replicas acceptable; all of them unless minReplicas says otherwise."""
        return self.replicas if self.min_replicas is None else self.min_replicas


def _engine_family(pool: Any) -> str | None:
    """sglang / vllm / trtllm / None: a raw pool's engine preset, else what its image's name says."""
    template = pool.get("template") if isinstance(pool, dict) else None
    if not isinstance(template, dict):
        return None
    engine = template.get("engine")
    if engine and engine != "custom":
        return str(engine)
    image = template.get("image")
    if not isinstance(image, str):
        return None
    name = image.rsplit("/", 1)[-1].split(":")[0].lower()
    return next((family for family in ("sglang", "vllm") if family in name), None)
