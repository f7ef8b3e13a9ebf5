"""The topology levels placer reasons about, narrowest first.

Kueue lists levels broadest first as node-label keys; placer fixes the set because the cost model gives each
level a physical meaning (which link a GPU pair crosses). A cluster may leave a level out: a node with no
rack is its own rack, and a domain with a single child is the same GPUs as that child, so it is merged away.
"""

from typing import Literal

Level = Literal["socket", "node", "nvlink-domain", "rack", "leaf", "spine"]

LEVELS: tuple[Level, ...] = ("socket", "node", "nvlink-domain", "rack", "leaf", "spine")
"""Narrowest to broadest. ``socket`` exists only inside PCIe nodes with several CPU sockets."""

LEVEL_RANK: dict[str, int] = {name: i for i, name in enumerate(LEVELS)}

LEVEL_WORDS: dict[str, str] = {
    "socket": "one CPU socket (PCIe switch) of a node",
    "node": "one node",
    "nvlink-domain": "one NVLink domain",
    "rack": "one rack",
    "leaf": "one network leaf (scalable unit)",
    "spine": "the cluster (through the spine)",
}
