"""Serving telemetry -> each node's ``metrics`` (queueDepth, kvCacheHit per GPU; ttftP90Ms per node).

The engines (vLLM, SGLang, Dynamo workers and frontend) export one set of series per engine process, scraped
from its pod; DCGM exports one per GPU. A series reaches a node through the first of these that names a node
of the cluster (docs/IMPORT.md, "Telemetry"):

1. a ``node`` or ``kubernetes_node`` label (kube-prometheus relabelling): decisive, even when it names an
   unknown node (the series is then ignored, not moved elsewhere);
2. DCGM's ``Hostname`` (the node under the GPU Operator; a container id under plain Docker) or ``UUID``;
3. ``pod`` (+ ``namespace``): the node --pods binds it to, or the node DCGM attributes it to;
4. ``instance`` (``host:port``) when the host is a node name;
5. the file's ``NODE=FILE`` assignment (a ``curl engine:8000/metrics`` dump has no labels at all).

Within a node, an engine's figures go to the GPUs its pod holds (DCGM's pod attribution or the
``placer.dev/gpus`` annotation --pods reads), else spread over every GPU of the node: the cost model reads
node means, and the mean is the same either way. Every series is counted in the summary as used, reported
or ignored, with the reason.
"""

from __future__ import annotations

import fnmatch
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from placer.importers.common import Note
from placer.importers.prom import MetricsFile, Series
from placer.model.cluster import MAX_QUEUE_DEPTH

QUEUE = {
    "vllm:num_requests_waiting": "queueDepth",
    "sglang:num_queue_reqs": "queueDepth",
}
HIT_RATE = {  # gauges already holding a fraction
    "sglang:cache_hit_rate": "kvCacheHit",
    "vllm:gpu_prefix_cache_hit_rate": "kvCacheHit",  # vLLM V0
    "dynamo_component_kvstats_gpu_prefix_cache_hit_rate": "kvCacheHit",
}
HIT_COUNTERS = {  # vLLM V1: hits / queries, in tokens (the _total suffix is the exposition's, the bare name the API's)
    "vllm:prefix_cache_hits_total": "hits",
    "vllm:prefix_cache_hits": "hits",
    "vllm:prefix_cache_queries_total": "queries",
    "vllm:prefix_cache_queries": "queries",
}
TTFT = {
    "vllm:time_to_first_token_seconds_bucket",
    "sglang:time_to_first_token_seconds_bucket",
    "dynamo_frontend_time_to_first_token_seconds_bucket",
}
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"

# Known series placer reads but does not charge, and why (the summary and docs/IMPORT.md quote these).
REPORTED = {
    "vllm:num_requests_running": "running requests are the engine's batch, not a queue",
    "sglang:num_running_reqs": "running requests are the engine's batch, not a queue",
    "vllm:gpu_cache_usage_perc": "KV-cache usage (fullness), not a hit rate",
    "vllm:kv_cache_usage_perc": "KV-cache usage (fullness), not a hit rate",
    "sglang:token_usage": "KV-cache usage (fullness), not a hit rate",
    "dynamo_component_kvstats_gpu_cache_usage_percent": "KV-cache usage (fullness), not a hit rate",
    "dynamo_frontend_queued_requests": "the frontend's HTTP queue: no GPU holds it",
    "dynamo_frontend_inflight_requests": "the frontend's requests in flight: no GPU holds them",
    GPU_UTIL: "busy GPUs come from --pods; utilisation is not a queue (mean per node listed below)",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "traffic counter, not link capacity (fabric figures come from topology)",
    "DCGM_FI_PROF_NVLINK_TX_BYTES": "traffic counter, not link capacity (fabric figures come from topology)",
    "DCGM_FI_PROF_NVLINK_RX_BYTES": "traffic counter, not link capacity (fabric figures come from topology)",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "traffic counter, not link capacity (fabric figures come from topology)",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "traffic counter, not link capacity (fabric figures come from topology)",
}
ENGINE_PREFIXES = ("vllm:", "sglang:", "dynamo_", "DCGM_FI_")
GENERIC = ("ignored: not a figure the placement cost reads", "ignored: not a serving-engine or DCGM metric")
NODE_LABELS = ("node", "kubernetes_node")


@dataclass(frozen=True)
class ClusterView:
    """What the mapping needs to know of the cluster being imported."""

    gpus: dict[str, int]  # node -> GPU count
    resolve: Callable[[str], str | None]  # a name other sources use -> node name
    pods: dict[str, tuple[str, tuple[int, ...] | None]] = field(default_factory=dict)  # ns/pod -> node, GPUs
    uuids: dict[str, tuple[str, int]] = field(default_factory=dict)  # GPU uuid -> node, index


@dataclass(frozen=True)
class MetricsInput:
    file: MetricsFile
    node: str | None = None  # NODE of NODE=FILE: where series that name no node belong


@dataclass(frozen=True)
class Usage:
    """One summary row: a metric, how many of its series, and what became of them."""

    metric: str
    series: int
    use: str


@dataclass
class Telemetry:
    metrics: dict[str, dict[str, object]]  # node -> the document's metrics mapping
    usage: list[Usage]
    notes: list[Note]


# ---------------------------------------------------------------- reductions (pure)


def gauge_value(points: tuple[tuple[float, float], ...]) -> float:
    """A gauge over a range is its mean: a queue that was long for the whole window weighs more than a
    spike at its end. An instant vector has one point: that point."""
    return sum(v for _, v in points) / len(points)


def counter_increase(points: tuple[tuple[float, float], ...]) -> float:
    """Prometheus ``increase`` without extrapolation: the sum of rises, a drop being a restart from zero.
    One point (an instant vector or a /metrics dump) is the total since the engine started."""
    if len(points) == 1:
        return points[0][1]
    total = 0.0
    for (_, before), (_, after) in zip(points, points[1:], strict=False):
        total += after - before if after >= before else after
    return total


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """PromQL's ``histogram_quantile``: ``buckets`` are (upper bound ``le``, cumulative count). Linear
    interpolation inside the bucket holding the rank; the first bucket starts at 0 (at its bound if that is
    negative or zero); a rank in the +Inf bucket gives the largest finite bound. None without observations."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][0] != math.inf:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for i, (le, count) in enumerate(buckets):
        if count >= rank:
            if le == math.inf:
                return buckets[i - 1][0] if i > 0 else None
            if i == 0 and le <= 0:
                return le
            if count == lower_count:
                return le
            return lower_bound + (le - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = le, count
    return None


# ---------------------------------------------------------------- mapping


def _gpu_index(series: Series, node: str, view: ClusterView) -> int | None:
    """DCGM's own GPU labels: ``gpu`` (the index), ``UUID``, ``device`` (nvidiaN)."""
    count = view.gpus.get(node, 0)
    for raw in (series.label("gpu"), (series.label("device") or "").removeprefix("nvidia")):
        if raw and raw.isdigit() and int(raw) < count:
            return int(raw)
    found = view.uuids.get(series.label("UUID") or "")
    return found[1] if found and found[0] == node else None


def _pod_key(series: Series) -> str | None:
    pod = series.label("pod")
    if not pod:
        return None
    namespace = series.label("namespace") or series.label("exported_namespace")
    return f"{namespace}/{pod}" if namespace else pod


def dcgm_pod_gpus(series: list[tuple[Series, str]], view: ClusterView) -> dict[str, tuple[str, tuple[int, ...]]]:
    """DCGM's pod attribution (``pod``/``namespace`` on a GPU's series, dcgm-exporter's Kubernetes mode):
    which node and GPUs each pod holds. The engines' series carry the same pod labels."""
    found: dict[str, tuple[str, set[int]]] = {}
    for s, node in series:
        key = _pod_key(s)
        index = _gpu_index(s, node, view) if key else None
        if key and index is not None and s.name.startswith("DCGM_FI_"):
            found.setdefault(key, (node, set()))[1].add(index)
    return {k: (node, tuple(sorted(g))) for k, (node, g) in found.items()}


def locate_node(series: Series, assigned: str | None, view: ClusterView) -> tuple[str | None, str]:
    """(node, how) for one series, or (None, why not), following the precedence in the module docstring."""
    for key in NODE_LABELS:
        value = series.label(key)
        if value:
            node = view.resolve(value)
            return (node, f"{key} label") if node else (None, f"{key}={value} is not a node of the cluster")
    host = series.label("Hostname")
    if host and (node := view.resolve(host)):
        return node, "Hostname label"
    uuid = view.uuids.get(series.label("UUID") or "")
    if uuid:
        return uuid[0], "GPU UUID"
    pod = _pod_key(series)
    if pod and (found := view.pods.get(pod) or view.pods.get(pod.rpartition("/")[2])):
        return found[0], "pod"
    instance = (series.label("instance") or "").rpartition(":")[0] or series.label("instance")
    if instance and (node := view.resolve(instance)):
        return node, "instance label"
    if assigned is not None:
        return assigned, "NODE=FILE"
    return None, "names no node of the cluster (no node label, pod or instance known; give NODE=FILE)"


def _engine_key(series: Series, node: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """One engine process: its labels without the metric-specific ones (bucket bounds, states)."""
    drop = {"le", "sleep_state", "finished_reason"}
    return node, tuple((k, v) for k, v in series.labels if k not in drop)


def _gpus_of(series: Series, node: str, view: ClusterView) -> tuple[int, ...]:
    """The GPUs an engine's figures belong to: its pod's, when known, else all of the node's."""
    everything = tuple(range(view.gpus.get(node, 0)))
    pod = _pod_key(series)
    held = (view.pods.get(pod) or view.pods.get(pod.rpartition("/")[2])) if pod else None
    if held and held[0] == node and held[1]:
        return tuple(g for g in held[1] if g < len(everything)) or everything
    return everything


def with_dcgm_pods(inputs: list[MetricsInput], view: ClusterView) -> ClusterView:
    """The view with the pods DCGM attributes GPUs to: their node, and their GPU indices where --pods has
    none (only pods placer emitted carry them). --pods' node wins where the two disagree."""
    dcgm = []
    for item in inputs:
        for s in item.file.series:
            if s.name.startswith("DCGM_FI_") and (node := locate_node(s, item.node, view)[0]) is not None:
                dcgm.append((s, node))
    pods = dict(view.pods)
    for pod, (node, gpus) in sorted(dcgm_pod_gpus(dcgm, view).items()):
        known = pods.get(pod)
        if known is None or (known[0] == node and not known[1]):
            pods[pod] = (node, gpus)
    return replace(view, pods=pods)


# ---------------------------------------------------------------- the whole import


Engine = tuple[str, tuple[tuple[str, str], ...]]  # (node, labels): one engine process's series


@dataclass
class _Figures:
    """What the series add up to, per node and GPU, before they become the document's mapping."""

    queue: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    hits: dict[str, dict[int, list[float]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    counters: dict[Engine, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    counter_gpus: dict[Engine, tuple[int, ...]] = field(default_factory=dict)
    ttft: dict[tuple[str, str], dict[float, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )
    util: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


def import_telemetry(inputs: list[MetricsInput], view: ClusterView) -> Telemetry:
    """Map every series to a node, reduce it, and build each node's ``metrics`` mapping."""
    usage: dict[tuple[str, str], int] = defaultdict(int)
    view = with_dcgm_pods(inputs, view)
    located = locate_all(inputs, view, usage)
    figures = _Figures()
    for (node, _, _), (s, _) in sorted(located.items()):
        use = add_series(figures, s, node, _gpus_of(s, node, view))
        usage[(s.name, use)] += 1
    notes = _counter_hits(figures)
    metrics = {node: entry for node in sorted(view.gpus) if (entry := node_metrics(figures, node, view.gpus[node]))}
    for node, values in sorted(figures.util.items()):
        mean = sum(values) / len(values)
        text = f"node {node}: mean {GPU_UTIL} {mean:.0f} % over {len(values)} GPU(s) (reported, not charged)"
        notes.append(Note("--metrics", None, text))
    return Telemetry(metrics, summary_rows(usage), notes)


def locate_all(
    inputs: list[MetricsInput], view: ClusterView, usage: dict[tuple[str, str], int]
) -> dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[Series, str]]:
    """Every series that reaches a node with GPUs, by (node, name, labels); the same series from two files
    (an instant and a range query) has its points merged. The others are counted as ignored, with why."""
    located: dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[Series, str]] = {}
    for item in inputs:
        for s in item.file.series:
            node, how = locate_node(s, item.node, view)
            if node is None or view.gpus.get(node, 0) == 0:
                usage[(s.name, f"ignored: {how if node is None else f'node {node} has no GPUs'}")] += 1
                continue
            key = (node, s.name, s.labels)
            if key in located:
                merged = tuple(sorted(dict(located[key][0].points + s.points).items()))
                s = Series(s.name, s.labels, merged)
            located[key] = (s, node)
    return located


def add_series(figures: _Figures, s: Series, node: str, gpus: tuple[int, ...]) -> str:
    """Fold one series into the figures; returns what became of it (the summary's "use" column)."""
    if s.name in QUEUE:
        value = gauge_value(s.points)
        if value < 0:
            return "ignored: negative queue length"
        for g in gpus:
            figures.queue[node][g] += value / len(gpus)
        return "used: queueDepth (waiting requests / the engine's GPUs)"
    if s.name in HIT_RATE:
        value = gauge_value(s.points)
        if not 0 <= value <= 1:
            return "ignored: a hit rate outside 0..1"
        for g in gpus:
            figures.hits[node][g].append(value)
        return "used: kvCacheHit"
    if s.name in HIT_COUNTERS:
        engine = _engine_key(s, node)
        figures.counters[engine][HIT_COUNTERS[s.name]] = counter_increase(s.points)
        figures.counter_gpus[engine] = gpus
        return "used: kvCacheHit = hits / queries (increase over the range)"
    if s.name in TTFT:
        bound = _le(s.label("le"))
        if bound is None:
            return "ignored: bucket without a numeric le label"
        figures.ttft[(node, s.name)][bound] += counter_increase(s.points)
        return "used: ttftP90Ms (histogram_quantile 0.9, buckets summed per node)"
    if s.name == GPU_UTIL:
        figures.util[node].append(gauge_value(s.points))
    if s.name in REPORTED:
        return f"reported: {REPORTED[s.name]}"
    if s.name.startswith(ENGINE_PREFIXES):
        return GENERIC[0]
    return GENERIC[1]


def _counter_hits(figures: _Figures) -> list[Note]:
    """vLLM's counters become hit rates per engine; an engine nothing has queried yet stays unknown."""
    notes = []
    for engine, pair in sorted(figures.counters.items()):
        node, labels = engine
        if pair.get("queries", 0) > 0 and "hits" in pair:
            ratio = min(1.0, max(0.0, pair["hits"] / pair["queries"]))
            for g in figures.counter_gpus[engine]:
                figures.hits[node][g].append(ratio)
            continue
        why = "no prefix-cache queries yet" if "queries" in pair else "prefix-cache hits without queries"
        notes.append(Note("--metrics", None, f"node {node}, engine {_label_text(labels)}: {why}; hit rate unknown"))
    return notes


def node_metrics(figures: _Figures, node: str, gpu_count: int) -> dict[str, object]:
    """The document's ``metrics`` of one node (empty when nothing reached it)."""
    entry: dict[str, object] = {}
    if node in figures.queue:
        queue = {g: min(v, MAX_QUEUE_DEPTH) for g, v in figures.queue[node].items()}
        entry["queueDepth"] = _per_gpu(queue, gpu_count, 3)
    if node in figures.hits:
        entry["kvCacheHit"] = _per_gpu({g: sum(v) / len(v) for g, v in figures.hits[node].items()}, gpu_count, 4)
    p90s = [histogram_quantile(0.9, list(b.items())) for (n, _), b in sorted(figures.ttft.items()) if n == node]
    known = [p for p in p90s if p is not None]
    if known:  # several engines' histograms: the worst p90, what an autoscaling trigger must see
        entry["ttftP90Ms"] = round(max(known) * 1000, 1)
    return entry


def summary_rows(usage: dict[tuple[str, str], int], examples: int = 4) -> list[Usage]:
    """Rows for the summary: used, then reported, then ignored; metrics ignored for a generic reason share
    one row per reason (a full /metrics dump has a hundred of them), naming a few."""
    rank = {"used": 0, "reported": 1, "ignored": 2}
    rows = [Usage(m, n, use) for (m, use), n in usage.items() if use not in GENERIC]
    rows.sort(key=lambda r: (rank[r.use.partition(":")[0]], r.use, r.metric))
    for reason in GENERIC:
        names = sorted(m for (m, use) in usage if use == reason)
        if names:
            shown = ", ".join(names[:examples]) + (", ..." if len(names) > examples else "")
            total = sum(n for (m, use), n in usage.items() if use == reason)
            rows.append(Usage(f"{len(names)} other metric(s): {shown}", total, reason))
    return rows


def _le(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if not math.isnan(value) else None


def _label_text(labels: tuple[tuple[str, str], ...]) -> str:
    return "{" + ",".join(f"{k}={v}" for k, v in labels) + "}"


def _per_gpu(values: dict[int, float], count: int, digits: int) -> float | dict[int, float]:
    """One number when every GPU of the node has the same figure, else a mapping of the known GPUs."""
    rounded = {g: round(v, digits) for g, v in sorted(values.items())}
    if len(rounded) == count and len(set(rounded.values())) == 1:
        return next(iter(rounded.values()))
    return rounded


def match_node(pattern: str, nodes: list[str], resolve: Callable[[str], str | None]) -> list[str]:
    """Nodes a ``NODE=FILE`` names: a glob over node names, else a name (or alias) of one node."""
    if any(c in pattern for c in "*?["):
        return [n for n in nodes if fnmatch.fnmatchcase(n, pattern)]
    node = resolve(pattern)
    return [node] if node else []
