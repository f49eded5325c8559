"""Cumulus Linux 5.x NVUE ``startup.yaml`` -> an :class:`ImportedSwitch`.

An NVUE file is a YAML list: a ``header`` and a ``set`` whose tree mirrors ``nv set`` commands (``nv set qos pfc
default-global switch-priority 3`` is ``set.qos.pfc.default-global.switch-priority.'3': {}``). Interface keys may
name ranges and lists (``swp1-32``, ``swp1-4,swp6``). Keys in findings are the ``nv set`` path, e.g.
``interface.swp8.link.mtu`` or ``qos.congestion-control.default-global.traffic-class.3``.

The model's priority is NVUE's switch priority (SP). ``qos roce`` (mode lossless, the default, or lossy) stands for
the settings NVIDIA documents for it: trust PCP and DSCP (DSCP decides for IP), the default DSCP map (DSCP d -> SP
d // 8: RoCE's 26 -> 3, CNP's 48 -> 6), SP 3 -> traffic class 3 and SP 6 -> 6 (others 0), traffic class 6 strict
(the CNP queue), ECN on traffic class 3 from 150,000 to 1,500,000 bytes with probability 100, and in lossless mode
PFC on SP 3 with SP 3 in the RoCE lossless buffer pool. Explicit ``qos`` settings override those, per key; a port's
``qos.<feature>.profile`` replaces ``default-global`` for it. Without ``qos roce`` Cumulus trusts PCP, maps SP n to
traffic class n, and enables neither PFC, ECN, a strict queue nor lossless buffers.

The PFC watchdog (Cumulus Linux 5.6+) runs on the interfaces with ``qos pfc-watchdog`` (``{}`` or ``state
enable``; off by default). It acts - always by dropping - on a queue paused for ``qos pfc-watchdog robustness``
(default 3) ``polling-interval``s (default 100 ms), and restores PFC after an interval without pause frames.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from fakehw.fabric.importers.assemble import ImportedPort, ImportedSwitch
from fakehw.fabric.importers.source import SourceFile, as_int, int_list, read_yaml
from fakehw.fabric.loader import ImportNote, NoteKind, SourceKey
from fakehw.model.errors import PathItem

DEFAULT_MTU = 9216
TOP_READ = {"interface", "bridge", "qos", "system", "nve"}
TOP_IGNORED = {"router", "vrf", "service", "evpn", "mlag", "acl", "platform", "routing", "ptp", "system-config"}
IFACE_READ = {"type", "link", "bridge", "qos", "ip", "bond", "description", "acl"}
IFACE_IGNORED = {"router", "lldp", "evpn", "synce", "ptp", "neighbor", "counters"}
QOS_READ = {"roce", "pfc", "congestion-control", "mapping", "egress-queue-mapping", "egress-scheduler",
            "traffic-pool", "remark", "pfc-watchdog"}
QOS_IGNORED = {"link-pause", "egress-shaper", "advance-buffer-config"}
WATCHDOG_POLL_MS = 100
"""Cumulus' PFC watchdog polling interval when ``qos pfc-watchdog polling-interval`` is not set (100-5000)."""
WATCHDOG_ROBUSTNESS = 3
"""Polling intervals a queue stays paused before the watchdog acts, when ``robustness`` is not set (1-1000)."""
LOSSLESS_MODES = ("lossless", "lossless-single-ipool")
"""``qos roce mode`` values that make priority 3 lossless (PFC and buffer headroom on it)."""


@dataclass
class _PortQos:
    """One port's QoS while it is read: the inputs, and what is filled in (``out``, the model's qos keys) with the
    source of each (``at``)."""

    port: ImportedPort
    qos: dict[str, Any]
    mode: str | None
    """``qos roce mode``; None when RoCE is not configured."""
    here: SourceKey
    """Where a default comes from: ``qos roce`` under RoCE, else the port."""
    out: dict[str, Any] = field(default_factory=dict)
    at: dict[str, SourceKey] = field(default_factory=dict)

    @property
    def roce(self) -> bool:
        return self.mode is not None


_RANGE = re.compile(r"^(?P<prefix>.*?)(?P<lo>\d+)-(?P<hi>\d+)$")
_SIZE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>B|KB|MB|K|M)?\s*$", re.IGNORECASE)


def read_switch(path: Path, display: str) -> ImportedSwitch:
    src = read_yaml(path, display)
    return _Reader(src).switch()


def expand_names(text: str) -> list[str]:
    """``swp1-4,swp6`` -> swp1 swp2 swp3 swp4 swp6 (a bare number reuses the previous prefix)."""
    out: list[str] = []
    prefix = ""
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        if part.isdigit() and prefix:
            part = prefix + part
        m = _RANGE.match(part)
        if m and m["prefix"] and not m["prefix"][-1].isdigit():
            prefix = m["prefix"]
            lo, hi = int(m["lo"]), int(m["hi"])
            out += [f"{prefix}{i}" for i in range(lo, hi + 1)] if lo <= hi else [part]
        else:
            prefix = re.sub(r"\d+$", "", part)
            out.append(part)
    return out


def _on(value: Any) -> bool:
    return str(value).lower() in ("on", "enable", "enabled", "true", "yes")


class _Reader:
    def __init__(self, src: SourceFile) -> None:
        self.src = src
        self.notes: list[ImportNote] = []
        self.set: dict[str, Any] = {}
        self.set_index = 0
        self.watchdogs: dict[str, tuple[bool, tuple[PathItem, ...]]] = {}
        self.wd_poll, self.wd_robustness = WATCHDOG_POLL_MS, WATCHDOG_ROBUSTNESS
        self.wd_at: SourceKey | None = None

    def at(self, *path: PathItem) -> SourceKey:
        return self.src.at(".".join(str(p) for p in path), (self.set_index, "set", *path))

    def fail(self, path: tuple[PathItem, ...], message: str) -> NoReturn:
        at = self.at(*path)
        self.src.fail(at.key, (self.set_index, "set", *path), message)

    def mapping(self, value: Any, path: tuple[PathItem, ...]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping, got {type(value).__name__} {value!r}")
        out: dict[str, Any] = value
        return out

    def note(self, path: tuple[PathItem, ...], kind: NoteKind, message: str) -> None:
        at = self.at(*path)
        self.notes.append(self.src.note(at.key, (self.set_index, "set", *path), kind, message))

    # ---- document
    def switch(self) -> ImportedSwitch:
        data = self.src.data
        if not isinstance(data, list):
            self.src.fail("", (), "an NVUE startup.yaml is a YAML list (- header: ..., - set: ...), this file holds "
                                  f"a {type(data).__name__}")
        for i, item in enumerate(data):
            if isinstance(item, dict) and "set" in item:
                self.set_index, self.set = i, self.mapping(item["set"], ())
                break
            if not (isinstance(item, dict) and set(item) <= {"header", "unset"}):
                self.src.fail(f"[{i}]", (i,), "expected '- header:' or '- set:' entries")
        else:
            self.src.fail("set", (), "no '- set:' entry: the file configures nothing")
        for key in self.set:
            if key not in TOP_READ:
                kind: NoteKind = "ignored" if key in TOP_IGNORED else "unknown"
                self.note((key,), kind, "not relevant to RoCE" if kind == "ignored" else "not known to the NVUE "
                                                                                         "importer: not read")
        system = self.mapping(self.set.get("system"), ("system",))
        hostname = system.get("hostname")
        name = str(hostname) if hostname else Path(self.src.name).parent.name or Path(self.src.name).stem
        at = self.at("system", "hostname") if hostname else self.src.at("(file)")
        sw = ImportedSwitch(name, at, self.src)
        if "nve" in self.set:
            self.fail(("nve",), "VXLAN (nve) is not modelled: RoCE inside a VXLAN tunnel takes the outer header's "
                                "DSCP and MTU")
        self._interfaces(sw)
        self._qos(sw)
        sw.notes = self.notes
        return sw

    # ---- interfaces
    def _interfaces(self, sw: ImportedSwitch) -> None:
        ifaces = self.mapping(self.set.get("interface"), ("interface",))
        domains = self.mapping(self.mapping(self.set.get("bridge"), ("bridge",)).get("domain"), ("bridge", "domain"))
        self.bonded: dict[str, tuple[str, ...]] = {}
        self.routed: dict[str, tuple[str, ...]] = {}
        self.acl: dict[str, tuple[str, ...]] = {}
        self.profiles: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {}
        for key, raw in ifaces.items():
            body = self.mapping(raw, ("interface", key))
            names = expand_names(key)
            kind = body.get("type", "swp" if all(n.startswith("swp") for n in names) else None)
            for member in self.mapping(self.mapping(body.get("bond"), ("interface", key, "bond")).get("member"),
                                       ("interface", key, "bond", "member")):
                for m in expand_names(member):
                    self.bonded[m] = ("interface", key, "bond", "member", member)
            if kind != "swp":
                continue
            for fld in body:
                if fld not in IFACE_READ | IFACE_IGNORED:
                    self.note(("interface", key, fld), "unknown", "not known to the NVUE importer: not read")
            for name in names:
                self._port(sw, name, key, body, domains)

    def _port(self, sw: ImportedSwitch, name: str, key: str, body: dict[str, Any],
              domains: dict[str, Any]) -> None:
        base = ("interface", key)
        port = sw.ports.get(name)
        if port is None:
            port = ImportedPort(name, self.at(*base), DEFAULT_MTU, self.at(*base), shutdown_at=self.at(*base))
            sw.ports[name] = port
        link = self.mapping(body.get("link"), (*base, "link"))
        if "mtu" in link:
            port.mtu = as_int(self.src, ".".join((*base, "link", "mtu")), (self.set_index, "set", *base, "link", "mtu"),
                              link["mtu"], 552, 9216, "mtu")
            port.mtu_at = self.at(*base, "link", "mtu")
        state = link.get("state")
        if state is not None:
            states = set(self.mapping(state, (*base, "link", "state"))) if isinstance(state, dict) else {str(state)}
            port.shutdown = "down" in states
            port.shutdown_at = self.at(*base, "link", "state")
        if "ip" in body and "address" in self.mapping(body["ip"], (*base, "ip")):
            self.routed[name] = (*base, "ip", "address")
        if "acl" in body:
            self.acl[name] = (*base, "acl")
        bridge = self.mapping(self.mapping(body.get("bridge"), (*base, "bridge")).get("domain"),
                              (*base, "bridge", "domain"))
        for dom_name, dom_raw in bridge.items():
            where = (*base, "bridge", "domain", dom_name)
            self._membership(port, self.mapping(dom_raw, where), where,
                             self.mapping(domains.get(dom_name), ("bridge", "domain", dom_name)), dom_name)
        qos = self.mapping(body.get("qos"), (*base, "qos"))
        for feature, raw in qos.items():
            if feature == "pfc-watchdog":
                self.watchdogs[name] = self._port_watchdog(raw, (*base, "qos", feature))
                continue
            prof = self.mapping(raw, (*base, "qos", feature)).get("profile") if isinstance(raw, dict) else raw
            if prof is not None:
                self.profiles.setdefault(name, {})[feature] = (str(prof), (*base, "qos", feature))

    def _port_watchdog(self, raw: Any, path: tuple[PathItem, ...]) -> tuple[bool, tuple[PathItem, ...]]:
        """``interface <if> qos pfc-watchdog`` ({} or ``state: enable|disable``): whether it runs, and where."""
        body = self.mapping(raw, path)
        for key in body:
            if key != "state":
                self.note((*path, key), "unknown", "not known to the NVUE importer: not read")
        if "state" not in body:
            return True, path
        state = str(body["state"]).lower()
        if state not in ("enable", "enabled", "disable", "disabled", "on", "off"):
            self.fail((*path, "state"), f"state must be enable or disable, got {body['state']!r}")
        return _on(state), (*path, "state")

    def _vids(self, value: Any, path: tuple[PathItem, ...]) -> list[int]:
        keys = list(value) if isinstance(value, dict) else value
        out: list[int] = []
        for k in keys if isinstance(keys, list) else [keys]:
            out += int_list(self.src, ".".join(map(str, path)), (self.set_index, "set", *path), str(k), 1, 4094,
                            "VLAN")
        return out

    def _membership(self, port: ImportedPort, mine: dict[str, Any], where: tuple[PathItem, ...],
                    domain: dict[str, Any], dom_name: str) -> None:
        if "access" in mine:
            port.untagged = as_int(self.src, ".".join(map(str, (*where, "access"))),
                                   (self.set_index, "set", *where, "access"), mine["access"], 1, 4094, "access VLAN")
            port.tagged = []
            port.vlan_at = self.at(*where, "access")
            return
        if "vlan" in mine:
            vids, vat = self._vids(mine["vlan"], (*where, "vlan")), self.at(*where, "vlan")
        elif "vlan" in domain:
            vids, vat = self._vids(domain["vlan"], ("bridge", "domain", dom_name, "vlan")), \
                self.at("bridge", "domain", dom_name, "vlan")
        else:
            vids, vat = [1], self.at(*where)
        untagged_raw = mine.get("untagged", domain.get("untagged", 1))
        untagged = None if str(untagged_raw).lower() == "none" else as_int(
            self.src, ".".join(map(str, (*where, "untagged"))), (self.set_index, "set", *where), untagged_raw, 1, 4094,
            "untagged VLAN")
        port.untagged = untagged
        port.tagged = [v for v in vids if v != untagged]
        port.vlan_at = vat

    # ---- qos
    def _qos(self, sw: ImportedSwitch) -> None:
        qos = self.mapping(self.set.get("qos"), ("qos",))
        for key in qos:
            if key not in QOS_READ:
                kind: NoteKind = "ignored" if key in QOS_IGNORED else "unknown"
                self.note(("qos", key), kind, "not relevant to the RoCE checks" if kind == "ignored" else
                          "not known to the NVUE importer: not read")
        remark = self.mapping(qos.get("remark"), ("qos", "remark"))
        for prof, body in remark.items():
            if self.mapping(body, ("qos", "remark", prof)).get("rewrite") not in (None, "none"):
                self.fail(("qos", "remark", prof, "rewrite"), "DSCP/PCP remarking is not modelled: the switch "
                                                              "rewrites the class RoCE arrives with")
        self._global_watchdog(qos)
        roce = self.mapping(qos.get("roce"), ("qos", "roce"))
        enabled = "roce" in qos and (roce.get("enable") is None or _on(roce.get("enable")))
        mode = str(roce.get("mode", "lossless")) if enabled else None
        if mode not in (None, "lossless", "lossy", "lossless-single-ipool"):
            self.fail(("qos", "roce", "mode"), f"RoCE mode must be lossless, lossy or lossless-single-ipool, got "
                                               f"{mode!r}")
        for port in sw.ports.values():
            self._port_qos(port, qos, mode)
        for what, table in (("a bond member: link aggregation is not modelled", self.bonded),
                            ("a routed port (ip address): routed RoCE fabrics are not modelled", self.routed),
                            ("bound to an ACL, which can reclassify or drop RoCE: not modelled", self.acl)):
            for name, path in table.items():
                sw.unsupported.setdefault(name, (self.at(*path), f"{name} is cabled and {what}"))

    def _global_watchdog(self, qos: dict[str, Any]) -> None:
        """``qos pfc-watchdog polling-interval`` (ms) and ``robustness``: the watchdog acts on a queue paused for
        robustness polling intervals and restores PFC after an interval without pause frames."""
        path: tuple[PathItem, ...] = ("qos", "pfc-watchdog")
        body = self.mapping(qos.get("pfc-watchdog"), path)
        for key in body:
            if key not in ("polling-interval", "robustness"):
                self.note((*path, key), "unknown", "not known to the NVUE importer: not read")
        for key, lo, hi, default in (("polling-interval", 100, 5000, WATCHDOG_POLL_MS),
                                     ("robustness", 1, 1000, WATCHDOG_ROBUSTNESS)):
            value = default if key not in body else as_int(
                self.src, ".".join(map(str, (*path, key))), (self.set_index, "set", *path, key), body[key], lo, hi,
                f"pfc-watchdog {key}")
            if key == "robustness":
                self.wd_robustness = value
            else:
                self.wd_poll = value
        chosen = next((k for k in ("robustness", "polling-interval") if k in body), None)
        self.wd_at = self.at(*path, chosen) if chosen else None

    def _profile(self, qos: dict[str, Any], feature: str, port: str) -> tuple[str, dict[str, Any] | None]:
        name, where = self.profiles.get(port, {}).get(feature, ("default-global", ()))
        table = self.mapping(qos.get(feature), ("qos", feature))
        if name not in table:
            if where:
                self.fail((*where, "profile"), f"names qos {feature} profile {name!r}, which is not defined")
            return name, None
        return name, self.mapping(table[name], ("qos", feature, name))

    def _port_qos(self, port: ImportedPort, qos: dict[str, Any], mode: str | None) -> None:
        """A port's QoS in the model's terms, each setting with the source line it came from (``qos_at``): the
        RoCE defaults of ``qos roce mode`` (``mode`` None: no RoCE) overridden by the port's profiles."""
        q = _PortQos(port, qos, mode, self.at("qos", "roce") if mode is not None else port.at)
        self._classification(q)
        sp_tc = self._traffic_classes(q)
        self._pfc(q)
        self._ecn(q, sp_tc)
        self._cnp(q, sp_tc)
        self._headroom(q)
        self._watchdog(q)
        port.qos, port.qos_at = q.out, q.at

    def _priority_map(self, mname: str, mapping: dict[str, Any] | None, kind: str, size: int,
                      label: str) -> dict[int, int]:
        """DSCP or PCP -> switch priority: identity-like defaults (DSCP d -> d // 8, PCP p -> p) overridden by the
        mapping profile's ``dscp``/``pcp`` entries."""
        base = ("qos", "mapping", mname)
        table = {v: v // 8 if kind == "dscp" else v for v in range(size)}
        for k, v in self.mapping((mapping or {}).get(kind), (*base, kind)).items():
            dotted, where = f"qos.mapping.{mname}.{kind}.{k}", (self.set_index, "set", *base, kind, k)
            sp = as_int(self.src, dotted, where, self.mapping(v, (*base, kind, k)).get("switch-priority"), 0, 7,
                        "switch-priority")
            for d in int_list(self.src, dotted, where, str(k), 0, size - 1, label):
                table[d] = sp
        return table

    def _classification(self, q: _PortQos) -> None:
        """Trust, the DSCP and PCP maps and the default priority (the ``mapping`` profile)."""
        mname, mapping = self._profile(q.qos, "mapping", q.port.name)
        mbase = ("qos", "mapping", mname)
        trust = str((mapping or {}).get("trust", "both" if q.roce else "l2"))
        if trust not in ("l2", "l3", "both", "port"):
            self.fail((*mbase, "trust"), f"trust must be l2, l3, both or port, got {trust!r}")
        tat = self.at(*mbase, "trust") if mapping and "trust" in mapping else q.here
        dscp = self._priority_map(mname, mapping, "dscp", 64, "DSCP")
        pcp = self._priority_map(mname, mapping, "pcp", 8, "PCP")
        default_sp = (mapping or {}).get("port-default-sp", 0)
        q.out["defaultPriority"] = as_int(self.src, f"qos.mapping.{mname}.port-default-sp",
                                          (self.set_index, "set", *mbase), default_sp, 0, 7, "port-default-sp")
        q.at["defaultPriority"] = tat
        if trust == "port":
            q.out["trust"], q.out["dscpToPriority"] = "dscp", {}
        else:
            q.out["trust"] = "pcp" if trust == "l2" else "dscp"
            q.out["dscpToPriority"], q.out["pcpToPriority"] = dscp, pcp
        dat = self.at(*mbase, "dscp") if mapping and "dscp" in mapping else tat
        q.at.update(trust=tat, dscpToPriority=dat,
                    pcpToPriority=self.at(*mbase, "pcp") if mapping and "pcp" in mapping else tat)

    def _traffic_classes(self, q: _PortQos) -> dict[int, int]:
        """Switch priority -> traffic class (the ``egress-queue-mapping`` profile; RoCE puts 3 and 6 in their own
        classes and everything else in 0)."""
        sp_tc = {sp: (sp if sp in (3, 6) else 0) if q.roce else sp for sp in range(8)}
        qname, qmap = self._profile(q.qos, "egress-queue-mapping", q.port.name)
        for k, v in self.mapping((qmap or {}).get("switch-priority"),
                                 ("qos", "egress-queue-mapping", qname, "switch-priority")).items():
            path = ("qos", "egress-queue-mapping", qname, "switch-priority", k)
            tc = as_int(self.src, ".".join(map(str, path)), (self.set_index, "set", *path),
                        self.mapping(v, path).get("traffic-class"), 0, 7, "traffic-class")
            for sp in int_list(self.src, ".".join(map(str, path)), (self.set_index, "set", *path), str(k), 0, 7,
                               "switch-priority"):
                sp_tc[sp] = tc
        return sp_tc

    def _pfc(self, q: _PortQos) -> None:
        """PFC priorities: the ``pfc`` profile's, else priority 3 in a lossless RoCE mode."""
        pname, pfc = self._profile(q.qos, "pfc", q.port.name)
        if pfc is not None and "switch-priority" in pfc:
            path = ("qos", "pfc", pname, "switch-priority")
            prios = self._vids_any(pfc["switch-priority"], path, 7)
            q.at["pfcPriorities"] = self.at(*path)
        else:
            prios = [3] if q.mode in LOSSLESS_MODES else []
            q.at["pfcPriorities"] = self.at("qos", "pfc", pname) if pfc is not None else (
                self.at("qos", "roce", "mode")
                if q.roce and "mode" in self.mapping(q.qos.get("roce"), ("qos", "roce")) else q.here)
        q.out["pfcPriorities"] = prios

    def _ecn(self, q: _PortQos, sp_tc: dict[int, int]) -> None:
        """ECN marking per traffic class (the ``congestion-control`` profile; RoCE marks class 3), reported for
        the switch priorities that land in a marked class."""
        cname, cc = self._profile(q.qos, "congestion-control", q.port.name)
        ecn_tc: dict[int, tuple[float, float, int]] = {3: (150_000, 1_500_000, 100)} if q.roce else {}
        cat = q.here
        for k, v in self.mapping((cc or {}).get("traffic-class"),
                                 ("qos", "congestion-control", cname, "traffic-class")).items():
            path = ("qos", "congestion-control", cname, "traffic-class", k)
            body = self.mapping(v, path)
            for tc in int_list(self.src, ".".join(map(str, path)), (self.set_index, "set", *path), str(k), 0, 7,
                               "traffic-class"):
                if "ecn" in body and not _on(body["ecn"]):
                    ecn_tc.pop(tc, None)
                    continue
                lo_hi = [self._bytes(body, path, name, ecn_tc.get(tc, (0, 0, 100))[i])
                         for i, name in enumerate(("min-threshold", "max-threshold"))]
                prob = as_int(self.src, ".".join(map(str, path)), (self.set_index, "set", *path),
                              body.get("probability", ecn_tc.get(tc, (0, 0, 100))[2]), 1, 100, "probability")
                ecn_tc[tc] = (lo_hi[0], lo_hi[1], prob)
            cat = self.at(*path)
        marked = sorted(sp for sp in range(8) if sp_tc[sp] in ecn_tc)
        if marked:
            lo, hi, prob = ecn_tc[sp_tc[marked[0]]]
            q.out["ecn"] = {"priorities": marked, "minKB": lo / 1024, "maxKB": hi / 1024, "probability": prob}
        else:
            q.out["ecn"] = {"enabled": False}
        q.at["ecn"] = cat

    def _cnp(self, q: _PortQos, sp_tc: dict[int, int]) -> None:
        """The CNP priority: the highest switch priority in a strict queue (the ``egress-scheduler`` profile;
        RoCE makes class 6 strict)."""
        ename, sched = self._profile(q.qos, "egress-scheduler", q.port.name)
        strict_tc = {6} if q.roce else set()
        sat = q.here
        for k, v in self.mapping((sched or {}).get("traffic-class"),
                                 ("qos", "egress-scheduler", ename, "traffic-class")).items():
            path = ("qos", "egress-scheduler", ename, "traffic-class", k)
            body = self.mapping(v, path)
            for tc in int_list(self.src, ".".join(map(str, path)), (self.set_index, "set", *path), str(k), 0, 7,
                               "traffic-class"):
                if body.get("mode") == "strict":
                    strict_tc.add(tc)
                else:
                    strict_tc.discard(tc)
            sat = self.at(*path)
        strict_sp = [sp for sp in range(8) if sp_tc[sp] in strict_tc]
        q.out["cnpPriority"] = max(strict_sp) if strict_sp else None
        q.at["cnpPriority"] = sat

    def _headroom(self, q: _PortQos) -> None:
        """Lossless buffers: the priorities of the RoCE lossless traffic pool (``traffic-pool``)."""
        pools = self.mapping(q.qos.get("traffic-pool"), ("qos", "traffic-pool"))
        headroom = [3] if q.mode in LOSSLESS_MODES else []
        hat = q.here
        for pool_name, raw in pools.items():
            path = ("qos", "traffic-pool", pool_name)
            body = self.mapping(raw, path)
            if "switch-priority" not in body:
                continue
            sps = self._vids_any(body["switch-priority"], (*path, "switch-priority"), 7)
            if "lossless" in pool_name:
                headroom = sps
                hat = self.at(*path, "switch-priority")
            else:
                headroom = [sp for sp in headroom if sp not in sps]
        q.out["headroom"] = headroom
        q.at["headroom"] = hat

    def _watchdog(self, q: _PortQos) -> None:
        """The PFC watchdog (Cumulus always drops)."""
        running, wpath = self.watchdogs.get(q.port.name, (False, ()))
        q.at["pfcWatchdog"] = self.at(*wpath) if wpath else q.port.at
        if running:
            q.out["pfcWatchdog"] = {"enabled": True, "action": "drop",
                                    "detectionMs": self.wd_poll * self.wd_robustness, "restorationMs": self.wd_poll}
            q.at["pfcWatchdog.detectionMs"] = self.wd_at or q.at["pfcWatchdog"]
        else:
            q.out["pfcWatchdog"] = {"enabled": False}

    def _vids_any(self, value: Any, path: tuple[PathItem, ...], hi: int) -> list[int]:
        keys = list(value) if isinstance(value, dict) else value
        out: list[int] = []
        for k in keys if isinstance(keys, list) else [keys]:
            out += [x for x in int_list(self.src, ".".join(map(str, path)), (self.set_index, "set", *path), str(k), 0,
                                        hi, "switch-priority") if x not in out]
        return out

    def _bytes(self, body: dict[str, Any], path: tuple[PathItem, ...], name: str, default: float) -> float:
        if f"{name}-bytes" in body:
            return float(as_int(self.src, ".".join(map(str, (*path, f"{name}-bytes"))),
                                (self.set_index, "set", *path, f"{name}-bytes"), body[f"{name}-bytes"], 0, 2**31,
                                f"{name}-bytes"))
        if name not in body:
            return default
        m = _SIZE.match(str(body[name]))
        if m is None:
            self.fail((*path, name), f"{name} must be a size such as 150KB or 1500000, got {body[name]!r}")
        unit = (m["unit"] or "B").upper().rstrip("B") or "B"
        return float(m["num"]) * {"B": 1, "K": 1000, "M": 1_000_000}[unit]

