"""What the emulated fabric will be: namespaces, veth pairs, interface names, addresses and VLAN rules.

A pure function of the resolved config (no root needed, unit-tested), so the builder only executes it and the
teardown knows exactly what to remove. The emulation maps:

- a node -> a network namespace (created, or an existing one such as a container's: :class:`NodeAttachment`),
  holding one veth end per cabled NIC, named after the NIC's netdev, with the NIC's MAC and MTU;
- a switch -> a network namespace with one Linux bridge; every port is the switch-side veth end, with the port's
  MTU, enslaved to the bridge (administratively down when the port is ``shutdown``);
- VLANs -> nftables rules in the switch's ``bridge`` family table: a port accepts and emits only its VLANs, tagged
  or untagged as configured. This kernel has neither the 8021q module nor bridge VLAN filtering nor tc's vlan
  action, so tags are never pushed or popped: a VLAN must be tagged on all its ports or untagged on all of them,
  and the plan refuses configs that would need more (:class:`EmulationError` says which ports).
- QoS -> not re-marked: frames keep their PCP, DSCP and ECN end to end (the priority checks verify exactly that).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address

from fakehw.fabric.analysis import analyse
from fakehw.fabric.model import FabricModel, HostNic, NicRef, Port, PortRef, VlanMembership
from fakehw.fabric.netns import NETNS_RUN_DIR

BRIDGE = "fhbr"
NFT_TABLE = "fakehw_vlan"
IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


class EmulationError(Exception):
    """The config cannot be emulated on this kernel (or with these names); the message says why and what to do."""


@dataclass(frozen=True)
class NodeAttachment:
    """Where a node's NICs go. ``path=None``: a namespace the fabric creates and deletes. A path: an existing
    namespace (a container's ``/proc/<pid>/ns/net``, a named one) that the fabric only adds veth ends to."""

    path: str | None = None


@dataclass(frozen=True, slots=True)
class NsPlan:
    name: str
    path: str
    owned: bool


@dataclass(frozen=True, slots=True)
class EndPlan:
    """One veth end: namespace, interface name, MAC, MTU."""

    ns: str
    ifname: str
    mac: str
    mtu: int
    up: bool = True


@dataclass(frozen=True, slots=True)
class LinkPlan:
    """A cable: a veth pair. ``a`` is always a switch port (host links: ``b`` is the NIC)."""

    a: EndPlan
    b: EndPlan
    a_ref: PortRef
    b_ref: PortRef | NicRef


@dataclass(frozen=True, slots=True)
class NicPlan:
    ref: NicRef
    ns: str
    ifname: str
    mac: str
    ip: IPv4Address | None
    vlan: int | None
    """Tag the NIC's frames carry (None: untagged)."""
    segment_vlan: int | None
    mtu: int
    rail: int | None
    switch: str | None
    port_ifname: str | None


@dataclass(frozen=True, slots=True)
class PortPlan:
    ref: PortRef
    ns: str
    ifname: str
    mtu: int
    vlan: VlanMembership
    up: bool


@dataclass(frozen=True)
class FabricPlan:
    run_id: str
    prefix: str
    fabric: str
    namespaces: Mapping[str, NsPlan]
    """By key: ``node:<name>`` and ``switch:<name>``."""
    links: tuple[LinkPlan, ...]
    nics: Mapping[NicRef, NicPlan]
    ports: Mapping[PortRef, PortPlan]
    nft: Mapping[str, str] = field(default_factory=dict)
    """nft ruleset text per switch namespace key."""

    def node_ns(self, node: str) -> NsPlan:
        return self.namespaces[f"node:{node}"]


def new_run_id() -> str:
    return secrets.token_hex(3)


def _mac(key: str) -> str:
    h = hashlib.sha256(key.encode()).digest()
    return "02:fa:" + ":".join(f"{b:02x}" for b in h[:4])


def _port_ifnames(ports: tuple[Port, ...]) -> dict[str, str]:
    names: dict[str, str] = {}
    used = {BRIDGE, "lo"}
    for p in ports:
        name = p.name if IFNAME.match(p.name) and p.name not in used else f"p{p.index}"
        if name in used:
            name = f"port{p.index}"
        used.add(name)
        names[p.name] = name
    return names


def _nic_ifname(nic: HostNic, index: int, used: set[str]) -> str:
    name = nic.nic.netdev if IFNAME.match(nic.nic.netdev) else f"eth{index}"
    if name in used or name == "lo":
        name = f"fheth{index}"
    used.add(name)
    return name


def _check_tagging(model: FabricModel) -> None:
    modes: dict[int, dict[str, list[str]]] = {}
    for p in model.ports():
        if p.peer is None:
            continue
        if p.vlan.untagged is not None:
            modes.setdefault(p.vlan.untagged, {}).setdefault("untagged", []).append(p.id)
        for v in p.vlan.tagged:
            modes.setdefault(v, {}).setdefault("tagged", []).append(p.id)
    for nic in model.nics:
        if nic.vlan is not None and nic.peer is not None:
            modes.setdefault(nic.vlan, {}).setdefault("tagged", []).append(nic.id)
    for vlan, seen in sorted(modes.items()):
        if len(seen) > 1:
            raise EmulationError(
                f"VLAN {vlan} is untagged on {seen['untagged'][0]} but tagged on {seen['tagged'][0]}: the emulated "
                f"switch would have to push or pop the 802.1Q tag, and this kernel has no 8021q module, no bridge "
                f"VLAN filtering and no tc vlan action. Make VLAN {vlan} tagged everywhere or untagged everywhere "
                f"to emulate this fabric (lint is not affected)."
            )


def plan(model: FabricModel, run_id: str | None = None,
         attachments: Mapping[str, NodeAttachment] | None = None) -> FabricPlan:
    """Lay out the emulation of ``model``. ``attachments`` maps node names to existing namespaces."""
    run_id = run_id or new_run_id()
    if not re.fullmatch(r"[0-9a-z]{1,8}", run_id):
        raise EmulationError(f"run id {run_id!r} must be 1-8 lowercase letters or digits")
    prefix = f"fh{run_id}"
    attachments = attachments or {}
    unknown = set(attachments) - {n.name for n in model.system.nodes}
    if unknown:
        raise EmulationError(f"attachments name nodes that are not in the fabric: {', '.join(sorted(unknown))}")
    topo = analyse(model)
    if topo.loops:
        loop = topo.loops[0]
        raise EmulationError(f"VLAN {loop.vlan} loops through {' -> '.join(loop.cycle)}; without spanning tree the "
                             f"emulated bridges would flood forever (lint reports FAB-VLAN-002)")
    _check_tagging(model)

    namespaces: dict[str, NsPlan] = {}
    for node in model.system.nodes:
        att = attachments.get(node.name)
        if att is not None and att.path is not None:
            namespaces[f"node:{node.name}"] = NsPlan(f"{prefix}-{node.name}", att.path, False)
        else:
            name = f"{prefix}-{node.name}"
            namespaces[f"node:{node.name}"] = NsPlan(name, str(NETNS_RUN_DIR / name), True)
    for sw in model.switches:
        name = f"{prefix}-sw-{sw.name}"
        namespaces[f"switch:{sw.name}"] = NsPlan(name, str(NETNS_RUN_DIR / name), True)

    port_plans: dict[PortRef, PortPlan] = {}
    for sw in model.switches:
        names = _port_ifnames(sw.ports)
        for p in sw.ports:
            port_plans[p.ref] = PortPlan(p.ref, f"switch:{sw.name}", names[p.name], p.mtu, p.vlan, not p.shutdown)

    # addresses: per VLAN segment, in NIC order
    next_host: dict[int, int] = {}
    nic_plans: dict[NicRef, NicPlan] = {}
    used_by_node: dict[str, set[str]] = {}
    for nic in model.nics:
        used = used_by_node.setdefault(nic.node, set())
        ifname = _nic_ifname(nic, len(used), used)
        seg = model.nic_vlan(nic)
        ip = None
        if seg is not None:
            subnet = model.vlan(seg).subnet
            k = next_host.get(seg, 0) + 1
            next_host[seg] = k
            if k >= subnet.num_addresses - 1:
                raise EmulationError(f"VLAN {seg}'s subnet {subnet} has no address left for {nic.id}")
            ip = subnet.network_address + k
        port = port_plans.get(nic.peer) if nic.peer else None
        nic_plans[nic.ref] = NicPlan(nic.ref, f"node:{nic.node}", ifname, nic.nic.mac, ip, nic.vlan, seg, nic.mtu,
                                     nic.rail, nic.peer.switch if nic.peer else None,
                                     port.ifname if port else None)

    links: list[LinkPlan] = []
    for link in model.links:
        a_ref, b_ref = link.a, link.b
        if isinstance(a_ref, NicRef):
            a_ref, b_ref = b_ref, a_ref
        assert isinstance(a_ref, PortRef)
        pa = port_plans[a_ref]
        a_end = EndPlan(pa.ns, pa.ifname, _mac(f"{model.name}/{a_ref}"), pa.mtu, pa.up)
        if isinstance(b_ref, NicRef):
            nb = nic_plans[b_ref]
            b_end = EndPlan(nb.ns, nb.ifname, nb.mac, nb.mtu, True)
        else:
            pb = port_plans[b_ref]
            b_end = EndPlan(pb.ns, pb.ifname, _mac(f"{model.name}/{b_ref}"), pb.mtu, pb.up)
        links.append(LinkPlan(a_end, b_end, a_ref, b_ref))

    nft = {f"switch:{sw.name}": vlan_ruleset(sw.name, [port_plans[p.ref] for p in sw.ports if p.peer is not None])
           for sw in model.switches}
    return FabricPlan(run_id, prefix, model.name, namespaces, tuple(links), nic_plans, port_plans, nft)


def vlan_ruleset(switch: str, ports: list[PortPlan]) -> str:
    """nftables rules that make a VLAN-unaware Linux bridge behave like a switch with per-port VLANs.

    Ingress: a tagged frame needs its VLAN in the port's tagged set; an untagged frame needs an untagged VLAN on
    the port. Egress: a tagged frame leaves only ports that tag its VLAN; an untagged frame only ports whose
    untagged VLAN is the one of the port it came in on. Every drop is counted (``nft list table bridge
    fakehw_vlan`` shows where frames died)."""
    lines = [f"table bridge {NFT_TABLE} {{", f"  comment \"fakehw fabric VLANs of switch {switch}\""]
    untagged_groups: dict[int, list[str]] = {}
    for p in ports:
        if p.vlan.untagged is not None:
            untagged_groups.setdefault(p.vlan.untagged, []).append(p.ifname)
    for vid, members in sorted(untagged_groups.items()):
        lines.append(f"  set untagged_{vid} {{ type ifname; elements = {{ {', '.join(_q(m) for m in members)} }} }}")
    lines.append("  chain ingress {")
    lines.append("    type filter hook prerouting priority -200; policy accept;")
    if ports:
        lines.append("    iifname vmap { " + ", ".join(f"{_q(p.ifname)} : jump in_{k}" for k, p in enumerate(ports)) +
                     " }")
    lines.append("  }")
    lines.append("  chain forward {")
    lines.append("    type filter hook forward priority -200; policy accept;")
    if ports:
        lines.append("    oifname vmap { " + ", ".join(f"{_q(p.ifname)} : jump out_{k}" for k, p in enumerate(ports)) +
                     " }")
    lines.append("  }")
    for k, p in enumerate(ports):
        tagged = ", ".join(str(v) for v in sorted(p.vlan.tagged))
        lines.append(f"  chain in_{k} {{  # {p.ifname}")
        if tagged:
            lines.append(f"    ether type 8021q vlan id != {{ {tagged} }} counter drop comment \"VLAN not on port\"")
        else:
            lines.append("    ether type 8021q counter drop comment \"tagged frame on an access port\"")
        if p.vlan.untagged is None:
            lines.append("    ether type != 8021q counter drop comment \"untagged frame on a trunk (no native VLAN)\"")
        lines.append("  }")
        lines.append(f"  chain out_{k} {{  # {p.ifname}")
        if tagged:
            lines.append(f"    ether type 8021q vlan id != {{ {tagged} }} counter drop comment \"VLAN not on port\"")
        else:
            lines.append("    ether type 8021q counter drop comment \"tagged frame to an access port\"")
        if p.vlan.untagged is None:
            lines.append("    ether type != 8021q counter drop comment \"untagged frame to a trunk\"")
        else:
            lines.append(f"    ether type != 8021q iifname != @untagged_{p.vlan.untagged} counter drop "
                         f"comment \"untagged frame from another VLAN\"")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _q(name: str) -> str:
    return '"' + name + '"'
