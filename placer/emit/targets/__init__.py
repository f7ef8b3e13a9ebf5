"""Output flavours of ``placer solve --target``: one small module per scheduler or workload API.

Each module has ``build(ctx) -> list[dict]`` and a docstring saying what it emits; docs/TARGETS.md says what each one
enforces natively and what only through node affinity. ``coscheduling`` is the default and its output is
unchanged from before targets existed.
"""

from __future__ import annotations

import importlib

TARGETS = ("coscheduling", "kai", "volcano", "kueue", "grove", "lws", "dra", "dynamo")
DEFAULT_TARGET = "coscheduling"
# Targets whose constraints name cluster-scoped topology objects (``--topology-objects`` prints them)
TOPOLOGY_TARGETS = ("grove", "kai", "kueue", "volcano")


def builder(target: str):
    """The ``build`` function of a target (imported on first use)."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    return importlib.import_module(f"placer.emit.targets.{target}").build
