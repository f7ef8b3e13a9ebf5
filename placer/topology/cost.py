"""The cost model: pure functions with units in their names. The solver and explain both use this module,
so the numbers explain prints are the numbers the solver optimised.

Formulas (docs/DESIGN.md has the derivations):

* ring all-reduce of ``m`` bytes over ``n`` GPUs, bottleneck ``B`` GB/s, per-hop latency ``L`` us:
  ``t = 2(n-1)/n * m / B + 2(n-1) * L``. The best ring visits GPUs subtree by subtree, so it crosses each
  edge of the smallest subtree joining them exactly twice and no ring does better: ``B`` is the slowest
  edge of that subtree and ``L`` its largest latency.
* a ring across nodes: one ring per rail side by side (``ring_lanes``: the fewest GPUs the instance has on a
  node, at most the rails), so ``B`` is the rail x lanes, capped by the slowest link inside a node. Only
  where the split over nodes is fixed (nodeCount, or an engine preset's even split); a custom engine spread
  freely is priced at one rail.
* per forward pass: 2 all-reduces per layer; message = hidden x tokens in flight x bytes per element;
  ``pp - 1`` pipeline hand-offs of one activation (same size) over the instance's bottleneck link.
* KV transfer of one typical prompt: ``2 x layers x kv_heads x head_dim x bytes x prompt_tokens`` over the
  path's bandwidth x lanes: inside a node or NVLink domain every GPU pair moves its shard in parallel
  (lanes = min of the two group sizes); over the network each GPU drives its own rail (``kv_lanes``: the
  smaller instance's GPUs, at most the node's rails), divided by the spine's oversubscription when the path
  crosses the spine.
* telemetry: ``w3 x queue_depth`` (requests) and ``w4 x (1 - kv_cache_hit)`` per GPU used, node means. A GPU
  whose hit rate is unknown counts as the mean of the known ones (1.0, no charge, when none is known): an
  unmeasured node is neither a 100 % miss nor a free pass (placer.topology.build.neutral_hit).

Every term is rounded to integer *cost units* (0.01 us-equivalents) term by term, so the solver's integer
objective and the checker's recomputation agree exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

UNITS_PER_US = 100
NETWORK_LEVELS = frozenset({"rack", "leaf", "spine"})


@dataclass(frozen=True)
class PathFigures:
    """The bottleneck of a set of links: slowest bandwidth (GB/s per lane), largest latency (us), and the
    level of the narrowest domain that contains the endpoints (which says how many lanes run in parallel)."""

    bandwidth_gbps: float
    latency_us: float
    level: str


def to_units(us: float) -> int:
    """Cost units of a time in microseconds (or a weighted us-equivalent)."""
    return int(round(us * UNITS_PER_US))


def transfer_us(num_bytes: float, bandwidth_gbps: float) -> float:
    """Time to move ``num_bytes`` at ``bandwidth_gbps`` (1 GB/s = 1e3 bytes per us)."""
    return num_bytes / (bandwidth_gbps * 1e3)


def ring_allreduce_us(n_gpus: int, message_bytes: float, bandwidth_gbps: float, latency_us: float) -> float:
    """One ring all-reduce; zero for a single GPU (nothing to reduce)."""
    if n_gpus <= 1:
        return 0.0
    steps = n_gpus - 1
    return 2 * steps / n_gpus * transfer_us(message_bytes, bandwidth_gbps) + 2 * steps * latency_us


def activation_bytes(hidden_size: int, tokens: int, bytes_per_element: float) -> float:
    """One layer's activation for ``tokens`` tokens: the all-reduce message and the PP hand-off."""
    return hidden_size * tokens * bytes_per_element


def kv_cache_bytes(layers: int, kv_heads: int, head_dim: int, bytes_per_element: float, tokens: int) -> float:
    """K and V for every layer: 2 x layers x kv_heads x head_dim x bytes x tokens."""
    return 2 * layers * kv_heads * head_dim * bytes_per_element * tokens


def layers_per_stage(layers: int, pipeline_parallel: int) -> list[int]:
    """Split layers over stages as evenly as possible, earlier stages taking the remainder."""
    base, extra = divmod(layers, pipeline_parallel)
    return [base + (1 if s < extra else 0) for s in range(pipeline_parallel)]


def forward_pass_allreduce_us(
    layers: int,
    tensor_parallel: int,
    stages: list[PathFigures],
    message_bytes: float,
    handoff: PathFigures | None,
) -> float:
    """All-reduce time of one forward pass: 2 per layer in each stage's TP group, plus PP hand-offs."""
    pp = len(stages)
    total = 0.0
    for n_layers, ring in zip(layers_per_stage(layers, pp), stages, strict=True):
        total += 2 * n_layers * ring_allreduce_us(tensor_parallel, message_bytes, ring.bandwidth_gbps, ring.latency_us)
    if pp > 1 and handoff is not None:
        total += (pp - 1) * (transfer_us(message_bytes, handoff.bandwidth_gbps) + handoff.latency_us)
    return total


def ring_lanes(gpus_per_node: int, rails_per_node: int) -> int:
    """Rings an all-reduce across nodes runs side by side: NCCL keeps each ring on one NIC, and a node drives
    one rail per GPU of the instance on it (placer's NCCL settings give every rail a channel), so the
    fewest GPUs the instance has on one node, at most the node's rails."""
    return max(1, min(gpus_per_node, rails_per_node))


def ring_over_rails(ring: PathFigures, lanes: int, network_gbps: float, inner_gbps: float) -> PathFigures:
    """A ring across nodes with ``lanes`` rings side by side: the links above the nodes (``network_gbps``,
    the slowest, per rail) carry ``lanes`` rails, the links inside a node (``inner_gbps``, the node's
    slowest, socket crossings included) carry every ring at their own rate."""
    if ring.level not in NETWORK_LEVELS or lanes <= 1:
        return ring
    return PathFigures(min(network_gbps * lanes, inner_gbps), ring.latency_us, ring.level)


def kv_lanes(path: PathFigures, src_gpus: int, dst_gpus: int, rails_per_node: int) -> int:
    """Parallel lanes of a KV transfer: GPU pairs inside a box; on the network each GPU drives its own rail
    (a rail-optimised node has a NIC per GPU, and a GPU's PCIe link carries about one rail), so the smaller
    instance's GPUs, at most one node's rails (pessimistic for an instance spread over nodes)."""
    pairs = max(1, min(src_gpus, dst_gpus))
    return min(pairs, rails_per_node) if path.level in NETWORK_LEVELS else pairs


def kv_bandwidth_gbps(path: PathFigures, src_gpus: int, dst_gpus: int, rails_per_node: int) -> float:
    return path.bandwidth_gbps * kv_lanes(path, src_gpus, dst_gpus, rails_per_node)


def kv_transfer_us(kv_bytes: float, path: PathFigures, src_gpus: int, dst_gpus: int, rails_per_node: int) -> float:
    """One prompt's KV cache from a prefill instance to a decode instance."""
    return transfer_us(kv_bytes, kv_bandwidth_gbps(path, src_gpus, dst_gpus, rails_per_node)) + path.latency_us


def best_kv_route(routes: list[PathFigures], src_gpus: int, dst_gpus: int, rails_per_node: int) -> PathFigures:
    """The route a KV transfer takes: the fastest among going through the narrowest common domain or any
    domain above it (a transfer inside a PCIe node may go out through the NIC rails, as NIXL/UCX pick the
    best transport). This keeps KV bandwidth monotone: a narrower common domain is never slower."""
    return max(routes, key=lambda r: (kv_bandwidth_gbps(r, src_gpus, dst_gpus, rails_per_node), -r.latency_us))


def queue_units_per_gpu(queue_depth: float, w_queue: float) -> int:
    """Cost units per GPU used on a node whose GPUs hold ``queue_depth`` waiting requests (mean)."""
    return to_units(w_queue * queue_depth)


def cache_miss_units_per_gpu(kv_cache_hit: float, w_miss: float) -> int:
    """Cost units per GPU used on a node whose KV cache hits ``kv_cache_hit`` of lookups (mean)."""
    return to_units(w_miss * (1.0 - kv_cache_hit))


def telemetry_per_gpu_units(queue_depth: float, kv_cache_hit: float, w_queue: float, w_miss: float) -> int:
    """Both telemetry terms per GPU; each is rounded on its own so explain can show them separately and
    still add up to exactly what the solver minimised."""
    return queue_units_per_gpu(queue_depth, w_queue) + cache_miss_units_per_gpu(kv_cache_hit, w_miss)
