"""Every formula of the cost model against values computed by hand (the arithmetic is in each comment)."""

from __future__ import annotations

import pytest

from placer.topology import cost
from placer.topology.cost import PathFigures

NVLINK = PathFigures(900.0, 1.0, "node")
LEAF = PathFigures(50.0, 2.0, "leaf")


def test_transfer_time_units():
    # 1 GB/s moves 1e9 bytes per second = 1e3 bytes per microsecond.
    assert cost.transfer_us(1e6, 1.0) == pytest.approx(1000.0)
    assert cost.transfer_us(900e3, 900.0) == pytest.approx(1.0)


def test_ring_allreduce_tp8_on_nvswitch():
    # 2(n-1)/n * m/B + 2(n-1) L, n=8, m=32 MiB, B=900 GB/s, L=1 us:
    # 2*7/8 * 33554432 / 900e3 = 1.75 * 37.2827 = 65.2447 us; + 14 us = 79.2447 us.
    assert cost.ring_allreduce_us(8, 32 * 2**20, 900, 1.0) == pytest.approx(79.2447, abs=1e-4)


def test_ring_allreduce_trivial_groups():
    assert cost.ring_allreduce_us(1, 1e9, 1.0, 5.0) == 0.0
    # n=2: 2*1/2 * m/B + 2*1*L = m/B + 2L = 1000 + 4.
    assert cost.ring_allreduce_us(2, 1e6, 1.0, 2.0) == pytest.approx(1004.0)


def test_activation_and_kv_bytes_llama_70b():
    # Llama-3-70B: hidden 8192, bf16. 2048 prompt tokens -> 8192*2048*2 = 32 MiB per all-reduce.
    assert cost.activation_bytes(8192, 2048, 2) == 32 * 2**20
    # KV per token: 2 (K,V) x 80 layers x 8 heads x 128 dim x 2 bytes = 327,680 bytes = 320 KiB.
    assert cost.kv_cache_bytes(80, 8, 128, 2, 1) == 320 * 1024
    assert cost.kv_cache_bytes(80, 8, 128, 2, 2048) == 640 * 2**20


def test_layers_per_stage_spreads_the_remainder_first():
    assert cost.layers_per_stage(80, 1) == [80]
    assert cost.layers_per_stage(80, 3) == [27, 27, 26]
    assert sum(cost.layers_per_stage(126, 4)) == 126


def test_forward_pass_is_two_allreduces_per_layer():
    # 80 layers x 2 all-reduces x 79.2447 us = 12,679.16 us (the TP8 prefill figure explain prints).
    one = cost.ring_allreduce_us(8, 32 * 2**20, 900, 1.0)
    assert cost.forward_pass_allreduce_us(80, 8, [NVLINK], 32 * 2**20, NVLINK) == pytest.approx(160 * one)
    assert cost.forward_pass_allreduce_us(80, 8, [NVLINK], 32 * 2**20, NVLINK) == pytest.approx(12679.157, abs=1e-3)


def test_pipeline_handoff_over_the_instance_bottleneck():
    # PP 2 of TP 4 (m = 1 MB): each stage 40 layers x 2 x ring(4, 1e6, 900, 1); one hand-off of m over the
    # 50 GB/s leaf link plus 2 us latency = 1e6/50e3 + 2 = 22 us.
    m = 1e6
    ring = cost.ring_allreduce_us(4, m, 900, 1.0)  # 2*3/4 * 1e6/9e5 + 2*3*1 = 1.5 * 1.1111 + 6 = 7.6667 us
    assert ring == pytest.approx(7.6667, abs=1e-4)
    total = cost.forward_pass_allreduce_us(80, 4, [NVLINK, NVLINK], m, LEAF)
    assert total == pytest.approx(2 * 40 * 2 * ring + 22.0)


def test_kv_lanes_inside_a_box_and_on_the_network():
    # Inside a node: every GPU pair moves its shard, lanes = min(8, 4) = 4.
    assert cost.kv_lanes(NVLINK, 8, 4, rails_per_node=8) == 4
    # On the network each GPU drives its own rail: a TP4 decode takes in through its 4 NICs, not 8
    # (it was credited 8 x 50 = 400 GB/s, which its 4 NICs and PCIe links cannot carry).
    assert cost.kv_lanes(LEAF, 8, 4, rails_per_node=8) == 4
    assert cost.kv_bandwidth_gbps(LEAF, 8, 4, rails_per_node=8) == 200.0
    assert cost.kv_lanes(LEAF, 8, 8, rails_per_node=8) == 8
    assert cost.kv_lanes(LEAF, 1, 1, rails_per_node=8) == 1  # one GPU, one NIC
    assert cost.kv_lanes(LEAF, 16, 16, rails_per_node=8) == 8  # at most one node's rails (pessimistic)
    assert cost.kv_lanes(LEAF, 8, 4, rails_per_node=4) == 4  # GB200: 4 rails a tray


def test_one_pcie_gpu_does_not_reach_the_nic_rails_aggregate():
    """On a PCIe node a TP1 -> TP1 transfer may leave through the NICs, but through one of them: 32 GB/s
    (the in-node path) beats 1 x 50 capped by the GPU's own PCIe link, and a 200 GB/s floor is not met."""
    pcie = cost.PathFigures(32.0, 2.0, "node")
    out = cost.PathFigures(32.0, 2.0, "rack")  # up through the GPU's PCIe link, then a rail
    assert cost.kv_bandwidth_gbps(cost.best_kv_route([pcie, out], 1, 1, 8), 1, 1, 8) == 32.0


def test_kv_transfer_llama_70b_under_one_leaf():
    # 640 MiB over the TP4 decode's 4 rails x 50 GB/s = 671,088,640 / 200e3 = 3355.44 us, + 2 us = 3357.44 us.
    kv = cost.kv_cache_bytes(80, 8, 128, 2, 2048)
    assert cost.kv_transfer_us(kv, LEAF, 8, 4, 8) == pytest.approx(3357.4432, abs=1e-4)


def test_best_kv_route_prefers_the_faster_way_out():
    # Inside a PCIe node across sockets (32 GB/s x min(4,4) = 128 GB/s) vs out through each GPU's own rail
    # of a leaf (4 x 50 = 200 GB/s): the transfer takes the NICs.
    cross = PathFigures(32.0, 2.0, "node")
    out = PathFigures(50.0, 2.0, "leaf")
    assert cost.best_kv_route([cross, out], 4, 4, 8) == out
    # Through links no faster than the box's, the NICs add nothing now that a GPU drives one rail.
    assert cost.best_kv_route([cross, PathFigures(32.0, 2.0, "leaf")], 4, 4, 8) == cross
    # On NVLink the box is faster (900 x 4 = 3600 GB/s).
    assert cost.best_kv_route([NVLINK, PathFigures(50.0, 2.0, "leaf")], 4, 4, 8) == NVLINK


def test_telemetry_terms_are_rounded_separately():
    # queue 0.5 requests x w3 100 = 50 us-eq = 5000 units; miss (1 - 0.2) x w4 1000 = 800 -> 80,000 units.
    assert cost.queue_units_per_gpu(0.5, 100) == 5000
    assert cost.cache_miss_units_per_gpu(0.2, 1000) == 80_000
    assert cost.telemetry_per_gpu_units(0.5, 0.2, 100, 1000) == 85_000
    assert cost.telemetry_per_gpu_units(3.0, 0.0, 0, 0) == 0


def test_units_round_to_hundredths_of_a_microsecond():
    assert cost.to_units(79.2447) == 7924
    assert cost.to_units(0.005) in (0, 1)  # banker's rounding at the half; never more than one unit off


def test_a_ring_across_nodes_runs_one_ring_per_rail():
    """TP16 over two DGX H100 nodes: 8 GPUs a node, 8 rails of 50 GB/s, so 8 rings side by side carry
    400 GB/s between the nodes; NVLink (900 GB/s) inside each node is not the bottleneck. A TP2 spread 1+1
    drives one rail; a ring inside a node (or an NVLink domain) has no rails to add."""
    rack = PathFigures(50.0, 2.0, "rack")
    assert cost.ring_lanes(8, 8) == 8 and cost.ring_lanes(1, 8) == 1 and cost.ring_lanes(4, 2) == 2
    assert cost.ring_over_rails(rack, 8, 50.0, 900.0) == PathFigures(400.0, 2.0, "rack")
    assert cost.ring_over_rails(rack, 8, 50.0, 64.0) == PathFigures(64.0, 2.0, "rack")  # a PCIe node caps it
    # a two-socket PCIe node: the 32 GB/s socket crossing is inside the node, not a rail: it caps, once
    assert cost.ring_over_rails(PathFigures(32.0, 2.0, "rack"), 2, 50.0, 32.0) == PathFigures(32.0, 2.0, "rack")
    assert cost.ring_over_rails(rack, 1, 50.0, 900.0) == rack
    node = PathFigures(900.0, 0.5, "node")
    assert cost.ring_over_rails(node, 8, 900.0, 900.0) == node
