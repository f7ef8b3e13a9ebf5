"""``nvidia-smi topo -m`` text -> :class:`TopoMatrix` -> :class:`~placer.importers.hardware.NodeHardware`.

Phase 1 finds the header (the line whose first column is ``GPU0``) and splits it into device columns
(``GPU#``, ``NIC#`` or old-style NIC names such as ``mlx5_0``) and info columns (``CPU Affinity``,
``NUMA Affinity``, ``GPU NUMA ID``). Phase 2 reads one row per device column, in order, checking every cell:
a missing row, a short row or two cells run together is a damaged copy and is refused with its line.
Phase 3 reads the ``NIC Legend`` (``NIC0: mlx5_0``) and notes anything else it does not recognise. A legend
without an ``NV#`` line is ``topo -mp`` output, which does not show NVLink at all: the hardware it gives then
says NVLink is unknown, so the product decides (as for an NCCL hint file), not "no NVLink".

Layouts seen in the wild: tab-separated (the real output), copies whose tabs became runs of spaces (then
empty fields vanish, so info values are matched to their columns from the right), empty CPU-affinity
fields, and the doubled tab recent drivers print before ``GPU NUMA ID``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from placer.importers.common import Note, error, short
from placer.importers.hardware import GpuInfo, NicInfo, NodeHardware

KIND = "nvidia-smi topo -m"
INFO_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CODE = re.compile(r"^(X|NV\d{1,3}|PIX|PXB|PHB|NODE|SYS|SOC)$")
_FUSED = re.compile(r"^(?:X|NV\d{1,3}|PIX|PXB|PHB|NODE|SYS|SOC){2,}$")
_GPU = re.compile(r"^GPU(\d{1,3})$")
_DEVICE = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]{0,31}$")
_CPULIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_LEGEND_NIC = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_LEGEND_LINE = re.compile(r"^\s*(X|SYS|SOC|NODE|PHB|PXB|PIX|NV#|NVB|C2C)\s*=")
_NIC_LABEL = re.compile(r"^NIC\d+$")
_NV_CELL = re.compile(r"^NV\d+$")
MAX_DEVICES = 512


@dataclass(frozen=True)
class TopoMatrix:
    """The matrix as printed: device columns, each cell's code, and per-GPU affinity columns."""

    source: str
    columns: tuple[str, ...]
    cells: dict[tuple[str, str], str]  # (row, column) -> code as printed, e.g. ("GPU0", "GPU1") -> "NV12"
    info_columns: tuple[str, ...]
    gpus: tuple[GpuInfo, ...]
    nic_names: dict[str, str]  # column label -> device name (from the NIC Legend, else the label itself)
    notes: tuple[Note, ...]
    shows_nvlink: bool = True  # False for ``topo -mp``, whose legend has no NV# line: NVLink is not shown

    @property
    def gpu_columns(self) -> list[str]:
        return [c for c in self.columns if _GPU.match(c)]

    @property
    def nic_columns(self) -> list[str]:
        return [c for c in self.columns if not _GPU.match(c)]

    def link(self, a: str, b: str) -> str:
        """The code between two devices, by column label, as printed (``SOC`` stays ``SOC``)."""
        return self.cells[(a, b)]

    def gpu_link(self, i: int, j: int) -> str:
        return self.cells[(f"GPU{i}", f"GPU{j}")]

    def to_hardware(self) -> NodeHardware:
        gpu_cols = self.gpu_columns
        links = {
            (self.gpus[a].index, self.gpus[b].index): self.cells[(ca, cb)]
            for a, ca in enumerate(gpu_cols)
            for b, cb in enumerate(gpu_cols)
            if a < b
        }
        nics = tuple(
            NicInfo(name=self.nic_names.get(col, col), links=tuple(self.cells[(col, g)] for g in gpu_cols))
            for col in self.nic_columns
        )
        return NodeHardware(self.source, KIND, self.gpus, links, nics, self.shows_nvlink, self.notes)


@dataclass
class _Header:
    line: int
    devices: list[str]
    info: list[str]


def parse_topo_matrix(text: str, source: str) -> TopoMatrix:
    """Parse one ``nvidia-smi topo -m`` (or ``-mp``) output."""
    lines = [_ANSI.sub("", raw).rstrip() for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    notes: list[Note] = []
    header = _find_header(lines, source, notes)
    n = len(header.devices)
    cells: dict[tuple[str, str], str] = {}
    infos: dict[str, dict[str, str]] = {}
    row = header.line  # 0-based index of the header line; rows follow it
    for i, label in enumerate(header.devices):
        row += 1
        if row >= len(lines) or not lines[row].strip() or lines[row].strip().startswith("Legend"):
            raise error(
                source,
                row + 1,
                f"matrix truncated: {n} device columns but only {i} rows (expected the row of {label})",
            )
        values, info = _split_row(lines[row], n, source, row + 1)
        if values[0] != label:
            hint = f" (the row of {label} is missing?)" if values[0] in header.devices else ""
            raise error(source, row + 1, f"expected the row of {label}, found {short(values[0])}{hint}")
        if any(v in header.devices for v in info):
            raise error(
                source, row + 1, f"row {label} goes on past its {n} cells into another row (rows run together?)"
            )
        for j, (column, cell) in enumerate(zip(header.devices, values[1:], strict=True)):
            _check_cell(cell, i == j, column, label, source, row + 1)
            cells[(label, column)] = cell
        infos[label] = _match_info(info, header.info, "\t" in lines[row], source, row + 1, notes)
    for a in header.devices:
        for b in header.devices:
            if a < b and cells[(a, b)] != cells[(b, a)]:
                raise error(
                    source,
                    None,
                    f"matrix is not symmetric: {a}->{b} is {cells[(a, b)]} but {b}->{a} is {cells[(b, a)]} "
                    "(a damaged copy?)",
                )
    nic_names, legend = _read_tail(lines, row + 1, header, source, notes)
    gpus = _gpu_infos(header, infos, source, notes)
    _note_unnamed_nics(header, nic_names, source, notes)
    shows_nvlink = _shows_nvlink(legend, any(_NV_CELL.match(c) for c in cells.values()), source, notes)
    return TopoMatrix(
        source, tuple(header.devices), cells, tuple(header.info), gpus, nic_names, tuple(notes), shows_nvlink
    )


def _note_unnamed_nics(header: _Header, nic_names: dict[str, str], source: str, notes: list[Note]) -> None:
    """``NIC#`` columns the NIC Legend did not name (a copy that ends before it) keep their labels, said so."""
    unnamed = [c for c in header.devices if _NIC_LABEL.match(c) and c not in nic_names]
    if unnamed:
        notes.append(
            Note(
                source,
                None,
                f"{len(unnamed)} NIC column(s) ({unnamed[0]}...) not named by a NIC Legend (the copy ends before it?): "
                "kept as their column labels",
            )
        )


def _shows_nvlink(legend: set[str] | None, nv_cells: bool, source: str, notes: list[Note]) -> bool:
    """Whether the matrix would show NVLink: not in ``topo -mp`` output, whose legend has no ``NV#`` line.
    Without a legend (a copy cut short) it cannot tell, and the matrix is read as it stands (conservative)."""
    if legend is None:
        notes.append(Note(source, None, "no Legend after the matrix (the copy ends before it?)"))
        return True
    if nv_cells or "NV#" in legend:
        return True
    notes.append(
        Note(
            source,
            None,
            "the legend has no NV# line: this is nvidia-smi topo -mp output, which shows PCIe paths only, not "
            "NVLink; the interconnect follows the GPU product instead (give nvidia-smi topo -m for the NVLinks)",
        )
    )
    return False


def _find_header(lines: list[str], source: str, notes: list[Note]) -> _Header:
    for number, line in enumerate(lines):
        fields = [f.strip() for f in line.split("\t")] if "\t" in line else line.split()
        fields = [f for f in fields if f]
        if not fields or fields[0] != "GPU0":
            continue
        if number > 0 and any(lines[k].strip() for k in range(number)):
            notes.append(Note(source, 1, f"{number} line(s) before the matrix header ignored"))
        return _split_header(fields, line, source, number, notes)
    raise error(
        source,
        None,
        "no nvidia-smi topo -m matrix found (expected a header line whose first column is GPU0, "
        "e.g. '\\tGPU0\\tGPU1\\t...\\tCPU Affinity')",
    )


def _split_header(fields: list[str], line: str, source: str, number: int, notes: list[Note]) -> _Header:
    """Device columns come first, then the info columns; with spaces for tabs, info names are word runs."""
    if "\t" in line:
        devices = []
        for f in fields:
            if f in INFO_COLUMNS or " " in f or not _DEVICE.match(f):
                break
            devices.append(f)
        info = fields[len(devices) :]
    else:
        devices = []
        for f in fields:
            if f in ("CPU", "NUMA", "GPU") or not _DEVICE.match(f):
                break
            devices.append(f)
        info = _info_words(fields[len(devices) :], source, number + 1, notes)
    for name in info:
        if name not in INFO_COLUMNS:
            notes.append(Note(source, number + 1, f"column {short(name)} not understood: its values are ignored"))
    if len(devices) > MAX_DEVICES:
        raise error(source, number + 1, f"{len(devices)} device columns: more than the {MAX_DEVICES} supported")
    if len(set(devices)) != len(devices):
        raise error(source, number + 1, "a device column appears twice in the header (a damaged copy?)")
    bad = [d for d in devices if _CODE.match(d)]
    if bad:
        raise error(source, number + 1, f"header holds a link code {short(bad[0])}: rows fused into the header?")
    for k, name in enumerate(d for d in devices if _GPU.match(d)):
        if name != f"GPU{k}":
            raise error(source, number + 1, f"GPU columns must run GPU0, GPU1, ...; found {short(name)}")
    return _Header(number, devices, info)


def _info_words(words: list[str], source: str, line: int, notes: list[Note]) -> list[str]:
    out: list[str] = []
    rest = list(words)
    while rest:
        for name in sorted(INFO_COLUMNS, key=len, reverse=True):
            parts = name.split()
            if rest[: len(parts)] == parts:
                out.append(name)
                rest = rest[len(parts) :]
                break
        else:
            out.append(rest.pop(0))
    return out


def _split_row(line: str, n: int, source: str, number: int) -> tuple[list[str], list[str]]:
    """Row label + n cells, and the info values after them."""
    if "\t" in line:
        fields = [f.strip() for f in line.split("\t")]
        while fields and not fields[0]:
            fields.pop(0)
    else:
        fields = line.split()
    if len(fields) < n + 1:
        raise error(
            source,
            number,
            f"row {short(fields[0] if fields else '')} has {max(len(fields) - 1, 0)} cells, expected {n} "
            "(one per device column): the row is truncated or cells ran together",
        )
    return fields[: n + 1], fields[n + 1 :]


def _check_cell(cell: str, diagonal: bool, column: str, row: str, source: str, number: int) -> None:
    where = f"row {row}, column {column}"
    if _FUSED.match(cell):
        raise error(source, number, f"{where}: {short(cell)} is two cells run together (a damaged copy?)")
    if not _CODE.match(cell):
        raise error(
            source, number, f"{where}: {short(cell)} is not a link code (X, NV#, PIX, PXB, PHB, NODE, SYS, SOC)"
        )
    if diagonal != (cell == "X"):
        expected = "X (the device itself)" if diagonal else "a link code"
        raise error(source, number, f"{where}: expected {expected}, found {cell}: the matrix is misaligned")


def _match_info(
    values: list[str], columns: list[str], tabs: bool, source: str, number: int, notes: list[Note]
) -> dict[str, str]:
    """Info values -> {column: value}. With tabs, fields keep their place, and surplus empty fields (the
    doubled tab before ``GPU NUMA ID``) are dropped from the right, sparing the last; with spaces, empty
    fields are gone, so values are matched from the right (a missing CPU affinity is the one that vanished)."""
    values = list(values)
    if tabs:
        while len(values) > len(columns):
            empties = [k for k, v in enumerate(values[:-1]) if not v]
            if not empties:
                break
            values.pop(empties[-1])
    if len(values) > len(columns):
        notes.append(Note(source, number, f"{len(values) - len(columns)} value(s) past the last column ignored"))
        values = values[: len(columns)]
    if not tabs and len(values) < len(columns):
        values = [""] * (len(columns) - len(values)) + values
    return {c: v for c, v in zip(columns, values, strict=False) if v}


def _gpu_infos(
    header: _Header, infos: dict[str, dict[str, str]], source: str, notes: list[Note]
) -> tuple[GpuInfo, ...]:
    out = []
    for label in header.devices:
        match = _GPU.match(label)
        info = infos[label]
        if not match:
            if any(v.upper() != "N/A" for v in info.values()):
                notes.append(Note(source, None, f"{label}: affinity values on a NIC row ignored"))
            continue
        cpus = info.get("CPU Affinity")
        if cpus is not None and not _CPULIST.match(cpus):
            if cpus.upper() != "N/A":
                notes.append(Note(source, None, f"{label}: CPU Affinity {short(cpus)} not understood"))
            cpus = None
        out.append(
            GpuInfo(
                index=int(match.group(1)),
                numa=_int_or_none(info.get("NUMA Affinity"), f"{label}: NUMA Affinity", source, notes),
                cpu_affinity=cpus,
                gpu_numa=_int_or_none(info.get("GPU NUMA ID"), f"{label}: GPU NUMA ID", source, notes),
            )
        )
    if not out:
        raise error(source, header.line + 1, "the matrix has no GPU columns")
    own = {g.index: g.gpu_numa for g in out if g.gpu_numa is not None}
    if own:
        notes.append(
            Note(
                source, None, f"GPU NUMA ID (the GPUs' own memory nodes) {own} has no place in the model; recorded only"
            )
        )
    return tuple(out)


def _int_or_none(value: str | None, what: str, source: str, notes: list[Note]) -> int | None:
    if value is None or value.upper() == "N/A":
        return None
    if value.isdigit() and len(value) <= 4:
        return int(value)
    notes.append(Note(source, None, f"{what} {short(value)} not understood"))
    return None


def _read_tail(
    lines: list[str], start: int, header: _Header, source: str, notes: list[Note]
) -> tuple[dict[str, str], set[str] | None]:
    """The NIC Legend (``NIC0: mlx5_0``) and the codes the Legend explains (None: no Legend); anything else
    is noted."""
    names: dict[str, str] = {}
    legend: set[str] | None = None
    ignored: list[int] = []
    for number in range(start, len(lines)):
        line = lines[number]
        stripped = line.strip()
        if stripped == "Legend:":
            legend = legend or set()
            continue
        if (code := _LEGEND_LINE.match(line)) is not None:
            legend = (legend or set()) | {code.group(1)}
            continue
        if not stripped or stripped == "NIC Legend:":
            continue
        match = _LEGEND_NIC.match(line)
        if match and match.group(1) in header.devices:
            names[match.group(1)] = match.group(2)
            continue
        if stripped.split()[0] in header.devices:
            raise error(source, number + 1, "a matrix row after the matrix ended (blank line inside the matrix?)")
        ignored.append(number + 1)
    if ignored:
        first = ignored[0]
        notes.append(
            Note(
                source, first, f"{len(ignored)} line(s) after the matrix not understood, e.g. {short(lines[first - 1])}"
            )
        )
    for label, name in names.items():
        if not _DEVICE.match(name):
            notes.append(Note(source, None, f"NIC Legend name {short(name)} for {label} not usable; kept {label}"))
            names[label] = label
    return names, legend
