"""The resolved fabric: every port and NIC with its effective MTU, VLANs and QoS, and the cables between them.

:func:`resolve` turns a validated :class:`~fakehw.fabric.spec.FabricConfigSpec` plus the hardware profile it names
into an immutable :class:`FabricModel`. Inheritance (port > switch > defaults, profile NIC settings < ``hosts``)
is applied here once, and every effective value remembers which line of the document set it, so a finding about
"the MTU of leaf-rail3/p1" points at the line that made it 1500.

Cross-reference mistakes (a cable to a NIC that does not exist, a NIC cabled twice) are :class:`FabricError`:
the config cannot be analysed at all. Legal but wrong settings are left for the linter.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Network
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from fakehw.fabric.loader import FabricError, LoadedFabric, load_fabric_spec
from fakehw.fabric.spec import EcnSpec, FabricConfigSpec, HostSpec, PfcWatchdogSpec, PortVlanSpec, QosSpec
from fakehw.model import ProfileError, System, load_profile
from fakehw.model.errors import PathItem, Problem
from fakehw.model.system import Nic, Roce

DocPath = tuple[PathItem, ...]
Trust = Literal["dscp", "pcp"]

# --------------------------------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class Ecn:
    enabled: bool
    priorities: frozenset[int]
    min_kb: float
    max_kb: float
    probability: int

    def marks(self, priority: int) -> bool:
        return self.enabled and priority in self.priorities


@dataclass(frozen=True, slots=True)
class PfcWatchdog:
    """A port's PFC watchdog (see FAB-PFC-003)."""

    enabled: bool
    action: str
    detection_ms: int
    restoration_ms: int | None


@dataclass(frozen=True, slots=True)
class Qos:
    """Effective classification and lossless settings of one switch port."""

    trust: Trust
    dscp_to_priority: tuple[tuple[int, int], ...]
    default_priority: int
    pfc_priorities: frozenset[int]
    ecn: Ecn | None
    cnp_priority: int | None
    pcp_to_priority: tuple[tuple[int, int], ...] = ()
    headroom: frozenset[int] | None = None
    """Priorities with a lossless ingress buffer reserved; None: the config does not say."""
    watchdog: PfcWatchdog | None = None
    """The port's PFC watchdog; None: the config does not say."""

    def classify(self, dscp: int, pcp: int | None) -> int:
        """The switch priority of a frame with this DSCP and (when tagged) PCP."""
        if self.trust == "pcp":
            return self.default_priority if pcp is None else dict(self.pcp_to_priority).get(pcp, pcp)
        return dict(self.dscp_to_priority).get(dscp, self.default_priority)

    def marks_ecn(self, priority: int) -> bool:
        return self.ecn is not None and self.ecn.marks(priority)


@dataclass(frozen=True, slots=True)
class VlanMembership:
    untagged: int | None
    tagged: frozenset[int]

    def carries(self, vid: int, tagged: bool) -> bool:
        return vid in self.tagged if tagged else self.untagged == vid

    def describe(self) -> str:
        parts = []
        if self.untagged is not None:
            parts.append(f"untagged {self.untagged}")
        if self.tagged:
            parts.append("tagged " + ",".join(str(v) for v in sorted(self.tagged)))
        return "; ".join(parts) or "no VLAN"


@dataclass(frozen=True, slots=True, order=True)
class PortRef:
    switch: str
    port: str

    @property
    def id(self) -> str:
        return f"{self.switch}/{self.port}"

    def __str__(self) -> str:
        return self.id


@dataclass(frozen=True, slots=True, order=True)
class NicRef:
    node: str
    nic: str

    @property
    def id(self) -> str:
        return f"{self.node}/{self.nic}"

    def __str__(self) -> str:
        return self.id


Ref = PortRef | NicRef


@dataclass(frozen=True, slots=True)
class Port:
    switch: str
    name: str
    index: int
    mtu: int
    vlan: VlanMembership
    qos: Qos
    peer: Ref | None
    shutdown: bool
    doc: DocPath
    origins: Mapping[str, DocPath] = field(compare=False)
    """Where each effective setting came from (``mtu``, ``vlan``, ``qos.<key>``)."""

    @property
    def ref(self) -> PortRef:
        return PortRef(self.switch, self.name)

    @property
    def id(self) -> str:
        return f"{self.switch}/{self.name}"

    def origin(self, key: str) -> DocPath:
        return self.origins.get(key, self.doc)


@dataclass(frozen=True, slots=True)
class Switch:
    name: str
    role: str
    rail: int | None
    ports: tuple[Port, ...]
    doc: DocPath

    def port(self, name: str) -> Port | None:
        return next((p for p in self.ports if p.name == name), None)


@dataclass(frozen=True, slots=True)
class HostNic:
    """A NIC of the profile as the fabric sees it: its effective MTU, VLAN tagging and RoCE settings."""

    node: str
    nic: Nic
    mtu: int
    vlan: int | None
    """VLAN the NIC tags RoCE frames with; None sends untagged (the frames join the port's untagged VLAN)."""
    roce: Roce
    peer: PortRef | None
    origins: Mapping[str, DocPath] = field(compare=False)
    """Lines of ``hosts`` entries that changed a setting; settings from the profile are not listed."""

    @property
    def ref(self) -> NicRef:
        return NicRef(self.node, self.nic.name)

    @property
    def id(self) -> str:
        return f"{self.node}/{self.nic.name}"

    @property
    def rail(self) -> int | None:
        return self.nic.rail


@dataclass(frozen=True, slots=True)
class Link:
    a: Ref
    b: Ref
    doc: DocPath


@dataclass(frozen=True, slots=True)
class Vlan:
    id: int
    name: str | None
    rail: int | None
    subnet: IPv4Network


@dataclass(frozen=True, slots=True)
class TrafficClass:
    name: str
    dscp: int
    pcp: int | None


@dataclass(frozen=True)
class FabricModel:
    name: str
    description: str
    loaded: LoadedFabric
    system: System
    switches: tuple[Switch, ...]
    nics: tuple[HostNic, ...]
    links: tuple[Link, ...]
    vlans: Mapping[int, Vlan]
    traffic: tuple[TrafficClass, ...]
    _ports: Mapping[PortRef, Port] = field(repr=False, compare=False)
    _nics: Mapping[NicRef, HostNic] = field(repr=False, compare=False)
    _switches: Mapping[str, Switch] = field(repr=False, compare=False, default_factory=dict)

    @property
    def source(self) -> str:
        return self.loaded.source

    def port(self, ref: PortRef) -> Port:
        return self._ports[ref]

    def host_nic(self, ref: NicRef) -> HostNic:
        return self._nics[ref]

    def switch(self, name: str) -> Switch | None:
        return self._switches.get(name)

    def ports(self) -> Iterator[Port]:
        for s in self.switches:
            yield from s.ports

    def vlan(self, vid: int) -> Vlan:
        """The declared VLAN, or one with a derived subnet when the config only uses the ID."""
        return self.vlans.get(vid) or Vlan(vid, None, None, default_subnet(vid))

    def locate(self, path: DocPath) -> tuple[str, int | None]:
        return self.loaded.locate(path)

    def nic_vlan(self, nic: HostNic) -> int | None:
        """The VLAN a NIC's frames travel in: its tag, or its port's untagged VLAN (None if it has neither)."""
        if nic.vlan is not None:
            return nic.vlan
        if nic.peer is None:
            return None
        return self.port(nic.peer).vlan.untagged


def default_subnet(vid: int) -> IPv4Network:
    """10.<vid/256>.<vid%256>.0/24: one /24 per VLAN ID, never overlapping."""
    return IPv4Network(f"10.{vid >> 8}.{vid & 0xFF}.0/24")


# --------------------------------------------------------------------------------------------------- resolve

_QOS_KEYS = {
    "trust": "trust",
    "dscp_to_priority": "dscpToPriority",
    "default_priority": "defaultPriority",
    "pfc_priorities": "pfcPriorities",
    "ecn": "ecn",
    "cnp_priority": "cnpPriority",
    "pcp_to_priority": "pcpToPriority",
    "headroom": "headroom",
    "pfc_watchdog": "pfcWatchdog",
}
_WATCHDOG_KEYS = ("enabled", "action", "detectionMs", "restorationMs")


def _merge_qos(layers: Sequence[tuple[QosSpec | None, DocPath]], fallback: DocPath) -> tuple[Qos, dict[str, DocPath]]:
    values: dict[str, Any] = {
        "trust": "dscp", "dscp_to_priority": {}, "default_priority": 0, "pfc_priorities": [], "ecn": None,
        "cnp_priority": None, "pcp_to_priority": {}, "headroom": None, "pfc_watchdog": None,
    }
    origins: dict[str, DocPath] = {f"qos.{alias}": fallback for alias in _QOS_KEYS.values()}
    origins.update({f"qos.pfcWatchdog.{sub}": fallback for sub in _WATCHDOG_KEYS})
    for spec, where in layers:
        if spec is None:
            continue
        for key in spec.model_fields_set:
            values[key] = getattr(spec, key)
            origins[f"qos.{_QOS_KEYS[key]}"] = (*where, _QOS_KEYS[key])
            if key == "pfc_watchdog":
                for sub in _WATCHDOG_KEYS:
                    origins[f"qos.pfcWatchdog.{sub}"] = (*where, "pfcWatchdog", sub)
    ecn_spec: EcnSpec | None = values["ecn"]
    ecn = None if ecn_spec is None else Ecn(
        ecn_spec.enabled, frozenset(ecn_spec.priorities), ecn_spec.min_kb, ecn_spec.max_kb, ecn_spec.probability
    )
    qos = Qos(
        trust=values["trust"] or "dscp",
        dscp_to_priority=tuple(sorted(dict(values["dscp_to_priority"] or {}).items())),
        default_priority=0 if values["default_priority"] is None else values["default_priority"],
        pfc_priorities=frozenset(values["pfc_priorities"] or ()),
        ecn=ecn,
        cnp_priority=values["cnp_priority"],
        pcp_to_priority=tuple(sorted(dict(values["pcp_to_priority"] or {}).items())),
        headroom=None if values["headroom"] is None else frozenset(values["headroom"]),
        watchdog=_watchdog(values["pfc_watchdog"]),
    )
    return qos, origins


def _watchdog(spec: PfcWatchdogSpec | None) -> PfcWatchdog | None:
    if spec is None:
        return None
    return PfcWatchdog(spec.enabled, spec.action, spec.detection_ms, spec.restoration_ms)


def _membership(spec: PortVlanSpec) -> VlanMembership:
    return VlanMembership(spec.untagged, frozenset(spec.tagged))


def _load_system(spec: FabricConfigSpec, loaded: LoadedFabric) -> System:
    base = Path(loaded.source)
    ref: str | Path = spec.profile
    if spec.profile.endswith((".yaml", ".yml")):
        candidate = base.parent / spec.profile
        ref = candidate if candidate.is_file() else Path(spec.profile)
    try:
        return load_profile(ref, nodes=spec.nodes)
    except ProfileError as exc:
        lines = "; ".join(str(p) for p in exc.problems[:3])
        raise FabricError([loaded.problem(("profile",), f"hardware profile {spec.profile!r} cannot be used: "
                                                        f"{lines}")]) from None


def resolve(loaded: LoadedFabric) -> FabricModel:
    """The effective fabric of a validated config. Raises :class:`FabricError` for broken cross-references
    (every one found, not only the first)."""
    spec = loaded.spec
    r = _Resolution(loaded, _load_system(spec, loaded))
    r.check_switch_names()
    peers, links = r.cabling()
    switches, ports = r.switches(peers)
    host_nics = r.host_nics(peers, ports)
    if r.problems:
        raise FabricError(r.problems)
    vlans = {v.id: Vlan(v.id, v.name, v.rail, v.subnet or default_subnet(v.id)) for v in spec.vlans}
    traffic = tuple(TrafficClass(t.name, t.dscp, t.pcp) for t in spec.traffic)
    return FabricModel(
        name=spec.name,
        description=spec.description,
        loaded=loaded,
        system=r.system,
        switches=tuple(switches),
        nics=tuple(host_nics),
        links=tuple(links),
        vlans=MappingProxyType(vlans),
        traffic=traffic,
        _ports=MappingProxyType(ports),
        _nics=MappingProxyType({n.ref: n for n in host_nics}),
        _switches=MappingProxyType({s.name: s for s in switches}),
    )


Peers = dict["Ref", tuple["Ref", DocPath]]
"""Each cabled end and what it is cabled to, with where the config said so."""


@dataclass
class _Resolution:
    """One :func:`resolve` in progress: the config, the profile's machines and the problems found so far."""

    loaded: LoadedFabric
    system: System
    problems: list[Problem] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.spec = self.loaded.spec
        self.nodes = {n.name: n for n in self.system.nodes}
        self.switch_names = {s.name for s in self.spec.switches}

    def problem(self, path: DocPath, message: str) -> None:
        self.problems.append(self.loaded.problem(path, message))

    def check_switch_names(self) -> None:
        for name in sorted(self.switch_names & set(self.nodes)):
            i = next(i for i, s in enumerate(self.spec.switches) if s.name == name)
            self.problem(("switches", i, "name"), f"switch {name!r} has the name of a node of profile "
                                                  f"{self.system.name}")

    def endpoint(self, text: str, where: DocPath) -> Ref | None:
        """The port or NIC a ``connect`` names (None, with a problem, when it names none of this fabric)."""
        owner, _, item = text.partition("/")
        if owner in self.switch_names:
            sw = next(s for s in self.spec.switches if s.name == owner)
            if not any(p.name == item for p in sw.ports):
                names = ", ".join(p.name for p in sw.ports[:12]) + (" ..." if len(sw.ports) > 12 else "")
                self.problem(where, f"switch {owner} has no port {item!r} (ports: {names})")
                return None
            return PortRef(owner, item)
        node = self.nodes.get(owner)
        if node is not None:
            nic = next((n for n in node.nics if item in (n.name, n.netdev)), None)
            if nic is None:
                names = ", ".join(n.name for n in node.nics) or "none"
                self.problem(where, f"node {owner} has no NIC {item!r} (NICs: {names})")
                return None
            if nic.link_layer != "ethernet":
                self.problem(where, f"{owner}/{nic.name} is an InfiniBand port; a RoCE fabric cables Ethernet ports "
                             f"(use a profile whose ports run Ethernet, such as dgx-h100-roce for dgx-h100)")
                return None
            return NicRef(owner, nic.name)
        shown = sorted(self.nodes)
        node_list = ", ".join(shown[:4]) + (f" ... {shown[-1]}" if len(shown) > 4 else "")
        self.problem(where, f"{owner!r} is neither a switch of this config nor a node of profile {self.system.name} "
                            f"(nodes: {node_list})")
        return None

    def cabling(self) -> tuple[Peers, list[Link]]:
        """Every cable the switches' ports declare, each once (a cable may be declared from both ends)."""
        peers: Peers = {}
        links: list[Link] = []
        for si, sw in enumerate(self.spec.switches):
            for pi, port in enumerate(sw.ports):
                if port.connect is None:
                    continue
                where: DocPath = ("switches", si, "ports", pi, "connect")
                here = PortRef(sw.name, port.name)
                there = self.endpoint(port.connect, where)
                if there is None:
                    continue
                if there == here:
                    self.problem(where, f"port {here} is cabled to itself")
                    continue
                if isinstance(there, PortRef) and there in peers and peers[there][0] == here:
                    continue  # the other end already declared this cable
                for end, other in ((here, there), (there, here)):
                    if end in peers and peers[end][0] != other:
                        first = self.loaded.origin(peers[end][1])
                        said = str(first) if first is not None else f"line {self.loaded.locate(peers[end][1])[1]}"
                        self.problem(where, f"{end} is already cabled to {peers[end][0]} ({said})")
                        break
                else:
                    peers[here] = (there, where)
                    peers[there] = (here, where)
                    links.append(Link(here, there, where))
        return peers, links

    def switches(self, peers: Peers) -> tuple[list[Switch], dict[PortRef, Port]]:
        """Every switch with its ports' effective settings (port, else switch, else the defaults)."""
        switches: list[Switch] = []
        ports: dict[PortRef, Port] = {}
        for si, sw in enumerate(self.spec.switches):
            built: list[Port] = []
            for pi, port in enumerate(sw.ports):
                p = self._port(si, pi, peers)
                built.append(p)
                ports[PortRef(sw.name, port.name)] = p
            switches.append(Switch(sw.name, sw.role, sw.rail, tuple(built), ("switches", si)))
        return switches, ports

    def _port(self, si: int, pi: int, peers: Peers) -> Port:
        defaults, sw = self.spec.defaults, self.spec.switches[si]
        port = sw.ports[pi]
        pdoc: DocPath = ("switches", si, "ports", pi)
        origins: dict[str, DocPath] = {}
        if port.mtu is not None:
            mtu, origins["mtu"] = port.mtu, (*pdoc, "mtu")
        elif sw.mtu is not None:
            mtu, origins["mtu"] = sw.mtu, ("switches", si, "mtu")
        else:
            mtu, origins["mtu"] = defaults.mtu, ("defaults", "mtu")
        if port.vlan is not None:
            member, origins["vlan"] = _membership(port.vlan), (*pdoc, "vlan")
        elif sw.vlan is not None:
            member, origins["vlan"] = _membership(sw.vlan), ("switches", si, "vlan")
        elif defaults.vlan is not None:
            member, origins["vlan"] = _membership(defaults.vlan), ("defaults", "vlan")
        else:
            member, origins["vlan"] = VlanMembership(1, frozenset()), pdoc
        qos, qos_origins = _merge_qos(
            [(defaults.qos, ("defaults", "qos")), (sw.qos, ("switches", si, "qos")), (port.qos, (*pdoc, "qos"))],
            ("switches", si),
        )
        origins.update(qos_origins)
        peer = peers.get(PortRef(sw.name, port.name))
        return Port(sw.name, port.name, pi, mtu, member, qos, peer[0] if peer else None, port.shutdown, pdoc,
                    MappingProxyType(origins))

    def host_nics(self, peers: Peers, ports: Mapping[PortRef, Port]) -> list[HostNic]:
        """The fabric's NICs with the ``hosts`` overrides applied; a pattern that matches nothing is a problem."""
        used_patterns: set[str] = set()
        host_nics: list[HostNic] = []
        for node in self.system.nodes:
            for nic in node.nics:
                nref = NicRef(node.name, nic.name)
                if nic.link_layer != "ethernet" or (nic.rail is None and nref not in peers):
                    continue  # InfiniBand ports, and Ethernet ports of other networks (in-band, storage), are not in it
                applied = [(pattern, hspec) for pattern, hspec in self.spec.hosts.items()
                           if _matches(pattern, node.name, nic)]
                used_patterns.update(pattern for pattern, _ in applied)
                host_nics.append(self._host_nic(node.name, nic, applied, peers, ports))
        for pattern in self.spec.hosts:
            if pattern not in used_patterns:
                self.problem(("hosts", pattern), f"hosts pattern {pattern!r} matches no NIC of profile "
                                                 f"{self.system.name}")
        return host_nics

    def _host_nic(self, node: str, nic: Nic, applied: list[tuple[str, HostSpec]], peers: Peers,
                  ports: Mapping[PortRef, Port]) -> HostNic:
        nref = NicRef(node, nic.name)
        mtu, roce = nic.mtu, nic.roce
        vlan_choice: int | Literal["untagged"] | None = None
        origins: dict[str, DocPath] = {}
        for pattern, hspec in applied:
            hdoc: DocPath = ("hosts", pattern)
            if hspec.mtu is not None:
                mtu, origins["mtu"] = hspec.mtu, (*hdoc, "mtu")
            if hspec.vlan is not None:
                vlan_choice, origins["vlan"] = hspec.vlan, (*hdoc, "vlan")
            if hspec.roce is not None:
                changes = {k: getattr(hspec.roce, k) for k in hspec.roce.model_fields_set}
                if "pfc_priorities" in changes:
                    changes["pfc_priorities"] = tuple(changes["pfc_priorities"] or ())
                roce = _replace_roce(roce, changes)
                for k in changes:
                    origins[f"roce.{k}"] = (*hdoc, "roce", _ROCE_KEYS.get(k, k))
        peer_ref = peers.get(nref)
        peer_port = ports.get(peer_ref[0]) if peer_ref and isinstance(peer_ref[0], PortRef) else None
        vlan: int | None = None
        if isinstance(vlan_choice, int):
            vlan = vlan_choice
        elif vlan_choice is None and peer_port is not None and peer_port.vlan.untagged is None:
            tagged = peer_port.vlan.tagged
            if len(tagged) == 1:
                vlan = next(iter(tagged))
            elif len(tagged) > 1:
                self.problem((*peer_port.doc, "vlan"), f"port {peer_port.id} trunks several VLANs; say which one "
                             f"{nref} uses with hosts: {{\"{nref}\": {{vlan: <id>}}}}")
        return HostNic(node, nic, mtu, vlan, roce, peer_port.ref if peer_port is not None else None,
                       MappingProxyType(origins))


def _matches(pattern: str, node: str, nic: Nic) -> bool:
    """A ``hosts`` key ``node-glob/nic-glob`` names this NIC (by its name or its netdev)."""
    npat, _, cpat = pattern.partition("/")
    return fnmatch.fnmatchcase(node, npat) and (fnmatch.fnmatchcase(nic.name, cpat) or
                                                fnmatch.fnmatchcase(nic.netdev, cpat))


_ROCE_KEYS = {"pfc_priorities": "pfcPriorities", "cnp_dscp": "cnpDscp", "cnp_priority": "cnpPriority"}


def _replace_roce(roce: Roce, changes: Mapping[str, Any]) -> Roce:
    return dataclasses.replace(roce, **{k: v for k, v in changes.items() if v is not None})


def load_fabric(ref: str | Path, text: str | None = None) -> FabricModel:
    """Load, validate and resolve a fabric config: a built-in name, a file, ``text`` named ``ref``, or an import
    of operator configs, ``sonic:DIR`` / ``nvue:DIR`` (see :mod:`fakehw.fabric.importers`)."""
    if text is None and isinstance(ref, str):
        from fakehw.fabric.importers import is_import_ref, load_ref

        if is_import_ref(ref):
            return resolve(load_ref(ref))
    return resolve(load_fabric_spec(ref, text))
