"""What ``placer size`` shows: a rich table per pool with its reasoning (for stderr), and the sized spec
as YAML (for stdout or a file; same input, same bytes)."""

from __future__ import annotations

import yaml
from rich.table import Table
from rich.text import Text

from placer.model.spec import ServingTopology
from placer.model.yaml_text import add_yaml12_numbers
from placer.sizing.plan import SizeResult


class _Dumper(yaml.SafeDumper):
    """yaml.safe_dump's, quoting strings such as "1e3" that placer's loader reads as numbers."""


add_yaml12_numbers(_Dumper)


def spec_text(spec: ServingTopology, as_json: bool = False) -> str:
    """The spec as the user wrote it (fields they set, in the model's order), with the new counts; YAML, or
    JSON for a file named *.json."""
    doc = spec.model_dump(mode="json", by_alias=True, exclude_unset=True)
    for name, pool in spec.pools.items():
        doc["pools"][name]["instances"] = pool.instances
    if as_json:
        import json

        return json.dumps(_whole(doc), indent=2) + "\n"
    return yaml.dump(_whole(doc), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def _whole(value):
    """Integral floats as integers (``80`` not ``80.0``), as people write them."""
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    return value


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f} ms" if value >= 1 else f"{value * 1e3:.0f} us"


def table(result: SizeResult) -> Table:
    """One row per pool: instance, capacity, predicted latencies at the chosen count, bottleneck, headroom."""
    load = result.load
    t = Table(title=f"placer size: {result.spec.metadata.name} ({load.rate:g} req/s per replica)", title_justify="left")
    for col in ("pool", "instance", "capacity/instance", "TTFT", "ITL", "batch", "bottleneck", "instances", "headroom"):
        t.add_column(col, justify="right" if col not in ("pool", "instance", "bottleneck") else "left")
    for pool in result.pools:
        s, inst = pool.sizing, pool.instance
        head = s.headroom(load.rate)
        t.add_row(
            f"{pool.name} ({s.role})",
            f"TP{inst.tensor_parallel} x {inst.gpus // inst.tensor_parallel} {inst.gpu.product}",
            f"{s.capacity_rps:.3g} req/s",
            _ms(s.ttft_ms),
            _ms(s.itl_ms),
            "-" if s.batch is None else f"{s.batch:.1f}",
            s.bottleneck or "-",
            str(s.instances),
            "-" if head is None else f"{head:+.0%}",
        )
    return t


def reasoning(result: SizeResult) -> list[Text]:
    """The arithmetic behind each row, in sentences (the table's footnotes)."""
    lines = []
    m, load, eff = result.model, result.load, result.efficiency
    lines.append(
        Text(
            f"model: {m.parameters / 1e9:.1f} B parameters x {m.bytes_per_element:g} B = "
            f"{m.weight_bytes / 2**30:.0f} GiB of weights; KV {m.kv_bytes_per_token / 1024:.0f} KiB per token. "
            f"Load per replica: {load.rate:g} req/s, "
            f"prompt mean {load.prompt_mean} / p90 {load.prompt_p90} tokens, output {load.output_mean} tokens. "
            f"Efficiency: MFU {eff.mfu:g}, MBU {eff.mbu:g}, memory fraction {eff.memory_fraction:g} (docs/SIZING.md)."
        )
    )
    for pool in result.pools:
        s, c, g = pool.sizing, pool.comm, pool.instance.gpu
        terms = s.terms
        read = "weights read" if s.role == "prefill" else "weights+KV read"  # a prefill reads no KV cache
        split = (
            ""
            if terms is None
            else f"compute {_ms(terms.compute * 1e3)}, {read} {_ms(terms.memory * 1e3)}, "
            f"all-reduce {_ms(terms.communication * 1e3)} (from the placement)"
        )
        kv = "" if c.kv_bandwidth_gbps is None else f"; KV path {c.kv_bandwidth_gbps:g} GB/s"
        what = "p90 prefill" if s.role == "prefill" else "decode step"
        lines.append(
            Text(
                f"{pool.name}: {g.product} peak {g.peak_flops(result.model.bytes_per_element) / 1e12:g} TFLOP/s, "
                f"{g.hbm_tbps:g} TB/s; {what}: {split}{kv}."
            )
        )
    lines += [Text(f"note: {n}") for n in result.notes]
    return lines
