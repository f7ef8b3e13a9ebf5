"""Phase 3 of an import (placer.importers.merge): what the model needs and no source said outright. The GPU
product and memory from PCI ids, --gpu-product, nccl-tests rank lines or a documented default; sockets from
NUMA; NVLink GB/s from ``NV#`` and the GPU generation, or, where no source shows the links, from the product
table (``gpus.links_of_product``: only NVSwitch boards are ``nvlink``). Every value goes into the ledger with
where it came from, so the report can say which figures are guesses."""

from __future__ import annotations

import re
from dataclasses import dataclass

from placer.importers import gpus as gpu_table
from placer.importers import hardware as hw
from placer.importers.common import Note
from placer.importers.ledger import DEFAULT, Draft, Ledger
from placer.importers.nccl_tests import NcclTestRun

DEFAULT_PRODUCT = "unknown"
DEFAULT_MEMORY_GIB = 1.0
"""A GPU whose memory no source reports gets 1 GiB, so that no memory floor in a spec is met by a guess."""
_GPU_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._()-]{0,62}")  # a GPU name as nvidia-smi prints it, spaces as '-'


@dataclass(frozen=True)
class Defaults:
    """User-given fallbacks (``--gpu-product``, ``--gpu-memory-gib``) for nodes no source describes."""

    product: str | None = None
    memory_gib: float | None = None


def products_from_runs(runs: tuple[NcclTestRun, ...], ledger: Ledger) -> dict[str, tuple[str, str]]:
    """Per node, the GPU name its nccl-tests rank lines give (``NVIDIA H100 80GB HBM3``, written as GFD writes
    it: ``NVIDIA-H100-80GB-HBM3``), with the file; a node whose ranks name two products gets none."""
    names: dict[str, set[str]] = {}
    files: dict[str, str] = {}
    for run in runs:
        for rank in run.ranks:
            draft = ledger.resolve(rank.host)
            product = re.sub(r"\s+", "-", rank.gpu.strip())
            if draft is not None and _GPU_NAME.fullmatch(product):
                names.setdefault(draft.name, set()).add(product)
                files.setdefault(draft.name, run.source)
    return {
        node: (found.pop(), f"nccl-tests rank lines ({files[node]})")
        for node, found in names.items()
        if len(found) == 1
    }


def derive(draft: Draft, defaults: Defaults, ledger: Ledger, tested: tuple[str, str] | None = None) -> None:
    found = draft.hardware
    count = draft.values.get("gpus")
    if count is None:
        ledger.set(draft, "gpus", 0, DEFAULT)
        count = 0
    if not count:
        return
    known = next((gpu_table.PCI_DEVICES[g.device_id] for g in found.gpus if g.device_id), None) if found else None
    if "product" not in draft.values:
        if known:
            ledger.set(draft, "product", known[0], "PCI device id")
        elif defaults.product:
            ledger.set(draft, "product", defaults.product, "--gpu-product")
        elif tested:
            ledger.set(draft, "product", *tested)
        else:
            ledger.set(draft, "product", DEFAULT_PRODUCT, DEFAULT)
    product = draft.values["product"]
    if "memoryGiB" not in draft.values:
        from_name = gpu_table.memory_of_product(product)
        if known:
            ledger.set(draft, "memoryGiB", known[1], "PCI device id")
        elif from_name:
            ledger.set(draft, "memoryGiB", from_name, "product name")
        elif defaults.memory_gib:
            ledger.set(draft, "memoryGiB", defaults.memory_gib, "--gpu-memory-gib")
        else:
            ledger.set(draft, "memoryGiB", DEFAULT_MEMORY_GIB, DEFAULT)
    sm = draft.sm or next((g.sm for g in found.gpus if g.sm), None) if found else draft.sm
    generation = (
        gpu_table.generation_of_sm(sm) or (known[2] if known else None) or gpu_table.generation_of_product(product)
    )
    _derive_links(draft, found, generation, ledger)


def _derive_links(draft: Draft, found: hw.NodeHardware | None, generation: str | None, ledger: Ledger) -> None:
    product = draft.values["product"]
    origin = f"{found.kind} ({found.source})" if found else ""
    if found is not None:
        socket_of, how = hw.sockets(found)
        ledger.set(draft, "sockets", len(set(socket_of.values())), f"{origin}, {how}")
        draft.socket_of = dict(socket_of)
    elif draft.values["gpus"] > 1:
        ledger.set(draft, "sockets", 1, DEFAULT)
    if draft.values["gpus"] < 2:
        return
    if found is not None and found.nvlink_known:
        if hw.all_pairs_nvlink(found):
            links = hw.min_nvlinks(found)
            ledger.set(draft, "interconnect", "nvlink", origin)
            rate = gpu_table.GENERATIONS[generation].name if generation else "assumed 50 GB/s per link"
            ledger.set(draft, "nvlinkGBps", gpu_table.nvlink_gbps(links, generation), f"NV{links} x {rate}")
            return
        ledger.set(draft, "interconnect", "pcie", origin)
        return
    # the board's own GPUs: time-sliced replicas multiply the node's count, not its NVSwitch board
    guess = gpu_table.links_of_product(product, draft.boards_gpus or draft.values["gpus"])
    ledger.set(draft, "interconnect", guess.interconnect, guess.origin)
    if guess.nvlink_gbps is not None:
        ledger.set(draft, "nvlinkGBps", guess.nvlink_gbps, guess.origin)
    ledger.notes.append(Note("product table", None, guess.note))
