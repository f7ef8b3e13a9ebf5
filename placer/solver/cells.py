"""Which spread-level domains an instance touches, as the model, the greedy and the decoder all count them.

The checker gives every GPU one *cell*: the broadest domain at the spread level or narrower holding the GPU
(its own socket or node when even that is broader), and lets no two replicas share a cell. A candidate no
broader than the spread level lies in one cell. A broader one may touch several, so its GPUs are counted
per *group*: the cell of each node it may draw from, or, when the cells are a node's sockets (spread over
sockets), the node, which then marks every one of its sockets. Groups are domains of the tree, so the
laminar supply rule still holds per group (placer.solver.cpsat.draws).

Exact where the cells are whole nodes or more (spread over nodes or broader, or over sockets on nodes
without socket domains); over the sockets of a node whose sockets are domains it is conservative: an
instance that takes GPUs of such a node is taken to touch all of its sockets.
"""

from __future__ import annotations

from placer.model.levels import LEVEL_RANK
from placer.solver.candidates import Candidate
from placer.topology.graph import Topology


def inside_one(level: str, cand: Candidate) -> bool:
    """A candidate no broader than the spread level lies in one cell (as it did before groups existed)."""
    return LEVEL_RANK[cand.level] <= LEVEL_RANK[level]


def node_group(topo: Topology, level: str, node: int) -> str:
    """The group of a node: its cell, or the node itself when the cells are narrower than nodes."""
    dom = topo.node_domain[node]
    return topo.domain_at(dom, level) or dom


def group_marks(topo: Topology, level: str, group: str) -> tuple[str, ...]:
    """The cells a draw from ``group`` may touch: the group, or a node's socket domains under socket spread."""
    dom = topo.domains[group]
    if LEVEL_RANK[level] < LEVEL_RANK["node"] and dom.level == "node" and dom.children:
        return tuple(dom.children)
    return (group,)


def node_marks(topo: Topology, level: str, node: int) -> tuple[str, ...]:
    """The cells any GPUs of ``node`` may touch."""
    return group_marks(topo, level, node_group(topo, level, node))


def candidate_groups(topo: Topology, level: str, eligible: frozenset[int], cand: Candidate) -> tuple[str, ...]:
    """The groups an instance at a candidate broader than the spread level may draw from: those of its
    eligible nodes with free GPUs, in canonical order."""
    found = {
        node_group(topo, level, n) for n in topo.domains[cand.domain].nodes if n in eligible and topo.nodes[n].free_gpus
    }
    return tuple(sorted(found, key=topo.order.__getitem__))
