"""``aws ec2 describe-instance-topology`` output -> the network node each instance hangs off.

Each instance lists its ``NetworkNodes`` top-down: the first is the top of AWS's network hierarchy, the
last the node the instance connects to. The last one becomes placer's ``leaf``; placer models one spine,
so the layers above are joined into it (reported when they differ). Instances are matched to Kubernetes
nodes through ``spec.providerID`` (``aws:///<zone>/<instance-id>``); without ``--nodes`` they become nodes
named by instance id. The output is paginated: a ``NextToken`` means instances on later pages are missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from placer.importers.common import Note, check_node_count, error, got, is_label_value, is_node_name, load_json, short

KNOWN_KEYS = {
    "InstanceId",
    "InstanceType",
    "NetworkNodes",
    "ZoneId",
    "AvailabilityZone",
    "GroupName",
    "CapacityBlockId",
}


@dataclass(frozen=True)
class Instance:
    instance_id: str
    instance_type: str | None
    network_nodes: tuple[str, ...]  # top-down
    zone: str | None

    @property
    def leaf(self) -> str | None:
        return self.network_nodes[-1] if self.network_nodes else None


@dataclass(frozen=True)
class InstanceTopology:
    source: str
    instances: tuple[Instance, ...]
    notes: tuple[Note, ...] = field(default=())


def parse_instance_topology(text: str, source: str) -> InstanceTopology:
    data = load_json(text, source)
    if not isinstance(data, dict) or not isinstance(data.get("Instances"), list):
        raise error(source, None, "expected aws ec2 describe-instance-topology output: an object with 'Instances'")
    check_node_count(len(data["Instances"]), source)
    notes: list[Note] = []
    instances: list[Instance] = []
    unknown: set[str] = set()
    bare: list[str] = []  # instances without network nodes: no leaf
    for i, item in enumerate(data["Instances"]):
        if not isinstance(item, dict):
            raise error(source, None, f"Instances[{i}]: expected an object")
        iid = item.get("InstanceId")
        if not isinstance(iid, str) or not is_node_name(iid):
            raise error(source, None, f"Instances[{i}].InstanceId: expected an instance id, {got(iid)}")
        nodes = item.get("NetworkNodes") or []
        if not isinstance(nodes, list) or not all(isinstance(n, str) and is_label_value(n) for n in nodes):
            raise error(source, None, f"Instances[{i}].NetworkNodes: expected a list of network node ids")
        if not nodes:
            bare.append(iid)
        itype = item.get("InstanceType")
        zone = item.get("ZoneId")
        instances.append(
            Instance(
                iid, itype if isinstance(itype, str) else None, tuple(nodes), zone if isinstance(zone, str) else None
            )
        )
        unknown |= set(item) - KNOWN_KEYS
    for key in sorted(unknown):
        notes.append(Note(source, None, f"field {short(key)} not understood; ignored"))
    if bare:
        notes.append(
            Note(
                source,
                None,
                f"{len(bare)} instance(s) without NetworkNodes (null or empty), e.g. {bare[0]}: they get no leaf",
            )
        )
    if data.get("NextToken"):
        notes.append(
            Note(source, None, "NextToken present: the output is paginated and instances on later pages are missing")
        )
    for depth in range(max((len(i.network_nodes) for i in instances), default=0) - 1):
        values = {i.network_nodes[depth] for i in instances if len(i.network_nodes) > depth + 1}
        if len(values) > 1:
            notes.append(
                Note(
                    source,
                    None,
                    f"network layer {depth + 1} has {len(values)} nodes: placer models one spine, so layers above "
                    "the instances' own network node are joined into it",
                )
            )
    seen: set[str] = set()
    for inst in instances:  # a set, not list.count in a loop: 32k instances took 53 s
        if inst.instance_id in seen:
            raise error(source, None, f"instance {inst.instance_id} appears twice")
        seen.add(inst.instance_id)
    return InstanceTopology(source, tuple(instances), tuple(notes))
