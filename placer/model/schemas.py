"""JSON Schemas of placer's file formats, generated from the pydantic models (the single source)."""

from __future__ import annotations

from typing import Any


def all_schemas() -> dict[str, dict[str, Any]]:
    from placer.model.cluster import ClusterSpec
    from placer.model.record import PlacementRecord
    from placer.model.spec import ServingTopology

    return {
        "servingtopology": ServingTopology.model_json_schema(by_alias=True),
        "cluster": ClusterSpec.model_json_schema(by_alias=True),
        "placement": PlacementRecord.model_json_schema(by_alias=True),
    }
