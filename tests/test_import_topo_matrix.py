"""nvidia-smi topo -m: every real sample parses to the GPUs, links, NUMA groups and NICs it shows; copies
whose tabs became spaces parse the same; damaged copies (a missing row, two rows run together, two cells run
together, a misaligned row) are refused with their line."""

from __future__ import annotations

from pathlib import Path

import pytest

from placer.importers import hardware as hw
from placer.importers.topo_matrix import parse_topo_matrix
from placer.model.errors import InputError

SAMPLES = Path(__file__).resolve().parent / "data" / "samples"
TOPO_FILES = [
    "a100-pcie-2gpu-topo-m.txt",
    "dgx-a100-topo-m.txt",
    "dgx1-v100-topo-mp-pcie-only.txt",
    "hgx-h200-12nic-topo-m.txt",
    "legacy-k40-soc-topo-m.txt",
    "power9-v100-nv3-topo-m.txt",
]


def text(name: str) -> str:
    return (SAMPLES / name).read_text()


def parse(name: str):
    return parse_topo_matrix(text(name), name)


def test_hgx_h200_nv18_everywhere_two_numa_nodes_twelve_nics_from_the_legend() -> None:
    m = parse("hgx-h200-12nic-topo-m.txt")
    h = m.to_hardware()
    assert [g.index for g in m.gpus] == list(range(8))
    assert m.gpu_link(0, 7) == "NV18" and m.gpu_link(3, 4) == "NV18"
    assert hw.all_pairs_nvlink(h) and hw.min_nvlinks(h) == 18
    assert hw.nvlink_islands(h) == [list(range(8))]
    # NUMA Affinity 0 for GPU0-3, 1 for GPU4-7; GPU NUMA ID is N/A (kept apart by the doubled tab).
    assert hw.sockets(h) == ({0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}, "NUMA affinity")
    assert [g.gpu_numa for g in m.gpus] == [None] * 8
    assert [g.cpu_affinity for g in m.gpus[:4]] == ["0-55,112-167"] * 4
    assert m.nic_columns == [f"NIC{i}" for i in range(12)]
    assert [n.name for n in h.nics] == [f"mlx5_{i}" for i in range(12)]
    assert m.link("NIC0", "GPU0") == "PXB" and m.link("NIC1", "NIC2") == "PIX"
    # Each GPU has exactly one PXB NIC (its rail); NIC1/2 and NIC7/8 are PIX pairs reaching no GPU closely.
    assert hw.rails(h) == ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    assert hw.near_gpus(h, h.nics[3]) == [1]
    assert m.notes == ()


def test_dgx_a100_old_header_with_mlx5_columns_and_nps4_numa_ids() -> None:
    m = parse("dgx-a100-topo-m.txt")
    h = m.to_hardware()
    assert len(m.gpus) == 8 and m.gpu_link(2, 5) == "NV12"
    assert m.info_columns == ("CPU Affinity", "NUMA Affinity")
    # NPS4: NUMA ids 3,3,1,1,7,7,5,5 are kept as they are.
    assert hw.sockets(h)[0] == {0: 3, 1: 3, 2: 1, 3: 1, 4: 7, 5: 7, 6: 5, 7: 5}
    assert m.nic_columns == [f"mlx5_{i}" for i in range(12)]
    # Two PXB NICs per GPU pair are its rails (8); mlx5_4/5 and mlx5_10/11 (PIX pairs) are the storage NICs.
    assert len(hw.rails(h)) == 8 and "mlx5_4" not in hw.rails(h) and "mlx5_10" not in hw.rails(h)
    assert hw.near_gpus(h, h.nics[0]) == [0, 1]


def test_dgx1_pcie_only_matrix_has_no_nvlink_and_two_sockets() -> None:
    m = parse("dgx1-v100-topo-mp-pcie-only.txt")
    h = m.to_hardware()
    assert (m.gpu_link(0, 1), m.gpu_link(0, 2), m.gpu_link(0, 4)) == ("PIX", "PHB", "SYS")
    assert not hw.all_pairs_nvlink(h) and hw.nvlink_islands(h) == []
    assert hw.sockets(h)[0] == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}
    assert [n.name for n in h.nics] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert hw.near_gpus(h, h.nics[1]) == [2, 3]


def test_a100_pcie_two_sockets_nic_rows_with_empty_trailing_fields() -> None:
    m = parse("a100-pcie-2gpu-topo-m.txt")
    h = m.to_hardware()
    assert len(m.gpus) == 2 and m.gpu_link(0, 1) == "SYS"
    assert [(g.cpu_affinity, g.numa) for g in m.gpus] == [("0-63", 0), ("64-127", 1)]
    assert [n.name for n in h.nics] == ["mlx5_0", "mlx5_1"]
    # Each GPU's nearest NIC is on its own NUMA node (NODE): both NICs are rails, one per socket.
    assert hw.rails(h) == ["mlx5_0", "mlx5_1"]
    assert hw.nic_socket(h, h.nics[1], hw.sockets(h)[0]) == 1


def test_power9_nv3_pairs_are_islands_and_numa_8_is_kept() -> None:
    m = parse("power9-v100-nv3-topo-m.txt")
    h = m.to_hardware()
    assert (m.gpu_link(0, 1), m.gpu_link(2, 3), m.gpu_link(1, 2)) == ("NV3", "NV3", "SYS")
    assert hw.nvlink_islands(h) == [[0, 1], [2, 3]]
    assert not hw.all_pairs_nvlink(h)
    assert hw.sockets(h)[0] == {0: 0, 1: 0, 2: 8, 3: 8}
    assert len(h.nics) == 4


def test_legacy_k40_soc_legend_and_sockets_from_cpu_affinity() -> None:
    m = parse("legacy-k40-soc-topo-m.txt")
    h = m.to_hardware()
    assert m.info_columns == ("CPU Affinity",)
    assert m.gpu_link(0, 2) == "SOC" and h.link(0, 2) == "SYS" and m.gpu_link(0, 1) == "PHB"
    # No NUMA column: CPU lists 0-5 and 6-11 make two sockets.
    assert hw.sockets(h) == ({0: 0, 1: 0, 2: 1, 3: 1}, "CPU affinity")
    assert [n.name for n in h.nics] == ["mlx4_0"]


@pytest.mark.parametrize("name", TOPO_FILES)
@pytest.mark.parametrize("spaces", [8, 4, 1])
def test_tabs_turned_to_spaces_parse_the_same(name: str, spaces: int) -> None:
    original = parse(name)
    raw = text(name)
    copy = raw.expandtabs(spaces) if spaces > 1 else raw.replace("\t", " ")
    again = parse_topo_matrix(copy, name)
    assert again.cells == original.cells
    assert again.gpus == original.gpus
    assert again.nic_names == original.nic_names


def test_empty_cpu_affinity_fields_with_tabs_and_with_spaces() -> None:
    raw = text("hgx-h200-12nic-topo-m.txt").replace("0-55,112-167", "").replace("56-111,168-223", "")
    for copy in (raw, raw.expandtabs(8)):
        m = parse_topo_matrix(copy, "vm.txt")
        assert [(g.cpu_affinity, g.numa, g.gpu_numa) for g in m.gpus] == [(None, 0, None)] * 4 + [(None, 1, None)] * 4


def test_a_gpu_numa_id_is_read_and_reported() -> None:
    raw = text("hgx-h200-12nic-topo-m.txt").replace("\tN/A", "\t4", 4)  # a Grace-style GPU memory node
    m = parse_topo_matrix(raw, "gh.txt")
    assert [g.gpu_numa for g in m.gpus] == [4, 4, 4, 4, None, None, None, None]
    assert [n.text for n in m.notes] == [
        "GPU NUMA ID (the GPUs' own memory nodes) {0: 4, 1: 4, 2: 4, 3: 4} has no place in the model; recorded only"
    ]


def test_crlf_line_ends_and_a_terminal_underline_escape_in_the_header() -> None:
    raw = text("power9-v100-nv3-topo-m.txt")
    lines = raw.split("\n")
    lines[0] = "\x1b[4m" + lines[0] + "\x1b[0m"
    m = parse_topo_matrix("\r\n".join(lines), "p9.txt")
    assert m.gpu_link(0, 1) == "NV3" and len(m.gpus) == 4


def test_lines_before_the_matrix_are_noted() -> None:
    m = parse_topo_matrix("$ nvidia-smi topo -m\n" + text("power9-v100-nv3-topo-m.txt"), "p9.txt")
    assert [n.text for n in m.notes] == ["1 line(s) before the matrix header ignored"]


# --- damaged copies --------------------------------------------------------------------------------------


def damaged(name: str, edit) -> str:
    lines = text(name).split("\n")
    edit(lines)
    return "\n".join(lines)


def test_truncated_matrix_names_the_missing_row() -> None:
    raw = damaged("dgx-a100-topo-m.txt", lambda ls: ls.__delitem__(slice(6, 21)))  # keep GPU0-GPU4 rows
    with pytest.raises(
        InputError, match=r"^t.txt:7: matrix truncated: 20 device columns but only 5 rows \(expected the row of GPU5\)$"
    ):
        parse_topo_matrix(raw, "t.txt")


def test_two_rows_run_together_or_a_missing_row_are_refused() -> None:
    def join(ls: list[str]) -> None:
        ls[1] = ls[1] + "\t" + ls.pop(2)

    with pytest.raises(InputError, match=r"^f.txt:2: row GPU0 goes on past its 8 cells into another row"):
        parse_topo_matrix(damaged("power9-v100-nv3-topo-m.txt", join), "f.txt")
    with pytest.raises(
        InputError, match=r"^f.txt:4: expected the row of GPU2, found 'GPU3' \(the row of GPU2 is missing\?\)$"
    ):
        parse_topo_matrix(damaged("power9-v100-nv3-topo-m.txt", lambda ls: ls.pop(3)), "f.txt")


def test_two_cells_run_together_are_refused() -> None:
    def fuse(ls: list[str]) -> None:
        ls[2] = ls[2].replace("NV18\t X ", "NV18X", 1)

    with pytest.raises(InputError, match=r"^f.txt:3: row GPU1, column GPU0: 'NV18X' is two cells run together"):
        parse_topo_matrix(damaged("hgx-h200-12nic-topo-m.txt", fuse), "f.txt")


def test_a_short_row_is_refused() -> None:
    def cut(ls: list[str]) -> None:
        ls[4] = "\t".join(ls[4].split("\t")[:5])

    with pytest.raises(InputError, match=r"^s.txt:5: row 'GPU3' has 4 cells, expected 8 \(one per device column\)"):
        parse_topo_matrix(damaged("power9-v100-nv3-topo-m.txt", cut), "s.txt")


def test_a_shifted_row_and_an_asymmetric_matrix_are_refused() -> None:
    def shift(ls: list[str]) -> None:
        cells = ls[2].split("\t")
        ls[2] = "\t".join([cells[0], cells[2], cells[1], *cells[3:]])

    with pytest.raises(
        InputError, match=r"row GPU1, column GPU0: expected a link code, found X: the matrix is misaligned"
    ):
        parse_topo_matrix(damaged("power9-v100-nv3-topo-m.txt", shift), "m.txt")

    def edit(ls: list[str]) -> None:
        ls[1] = ls[1].replace("SYS", "NODE", 1)

    with pytest.raises(InputError, match=r"not symmetric: GPU0->GPU2 is NODE but GPU2->GPU0 is SYS"):
        parse_topo_matrix(damaged("power9-v100-nv3-topo-m.txt", edit), "m.txt")


def test_not_a_matrix_at_all() -> None:
    with pytest.raises(InputError, match=r"^x.txt: no nvidia-smi topo -m matrix found"):
        parse_topo_matrix(text("slurm-topology-tree.conf"), "x.txt")
