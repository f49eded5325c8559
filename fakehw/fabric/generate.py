"""Generate fabric configs for a hardware profile: rail-optimised (one leaf per rail) and spine-leaf (rails as VLANs).

The built-in examples were written by these generators (a test keeps them equal), the benchmarks use them for
16 and 64 nodes, and ``fakehw fabric generate`` offers them as a starting point for a real config.

Both use the RoCE QoS that NVIDIA's DCQCN guidance describes (see ``reference/platform.md``): trust DSCP,
RoCE on DSCP 26 -> priority 3 (lossless, ECN-marked), CNPs on DSCP 48 -> priority 6, and a PFC watchdog on
every port with SONiC's pfcwd defaults (drop after 200 ms, restore after 200 ms).
"""

from __future__ import annotations

from typing import Any

from fakehw.model import System, load_profile

ROCE_QOS: dict[str, Any] = {
    "trust": "dscp",
    "dscpToPriority": {26: 3, 48: 6},
    "defaultPriority": 0,
    "pfcPriorities": [3],
    "headroom": [3],
    "ecn": {"priorities": [3], "minKB": 150, "maxKB": 1500, "probability": 10},
    "cnpPriority": 6,
    "pfcWatchdog": {"action": "drop", "detectionMs": 200, "restorationMs": 200},
}
OTHER_TRAFFIC = [{"name": "storage", "dscp": 10}, {"name": "management", "dscp": 0}]


def _system(profile: str, nodes: int | None) -> System:
    return load_profile(profile, nodes=nodes)


def _rails(system: System) -> list[int]:
    rails = sorted({n.rail for node in system.nodes for n in node.nics if n.rail is not None})
    if not rails:
        raise ValueError(f"profile {system.name} gives its NICs no rails")
    return rails


def rail_optimised(profile: str, nodes: int | None = None, *, name: str | None = None, description: str | None = None,
                   switch_mtu: int = 9216, vlan_base: int = 100) -> dict[str, Any]:
    """One leaf per rail; NIC of rail r on every node cabled to leaf-rail<r>, port p<node index>."""
    system = _system(profile, nodes)
    rails = _rails(system)
    switches = []
    for r in rails:
        ports = []
        for i, node in enumerate(system.nodes):
            for nic in node.nics:
                if nic.rail == r:
                    ports.append({"name": f"p{i}", "connect": f"{node.name}/{nic.name}"})
        switches.append({"name": f"leaf-rail{r}", "role": "leaf", "rail": r, "vlan": {"tagged": [vlan_base + r]},
                         "ports": ports})
    return {
        "name": name or f"{system.name}-rail",
        "description": description or f"Rail-optimised RoCE v2 fabric for {len(system.nodes)} x {system.name}: "
                                      f"one leaf per rail",
        "profile": profile,
        "nodes": len(system.nodes),
        "defaults": {"mtu": switch_mtu, "qos": ROCE_QOS},
        "vlans": [{"id": vlan_base + r, "name": f"rail{r}", "rail": r} for r in rails],
        "traffic": OTHER_TRAFFIC,
        "switches": switches,
    }


def spine_leaf(profile: str, nodes: int | None = None, *, leaves: int = 2, spines: int = 2, name: str | None = None,
               description: str | None = None, switch_mtu: int = 9216, vlan_base: int = 200) -> dict[str, Any]:
    """Nodes split over ``leaves`` leaves in blocks; each rail is a VLAN; spine s carries the rails r with
    r % spines == s, so no VLAN loops through two spines."""
    system = _system(profile, nodes)
    rails = _rails(system)
    if leaves < 1 or spines < 1:
        raise ValueError("need at least one leaf and one spine")
    per_leaf = -(-len(system.nodes) // leaves)
    leaf_docs = []
    spine_ports: dict[int, list[dict[str, Any]]] = {s: [] for s in range(spines)}
    for li in range(leaves):
        members = system.nodes[li * per_leaf:(li + 1) * per_leaf]
        ports: list[dict[str, Any]] = []
        for node in members:
            for nic in node.nics:
                if nic.rail is not None:
                    ports.append({"name": f"p{len(ports)}", "connect": f"{node.name}/{nic.name}",
                                  "vlan": {"tagged": [vlan_base + nic.rail]}})
        for s in range(spines):
            carried = [vlan_base + r for r in rails if r % spines == s]
            ports.append({"name": f"up{s}", "connect": f"spine{s}/p{li}", "vlan": {"tagged": carried}})
            spine_ports[s].append({"name": f"p{li}", "vlan": {"tagged": carried}})
        leaf_docs.append({"name": f"leaf{li}", "role": "leaf", "ports": ports})
    spine_docs = [{"name": f"spine{s}", "role": "spine", "ports": spine_ports[s]} for s in range(spines)]
    return {
        "name": name or f"{system.name}-spine-leaf",
        "description": description or f"Spine-leaf RoCE v2 scale-out fabric for {len(system.nodes)} x {system.name}: "
                                      f"{leaves} leaves, {spines} spines, one VLAN per rail",
        "profile": profile,
        "nodes": len(system.nodes),
        "defaults": {"mtu": switch_mtu, "qos": ROCE_QOS},
        "vlans": [{"id": vlan_base + r, "name": f"rail{r}", "rail": r} for r in rails],
        "traffic": OTHER_TRAFFIC,
        "switches": [*leaf_docs, *spine_docs],
    }


def to_yaml(doc: dict[str, Any], header: str = "") -> str:
    """A readable YAML rendering: sections in block style, one port per line."""
    import yaml

    def flow(value: Any) -> str:
        text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000).strip()
        return text.removesuffix("...").strip()

    out = [f"# {line}".rstrip() for line in header.strip().splitlines()] if header else []
    for key in ("name", "description", "profile", "nodes"):
        if key in doc:
            out.append(f"{key}: {flow(doc[key])}")
    out.append("defaults:")
    out.append(f"  mtu: {doc['defaults']['mtu']}")
    out.append("  qos:")
    for k, v in doc["defaults"]["qos"].items():
        out.append(f"    {k}: {flow(v)}")
    for section in ("vlans", "traffic"):
        out.append(f"{section}:")
        out += [f"  - {flow(item)}" for item in doc[section]]
    out.append("switches:")
    for sw in doc["switches"]:
        out.append(f"  - name: {sw['name']}")
        for k, v in sw.items():
            if k not in ("name", "ports"):
                out.append(f"    {k}: {flow(v)}")
        out.append("    ports:")
        out += [f"      - {flow(p)}" for p in sw["ports"]]
    return "\n".join(out) + "\n"
