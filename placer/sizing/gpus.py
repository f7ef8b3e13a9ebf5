"""The GPU product table (``gpus.yaml``): peak dense FLOP/s and HBM bandwidth per product, each row citing
its datasheet. Sizing turns these peaks into times with the efficiency factors of ``roofline.Efficiency``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

from placer.model.errors import InputError


@dataclass(frozen=True)
class GpuFigures:
    """One product's peaks. ``fp8_tflops`` is None where the product has no FP8 tensor cores."""

    product: str
    bf16_tflops: float
    fp8_tflops: float | None
    hbm_tbps: float
    memory_gib: float
    source: str

    def peak_flops(self, bytes_per_element: float) -> float:
        """Dense FLOP/s for weights of this width: FP8 at 1 byte or less when the product has it, else BF16."""
        if bytes_per_element <= 1 and self.fp8_tflops is not None:
            return self.fp8_tflops * 1e12
        return self.bf16_tflops * 1e12

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tbps * 1e12


@cache
def table() -> dict[str, GpuFigures]:
    """The packaged table, read once (it ships inside the package, so a bad row is a bug, not bad input)."""
    text = resources.files("placer.sizing").joinpath("gpus.yaml").read_text(encoding="utf-8")
    rows = yaml.safe_load(text)["products"]
    return {
        name: GpuFigures(
            product=name,
            bf16_tflops=float(row["bf16TFlops"]),
            fp8_tflops=None if row["fp8TFlops"] is None else float(row["fp8TFlops"]),
            hbm_tbps=float(row["hbmTBps"]),
            memory_gib=float(row["memoryGiB"]),
            source=str(row["source"]),
        )
        for name, row in sorted(rows.items())
    }


def figures_of(product: str, where: str) -> GpuFigures:
    """A product's row; a product the table lacks is bad input naming what it knows."""
    known = table()
    if product not in known:
        raise InputError(
            f"{where}: GPU product {product!r} is not in placer's GPU table (placer/sizing/gpus.yaml); known: "
            + ", ".join(known)
        )
    return known[product]
