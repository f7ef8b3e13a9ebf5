"""How an instance of a pool spreads over nodes on a given cluster (the spec's layout, or the one an engine
preset needs)."""

from __future__ import annotations

from placer.model.spec import Pool
from placer.topology.graph import Topology

Layout = tuple[int | None, int | None, bool]  # nodes per instance, GPUs per node, one node only


def layout(topo: Topology, pool: Pool, eligible: frozenset[int]) -> Layout:
    """(nodes per instance, GPUs per node, one node only) for this pool on this cluster. The spec's
    nodeCount/gpusPerNode when given. An engine preset (template.engine other than custom) runs one process
    group over equal pods (vLLM and SGLang split TP evenly over --nnodes), so an instance that fits the
    largest matching node goes on one node, and a larger one is split evenly: the largest divisor of its GPUs
    that fits a node, per node (TP8 on 4-GPU GB200 trays: 2 x 4). A custom engine may be spread freely,
    except over pipeline stages: without nodeCount a PP > 1 instance is one node (stages cut at pods, so a
    free split could cut a TP group across nodes; check_pool_fits refuses one larger than a node)."""
    if pool.node_count is None and pool.pipeline_parallel > 1 and eligible:
        return None, None, True
    if pool.node_count is not None or pool.template.engine == "custom" or not eligible:
        return pool.node_count, pool.gpus_per_node, False
    size = pool.gpus_per_instance
    biggest = max(len(topo.nodes[n].gpus) for n in eligible)
    if size <= biggest:
        return None, None, True
    per_node = max(
        g
        for g in range(1, biggest + 1)
        if size % g == 0 and (g % pool.tensor_parallel == 0 or pool.pipeline_parallel == 1)
    )
    return size // per_node, per_node, False
