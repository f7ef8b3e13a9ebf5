"""The cluster generator: deterministic, valid, of the size and fragmentation asked for."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placer.model.cluster import ClusterSpec
from placer.model.load import load_cluster
from placer.topology.build import build_topology
from placer.topology.generate import STYLES, dump_cluster_yaml, generate_cluster

ROOT = Path(__file__).resolve().parent.parent
UNIT = {"dgx-h100": 8, "gb200-nvl72": 72, "mixed": 32}  # GPUs are rounded up to whole units


def _regenerate() -> Any:
    spec = importlib.util.spec_from_file_location("regenerate", ROOT / "fixtures" / "regenerate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _counts(data: dict[str, Any]) -> tuple[int, int]:
    """(total GPUs, busy GPUs) of a generated cluster."""
    classes = data["nodeClasses"]
    total = sum(classes[n["class"]]["gpus"]["count"] for n in data["nodes"])
    return total, sum(len(n.get("busy", [])) for n in data["nodes"])


@pytest.mark.parametrize("style", STYLES)
def test_same_arguments_same_text(style: str) -> None:
    first = dump_cluster_yaml(generate_cluster(style, 200, seed=3))
    assert first == dump_cluster_yaml(generate_cluster(style, 200, seed=3))
    assert first != dump_cluster_yaml(generate_cluster(style, 200, seed=4))


@pytest.mark.parametrize(("style", "gpus"), [("dgx-h100", 1), ("dgx-h100", 1024), ("gb200-nvl72", 73), ("mixed", 33)])
def test_gpu_count_rounds_up_to_whole_units(style: str, gpus: int) -> None:
    total, _ = _counts(generate_cluster(style, gpus, seed=1))
    assert total == math.ceil(gpus / UNIT[style]) * UNIT[style]


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 1.0])
def test_busy_fraction_is_reached(style: str, fraction: float) -> None:
    total, busy = _counts(generate_cluster(style, 500, seed=11, busy_fraction=fraction))
    assert abs(busy / total - fraction) <= 1 / total


@pytest.mark.parametrize("seed", range(5))
def test_default_busy_fraction_is_drawn_between_30_and_60_percent(seed: int) -> None:
    total, busy = _counts(generate_cluster("dgx-h100", 1024, seed=seed))
    assert 0.30 - 1 / total <= busy / total <= 0.60 + 1 / total


@pytest.mark.parametrize("style", STYLES)
def test_busy_indices_are_valid_and_metrics_in_range(style: str) -> None:
    data = generate_cluster(style, 400, seed=5)
    with_metrics = 0
    for node in data["nodes"]:
        count = data["nodeClasses"][node["class"]]["gpus"]["count"]
        busy = node.get("busy", [])
        assert busy == sorted(set(busy)) and all(0 <= b < count for b in busy)
        if "metrics" in node:
            with_metrics += 1
            assert 0 <= node["metrics"]["queueDepth"] <= 8 and 0 <= node["metrics"]["kvCacheHit"] <= 0.9
    assert with_metrics == round(0.2 * len(data["nodes"]))


@pytest.mark.parametrize("style", STYLES)
def test_written_yaml_loads_and_builds_a_topology(style: str, tmp_path: Path) -> None:
    data = generate_cluster(style, 300, seed=2, name="demo")
    path = tmp_path / "cluster.yaml"
    path.write_text(dump_cluster_yaml(data), encoding="utf-8")
    spec = load_cluster(path)  # the strict loader: no aliases, no unknown fields
    assert spec.metadata.name == "demo"
    topo = build_topology(spec)
    assert sum(len(n.gpus) for n in topo.nodes) == _counts(data)[0]


def test_gb200_racks_are_nvlink_domains() -> None:
    topo = build_topology(ClusterSpec.model_validate(generate_cluster("gb200-nvl72", 144, seed=0)))
    domains = [d for d in topo.domains.values() if d.level == "nvlink-domain"]
    assert len(domains) == 2 and all(len(d.nodes) == 18 for d in domains)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown style"):
        generate_cluster("tpu-v5", 8, seed=0)
    with pytest.raises(ValueError, match="gpus"):
        generate_cluster("dgx-h100", 0, seed=0)
    with pytest.raises(ValueError, match="busy_fraction"):
        generate_cluster("dgx-h100", 8, seed=0, busy_fraction=1.5)
    with pytest.raises(ValueError, match="DNS-1123"):
        generate_cluster("dgx-h100", 8, seed=0, name="Not_A_Name")


def test_committed_generated_fixtures_are_up_to_date() -> None:
    for path, text in _regenerate().render().items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is stale: run fixtures/regenerate.py"


def test_generated_file_stays_compact() -> None:
    text = (ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 6 * 128 + 20  # a few lines per node


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(style=st.sampled_from(STYLES), gpus=st.integers(1, 300), seed=st.integers(0, 2**32))
def test_any_arguments_give_a_valid_cluster(style: str, gpus: int, seed: int) -> None:
    data = generate_cluster(style, gpus, seed)
    build_topology(ClusterSpec.model_validate(data))
    total, busy = _counts(data)
    assert 0.30 * total - 1 <= busy <= 0.60 * total + 1
