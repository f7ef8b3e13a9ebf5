"""Checks of a placement read back from a file someone may have edited: each GPU listed once, and (with the
cluster) every node and GPU index it names exists. Failures are bad input naming the file, field and line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from placer.model.errors import InputError
from placer.model.placement import Placement

if TYPE_CHECKING:
    import yaml

    from placer.topology.graph import Topology


def located(path: Path, message: str, root: yaml.Node | None = None) -> InputError:
    """``message`` starts with a field path: give it the file and the line, looked up in ``root`` (the
    document it came from) or else in the file's first document."""
    from placer.model.load import at_line, locate

    return locate(path, InputError(message)) if root is None else at_line(path, root, message)


def check_gpus_once(path: Path, placement: Placement, root: yaml.Node | None = None) -> None:
    """No GPU is listed twice, within a pod or across the record (the checker would call that a bug in
    placer; in a file someone edited it is bad input)."""
    seen: dict[tuple[str, int], str] = {}
    for r, rep in enumerate(placement.replicas):
        for i, inst in enumerate(rep.instances):
            for k, pod in enumerate(inst.pods):
                where = f"replicas[{r}].instances[{i}].pods[{k}]"
                mine: set[int] = set()
                for gpu in pod.gpus:
                    if gpu in mine:
                        raise located(path, f"{where}.gpus: GPU {gpu} is listed twice", root)
                    mine.add(gpu)
                    other = seen.setdefault((pod.node, gpu), where)
                    if other != where:
                        raise located(
                            path,
                            f"{where}.gpus: GPU {gpu} on node {pod.node!r} is held by both {other} and {where}",
                            root,
                        )


def check_against_cluster(path: Path, placement: Placement, topo: Topology) -> None:
    """Every node and GPU index a placement read back names exists in the cluster (an edited or stale file
    is bad input, not a crash)."""
    for r, rep in enumerate(placement.replicas):
        for i, inst in enumerate(rep.instances):
            for k, pod in enumerate(inst.pods):
                where = f"replicas[{r}].instances[{i}].pods[{k}]"
                try:
                    node = topo.node_by_name(pod.node)
                except KeyError:
                    raise located(path, f"{where}.node: no node {pod.node!r} in the cluster") from None
                have = {g.index for g in node.gpus}
                missing = sorted(set(pod.gpus) - have)
                if missing:
                    known = f"0-{len(have) - 1}" if have == set(range(len(have))) else ", ".join(map(str, sorted(have)))
                    raise located(
                        path, f"{where}.gpus: node {pod.node!r} has no GPU {missing[0]} (it has {known or 'none'})"
                    )
        if rep.router is not None:
            try:
                topo.node_by_name(rep.router)
            except KeyError:
                raise located(path, f"replicas[{r}].router: no node {rep.router!r} in the cluster") from None
