"""Layer-2 structure of a resolved fabric: segments per VLAN, loops, and the RoCE path between every NIC pair.

A *segment* is what one VLAN connects: switches joined by links whose both ends carry the VLAN, and the NICs
whose frames (tagged with the VLAN, or untagged into a port whose untagged VLAN it is) their port accepts. Every
pair of NICs in one segment is a RoCE path; its ports are listed in order from ``a`` to ``b`` (ingress and egress
port of each switch crossed). Fabric configs carry no spanning tree, so a loop is reported and paths follow a
breadth-first spanning tree of the segment.

The MTU arithmetic (what the linter predicts and the emulated fabric measures) lives here too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from math import comb

from fakehw.fabric.model import FabricModel, HostNic, Link, NicRef, Port, PortRef
from fakehw.fabric.wire import IB_MTUS, ROCE_HEADROOM, roce_mtu

__all__ = ["IB_MTUS", "ROCE_HEADROOM", "Path", "Segment", "Topology", "analyse", "max_send_payload", "roce_mtu"]

SEND_OVERHEAD_IPV4 = 20 + 8 + 12 + 4
"""IPv4 + UDP + BTH + ICRC: what a RoCE v2 SEND_ONLY adds to its payload inside the Ethernet MTU."""


def max_send_payload(path_mtu: int) -> int:
    """The largest RoCE SEND_ONLY payload (IPv4) that fits in a path MTU. RoCE pads payloads to 4 bytes, so
    this is the MTU less the headers, rounded down to a multiple of 4."""
    return max(0, (path_mtu - SEND_OVERHEAD_IPV4) // 4 * 4)


_Parent = dict[str, "tuple[str, Port, Port] | None"]


@dataclass(frozen=True, slots=True)
class Segment:
    vlan: int
    switches: frozenset[str]
    nics: tuple[NicRef, ...]
    access: tuple[Port, ...] = field(default=(), compare=False, repr=False)
    """The switch port each NIC enters through (aligned with ``nics``)."""
    mtus: tuple[int, ...] = field(default=(), compare=False, repr=False)
    """Each NIC's MTU (aligned with ``nics``)."""
    parent: _Parent = field(default_factory=dict, compare=False, repr=False)
    depth: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def path_count(self) -> int:
        return comb(len(self.nics), 2)

    def path(self, i: int, j: int) -> Path:
        """The RoCE path between the segment's NICs ``i`` and ``j`` (``i`` first)."""
        pa, pb = self.access[i], self.access[j]
        inner = _switch_path(self.parent, self.depth, pa.switch, pb.switch)
        ports = (pa.ref, *(p.ref for p in inner), pb.ref)
        mtus = (self.mtus[i], pa.mtu, *(p.mtu for p in inner), pb.mtu, self.mtus[j])
        return Path(self.nics[i], self.nics[j], self.vlan, ports, mtus)

    def paths(self) -> Iterator[Path]:
        for i in range(len(self.nics)):
            for j in range(i + 1, len(self.nics)):
                yield self.path(i, j)


@dataclass(frozen=True, slots=True)
class Path:
    """A RoCE path: two NICs of one segment and the switch ports between them, in order from ``a`` to ``b``."""

    a: NicRef
    b: NicRef
    vlan: int
    ports: tuple[PortRef, ...]
    mtus: tuple[int, ...]
    """MTU of every element from a's NIC through the ports to b's NIC."""

    @property
    def id(self) -> str:
        return f"{self.a} <-> {self.b}"

    @property
    def path_mtu(self) -> int:
        return min(self.mtus)

    @property
    def max_payload(self) -> int:
        """Largest RoCE SEND_ONLY payload (IPv4) that crosses this path: the linter's prediction."""
        return max_send_payload(self.path_mtu)

    @property
    def negotiated_roce_mtu(self) -> int:
        """The RoCE MTU a queue pair between the two NICs uses (the smaller of their active MTUs)."""
        return min(roce_mtu(self.mtus[0]), roce_mtu(self.mtus[-1]))

    @property
    def supported_roce_mtu(self) -> int:
        """The largest RoCE MTU whose packets always fit through every hop."""
        return roce_mtu(self.path_mtu)


@dataclass(frozen=True)
class Loop:
    vlan: int
    cycle: tuple[str, ...]
    """Switch names around the loop, first repeated at the end."""
    link: Link


@dataclass
class Topology:
    """Everything derived from the cabling: segments, loops and NICs left out of any segment. The RoCE paths
    (every NIC pair of a segment: quadratic in a segment's size) are built only when asked for."""

    segments: list[Segment] = field(default_factory=list)
    loops: list[Loop] = field(default_factory=list)
    detached: dict[NicRef, str] = field(default_factory=dict)
    """NICs whose port does not accept their frames (or that are not cabled), with the reason."""
    segment_of: dict[NicRef, tuple[int, int]] = field(default_factory=dict)
    """NIC -> (VLAN, index of its segment in ``segments``)."""
    _paths: list[Path] | None = field(default=None, repr=False)

    @property
    def paths(self) -> list[Path]:
        """Every RoCE path, segment by segment (built on first use)."""
        if self._paths is None:
            self._paths = [p for seg in self.segments for p in seg.paths()]
        return self._paths

    @property
    def path_count(self) -> int:
        return sum(seg.path_count for seg in self.segments)

    def path(self, a: NicRef, b: NicRef) -> Path | None:
        """The path between two NICs, or None when they share no segment."""
        sa, sb = self.segment_of.get(a), self.segment_of.get(b)
        if sa is None or sa != sb or a == b:
            return None
        seg = self.segments[sa[1]]
        i, j = seg.nics.index(a), seg.nics.index(b)
        return seg.path(min(i, j), max(i, j))


def _accepts(port: Port, vlan: int, tagged: bool) -> bool:
    return not port.shutdown and port.vlan.carries(vlan, tagged)


def nic_attachment(model: FabricModel, nic: HostNic) -> tuple[int, Port] | str:
    """(VLAN, port) where a NIC's frames enter the fabric, or why they do not."""
    if nic.peer is None:
        return "not cabled"
    port = model.port(nic.peer)
    if port.shutdown:
        return f"its port {port.id} is shut down"
    vlan = model.nic_vlan(nic)
    if nic.vlan is not None:
        if not port.vlan.carries(nic.vlan, True):
            return (f"it tags its frames with VLAN {nic.vlan} but port {port.id} carries "
                    f"{port.vlan.describe()}")
    elif vlan is None:
        return f"it sends untagged frames but port {port.id} has no untagged VLAN ({port.vlan.describe()})"
    assert vlan is not None
    return vlan, port


def analyse(model: FabricModel) -> Topology:
    topo = Topology()
    vlans: set[int] = set()
    for p in model.ports():
        vlans |= p.vlan.tagged
        if p.vlan.untagged is not None:
            vlans.add(p.vlan.untagged)
    attached: dict[int, list[tuple[HostNic, Port]]] = {}
    for nic in model.nics:
        att = nic_attachment(model, nic)
        if isinstance(att, str):
            topo.detached[nic.ref] = att
        else:
            attached.setdefault(att[0], []).append((nic, att[1]))

    for vlan in sorted(vlans):
        members = attached.get(vlan, [])
        # switch graph of this VLAN
        adjacency: dict[str, list[tuple[str, Port, Port, Link]]] = {}
        for link in model.links:
            if not (isinstance(link.a, PortRef) and isinstance(link.b, PortRef)):
                continue
            pa, pb = model.port(link.a), model.port(link.b)
            if pa.vlan.carries(vlan, vlan in pa.vlan.tagged) and pb.vlan.carries(vlan, vlan in pb.vlan.tagged) \
                    and not pa.shutdown and not pb.shutdown:
                adjacency.setdefault(pa.switch, []).append((pb.switch, pa, pb, link))
                adjacency.setdefault(pb.switch, []).append((pa.switch, pb, pa, link))
        if not members and not adjacency:
            continue
        # BFS forest, loops, components
        parent: dict[str, tuple[str, Port, Port] | None] = {}
        depth: dict[str, int] = {}
        component: dict[str, int] = {}
        starts = sorted({port.switch for _, port in members} | set(adjacency))
        used_links: set[int] = set()
        comp_switches: list[set[str]] = []
        for start in starts:
            if start in parent:
                continue
            cid = len(comp_switches)
            comp_switches.append({start})
            parent[start], depth[start], component[start] = None, 0, cid
            queue = deque([start])
            while queue:
                sw = queue.popleft()
                for other, here_port, there_port, link in adjacency.get(sw, []):
                    if id(link) in used_links:
                        continue
                    used_links.add(id(link))
                    if other in parent:
                        topo.loops.append(Loop(vlan, _cycle(parent, sw, other), link))
                        continue
                    parent[other] = (sw, here_port, there_port)
                    depth[other] = depth[sw] + 1
                    component[other] = cid
                    comp_switches[cid].add(other)
                    queue.append(other)
        by_comp: dict[int, list[tuple[HostNic, Port]]] = {}
        for nic, port in members:
            by_comp.setdefault(component[port.switch], []).append((nic, port))
        for cid, nics in sorted(by_comp.items()):
            seg_index = len(topo.segments)
            topo.segments.append(Segment(vlan, frozenset(comp_switches[cid]), tuple(n.ref for n, _ in nics),
                                         tuple(p for _, p in nics), tuple(n.mtu for n, _ in nics), parent, depth))
            for nic, _ in nics:
                topo.segment_of[nic.ref] = (vlan, seg_index)
    return topo


def _ancestors(parent: _Parent, sw: str) -> list[str]:
    out = [sw]
    while (step := parent[out[-1]]) is not None:
        out.append(step[0])
    return out


def _cycle(parent: _Parent, a: str, b: str) -> tuple[str, ...]:
    """The loop closed by a link between ``a`` and ``b``, two switches already in one BFS tree."""
    up_a, up_b = _ancestors(parent, a), _ancestors(parent, b)
    on_b = set(up_b)
    common = next(x for x in up_a if x in on_b)
    left = up_a[: up_a.index(common) + 1]
    right = up_b[: up_b.index(common)]
    return (*left, *reversed(right), a)


def _switch_path(parent: _Parent, depth: dict[str, int], src: str, dst: str) -> list[Port]:
    """Ports crossed between two switches of one tree: egress of each switch, ingress of the next."""
    up: list[tuple[Port, Port]] = []    # from src upwards: (egress at child, ingress at parent)
    down: list[tuple[Port, Port]] = []  # from dst upwards, reversed later
    a, b = src, dst
    while a != b:
        if depth[a] >= depth[b]:
            step = parent[a]
            assert step is not None
            up_sw, parent_port, child_port = step
            up.append((child_port, parent_port))
            a = up_sw
        else:
            step = parent[b]
            assert step is not None
            up_sw, parent_port, child_port = step
            down.append((parent_port, child_port))
            b = up_sw
    out: list[Port] = []
    for egress, ingress in up:
        out += [egress, ingress]
    for egress, ingress in reversed(down):
        out += [egress, ingress]
    return out
