"""Static conformance of a fabric config: findings with requirement IDs, and the RoCE path MTU of every path.

Each rule of :data:`fakehw.fabric.requirements.REQUIREMENTS` of kind ``static`` is checked here. A setting that
is wrong on many ports (a switch-wide QoS block, a ``defaults`` entry) gives one finding at the line that set it,
with the number of ports and paths it affects, not one finding per port. When a hop already misclassifies RoCE
(FAB-QOS-001/002), the priority-dependent rules (PFC, ECN, CNP) are not repeated for that hop: the finding
names the cause, not its echoes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fakehw.fabric.analysis import Path, Topology, analyse, max_send_payload, roce_mtu
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

    @property
    def location(self) -> str:
        return f"{self.source}:{self.line}" if self.line is not None else self.source

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
            "path": format_path(self.doc_path), "ports": self.ports, "paths": self.paths, "example": self.example,
        }


@dataclass
class _Pending:
    id: str
    severity: Severity
    element: str
    message: str
    doc_path: DocPath
    members: set[str] = field(default_factory=set)
    paths: set[str] = field(default_factory=set)


class _Collector:
    """Gathers findings, merging those with the same rule, origin line and message."""

    def __init__(self, model: FabricModel) -> None:
        self.model = model
        self.items: dict[tuple[str, DocPath | str, str], _Pending] = {}

    def add(self, req: str, origin: DocPath | None, member: str, message: str, *, path: Path | None = None,
            severity: Severity | None = None, element: str | None = None, doc_path: DocPath | None = None) -> None:
        """One occurrence. ``origin`` is where the offending setting was written (None: the hardware profile,
        then ``element``/``member`` names the thing and ``doc_path`` is where to point)."""
        key: tuple[str, DocPath | str, str] = (req, origin if origin is not None else (element or member), message)
        item = self.items.get(key)
        if item is None:
            item = _Pending(req, severity or REQUIREMENTS[req].severity,
                            element or (_describe(self.model, origin) if origin is not None else member), message,
                            origin if origin is not None else (doc_path or ()))
            self.items[key] = item
        item.members.add(member)
        if path is not None:
            item.paths.add(path.id)

    def findings(self) -> list[Finding]:
        out = []
        for item in self.items.values():
            source, line = self.model.locate(item.doc_path) if item.doc_path else (self.model.source, None)
            example = min(item.paths) if item.paths else None
            out.append(Finding(item.id, item.severity, item.element, item.message, source, line, item.doc_path,
                               len(item.members), len(item.paths), example))
        out.sort(key=lambda f: (f.severity.rank, f.id, f.source, f.line or 0, f.element, f.message))
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
        return self.topology.paths

    def path(self, a: NicRef, b: NicRef) -> Path | None:
        return next((p for p in self.topology.paths if {p.a, p.b} == {a, b}), None)

    def to_json(self) -> dict[str, Any]:
        m = self.model
        return {
            "fabric": m.name, "source": m.source, "digest": m.loaded.digest, "profile": m.system.name,
            "nodes": len(m.system.nodes), "nics": len(m.nics), "switches": len(m.switches),
            "summary": {"errors": self.errors, "warnings": self.warnings, "findings": len(self.findings),
                        "paths": len(self.topology.paths)},
            "findings": [f.to_json() for f in self.findings],
            "paths": [
                {"a": str(p.a), "b": str(p.b), "vlan": p.vlan, "ports": [str(x) for x in p.ports],
                 "mtus": list(p.mtus), "pathMtu": p.path_mtu, "maxRocePayload": p.max_payload,
                 "negotiatedRoceMtu": p.negotiated_roce_mtu, "supportedRoceMtu": p.supported_roce_mtu}
                for p in self.topology.paths
            ],
        }

    def format(self, show_paths: bool = False) -> str:
        m = self.model
        lines = [f"{m.name} ({m.source}): profile {m.system.name}, {len(m.system.nodes)} node(s), {len(m.nics)} "
                 f"NIC(s), {len(m.switches)} switch(es), {len(self.topology.paths)} RoCE path(s)"]
        lines += [str(f) for f in self.findings]
        groups = Counter((p.path_mtu, p.negotiated_roce_mtu, p.supported_roce_mtu) for p in self.topology.paths)
        for (mtu, negotiated, supported), count in sorted(groups.items(), reverse=True):
            note = "" if supported >= negotiated else f" but the NICs negotiate {negotiated}: oversized frames drop"
            lines.append(f"paths: {count} x path MTU {mtu}: RoCE MTU {supported} fits{note}; largest RoCE payload "
                         f"{max_send_payload(mtu)} B")
        if show_paths:
            for p in self.topology.paths:
                lines.append(f"  {p.id}  vlan {p.vlan}  via {' '.join(str(x) for x in p.ports)}  MTUs "
                             f"{','.join(str(x) for x in p.mtus)}  -> path MTU {p.path_mtu}, RoCE "
                             f"{p.negotiated_roce_mtu}/{p.supported_roce_mtu}, max payload {p.max_payload}")
        lines.append(f"summary: {self.errors} error(s), {self.warnings} warning(s)")
        return "\n".join(lines)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)


# --------------------------------------------------------------------------------------------------- rules


def lint(model: FabricModel) -> LintReport:
    """Check a resolved fabric against every static requirement."""
    topo = analyse(model)
    c = _Collector(model)
    _check_cabling(model, topo, c)
    _check_links(model, c)
    _check_loops(model, topo, c)
    rail_misfits = _check_rails(model, topo, c)
    _check_reach(model, topo, c, rail_misfits)
    _check_ecn_thresholds(model, c)
    _check_pfc_sharing(model, c)
    for path in topo.paths:
        _check_mtu(model, path, c)
        a, b = model.host_nic(path.a), model.host_nic(path.b)
        ports = [model.port(r) for r in path.ports]
        _check_direction(model, path, a, b, ports, c)
        _check_direction(model, path, b, a, ports[::-1], c)
    return LintReport(model, topo, tuple(c.findings()))


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
            c.add("FAB-LINK-001", None, nic.id, f"{reason}; its rail has no scale-out bandwidth on this node",
                  element=nic.id, doc_path=_nic_doc(model, nic) if nic.peer else ("switches",))
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
                c.add("FAB-VLAN-001", link.doc, f"{pa.id}-{pb.id}",
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
                    where = where or _nic_doc(model, nic)
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
        c.add("FAB-PATH-001", None, f"rail {rail}", f"rail {rail} is split into {len(segments)} layer-2 segments "
              f"that cannot reach each other: " + "; ".join(parts), element=f"rail {rail}", doc_path=("switches",))


def _check_ecn_thresholds(model: FabricModel, c: _Collector) -> None:
    for port in model.ports():
        ecn = port.qos.ecn
        if ecn is not None and ecn.enabled and ecn.min_kb >= ecn.max_kb:
            c.add("FAB-ECN-002", port.origin("qos.ecn"), port.id,
                  f"ECN minKB {ecn.min_kb} is not below maxKB {ecn.max_kb}")


def _check_pfc_sharing(model: FabricModel, c: _Collector) -> None:
    for port in model.ports():
        if port.peer is None:
            continue
        q = port.qos
        for t in model.traffic:
            prio = q.classify(t.dscp, t.pcp)
            if prio in q.pfc_priorities:
                c.add("FAB-PFC-002", port.origin("qos.dscpToPriority" if q.trust == "dscp" else "qos.pfcPriorities"),
                      port.id, f"{t.name} traffic (DSCP {t.dscp}) is classified into PFC priority {prio}")
        if q.default_priority in q.pfc_priorities:
            c.add("FAB-PFC-002", port.origin("qos.pfcPriorities"), port.id,
                  f"PFC is on the default priority {q.default_priority}: every unclassified frame is lossless")
    for nic in model.nics:
        if 0 in nic.roce.pfc_priorities and nic.roce.priority != 0:
            c.add("FAB-PFC-002", _nic_origin(nic, "roce.pfc_priorities"), nic.id,
                  "the NIC enables PFC on priority 0, which carries its non-RoCE traffic", element=nic.id,
                  doc_path=_nic_doc(model, nic))


def _check_mtu(model: FabricModel, path: Path, c: _Collector) -> None:
    a, b = model.host_nic(path.a), model.host_nic(path.b)
    ends = min(a.mtu, b.mtu)
    negotiated, supported = path.negotiated_roce_mtu, path.supported_roce_mtu
    flagged = False
    for ref in path.ports:
        port = model.port(ref)
        if port.mtu < ends:
            flagged = True
            breaks = supported < negotiated
            consequence = (
                f"the path carries at most {path.max_payload} bytes of RoCE payload (RoCE path MTU {supported}) but "
                f"the NICs negotiate {negotiated}: larger frames are dropped silently"
                if breaks else
                f"RoCE MTU {negotiated} still fits, frames above {port.mtu} bytes are dropped"
            )
            c.add("FAB-MTU-001", port.origin("mtu"), port.id,
                  f"MTU {port.mtu} is below the endpoints' MTU {ends}: {consequence}", path=path,
                  severity=Severity.ERROR if breaks else Severity.WARNING)
    if a.mtu != b.mtu:
        flagged = True
        ra, rb = roce_mtu(a.mtu), roce_mtu(b.mtu)
        small = a if a.mtu < b.mtu else b
        big = b if small is a else a
        sev = Severity.ERROR if ra != rb else Severity.WARNING
        c.add("FAB-MTU-002", _nic_origin(small, "mtu"), small.id,
              f"MTU {small.mtu} (active RoCE MTU {roce_mtu(small.mtu)}) differs from its peers' MTU {big.mtu} "
              f"(RoCE MTU {roce_mtu(big.mtu)})", path=path, severity=sev, element=small.id,
              doc_path=_nic_doc(model, small))
    if not flagged and negotiated < 4096:
        c.add("FAB-MTU-003", _nic_origin(a, "mtu"), a.id,
              f"path MTU {path.path_mtu} gives RoCE MTU {negotiated}, not 4096", path=path,
              element="RoCE paths", doc_path=_nic_doc(model, a))


def _check_direction(model: FabricModel, path: Path, a: HostNic, b: HostNic, ports: Sequence[Port],
                     c: _Collector) -> None:
    """Checks that depend on which way traffic flows: RoCE data (and a's CNPs) from ``a`` towards ``b``."""
    r = a.roce
    if r.priority not in r.pfc_priorities:
        c.add("FAB-PFC-001", _nic_origin(a, "roce.pfc_priorities", "roce.priority"), a.id,
              f"the NIC's PFC priorities {sorted(r.pfc_priorities)} do not include its RoCE priority {r.priority}",
              path=path, element=a.id, doc_path=_nic_doc(model, a))
    if not r.ecn:
        c.add("FAB-ECN-001", _nic_origin(a, "roce.ecn"), a.id, "ECN (DCQCN) is off on the NIC", path=path,
              element=a.id, doc_path=_nic_doc(model, a))
    if (b.roce.dscp, b.roce.priority) != (r.dscp, r.priority) and a.ref < b.ref:
        c.add("FAB-QOS-001", _nic_origin(b, "roce.dscp", "roce.priority"), b.id,
              f"the NIC sends RoCE with DSCP {b.roce.dscp} / priority {b.roce.priority}, its peer {a.id} with "
              f"DSCP {r.dscp} / priority {r.priority}", path=path, element=b.id, doc_path=_nic_doc(model, b))
    pcp: int | None = r.priority if a.vlan is not None else None
    cnp_pcp: int | None = r.cnp_priority if a.vlan is not None else None
    for k in range(0, len(ports), 2):
        ing, eg = ports[k], ports[k + 1]
        q = ing.qos
        if q.trust == "pcp" and pcp is None:
            c.add("FAB-QOS-002", ing.origin("qos.trust"), ing.id,
                  f"trusts PCP but RoCE and CNP frames arrive untagged, so they get the default priority "
                  f"{q.default_priority}", path=path)
            prio = q.default_priority
            cnp_prio = prio
        else:
            prio = q.classify(r.dscp, pcp)
            cnp_prio = q.classify(r.cnp_dscp, cnp_pcp)
            if prio != r.priority:
                how = f"DSCP {r.dscp}" if q.trust == "dscp" else f"PCP {pcp}"
                c.add("FAB-QOS-001", ing.origin("qos.dscpToPriority" if q.trust == "dscp" else "qos.trust"), ing.id,
                      f"classifies RoCE ({how}) into priority {prio}; the NICs use priority {r.priority}", path=path)
            else:
                for port in (ing, eg):
                    if prio not in port.qos.pfc_priorities:
                        c.add("FAB-PFC-001", port.origin("qos.pfcPriorities"), port.id,
                              f"PFC priorities {sorted(port.qos.pfc_priorities)} do not include priority {prio}, "
                              f"which RoCE is classified into", path=path)
                if not eg.qos.marks_ecn(prio):
                    ecn = eg.qos.ecn
                    why = "no ECN marking" if ecn is None or not ecn.enabled else \
                        f"ECN marks priorities {sorted(ecn.priorities)} only"
                    c.add("FAB-ECN-001", eg.origin("qos.ecn"), eg.id,
                          f"{why}; RoCE runs on priority {prio}", path=path)
            if q.cnp_priority is None:
                c.add("FAB-CNP-001", ing.origin("qos.cnpPriority"), ing.id, "no CNP priority is configured",
                      path=path)
            elif cnp_prio != q.cnp_priority:
                c.add("FAB-CNP-001", ing.origin("qos.dscpToPriority" if q.trust == "dscp" else "qos.trust"), ing.id,
                      f"CNPs (DSCP {r.cnp_dscp}) are classified into priority {cnp_prio}, not the CNP priority "
                      f"{q.cnp_priority}", path=path)
        tagged_next = path.vlan in eg.vlan.tagged
        pcp = prio if tagged_next else None
        cnp_pcp = cnp_prio if tagged_next else None
