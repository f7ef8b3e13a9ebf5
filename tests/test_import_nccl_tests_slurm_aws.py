"""nccl-tests output (both header layouts), Slurm topology files (tree, block, topology.yaml, topograph's
generated files) and the AWS instance topology output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from placer.importers.aws_topology import parse_instance_topology
from placer.importers.nccl_tests import parse_nccl_tests
from placer.importers.slurm import expand_hostlist, parse_slurm
from placer.model.errors import InputError

SAMPLES = Path(__file__).resolve().parent / "data" / "samples"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


# --- nccl-tests -------------------------------------------------------------------------------------------


def test_gcp_a3mega_two_node_all_reduce() -> None:
    run = parse_nccl_tests(sample("nccl-tests-allreduce-gcp-a3mega-h100-2node.txt"), "a3.txt")
    assert run.layout == "nccl-tests 2.13+ (root, #wrong)"
    assert run.hosts == ["ztan-mig-235z", "ztan-mig-gq73"] and len(run.ranks) == 16
    assert run.ranks[9].host == "ztan-mig-gq73" and run.ranks[9].device == 1 and run.ranks[9].bus_id == "0000:05:00"
    assert run.ranks[0].gpu == "NVIDIA H100 80GB HBM3"
    assert [r.size_bytes for r in run.rows][:3] == [8, 16, 32] and len(run.rows) == 31
    row = run.rows[20]  # 8 MiB
    assert (row.size_bytes, row.out_of_place.busbw_gbps, row.in_place.busbw_gbps) == (8388608, 27.5, 27.91)
    peak = run.peak()
    assert peak is not None
    assert (peak.size_bytes, peak.out_of_place.busbw_gbps, peak.out_of_place.time_us) == (8589934592, 338.82, 47535.0)
    assert (peak.redop, peak.root, peak.dtype) == ("sum", -1, "float")
    assert run.avg_busbw_gbps == 70.742 and run.notes == ()


def unquote(text: str) -> str:
    """The AWS sample quotes nccl-tests output in a Python comment ('    # ' before data rows, '    ' before
    the '#' header lines): drop the indent and the '#' added in front of data rows."""
    lines = [line[4:] for line in text.splitlines()[1:]]
    return "\n".join(line[1:] if re.match(r"^# +\d", line) else line for line in lines)


def test_old_and_new_header_layouts_are_mapped_by_name() -> None:
    old, new = unquote(sample("nccl-tests-header-old-vs-new-aws-parallelcluster.txt")).split("# --------")
    a, b = parse_nccl_tests(old, "old"), parse_nccl_tests(new, "new")
    assert a.layout == "nccl-tests 2.10 (error column)" and b.layout == "nccl-tests 2.13+ (root, #wrong)"
    (ra,), (rb,) = a.rows, b.rows
    # Same size, columns found by name: 2.10 has no root column, so busbw is the 7th field there, 8th in 2.13.
    assert (ra.size_bytes, ra.root, ra.out_of_place.busbw_gbps, ra.out_of_place.max_error) == (
        1073741824,
        None,
        26.58,
        2e-06,
    )
    assert (rb.size_bytes, rb.root, rb.out_of_place.busbw_gbps, rb.out_of_place.wrong) == (1073741824, -1, 45.73, 0.0)
    assert (ra.in_place.busbw_gbps, rb.in_place.busbw_gbps) == (26.63, 45.81)
    # A max error of 2e-06 is float rounding, not a failed check: the 2.10 row is usable.
    assert a.peak() == ra


def test_the_quoted_sample_as_it_is_is_refused_with_the_reason() -> None:
    with pytest.raises(InputError) as info:
        parse_nccl_tests(sample("nccl-tests-header-old-vs-new-aws-parallelcluster.txt"), "aws.txt")
    assert str(info.value) == (
        "aws.txt:12: the results table has no rows (every line is a '#' comment: is the output quoted inside "
        "another file?)"
    )


def test_wrong_results_are_not_used_and_noise_is_counted() -> None:
    text = sample("nccl-tests-allreduce-gcp-a3mega-h100-2node.txt")
    lines = text.split("\n")
    lines[53] = lines[53].replace("338.82      0", "338.82      5")  # the 8 GiB row reports wrong elements
    lines.insert(3, "ztan-mig-235z:6899:6899 [0] NCCL INFO Bootstrap : Using eth0")
    run = parse_nccl_tests("\n".join(lines), "w.txt")
    peak = run.peak()
    assert peak is not None and peak.size_bytes == 4294967296
    assert [n.text for n in run.notes] == [
        "1 line(s) not part of the results table, e.g. 'ztan-mig-235z:6899:6899 [0] NCCL INFO Bootstrap : Using eth0'",
        "size 8589934592: wrong results reported; not used",
    ]


def test_not_nccl_tests_output() -> None:
    with pytest.raises(InputError, match=r"^x: no nccl-tests results table found"):
        parse_nccl_tests(sample("slurm-topology-block.conf"), "x")


# --- Slurm ------------------------------------------------------------------------------------------------


def test_hostlist_expressions() -> None:
    assert expand_hostlist("tux[0-3,12,18-20]") == ["tux0", "tux1", "tux2", "tux3", "tux12", "tux18", "tux19", "tux20"]
    assert expand_hostlist("node[08-10],login") == ["node08", "node09", "node10", "login"]
    assert expand_hostlist("r[1-2]-n[1-2]") == ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]
    assert expand_hostlist("switch.1.[1-2]") == ["switch.1.1", "switch.1.2"]
    for bad, message in (("n[1-", "'[' without ']'"), ("n[3-1]", "empty or too long"), ("n[a]", "expected N or N-M")):
        with pytest.raises(InputError, match=re.escape(message)):
            expand_hostlist(bad, "t.conf", 4)
    with pytest.raises(InputError, match="expands to more than 1000000 names"):
        expand_hostlist("a[0-999]b[0-999]c[0-9]", "t.conf", 1)


def test_tree_sample_three_leaf_switches_under_one() -> None:
    topo = parse_slurm(sample("slurm-topology-tree.conf"), "tree.conf")
    assert topo.plugin == "tree" and topo.nodes == tuple(f"dev{i}" for i in range(18))
    assert [topo.leaf_of[f"dev{i}"] for i in (0, 5, 6, 17)] == ["s0", "s0", "s1", "s2"]
    assert topo.parent_of == {"s0": "s3", "s1": "s3", "s2": "s3"} and topo.notes == ()


def test_block_sample_four_blocks_and_block_sizes() -> None:
    topo = parse_slurm(sample("slurm-topology-block.conf"), "block.conf")
    assert topo.plugin == "block" and len(topo.nodes) == 128 and topo.block_sizes == (30, 120)
    assert (topo.leaf_of["node1"], topo.leaf_of["node32"], topo.leaf_of["node33"], topo.leaf_of["node128"]) == (
        "block1",
        "block1",
        "block2",
        "block4",
    )
    assert [n.text for n in topo.notes] == ["BlockSizes=30,120: aggregated blocks have no placer level; recorded only"]


def test_topology_yaml_uses_the_cluster_default_tree() -> None:
    topo = parse_slurm(sample("slurm-topology.yaml"), "topology.yaml")
    assert topo.plugin == "tree" and topo.leaf_of == {"node01": "s1", "node02": "s1", "node03": "s2", "node04": "s2"}
    assert topo.parent_of == {"s1": "sw_root", "s2": "sw_root"}
    assert [n.text for n in topo.notes] == [
        "topology 'topo2' ignored: 'topo1' is the cluster default",
        "topology 'topo3' ignored: 'topo1' is the cluster default",
    ]


def test_topograph_block_comments_name_each_blocks_nvlink_domain() -> None:
    topo = parse_slurm(sample("topograph-generated-slurm-block.conf"), "tg-block.conf")
    assert len(topo.nodes) == 96 and len(set(topo.leaf_of.values())) == 12 and topo.block_sizes == (8, 16, 32)
    assert (topo.leaf_of["srv1101"], topo.nvlink_of["srv1101"]) == ("rack11", "nvl-1-1")
    assert (topo.leaf_of["srv6208"], topo.nvlink_of["srv6208"]) == ("rack62", "nvl-6-2")


def test_topograph_tree_three_tiers_collapse_above_the_leaves() -> None:
    topo = parse_slurm(sample("topograph-generated-slurm-tree.conf"), "tg-tree.conf")
    assert len(topo.nodes) == 96 and topo.leaf_of["srv2201"] == "switch.1.4"
    assert topo.parent_of["switch.1.4"] == "switch.2.2" and topo.parent_of["switch.2.2"] == "switch.3.1"
    assert [n.text for n in topo.notes] == [
        "7 switches above the leaf switches: placer models one spine, so the tiers above the leaves are joined into it"
    ]


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ("SwitchName=a Nodes=n[1-2]\nSwitchName=b Nodes=n2", "t.conf:2: node n2 is in both switch a and b"),
        ("SwitchName=a Switches=b", "t.conf:1: switch 'a': child switch 'b' is not defined"),
        ("SwitchName=a Switches=b\nSwitchName=b Switches=a", "switches form a loop"),
        ("SwitchName=a Nodes=x\nSwitchName=a Nodes=y", "t.conf:2: switch 'a' is defined twice"),
        ("BlockName=b1 Nodes=n1\nSwitchName=s Nodes=n2", "t.conf:2: tree and block definitions mixed"),
        ("BlockSizes=8,zero", "t.conf:1: BlockSizes: 'zero' is not a positive whole number"),
        ("NodeName=x", "t.conf: no SwitchName= or BlockName= line"),
        ("SwitchName=a Nodes", "t.conf:1: expected Key=Value, found 'Nodes'"),
    ],
)
def test_bad_topology_conf(conf: str, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        parse_slurm(conf, "t.conf")


def test_continuation_lines_linkspeed_and_ring_lines() -> None:
    topo = parse_slurm("SwitchName=a LinkSpeed=100 \\\n  Nodes=n[1-2]\nRingName=r Nodes=n[1-2]\n", "t.conf")
    assert topo.leaf_of == {"n1": "a", "n2": "a"}
    assert [n.text for n in topo.notes] == [
        "LinkSpeed is unitless in Slurm; ignored",
        "'ringname' lines are not understood (ring and other plugins)",
    ]


# --- AWS --------------------------------------------------------------------------------------------------


def test_describe_instance_topology_cli_example() -> None:
    topo = parse_instance_topology(sample("aws-describe-instance-topology-cli-example.json"), "cli.json")
    assert [(i.instance_id, i.instance_type, i.leaf) for i in topo.instances] == [
        ("i-1111111111example", "p4d.24xlarge", "nn-3333333333example"),
        ("i-2222222222example", "p4d.24xlarge", "nn-3333333333example"),
        ("i-3333333333example", "trn1.32xlarge", "nn-1311133311example"),
        ("i-444444444example", "trn1.2xlarge", "nn-1235301234example"),
    ]
    texts = [n.text for n in topo.notes]
    assert "NextToken present: the output is paginated and instances on later pages are missing" in texts
    assert any(t.startswith("network layer 2 has 3 nodes") for t in texts)


def test_describe_instance_topology_user_guide_example_with_capacity_block_string() -> None:
    topo = parse_instance_topology(sample("aws-describe-instance-topology-userguide-example1.json"), "ug.json")
    assert [i.leaf for i in topo.instances] == ["nn-3333333333example", "nn-3214313214example"]
    # Both share layers 1 and 2 (nn-1111, nn-2222): nothing collapsed; "CapacityBlockId": "null" is understood.
    assert [n.text for n in topo.notes] == [
        "NextToken present: the output is paginated and instances on later pages are missing"
    ]
