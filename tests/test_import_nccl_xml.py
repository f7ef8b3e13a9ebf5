"""NCCL topology XML: the Azure and AWS samples (hint files and one full dump) give their GPUs, NUMA nodes,
PCIe switches and NICs; the hint files are recognised as such; the graph file and the class-less g5 hint file
are refused with the reason; DTDs are refused (no entity expansion); NVSwitch and GPU-to-GPU NVLinks of a
full dump become NV# links."""

from __future__ import annotations

from pathlib import Path

import pytest

from placer.importers import hardware as hw
from placer.importers.nccl_xml import parse_nccl_xml
from placer.model.errors import InputError

SAMPLES = Path(__file__).resolve().parent / "data" / "samples"


def parse(name: str):
    return parse_nccl_xml((SAMPLES / name).read_text(), name)


def test_ndv5_hint_file_eight_gpus_each_with_its_own_ib_nic_behind_one_switch() -> None:
    x = parse("azure-ndv5-topo.xml")
    h = x.to_hardware()
    assert x.hint_file and not h.nvlink_known
    assert any("a hint file: no <gpu> or <nvlink> elements" in n.text for n in x.notes)
    assert len(x.gpus) == 8 and x.numa_nodes == (0, 1)
    # GPUs numbered in PCI bus order, as nvidia-smi does: 0001..0003, 0008 on NUMA 0; 0009..000c on NUMA 1.
    assert [g.bus_id for g in x.gpus] == [f"000{c}:00:00.0" for c in "12389abc"]
    assert hw.sockets(h)[0] == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}
    assert (h.link(0, 1), h.link(0, 4)) == ("PHB", "SYS")
    assert [(n.name, n.kind) for n in h.nics][:2] == [("0101:00:00.0", "infiniband"), ("0102:00:00.0", "infiniband")]
    assert [hw.near_gpus(h, n) for n in h.nics] == [[i] for i in range(8)]
    assert len(hw.rails(h)) == 8


def test_ndv4_hint_file_four_numa_nodes_two_gpus_two_nics_per_switch() -> None:
    x = parse("azure-ndv4-topo.xml")
    h = x.to_hardware()
    assert x.hint_file and len(x.gpus) == 8 and x.numa_nodes == (0, 1, 2, 3)
    # Bus order 0001, 0002 (NUMA 1), 0003, 0004 (NUMA 0), 000b, 000c (NUMA 3), 000d, 000e (NUMA 2).
    assert hw.sockets(h)[0] == {0: 1, 1: 1, 2: 0, 3: 0, 4: 3, 5: 3, 6: 2, 7: 2}
    assert (h.link(0, 1), h.link(1, 2)) == ("PIX", "SYS")
    assert len(h.nics) == 8 and {tuple(hw.near_gpus(h, n)) for n in h.nics} == {(0, 1), (2, 3), (4, 5), (6, 7)}


def test_ndv2_gpus_directly_under_the_cpu() -> None:
    x = parse("azure-ndv2-topo.xml")
    h = x.to_hardware()
    assert len(x.gpus) == 8 and (h.link(0, 3), h.link(3, 4)) == ("PHB", "SYS")
    assert [(n.name, n.numa, n.kind) for n in h.nics] == [("0101:00:00.0", 0, "infiniband")]


def test_ncv4_full_file_nvlink_to_itself_ignored_and_a_socket_nic() -> None:
    x = parse("azure-ncv4-topo.xml")
    h = x.to_hardware()
    assert not x.hint_file and h.nvlink_known
    assert [(g.dev, g.sm, g.numa) for g in x.gpus] == [(0, 80, 0), (1, 80, 1), (2, 80, 2), (3, 80, 3)]
    self_links = [n for n in x.notes if "<nvlink> to its own bus id" in n.text]
    assert [(n.line, n.text) for n in self_links][0] == (6, "GPU 0: <nvlink> to its own bus id 0001:00:00.0 ignored")
    assert len(self_links) == 4
    assert x.nvlinks == {} and {h.link(a, b) for a in range(4) for b in range(a + 1, 4)} == {"SYS"}
    assert [(n.name, n.numa, n.bandwidth_gbps) for n in h.nics] == [("eth0", 0, 12.5)]  # 100000 Mb/s
    assert x.gpus[0].device_id == 0x20B5  # A100 80GB PCIe


@pytest.mark.parametrize(("name", "device"), [("aws-p4d-24xl-topo.xml", 0x20B0), ("aws-p4de-24xl-topo.xml", 0x20B2)])
def test_aws_p4_hint_files_with_comments_efa_nics_and_device_ids(name: str, device: int) -> None:
    x = parse(name)
    h = x.to_hardware()
    assert x.hint_file and len(x.gpus) == 8 and {g.device_id for g in x.gpus} == {device}
    # The trailing "<!-- GPU 0 -->" comments agree with bus order.
    assert [g.bus_id for g in x.gpus][:3] == ["0000:10:1c.0", "0000:10:1d.0", "0000:20:1c.0"]
    assert (h.link(0, 1), h.link(1, 2), h.link(3, 4)) == ("PIX", "PHB", "SYS")
    assert [(n.kind, hw.near_gpus(h, n)) for n in h.nics] == [
        ("ethernet", [0, 1]),
        ("ethernet", [2, 3]),
        ("ethernet", [4, 5]),
        ("ethernet", [6, 7]),
    ]


def test_graph_file_is_refused_with_the_reason() -> None:
    with pytest.raises(InputError) as info:
        parse("azure-ncv4-graph.xml")
    assert str(info.value) == (
        "azure-ncv4-graph.xml:2: this is an NCCL graph file (<graphs>: the rings and trees NCCL searched, "
        "NCCL_GRAPH_FILE), not a topology; dump the topology with NCCL_TOPO_DUMP_FILE=<file> instead"
    )


def test_g5_hint_file_without_pci_classes_is_refused() -> None:
    with pytest.raises(InputError) as info:
        parse("aws-g5.48xl-topo.xml")
    assert str(info.value) == (
        "aws-g5.48xl-topo.xml:13: no GPU found: its 9 <pci> device(s) carry no class attribute, so GPUs and "
        "NICs cannot be told apart (a hint file that only pins PCI devices to NUMA nodes)"
    )


BOMB = """<?xml version="1.0"?>
<!DOCTYPE system [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>
<system version="1"><cpu numaid="&b;"/></system>"""


def test_doctype_and_entities_are_refused() -> None:
    with pytest.raises(InputError, match=r"^bomb.xml:2: DOCTYPE and ENTITY declarations are not allowed"):
        parse_nccl_xml(BOMB, "bomb.xml")
    external = '<?xml version="1.0"?><!DOCTYPE s SYSTEM "http://example.com/x.dtd"><system/>'
    with pytest.raises(InputError, match="DOCTYPE and ENTITY declarations are not allowed"):
        parse_nccl_xml(external, "ext.xml")


def test_malformed_xml_names_the_line() -> None:
    with pytest.raises(InputError, match=r"^bad.xml:3: not well-formed XML: mismatched tag$"):
        parse_nccl_xml('<system version="1">\n  <cpu numaid="0">\n  </pci>\n</system>', "bad.xml")


DUMP = """<system version="1">
  <cpu numaid="0" affinity="ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:18:00.0" class="0x060400">
      <pci busid="0000:19:00.0" class="0x030200" vendor="0x10de" device="0x2330">
        <gpu dev="0" sm="90" rank="0" gdr="1">
          <nvlink target="0000:a7:00.0" count="9" tclass="0x068000"/>
          <nvlink target="0000:a8:00.0" count="9" tclass="0x068000"/>
        </gpu>
      </pci>
      <pci busid="0000:1a:00.0" class="0x020700" vendor="0x15b3">
        <nic>
          <net name="mlx5_0" dev="0" speed="400000" port="1" latency="0.000000" guid="0x1" maxconn="131072" gdr="1"/>
        </nic>
      </pci>
    </pci>
    <pci busid="0000:2a:00.0" class="0x030200" vendor="0x10de" device="0x2330">
      <gpu dev="1" sm="90" rank="1" gdr="1">
        <nvlink target="0000:a7:00.0" count="9" tclass="0x068000"/>
        <nvlink target="0000:a8:00.0" count="9" tclass="0x068000"/>
        <nvlink target="0000:3a:00.0" count="2" tclass="0x030200"/>
      </gpu>
    </pci>
  </cpu>
  <cpu numaid="1" affinity="ffff0000" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:3a:00.0" class="0x030200" vendor="0x10de" device="0x2330">
      <gpu dev="2" sm="90" rank="2" gdr="1">
        <nvlink target="0000:2a:00.0" count="2" tclass="0x030200"/>
        <nvlink target="0000:00:00.0" count="1" tclass="0x068001"/>
      </gpu>
    </pci>
  </cpu>
  <future/>
</system>"""


def test_full_dump_nvswitch_and_gpu_to_gpu_nvlinks() -> None:
    x = parse_nccl_xml(DUMP, "dump.xml")
    h = x.to_hardware()
    assert not x.hint_file and [g.sm for g in x.gpus] == [90, 90, 90]
    # GPU0 and GPU1 reach the NVSwitches with 9+9 links each: NV18 through the switches.
    assert h.link(0, 1) == "NV18"
    # GPU1-GPU2 are linked directly with 2 links (both sides say so); GPU0-GPU2 share no NVLink.
    assert (h.link(1, 2), h.link(0, 2)) == ("NV2", "SYS")
    assert hw.nvlink_islands(h) == [[0, 1, 2]] and not hw.all_pairs_nvlink(h)
    nic = h.nics[0]
    assert (nic.name, nic.kind, nic.bandwidth_gbps, hw.near_gpus(h, nic)) == ("mlx5_0", "infiniband", 50.0, [0])
    texts = [n.text for n in x.notes]
    assert "GPU 2: 1 NVLink(s) to the CPU recorded only" in texts
    assert "element <future> not understood" in texts
