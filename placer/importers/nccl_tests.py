"""nccl-tests output (``all_reduce_perf`` and friends) -> bus bandwidth per message size, and which hosts ran it.

Columns are found by name in the header, not by position: nccl-tests 2.10 printed
``size count type redop time algbw busbw error`` twice (out-of-place, in-place); 2.13 added ``root`` and
replaced ``error`` (the largest deviation) by ``#wrong`` (a count). The ``#  Rank 0 ... on <host> device 0``
lines say which hosts the test spanned, hence which link level its figure measures. Lines a test log may
carry besides the table (NCCL INFO lines, launcher noise) are counted and reported, not parsed. A log cut
short before the largest size its header asks for (``maxBytes``) gives no figure: its peak would be a small
message's bus bandwidth, far below what the link sustains (:meth:`NcclTestRun.cut_short`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from placer.importers.common import Note, error, short

_RANK = re.compile(
    r"^#\s*Rank\s+(\d{1,9})\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d{1,9})\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)")
_OP = re.compile(r"Collective test starting:\s*(\S+)")
_MAX_BYTES = re.compile(r"\bmaxBytes\s+(\d{1,20})\b")
_STEP = re.compile(r"\bstep:\s*(\d{1,20})\((factor|bytes)\)")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")
MAX_ROWS = 10_000


@dataclass(frozen=True)
class Rank:
    rank: int
    host: str
    device: int
    bus_id: str
    gpu: str


@dataclass(frozen=True)
class Measurement:
    """One message size: time (us), algorithm and bus bandwidth (GB/s), and the check: ``#wrong`` counts
    wrong elements (2.13+); the older ``error`` column is the largest numeric deviation, informational."""

    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    wrong: float | None
    max_error: float | None


@dataclass(frozen=True)
class Row:
    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    out_of_place: Measurement
    in_place: Measurement
    line: int


@dataclass(frozen=True)
class NcclTestRun:
    source: str
    layout: str  # "2.13+ (root, #wrong)" or "2.10 (error)" or a description of the columns found
    operation: str | None
    ranks: tuple[Rank, ...]
    rows: tuple[Row, ...]
    avg_busbw_gbps: float | None
    notes: tuple[Note, ...] = field(default=())
    max_bytes: int | None = None  # the header's maxBytes: the largest size the run was asked to measure
    step: tuple[int, str] | None = None  # the header's step: (2, "factor") or (1048576, "bytes")

    def cut_short(self) -> str | None:
        """Why the run may have stopped before its largest message size (None: it did not). Its peak would
        then be a small message's figure, far below what the link sustains, so no figure is taken from it.
        A run has reached its largest size when its next step would pass maxBytes: the sizes need not end at
        maxBytes itself (``-e 10G -f 2`` ends at 8 GiB; all_gather rounds each size down to a multiple of
        4 x ranks). A header without its step is read as the common ``-f 2``."""
        if self.avg_busbw_gbps is not None or not self.rows:
            return None
        largest = max(r.size_bytes for r in self.rows)
        if self.max_bytes is None:
            return (
                f"no maxBytes in its header, so whether the run reached its largest size ({largest} bytes here) "
                "is unknown"
            )
        amount, kind = self.step or (2, "factor")
        after = largest + amount if kind == "bytes" else largest * max(amount, 2)
        if after <= self.max_bytes:
            return f"the run was cut short at {largest} bytes of the {self.max_bytes} its header asks for"
        return None

    @property
    def hosts(self) -> list[str]:
        return sorted({r.host for r in self.ranks})

    def peak(self) -> Row | None:
        """The largest message size measured without wrong results: the figure a link level sustains."""
        good = [r for r in self.rows if not r.out_of_place.wrong and r.out_of_place.busbw_gbps]
        return max(good, key=lambda r: r.size_bytes) if good else None


def _header(tokens: list[str]) -> dict[str, int] | None:
    """Column positions from a header line's tokens; None if it is not the size/count/busbw header."""
    if "size" not in tokens or "busbw" not in tokens or "count" not in tokens:
        return None
    columns: dict[str, int] = {}
    for k, tok in enumerate(tokens):
        name = {"#wrong": "wrong", "error": "max_error"}.get(tok, tok)
        key = name if name not in columns else f"ip_{name}"
        columns[key] = k
    return columns


def parse_nccl_tests(text: str, source: str) -> NcclTestRun:
    lines = text.replace("\r\n", "\n").split("\n")
    notes: list[Note] = []
    ranks: list[Rank] = []
    rows: list[Row] = []
    columns: dict[str, int] | None = None
    width = 0
    avg = None
    op = None
    noise: list[int] = []
    max_bytes: int | None = None  # the header's maxBytes: the largest size the run was asked to measure
    step: tuple[int, str] | None = None
    header_line = 0
    commented = 0  # result rows behind a '#': output quoted inside another file
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            tokens = line.lstrip("#").split()
            header = _header(tokens)
            if header is not None:
                if columns is not None and header != columns:
                    if not rows:
                        raise error(source, number, _no_rows(noise, commented))
                    raise error(source, number, "a second results table with other columns: one run per file")
                columns, width, header_line = header, len(tokens), number
                continue
            if columns is not None and len(tokens) == width and tokens[0].isdigit():
                commented += 1
                continue
            if (m := _RANK.match(line)) is not None:
                ranks.append(Rank(int(m.group(1)), m.group(2), int(m.group(3)), m.group(4), m.group(5)))
            elif (m := _AVG.match(line)) is not None:
                avg = float(m.group(1))
            elif (m := _OP.search(line)) is not None:
                op = m.group(1)
            elif max_bytes is None and (m := _MAX_BYTES.search(line)) is not None:
                max_bytes = int(m.group(1))
                if (found := _STEP.search(line)) is not None:
                    step = (int(found.group(1)), found.group(2))
            continue
        tokens = line.split()
        if columns is not None and 0 < len(tokens) < width and tokens[0].isdigit():
            notes.append(Note(source, number, f"truncated result row ({len(tokens)} of {width} columns); not used"))
            continue
        if columns is None or len(tokens) != width or not tokens[0].isdigit():
            noise.append(number)
            continue
        if len(rows) >= MAX_ROWS:
            raise error(source, number, f"more than {MAX_ROWS} result rows")
        rows.append(_row(tokens, columns, source, number))
    if columns is None:
        raise error(
            source,
            None,
            "no nccl-tests results table found (expected a '#  size  count  type ... busbw' header line)",
        )
    if not rows:
        raise error(source, header_line, _no_rows(noise, commented))
    if noise:
        notes.append(
            Note(
                source,
                noise[0],
                f"{len(noise)} line(s) not part of the results table, e.g. {short(lines[noise[0] - 1])}",
            )
        )
    for row in rows:
        if row.out_of_place.wrong or row.in_place.wrong:
            notes.append(Note(source, row.line, f"size {row.size_bytes}: wrong results reported; not used"))
    if not ranks:
        notes.append(Note(source, None, "no '#  Rank ... on <host>' lines: the hosts the test spanned are unknown"))
    layout = (
        "nccl-tests 2.13+ (root, #wrong)"
        if "root" in columns
        else "nccl-tests 2.10 (error column)"
        if "redop" in columns
        else "columns: " + " ".join(k for k, _ in sorted(columns.items(), key=lambda kv: kv[1]))
    )
    run = NcclTestRun(source, layout, op, tuple(ranks), tuple(rows), avg, (), max_bytes, step)
    if avg is None:
        why = run.cut_short()
        what = f"{why}; no figure is taken from it" if why else "its largest size was measured"
        notes.append(Note(source, None, f"the file ends before the '# Avg bus bandwidth' line: {what}"))
    return replace(run, notes=tuple(notes))


def _no_rows(noise: list[int], commented: int) -> str:
    """Why a header has no rows under it: rows behind '#' (quoted output), other lines, or nothing (cut short)."""
    if commented:
        return "the results table has no rows (every line is a '#' comment: is the output quoted inside another file?)"
    if noise:
        return f"the results table has no rows ({len(noise)} other line(s), none a result row)"
    return "the results table has no rows: the log ends after its header (cut short?)"


def _row(tokens: list[str], columns: dict[str, int], source: str, number: int) -> Row:
    def num(key: str) -> float | None:
        k = columns.get(key)
        if k is None:
            return None
        value = tokens[k]
        if value in ("N/A", "-"):
            return None
        if not _NUMBER.match(value) or len(value) > 30:
            raise error(source, number, f"column {key.removeprefix('ip_')}: {short(value)} is not a number")
        return float(value)

    def measurement(prefix: str) -> Measurement:
        return Measurement(
            num(prefix + "time"),
            num(prefix + "algbw"),
            num(prefix + "busbw"),
            num(prefix + "wrong"),
            num(prefix + "max_error"),
        )

    size = num("size")
    count = num("count")
    root = num("root")
    return Row(
        size_bytes=int(size or 0),
        count=int(count or 0),
        dtype=tokens[columns["type"]] if "type" in columns else "",
        redop=tokens[columns["redop"]] if "redop" in columns else None,
        root=int(root) if root is not None else None,
        out_of_place=measurement(""),
        in_place=measurement("ip_"),
        line=number,
    )
