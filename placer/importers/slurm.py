"""Slurm topology files -> which leaf (and NVLink domain) each node is under: ``topology.yaml`` (a list of
``- topology:`` entries, placer.importers.slurm_yaml) or ``topology.conf`` (tree and block plugins, and NVIDIA
topograph's comments; placer.importers.slurm_conf), told apart by their first entry."""

from __future__ import annotations

import re

from placer.importers.slurm_conf import SlurmTopology, expand_hostlist, parse_topology_conf
from placer.importers.slurm_yaml import parse_topology_yaml

__all__ = ["SlurmTopology", "expand_hostlist", "parse_slurm"]


def parse_slurm(text: str, source: str) -> SlurmTopology:
    """``topology.yaml`` if the file is a YAML list of topologies, else ``topology.conf``."""
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    if re.search(r"^\s*-\s*topology\s*:", body, re.M):
        return parse_topology_yaml(text, source)
    return parse_topology_conf(text, source)
