"""Static conformance of a fabric config: findings with requirement IDs, and the RoCE path MTU of every path.

Each rule of :data:`fakehw.fabric.requirements.REQUIREMENTS` of kind ``static`` is checked here. A setting that
is wrong on many ports (a switch-wide QoS block, a ``defaults`` entry, one SONiC DSCP map) gives one finding at the
place that set it, with the number of ports and paths it affects, not one finding per port. When a hop already
misclassifies RoCE (FAB-QOS-001/002), the priority-dependent rules (PFC, ECN, CNP) are not repeated for that hop:
the finding names the cause, not its echoes.

Scale: every pair of NICs in a layer-2 segment is a RoCE path, so a rail of n NICs has n(n-1)/2 of them (a million
at 512 DGX nodes). The path rules only see values - MTUs, QoS, tagging - never names, so NICs that enter the
segment on the same switch with the same settings (on ports with the same settings) are one *class*: the rules run
once per pair of classes on a representative path, and what they find is spread back over the class members with
exact port, NIC and path counts. A healthy rail-optimised fabric is one class per rail; the work is linear in the
NICs. ``lint(model, exhaustive=True)`` puts every NIC in its own class - the plain all-pairs linter, kept as the
oracle the class-based one is tested against and as the benchmark's baseline.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from math import comb
from types import MappingProxyType
from typing import Any

from fakehw.fabric.analysis import Path, Segment, Topology, analyse, max_send_payload, roce_mtu
from fakehw.fabric.loader import SourceKey
from fakehw.fabric.model import DocPath, FabricModel, HostNic, NicRef, Port
from fakehw.fabric.requirements import REQUIREMENTS, Severity
from fakehw.model.errors import format_path


@dataclass(frozen=True, slots=True)
class Finding:
    id: str
    severity: Severity
    element: str
    message: str
    source: str
    line: int | None
    doc_path: DocPath
    ports: int
    """How many ports or NICs share this finding (a switch-wide setting counts every port it reaches)."""
    paths: int
    example: str | None
    """One RoCE path the finding affects."""
    key: str | None = None
    """The operator's key that set the value (imported configs: ``PORT|Ethernet8.mtu``)."""

    @property
    def location(self) -> str:
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        return f"{where}: {self.key}" if self.key is not None else where

    def __str__(self) -> str:
        scope = []
        if self.ports > 1:
            scope.append(f"{self.ports} ports/NICs")
        if self.paths:
            scope.append(f"{self.paths} path(s), e.g. {self.example}")
        tail = f" [{'; '.join(scope)}]" if scope else ""
        return f"{self.location}: {self.severity.value} {self.id}: {self.element}: {self.message}{tail}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "severity": self.severity.value, "title": REQUIREMENTS[self.id].title,
            "element": self.element, "message": self.message, "source": self.source, "line": self.line,
            "key": self.key, "path": format_path(self.doc_path), "ports": self.ports, "paths": self.paths,
            "example": self.example,
        }


# --------------------------------------------------------------------------------------------------- classes


@dataclass(frozen=True)
class PathClass:
    """RoCE paths the rules cannot tell apart: every path from a NIC of class ``a`` to one of class ``b`` in one
    segment (``a`` is ``b`` for the paths within one class). Members are indices into ``segment.nics``."""

    index: int
    segment: Segment
    a: tuple[int, ...]
    b: tuple[int, ...]

    @property
    def same(self) -> bool:
        return self.a is self.b

    @property
    def count(self) -> int:
        return comb(len(self.a), 2) if self.same else len(self.a) * len(self.b)

    def rep(self) -> Path:
        """The path the rules are run on: the first member of each class."""
        return self.segment.path(self.a[0], self.a[1] if self.same else self.b[0])

    def example(self, i: int, j: int) -> str:
        """The id of the path between the segment's NICs ``i`` and ``j`` (in segment order, like :class:`Path`)."""
        nics = self.segment.nics
        return f"{nics[min(i, j)]} <-> {nics[max(i, j)]}"


def _signature(model: FabricModel, nic: HostNic, port: Port) -> tuple[Any, ...]:
    """Everything the path rules read about a path's end: the NIC's and its port's values, and the switch."""
    return (port.switch, nic.mtu, nic.vlan, nic.roce, port.mtu, port.qos, port.vlan)


def path_classes(model: FabricModel, topo: Topology, *, exhaustive: bool = False) -> list[PathClass]:
    """The path classes of every segment (one per pair of NIC classes that has a path)."""
    out: list[PathClass] = []
    for seg in topo.segments:
        groups: dict[Any, list[int]] = {}
        for i, (ref, port) in enumerate(zip(seg.nics, seg.access, strict=True)):
            key: Any = i if exhaustive else _signature(model, model.host_nic(ref), port)
            groups.setdefault(key, []).append(i)
        classes = [tuple(g) for g in groups.values()]
        for x, ca in enumerate(classes):
            if len(ca) > 1:
                out.append(PathClass(len(out), seg, ca, ca))
            for cb in classes[x + 1:]:
                out.append(PathClass(len(out), seg, ca, cb))
    return out


# --------------------------------------------------------------------------------------------------- collector


@dataclass
class _Hit:
    """Which members of one path class a finding reaches: positions in ``PathClass.a`` / ``.b``, or an inner
    port (then every path of the class)."""

    a: set[int] = field(default_factory=set)
    b: set[int] = field(default_factory=set)
    inner: bool = False

    def count(self, pc: PathClass) -> int:
        if self.inner:
            return pc.count
        if pc.same:
            n, hit = len(pc.a), len(self.a | self.b)
            return comb(n, 2) - comb(n - hit, 2)
        return pc.count - (len(pc.a) - len(self.a)) * (len(pc.b) - len(self.b))

    def example(self, pc: PathClass) -> str:
        if self.inner or (self.a and self.b and not pc.same):
            return pc.rep().id
        if pc.same:
            x = min(self.a | self.b)
            return pc.example(pc.a[x], pc.a[1 if x == 0 else 0])
        if self.a:
            return pc.example(pc.a[min(self.a)], pc.b[0])
        return pc.example(pc.a[0], pc.b[min(self.b)])


@dataclass
class _Pending:
    id: str
    severity: Severity
    message: str
    doc_path: DocPath
    elements: set[str] = field(default_factory=set)
    members: set[str] = field(default_factory=set)
    hits: dict[int, _Hit] = field(default_factory=dict)
    counted: int = 0
    examples: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class _Scope:
    pc: PathClass
    a: NicRef
    b: NicRef
    a_port: Port
    b_port: Port


Counted = tuple[int, str]
"""(paths, example) for a finding whose paths are counted by its rule instead of by path classes."""


class _Collector:
    """Gathers findings, merging those with the same rule, origin and message. The origin is where the offending
    value was written: a document path, or for imported configs the operator's file and key (so one SONiC map
    used by every port is one finding). Inside :meth:`scope` a finding about the representative path's NICs or
    access ports is spread over every member of their class."""

    def __init__(self, model: FabricModel, classes: Sequence[PathClass]) -> None:
        self.model = model
        self.classes = classes
        self.items: dict[tuple[str, Any, str], _Pending] = {}
        self._scope: _Scope | None = None
        self._where: dict[DocPath, Any] = {}

    def scope(self, pc: PathClass, path: Path) -> None:
        """Findings from now on come from the representative ``path`` of ``pc`` (None: leave path mode)."""
        self._scope = _Scope(pc, path.a, path.b, self.model.port(path.ports[0]), self.model.port(path.ports[-1]))

    def unscope(self) -> None:
        self._scope = None

    def _located(self, origin: DocPath) -> Any:
        where = self._where.get(origin)
        if where is None:
            found: SourceKey | None = self.model.loaded.origin(origin)
            where = (found.source, found.key) if found is not None else origin
            self._where[origin] = where
        return where

    def _record(self, req: str, origin: DocPath | None, member: str, message: str, *, element: str,
                doc_path: DocPath, severity: Severity | None, hit: tuple[int, str, int] | None,
                counted: Counted | None) -> None:
        key = (req, self._located(origin) if origin is not None else element, message)
        item = self.items.get(key)
        if item is None:
            item = _Pending(req, severity or REQUIREMENTS[req].severity, message,
                            origin if origin is not None else doc_path)
            self.items[key] = item
        item.elements.add(element)
        item.members.add(member)
        if hit is not None:
            index, role, position = hit
            h = item.hits.setdefault(index, _Hit())
            if role == "a":
                h.a.add(position)
            elif role == "b":
                h.b.add(position)
            else:
                h.inner = True
        if counted is not None:
            item.counted += counted[0]
            item.examples.add(counted[1])

    def add(self, req: str, origin: DocPath | None, member: str, message: str, *, element: str,
            doc_path: DocPath | None = None, severity: Severity | None = None) -> None:
        """One occurrence outside any path: ``origin`` is where the offending setting was written (None: the
        hardware profile; ``element`` names the thing, each check knows it, and ``doc_path`` is where to point)."""
        self._record(req, origin, member, message, element=element, doc_path=doc_path or (), severity=severity,
                     hit=None, counted=None)

    def _nics(self, nic: HostNic) -> Iterator[tuple[HostNic, tuple[int, str, int] | None]]:
        sc = self._scope
        if sc is None or nic.ref not in (sc.a, sc.b):
            yield nic, None
            return
        role, members = ("a", sc.pc.a) if nic.ref == sc.a else ("b", sc.pc.b)
        nics = sc.pc.segment.nics
        for pos, i in enumerate(members):
            yield self.model.host_nic(nics[i]), (sc.pc.index, role, pos)

    def _ports(self, port: Port) -> Iterator[tuple[Port, tuple[int, str, int] | None]]:
        sc = self._scope
        if sc is None:
            yield port, None
            return
        if port is not sc.a_port and port is not sc.b_port:
            yield port, (sc.pc.index, "inner", 0)
            return
        role, members = ("a", sc.pc.a) if port is sc.a_port else ("b", sc.pc.b)
        access = sc.pc.segment.access
        for pos, i in enumerate(members):
            yield access[i], (sc.pc.index, role, pos)

    def nic(self, req: str, nic: HostNic, keys: Sequence[str], message: str, *, severity: Severity | None = None,
            element: str | None = None, counted: Counted | None = None) -> None:
        """A NIC's setting is wrong (``keys``: which of its origins to blame, in order)."""
        for each, hit in self._nics(nic):
            self._record(req, _nic_origin(each, *keys), each.id, message, element=element or each.id,
                         doc_path=_nic_doc(self.model, each), severity=severity, hit=hit, counted=counted)

    def port(self, req: str, port: Port, key: str, message: str, *, severity: Severity | None = None) -> None:
        """A switch port's setting ``key`` (``mtu``, ``qos.trust``...) is wrong."""
        for each, hit in self._ports(port):
            origin = each.origin(key)
            self._record(req, origin, each.id, message, element=_describe(self.model, origin), doc_path=origin,
                         severity=severity, hit=hit, counted=None)

    def findings(self) -> list[Finding]:
        out = []
        loaded = self.model.loaded
        for item in self.items.values():
            source, line = loaded.locate(item.doc_path) if item.doc_path else (self.model.source, None)
            paths = item.counted
            examples = set(item.examples)
            for index, hit in item.hits.items():
                pc = self.classes[index]
                paths += hit.count(pc)
                examples.add(hit.example(pc))
            out.append(Finding(item.id, item.severity, min(item.elements), item.message, source, line, item.doc_path,
                               len(item.members), paths, min(examples) if examples else None,
                               loaded.key(item.doc_path) if item.doc_path else None))
        out.sort(key=lambda f: (f.severity.rank, f.id, f.source, f.line or 0, f.key or "", f.element, f.message))
        return out


def _describe(model: FabricModel, path: DocPath) -> str:
    """Name the config element a document path belongs to (``leaf0/p3``, ``leaf0``, ``defaults``, ...)."""
    spec = model.loaded.spec
    if len(path) >= 2 and path[0] == "switches" and isinstance(path[1], int) and path[1] < len(spec.switches):
        sw = spec.switches[path[1]]
        if len(path) >= 4 and path[2] == "ports" and isinstance(path[3], int) and path[3] < len(sw.ports):
            return f"{sw.name}/{sw.ports[path[3]].name}"
        return sw.name
    if len(path) >= 2 and path[0] == "hosts":
        return f"hosts[{path[1]}]"
    if path and path[0] == "defaults":
        return "defaults"
    return format_path(path)


# --------------------------------------------------------------------------------------------------- report


@dataclass(frozen=True)
class LintReport:
    model: FabricModel
    topology: Topology
    findings: tuple[Finding, ...]
    classes: tuple[PathClass, ...] = ()
    not_applicable: Mapping[str, str] = field(default_factory=dict)
    """Requirements the config gives nothing to check for, with the reason."""

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity is Severity.ERROR)

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity is Severity.WARNING)

    @property
    def ids(self) -> set[str]:
        return {f.id for f in self.findings}

    @property
    def paths(self) -> list[Path]:
        """Every RoCE path (built on first use: quadratic in the size of a segment)."""
        return self.topology.paths

    @property
    def path_count(self) -> int:
        return self.topology.path_count

    def path(self, a: NicRef, b: NicRef) -> Path | None:
        return self.topology.path(a, b)

    def mtu_groups(self) -> Counter[tuple[int, int, int]]:
        """(path MTU, negotiated RoCE MTU, supported RoCE MTU) -> number of paths, from the path classes (every
        path of a class has the same MTUs)."""
        groups: Counter[tuple[int, int, int]] = Counter()
        for pc in self.classes:
            p = pc.rep()
            groups[(p.path_mtu, p.negotiated_roce_mtu, p.supported_roce_mtu)] += pc.count
        return groups

    def to_json(self, include_paths: bool = False) -> dict[str, Any]:
        m = self.model
        doc: dict[str, Any] = {
            "fabric": m.name, "source": m.source, "digest": m.loaded.digest, "profile": m.system.name,
            "nodes": len(m.system.nodes), "nics": len(m.nics), "switches": len(m.switches),
            "summary": {"errors": self.errors, "warnings": self.warnings, "findings": len(self.findings),
                        "paths": self.path_count, "pathClasses": len(self.classes)},
            "findings": [f.to_json() for f in self.findings],
            "notApplicable": dict(self.not_applicable),
            "notes": [{"source": n.at.source, "key": n.at.key, "line": n.at.line, "kind": n.kind,
                       "message": n.message} for n in m.loaded.notes],
            "pathMtus": [{"pathMtu": mtu, "negotiatedRoceMtu": neg, "supportedRoceMtu": sup,
                          "maxRocePayload": max_send_payload(mtu), "paths": count}
                         for (mtu, neg, sup), count in sorted(self.mtu_groups().items(), reverse=True)],
        }
        if include_paths:
            doc["paths"] = [
                {"a": str(p.a), "b": str(p.b), "vlan": p.vlan, "ports": [str(x) for x in p.ports],
                 "mtus": list(p.mtus), "pathMtu": p.path_mtu, "maxRocePayload": p.max_payload,
                 "negotiatedRoceMtu": p.negotiated_roce_mtu, "supportedRoceMtu": p.supported_roce_mtu}
                for p in self.topology.paths
            ]
        return doc

    def format(self, show_paths: bool = False) -> str:
        m = self.model
        lines = [f"{m.name} ({m.source}): profile {m.system.name}, {len(m.system.nodes)} node(s), {len(m.nics)} "
                 f"NIC(s), {len(m.switches)} switch(es), {self.path_count} RoCE path(s)"]
        lines += format_notes(m)
        lines += [str(f) for f in self.findings]
        for (mtu, negotiated, supported), count in sorted(self.mtu_groups().items(), reverse=True):
            note = "" if supported >= negotiated else f" but the NICs negotiate {negotiated}: oversized frames drop"
            lines.append(f"paths: {count} x path MTU {mtu}: RoCE MTU {supported} fits{note}; largest RoCE payload "
                         f"{max_send_payload(mtu)} B")
        for req, why in sorted(self.not_applicable.items()):
            lines.append(f"not applicable {req}: {why}")
        if show_paths:
            for p in self.topology.paths:
                lines.append(f"  {p.id}  vlan {p.vlan}  via {' '.join(str(x) for x in p.ports)}  MTUs "
                             f"{','.join(str(x) for x in p.mtus)}  -> path MTU {p.path_mtu}, RoCE "
                             f"{p.negotiated_roce_mtu}/{p.supported_roce_mtu}, max payload {p.max_payload}")
        lines.append(f"summary: {self.errors} error(s), {self.warnings} warning(s)")
        return "\n".join(lines)

    def dumps(self, include_paths: bool = False) -> str:
        return json.dumps(self.to_json(include_paths), indent=2)


def format_notes(model: FabricModel) -> list[str]:
    """An imported fabric's notes: what was not read and why. Ignored tables are summed up per kind of reason."""
    notes = model.loaded.notes
    ignored = [n for n in notes if n.kind == "ignored"]
    lines = [f"note: {n}" for n in notes if n.kind != "ignored"]
    if ignored:
        keys = sorted({n.at.key for n in ignored})
        files = len({n.at.source for n in ignored})
        lines.append(f"note: ignored (not relevant to RoCE) in {files} file(s): {', '.join(keys[:12])}"
                     + (f" and {len(keys) - 12} more" if len(keys) > 12 else "") + " ('fakehw fabric import' lists "
                     "every one)")
    return lines


# --------------------------------------------------------------------------------------------------- rules


def lint(model: FabricModel, *, exhaustive: bool = False) -> LintReport:
    """Check a resolved fabric against every static requirement (``exhaustive``: every path on its own)."""
    topo = analyse(model)
    classes = path_classes(model, topo, exhaustive=exhaustive)
    c = _Collector(model, classes)
    _check_cabling(model, topo, c)
    _check_links(model, c)
    _check_loops(model, topo, c)
    rail_misfits = _check_rails(model, topo, c)
    _check_reach(model, topo, c, rail_misfits)
    _check_ecn_thresholds(model, c)
    _check_pfc_sharing(model, c)
    _check_headroom(model, c)
    _check_watchdog(model, c)
    _check_roce_agreement(model, topo, c)
    for pc in classes:
        path = pc.rep()
        a, b = model.host_nic(path.a), model.host_nic(path.b)
        ports = [model.port(r) for r in path.ports]
        c.scope(pc, path)
        _check_mtu(path, a, b, ports, c)
        _check_direction(path, a, b, ports, c)
        _check_direction(path, b, a, ports[::-1], c)
    c.unscope()
    return LintReport(model, topo, tuple(c.findings()), tuple(classes), MappingProxyType(_not_applicable(model)))


def _not_applicable(model: FabricModel) -> dict[str, str]:
    out = {}
    if all(p.qos.headroom is None for p in model.ports() if p.peer is not None):
        out["FAB-BUF-001"] = ("the config states no lossless buffers (no qos headroom; an imported SONiC or Cumulus "
                              "config always does), so whether PFC priorities have headroom cannot be checked")
    if all(p.qos.watchdog is None for p in model.ports() if p.peer is not None):
        out["FAB-PFC-003"] = ("the config states no PFC watchdogs (no qos pfcWatchdog; an imported SONiC or Cumulus "
                              "config always does), so whether pause storms are mitigated cannot be checked")
    return out


def _nic_origin(nic: HostNic, *keys: str) -> DocPath | None:
    for k in keys:
        if k in nic.origins:
            return nic.origins[k]
    return None


def _nic_doc(model: FabricModel, nic: HostNic) -> DocPath:
    """Where to point for a NIC setting that comes from the profile: the port that cables the NIC."""
    if nic.peer is not None:
        port = model.port(nic.peer)
        return (*port.doc, "connect")
    return ("profile",)


def _check_cabling(model: FabricModel, topo: Topology, c: _Collector) -> None:
    for nic in model.nics:
        reason = topo.detached.get(nic.ref)
        if reason is None:
            continue
        if reason == "not cabled" or reason.endswith("shut down"):
            where = ("switches",) if nic.peer is None else (
                (*model.port(nic.peer).doc, "shutdown") if reason.endswith("shut down") else _nic_doc(model, nic))
            c.add("FAB-LINK-001", None, nic.id, f"{reason}; its rail has no scale-out bandwidth on this node",
                  element=nic.id, doc_path=where)
        else:
            origin = _nic_origin(nic, "vlan")
            port = model.port(nic.peer) if nic.peer else None
            c.add("FAB-VLAN-001", origin if origin is not None else (port.origin("vlan") if port else None), nic.id,
                  reason, element=nic.id)


def _mode(port: Port, vlan: int) -> str | None:
    if vlan in port.vlan.tagged:
        return "tagged"
    if port.vlan.untagged == vlan:
        return "untagged"
    return None


def _check_links(model: FabricModel, c: _Collector) -> None:
    for link in model.links:
        if isinstance(link.a, NicRef) or isinstance(link.b, NicRef):
            continue
        pa, pb = model.port(link.a), model.port(link.b)
        vlans = pa.vlan.tagged | pb.vlan.tagged | {v for v in (pa.vlan.untagged, pb.vlan.untagged) if v is not None}
        for vlan in sorted(vlans):
            ma, mb = _mode(pa, vlan), _mode(pb, vlan)
            if ma != mb:
                c.add("FAB-VLAN-001", pb.origin("vlan") if ma is None else pa.origin("vlan"), f"{pa.id}-{pb.id}",
                      f"cable {pa.id} <-> {pb.id}: VLAN {vlan} is {ma or 'not carried'} on {pa.id} but "
                      f"{mb or 'not carried'} on {pb.id}", element=f"{pa.id}<->{pb.id}")


def _check_loops(model: FabricModel, topo: Topology, c: _Collector) -> None:
    for loop in topo.loops:
        c.add("FAB-VLAN-002", loop.link.doc, f"vlan{loop.vlan}",
              f"VLAN {loop.vlan} loops through {' -> '.join(loop.cycle)} (closed by the cable {loop.link.a} <-> "
              f"{loop.link.b}); nothing here runs spanning tree", element=f"VLAN {loop.vlan}")


def _rail_domain(model: FabricModel, nic: HostNic) -> tuple[str, int | None]:
    """What tells which rail a NIC is on: its leaf's ``rail``, else its VLAN's ``rail``, else its segment."""
    port = model.port(nic.peer) if nic.peer else None
    if port is not None:
        sw = model.switch(port.switch)
        if sw is not None and sw.rail is not None:
            return f"switch {sw.name}", sw.rail
        vlan = model.nic_vlan(nic)
        if vlan is not None and vlan in model.vlans and model.vlans[vlan].rail is not None:
            return f"VLAN {vlan}", model.vlans[vlan].rail
    return "", None


def _check_rails(model: FabricModel, topo: Topology, c: _Collector) -> set[NicRef]:
    """FAB-RAIL-001; returns the NICs on a rail other than their own (their paths are that finding's echo)."""
    misfits: set[NicRef] = set()
    by_node: dict[str, list[HostNic]] = {}
    for nic in model.nics:
        if nic.rail is not None and nic.peer is not None:
            by_node.setdefault(nic.node, []).append(nic)
    for node, nics in by_node.items():
        problems: list[str] = []
        where: DocPath | None = None
        domains: dict[tuple[str, int | None] | tuple[int, int], list[HostNic]] = {}
        for nic in nics:
            name, rail = _rail_domain(model, nic)
            if rail is not None:
                domains.setdefault((name, rail), []).append(nic)
                if rail != nic.rail:
                    misfits.add(nic.ref)
                    problems.append(f"{nic.nic.name} (rail {nic.rail} in the profile) is on rail {rail} ({name})")
                    port = model.port(nic.peer) if nic.peer else None
                    where = where or (port.origin("vlan") if port is not None and name.startswith("VLAN")
                                      else _nic_doc(model, nic))
            elif nic.ref in topo.segment_of:
                domains.setdefault(topo.segment_of[nic.ref], []).append(nic)
        for key, members in domains.items():
            if len(members) > 1:
                label = f"rail {key[1]} ({key[0]})" if isinstance(key[0], str) else f"one segment of VLAN {key[0]}"
                problems.append(f"{' and '.join(n.nic.name for n in members)} share {label}")
                where = where or _nic_doc(model, members[1])
        if problems:
            c.add("FAB-RAIL-001", None, node, "; ".join(problems), element=node, doc_path=where)
    return misfits


def _check_reach(model: FabricModel, topo: Topology, c: _Collector, misfits: set[NicRef]) -> None:
    rails: dict[int, dict[tuple[int, int], list[NicRef]]] = {}
    for nic in model.nics:
        if nic.rail is None or nic.ref in misfits or nic.ref not in topo.segment_of:
            continue
        rails.setdefault(nic.rail, {}).setdefault(topo.segment_of[nic.ref], []).append(nic.ref)
    for rail, segments in sorted(rails.items()):
        if len(segments) < 2:
            continue
        parts = []
        for (vlan, index), members in sorted(segments.items()):
            switches = ", ".join(sorted(topo.segments[index].switches))
            parts.append(f"VLAN {vlan} on {switches} ({len(members)} NIC(s), e.g. {members[0]})")
        # an import has no "switches" in the operator's files: point at the rail's VLAN in its manifest
        vids = {vlan for vlan, _ in segments}
        declared = [i for i, v in enumerate(model.loaded.spec.vlans) if v.id in vids]
        imported = model.loaded.provenance is not None
        where: DocPath = ("vlans", declared[0]) if imported and len(vids) == 1 and declared else ("switches",)
        c.add("FAB-PATH-001", None, f"rail {rail}", f"rail {rail} is split into {len(segments)} layer-2 segments "
              f"that cannot reach each other: " + "; ".join(parts), element=f"rail {rail}", doc_path=where)


def _check_ecn_thresholds(model: FabricModel, c: _Collector) -> None:
    for port in model.ports():
        ecn = port.qos.ecn
        if ecn is not None and ecn.enabled and ecn.min_kb >= ecn.max_kb:
            c.port("FAB-ECN-002", port, "qos.ecn", f"ECN minKB {ecn.min_kb:g} is not below maxKB {ecn.max_kb:g}")


def _check_pfc_sharing(model: FabricModel, c: _Collector) -> None:
    for port in model.ports():
        if port.peer is None:
            continue
        q = port.qos
        for t in model.traffic:
            prio = q.classify(t.dscp, t.pcp)
            if prio in q.pfc_priorities:
                how = f"DSCP {t.dscp}" if q.trust == "dscp" else "untagged" if t.pcp is None else f"PCP {t.pcp}"
                c.port("FAB-PFC-002", port, "qos.dscpToPriority" if q.trust == "dscp" else "qos.pfcPriorities",
                       f"{t.name} traffic ({how}) is classified into PFC priority {prio}")
        if q.default_priority in q.pfc_priorities:
            c.port("FAB-PFC-002", port, "qos.pfcPriorities",
                   f"PFC is on the default priority {q.default_priority}: every unclassified frame is lossless")
    for nic in model.nics:
        if 0 in nic.roce.pfc_priorities and nic.roce.priority != 0:
            c.nic("FAB-PFC-002", nic, ("roce.pfc_priorities",),
                  "the NIC enables PFC on priority 0, which carries its non-RoCE traffic")


def _check_headroom(model: FabricModel, c: _Collector) -> None:
    for port in model.ports():
        q = port.qos
        if port.peer is None or port.shutdown or q.headroom is None:
            continue
        for prio in sorted(q.pfc_priorities - q.headroom):
            c.port("FAB-BUF-001", port, "qos.headroom",
                   f"PFC is enabled on priority {prio} but no lossless buffer (headroom) is reserved for it: the "
                   f"port pauses its peer yet drops what is still in flight")


WATCHDOG_DETECTION_MS = (100, 1000)
"""The detection times FAB-PFC-003 accepts (its rationale says why)."""


def _check_watchdog(model: FabricModel, c: _Collector) -> None:
    lo, hi = WATCHDOG_DETECTION_MS
    for port in model.ports():
        q, wd = port.qos, port.qos.watchdog
        if port.peer is None or port.shutdown or wd is None or not q.pfc_priorities:
            continue
        prios = ", ".join(str(p) for p in sorted(q.pfc_priorities))
        if not wd.enabled:
            c.port("FAB-PFC-003", port, "qos.pfcWatchdog",
                   f"PFC is enabled on priority {prios} but no PFC watchdog runs on the port: a peer that never "
                   f"stops pausing holds the lossless queue, and the pause spreads upstream")
        elif wd.action == "alert":
            c.port("FAB-PFC-003", port, "qos.pfcWatchdog.action",
                   "the PFC watchdog only alerts: a storm is logged and the queue stays paused (drop or forward "
                   "mitigate it)")
        elif wd.detection_ms > hi:
            c.port("FAB-PFC-003", port, "qos.pfcWatchdog.detectionMs",
                   f"the PFC watchdog acts after {wd.detection_ms} ms, above {hi} ms: the storm outlasts the RDMA "
                   f"local ACK timeout and the senders behind the paused queue retransmit")
        elif wd.detection_ms < lo:
            c.port("FAB-PFC-003", port, "qos.pfcWatchdog.detectionMs",
                   f"the PFC watchdog acts after {wd.detection_ms} ms, below {lo} ms: no switch polls its queues "
                   f"that often, and bursts of ordinary congestion would be taken for storms")


def _check_roce_agreement(model: FabricModel, topo: Topology, c: _Collector) -> None:
    """FAB-QOS-001 between NICs: all NICs of a segment send RoCE with one DSCP and priority. The NICs that differ
    from the segment's most common setting are blamed, each with the paths to the NICs it differs from."""
    for seg in topo.segments:
        nics = [model.host_nic(r) for r in seg.nics]
        settings = [(n.roce.dscp, n.roce.priority) for n in nics]
        counts = Counter(settings)
        if len(counts) < 2:
            continue
        common = min(counts, key=lambda s: (-counts[s], s))
        for i, nic in enumerate(nics):
            if settings[i] == common:
                continue
            other = next(j for j, s in enumerate(settings) if s != settings[i])
            dscp, prio = settings[i]
            c.nic("FAB-QOS-001", nic, ("roce.dscp", "roce.priority"),
                  f"the NIC sends RoCE with DSCP {dscp} / priority {prio}, most of its VLAN {seg.vlan} peers with "
                  f"DSCP {common[0]} / priority {common[1]}",
                  counted=(len(nics) - counts[settings[i]], f"{seg.nics[min(i, other)]} <-> {seg.nics[max(i, other)]}"))


def _check_mtu(path: Path, a: HostNic, b: HostNic, ports: Sequence[Port], c: _Collector) -> None:
    ends = min(a.mtu, b.mtu)
    negotiated, supported = path.negotiated_roce_mtu, path.supported_roce_mtu
    flagged = False
    for port in ports:
        if port.mtu < ends:
            flagged = True
            breaks = supported < negotiated
            consequence = (
                f"the path carries at most {path.max_payload} bytes of RoCE payload (RoCE path MTU {supported}) but "
                f"the NICs negotiate {negotiated}: larger frames are dropped silently"
                if breaks else
                f"RoCE MTU {negotiated} still fits, frames above {port.mtu} bytes are dropped"
            )
            c.port("FAB-MTU-001", port, "mtu", f"MTU {port.mtu} is below the endpoints' MTU {ends}: {consequence}",
                   severity=Severity.ERROR if breaks else Severity.WARNING)
    if a.mtu != b.mtu:
        flagged = True
        small, big = (a, b) if a.mtu < b.mtu else (b, a)
        sev = Severity.ERROR if roce_mtu(a.mtu) != roce_mtu(b.mtu) else Severity.WARNING
        c.nic("FAB-MTU-002", small, ("mtu",),
              f"MTU {small.mtu} (active RoCE MTU {roce_mtu(small.mtu)}) differs from its peers' MTU {big.mtu} "
              f"(RoCE MTU {roce_mtu(big.mtu)})", severity=sev)
    if not flagged and negotiated < 4096:
        for end in (a, b):
            c.nic("FAB-MTU-003", end, ("mtu",), f"path MTU {path.path_mtu} gives RoCE MTU {negotiated}, not 4096",
                  element="RoCE paths")


def _check_direction(path: Path, a: HostNic, b: HostNic, ports: Sequence[Port], c: _Collector) -> None:
    """Checks that depend on which way traffic flows: RoCE data (and a's CNPs) from ``a`` towards ``b``."""
    r = a.roce
    if r.priority not in r.pfc_priorities:
        c.nic("FAB-PFC-001", a, ("roce.pfc_priorities", "roce.priority"),
              f"the NIC's PFC priorities {sorted(r.pfc_priorities)} do not include its RoCE priority {r.priority}")
    if not r.ecn:
        c.nic("FAB-ECN-001", a, ("roce.ecn",), "ECN (DCQCN) is off on the NIC")
    pcp: int | None = r.priority if a.vlan is not None else None
    cnp_pcp: int | None = r.cnp_priority if a.vlan is not None else None
    for k in range(0, len(ports), 2):
        ing, eg = ports[k], ports[k + 1]
        q = ing.qos
        if q.trust == "pcp" and pcp is None:
            c.port("FAB-QOS-002", ing, "qos.trust",
                   f"trusts PCP but RoCE and CNP frames arrive untagged, so they get the default priority "
                   f"{q.default_priority}")
            prio = q.default_priority
            cnp_prio = prio
        else:
            prio = q.classify(r.dscp, pcp)
            cnp_prio = q.classify(r.cnp_dscp, cnp_pcp)
            if prio != r.priority:
                how = f"DSCP {r.dscp}" if q.trust == "dscp" else f"PCP {pcp}"
                c.port("FAB-QOS-001", ing, "qos.dscpToPriority" if q.trust == "dscp" else "qos.pcpToPriority",
                       f"classifies RoCE ({how}) into priority {prio}; the NICs use priority {r.priority}")
            else:
                for port in (ing, eg):
                    if prio not in port.qos.pfc_priorities:
                        c.port("FAB-PFC-001", port, "qos.pfcPriorities",
                               f"PFC priorities {sorted(port.qos.pfc_priorities)} do not include priority {prio}, "
                               f"which RoCE is classified into")
                if not eg.qos.marks_ecn(prio):
                    ecn = eg.qos.ecn
                    why = "no ECN marking" if ecn is None or not ecn.enabled else \
                        f"ECN marks priorities {sorted(ecn.priorities)} only"
                    c.port("FAB-ECN-001", eg, "qos.ecn", f"{why}; RoCE runs on priority {prio}")
            if q.cnp_priority is None:
                c.port("FAB-CNP-001", ing, "qos.cnpPriority", "no CNP priority is configured")
            elif cnp_prio != q.cnp_priority:
                how = f"DSCP {r.cnp_dscp}" if q.trust == "dscp" else f"PCP {cnp_pcp}"
                c.port("FAB-CNP-001", ing, "qos.dscpToPriority" if q.trust == "dscp" else "qos.pcpToPriority",
                       f"CNPs ({how}) are classified into priority {cnp_prio}, not the CNP priority {q.cnp_priority}")
        tagged_next = path.vlan in eg.vlan.tagged
        pcp = prio if tagged_next else None
        cnp_pcp = cnp_prio if tagged_next else None
    if b.roce.trust == "pcp" and pcp is None:
        c.nic("FAB-HOST-001", b, ("roce.trust",),
              f"the NIC trusts PCP but its switch port sends it RoCE untagged (VLAN {path.vlan}): received RoCE and "
              f"CNPs land in priority 0, not its lossless priority {b.roce.priority}")
