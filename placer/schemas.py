"""JSON Schemas of placer's file formats, generated from the pydantic models (the single source)."""

from __future__ import annotations

from typing import Any

PLACEMENT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Placement",
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "cluster", "status", "replicas"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "placer.dev/v1alpha1"},
        "kind": {"const": "Placement"},
        "metadata": {
            "type": "object",
            "required": ["name", "namespace"],
            "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}},
        },
        "cluster": {"type": "string"},
        "status": {
            "type": "object",
            "required": ["status"],
            "properties": {
                "status": {"enum": ["optimal", "feasible", "infeasible", "unknown", "greedy"]},
                "objective": {"type": ["integer", "null"]},
                "bound": {"type": ["integer", "null"]},
                "gap": {"type": ["number", "null"]},
                "solver": {"type": "string"},
                "notes": {"type": "array", "items": {"type": "string"}},
            },
        },
        "replicas": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["index", "instances"],
                "properties": {
                    "index": {"type": "integer", "minimum": 0},
                    "router": {"type": ["string", "null"]},
                    "instances": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["pool", "index", "domain", "pods"],
                            "properties": {
                                "pool": {"type": "string"},
                                "index": {"type": "integer"},
                                "domain": {"type": "string"},
                                "pods": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["node", "gpus"],
                                        "properties": {
                                            "node": {"type": "string"},
                                            "gpus": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def all_schemas() -> dict[str, dict[str, Any]]:
    from placer.cluster import ClusterSpec
    from placer.spec import ServingTopology

    return {
        "servingtopology": ServingTopology.model_json_schema(by_alias=True),
        "cluster": ClusterSpec.model_json_schema(by_alias=True),
        "placement": PLACEMENT_SCHEMA,
    }
